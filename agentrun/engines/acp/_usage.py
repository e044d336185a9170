"""A prompt's usage in the library's conventions, from what the agent reported.

ACP's ``inputTokens`` is non-cached input (as OpenCode reports it); ``outputTokens`` excludes
thought tokens (``totalTokens`` = input + output + thought + cached), so ``output_tokens`` =
``outputTokens + thoughtTokens``. Where the prompt result has no ``usage``, the calls' usage an
agent sent in ``_meta`` (Qwen Code) or its quota totals (Gemini CLI) stand in (see
:mod:`._meta`). OpenCode reports only the last model call of the prompt.
"""

from __future__ import annotations

from typing import Any

from ..._vocabulary.messages import Usage
from ._meta import quota_usage, summed_call_usage
from ._schema import Usage as AcpUsage

__all__ = ["LAST_CALL_USAGE", "prompt_usage", "usage_of"]

#: Agents whose prompt ``usage`` covers only the last model call of the prompt.
LAST_CALL_USAGE = frozenset({"OpenCode"})


def prompt_usage(
    reported: AcpUsage | None, calls: list[dict[str, Any]], meta: Any
) -> AcpUsage | None:
    """The prompt's usage: the result's own, else its calls' summed, else the quota totals."""
    if reported is None and calls:
        reported = summed_call_usage(calls)
    if reported is None:
        reported = quota_usage(meta)
    return reported


def usage_of(reported: AcpUsage | None, cost: float | None) -> Usage | None:
    """ACP's usage (and this turn's cost) as the library's :class:`~agentrun.Usage`."""
    if reported is None:
        return None if cost is None else Usage(cost_usd=cost)
    thought = reported.thought_tokens
    output = reported.output_tokens
    if output is not None and thought is not None:
        output += thought
    return Usage(
        input_tokens=reported.input_tokens,
        output_tokens=output,
        cache_read_tokens=reported.cached_read_tokens,
        cache_write_tokens=reported.cached_write_tokens,
        thinking_tokens=thought,
        cost_usd=cost,
    )
