"""The layers of the package, as docs/architecture.md draws them: the rules hold and the picture
is the one the code's imports give."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from repo_paths import REPO


def _architecture() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "architecture", REPO / "scripts" / "architecture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("architecture", module)
    spec.loader.exec_module(module)
    return module


architecture = _architecture()


def test_every_module_belongs_to_a_layer() -> None:
    for name in architecture.modules():
        architecture.layer_of(name)


def test_imports_follow_the_layer_rules() -> None:
    assert architecture.violations() == []


def test_the_rules_catch_what_they_forbid() -> None:
    # the checker itself must be able to fail: an upward import, the face, the test kit
    Import = architecture.Import
    assert architecture.layer_of("agentrun._wire.process") < architecture.layer_of(
        "agentrun._turns.session"
    )
    assert architecture.layer_of("agentrun.testing._faults") > architecture.layer_of("agentrun.cli")
    cycle = architecture.cycles(
        [
            Import("agentrun._turns.a", "agentrun._turns.b", 1, True),
            Import("agentrun._turns.b", "agentrun._turns.a", 1, True),
        ]
    )
    assert cycle == [["agentrun._turns.a", "agentrun._turns.b", "agentrun._turns.a"]]
    lazy = architecture.cycles(
        [
            Import("agentrun._turns.a", "agentrun._turns.b", 1, True),
            Import("agentrun._turns.b", "agentrun._turns.a", 1, False),
        ]
    )
    assert lazy == []


def test_the_vocabulary_opens_no_file() -> None:
    assert architecture.values_opening_files() == []


def test_the_file_rule_catches_each_way_of_opening_a_file() -> None:
    # the checker itself must be able to fail: each spelling of file I/O the vocabulary had
    for source in (
        "with open(path) as fh: pass",
        "fd = os.open(path, os.O_RDONLY)",
        "data = Path(p).read_bytes()",
        "text = resources.files(pkg).joinpath(name).read_text()",
        "Path(p).write_text(text)",
        "directory.mkdir(parents=True)",
        "names = sorted(directory.glob('*.jsonl'))",
        "import fcntl",
    ):
        assert architecture.file_access(source) == [1], source
    assert architecture.file_access("text = value.replace('a', 'b')\nopened = False") == []


def test_the_package_root_is_the_face() -> None:
    root = sorted(p.name for p in (REPO / "agentrun").glob("*.py"))
    assert len(root) <= 12, root


def test_the_picture_in_the_docs_is_the_code() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert architecture.render_doc(doc) == doc, (
        "docs/architecture.md is out of date: run python scripts/architecture.py --write"
    )
