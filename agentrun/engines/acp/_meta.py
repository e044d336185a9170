"""What the agents the presets run put in ACP's extension field, ``_meta``, read in one place.

* Qwen Code: one model call's usage on an empty text chunk (``_meta.usage``, with Gemini's
  conventions: ``inputTokens`` counts cached input, ``outputTokens`` excludes thought tokens).
* claude-agent-acp: ``_meta.claudeCode`` -- a notice of the adapter on a text chunk (``kind``
  ``informational``; not the model's answer) and the tool's own name on tool calls
  (``toolName``, better than the human title).
* codex-acp: a terminal's output streamed in ``_meta.terminal_output_delta`` and its exit code in
  ``_meta.terminal_exit``, while the tool call's content only points at the terminal.
* claude-agent-acp: beside the main loop's tokens (``_meta.quota.token_count``), the prompt
  response's ``_meta.quota.model_usage`` rows count every model call the turn's result covered
  (session titles, prompt suggestions, subagents, compaction): the difference is the side calls'.
* codex-acp: a failed turn (the model server answered 500, say) as ``_meta.codex.threadStatus``
  ``{"type": "systemError"}`` on a ``session_info_update``, then Codex's words as answer text and
  the prompt's end as ``end_turn``.
* Gemini CLI: the prompt's token totals in the prompt response's ``_meta.quota.token_count``
  (the prompt with its cache reads, the output without its thoughts).
"""

from __future__ import annotations

from typing import Any, cast

from ..._vocabulary.jsonvalues import as_dict as _dict
from ._schema import Usage as AcpUsage

__all__ = [
    "adapter_notice",
    "call_usage",
    "quota_usage",
    "side_usage",
    "summed_call_usage",
    "system_error",
    "terminal_exit_code",
    "terminal_output",
    "tool_name",
]


def call_usage(meta: dict[str, Any]) -> dict[str, Any] | None:
    """One model call's usage on a chunk (Qwen Code)."""
    return _dict(meta.get("usage"))


def adapter_notice(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A notice of the adapter (a billing or mode warning) on a text chunk, with its ``level``
    (claude-agent-acp)."""
    notice = _dict(meta.get("claudeCode"))
    if notice is not None and notice.get("kind") == "informational":
        return notice
    return None


def tool_name(meta: dict[str, Any]) -> str | None:
    """The tool's own name on a tool call (claude-agent-acp)."""
    claude = _dict(meta.get("claudeCode"))
    if claude is not None and isinstance(claude.get("toolName"), str):
        return claude["toolName"]
    return None


def terminal_output(meta: dict[str, Any]) -> str | None:
    """Output a terminal printed, streamed on a tool call update (codex-acp)."""
    delta = _dict(meta.get("terminal_output_delta"))
    if delta is not None and isinstance(delta.get("data"), str):
        return delta["data"]
    return None


def terminal_exit_code(meta: dict[str, Any]) -> int | None:
    """The exit code of a tool call's terminal (codex-acp)."""
    exited = _dict(meta.get("terminal_exit"))
    if exited is not None and isinstance(exited.get("exit_code"), int):
        return exited["exit_code"]
    return None


def system_error(data: dict[str, Any]) -> bool:
    """Whether a ``session_info_update`` says the thread hit a system error (codex-acp)."""
    codex = _dict((_dict(data.get("_meta")) or {}).get("codex")) or {}
    status = _dict(codex.get("threadStatus")) or {}
    return status.get("type") == "systemError"


def summed_call_usage(calls: list[dict[str, Any]]) -> AcpUsage:
    """A prompt's usage from its calls' ``_meta.usage`` (Gemini's convention, as Qwen Code sends
    it: ``inputTokens`` counts cached input, ``outputTokens`` excludes thought tokens)."""

    def total(key: str) -> int | None:
        values = [v for c in calls if isinstance(v := c.get(key), int) and v >= 0]
        return sum(values) if values else None

    prompt, cached = total("inputTokens"), total("cachedReadTokens")
    uncached = None if prompt is None else max(0, prompt - (cached or 0))
    return AcpUsage(
        input_tokens=uncached,
        output_tokens=total("outputTokens"),
        thought_tokens=total("thoughtTokens"),
        cached_read_tokens=cached,
        total_tokens=total("totalTokens"),
    )


def quota_usage(meta: Any) -> dict[str, int] | None:
    """Gemini CLI's prompt totals in the response's ``_meta.quota.token_count``: its
    ``input_tokens`` is the whole prompt (cache reads inside), its ``output_tokens`` the answer
    without the thoughts -- neither a figure of the library's convention."""
    quota = _dict((_dict(meta) or {}).get("quota"))
    count = _dict((quota or {}).get("token_count"))
    if count is None:
        return None
    numbers = {k: v for k, v in count.items() if isinstance(v, int) and v >= 0}
    if "input_tokens" not in numbers and "output_tokens" not in numbers:
        return None
    return numbers


#: The counters of a ``_meta.quota`` token count (claude-agent-acp's and codex-acp's spellings).
_COUNTERS = {
    "input_tokens": ("inputTokens",),
    "cache_read_tokens": ("cachedInputTokens", "cachedReadTokens"),
    "cache_write_tokens": ("cachedWriteTokens", "cacheWriteInputTokens"),
    "output_tokens": ("outputTokens",),
}


def _counts(count: dict[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for field, keys in _COUNTERS.items():
        for key in keys:
            value = (count or {}).get(key)
            if isinstance(value, int) and value >= 0:
                out[field] = value
                break
    return out


def side_usage(meta: Any, main_model: str | None) -> list[tuple[str | None, dict[str, int]]]:
    """The side calls' tokens per model: the ``model_usage`` rows less the main loop's
    ``token_count`` (taken from the row of ``main_model``, else the first row that holds it).
    Empty when the rows hold nothing beyond the main loop."""
    quota = _dict((_dict(meta) or {}).get("quota"))
    rows_raw = quota.get("model_usage") if quota is not None else None
    if quota is None or not isinstance(rows_raw, list):
        return []  # (no rows: the main loop's counts are not needed)
    main = _counts(_dict(quota.get("token_count")))
    if not main:
        return []
    rows: list[tuple[str | None, dict[str, int]]] = []
    for row in cast("list[Any]", rows_raw):
        entry = _dict(row) or {}
        model = entry.get("model")
        rows.append(
            (model if isinstance(model, str) else None, _counts(_dict(entry.get("token_count"))))
        )

    def holds(counts: dict[str, int]) -> bool:
        return all(counts.get(k, 0) >= v for k, v in main.items())

    owner = next((i for i, (m, c) in enumerate(rows) if m == main_model and holds(c)), None)
    if owner is None:
        owner = next((i for i, (_, c) in enumerate(rows) if holds(c)), None)
    if owner is None:
        return []
    side: list[tuple[str | None, dict[str, int]]] = []
    for i, (model, counts) in enumerate(rows):
        if i == owner:
            counts = {k: v - main.get(k, 0) for k, v in counts.items()}
        if any(counts.values()):
            side.append((model, counts))
    return side
