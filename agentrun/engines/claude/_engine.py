"""The Claude Code engine: one long-lived ``claude -p`` process per session.

The process runs in streaming input mode (``--input-format stream-json``); stdin stays open for
the whole session (the CLI exits when it closes). A background reader owns stdout: it answers
the CLI's control requests (``can_use_tool`` permission prompts), resolves our own control
requests (``interrupt``, ``get_context_usage``) and queues everything else for the running turn.

Control protocol facts (verified on the pinned 2.1.329): no ``initialize`` handshake is needed
before user messages or control requests (the CLI answers ``initialize`` if sent, with its
commands, but nothing depends on it); ``interrupt`` is answered with
``{"subtype":"success","response":{"still_queued":[]}}`` and the turn then ends with a
``result/error_during_execution`` (``terminal_reason:"aborted_streaming"``); with
``--permission-prompt-tool stdio`` each tool that needs approval arrives as a
``control_request`` ``can_use_tool`` (``tool_name``, ``input``, ``tool_use_id``,
``permission_suggestions``, ``description``) and waits for our ``control_response``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anyio
import anyio.abc

from ..._bases.long_lived import LongLivedDriver
from ..._bases.translator import decode_line
from ..._turns.driver import CANCEL_GRACE
from ..._turns.engine import ProgramEngine
from ..._turns.session import Session
from ..._turns.turn import TurnContext
from ..._vocabulary.errors import (
    AgentrunError,
    ProcessExitError,
    ProtocolError,
    SessionNotFoundError,
    SessionTerminatedError,
)
from ..._vocabulary.jsonvalues import as_dict, as_list, as_str
from ..._vocabulary.messages import Message, MessageType, ProcessMeta
from ..._vocabulary.options import SessionOptions
from ..._vocabulary.permissions import PermissionRequest
from ..._vocabulary.questions import Question, QuestionRequest, nobody_answers, options_of
from ..._wire.process import AgentProcess
from ._argv import build_argv, needs_sandbox_env
from ._translate import ClaudeTranslator

__all__ = ["ClaudeDriver", "ClaudeEngine"]

_ENGINE = "claude"
#: The event types of the control protocol, answered by the session rather than translated.
_CONTROL = ("control_request", "control_response")  # a tuple: any value may be tested
#: The tool Claude Code asks the user questions with (its answers are the tool's input).
QUESTION_TOOL = "AskUserQuestion"


class ClaudeEngine(ProgramEngine):
    """Runs the Claude Code CLI.

    ``binary`` is the ``claude`` program (default: the pinned install, then ``PATH``);
    ``argv_prefix`` replaces it with an arbitrary command (tests run fake programs this way).
    ``cancel_grace`` bounds how long a cancelled turn waits for the CLI to confirm the
    interrupt with a result before the process is killed (:attr:`Session.cancel_grace`); the
    close timeouts bound shutdown.
    """

    name: str = _ENGINE
    program = "claude"

    def __init__(
        self,
        binary: str | None = None,
        *,
        argv_prefix: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cancel_grace: float = CANCEL_GRACE,
        control_timeout: float = 30.0,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
    ) -> None:
        self.binary = binary
        self.argv_prefix: tuple[str, ...] | None = (
            tuple(argv_prefix) if argv_prefix is not None else None
        )
        self.env: dict[str, str] | None = dict(env) if env is not None else None
        self.cancel_grace = cancel_grace
        self.control_timeout = control_timeout
        self.close_stdin_timeout = close_stdin_timeout
        self.terminate_timeout = terminate_timeout
        self.max_line_bytes = max_line_bytes

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(ClaudeDriver(self, options))

    def check(self) -> None:
        if self.argv_prefix is None:
            super().check()

    def command(self, session: SessionOptions) -> list[str]:
        """The argv this engine starts for ``session``."""
        if self.argv_prefix is not None:
            return build_argv(session, self.argv_prefix)
        return build_argv(session, self.resolve_binary(session))


class ClaudeDriver(LongLivedDriver):
    """One Claude Code session (one CLI process), on the long-lived base."""

    engine_name: str = _ENGINE
    #: The user line is only written; the CLI answers on stdout.
    prompt_waits = False
    #: The CLI drops an interrupt that arrives before it began the queued user message, and
    #: runs that turn to its end: the interrupt waits for the turn's first event.
    interrupt_needs_start = True

    def __init__(self, engine: ClaudeEngine, options: SessionOptions | None) -> None:
        self.engine = engine
        super().__init__(
            options,
            cancel_grace=engine.cancel_grace,
            close_stdin_timeout=engine.close_stdin_timeout,
            terminate_timeout=engine.terminate_timeout,
            max_line_bytes=engine.max_line_bytes,
        )
        self._pending: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._ids = itertools.count(1)

    @property
    def claude_translator(self) -> ClaudeTranslator:
        translator = self.translator
        assert isinstance(translator, ClaudeTranslator)
        return translator

    # -- hooks of the long-lived base --------------------------------------------------------

    def _new_translator(self) -> ClaudeTranslator:
        s = self.options
        return ClaudeTranslator(
            model=s.model,
            context_window_tokens=s.context_window_tokens,
            resumed=s.resume_id is not None or s.continue_last,
        )

    def _extra_env(self) -> dict[str, str]:
        extra = dict(self.engine.env or {})
        extra.update(self.options.env)
        if needs_sandbox_env(self.options):
            # The CLI refuses bypass mode as root unless told it runs in a sandbox.
            extra["IS_SANDBOX"] = "1"
        return extra

    def _argv(self) -> tuple[str, ...]:
        return tuple(self.engine.command(self.options))

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        proc = await self._spawn(task_group)
        self.claude_translator.process = ProcessMeta(pid=proc.pid, binary=self.argv[0])
        task_group.start_soon(self._read_stdout, proc)

    @property
    def can_compact(self) -> bool:
        """Claude Code compacts on ``/compact`` (and reports it as ``compact_boundary``)."""
        return True

    async def _send_prompt(self, ctx: TurnContext) -> None:
        user = {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": ctx.prompt}]},
            "parent_tool_use_id": None,
            "session_id": self.claude_translator.session_id or "",
        }
        if not self._ended:
            # If it already exited, what it printed before is read and its exit reported.
            with contextlib.suppress(ProcessExitError, SessionTerminatedError):
                await self._write_json(user)

    @property
    def can_steer(self) -> bool:
        """Claude Code reads user messages from its input while a turn runs."""
        return True

    async def steer(self, ctx: TurnContext, text: str) -> None:
        user = {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
            "parent_tool_use_id": None,
            "session_id": self.claude_translator.session_id or "",
        }
        await self._write_json(user)

    async def _turn_ended(self, ctx: TurnContext) -> None:
        self._raise_session_not_found()

    async def _exit_error(self, doing: str) -> AgentrunError:
        self._raise_session_not_found()
        return await super()._exit_error(doing)

    def _raise_session_not_found(self) -> None:
        missing = self.claude_translator.session_not_found
        if missing is not None:
            raise SessionNotFoundError(
                f"claude: {missing}", session_id=self.options.resume_id, engine=_ENGINE
            )

    async def _interrupt(self) -> None:
        await self.interrupt()

    # -- the reader --------------------------------------------------------------------------

    async def _read_stdout(self, proc: AgentProcess) -> None:
        # One translator per session; it reads every event but the control traffic answered
        # here (the line decoded once, its nesting already cut).
        feed = self.claude_translator.feed_decoded
        try:
            async for item in proc.lines():
                self.tap_received(item)
                event, problem = decode_line(item, engine=_ENGINE)
                if problem is not None:
                    await self._route([problem])
                elif not isinstance(event, dict):
                    await self._route(
                        [
                            Message.error_message(
                                "claude: a stream-json line was not a JSON object",
                                code="protocol",
                                data={"value": event},
                            )
                        ]
                    )
                else:
                    ev = cast(dict[str, Any], event)
                    if ev.get("type") not in _CONTROL or not await self._control(ev):
                        messages = feed(ev)
                        self._note_resume_id()
                        await self._route(messages)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            for done, _ in self._pending.values():
                done.set()
            await self._output_ended()

    def _note_resume_id(self) -> None:
        """``resume_id``: the session id the CLI reports (not one it said it does not know)."""
        translator = self.claude_translator
        current = translator.session_id
        if current is not None and current != self.resume_id and not translator.session_not_found:
            self.resume_id: str | None = current

    async def _control(self, ev: dict[str, Any]) -> bool:
        """Handle control traffic; True when ``ev`` was consumed here."""
        kind = ev.get("type")
        if kind == "control_response":
            response = ev.get("response")
            if isinstance(response, dict):
                r = cast(dict[str, Any], response)
                request_id = r.get("request_id")
                pending = self._pending.get(request_id) if isinstance(request_id, str) else None
                if pending is not None:
                    pending[1].append(r)
                    pending[0].set()
                    return True
            return False
        if kind == "control_request":
            request_id = ev.get("request_id")
            request = ev.get("request")
            if not isinstance(request_id, str) or not isinstance(request, dict):
                return False
            req = cast(dict[str, Any], request)
            if req.get("subtype") == "can_use_tool" and self._task_group is not None:
                self._task_group.start_soon(self._answer_permission, request_id, req)
                return True
            await self._respond(
                request_id, error=f"agentrun does not handle control request {req.get('subtype')!r}"
            )
            await self._route(
                [Message(type=MessageType.SYSTEM, subtype="control_request", data=req, raw=ev)]
            )
            return True
        return False

    async def _write_json(self, obj: dict[str, Any]) -> None:
        if self._proc is None:
            raise SessionTerminatedError("claude session is not started", engine=_ENGINE)
        prompt = self._prompt_line()  # before anything sees it: a withdrawn prompt is not sent
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self.tap("send", line)
        await self._write_line(line + b"\n", prompt=prompt)

    async def _respond(
        self, request_id: str, response: dict[str, Any] | None = None, *, error: str | None = None
    ) -> None:
        body: dict[str, Any] = {"request_id": request_id}
        if error is not None:
            body.update(subtype="error", error=error)
        else:
            body.update(subtype="success", response=response or {})
        with contextlib.suppress(AgentrunError):
            await self._write_json({"type": "control_response", "response": body})

    async def _answer_question(self, request_id: str, req: dict[str, Any]) -> None:
        """``AskUserQuestion`` arrives as a permission request: the question callback answers,
        and the answers go back as the tool's ``answers`` input (keyed by question text)."""
        tool_input = as_dict(req.get("input")) or {}
        questions = tuple(
            Question(
                id=text,
                text=text,
                header=as_str(q.get("header")),
                options=options_of(q.get("options")),
                multi_select=q.get("multiSelect") is True,
            )
            for q in (as_dict(item) or {} for item in as_list(tool_input.get("questions")) or [])
            if (text := as_str(q.get("question"))) is not None
        )
        tool_use_id = req.get("tool_use_id")
        answer, notes = await self.ask_question(
            QuestionRequest(
                questions=questions,
                tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
                engine=_ENGINE,
                raw=req,
            )
        )
        await self._route(notes)
        if answer.refused:
            response: dict[str, Any] = {
                "behavior": "deny",
                "message": nobody_answers(answer.reason),
            }
        else:
            answers = {key: ", ".join(values) for key, values in answer.answers.items()}
            response = {"behavior": "allow", "updatedInput": {**tool_input, "answers": answers}}
        await self._respond(request_id, response)

    async def _answer_permission(self, request_id: str, req: dict[str, Any]) -> None:
        if req.get("tool_name") == QUESTION_TOOL:
            await self._answer_question(request_id, req)
            return
        session = self.options
        tool_input = req.get("input")
        request = PermissionRequest(
            tool_name=req.get("tool_name") if isinstance(req.get("tool_name"), str) else None,
            tool_use_id=req.get("tool_use_id") if isinstance(req.get("tool_use_id"), str) else None,
            input=tool_input,
            title=req.get("description") if isinstance(req.get("description"), str) else None,
            engine=_ENGINE,
            raw=req,
        )
        decision, notes = await self.ask_permission(request, hitl=session.hitl)
        if decision.allow:
            updated = decision.updated_input
            if updated is None:
                updated = cast(dict[str, Any], tool_input) if isinstance(tool_input, dict) else {}
            response: dict[str, Any] = {"behavior": "allow", "updatedInput": updated}
        else:
            reason = decision.reason or "denied by the permission callback"
            response = {"behavior": "deny", "message": reason}
        # The notes first: the CLI goes on only after it has our answer.
        await self._route(notes)
        await self._respond(request_id, response)

    # -- control requests ----------------------------------------------------------------------

    async def control(
        self, request: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send a control request and return the CLI's ``response`` object.

        Raises :class:`ProtocolError` when the CLI answers with an error, and
        :class:`SessionTerminatedError` when it does not answer within ``timeout``."""
        request_id = f"agentrun_{next(self._ids)}"
        done = anyio.Event()
        box: list[dict[str, Any]] = []
        self._pending[request_id] = (done, box)
        try:
            await self._write_json(
                {"type": "control_request", "request_id": request_id, "request": request}
            )
            with anyio.move_on_after(
                timeout if timeout is not None else self.engine.control_timeout
            ):
                await done.wait()
        finally:
            self._pending.pop(request_id, None)
        if not box:
            if self._ended and self._proc is not None:
                raise self._proc.exit_error("claude exited before answering a control request")
            raise SessionTerminatedError(
                f"claude did not answer the {request.get('subtype')!r} control request",
                engine=_ENGINE,
            )
        answer = box[0]
        if answer.get("subtype") != "success":
            raise ProtocolError(
                f"claude refused the {request.get('subtype')!r} control request: "
                f"{answer.get('error')}",
                engine=_ENGINE,
            )
        response = answer.get("response")
        return cast(dict[str, Any], response) if isinstance(response, dict) else {}

    async def get_context_usage(
        self, *, detail: str | None = "summary", timeout: float | None = None
    ) -> dict[str, Any]:
        """Ask the CLI how full its context is (``totalTokens``, ``maxTokens``,
        ``percentage``, ``categories``, ``apiUsage``...). ``detail="summary"`` makes no extra
        model API call; ``detail=None`` lets the CLI count tokens through the API."""
        self._check_alive()
        request: dict[str, Any] = {"subtype": "get_context_usage"}
        if detail is not None:
            request["detail"] = detail
        return await self.control(request, timeout=timeout)

    async def interrupt(self) -> None:
        """Send an ``interrupt`` control request (the running turn ends with a result)."""
        await self._write_json(
            {
                "type": "control_request",
                "request_id": f"agentrun_{next(self._ids)}",
                "request": {"subtype": "interrupt"},
            }
        )
