"""Human-readable rendering of a message stream: streamed text, tools, a context gauge."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO, cast

from .._vocabulary.messages import ContextWindow, Message, MessageType, ToolCall
from .._vocabulary.summary import TurnSummary

__all__ = ["Renderer", "gauge", "seconds_text", "tool_call_line", "tool_result_line"]

#: Fill thresholds (fractions) at which the gauge changes colour, as the ACP usage RFD suggests.
WARN, HIGH, CRITICAL = 0.75, 0.90, 0.95

_RESET = "\x1b[0m"
_COLOURS = {
    "dim": "\x1b[2m",
    "bold": "\x1b[1m",
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "orange": "\x1b[38;5;208m",
    "cyan": "\x1b[36m",
}


#: Control characters an agent's text may carry (ESC sequences, bells, carriage returns...)
#: shown escaped, so a transcript can never drive the terminal. Newlines and tabs stay.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)}


def clean(text: str) -> str:
    """``text`` safe to print: control characters escaped (``\\x1b``)."""
    return text.translate(_CONTROLS)


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = clean(text.strip())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _content_text(value: Any) -> str | None:
    """The readable text of a tool's output: a string as it is, ACP content blocks (``text``,
    ``content``, ``diff``, ``terminal``) by what they hold; ``None`` for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        block = cast("dict[str, Any]", value)
        kind = block.get("type")
        if isinstance(block.get("text"), str):
            return cast(str, block["text"])
        if kind == "content" and "content" in block:
            return _content_text(block["content"])
        if kind == "diff":
            return f"(diff of {block.get('path') or 'a file'})"
        if kind == "terminal":
            return f"(terminal {block.get('terminalId') or ''})".replace(" )", ")")
        return None
    if isinstance(value, list):
        parts = [_content_text(item) for item in cast("list[Any]", value)]
        if all(p is not None for p in parts):
            return "\n".join(p for p in parts if p)
    return None


def tool_call_line(tool: ToolCall) -> str:
    """``Bash {"command": "ls"}``; an agent that sends no input (ACP agents often send only a
    title) shows its title and kind instead of ``null``."""
    name = tool.name or tool.title or "tool"
    if tool.input is not None and tool.input != {}:
        return f"{clean(name)} {_short(tool.input)}"
    extra = [tool.title] if tool.title and tool.title != name else []
    if tool.kind:
        extra.append(f"({tool.kind})")
    return clean(" ".join([name, *extra]))


def tool_result_line(tool: ToolCall) -> str:
    """The head of a tool's output, or what is known when it has none to show."""
    output = tool.output
    text = _content_text(output) if output is not None else None
    if text is None and output is not None:
        text = json.dumps(output, ensure_ascii=False)
    if text is not None and text.strip():
        return _short(text)
    state = "failed" if tool.is_error else (tool.status or "done")
    return clean(f"{state} (no output)")


def seconds_text(seconds: float) -> str:
    """A duration as a person reads it: ``1s``, ``2.5s``, ``42s``, ``3m 05s``."""
    if seconds < 10:
        return f"{round(seconds, 1):g}s"
    if seconds < 60:
        return f"{round(seconds):d}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s"


def gauge(reading: ContextWindow, *, width: int = 20, colour: bool = False) -> str:
    """``[████░░░░] 18,450 / 200,000 tokens (9.2%)`` — or what is known of it."""
    used, size, fraction = reading.used_tokens, reading.size_tokens, reading.fraction
    used_text = f"{used:,}" if used is not None else "?"
    if size is None:
        return f"{used_text} tokens used (window size unknown)"
    if fraction is None:
        return f"window of {size:,} tokens (fill unknown)"
    filled = min(width, round(fraction * width))
    bar = "█" * filled + "░" * (width - filled)
    text = f"[{bar}] {used_text} / {size:,} tokens ({fraction:.1%})"
    if not colour:
        return text
    name = (
        "red"
        if fraction >= CRITICAL
        else "orange"
        if fraction >= HIGH
        else "yellow"
        if fraction >= WARN
        else "green"
    )
    return f"{_COLOURS[name]}{text}{_RESET}"


