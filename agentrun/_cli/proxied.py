"""``agentrun run --live --upstream URL`` (or ``--proxy``): the agent reaches its model API only
through the metering credential proxy.

The agent runs in a kept home of its own (as on the embedded default), configured as offline but
pointed at the proxy, with the key of the proxy client minted for it: the real key stays in this
process. The client is the session's meter, so each turn's summary carries the proxy's figures
(``TurnSummary.metered``; a disagreement is a summary error with code ``usage_mismatch``, a
turn during which the budget refused a call ends with stop reason ``budget``); after each turn
they are shown beside the summary's usage: with ``--json`` one line ``{"type": "metered",
...}``, else one line of text.

With ``--sandbox`` the proxy listens on a Unix socket bound into the agent's sandbox instead of
a loopback port: the agent's only way out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.summary import TurnSummary
from ..offline._ledger import ZERO_USAGE
from ..offline._proxy import KEY_VARIABLES, CredentialProxy, Provider

__all__ = ["ENGINE_PROVIDERS", "Meter", "check_proxy_arguments", "open_proxy", "wants_proxy"]

#: Whose model API each engine's configuration calls.
ENGINE_PROVIDERS: dict[str, Provider] = {
    "claude": "anthropic",
    "claude-acp": "anthropic",
    "codex": "openai",
    "codex-app-server": "openai",
    "codex-acp": "openai",
    "opencode": "openai",
    "opencode-acp": "openai",
    "qwen": "openai",
    "gemini": "gemini",
}


def wants_proxy(args: argparse.Namespace) -> bool:
    """``--upstream URL`` or ``--proxy`` was given, or ``--live --sandbox``: a sandboxed live
    agent reaches its model API only through the proxy (to the provider's real API)."""
    if getattr(args, "upstream", None) is not None or bool(getattr(args, "proxy", False)):
        return True
    return bool(getattr(args, "live", False)) and bool(getattr(args, "sandbox", False))


def check_proxy_arguments(args: argparse.Namespace, engines: Sequence[str] | None = None) -> None:
    """The proxy's options make sense together, before anything starts. ``engines``: the
    engines that will run through it (default: ``--engine``'s)."""
    budget = (getattr(args, "proxy_max_tokens", None), getattr(args, "proxy_max_cost", None))
    if not wants_proxy(args):
        if any(value is not None for value in budget):
            raise ConfigurationError(
                "--proxy-max-tokens and --proxy-max-cost need --upstream URL or --proxy",
                option="proxy",
            )
        return
    if not args.live:
        raise ConfigurationError(
            "--upstream and --proxy are for --live runs (the embedded default needs no key)",
            option="upstream",
        )
    for engine in engines if engines is not None else [args.engine]:
        if engine not in ENGINE_PROVIDERS:
            raise ConfigurationError(
                f"engine {engine!r} cannot be pointed at the proxy "
                f"(supported: {', '.join(ENGINE_PROVIDERS)})",
                option="engine",
            )


@asynccontextmanager
async def open_proxy(
    args: argparse.Namespace,
    *,
    socket_path: Path | None = None,
    engines: Sequence[str] | None = None,
) -> AsyncGenerator[CredentialProxy]:
    """The proxy for this run, its upstreams reached once: each engine's provider must have a
    key in the environment and its upstream must answer, else a :class:`ConfigurationError`.
    ``socket_path``: listen on this Unix socket (for a sandbox) instead of a loopback port.
    ``engines``: the engines that will run through it (default: ``--engine``'s)."""
    proxy = CredentialProxy(
        getattr(args, "upstream", None),
        socket_path=socket_path,
        max_tokens=getattr(args, "proxy_max_tokens", None),
        max_cost_usd=getattr(args, "proxy_max_cost", None),
    )
    checked: set[Provider] = set()
    for engine in engines if engines is not None else [args.engine]:
        provider = ENGINE_PROVIDERS[engine]
        if not proxy.has_key(provider):
            names = " or ".join(KEY_VARIABLES[provider])
            raise ConfigurationError(
                f"the proxy has no {provider} key for {engine}: set {names}", option="upstream"
            )
        if provider not in checked:
            await proxy.check_upstream(provider)
            checked.add(provider)
    async with proxy:
        yield proxy


class Meter:
    """Shows each turn's metered usage (``TurnSummary.metered``, set by the session's proxy
    client) beside its summary's."""

    def __init__(self, proxy: CredentialProxy, *, as_json: bool) -> None:
        self._proxy = proxy
        self._as_json = as_json
        self._unauthorized = proxy.unauthorized

    async def turn(self, summary: TurnSummary) -> None:
        proxy = self._proxy
        metered = summary.metered
        if metered is None:  # the turn failed before it started: nothing was metered
            return
        unauthorized = proxy.unauthorized - self._unauthorized
        self._unauthorized = proxy.unauthorized
        record: dict[str, Any] = {
            "type": "metered",
            "turn": summary.turn,
            "proxy": {
                "usage": metered.usage.model_dump(exclude_none=True),
                "calls": metered.calls,
                "side_usage": (metered.side_usage or ZERO_USAGE).model_dump(exclude_none=True),
                "side_calls": metered.side_calls,
                "cost_usd": metered.cost_usd,
                "refused": metered.refused,
                "unauthorized": unauthorized,
            },
            "summary": {
                "usage": summary.usage.model_dump(exclude_none=True) if summary.usage else None
            },
            "stop_reason": summary.stop_reason,
            "agrees": metered.agrees,
            "disagreement": metered.disagreement,
            "budget_spent": metered.budget_spent,
        }
        if self._as_json:
            print(json.dumps(record), flush=True)
            return
        usage = metered.usage
        verdict = "agrees" if metered.agrees else f"DISAGREES: {metered.disagreement}"
        line = (
            f"── metered at the proxy: {metered.calls} calls, in {usage.input_tokens}, "
            f"out {usage.output_tokens}, cache read {usage.cache_read_tokens}, "
            f"cache write {usage.cache_write_tokens} ({verdict})"
        )
        if metered.refused:
            line += (
                f"; {metered.refused} calls refused, the budget is spent ({metered.budget_spent})"
            )
        print(line, file=sys.stdout, flush=True)
