"""A complete engine for the toy agent (tests/fakes/toy_agent.py), as docs/engines/writing-an-engine.md
walks through it: a command line, a translator, and the spawn-per-turn driver for the rest."""

from __future__ import annotations

import os
import sys
from typing import Any

from agentrun import Message, MessageType, ProcessMeta, Session, SessionOptions, ToolCall, Usage
from agentrun.abc import (
    Engine,
    RunningTotals,
    SpawnPerTurnDriver,
    Translator,
    TurnCommand,
    TurnContext,
)


class ToyTranslator(Translator):
    """Toy events -> messages. Pure: the engine and ``replay`` share it."""

    def __init__(self, totals: RunningTotals | None = None) -> None:
        self.totals = totals if totals is not None else RunningTotals()
        self.conversation: str | None = None
        self.total: int | None = None

    @property
    def resume_id(self) -> str | None:
        return self.conversation

    @property
    def has_outcome(self) -> bool:
        return self.total is not None

    def start(self, *, process: ProcessMeta | None = None, resume_id: str | None = None,
              permission_mode: str | None = None) -> list[Message]:  # fmt: skip
        return []

    def feed(self, event: Any) -> list[Message]:
        if not isinstance(event, dict):
            return [Message.error_message("toy: not an object", code="protocol", raw=event)]
        kind = event.get("event")
        if kind == "start":
            self.conversation = str(event.get("conversation"))
            return [Message(type=MessageType.INIT, resume_id=self.conversation)]
        if kind == "say":
            return [Message(type=MessageType.TEXT, text=str(event.get("text")))]
        if kind == "tool":
            call = str(event.get("id"))
            return [
                Message(type=MessageType.TOOL_USE,
                        tool=ToolCall(id=call, name="run", input={"command": event.get("command")})),
                Message(type=MessageType.TOOL_RESULT,
                        tool=ToolCall(id=call, name="run", output=event.get("output"))),
            ]  # fmt: skip
        if kind == "done":
            self.total = int(event.get("total_tokens", 0))
            return []
        return [Message(type=str(kind or "unknown"), data=event)]  # unknown kinds pass through

    def finish(self, *, cancelled: bool = False) -> list[Message]:
        if cancelled:
            return [Message(type=MessageType.RESULT, stop_reason="cancelled")]
        if self.total is None:
            return []  # no outcome: the base reports the exit
        figures, scope = self.totals.advance({"output_tokens": self.total})
        return [
            Message(
                type=MessageType.RESULT,
                stop_reason="end_turn",
                usage=Usage(output_tokens=int(figures["output_tokens"])),
                resume_id=self.conversation,
                data={"usage_scope": "cumulative"} if scope == "cumulative" else None,
            )
        ]


class ToyDriver(SpawnPerTurnDriver):
    engine_name = "toy"
    agent_name = "toy"

    def __init__(self, options: SessionOptions | None) -> None:
        super().__init__(options, cancel_grace=1.0)
        fresh = self.options.resume_id is None
        self.running_totals = RunningTotals({} if fresh else None)

    def _command(self, ctx: TurnContext) -> TurnCommand:
        # SessionOptions.binary: the Python that runs the agent (or a wrapper around it);
        # $TOY_AGENT: the agent's script (tests/fakes/toy_agent.py in a checkout of agentrun).
        agent = os.environ.get("TOY_AGENT", "toy_agent.py")
        argv = [self.options.binary or sys.executable, agent]
        if self.resume_id is not None:
            argv += ["--resume", self.resume_id]
        return TurnCommand(argv=(*argv, "--", ctx.prompt))

    def _new_translator(self) -> ToyTranslator:
        return ToyTranslator(self.running_totals)


class ToyEngine(Engine):
    name = "toy"

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(ToyDriver(options))
