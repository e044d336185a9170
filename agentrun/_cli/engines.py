"""``agentrun engines``: every engine, whether its program is there and which version it is.

For each engine: the program found (path), the version the program reports (``--version``,
bounded by a timeout), the version ``engines/package.json`` pins, the Node.js it runs on when it
is a Node script, and whether the embedded model server has an offline configuration for it;
and whether a sandbox (``agentrun run --sandbox``) can be had here, or why not.
The programs are asked concurrently, so the whole view takes about as long as the slowest one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from .._vocabulary.errors import AgentrunError
from .._vocabulary.options import SessionOptions
from .._wire.programs import engines_dir
from ..engines._registry import engine_names, get_engine
from .render import clean, colour_allowed

__all__ = ["EngineReport", "add_parser", "engine_reports", "engines"]

#: Seconds each program may take to answer ``--version`` (Gemini CLI starts itself twice and
#: takes seconds on a busy machine).
VERSION_TIMEOUT = 30.0

#: Registered names that are no agent program of their own, and what they are instead.
_NOT_PROGRAMS: dict[str, str] = {
    "acp": "any ACP agent, given its command line (AcpEngine)",
    "replay": "replays a recorded transcript (no program)",
    "scripted": "a scripted engine for tests (agentrun.testing; no program)",
}

_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.-]+)?")


class NodeReport(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    version: str | None = None


class EngineReport(BaseModel):
    """What ``agentrun engines`` found out about one engine."""

    model_config = ConfigDict(frozen=True)
    engine: str
    #: Whether the engine's program was found and answered.
    ok: bool
    #: The program (for a Node script: the script).
    program: str | None = None
    #: The version the program reports.
    version: str | None = None
    #: The npm package the program belongs to, and the version ``engines/package.json`` pins.
    package: str | None = None
    pinned: str | None = None
    node: NodeReport | None = None
    #: Whether ``agentrun run`` can drive it on the embedded model server.
    offline: bool = False
    problem: str | None = None
    note: str | None = None
    #: Whether ``SessionOptions(sandbox=...)`` / ``agentrun run --sandbox`` can be had here
    #: (bubblewrap), and why not.
    sandbox: bool = False
    sandbox_problem: str | None = None


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = cast(
        argparse.ArgumentParser,
        sub.add_parser(
            "engines",
            help="every engine: program, version, pinned version, offline configuration",
            description="Which engines can run here: each engine's program (path), the version "
            "it reports, the version engines/package.json pins, the Node.js it runs on, and "
            "whether the embedded model server has an offline configuration for it. Exits 1 "
            "when a program is missing or does not answer.",
        ),
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per engine (JSONL)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=VERSION_TIMEOUT,
        help=f"seconds each program may take to answer --version (default {VERSION_TIMEOUT:g})",
    )
    parser.add_argument(
        "--engine",
        dest="names",
        action="append",
        default=[],
        metavar="NAME",
        help="only this engine (repeatable; default: every engine)",
    )
    actions = parser.add_subparsers(dest="engines_command", metavar="{install}")
    install = actions.add_parser(
        "install",
        help="install the pinned agent programs with npm ci (needs npm)",
        description="Install the pinned agent programs (the package's engines manifest and "
        "lock) with npm ci into the per-user engines directory, where agentrun finds them.",
    )
    install.add_argument(
        "--dir", help="engines directory (default: $AGENTRUN_ENGINES_DIR, else per-user)"
    )
    return parser


def engines(args: argparse.Namespace) -> int:
    from .main import UsageError

    if getattr(args, "engines_command", None) == "install":
        from .._wire.install import install_engines

        print(f"agentrun: the pinned agents are in {install_engines(args.dir)}")
        return 0

    known = engine_names()
    unknown = [n for n in args.names if n not in known]
    if unknown:
        raise UsageError(
            f"agentrun engines: unknown engine {unknown[0]!r} (known: {', '.join(known)})"
        )
    if not args.timeout > 0:
        raise UsageError("agentrun engines: --timeout must be a positive number of seconds")
    reports = engine_reports(args.names or None, timeout=args.timeout)
    if args.json:
        for report in reports:
            print(json.dumps(report.model_dump(mode="json", exclude_none=True)))
    else:
        sys.stdout.write(_table(reports))
    return 0 if all(r.ok or r.note is not None for r in reports) else 1


def engine_reports(
    names: list[str] | None = None, *, timeout: float = VERSION_TIMEOUT
) -> list[EngineReport]:
    """A report per engine (every registered one by default), the programs asked at once."""
    from .._wire.sandbox import sandbox_unavailable
    from ..offline._embedded import EMBEDDED_ENGINES

    names = names if names is not None else engine_names()
    pinned = _pinned_versions()
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        no_sandbox = pool.submit(sandbox_unavailable)
        futures = [pool.submit(_report, n, pinned, n in EMBEDDED_ENGINES, timeout) for n in names]
        reports = [f.result() for f in futures]
    why = no_sandbox.result()
    sandbox = {"sandbox": why is None, "sandbox_problem": why}
    return [r.model_copy(update=sandbox) if r.engine not in _NO_SANDBOX else r for r in reports]


#: Registered names that run no program, so nothing of theirs is sandboxed.
_NO_SANDBOX = frozenset({"replay", "scripted"})


def _report(name: str, pinned: dict[str, str], offline: bool, timeout: float) -> EngineReport:
    if name in _NOT_PROGRAMS:
        return EngineReport(engine=name, ok=True, offline=offline, note=_NOT_PROGRAMS[name])
    try:
        engine = get_engine(name)
        engine.check()
        argv = _program_argv(engine)
    except (AgentrunError, TypeError) as exc:
        return EngineReport(engine=name, ok=False, offline=offline, problem=_one_line(exc))
    if argv is None:
        return EngineReport(engine=name, ok=True, offline=offline, note="found (no version)")
    program = argv[-1]
    package, _installed = _package_of(program)
    node = None
    if len(argv) == 2:
        node = NodeReport(path=argv[0], version=_ask_version([argv[0]], timeout))
    version = _ask_version(argv, timeout)
    problem = None if version is not None else f"did not answer --version within {timeout:g}s"
    want = pinned.get(package) if package is not None else None
    return EngineReport(
        engine=name,
        ok=version is not None,
        program=program,
        version=version,
        package=package,
        pinned=want,
        node=node,
        offline=offline,
        problem=problem,
    )


def _program_argv(engine: Any) -> list[str] | None:
    """The program of ``engine`` as ``[path]``, or ``[node, script]`` for a Node script."""
    from ..engines.acp import AcpEngine
    from ..engines.claude import ClaudeEngine

    if isinstance(engine, AcpEngine):
        argv = engine.command_for(SessionOptions())
        if len(argv) >= 2 and argv[1].endswith((".js", ".mjs", ".cjs")):
            return argv[:2]
        return argv[:1]
    if isinstance(engine, ClaudeEngine):
        return engine.command(SessionOptions())[:1]
    resolve = getattr(engine, "resolve_binary", None)
    if callable(resolve):
        return [str(resolve())]
    return None


def _ask_version(argv: list[str], timeout: float) -> str | None:
    """The version ``argv --version`` prints, or ``None`` (no answer within the timeout)."""
    try:
        child = subprocess.Popen(
            [*argv, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            child.kill()
        child.communicate()
        return None
    found = _VERSION.search(out.decode("utf-8", "replace"))
    return found.group(0) if found else None


def _package_of(program: str) -> tuple[str | None, str | None]:
    """The npm package (name, installed version) that ships ``program``: the nearest
    ``package.json`` above it."""
    for parent in Path(program).resolve().parents:
        manifest = parent / "package.json"
        if manifest.is_file():
            try:
                data: Any = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None, None
            if not isinstance(data, dict):
                return None, None
            info = cast("dict[str, Any]", data)
            name, version = info.get("name"), info.get("version")
            return (
                name if isinstance(name, str) else None,
                version if isinstance(version, str) else None,
            )
    return None, None


def _manifests() -> list[Path]:
    """The engines manifests to read, most specific first: the engines directory in use, then
    the one this package ships (what an installed wheel has)."""
    from .._vocabulary.errors import AgentrunError
    from .._wire.install import pinned_manifests

    found = [engines_dir() / "package.json"]
    with contextlib.suppress(AgentrunError):  # a checkout without the shipped copy
        found.append(pinned_manifests() / "package.json")
    return found


def _pinned_versions() -> dict[str, str]:
    """The engines manifest's dependencies: npm package -> pinned version."""
    data: Any = None
    for manifest in _manifests():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            break
        except (OSError, ValueError):
            continue
    deps: Any = cast("dict[str, Any]", data).get("dependencies") if isinstance(data, dict) else None
    if not isinstance(deps, dict):
        return {}
    return {str(k): str(v) for k, v in cast("dict[Any, Any]", deps).items()}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _table(reports: list[EngineReport]) -> str:
    colour = colour_allowed(sys.stdout)

    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    lines: list[str] = []
    for r in reports:
        name, offline = clean(r.engine), "offline ✓" if r.offline else "offline -"
        if r.note is not None and r.program is None:
            lines.append(f"  {name:<17} {paint('2', clean(r.note))}")
            continue
        if not r.ok:
            problem = clean(r.problem or "unavailable")
            lines.append(f"✗ {name:<17} {offline}  {paint('31', problem)}")
            continue
        version = clean(r.version or "?")
        if r.pinned is not None and r.version is not None and r.version != r.pinned:
            version += paint("33", f" (pinned {clean(r.pinned)})")
        elif r.pinned is not None:
            version += " (pinned)"
        node = f"  node {clean(r.node.version or '?')}" if r.node is not None else ""
        lines.append(f"✓ {name:<17} {offline}  {version}{node}  {clean(r.program or '')}")
    why = next((r.sandbox_problem for r in reports if r.engine not in _NO_SANDBOX), "")
    if why is None:
        lines.append(f"sandbox: {paint('32', 'available')} (bubblewrap; agentrun run --sandbox)")
    elif why:
        lines.append(f"sandbox: {paint('31', 'unavailable')}: {clean(why)}")
    return "".join(line + "\n" for line in lines)
