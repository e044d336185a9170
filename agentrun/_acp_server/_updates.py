"""The library's message stream as ACP ``session/update`` notifications.

One :class:`UpdateMapper` per ACP session turns each :class:`~agentrun.Message` of a turn into
the updates an ACP client expects (plain dicts in the wire form of the stable ACP v1 schema):

========================================  =================================================
library message                           ACP update
========================================  =================================================
``text_delta`` (or ``text`` when the      ``agent_message_chunk``
engine streamed no deltas)
``thinking_delta`` / ``thinking``         ``agent_thought_chunk``
``tool_use``                              ``tool_call`` (title, kind, status, rawInput,
                                          locations)
``tool_result``                           ``tool_call_update`` (``completed`` / ``failed``,
                                          the output as content, rawOutput)
a shell tool, when the client declares    ``content`` of type ``terminal`` and
``_meta.terminal_output`` (Zed's          ``_meta.terminal_info`` / ``terminal_output`` (or
terminal convention)                      ``terminal_output_delta``) / ``terminal_exit``
Claude Code's ``TodoWrite``, Codex's      ``plan``
plan and to-do list
``context_window`` with used and size     ``usage_update`` (``used``, ``size``, ``cost`` of
                                          the session when known)
========================================  =================================================

An engine that is itself an ACP agent (``passthrough``) keeps what its agent sent: its own
updates (``message.raw``) are forwarded once each, unchanged, and only what it left out is
filled in (a tool call announced before its first update reached us, a cost the library knows
and the agent did not say).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable
from typing import Any, cast

from .._vocabulary.jsonvalues import as_dict, as_list, as_str
from .._vocabulary.messages import Message, MessageType, ToolCall
from .._vocabulary.summary import SessionTotals, TurnSummary, turn_cost

__all__ = ["TERMINAL_OUTPUT_KEYS", "TOOL_KINDS", "UpdateMapper", "tool_kind", "tool_title"]

#: ACP tool kinds.
TOOL_KINDS = frozenset(
    {
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    }
)
_STATUSES = frozenset({"pending", "in_progress", "completed", "failed"})
_PLAN_STATUSES = {
    "pending": "pending",
    "in_progress": "in_progress",
    "inprogress": "in_progress",
    "in-progress": "in_progress",
    "completed": "completed",
    "done": "completed",
}
#: Tool names of the engines (lower case) and their ACP kind.
_KIND_BY_NAME = {
    "bash": "execute",
    "shell": "execute",
    "exec_command": "execute",
    "command": "execute",
    "command_execution": "execute",
    "commandexecution": "execute",
    "local_shell": "execute",
    "read": "read",
    "view": "read",
    "read_file": "read",
    "notebookread": "read",
    "write": "edit",
    "edit": "edit",
    "multiedit": "edit",
    "apply_patch": "edit",
    "patch": "edit",
    "notebookedit": "edit",
    "file_change": "edit",
    "filechange": "edit",
    "glob": "search",
    "grep": "search",
    "ls": "search",
    "list": "search",
    "web_search": "fetch",
    "websearch": "fetch",
    "webfetch": "fetch",
    "fetch": "fetch",
    "todowrite": "think",
    "update_plan": "think",
    "task": "think",
}
#: Updates of an ACP agent behind the server that describe state the server owns (its modes
#: and config options are the server's own): not forwarded.
_SERVER_OWNED = frozenset({"current_mode_update", "config_option_update"})
#: Updates replayed history consists of; never forwarded during a turn.
_HISTORY = frozenset({"user_message_chunk"})
#: Shells whose ``-c`` / ``-lc`` script is what a command means.
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
#: The keys of the terminal output convention a client can declare in its capabilities'
#: ``_meta`` (Zed's ``terminal_output``; ``terminal_output_delta`` appends the chunks).
TERMINAL_OUTPUT_KEYS = ("terminal_output_delta", "terminal_output")


def tool_kind(tool: ToolCall) -> str:
    """The ACP kind of a tool call: the agent's own when it is one, else from its name."""
    if tool.kind in TOOL_KINDS:
        return tool.kind
    name = (tool.name or "").lower()
    if name.startswith("mcp__"):
        return "other"
    return _KIND_BY_NAME.get(name, "other")


