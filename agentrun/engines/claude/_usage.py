"""Usage, cost and context-window figures of Claude Code's events, as ``Usage`` takes them.

A count or a cost is checked to be what ``Usage`` takes (a negative one is not reported), so the
usages are assembled, not validated again.

Usage and cost of a turn come from the per-result fields: ``model_usage_since_last_result``
(tokens and ``costUSD`` of this result only), else ``result.usage`` and the difference of the
session-cumulative ``total_cost_usd``. ``modelUsage`` and ``total_cost_usd`` accumulate over the
whole session, across ``--resume`` too, and are never used as a turn's figures.
"""

from __future__ import annotations

from typing import Any

from ..._vocabulary.jsonvalues import as_dict as _obj
from ..._vocabulary.jsonvalues import as_float as _float
from ..._vocabulary.jsonvalues import as_int as _int
from ..._vocabulary.messages import Usage, UsageSource, assemble, reported_figure
from ..._vocabulary.prices import account_usage, estimate_cost

__all__ = [
    "call_usage",
    "compaction_apart",
    "cost_figure",
    "model_usage_sum",
    "reported_window",
    "token_count",
    "turn_usage",
]

#: A decoded JSON object.
Json = dict[str, Any]


def token_count(value: object) -> int | None:
    """A token count as ``Usage`` takes it: an integer (:func:`as_int`'s) that its rule reports
    (usages are assembled, not validated)."""
    return reported_figure(_int(value))


def cost_figure(value: object) -> float | None:
    """A cost as ``Usage`` takes it: a number that its rule reports."""
    return reported_figure(_float(value))


def call_usage(usage: Json | None, extra: Json) -> Usage:
    """Usage of one API call (Anthropic shape) in our convention (already the same), with the
    library's ``extra`` fields."""
    if usage is None:
        return assemble(Usage, extra)
    details = _obj(usage.get("output_tokens_details"))
    return assemble(
        Usage,
        {
            "input_tokens": token_count(usage.get("input_tokens")),
            "output_tokens": token_count(usage.get("output_tokens")),
            "cache_read_tokens": token_count(usage.get("cache_read_input_tokens")),
            "cache_write_tokens": token_count(usage.get("cache_creation_input_tokens")),
            "thinking_tokens": None
            if details is None
            else token_count(details.get("thinking_tokens")),
            **extra,
        },
    )


def model_usage_sum(per_model: Json, extra: Json) -> Usage:
    """The per-model entries summed by ``Usage.__add__`` (an entry that is not an object adds
    nothing; none at all: an empty usage), with the library's ``extra`` fields."""
    total: Usage | None = None
    for entry in per_model.values():
        if not isinstance(entry, dict):
            continue
        e: Json = entry  # pyright: ignore[reportUnknownVariableType]
        call = assemble(
            Usage,
            {
                "input_tokens": token_count(e.get("inputTokens")),
                "output_tokens": token_count(e.get("outputTokens")),
                "cache_read_tokens": token_count(e.get("cacheReadInputTokens")),
                "cache_write_tokens": token_count(e.get("cacheCreationInputTokens")),
                "thinking_tokens": token_count(e.get("thinkingTokens")),
                "cost_usd": cost_figure(e.get("costUSD")),
            },
        )
        total = call if total is None else total + call
    if total is None:
        return assemble(Usage, extra)
    summed = vars(total)
    return assemble(
        Usage,
        {
            **{name: summed[name] for name in MODEL_USAGE_SUMMED},
            "context_used_tokens": None,
            "context_size_tokens": None,
            "usage_source": None,
            "cost_source": None,
            **extra,
        },
    )


#: The figures a result's per-model usage reports (and its usage marks set).
MODEL_USAGE_SUMMED = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
    "cost_usd",
)


def reported_window(per_model: Json, model: str | None) -> int | None:
    """The first window size reported: the session's model's entry first, then each."""
    if model:
        preferred = _obj(per_model.get(model))
        if preferred is not None:
            size = _int(preferred.get("contextWindow"))
            if size:
                return size
    for entry in per_model.values():
        e = _obj(entry)
        if e is not None:
            size = _int(e.get("contextWindow"))
            if size:
                return size
    return None


def turn_usage(
    ev: Json,
    since_last: Json | None,
    context: Json,
    *,
    model: str | None,
    total_cost: float | None,
    previous_total: float | None,
    resumed: bool,
) -> Usage:
    """A result's usage of the turn (with ``context``, its context fill) and its cost:
    ``total_cost`` is the result's session total, ``previous_total`` the previous result's."""
    if since_last:
        # Per-result tokens and cost. On an interrupt ``usage`` is all zeros while this
        # counts the interrupted call, which was paid for.
        return account_usage(model_usage_sum(since_last, context), model=model)
    # The cost: the session's total less the previous result's (the first result's total
    # is the turn's own, unless the session was resumed: then it is the thread's).
    cost: float | None = None
    cost_source: UsageSource = "reported"
    if total_cost is not None:
        if previous_total is not None:
            cost = round(max(total_cost - previous_total, 0.0), 12)
            cost_source = "derived"
        elif not resumed:
            cost = total_cost
    usage = call_usage(_obj(ev.get("usage")), {**context, "cost_usd": cost})
    return account_usage(usage, model=model, cost=cost_source)


#: The token figures a summarising call is told apart by.
_SPLIT = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def compaction_apart(
    turn: Usage, main_loop: Json | None, *, model: str | None
) -> tuple[Usage, Usage | None]:
    """A turn in which the CLI compacted by itself: ``turn`` (from
    ``model_usage_since_last_result``) counts every call since the last result, the summarising
    call included; the result's ``usage`` (``main_loop``) only the main loop's calls. The
    difference is the summarising call's: returned apart (its tokens ``derived``, its cost at
    the catalog's prices) and taken off the turn's tokens and cost. A cost that cannot be told
    apart (no catalog price for the model) is not known for either. ``(turn, None)`` when the
    main loop's figures are missing or nothing differs."""
    loop = call_usage(main_loop, {})
    if loop.input_tokens is None or loop.output_tokens is None:
        return turn, None
    side = [max(0, (getattr(turn, name) or 0) - (getattr(loop, name) or 0)) for name in _SPLIT]
    if not any(side):
        return turn, None
    fresh, read, write, output = side
    summarising = Usage(
        input_tokens=fresh, cache_read_tokens=read, cache_write_tokens=write, output_tokens=output
    )
    side_cost = estimate_cost(summarising, model)
    summarising = summarising.model_copy(
        update={
            "cost_usd": side_cost,
            "usage_source": "derived",
            "cost_source": "unavailable" if side_cost is None else "estimated",
        }
    )
    cost = turn.cost_usd
    if cost is not None:
        cost = None if side_cost is None else round(max(0.0, cost - side_cost), 12)
    own = turn.model_copy(
        update={
            **{name: getattr(loop, name) for name in _SPLIT},
            "thinking_tokens": loop.thinking_tokens,
            "cost_usd": cost,
            # The agent's cost less the summarising call's priced: derived.
            "cost_source": "derived" if cost is not None else "unavailable",
        }
    )
    return own, summarising