def colour_allowed(stream: TextIO) -> bool:
    """Colour only on a terminal that can show it: not with ``NO_COLOR`` set, not on
    ``TERM=dumb``, not into a pipe or a file."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


#: How a failed turn is explained when the agent gave no error of its own, by stop reason.
_STOP_REASONS = {
    "cancelled": "the turn was cancelled",
    "budget": "the budget was spent",
    "max_tokens": "the model reached its output limit",
    "max_turns": "the agent reached its turn limit",
    "refusal": "the model refused",
}


def failure_reason(summary: TurnSummary) -> str:
    """Why a failed turn failed, in one line: the agent's fatal error (else its last error),
    else what its stop reason means; never empty."""
    if summary.stop_reason == "cancelled":
        return _STOP_REASONS["cancelled"]
    if summary.errors:
        fatal = [e for e in summary.errors if e.fatal]
        error = (fatal or list(summary.errors))[-1]
        code = f" [{error.code}]" if error.code else ""
        return f"{error.message}{code}".replace("\n", " ")
    if summary.stop_reason:
        return _STOP_REASONS.get(summary.stop_reason, f"the agent stopped ({summary.stop_reason})")
    if summary.has_result:
        return "the agent reported a failure without giving a reason"
    return "the turn ended without a result from the agent"


class Renderer:
    """Writes a turn's messages for a person as they arrive."""

    def __init__(self, out: TextIO | None = None, *, colour: bool | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.colour: bool = colour if colour is not None else colour_allowed(self.out)
        self._streaming = False
        self._streamed_ids: set[str | None] = set()
        self._last_gauge: tuple[int | None, int | None] | None = None

    def style(self, name: str, text: str) -> str:
        return f"{_COLOURS[name]}{text}{_RESET}" if self.colour else text

    def _line(self, text: str) -> None:
        if self._streaming:
            self.out.write("\n")
            self._streaming = False
        self.out.write(text + "\n")
        self.out.flush()

    def message(self, message: Message) -> None:
        kind = message.type
        if kind is MessageType.TEXT_DELTA and message.text:
            self.out.write(clean(message.text))
            self.out.flush()
            self._streaming = True
            self._streamed_ids.add(message.message_id)
        elif kind is MessageType.TEXT and message.text:
            if message.parent_tool_use_id is not None:
                return
            if self._streaming or message.message_id in self._streamed_ids:
                # Already shown fragment by fragment: just end the line.
                self._streamed_ids.discard(message.message_id)
                if self._streaming:
                    self.out.write("\n")
                    self._streaming = False
                return
            self._line(clean(message.text))
        elif kind is MessageType.THINKING and message.text:
            self._line(self.style("dim", f"(thinking) {_short(message.text, 300)}"))
        elif kind is MessageType.TOOL_USE and message.tool is not None:
            self._line(self.style("cyan", f"→ {tool_call_line(message.tool)}"))
        elif kind is MessageType.TOOL_RESULT and message.tool is not None:
            tool = message.tool
            mark = self.style("red", "✗") if tool.is_error else "←"
            self._line(f"{mark} {tool_result_line(tool)}")
        elif kind is MessageType.CONTEXT_WINDOW and message.context is not None:
            shown = (message.context.used_tokens, message.context.size_tokens)
            if shown != self._last_gauge:
                self._last_gauge = shown
                self._line(
                    self.style("dim", "context ") + gauge(message.context, colour=self.colour)
                )
        elif kind is MessageType.CONTEXT_THRESHOLD and message.text:
            self._line(self.style("yellow", "▲ " + clean(message.text)))
        elif kind is MessageType.RETRY:
            self._line(self.style("yellow", "↻ " + clean(_retry_line(message))))
        elif kind is MessageType.COMPACTION and message.text:
            self._line(self.style("yellow", "▼ " + clean(message.text)))
        elif kind is MessageType.STALL and message.text:
            self._line(self.style("yellow", "… " + clean(_stall_line(message))))
        elif kind is MessageType.QUESTION and message.text:
            data = message.data or {}
            if data.get("refused"):
                outcome = "refused"
            else:
                answers = cast("dict[str, list[str]]", data.get("answers") or {})
                outcome = "; ".join(", ".join(v) for v in answers.values()) or "no answer"
            self._line(self.style("cyan", f"? {clean(message.text)} → {clean(outcome)}"))
        elif kind is MessageType.INIT and message.init is not None:
            init = message.init
            parts = [p for p in (init.agent_name, init.agent_version) if p]
            if init.model:
                parts.append(f"model {init.model}")
            if message.resume_id:
                parts.append(f"session {message.resume_id}")
            if parts:
                self._line(self.style("dim", "● " + clean(" · ".join(parts))))
        elif kind is MessageType.ERROR and message.error is not None:
            code = f" [{message.error.code}]" if message.error.code else ""
            self._line(self.style("red", clean(f"error{code}: {message.error.message}")))
        elif kind is MessageType.SYSTEM and message.subtype == "wind_down" and message.text:
            self._line(self.style("yellow", "⏳ " + clean(message.text)))
        elif kind is MessageType.SYSTEM and message.denials:
            for denial in message.denials:
                self._line(
                    self.style("yellow", clean(f"denied {denial.tool_name}: {denial.reason or ''}"))
                )

    def summary(self, summary: TurnSummary) -> None:
        usage = summary.usage
        status = self.style("green", "ok") if summary.ok else self.style("red", "failed")
        lines = [f"── turn {summary.turn} {status} · stop: {summary.stop_reason or '-'}"]
        if not summary.ok:
            lines.append("   reason: " + self.style("red", clean(failure_reason(summary))))
        if usage is not None:
            figures = [
                f"in {usage.input_tokens}" if usage.input_tokens is not None else None,
                f"out {usage.output_tokens}" if usage.output_tokens is not None else None,
                f"cache read {usage.cache_read_tokens}"
                if usage.cache_read_tokens is not None
                else None,
                f"cache write {usage.cache_write_tokens}"
                if usage.cache_write_tokens is not None
                else None,
                f"thinking {usage.thinking_tokens}" if usage.thinking_tokens else None,
                f"prompt {usage.whole_prompt_tokens} (cache not told apart)"
                if usage.whole_prompt_tokens is not None
                else None,
                f"answer {usage.answer_tokens} (thinking not counted)"
                if usage.answer_tokens is not None
                else None,
                f"cost ${usage.cost_usd:.6f}" if usage.cost_usd is not None else None,
            ]
            if usage.usage_source == "last_call":
                figures.append("tokens of the last model call only")
            if usage.cost_source not in (None, "reported"):
                figures.append(f"cost {usage.cost_source}")
            last = summary.last_call_usage
            if last is not None:
                # Reported beside the turn's cost, not as the turn's tokens.
                call = [
                    f"{name} {value}"
                    for name, value in (
                        ("in", last.input_tokens),
                        ("out", last.output_tokens),
                        ("cache read", last.cache_read_tokens),
                        ("cache write", last.cache_write_tokens),
                    )
                    if value is not None
                ]
                figures.append(
                    "the turn's tokens not reported (its last model call: " + ", ".join(call) + ")"
                )
            lines.append("   usage: " + ", ".join(f for f in figures if f))
        if summary.context is not None:
            c = summary.context
            reading = ContextWindow(
                used_tokens=c.used,
                size_tokens=c.size,
                used_source=c.used_source,
                size_source=c.size_source,
            )
            source = f" (used: {c.used_source or '?'}, size: {c.size_source or '?'})"
            lines.append("   context: " + gauge(reading, colour=self.colour) + source)
        if summary.tool_calls:
            lines.append(f"   tools: {len(summary.tool_calls)} call(s)")
        if summary.denials:
            lines.append(f"   denials: {len(summary.denials)}")
        wound = summary.wound_down
        if wound is not None:
            how = "steered" if wound.steered else "not steered"
            end = "ended by itself" if wound.ended_by_itself else "did not end by itself"
            lines.append(f"   wound down: at {wound.at_s:.1f}s, {how}, {end}")
        if summary.resume_id:
            lines.append(f"   resume id: {summary.resume_id}")
        if summary.duration_s is not None:
            lines.append(f"   wall time: {summary.duration_s:.2f}s")
        for line in lines:
            self._line(self.style("bold", line) if line is lines[0] else line)


def _stall_line(message: Message) -> str:
    """The stall's text with its quiet time rounded for reading (``1s``, not ``1.001s``)."""
    text = message.text or ""
    quiet = (message.data or {}).get("quiet_s")
    if isinstance(quiet, (int, float)) and not isinstance(quiet, bool):
        text = text.replace(f"for {quiet:g}s", f"for {seconds_text(float(quiet))}", 1)
    return text


def _retry_line(message: Message) -> str:
    data = message.data or {}
    error = message.error
    parts = ["retry"]
    if "attempt" in data:
        most = data.get("max_attempts")
        parts.append(f"{data['attempt']}/{most}" if most is not None else str(data["attempt"]))
    if error is not None and error.status is not None:
        parts.append(f"after HTTP {error.status}")
    elif error is not None and error.code:
        parts.append(f"after {error.code}")
    if "delay_s" in data:
        parts.append(f"in {data['delay_s']:g}s")
    return " ".join(parts)
