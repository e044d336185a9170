"""The OpenCode ``run`` engine: one ``opencode run --format json`` process per turn.

Spawn-per-turn is invisible to callers: :meth:`OpenCodeEngine.start` starts nothing, every turn
(the first included) spawns ``opencode run`` with the prompt on stdin (see :mod:`._argv` for why
not on the command line), and the session id the events carry (``sessionID``) is passed back as
``--session`` to the next turn's process, so all turns continue one OpenCode session.

End of a turn: the process exits. Exit 0, or exit 1 after an ``error`` event, ends the turn with
the synthesized ``result`` (a failed one after an error); exit 1 with ``Session not found`` on
stderr raises :class:`SessionNotFoundError`; any other exit (a signal, another code) raises
:class:`ProcessExitError` with the stderr tail. A process that exits 0 without finishing a step
leaves the turn without a result (the core raises :class:`NoResultError`).

Cancellation (caller, timeout): SIGINT to the process group, a bounded wait, then the subprocess
manager's SIGTERM/SIGKILL escalation. The session id is kept, so the next turn continues it.
"""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio
import anyio.abc

from ..._binaries import resolve_binary
from ..._context import Catalog, ContextTracker
from ..._errors import ProcessExitError, SessionNotFoundError, SessionTerminatedError
from ..._messages import Message, MessageType, ProcessMeta
from ..._options import SessionOptions
from ..._session import Engine, Session, TurnContext
from ..._subprocess import AgentProcess, ProcessSpec, merge_env, open_process
from ..._translate import decode_line
from ._argv import TurnArgs, build_argv
from ._translate import AGENT_NAME, OpenCodeTranslator

__all__ = ["OpenCodeEngine", "OpenCodeSession"]

#: What ``opencode run`` prints on stderr (exit 1) for an unknown ``--session`` id.
SESSION_NOT_FOUND = "Session not found"


class OpenCodeEngine(Engine):
    """``opencode run --format json``, one process per turn.

    ``binary``: the program (else ``SessionOptions.binary``, the pinned install, ``PATH``).
    ``context_window``: the model's context size when known from the OpenCode configuration
    (``limit.context``); ``SessionOptions.context_window_tokens`` wins over it. Without either, the
    ``limit.context`` of the model in the file named by ``OPENCODE_CONFIG`` is used when readable,
    else the model catalog. ``version``: the OpenCode version for ``init`` messages (else read
    from the npm package next to the binary when possible). ``interrupt_grace``: seconds to wait
    after SIGINT before the process group is terminated.
    """

    name: ClassVar[str] = "opencode"

    def __init__(
        self,
        binary: str | None = None,
        context_window: int | None = None,
        *,
        version: str | None = None,
        interrupt_grace: float = 3.0,
        catalog: Catalog | None = None,
    ) -> None:
        if context_window is not None and context_window <= 0:
            raise ValueError("context_window must be a positive number of tokens")
        self.binary = binary
        self.context_window = context_window
        self.version = version
        self.interrupt_grace = interrupt_grace
        self.catalog = catalog

    def start(self, options: SessionOptions | None = None) -> OpenCodeSession:
        return OpenCodeSession(self, options)

    def resolve_binary(self, session: SessionOptions | None = None) -> str:
        explicit = session.binary if session is not None and session.binary else self.binary
        return resolve_binary("opencode", explicit=explicit, engine=self.name)

    def check(self) -> None:
        self.resolve_binary()


def _package_version(binary: str) -> str | None:
    """The version of the npm package that ships ``binary`` (``.../<pkg>/bin/opencode``)."""
    try:
        manifest = Path(binary).resolve().parent.parent / "package.json"
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    info = cast("dict[str, Any]", data)
    name = info.get("name")
    version = info.get("version")
    if isinstance(name, str) and name.startswith("opencode") and isinstance(version, str):
        return version
    return None


