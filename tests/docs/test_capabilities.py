"""``docs/capabilities.md`` cannot drift from the tests that back it.

The page is what ``tests/capabilities.py`` renders; every node id a cell cites is collected by
pytest (collection only: nothing runs), and names the cell's engine in its parameters; every typed
cannot names an exported :class:`agentrun.AgentrunError` subclass the docs describe and the cited
test checks for; every notice names a message subtype the docs describe and the cited test reads;
every marked cell names a field value the docs describe and the cited test reads.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from capabilities import (
    CAPABILITIES,
    ENGINES,
    PAGE,
    REPO,
    Cannot,
    Marked,
    Notice,
    Open,
    render,
)

import agentrun
from agentrun.offline import EMBEDDED_ENGINES


def _cited() -> list[tuple[str, str, str]]:
    """(capability, engine, node id) for every id the mapping cites."""
    return [
        (capability.name, engine, test)
        for capability in CAPABILITIES
        for engine, cell in capability.cells.items()
        if not isinstance(cell, Open)
        for test in cell.tests
    ]


def test_the_page_is_what_the_mapping_renders() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/capabilities.md is out of date: run python tests/capabilities.py --write"
    )


def test_every_engine_has_a_cell_for_every_capability() -> None:
    assert set(ENGINES) == {*EMBEDDED_ENGINES, "acp"}
    for capability in CAPABILITIES:
        assert set(capability.cells) == set(ENGINES), capability.name


def _engine_of(node_id: str) -> str | None:
    """The engine a parametrized node id runs: the longest engine name among its dash-separated
    parameters (``asyncio-codex-acp`` is codex-acp, not codex or acp)."""
    params = "-" + node_id.rsplit("[", 1)[-1].rstrip("]") + "-"
    found = [engine for engine in ENGINES if f"-{engine}-" in params]
    return max(found, key=len) if found else None


def test_every_cited_test_exists_and_runs_its_cells_engine() -> None:
    cited = _cited()
    files = sorted({test.split("::", 1)[0] for _, _, test in cited})
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ids = set(collected.stdout.splitlines())
    missing = [f"{name} / {engine}: {test}" for name, engine, test in cited if test not in ids]
    assert not missing, "cited tests pytest does not collect:\n" + "\n".join(missing)
    wrong = [
        f"{name} / {engine}: {test}" for name, engine, test in cited if _engine_of(test) != engine
    ]
    assert not wrong, "cited tests that run another engine:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "error",
    sorted(
        {
            cell.error
            for capability in CAPABILITIES
            for cell in capability.cells.values()
            if isinstance(cell, Cannot)
        }
    ),
)
def test_every_typed_cannot_is_a_documented_error_its_test_checks(error: str) -> None:
    assert error in agentrun.__all__
    cls = getattr(agentrun, error)
    assert isinstance(cls, type) and issubclass(cls, agentrun.AgentrunError)
    docs = [p for p in (REPO / "docs").rglob("*.md") if p != PAGE]
    assert any(error in p.read_text(encoding="utf-8") for p in docs), f"no docs page names {error}"
    for capability in CAPABILITIES:
        for cell in capability.cells.values():
            if isinstance(cell, Cannot) and cell.error == error:
                for test in cell.tests:
                    source = (REPO / test.split("::", 1)[0]).read_text(encoding="utf-8")
                    assert error in source, f"{test} never mentions {error}"


@pytest.mark.parametrize(
    "subtype",
    sorted(
        {
            cell.subtype
            for capability in CAPABILITIES
            for cell in capability.cells.values()
            if isinstance(cell, Notice)
        }
    ),
)
def test_every_notice_is_a_documented_message_its_test_reads(subtype: str) -> None:
    docs = [p for p in (REPO / "docs").rglob("*.md") if p != PAGE]
    assert any(f"`{subtype}`" in p.read_text(encoding="utf-8") for p in docs), subtype
    for capability in CAPABILITIES:
        for cell in capability.cells.values():
            if isinstance(cell, Notice) and cell.subtype == subtype:
                for test in cell.tests:
                    source = (REPO / test.split("::", 1)[0]).read_text(encoding="utf-8")
                    assert f'subtype == "{subtype}"' in source, f"{test} never reads {subtype}"


@pytest.mark.parametrize(
    "marked",
    sorted(
        {
            (cell.field, cell.value)
            for capability in CAPABILITIES
            for cell in capability.cells.values()
            if isinstance(cell, Marked)
        }
    ),
    ids="=".join,
)
def test_every_marked_cell_is_a_documented_field_value_its_test_reads(
    marked: tuple[str, str],
) -> None:
    field, value = marked
    docs = [p.read_text(encoding="utf-8") for p in (REPO / "docs").rglob("*.md") if p != PAGE]
    assert any(f"`{field}`" in text and f"`{value}`" in text for text in docs), marked
    for capability in CAPABILITIES:
        for cell in capability.cells.values():
            if isinstance(cell, Marked) and (cell.field, cell.value) == marked:
                for test in cell.tests:
                    source = (REPO / test.split("::", 1)[0]).read_text(encoding="utf-8")
                    assert f'{field} == "{value}"' in source, f"{test} never reads {field}"