def tool_title(tool: ToolCall) -> str:
    """A human title: the agent's own, else the command, the path or the pattern."""
    if tool.title:
        return tool.title
    fields = as_dict(tool.input) or {}
    command = fields.get("command") or fields.get("cmd")
    if isinstance(command, list):
        words = [w for w in as_list(cast(object, command)) if isinstance(w, str)]
        # ["/bin/bash", "-lc", "echo hi"]: the script says more than the shell.
        command = words[-1] if len(words) >= 3 and words[-2] in ("-c", "-lc") else " ".join(words)
    elif isinstance(command, str):
        command = _script_of(_words(command)) or command
    for value in (command, fields.get("file_path"), fields.get("filePath"), fields.get("path"),
                  fields.get("pattern"), fields.get("query"), fields.get("url")):  # fmt: skip
        if isinstance(value, str) and value.strip():
            return value if len(value) <= 200 else value[:197] + "..."
    return tool.name or "tool"


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # unbalanced quotes: not a shell line we can read
        return []


def _script_of(words: list[str]) -> str | None:
    """A command line ``/bin/bash -lc 'echo hi'`` → ``echo hi`` (Codex gives its commands so)."""
    if len(words) == 3 and words[1] in ("-c", "-lc") and os.path.basename(words[0]) in _SHELLS:
        return words[2]
    return None


def _locations(tool: ToolCall) -> list[dict[str, Any]]:
    fields = as_dict(tool.input) or {}
    for key in ("file_path", "filePath", "path", "notebook_path"):
        value = fields.get(key)
        if isinstance(value, str) and value.startswith("/"):
            return [{"path": value}]
    return []


def _text(value: Any) -> str | None:
    """A tool's output as text (a content list's text parts joined; JSON otherwise)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    items = as_list(value)
    if items:
        parts: list[str] = []
        for item in items:
            entry = as_dict(item) or {}
            inner = as_dict(entry.get("content")) or entry
            text = as_str(inner.get("text"))
            if text is not None:
                parts.append(text)
        if parts:
            return "\n".join(parts)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _exit_code(message: Message) -> int | None:
    """A shell tool's exit code, as its engine's translator gave it (``data.exit_code``), else
    ``None``."""
    code = (message.data or {}).get("exit_code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _text_content(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


#: How many tool ids a session remembers per kind of memory (announced, sent by earlier turns,
#: plan tools): the oldest is forgotten past it, so a session of any length holds a few MB at
#: most. Only an agent that repeats an id tens of thousands of tool calls later is affected
#: (its repeat goes out as a new call).
REMEMBERED_TOOL_IDS = 65_536


class RecentIds:
    """A set of the most recent ``limit`` ids added, the oldest forgotten first."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = REMEMBERED_TOOL_IDS if limit is None else limit
        self._ids: dict[str, None] = {}

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, tool_id: str) -> None:
        self._ids.pop(tool_id, None)
        self._ids[tool_id] = None
        if len(self._ids) > self._limit:
            del self._ids[next(iter(self._ids))]

    def update(self, tool_ids: Iterable[str]) -> None:
        for tool_id in tool_ids:
            self.add(tool_id)


