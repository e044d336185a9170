"""Every recorded transcript under ``fixtures/`` as the library reads it, written as JSON text:
each turn's messages (all fields, then only the fields set, at every level) and its summary,
read from the file and again from the bytes in memory. Run it before and after a change to the
reading path and compare the two outputs byte for byte (``cmp``): a change that is meant to
be faster only must leave them identical.

    python bench/equality.py OUT.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

from _common import FIXTURES

from agentrun import AgentrunError, replay


def transcripts() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for path in sorted(folder.rglob("*.jsonl")):
            if not path.name.endswith(".rollout.jsonl"):
                found.append((folder.name, path))  # a folder is named after its engine
    return found


def dump(out: list[str], engine: str, path: Path) -> None:
    sidecar = path.with_name(path.stem + ".rollout.jsonl")
    sources: list[tuple[str, object]] = [("file", path), ("bytes", path.read_bytes())]
    for how, source in sources:
        out.append(f"== {engine} {path.relative_to(FIXTURES)} {how}")
        try:
            turns = replay(
                source,  # pyright: ignore[reportArgumentType]
                engine=engine,
                sidecar=sidecar if how == "bytes" and sidecar.exists() else None,
            )
        except AgentrunError as exc:
            out.append(f"error {type(exc).__name__}: {exc}")
            continue
        for turn in turns:
            out.append(f"-- turn {turn.number}")
            for message in turn.messages:
                out.append(message.model_dump_json())
                out.append(message.model_dump_json(exclude_unset=True))
            out.append(turn.summary.model_dump_json())
            out.append(turn.summary.model_dump_json(exclude_unset=True))


def main() -> None:
    out: list[str] = []
    for engine, path in transcripts():
        dump(out, engine, path)
    Path(sys.argv[1]).write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"{len(out)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
