"""The Codex ``app-server`` engine: one persistent ``codex app-server`` process per session
(or, with ``pool=N``, N sessions as threads of one process).

Built on :class:`~agentrun._bases.jsonrpc_session.JsonRpcDriver`. Start: ``initialize`` ->
``initialized`` -> ``thread/start`` (or ``thread/resume`` for ``SessionOptions.resume_id``,
``thread/fork`` with ``SessionOptions.fork``).
Each turn is ``turn/start``; it ends with the ``turn/completed`` notification. Interrupt:
``turn/interrupt``; the thread stays usable. The agent's approval requests go to the session's
permission callback like every other engine's (``hitl=True`` without one declines, and the denial
is recorded). Questions to the user (``item/tool/requestUserInput``, which Codex offers its model
in plan mode) go to the session's question callback, or are refused at once without one; MCP
elicitations are refused at once. No turn waits on a question nobody sees.

Session options: ``model``, ``cwd``, ``system_prompt`` (``baseInstructions``),
``append_system_prompt`` (``developerInstructions``), ``hitl`` / ``mode`` (approval policy and
sandbox: ``False`` -> never ask, full access; ``True`` -> ask before every untrusted command,
workspace-write;
``mode="plan"`` -> read-only, and Codex's own plan collaboration mode, in which the model may
ask the user questions), ``effort`` (per turn), ``codex.config.<key>`` (``-c`` overrides),
``extra_args``. A turn's output schema (``output=``) is ``turn/start``'s ``outputSchema``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable
from typing import Any, ClassVar, Literal

import anyio

from ..._bases.jsonrpc_session import JsonRpcDriver, RequestHandlerTable
from ..._bases.pool import ProcessPool, check_pool_size
from ..._turns.driver import CANCEL_GRACE
from ..._turns.engine import ProgramEngine
from ..._turns.session import Session
from ..._turns.turn import TurnContext
from ..._version import VERSION
from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.errors import SessionNotFoundError, UsageError
from ..._vocabulary.jsonvalues import as_dict, as_list, as_str
from ..._vocabulary.options import SessionOptions
from ..._vocabulary.permissions import PermissionRequest
from ..._vocabulary.questions import Question, QuestionRequest, nobody_answers, options_of
from ..._wire.jsonrpc import JsonRpcConnection, JsonRpcError
from ..._wire.programs import package_version
from ._app_translate import CodexAppServerTranslator

__all__ = ["CodexAppServerDriver", "CodexAppServerEngine"]

#: Notifications that say the turn runs (or already ended): it can be interrupted.
_TURN_RUNS = ("turn/started", "turn/completed")

#: Seconds a steer waits for the running turn's id (``turn/start``'s response).
STEER_WAIT = 10.0
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "xhigh"}
#: How Codex refuses to resume or fork a thread it does not know (``-32600`` both): no saved
#: thread of that id, or an id that is not a UUID.
_UNKNOWN_THREAD_WORDS = ("no rollout found", "invalid session id", "not found")


class CodexAppServerEngine(ProgramEngine):
    """``codex app-server``: one process per session, JSON-RPC over stdio.

    ``binary``: the program (else ``SessionOptions.binary``, the pinned install, ``PATH``).
    ``handshake_timeout``: seconds to open the thread. ``cancel_grace``: seconds a cancelled
    turn may take to end before the process is killed (:attr:`Session.cancel_grace`).
    ``pool``: N sessions (threads) at most share one ``app-server`` process (see
    ``docs/sessions.md``); ``None`` (default): a process per session.
    """

    name: str = "codex-app-server"
    program = "codex"
    #: What the recorder captures: both directions of the JSON-RPC traffic.
    wire_format: ClassVar[Literal["stdout", "jsonrpc"]] = "jsonrpc"

    def __init__(
        self,
        binary: str | None = None,
        *,
        handshake_timeout: float = 60.0,
        cancel_grace: float = CANCEL_GRACE,
        catalog: Catalog | None = None,
        pool: int | None = None,
    ) -> None:
        self.binary = binary
        self.handshake_timeout = handshake_timeout
        self.cancel_grace = cancel_grace
        self.catalog = catalog
        size = check_pool_size(pool, engine=self.name)
        #: The shared ``app-server`` processes (``pool=N``: N threads at most on one), or
        #: ``None``: a process per session.
        self.pool: ProcessPool | None = (
            None
            if size is None
            else ProcessPool(
                size, engine=self.name, session_key=thread_key, answered_session=answered_thread
            )
        )

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(CodexAppServerDriver(self, options))

    async def aclose(self) -> None:
        """End the pooled processes (their sessions end with a typed error); nothing without
        ``pool``. Each process also ends when its last session closes."""
        if self.pool is not None:
            await self.pool.aclose()


def thread_key(params: Any) -> str | None:
    """The thread a message's params name (``threadId``; ``thread.id`` in ``thread/started``;
    ``conversationId`` in the v1 approval requests)."""
    data = as_dict(params)
    if data is None:
        return None
    thread = as_str(data.get("threadId")) or as_str(data.get("conversationId"))
    if thread is None:
        thread = as_str((as_dict(data.get("thread")) or {}).get("id"))
    return thread


def answered_thread(method: str, result: Any) -> str | None:
    """The thread the answer to ``thread/start`` or ``thread/fork`` opened."""
    if method in ("thread/start", "thread/fork"):
        return thread_key(result)
    return None


class CodexAppServerDriver(JsonRpcDriver):
    """One ``codex app-server`` process and one Codex thread."""

    engine_name: str = "codex-app-server"
    native_output: ClassVar[bool] = True
    jsonrpc_field = False

    def __init__(self, engine: CodexAppServerEngine, options: SessionOptions | None) -> None:
        self.engine = engine
        #: Set once the running turn runs in Codex (or ended, or was refused).
        self._turn_running = anyio.Event()
        super().__init__(
            options,
            handshake_timeout=engine.handshake_timeout,
            cancel_grace=engine.cancel_grace,
            pool=engine.pool,
        )

    @property
    def app_translator(self) -> CodexAppServerTranslator:
        translator = self.translator
        assert isinstance(translator, CodexAppServerTranslator)
        return translator

    def _new_translator(self) -> CodexAppServerTranslator:
        options = self.options
        tracker = ContextTracker(
            model=options.model,
            override=options.context_window_tokens,
            catalog=self.engine.catalog,
        )
        return CodexAppServerTranslator(model=options.model, tracker=tracker, cwd=options.cwd)

    def _argv(self) -> tuple[str, ...]:
        binary = self.engine.resolve_binary(self.options)
        if self.app_translator.agent_version is None:
            # The version the init message reports (and a trajectory's agent.version).
            self.app_translator.agent_version = package_version(binary, "@openai/codex")
        argv = [binary, "app-server"]
        for key, value in sorted(self.options.options.items()):
            if key.startswith("codex.config."):
                argv += ["-c", f"{key.removeprefix('codex.config.')}={value}"]
        return (*argv, *self.options.extra_args)

    def _policy(self) -> dict[str, Any]:
        options = self.options
        if options.hitl is False:
            return {"approvalPolicy": "never", "sandbox": "danger-full-access"}
        if options.mode == "plan":
            return {"approvalPolicy": "on-request", "sandbox": "read-only"}
        if options.hitl is True:
            # Every command the model runs goes to the permission callback first.
            return {"approvalPolicy": "untrusted", "sandbox": "workspace-write"}
        return {}

    async def _handshake(self, conn: JsonRpcConnection) -> None:
        await self._open_process(conn)
        await self._open_session_on(conn)

    def pool_key(self) -> Hashable:
        # ``initialize`` asks for the experimental API only in plan mode.
        return (super().pool_key(), self.options.mode == "plan")

    async def _open_session_on(self, conn: JsonRpcConnection) -> None:
        await self._open_thread(conn)

    async def _open_process(self, conn: JsonRpcConnection) -> None:
        options = self.options
        await conn.request(
            "initialize",
            {"clientInfo": {"name": "agentrun", "title": "agentrun", "version": VERSION},
             # Plan mode (and its request_user_input tool) is part of the experimental API.
             "capabilities": {"experimentalApi": True} if options.mode == "plan" else {}},
        )  # fmt: skip
        await conn.notify("initialized")

    def _thread_params(self) -> dict[str, Any]:
        options = self.options
        params: dict[str, Any] = {**self._policy()}
        if options.cwd is not None:
            params["cwd"] = options.cwd
        if options.model is not None:
            params["model"] = options.model
        if options.system_prompt is not None:
            params["baseInstructions"] = options.system_prompt
        if options.append_system_prompt is not None:
            params["developerInstructions"] = options.append_system_prompt
        return params

    @property
    def can_handoff(self) -> bool:
        """A new thread on the same app-server."""
        return True

    async def start_fresh(self) -> None:
        self.forget_resume()
        await self._open_thread(self.connection)

    async def _open_thread(self, conn: JsonRpcConnection) -> None:
        options = self.options
        params = self._thread_params()
        if options.resume_id is None:
            await conn.request("thread/start", params)
        else:
            # A fork is a copy of the thread under a new id; the original is left as it was.
            method = "thread/fork" if options.fork else "thread/resume"
            try:
                await conn.request(method, {**params, "threadId": options.resume_id})
            except JsonRpcError as exc:
                said = exc.message.lower()
                if any(words in said for words in _UNKNOWN_THREAD_WORDS):
                    raise SessionNotFoundError(
                        f"{self.engine_name}: {method} failed: {exc.message}",
                        session_id=options.resume_id,
                        engine=self.engine_name,
                    ) from exc
                raise
        thread = self.app_translator.thread_id
        if thread is not None:
            self.resume_id: str | None = thread

    async def _send_prompt(self, ctx: TurnContext) -> None:
        translator = self.app_translator
        if ctx.compacting:
            await self.connection.request(
                "thread/compact/start", {"threadId": translator.thread_id}
            )
            return
        params: dict[str, Any] = {
            "threadId": translator.thread_id,
            "input": [{"type": "text", "text": ctx.prompt}],
        }
        if self.options.effort is not None:
            params["effort"] = _EFFORT[self.options.effort]
        if ctx.output_schema is not None:
            params["outputSchema"] = ctx.output_schema
        model = self.options.model or translator.model
        if self.options.mode == "plan" and model is not None:
            params["collaborationMode"] = {"mode": "plan", "settings": {"model": model}}
        await self.connection.request("turn/start", params)

    async def run_turn(self, ctx: TurnContext) -> None:
        self._turn_running = anyio.Event()
        await super().run_turn(ctx)

    async def _observe(self, direction: str, msg: Any) -> None:
        await super()._observe(direction, msg)
        if direction == "recv" and self._prompt_state == "sent":
            data = as_dict(msg) or {}
            if data.get("method") in _TURN_RUNS or "error" in data:
                self._turn_running.set()

    @property
    def can_steer(self) -> bool:
        """Codex adds input to a running turn (``turn/steer``)."""
        return True

    async def steer(self, ctx: TurnContext, text: str) -> None:
        translator = self.app_translator
        # The turn's id arrives with turn/start's response; a steer right after the start
        # waits for it (bounded).
        with anyio.move_on_after(STEER_WAIT):
            while translator.turn_id is None and not ctx.done:  # noqa: ASYNC110 (set by the reader)
                await anyio.sleep(0.02)
        if translator.thread_id is None or translator.turn_id is None or ctx.done:
            raise UsageError(
                f"{self.engine_name} turn {ctx.number} is not running in the agent",
                engine=self.engine_name,
            )
        await self.connection.request(
            "turn/steer",
            {
                "threadId": translator.thread_id,
                "expectedTurnId": translator.turn_id,
                "input": [{"type": "text", "text": text}],
            },
        )

    async def _interrupt(self) -> None:
        translator = self.app_translator
        if translator.thread_id is None:
            return
        # Cancelled right after turn/start: Codex answers a turn/interrupt that comes before
        # turn/started with "no active turn to interrupt" and runs the turn to its end, so the
        # interrupt waits for the turn to run (the cancel path bounds the wait).
        await self._turn_running.wait()
        if translator.turn_id is None:
            return
        with contextlib.suppress(JsonRpcError):  # an error: the turn already ended
            await self.connection.request(
                "turn/interrupt",
                {"threadId": translator.thread_id, "turnId": translator.turn_id},
                timeout=self.cancel_grace,
            )

    @property
    def can_compact(self) -> bool:
        """Codex compacts a thread on request (``thread/compact/start``)."""
        return True

    @property
    def request_handlers(self) -> RequestHandlerTable:
        return {
            "item/commandExecution/requestApproval": self._approve_v2,
            "item/fileChange/requestApproval": self._approve_v2,
            "execCommandApproval": self._approve_v1,
            "applyPatchApproval": self._approve_v1,
            "item/tool/requestUserInput": self._answer_question,
            "mcpServer/elicitation/request": self._refuse_question,
        }

    async def _ask(self, params: Any) -> bool:
        data = as_dict(params) or {}
        command = data.get("command")
        request = PermissionRequest(
            tool_name="exec_command" if command is not None else "apply_patch",
            tool_use_id=data.get("itemId") or data.get("callId"),
            input={"command": command} if command is not None else data.get("fileChanges"),
            title=data.get("reason"),
            kind="execute" if command is not None else "edit",
            engine=self.engine_name,
            raw=data,
        )
        decision, notes = await self.ask_permission(request, hitl=self.options.hitl)
        await self._route([n for n in notes if n.type != "system"])
        return decision.allow

    async def _approve_v2(self, params: Any) -> dict[str, Any]:
        return {"decision": "accept" if await self._ask(params) else "decline"}

    async def _approve_v1(self, params: Any) -> dict[str, Any]:
        return {"decision": "approved" if await self._ask(params) else "denied"}

    async def _answer_question(self, params: Any) -> Any:
        data = as_dict(params) or {}
        questions = tuple(
            Question(
                id=qid,
                text=as_str(q.get("question")) or qid,
                header=as_str(q.get("header")),
                options=options_of(q.get("options")),
                allow_other=q.get("isOther") is True,
                secret=q.get("isSecret") is True,
            )
            for q in (as_dict(item) or {} for item in as_list(data.get("questions")) or [])
            if (qid := as_str(q.get("id"))) is not None
        )
        answer, notes = await self.ask_question(
            QuestionRequest(
                questions=questions,
                tool_use_id=as_str(data.get("itemId")),
                engine=self.engine_name,
                raw=data,
            )
        )
        await self._route(notes)
        if answer.refused:
            raise JsonRpcError(-32603, f"agentrun: {nobody_answers(answer.reason)}")
        return {"answers": {k: {"answers": list(v)} for k, v in answer.answers.items()}}

    async def _refuse_question(self, params: Any) -> Any:
        raise JsonRpcError(-32603, "agentrun: no question callback is set; the question is refused")