class UpdateMapper:
    """Library messages of one ACP session to its ``session/update`` payloads."""

    def __init__(
        self,
        *,
        passthrough: bool = False,
        cost_usd: float | None = 0.0,
        terminal_output: str | None = None,
        cwd: str | None = None,
    ) -> None:
        #: The engine is an ACP agent: forward its own updates, fill in the rest.
        self.passthrough = passthrough
        #: The terminal output key the client declared (one of :data:`TERMINAL_OUTPUT_KEYS`):
        #: shell tools are shown as terminals; ``None``: their output is text content.
        self.terminal_output = terminal_output
        #: The session's working directory (a terminal's ``cwd``).
        self.cwd = cwd
        #: The session's cost so far (US dollars), ``None`` once some turn's cost is unknown.
        self.cost_usd: float | None = cost_usd
        #: Where the cost came from (the weakest source of its parts).
        self.cost_source: str | None = None
        #: The last context reading: (used, size).
        self.context: tuple[int, int] | None = None
        self._announced = RecentIds()
        #: This turn's tool ids (the engine's) and the ``toolCallId`` each goes out as; the
        #: ids earlier turns sent (see :meth:`tool_id`).
        self._turn_tool_ids: dict[str, str] = {}
        self._earlier_tool_ids = RecentIds()
        self._turns = 0
        self._plan_tools = RecentIds()
        self._streamed = {"text": False, "thinking": False}
        self._forwarded: list[Any] = []
        self._last_usage: tuple[int, int, float | None] | None = None
        self._agent_cost: float | None = None
        self._commands_sent: list[str] = []
        #: A turn's cost was added (or the session's was given): the total means something.
        self._costed = cost_usd is not None and cost_usd > 0

    def go_on_from(self, totals: SessionTotals) -> None:
        """The session goes on with the journal of an earlier process: its cost is the one
        those turns left (``None`` when one of them is not known), its context their last
        reading."""
        if totals.turns == 0:
            return
        self.cost_usd = totals.cost_usd
        self._costed = True
        usage = totals.usage
        if usage is not None:
            self.cost_source = usage.cost_source
            used, size = usage.context_used_tokens, usage.context_size_tokens
            if used is not None and size:
                self.context = (used, size)

    # -- turns ------------------------------------------------------------------------------

    def begin_turn(self) -> None:
        self._turns += 1
        self._earlier_tool_ids.update(self._turn_tool_ids.values())
        self._turn_tool_ids = {}
        self._streamed = {"text": False, "thinking": False}
        self._forwarded = []
        self._last_usage = None  # every turn reports its own readings

    def end_turn(self, summary: TurnSummary | None) -> list[dict[str, Any]]:
        """The updates that close a turn: a ``usage_update`` with the session's cost once the
        turn's cost is known (unless the last one already said exactly that)."""
        if summary is not None:
            # The session's cost as Session.totals counts it: every turn's, side calls
            # included, unknown from the first turn whose cost is not known.
            cost = turn_cost(summary.usage, summary.side_usage)
            if self._agent_cost is not None:
                self.cost_usd = self._agent_cost
                self.cost_source = "reported"
            elif cost is None:
                self.cost_usd = None
            elif self.cost_usd is not None:
                self.cost_usd = round(self.cost_usd + cost, 12)
                usage = summary.usage
                self.cost_source = _weakest(
                    self.cost_source, usage.cost_source if usage is not None else None
                )
            self._costed = True
        if self.context is None:
            return []
        update = self._usage_update(*self.context)
        key = (self.context[0], self.context[1], self._known_cost())
        if key == self._last_usage:
            return []
        self._last_usage = key
        return [update]

    # -- messages ---------------------------------------------------------------------------

    def updates(self, message: Message) -> list[dict[str, Any]]:
        """The updates one message of a turn becomes (often none)."""
        if message.replayed:
            return []
        raw = as_dict(message.raw) if self.passthrough else None
        kind = as_str(raw.get("sessionUpdate")) if raw is not None else None
        if kind is not None and raw is not None:
            return self._forward(message, raw, kind)
        return self._map(message)

    def _forward(self, message: Message, raw: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        """An update of the ACP agent behind the server: once, as it came; what it lacks is
        filled in."""
        if any(seen is raw for seen in self._forwarded):
            return []
        self._forwarded.append(raw)
        if kind in _SERVER_OWNED or kind in _HISTORY:
            return []
        if kind == "usage_update":
            return self._forward_usage(message, raw)
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            self._streamed["text" if kind == "agent_message_chunk" else "thinking"] = True
            return [dict(raw)]
        if kind in ("tool_call", "tool_call_update"):
            tool_id = as_str(raw.get("toolCallId"))
            if tool_id is None:
                return []
            out: list[dict[str, Any]] = []
            update = dict(raw)
            if tool_id in self._announced:
                # An agent that repeats its tool_call (same id): one call for the client.
                update["sessionUpdate"] = "tool_call_update"
            elif kind == "tool_call_update" and message.tool is not None:
                out.extend(self._tool_call(message.tool))
            else:
                self._announced.add(tool_id)
            out.append(update)
            return out
        return [dict(raw)]

    def _forward_usage(self, message: Message, raw: dict[str, Any]) -> list[dict[str, Any]]:
        update = dict(raw)
        cost = as_dict(raw.get("cost"))
        amount = cost.get("amount") if cost is not None else None
        if isinstance(amount, (int, float)) and not isinstance(amount, bool):
            if as_str(cost.get("currency") if cost else None) == "USD":
                self._agent_cost = float(amount)
        elif self._known_cost() is not None and self._agent_cost is None:
            update["cost"] = {"amount": self.cost_usd, "currency": "USD"}
        reading = message.context
        used, size = raw.get("used"), raw.get("size")
        if isinstance(used, int) and isinstance(size, int):
            self.context = (used, size)
        elif reading is not None and reading.used_tokens is not None and reading.size_tokens:
            self.context = (reading.used_tokens, reading.size_tokens)
        if self.context is not None:
            cost_amount = as_dict(update.get("cost"))
            self._last_usage = (
                self.context[0],
                self.context[1],
                cost_amount.get("amount") if cost_amount is not None else None,
            )
        return [update]

    def tool_id(self, tool_id: str) -> str:
        """The ``toolCallId`` an engine's tool id goes out as in this turn: the id itself,
        unless an earlier turn of the session sent it (an engine that numbers its tools per
        process, reopened by the server with new options, starts again at its first number;
        the client would take the call for an update of the earlier one): then the id and the
        turn's number. An ACP agent's own ids pass unchanged."""
        if self.passthrough:
            return tool_id
        sent = self._turn_tool_ids.get(tool_id)
        if sent is None:
            sent = f"{tool_id}~{self._turns}" if tool_id in self._earlier_tool_ids else tool_id
            self._turn_tool_ids[tool_id] = sent
        return sent

    def _sent_as(self, tool: ToolCall) -> ToolCall:
        if tool.id is None:
            return tool
        sent = self.tool_id(tool.id)
        return tool if sent == tool.id else tool.model_copy(update={"id": sent})

    def _map(self, message: Message) -> list[dict[str, Any]]:
        kind = message.type
        if kind is MessageType.TEXT_DELTA or kind is MessageType.THINKING_DELTA:
            if message.parent_tool_use_id is not None or not message.text:
                return []
            block = "text" if kind is MessageType.TEXT_DELTA else "thinking"
            self._streamed[block] = True
            return [self._chunk(block, message.text, message.message_id)]
        if kind is MessageType.TEXT or kind is MessageType.THINKING:
            block = "text" if kind is MessageType.TEXT else "thinking"
            if self._streamed[block]:
                self._streamed[block] = False  # this block's deltas were sent
                return []
            if message.parent_tool_use_id is not None or not message.text:
                return []
            return [self._chunk(block, message.text, message.message_id)]
        if kind is MessageType.TOOL_USE and message.tool is not None:
            return self._tool_use(self._sent_as(message.tool))
        if kind is MessageType.TOOL_RESULT and message.tool is not None:
            return self._tool_result(self._sent_as(message.tool), _exit_code(message))
        if kind is MessageType.CONTEXT_WINDOW:
            reading = message.context
            if reading is None or reading.used_tokens is None or not reading.size_tokens:
                return []  # the RFD: no usage_update without a size
            self.context = (reading.used_tokens, reading.size_tokens)
            key = (reading.used_tokens, reading.size_tokens, self._known_cost())
            if key == self._last_usage:
                return []  # the same reading again (an engine may repeat it before a result)
            self._last_usage = key
            return [self._usage_update(reading.used_tokens, reading.size_tokens)]
        if kind is MessageType.INIT:
            return self._commands(message)
        if kind is MessageType.SYSTEM and message.subtype == "plan":
            return self._plan((message.data or {}).get("entries"), "content", "status")
        if str(kind) == "codex.turn/plan/updated":
            return self._plan((message.data or {}).get("plan"), "step", "status")
        return []

    def _commands(self, message: Message) -> list[dict[str, Any]]:
        """The agent's slash commands (Claude Code's ``init`` lists them), once per change."""
        raw = as_dict(message.raw) or {}
        names = [n for n in as_list(raw.get("slash_commands")) if isinstance(n, str) and n]
        if not names or names == self._commands_sent:
            return []
        self._commands_sent = names
        commands = [{"name": name, "description": f"/{name}"} for name in names]
        return [{"sessionUpdate": "available_commands_update", "availableCommands": commands}]

    # -- pieces -----------------------------------------------------------------------------

    @staticmethod
    def _chunk(block: str, text: str, message_id: str | None = None) -> dict[str, Any]:
        update = "agent_message_chunk" if block == "text" else "agent_thought_chunk"
        chunk: dict[str, Any] = {"sessionUpdate": update, "content": {"type": "text", "text": text}}
        if message_id:
            chunk["messageId"] = message_id  # the chunks of one message share it
        return chunk

    def _terminal(self, tool: ToolCall) -> str | None:
        """The terminal id of a shell tool, when the client shows terminals (else ``None``)."""
        if self.terminal_output is None or tool.id is None or tool_kind(tool) != "execute":
            return None
        return tool.id

    def _terminal_info(self, terminal_id: str) -> dict[str, Any]:
        info: dict[str, Any] = {"terminal_id": terminal_id}
        if self.cwd is not None:
            info["cwd"] = self.cwd
        return info

    def _tool_call(self, tool: ToolCall, status: str = "in_progress") -> list[dict[str, Any]]:
        if tool.id is None:
            return []
        self._announced.add(tool.id)
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call",
            "toolCallId": tool.id,
            "title": tool_title(tool),
            "kind": tool_kind(tool),
            "status": tool.status if tool.status in _STATUSES else status,
        }
        if tool.input is not None:
            update["rawInput"] = tool.input
        locations = _locations(tool)
        if locations:
            update["locations"] = locations
        terminal_id = self._terminal(tool)
        if terminal_id is not None:
            update["content"] = [{"type": "terminal", "terminalId": terminal_id}]
            update["_meta"] = {"terminal_info": self._terminal_info(terminal_id)}
        return [update]

    def announce(self, tool: ToolCall) -> list[dict[str, Any]]:
        """A tool call the client must know before it is asked about it (``pending``)."""
        tool = self._sent_as(tool)
        if tool.id is None or tool.id in self._announced:
            return []
        return self._tool_call(tool, "pending")

    def _tool_use(self, tool: ToolCall) -> list[dict[str, Any]]:
        if (tool.name or "").lower() == "todowrite" and tool.id is not None:
            # Claude Code's to-do list is the agent's plan.
            self._plan_tools.add(tool.id)
            todos = (as_dict(tool.input) or {}).get("todos")
            return self._plan(todos, "content", "status")
        if tool.id is not None and tool.id in self._announced:
            update: dict[str, Any] = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": tool.id,
                "title": tool_title(tool),
                "kind": tool_kind(tool),
                "status": "in_progress",
            }
            if tool.input is not None:
                update["rawInput"] = tool.input
            return [update]
        return self._tool_call(tool)

    def _tool_result(self, tool: ToolCall, exit_code: int | None = None) -> list[dict[str, Any]]:
        if tool.id is None or tool.id in self._plan_tools:
            return []
        out: list[dict[str, Any]] = []
        if tool.id not in self._announced:
            out.extend(self._tool_call(tool))
        text = _text(tool.output)
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool.id,
            "status": "failed" if tool.is_error else "completed",
        }
        terminal_id = self._terminal(tool)
        if terminal_id is not None and self.terminal_output is not None:
            # The client shows the output in the call's terminal (Zed's convention); the exit
            # code is the agent's, or null when it did not say.
            meta: dict[str, Any] = {"terminal_info": self._terminal_info(terminal_id)}
            if text:
                meta[self.terminal_output] = {"terminal_id": terminal_id, "data": text}
            meta["terminal_exit"] = {"terminal_id": terminal_id, "exit_code": exit_code,
                                     "signal": None}  # fmt: skip
            update["content"] = [{"type": "terminal", "terminalId": terminal_id}]
            update["_meta"] = meta
        elif text:
            if tool_kind(tool) == "execute" and "```" not in text:
                text = f"```console\n{text.rstrip()}\n```"  # terminal output, as a terminal shows
            update["content"] = [_text_content(text)]
        if tool.output is not None:
            update["rawOutput"] = tool.output
        out.append(update)
        return out

    @staticmethod
    def _plan(items: Any, text_key: str, status_key: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for item in as_list(items) or []:
            entry = as_dict(item) or {}
            content = as_str(entry.get(text_key)) or as_str(entry.get("content"))
            if not content:
                continue
            status = _PLAN_STATUSES.get((as_str(entry.get(status_key)) or "").lower(), "pending")
            entries.append({"content": content, "priority": "medium", "status": status})
        if not entries:
            return []
        return [{"sessionUpdate": "plan", "entries": entries}]

    def _known_cost(self) -> float | None:
        """The session's cost, once a turn's cost is known (none is invented before)."""
        return self.cost_usd if self._costed else None

    def _usage_update(self, used: int, size: int) -> dict[str, Any]:
        update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": used, "size": size}
        if self._known_cost() is not None:
            update["cost"] = {"amount": self.cost_usd, "currency": "USD"}
            if self.cost_source is not None and self.cost_source != "reported":
                update["_meta"] = {"agentrun": {"costSource": self.cost_source}}
        return update


_RANK = {"estimated": 0, "derived": 1, "reported": 2}


def _weakest(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return b if a is None else a
    return a if _RANK.get(a, 0) <= _RANK.get(b, 0) else b
