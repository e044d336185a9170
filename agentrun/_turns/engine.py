"""Engines: what makes sessions.

An :class:`Engine` makes :class:`~.session.Session` objects from
:class:`~agentrun.SessionOptions`; it is cheap to create and starts nothing by itself. A
:class:`ProgramEngine` runs one named agent program and finds it (the session's ``binary``,
the engine's own, the pinned install, then ``PATH``).

Imports the vocabulary and the wire's program finder; the session only for typing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Literal

from .._vocabulary.options import SessionOptions

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Engine", "ProgramEngine"]


class Engine(ABC):
    """Makes sessions for one kind of agent. Cheap to create; starts nothing by itself."""

    #: The engine's registry name (``"claude"``, ``"opencode"``, ``"acp"``, ...): what
    #: ``get_engine(name)`` takes, so ``get_engine(n).name == n``. Presets set it per instance.
    name: str = "engine"
    #: What a recording of the agent keeps: ``"stdout"``, its raw output lines, or
    #: ``"jsonrpc"``, both directions of its JSON-RPC traffic.
    wire_format: ClassVar[Literal["stdout", "jsonrpc"]] = "stdout"

    @abstractmethod
    def start(self, options: SessionOptions | None = None) -> Session:
        """A session run with ``options``, to be entered with ``async with``. Takes no prompt."""

    def check(self) -> None:
        """Raise :class:`EngineUnavailableError` when the agent program cannot be run."""

    async def aclose(self) -> None:
        """End what the engine's sessions share (pooled agent processes: ``pool=N``; their
        sessions end with a typed error). Nothing for an engine whose sessions share nothing."""


class ProgramEngine(Engine):
    """An engine that runs one named agent program (``program``): found from
    ``SessionOptions.binary``, the engine's own ``binary``, the pinned install, then ``PATH``."""

    #: The program's name as installed (``"claude"``, ``"codex"``, ``"opencode"``).
    program: ClassVar[str] = ""
    #: An explicit path of the program, for every session of this engine.
    binary: str | None = None

    def resolve_binary(self, options: SessionOptions | None = None) -> str:
        from .._wire.programs import resolve_binary

        explicit = options.binary if options is not None and options.binary else self.binary
        return resolve_binary(self.program, explicit=explicit, engine=self.name)

    def check(self) -> None:
        self.resolve_binary()