def _configured(env: dict[str, str], model: str | None) -> tuple[str | None, int | None]:
    """The model and its ``limit.context`` from ``OPENCODE_CONFIG`` and
    ``OPENCODE_CONFIG_CONTENT`` (the latter wins)."""
    configs: list[dict[str, Any]] = []
    path = env.get("OPENCODE_CONFIG")
    texts: list[str] = []
    if path:
        with contextlib.suppress(OSError):
            texts.append(Path(path).read_text(encoding="utf-8"))
    content = env.get("OPENCODE_CONFIG_CONTENT")
    if content:
        texts.append(content)
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            configs.append(cast("dict[str, Any]", value))
    limit: int | None = None
    for config in configs:
        if model is None and isinstance(config.get("model"), str):
            model = cast(str, config["model"])
    if model is None or "/" not in model:
        return model, None
    provider_id, model_id = model.split("/", 1)
    for config in configs:
        try:
            entry = config["provider"][provider_id]["models"][model_id]["limit"]["context"]
        except (KeyError, TypeError):
            continue
        if isinstance(entry, int) and not isinstance(entry, bool) and entry > 0:
            limit = entry
    return model, limit


class OpenCodeSession(Session):
    """An OpenCode session run as one ``opencode run`` process per turn."""

    engine_name = "opencode"

    def __init__(self, engine: OpenCodeEngine, options: SessionOptions | None) -> None:
        super().__init__(options)
        self.engine = engine
        session = self.options
        self.env = merge_env(session.env, inherit=session.inherit_env)
        model, configured = _configured(self.env, session.model)
        #: The model the turns use (``--model``, else the configuration's default).
        self.model = model
        override = session.context_window_tokens or engine.context_window
        self.tracker = ContextTracker(model=model, override=override, catalog=engine.catalog)
        if override is None and configured is not None:
            # OpenCode's own configured limit for the model (what its ACP mode reports).
            self.tracker.report_size(configured)
        self.binary: str | None = None
        self.version = engine.version
        #: The session id captured from this process's own turns (``None`` until one ran).
        self.session_id: str | None = None
        #: The ``opencode run`` process of the running turn, if any.
        self.current: AgentProcess | None = None
        #: The argv, pid, exit status and stderr tail of the latest turn's process.
        self.argv: tuple[str, ...] = ()
        self.pid: int | None = None
        self.returncode: int | None = None
        self._stderr_tail = ""

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        # Fail at start, not at the first turn, when the program is missing.
        self.binary = self.engine.resolve_binary(self.options)
        if self.version is None:
            self.version = _package_version(self.binary)

    def turn_args(self) -> TurnArgs:
        """The command line the next turn will use."""
        assert self.binary is not None
        return build_argv(
            self.binary,
            self.options,
            resume_id=self.resume_id,
            first_turn=self.session_id is None,
        )

    def stderr_tail(self) -> str:
        """The stderr tail of the latest turn's process."""
        if self.current is not None:
            return self.current.stderr_tail()
        return self._stderr_tail

    def _env_for_turn(self) -> dict[str, str]:
        permission = self.options.option("opencode", "permission")
        if permission is None:
            return self.env
        # OpenCode's permission rules (JSON, e.g. {"bash": "ask"}) for this session.
        return {**self.env, "OPENCODE_PERMISSION": permission}

    def _spec(self, args: TurnArgs) -> ProcessSpec:
        return ProcessSpec(
            argv=args.argv,
            cwd=self.options.cwd,
            env=self._env_for_turn(),
            stdin="pipe",
            engine=self.engine_name,
            on_stderr=self._tap_stderr,
            close_stdin_timeout=1.0,
            terminate_timeout=3.0,
            kill_timeout=5.0,
        )

    async def _run_turn(self, ctx: TurnContext) -> None:
        args = self.turn_args()
        resume_id = self.resume_id
        forking = "--fork" in args.argv
        translator = OpenCodeTranslator(
            model=self.model,
            tracker=self.tracker,
            agent_version=self.version,
            cwd=self.options.cwd,
        )
        prompt = ctx.prompt.encode("utf-8")
        code = -1
        async with open_process(self._spec(args)) as proc:
            self.current = proc
            self.argv = args.argv
            self.pid = proc.pid
            self.returncode = None
            try:
                meta = ProcessMeta(pid=proc.pid, binary=args.argv[0])
                hitl = self.options.hitl
                permission = None if hitl is None else ("ask" if hitl else "auto")
                for message in translator.start(
                    process=meta,
                    resume_id=None if forking else resume_id,
                    permission_mode=permission,
                ):
                    await ctx.emit(message)
                if args.unsupported:
                    await ctx.emit(_unsupported_message(args))
                code = await self._stream(ctx, proc, translator, prompt)
            except anyio.get_cancelled_exc_class():
                ctx.begin_cancel()
                with anyio.CancelScope(shield=True):
                    await self._interrupt(proc)
                    for message in translator.finish(cancelled=True):
                        await ctx.emit(message)
                raise
            finally:
                self.returncode = proc.returncode
                self._stderr_tail = proc.stderr_tail()
                self.current = None
            await self._conclude(ctx, proc, translator, code, resume_id)

    async def _stream(
        self,
        ctx: TurnContext,
        proc: AgentProcess,
        translator: OpenCodeTranslator,
        prompt: bytes,
    ) -> int:
        code = -1
        async with anyio.create_task_group() as tg:
            # Written in the background: a prompt larger than the pipe buffer must not block
            # reading stdout, and a program that died early must not hang the write.
            tg.start_soon(self._send_prompt, proc, prompt)
            async for item in proc.lines():
                self._tap_received(item)
                event, problem = decode_line(item, engine=self.engine_name)
                messages = [problem] if problem is not None else translator.feed(event)
                self._capture(translator)
                for message in messages:
                    await ctx.emit(message)
            code = await proc.wait()
            tg.cancel_scope.cancel()
        return code

    async def _send_prompt(self, proc: AgentProcess, prompt: bytes) -> None:
        self._tap("send", prompt)
        try:
            await proc.write(prompt)
        except (SessionTerminatedError, ProcessExitError):
            # The program exited first; its exit status explains why.
            return
        finally:
            await proc.close_stdin()

    def _capture(self, translator: OpenCodeTranslator) -> None:
        session_id = translator.session_id
        if session_id is not None and session_id != self.session_id:
            self.session_id = session_id
            self.resume_id = session_id

    async def _interrupt(self, proc: AgentProcess) -> None:
        """SIGINT the group and wait a little; the manager escalates when the block exits."""
        if proc.returncode is not None:
            return
        proc.send_signal_group(signal.SIGINT)
        with anyio.move_on_after(self.engine.interrupt_grace):
            await proc.wait()

    async def _conclude(
        self,
        ctx: TurnContext,
        proc: AgentProcess,
        translator: OpenCodeTranslator,
        code: int,
        resume_id: str | None,
    ) -> None:
        if code == 0 or (code == 1 and translator.errors):
            for message in translator.finish():
                await ctx.emit(message)
            return
        if code == 1 and SESSION_NOT_FOUND in proc.stderr_tail():
            raise SessionNotFoundError(
                f"opencode does not know session {resume_id!r}",
                session_id=resume_id,
                engine=self.engine_name,
            )
        raise proc.exit_error(f"opencode exited during turn {ctx.number}")


def _unsupported_message(args: TurnArgs) -> Message:
    options = [{"option": name, "reason": reason} for name, reason in args.unsupported]
    names = ", ".join(name for name, _ in args.unsupported)
    return Message(
        type=MessageType.SYSTEM,
        subtype="unsupported_option",
        text=f"{AGENT_NAME} run ignores: {names}",
        data={"options": options},
    )
