"""The compatibility matrix: every supported agent, pinned and latest, through its e2e scenarios.

    python scripts/compatibility.py              # install the latest versions, run, write the doc
    python scripts/compatibility.py --no-install # reuse .compat/latest from an earlier run

For each agent package in ``engines/package.json`` it asks the npm registry for the latest
published version, installs it into ``.compat/latest`` beside the pinned install, runs the agent's
end-to-end test modules against both (``AGENTRUN_ENGINES_DIR`` selects the install), and writes
``docs/compatibility.md``: agent x version x scenario -> pass / fail / skip, with the date. A pin is
moved only when the latest version passes every scenario the pinned one passes.

This is an opt-in job (``make compat``), not part of ``make test``: it downloads packages and
takes several minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / ".compat" / "latest"
DOC = ROOT / "docs" / "compatibility.md"

_PRESETS = ("tests/engines/acp_presets/test_presets_e2e.py",)

#: npm package -> (agent name, the e2e test modules that exercise it, a ``-k`` selection).
AGENTS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "@anthropic-ai/claude-code": ("claude", ("tests/engines/claude/test_claude_e2e.py",), None),
    "opencode-ai": (
        "opencode",
        ("tests/engines/opencode/test_opencode_e2e.py", "tests/engines/acp/test_acp_e2e.py"),
        None,
    ),
    "@openai/codex": ("codex", ("tests/engines/codex",), None),
    "@agentclientprotocol/claude-agent-acp": ("claude-acp", _PRESETS, "claude-acp"),
    "@agentclientprotocol/codex-acp": ("codex-acp", _PRESETS, "codex-acp"),
    "@google/gemini-cli": ("gemini", _PRESETS, "gemini"),
    "@qwen-code/qwen-code": ("qwen", _PRESETS, "qwen"),
}


@dataclass
class Run:
    agent: str
    package: str
    version: str
    label: str
    outcomes: dict[str, str] = field(default_factory=dict[str, str])


def _npm_latest(package: str) -> str:
    done = subprocess.run(
        ["npm", "view", package, "version"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def _install_latest(versions: dict[str, str]) -> None:
    LATEST.mkdir(parents=True, exist_ok=True)
    manifest = {"name": "agentrun-engines-latest", "private": True, "version": "0.0.0"}
    (LATEST / "package.json").write_text(json.dumps(manifest))
    specs = [f"{package}@{version}" for package, version in versions.items()]
    subprocess.run(
        ["npm", "install", "--prefix", str(LATEST), "--no-audit", "--no-fund",
         "--loglevel=error", "--save-exact", *specs],
        check=True,
    )  # fmt: skip


def _run_tests(
    modules: tuple[str, ...], keyword: str | None, engines_dir: Path | None, junit: Path
) -> dict[str, str]:
    existing = [m for m in modules if (ROOT / m).exists()]
    if not existing:
        return {}
    env = dict(os.environ)
    env.pop("AGENTRUN_ENGINES_DIR", None)
    if engines_dir is not None:
        env["AGENTRUN_ENGINES_DIR"] = str(engines_dir)
    argv = [
        sys.executable, "-m", "agentrun.offline", "netns", "--",
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--junitxml={junit}",
        "-o", "addopts=", *(["-k", keyword] if keyword else []), *existing,
    ]  # fmt: skip
    subprocess.run(argv, cwd=ROOT, env=env, check=False)
    return _outcomes(junit)


def _outcomes(junit: Path) -> dict[str, str]:
    if not junit.exists():
        return {}
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "fail"
        elif case.find("skipped") is not None:
            outcomes[name] = "skip"
        else:
            outcomes[name] = "pass"
    return outcomes


def _pinned() -> dict[str, str]:
    manifest = json.loads((ROOT / "engines" / "package.json").read_text())
    return {p: v for p, v in manifest["dependencies"].items() if p in AGENTS}


#: Key of the hand-written sections in :func:`_kept_sections`: headings naming no package.
NOTES = ""


def _kept_sections(run_packages: set[str]) -> dict[str, list[str]]:
    """The sections of the current document for agents this run leaves out (``--agents``), and
    under :data:`NOTES` the hand-written ones (a ``## `` heading without a backticked package:
    what changed on the wire and how the library treats it), which every run keeps."""
    if not DOC.exists():
        return {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            package = line.split("`")[1] if line.count("`") >= 2 else ""
            current = None if package in run_packages else sections.setdefault(package, [])
        if current is not None:
            current.append(line)
    return sections


def _write(runs: list[Run], today: str) -> str:
    lines = [
        "# Compatibility matrix",
        "",
        f"Generated {today} by `python scripts/compatibility.py` (`make compat`): each supported",
        "agent's end-to-end scenarios against the pinned version and the latest published one,",
        "offline against the embedded model server. A pin moves only when the latest passes.",
        "",
    ]
    kept = _kept_sections({r.package for r in runs})
    for package, (agent, _, _) in AGENTS.items():
        mine = [r for r in runs if r.package == package]
        if not mine:
            lines += kept.get(package, [])
            continue
        scenarios = sorted({s for r in mine for s in r.outcomes})
        lines += [f"## {agent} (`{package}`)", ""]
        header = "| scenario | " + " | ".join(f"{r.label} {r.version}" for r in mine) + " |"
        lines += [header, "|---|" + "---|" * len(mine)]
        for scenario in scenarios:
            cells = " | ".join(r.outcomes.get(scenario, "-") for r in mine)
            lines.append(f"| `{scenario}` | {cells} |")
        if not scenarios:
            lines.append("| (no scenarios ran) |" + " - |" * len(mine))
        totals = []
        for r in mine:
            passed = sum(v == "pass" for v in r.outcomes.values())
            failed = sum(v == "fail" for v in r.outcomes.values())
            totals.append(f"{r.label} {r.version}: {passed} passed, {failed} failed")
        lines += ["", "; ".join(totals) + ".", ""]
    notes = kept.get(NOTES, [])
    if notes and lines[-1] != "":
        lines.append("")
    lines += notes
    if lines[-1] != "":
        lines.append("")  # the file ends with a newline
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--no-install", action="store_true", help="reuse .compat/latest")
    parser.add_argument("--agents", help="comma-separated agent names (default: all)")
    args = parser.parse_args(argv)
    wanted = set(args.agents.split(",")) if args.agents else None
    pinned = {p: v for p, v in _pinned().items() if wanted is None or AGENTS[p][0] in wanted}
    latest = {p: _npm_latest(p) for p in pinned}
    if not args.no_install:
        _install_latest(latest)
    runs: list[Run] = []
    reports = ROOT / ".compat" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    for package, version in pinned.items():
        agent, modules, keyword = AGENTS[package]
        pinned_run = Run(agent, package, version, "pinned")
        pinned_run.outcomes = _run_tests(modules, keyword, None, reports / f"{agent}-pinned.xml")
        latest_run = Run(agent, package, latest[package], "latest")
        latest_run.outcomes = _run_tests(modules, keyword, LATEST, reports / f"{agent}-latest.xml")
        runs += [pinned_run, latest_run]
    today = dt.date.today().isoformat()
    DOC.write_text(_write(runs, today))
    print(DOC.read_text())
    broken = [
        r for r in runs if r.label == "latest" and any(v == "fail" for v in r.outcomes.values())
    ]
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
