"""The Codex ``exec`` engine: one ``codex exec --json`` process per turn, one session to callers.

Built on :class:`~agentrun._bases.spawn_per_turn.SpawnPerTurnDriver`: the first turn runs
``codex exec``,
every later one ``codex exec resume <thread>`` with the thread id the previous process printed;
stdin is ``/dev/null`` (an open pipe makes Codex wait forever) unless the prompt goes through it.
After each process exits the engine reads the thread's rollout file (:mod:`._rollout`) for the
context window and the turn's own usage, and hands it to the translator. Cancellation: SIGINT to
the process group (Codex exits 1 and the thread stays resumable), then the usual escalation.

Exit status: 0 with ``turn.completed`` is a result; 1 after ``turn.failed`` a failed result;
anything else (a signal, 1 without ``turn.failed``) raises :class:`ProcessExitError` with the
stderr tail, or :class:`SessionNotFoundError` when Codex does not know the resumed thread (a
thread name its index does not resolve is refused before the first process starts).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

import anyio.abc
import anyio.to_thread

from ..._bases.cumulative import RunningTotals
from ..._bases.spawn_per_turn import PerTurnTranslator, SpawnPerTurnDriver, TurnCommand
from ..._turns.driver import CANCEL_GRACE
from ..._turns.engine import ProgramEngine
from ..._turns.session import Session
from ..._turns.turn import TurnContext
from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.errors import SessionNotFoundError
from ..._vocabulary.options import SessionOptions
from ..._wire.process import AgentProcess
from ..._wire.programs import package_version
from ._argv import build_exec_argv
from ._rollout import find_rollout, find_thread_named, read_rollout
from ._translate import AGENT_NAME, CodexExecTranslator

__all__ = ["CodexDriver", "CodexEngine"]

#: What ``codex exec resume`` says on stderr for a thread it does not know.
_NOT_FOUND = ("no rollout found for thread id",)


class CodexEngine(ProgramEngine):
    """``codex exec --json``, one process per turn.

    ``binary``: the program (else ``SessionOptions.binary``, the pinned install, ``PATH``).
    ``cancel_grace``: seconds a cancelled turn's process may take to exit after SIGINT before
    its process group is killed (:attr:`Session.cancel_grace`).
    ``catalog``: the model catalog for the window when no rollout says it.
    """

    name: str = "codex"
    program = "codex"

    def __init__(
        self,
        binary: str | None = None,
        *,
        version: str | None = None,
        cancel_grace: float = CANCEL_GRACE,
        catalog: Catalog | None = None,
    ) -> None:
        self.binary = binary
        self.version = version
        self.cancel_grace = cancel_grace
        self.catalog = catalog

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(CodexDriver(self, options))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class CodexDriver(SpawnPerTurnDriver):
    """A Codex thread run as one ``codex exec`` process per turn."""

    engine_name: str = "codex"
    native_output: ClassVar[bool] = True
    not_found_markers: ClassVar[tuple[str, ...]] = _NOT_FOUND
    agent_name = f"{AGENT_NAME} exec"

    def __init__(self, engine: CodexEngine, options: SessionOptions | None) -> None:
        super().__init__(options, cancel_grace=engine.cancel_grace)
        self.engine = engine
        override = self.options.context_window_tokens
        self.tracker: ContextTracker = ContextTracker(
            model=self.options.model, override=override, catalog=engine.catalog
        )
        #: The thread's running token total, kept across the turns' processes. A new thread
        #: starts from zero; a resumed one is unknown until the rollout says.
        fresh = self.options.resume_id is None and not self.options.continue_last
        self.running_totals: RunningTotals = RunningTotals({} if fresh else None)
        self._rollout_path: Path | None = None
        self.binary: str | None = None
        self.version = engine.version
        self._model: str | None = self.options.model
        self._schema_dir: str | None = None
        #: ``codex exec`` processes started in this session (each numbers its items anew).
        self._processes = 0

    @property
    def codex_home(self) -> Path:
        """Where Codex keeps its configuration and the threads' rollout files."""
        home = self.env.get("CODEX_HOME")
        if home:
            return Path(home)
        return Path(self.env.get("HOME") or os.path.expanduser("~")) / ".codex"

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self.binary = self.engine.resolve_binary(self.options)
        if self.version is None:
            self.version = package_version(self.binary, "@openai/codex")
        await self._check_thread_name()

    async def _check_thread_name(self) -> None:
        """An id that is not a UUID is a thread name to ``codex exec resume``, which starts a new
        thread without a word when no thread has that name: it is refused here unless Codex's
        own name index resolves it (a UUID it does not know, Codex refuses itself)."""
        name = self.options.resume_id
        if name is None or _is_uuid(name):
            return
        thread = await anyio.to_thread.run_sync(find_thread_named, self.codex_home, name)
        if thread is None:
            raise SessionNotFoundError(
                f"{self.agent_name} does not know {name!r} (neither a thread id nor the name "
                "of a thread)",
                session_id=name,
                engine=self.engine_name,
            )

    async def start_fresh(self) -> None:
        await super().start_fresh()
        self.running_totals = RunningTotals({})  # a new thread counts from zero

    def _command(self, ctx: TurnContext) -> TurnCommand:
        assert self.binary is not None
        schema_file = self._schema_file(ctx.output_schema, ctx.number)
        args = build_exec_argv(
            self.binary,
            self.options,
            ctx.prompt,
            thread_id=self.session_id,
            output_schema=schema_file,
        )
        return TurnCommand(argv=args.argv, stdin=args.stdin, unsupported=args.unsupported)

    def _schema_file(self, schema: dict[str, Any] | None, number: int) -> str | None:
        """The turn's output schema as a file for ``--output-schema`` (in a directory of the
        session's own, removed when the session ends)."""
        if schema is None:
            return None
        if self._schema_dir is None:
            self._schema_dir = tempfile.mkdtemp(prefix="agentrun-schema-")
        path = Path(self._schema_dir) / f"turn-{number}.json"
        path.write_text(json.dumps(schema), encoding="utf-8")
        return str(path)

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            if self._schema_dir is not None:
                shutil.rmtree(self._schema_dir, ignore_errors=True)
                self._schema_dir = None

    def _new_translator(self) -> CodexExecTranslator:
        self._processes += 1
        return CodexExecTranslator(
            process=self._processes,
            model=self._model,
            tracker=self.tracker,
            totals=self.running_totals,
            agent_version=self.version,
            cwd=self.options.cwd,
        )

    async def _before_finish(self, proc: AgentProcess, translator: PerTurnTranslator) -> None:
        assert isinstance(translator, CodexExecTranslator)
        thread_id = translator.thread_id or self.session_id
        if thread_id is None:
            return
        home = self.codex_home
        path = await anyio.to_thread.run_sync(find_rollout, home, thread_id)
        self._rollout_path = path
        rollout = None if path is None else await anyio.to_thread.run_sync(read_rollout, path)
        translator.attach_rollout(rollout)
        if rollout is not None and rollout.model:
            self._model = rollout.model

    def sidecar_files(self) -> dict[str, Path]:
        """Files beside the stdout transcript a recording keeps (``rollout.jsonl``)."""
        if self._rollout_path is None or not self._rollout_path.is_file():
            return {}
        return {"rollout.jsonl": self._rollout_path}
