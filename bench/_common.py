"""What every benchmark shares: timing by interleaved runs, and the corpora.

Every number is a ratio against a baseline measured in the same process on the same data, the
median of interleaved runs, never an absolute time asserted anywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

#: Engine -> folders of recorded transcripts (their own translators' wire format).
CORPUS_DIRS: dict[str, tuple[str, ...]] = {
    "claude": ("claude",),
    "opencode": ("opencode",),
    "opencode-acp": ("acp", "opencode-acp"),
    "codex": ("codex",),
    "codex-app-server": ("codex-app-server",),
}


@dataclass
class Row:
    """One line of the table: what was measured, against what, and the ratio."""

    name: str
    what: str
    baseline: str
    ratio: float
    median_s: float
    spread: float
    target: str = ""

    @property
    def met(self) -> str:
        if not self.target:
            return ""
        limit = float(self.target.lstrip("<= ").rstrip("x"))
        return "yes" if self.ratio <= limit else "no"


def interleaved(
    runs: int, candidates: dict[str, Callable[[], object]]
) -> dict[str, tuple[float, float]]:
    """Run each candidate ``runs`` times, interleaved; ``name -> (median s, spread)`` where the
    spread is (max - min) / median."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(runs):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    out: dict[str, tuple[float, float]] = {}
    for name, values in times.items():
        median = statistics.median(values)
        out[name] = (median, (max(values) - min(values)) / median if median else 0.0)
    return out


def transcripts(engine: str) -> list[Path]:
    found: list[Path] = []
    for folder in CORPUS_DIRS[engine]:
        found.extend(
            p
            for p in sorted((FIXTURES / folder).rglob("*.jsonl"))
            if not p.name.endswith(".rollout.jsonl")
        )
    return found


def build_corpus(engine: str, megabytes: float, into: Path) -> list[Path]:
    """Copies of the engine's recorded transcripts (with the files recorded beside them) under
    ``into`` until they hold ``megabytes`` (side files included): one replay per file, as a
    user would run them."""
    sources = transcripts(engine)
    if not sources:
        raise SystemExit(f"no transcripts for {engine}")
    target = megabytes * 1024 * 1024
    files: list[Path] = []
    total = 0
    index = 0
    while total < target:
        source = sources[index % len(sources)]
        folder = into / engine / str(index)
        folder.mkdir(parents=True)
        copy = folder / source.name
        shutil.copyfile(source, copy)
        sidecar = source.with_name(source.stem + ".rollout.jsonl")
        if sidecar.exists():
            shutil.copyfile(sidecar, folder / sidecar.name)
            total += sidecar.stat().st_size
        files.append(copy)
        total += copy.stat().st_size
        index += 1
    return files


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="agentrun-bench-"))


def print_table(rows: list[Row]) -> None:
    """One table: ratio, median and spread of every benchmark, and whether it meets its target."""
    header = ("benchmark", "measured", "baseline", "ratio", "median", "spread", "target", "met")
    body = [
        (
            r.name,
            r.what,
            r.baseline,
            f"{r.ratio:.2f}x",
            f"{r.median_s * 1000:.1f} ms",
            f"{r.spread * 100:.0f}%",
            r.target,
            r.met,
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in (header, *body)) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for row in body:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def callgrind_dumps(argv: list[str], *options: str) -> list[int]:
    """Instructions counted by callgrind in each dump of ``python argv`` (the interpreter that
    runs this), in the order written: ``options`` say when to dump (``--dump-before=`` /
    ``--dump-after=functools_reduce``, a marker the child calls). Hash seeds fixed, so that the
    same code counts the same."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", *options, f"--callgrind-out-file={out}",
             sys.executable, *argv],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
            capture_output=True,
        )  # fmt: skip
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        counts: list[int] = []
        for dump in dumps:
            match = re.search(r"^totals: (\d+)", dump.read_text(errors="replace"), re.M)
            counts.append(int(match.group(1)) if match else 0)
    return counts
