"""A prompt's usage in the library's conventions, from what the agent reported.

ACP's ``inputTokens`` is non-cached input (as OpenCode reports it). Whether ``outputTokens``
holds the thought tokens differs between agents: OpenCode's excludes them (its ``totalTokens`` =
input + output + thought + cached), codex-acp's and Qwen Code's include them (``totalTokens`` =
input + output + cached). ``totalTokens`` tells which; ``output_tokens`` gets the thoughts added
only where ``outputTokens`` lacks them. Where the prompt result has no ``usage``, the calls' usage
an agent sent in ``_meta`` (Qwen Code) stands in (see :mod:`._meta`). OpenCode reports only the
last model call of the prompt: on a prompt of several calls those figures are kept apart
(``data["last_call_usage"]``, ``usage_source`` ``last_call``) from the turn's usage, which holds
the turn's cost alone. Gemini CLI's quota totals are a
prompt total (cache reads inside) and an output without thoughts: no figure of the split, so they
are ``whole_prompt_tokens`` and ``answer_tokens``, the split's fields ``None`` (and the quota
figures as they came in the result's ``data``).
"""

from __future__ import annotations

from typing import Any

from ..._vocabulary.messages import Usage, assemble, reported_figure
from ._meta import summed_call_usage
from ._schema import Usage as AcpUsage

__all__ = ["LAST_CALL_USAGE", "prompt_usage", "usage_of", "usage_of_quota"]


#: Agents whose prompt ``usage`` covers only the last model call of the prompt.
LAST_CALL_USAGE = frozenset({"OpenCode"})


def prompt_usage(reported: AcpUsage | None, calls: list[dict[str, Any]]) -> AcpUsage | None:
    """The prompt's usage: the result's own, else its calls' summed."""
    if reported is None and calls:
        reported = summed_call_usage(calls)
    return reported


def usage_of(reported: AcpUsage | None, cost: float | None) -> Usage | None:
    """ACP's usage (and this turn's cost) as the library's :class:`~agentrun.Usage`."""
    if reported is None:
        return None if cost is None else Usage(cost_usd=cost)
    # Validated figures (ints of the model, a float cost): assembled, each as Usage's rule
    # reports it.
    return assemble(
        Usage,
        {
            "input_tokens": reported_figure(reported.input_tokens),
            "output_tokens": reported_figure(_output_with_thoughts(reported)),
            "cache_read_tokens": reported_figure(reported.cached_read_tokens),
            "cache_write_tokens": reported_figure(reported.cached_write_tokens),
            "thinking_tokens": reported_figure(reported.thought_tokens),
            "cost_usd": reported_figure(cost),
        },
    )


def _output_with_thoughts(reported: AcpUsage) -> int | None:
    """``outputTokens`` with the thought tokens in it: added unless ``totalTokens`` shows they
    are already there (it counts the output once, with no separate thoughts)."""
    output, thought = reported.output_tokens, reported.thought_tokens
    if output is None or not thought:
        return output
    prompt = (reported.input_tokens, reported.cached_read_tokens, reported.cached_write_tokens)
    if reported.total_tokens == sum(p or 0 for p in prompt) + output:
        return output
    return output + thought


def usage_of_quota(quota: dict[str, int], usage: Usage | None) -> Usage:
    """Gemini CLI's ``_meta.quota.token_count`` (validated: counts of at least zero) on the
    turn's usage (its cost, if any): the prompt and the output without their split."""
    fields = dict((usage or Usage()).__dict__)
    fields["whole_prompt_tokens"] = quota.get("input_tokens")
    fields["answer_tokens"] = quota.get("output_tokens")
    return assemble(Usage, fields)
