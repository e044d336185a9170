"""Starting an agent program: :class:`ProcessSpec` (how to start it and how patiently to stop
it) and :func:`spawn` (its own process group, the tree token in its environment, spawn failures as
typed errors)."""

from __future__ import annotations

import errno
import math
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.abc

from .._vocabulary.env import validate_env
from .._vocabulary.errors import AgentrunError, ConfigurationError, EngineUnavailableError
from .._vocabulary.sandbox import Sandbox
from .framing import DEFAULT_MAX_LINE_BYTES
from .process_tree import PROCESS_TREE_ENV

__all__ = ["MAX_CLOSE_TIMEOUT", "ProcessSpec", "spawn"]

#: Upper bound for each of the close timeouts of a :class:`ProcessSpec`.
MAX_CLOSE_TIMEOUT = 300.0

# -- the spec -----------------------------------------------------------------------------


def _check_argv(argv: object, engine: str | None) -> tuple[str, ...]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (tuple, list)):
        raise ConfigurationError("argv must be a sequence of strings", option="argv", engine=engine)
    items: list[str] = []
    for i, arg in enumerate(argv):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        if not isinstance(arg, str) or "\0" in arg:
            raise ConfigurationError(
                f"argv[{i}] must be a string without NUL characters", option="argv", engine=engine
            )
        items.append(arg)
    if not items:
        raise ConfigurationError("argv is empty", option="argv", engine=engine)
    if not items[0]:
        raise ConfigurationError("argv[0] is empty", option="argv", engine=engine)
    return tuple(items)


@dataclass(frozen=True)
class ProcessSpec:
    """How to start one agent program and how patiently to stop it."""

    #: Program and arguments; ``argv[0]`` is looked up on the ``PATH`` of ``env``.
    argv: tuple[str, ...]
    cwd: str | None = None
    #: The complete environment (see :func:`merge_env`); ``None`` inherits ``os.environ``.
    env: Mapping[str, str] | None = None
    #: ``"devnull"`` unless the engine streams input: some agents wait forever on an open
    #: stdin pipe.
    stdin: Literal["devnull", "pipe"] = "devnull"
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = 64 * 1024
    #: Called with each decoded stderr line; exceptions are logged and ignored.
    on_stderr: Callable[[str], None] | None = None
    #: Engine name, used in error messages.
    engine: str | None = None
    #: After stdin is closed, how long the program may take to exit on its own.
    close_stdin_timeout: float = 5.0
    #: After SIGTERM to the group, how long before SIGKILL.
    terminate_timeout: float = 5.0
    #: After SIGKILL, how long to wait for the exit status.
    kill_timeout: float = 5.0
    #: After the program exits, how long to wait for the rest of its stderr.
    stderr_settle_timeout: float = 1.0
    #: After the program exits on its own, how long what it left running in its process group
    #: may live. Such leftovers can hold stdout open, so its reader would never see the end.
    orphan_grace: float = 1.0
    #: Run the program in this sandbox (see :mod:`agentrun._wire.sandbox`); ``env`` is then
    #: all it gets (``None``: nothing but a ``PATH``), never ``os.environ``.
    sandbox: Sandbox | None = None

    def __post_init__(self) -> None:
        items = _check_argv(self.argv, self.engine)
        object.__setattr__(self, "argv", items)
        if self.stdin not in ("devnull", "pipe"):
            raise ConfigurationError(
                f"stdin must be 'devnull' or 'pipe', not {self.stdin!r}", option="stdin"
            )
        if self.max_line_bytes < 1:
            raise ConfigurationError("max_line_bytes must be at least 1", option="max_line_bytes")
        if self.stderr_tail_bytes < 0:
            raise ConfigurationError(
                "stderr_tail_bytes must not be negative", option="stderr_tail_bytes"
            )
        for name in (
            "close_stdin_timeout",
            "terminate_timeout",
            "kill_timeout",
            "stderr_settle_timeout",
            "orphan_grace",
        ):
            value: object = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= MAX_CLOSE_TIMEOUT
            ):
                raise ConfigurationError(
                    f"{name} must be a number of seconds between 0 and {MAX_CLOSE_TIMEOUT:g}",
                    option=name,
                )

    @property
    def program(self) -> str:
        return self.argv[0]


def _spawn_error(spec: ProcessSpec, exc: OSError) -> AgentrunError:
    program = spec.program
    if spec.cwd is not None and exc.filename == spec.cwd and not os.path.isdir(spec.cwd):
        return ConfigurationError(
            f"working directory {spec.cwd!r} does not exist or is not a directory",
            option="cwd",
            engine=spec.engine,
        )
    if isinstance(exc, FileNotFoundError):
        reason = "was not found" if os.sep in program else "was not found on PATH"
    elif isinstance(exc, PermissionError):
        reason = "is not executable (permission denied)"
    elif exc.errno == errno.ENOEXEC:
        reason = "is not an executable program (exec format error)"
    else:
        reason = f"could not be started ({exc.strerror or exc})"
    return EngineUnavailableError(
        f"agent program {program!r} {reason}", engine=spec.engine, searched=(program,)
    )


async def spawn(spec: ProcessSpec, tree_token: str) -> anyio.abc.Process:
    env = dict(os.environ) if spec.env is None else validate_env(spec.env)
    env[PROCESS_TREE_ENV] = tree_token
    stdin = subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL
    proc: anyio.abc.Process | None = None
    try:
        # Shielded so that a cancellation cannot strike after the fork and lose the handle.
        with anyio.CancelScope(shield=True):
            proc = await anyio.open_process(
                list(spec.argv),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        raise _spawn_error(spec, exc) from exc
    assert proc is not None
    return proc
