"""The sandbox a session's agent runs in: :class:`Sandbox`, the value of ``SessionOptions.sandbox``.

The value says *what* the agent may touch; a backend makes it so. The default backend is
bubblewrap (Linux): the agent program and every process it starts run in fresh user, mount, PID,
network, IPC, UTS and cgroup namespaces (``agentrun._wire.sandbox``). ``backend="podman"`` runs
the same value in a podman container (see ``docs/sandbox.md``); ``"docker"`` is designed, not
built. A backend that cannot run here, or is not built, raises
:class:`~agentrun.EngineUnavailableError` when the session starts, saying why. A session never
runs unsandboxed when a sandbox was asked for.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import configuration_error

__all__ = ["Sandbox", "SandboxBackend", "host_name"]

SandboxBackend = Literal["bubblewrap", "podman", "docker"]

#: Bounds on what one sandbox value may list (each entry becomes mount arguments).
MAX_SANDBOX_PATHS = 64
MAX_SANDBOX_PORTS = 16


def _absolute_path(what: str, value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{what} {value!r} contains a NUL character")
    if not os.path.isabs(value):
        raise ValueError(f"{what} {value!r} is not an absolute path")
    return os.path.normpath(value)


_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def host_name(value: str) -> str:
    """``value`` as an allowlist entry: a DNS host name (lower case, no final dot) or an IP
    address; anything else (a URL, ``host:port``, a wildcard) is refused naming the entry."""
    host = value.lower().removesuffix(".") if isinstance(value, str) else ""  # pyright: ignore[reportUnnecessaryIsInstance]
    try:
        return str(ipaddress.ip_address(host.removeprefix("[").removesuffix("]")))
    except ValueError:
        pass
    labels = host.split(".")
    numeric = labels[-1].isdigit()  # no top-level domain is a number: a bad IP address
    if len(host) > 253 or numeric or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(
            f"sandbox allow_hosts entry {value!r} is not a host name "
            "(give a name such as 'pypi.org' or an IP address: no scheme, port, path or '*')"
        )
    return host


def _port(what: str, value: int) -> int:
    if isinstance(value, bool) or not 0 < value < 65536:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"{what} {value!r} is not a TCP port (1-65535)")
    return value


class Sandbox(BaseModel):
    """Run the agent and everything it starts in a sandbox (``SessionOptions(sandbox=...)``).

    Inside, the agent sees:

    * **files** — the workspace (``cwd``) and its agent ``home`` read-write; the agent program,
      its runtime and the system (``/usr``, ``/etc``, ...) read-only; ``read_write`` and
      ``read_only`` on request; a ``/tmp`` of its own. Nothing else of the host: the rest of the
      user's home (``~/.ssh``, ``~/.aws``, other projects) does not exist inside.
    * **network** — none: a network namespace of its own with only a loopback interface. Each
      port of ``ports`` is a host loopback port reachable at the same address inside (through a
      Unix socket and a relay inside: no other packet leaves); each of ``socket_ports`` leads
      ``127.0.0.1:<port>`` inside to a Unix socket of the host (how a proxy is reached).
      ``allow_hosts`` opens named hosts through an allowlisting ``CONNECT`` proxy.
    * **processes** — a PID namespace of its own: no process outside can be seen or signalled,
      and everything inside dies with the session.
    * **environment** — the session's ``env`` and what the engine sets, never the caller's
      (``inherit_env`` does not apply).
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    #: The per-session agent directory (its configuration, state, transcripts), read-write.
    #: ``None``: the ``HOME`` of the session's environment, which must not be the caller's own.
    home: str | None = None
    #: Extra paths the agent may write (each must exist when the session starts).
    read_write: tuple[str, ...] = Field(default=(), max_length=MAX_SANDBOX_PATHS)
    #: Extra paths the agent may read (each must exist when the session starts).
    read_only: tuple[str, ...] = Field(default=(), max_length=MAX_SANDBOX_PATHS)
    #: Host loopback ports reachable inside at ``127.0.0.1:<port>`` (the model server).
    ports: tuple[int, ...] = Field(default=(), max_length=MAX_SANDBOX_PORTS)
    #: ``127.0.0.1:<port>`` inside leads to the Unix socket at this host path (a proxy's).
    socket_ports: dict[int, str] = Field(
        default_factory=dict[int, str], max_length=MAX_SANDBOX_PORTS
    )
    #: Hosts the agent may reach beyond those (any port of each), by name, through an HTTP
    #: ``CONNECT`` proxy on the host side of the sandbox: ``HTTPS_PROXY`` / ``HTTP_PROXY`` inside
    #: point at it, and it refuses every host not listed (``403``).
    allow_hosts: tuple[str, ...] = Field(default=(), max_length=MAX_SANDBOX_PATHS)
    #: What builds the sandbox; only ``"bubblewrap"`` exists today.
    backend: SandboxBackend = "bubblewrap"

    @field_validator("home")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        return None if value is None else _absolute_path("sandbox home", value)

    @field_validator("read_write", "read_only")
    @classmethod
    def _paths(cls, value: tuple[str, ...], info: Any) -> tuple[str, ...]:
        return tuple(_absolute_path(f"sandbox {info.field_name} entry", p) for p in value)

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(dict.fromkeys(_port("sandbox port", p) for p in value))

    @field_validator("socket_ports")
    @classmethod
    def _socket_ports(cls, value: dict[int, str]) -> dict[int, str]:
        return {
            _port("sandbox socket port", port): _absolute_path("sandbox socket", path)
            for port, path in value.items()
        }

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(host_name(host) for host in value))

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise configuration_error(exc, "sandbox option") from None

    def with_ports(self, *ports: int) -> Sandbox:
        """This sandbox with ``ports`` reachable as well."""
        return self.model_copy(update={"ports": tuple(dict.fromkeys((*self.ports, *ports)))})
