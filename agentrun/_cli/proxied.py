"""``agentrun run --live --upstream URL`` (or ``--proxy``): the agent reaches its model API only
through the metering credential proxy.

The agent runs in a kept home of its own (as on the embedded default), configured as offline but
pointed at the proxy, with the key the proxy minted: the real key stays in this process. After each
turn the proxy's ledger for that turn is set beside the summary's usage: with ``--json`` one
line ``{"type": "metered", ...}``, else one line of text; a disagreement is added to the
summary's errors (code ``usage_mismatch``), and a turn during which the budget refused a call
ends with stop reason ``budget``.

With ``--sandbox`` the proxy listens on a Unix socket bound into the agent's sandbox instead of
a loopback port: the agent's only way out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import ErrorInfo
from .._vocabulary.summary import TurnSummary
from ..offline._proxy import KEY_VARIABLES, CredentialProxy, Provider, usage_disagreement

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


def check_proxy_arguments(args: argparse.Namespace) -> None:
    """The proxy's options make sense together, before anything starts."""
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
    if args.engine not in ENGINE_PROVIDERS:
        raise ConfigurationError(
            f"engine {args.engine!r} cannot be pointed at the proxy "
            f"(supported: {', '.join(ENGINE_PROVIDERS)})",
            option="engine",
        )


@asynccontextmanager
async def open_proxy(
    args: argparse.Namespace, *, socket_path: Path | None = None
) -> AsyncGenerator[CredentialProxy]:
    """The proxy for this run, its upstream reached once: the engine's provider must have a key
    in the environment and its upstream must answer, else a :class:`ConfigurationError`.
    ``socket_path``: listen on this Unix socket (for a sandbox) instead of a loopback port."""
    provider = ENGINE_PROVIDERS[args.engine]
    proxy = CredentialProxy(
        getattr(args, "upstream", None),
        socket_path=socket_path,
        max_tokens=getattr(args, "proxy_max_tokens", None),
        max_cost_usd=getattr(args, "proxy_max_cost", None),
    )
    if not proxy.has_key(provider):
        names = " or ".join(KEY_VARIABLES[provider])
        raise ConfigurationError(
            f"the proxy has no {provider} key for {args.engine}: set {names}", option="upstream"
        )
    await proxy.check_upstream(provider)
    async with proxy:
        yield proxy


class Meter:
    """Sets each turn's metered usage beside its summary."""

    def __init__(self, proxy: CredentialProxy, *, as_json: bool) -> None:
        self._proxy = proxy
        self._as_json = as_json
        self._mark = proxy.ledger.mark()
        self._refused = proxy.refused
        self._unauthorized = proxy.unauthorized

    async def turn(self, summary: TurnSummary) -> None:
        proxy = self._proxy
        await proxy.settled()
        served = proxy.ledger.since(self._mark)
        self._mark += len(served)
        refused, self._refused = proxy.refused - self._refused, proxy.refused
        unauthorized = proxy.unauthorized - self._unauthorized
        self._unauthorized = proxy.unauthorized
        # Where the agent reported only the last call's tokens, those are what it said.
        said = summary.last_call_usage or summary.usage
        disagreement = usage_disagreement(said, served, prices=proxy.prices)
        if disagreement is not None:
            summary.errors.append(
                ErrorInfo(
                    message=f"the usage differs from the proxy's metering: {disagreement}",
                    code="usage_mismatch",
                )
            )
        if refused:
            summary.stop_reason = "budget"
            summary.ok = False
        record: dict[str, Any] = {
            "type": "metered",
            "turn": summary.turn,
            "proxy": {
                "usage": served.main.usage.model_dump(exclude_none=True),
                "calls": len(served.main),
                "side_usage": served.side.usage.model_dump(exclude_none=True),
                "side_calls": len(served.side),
                "cost_usd": served.cost(),
                "refused": refused,
                "unauthorized": unauthorized,
            },
            "summary": {
                "usage": summary.usage.model_dump(exclude_none=True) if summary.usage else None
            },
            "stop_reason": summary.stop_reason,
            "agrees": disagreement is None,
            "disagreement": disagreement,
            "budget_spent": proxy.budget_spent,
        }
        if self._as_json:
            print(json.dumps(record), flush=True)
            return
        usage = served.main.usage
        verdict = "agrees" if disagreement is None else f"DISAGREES: {disagreement}"
        line = (
            f"── metered at the proxy: {len(served.main)} calls, in {usage.input_tokens}, "
            f"out {usage.output_tokens}, cache read {usage.cache_read_tokens}, "
            f"cache write {usage.cache_write_tokens} ({verdict})"
        )
        if refused:
            line += f"; {refused} calls refused, the budget is spent ({proxy.budget_spent})"
        print(line, file=sys.stdout, flush=True)
