"""Instruction counts of normalization (callgrind): deterministic where wall-clock time on a shared
machine is not. One interpreter per engine runs under ``valgrind --tool=callgrind`` with a fixed
hash seed; only the measured workloads are counted (each runs inside a ``functools.reduce`` call,
the one function collection is switched on for, and is dumped apart), after one warm-up run of
each. Workloads, over a fixed corpus of the engine's recorded transcripts held in memory:
``json.loads`` of every line (the unit), ``pydantic_core.from_json`` of every line, what
``replay --summary`` does per transcript (framing, decoding, translation, turns, each turn's
summary line of JSON as the command makes it), and the floor under it (``normalize.floor_memory``:
the lines read and parsed, the messages built from fields at hand, each summary folded and
written; no translation), which no translator can go below.

    python bench/instructions.py [--engine opencode] [--megabytes 1]
    python bench/instructions.py --imports

Takes about a minute per engine; not part of ``make bench``. ``--imports``: the instructions of
a fresh interpreter that runs ``import agentrun``, against the floor (``import anyio; from
pydantic import BaseModel``) and the floor with one model defined (what a program's first
model adds: pydantic's schema machinery and its scan for plugins), whole processes, each with
its bytecode cached beforehand (as an installed package has it: pip compiles on install) in a
cache of its own (``PYTHONPYCACHEPREFIX``); and again as a checkout runs where
``PYTHONDONTWRITEBYTECODE`` is set (agentrun's sources compiled at every start, everything else
from the cache). Run it with the interpreter of the environment to measure: pydantic's plugin
scan reads every installed distribution, so a development environment reads higher than an
installation with the library's dependencies alone.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pydantic_core
from _common import CORPUS_DIRS, callgrind_dumps

WORKLOADS = ("json.loads", "from_json", "agentrun", "floor")


def _child(engine: str, megabytes: float) -> None:
    import normalize
    from _common import build_corpus, scratch

    corpus = normalize.load(build_corpus(engine, megabytes, scratch()))
    runs = {
        "json.loads": normalize._per_line_memory(corpus, json.loads),  # pyright: ignore[reportPrivateUsage]
        "from_json": normalize._per_line_memory(corpus, pydantic_core.from_json),  # pyright: ignore[reportPrivateUsage]
        "agentrun": normalize.agentrun_summary_memory(corpus, engine),
        "floor": normalize.floor_memory(corpus, engine),
    }
    for name in WORKLOADS:
        runs[name]()  # warm-up, not counted
    for name in WORKLOADS:
        run = runs[name]
        functools.reduce(lambda _a, _b: run(), [0, 0])  # counted: see the module docstring


def _count(engine: str, megabytes: float) -> dict[str, int]:
    counts = callgrind_dumps(
        [__file__, "--child", engine, "--megabytes", str(megabytes)],
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        "--dump-after=functools_reduce",
    )
    if len(counts) != len(WORKLOADS):
        raise SystemExit(f"{engine}: expected {len(WORKLOADS)} dumps, got {len(counts)}")
    return dict(zip(WORKLOADS, counts, strict=True))


IMPORTS = {
    "floor": "import anyio; from pydantic import BaseModel",
    # What any program pays for its first pydantic model beyond the floor: pydantic's schema
    # machinery, and its scan of the installed distributions for plugins.
    "floor + one model": (
        "import anyio\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int = 0"
    ),
    "import agentrun": "import agentrun",
}


def _callgrind_total(program: str, env: dict[str, str], out: Path) -> int:
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            program,
        ],
        env={**env, "PYTHONHASHSEED": "0"},
        check=True,
        capture_output=True,
    )
    match = re.search(r"^totals: (\d+)", out.read_text(errors="replace"), re.M)
    return int(match.group(1)) if match else 0


def _count_imports() -> dict[str, int]:
    """``name -> instructions`` for each program of ``IMPORTS``: with its bytecode cached
    (``name``) and with agentrun's sources compiled at start, everything else cached
    (``name, sources compiled``)."""
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "pycache"
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(cache)
        for name, program in IMPORTS.items():
            subprocess.run([sys.executable, "-c", program], env=cached, check=True)  # warm
            counts[name] = _callgrind_total(program, cached, Path(tmp) / f"{len(counts)}.out")
        # The same cache without agentrun's own bytecode, and nothing written back: what a
        # checkout costs where PYTHONDONTWRITEBYTECODE is set.
        spec = importlib.util.find_spec("agentrun")
        assert spec is not None
        assert spec.origin is not None
        package = Path(spec.origin).resolve().parent
        shutil.rmtree(cache / package.relative_to(package.anchor), ignore_errors=True)
        compiling = {**cached, "PYTHONDONTWRITEBYTECODE": "1"}
        for name, program in IMPORTS.items():
            counts[f"{name}, sources compiled"] = _callgrind_total(
                program, compiling, Path(tmp) / f"{len(counts)}.out"
            )
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", action="append", choices=sorted(CORPUS_DIRS))
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--child")
    parser.add_argument("--imports", action="store_true")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.megabytes)
        return
    if args.imports:
        c = _count_imports()
        for name, count in c.items():
            floor = c["floor, sources compiled" if name.endswith("sources compiled") else "floor"]
            print(f"{name} | {count / 1e6:.1f}M | {count / floor:.2f}x")
        return
    print(
        "engine | json.loads | from_json | agentrun | floor "
        "| from_json ratio | agentrun ratio | floor ratio"
    )
    for engine in args.engine or sorted(CORPUS_DIRS):
        c = _count(engine, args.megabytes)
        base = c["json.loads"]
        print(
            f"{engine} | {base / 1e6:.1f}M | {c['from_json'] / 1e6:.1f}M | "
            f"{c['agentrun'] / 1e6:.1f}M | {c['floor'] / 1e6:.1f}M | "
            f"{c['from_json'] / base:.2f}x | {c['agentrun'] / base:.2f}x | "
            f"{c['floor'] / base:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
