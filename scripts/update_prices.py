"""Regenerate ``agentrun/prices.json``, the built-in price catalog, from the pinned agents.

Two public price tables travel inside the agent programs pinned in ``engines/``:

* Claude Code bakes Anthropic's price list into its binary (``pricing_tiers`` and the model list
  that names a tier per model): the first-party prices of every Claude model it knows.
* OpenCode bundles a snapshot of the models.dev catalog (``cost`` per model and provider, in US
  dollars per million tokens): OpenAI, Google, DeepSeek, xAI, Mistral, Alibaba (Qwen), Moonshot.

Both are JavaScript object literals in a minified bundle. This script cuts each literal out with a
string-aware brace matcher and lets ``node`` evaluate it (data only: no code of the bundle runs).
Run it after moving a pin: ``python scripts/update_prices.py`` (needs ``make engines`` and node).
``--models-dev FILE`` reads a downloaded ``https://models.dev/api.json`` instead of OpenCode's
snapshot.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULES = ROOT / "engines" / "node_modules"
OUTPUT = ROOT / "agentrun" / "prices.json"
PROVIDERS = ("openai", "google", "deepseek", "xai", "mistral", "alibaba", "moonshotai")
PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")


def _balanced(data: bytes, start: int) -> bytes:
    """The JavaScript literal that opens at ``data[start]`` (``{`` or ``[``), strings skipped."""
    opener = data[start : start + 1]
    assert opener in (b"{", b"["), opener
    depth = 0
    i = start
    quote: int | None = None
    while i < len(data):
        c = data[i]
        if quote is not None:
            if c == 0x5C:  # backslash: skip the escaped character
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in (0x22, 0x27, 0x60):  # " ' `
            quote = c
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
            if depth == 0:
                return data[start : i + 1]
        i += 1
    raise ValueError("unbalanced literal")


def _evaluate(literal: bytes) -> Any:
    """A data-only JavaScript literal as JSON, evaluated by node."""
    program = "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>"
    program += "process.stdout.write(JSON.stringify(new Function('return ('+s+')')())))"
    done = subprocess.run(
        ["node", "-e", program], input=literal, capture_output=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def _binary(package: str, name: str) -> Path:
    found = sorted((MODULES / package).glob(f"**/{name}"))
    files = [p for p in found if p.is_file() and p.stat().st_size > 10_000_000]
    if not files:
        sys.exit(f"{package}/{name} not found: run `make engines` first")
    return files[0]


def _version(package: str) -> str:
    meta = json.loads((MODULES / package / "package.json").read_text())
    return str(meta["version"])


def _per_million(entry: dict[str, Any], mapping: dict[str, str]) -> dict[str, float]:
    prices: dict[str, float] = {}
    for ours, theirs in mapping.items():
        value = entry.get(theirs)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            prices[ours] = float(value)
    return prices


def claude_prices() -> dict[str, dict[str, Any]]:
    """Anthropic first-party prices from the pinned Claude Code binary."""
    data = _binary("@anthropic-ai", "claude").read_bytes()
    tiers_at = data.find(b"pricing_tiers:{")
    if tiers_at < 0:
        sys.exit("no pricing_tiers in the Claude Code binary: the bundle changed shape")
    tiers = _evaluate(_balanced(data, tiers_at + len(b"pricing_tiers:")))
    models_at = data.find(b"models:[", tiers_at)
    models = _evaluate(_balanced(data, models_at + len(b"models:")))
    source = f"claude-code {_version('@anthropic-ai/claude-code')} price tiers"
    mapping = {
        "input": "input",
        "cached_input": "cache_read",
        "cache_write": "cache_write_5m",
        "output": "output",
    }
    out: dict[str, dict[str, Any]] = {}
    for model in models:
        tier = tiers.get(model.get("pricing"))
        if not isinstance(tier, dict):
            continue
        entry: dict[str, Any] = _per_million(tier, mapping)
        first_party = (model.get("provider_ids") or {}).get("first_party")
        if isinstance(first_party, str) and first_party != model["id"]:
            entry["aliases"] = [first_party]
        entry["source"] = source
        out[str(model["id"])] = entry
    return out


def models_dev_prices(catalog: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    mapping = {
        "input": "input",
        "cached_input": "cache_read",
        "cache_write": "cache_write",
        "output": "output",
    }
    out: dict[str, dict[str, Any]] = {}
    for provider in PROVIDERS:
        models = (catalog.get(provider) or {}).get("models") or {}
        for model_id, model in sorted(models.items()):
            cost = model.get("cost")
            if not isinstance(cost, dict):
                continue
            entry: dict[str, Any] = _per_million(cost, mapping)
            if "input" not in entry or "output" not in entry:
                continue
            if entry["input"] == 0 and entry["output"] == 0:
                continue  # free tiers and placeholders say nothing about the paid price
            entry["source"] = f"{source} ({provider})"
            out.setdefault(model_id, entry)
    return out


def opencode_snapshot() -> dict[str, Any]:
    data = _binary("opencode-linux-x64", "opencode").read_bytes()
    catalog: dict[str, Any] = {}
    for provider in PROVIDERS:
        marker = re.search(
            rb'(?:^|[,{])"?' + provider.encode() + rb'"?:\{id:"' + provider.encode() + rb'",env:',
            data,
        )
        if marker is None:
            continue
        start = data.index(b"{", marker.start() + 1)
        catalog[provider] = _evaluate(_balanced(data, start))
    return catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dev", type=Path, help="a downloaded models.dev api.json")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    models = claude_prices()
    if args.models_dev:
        others = models_dev_prices(json.loads(args.models_dev.read_text()), "models.dev")
    else:
        version = _version("opencode-ai")
        source = f"models.dev snapshot in opencode {version}"
        others = models_dev_prices(opencode_snapshot(), source)
    for model_id, entry in others.items():
        models.setdefault(model_id, entry)
    document = {
        "_about": (
            "US dollars per million tokens: input (not cached), cached_input (cache reads), "
            "cache_write, output (thinking included). Regenerated by scripts/update_prices.py "
            "from the price tables the pinned agents carry; $AGENTRUN_PRICE_CATALOG names a file "
            "of the same shape merged over it. Long-context surcharges are not applied."
        ),
        "models": dict(sorted(models.items())),
    }
    args.output.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(f"{len(models)} models -> {args.output}")


if __name__ == "__main__":
    main()
