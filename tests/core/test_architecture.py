"""The layers of the package, as docs/architecture.md draws them: the rules hold and the picture
is the one the code's imports give."""

from __future__ import annotations

import ast
import importlib.util
import sys
from types import ModuleType

from repo_paths import REPO

from agentrun._bases.translator import JsonRpcTranslator, Translator


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


# -- the translator contract ---------------------------------------------------------------------

#: What a caller may ask of a translator: the members the contract declares, and any ``feed*``
#: name (a way of feeding it that the contract does not declare).
_TRANSLATOR_MEMBERS = frozenset(
    name for kind in (Translator, JsonRpcTranslator) for name in vars(kind) if name[0] != "_"
)


def _member_lookups(source: str) -> list[tuple[int, str]]:
    """Where ``source`` looks a translator's member up by its name (``getattr``, ``hasattr``):
    ``(line, name)``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
        ):
            name = node.args[1]
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and (name.value in _TRANSLATOR_MEMBERS or name.value.startswith("feed"))
            ):
                found.append((node.lineno, name.value))
    return found


def test_no_translator_method_is_found_by_its_name() -> None:
    # Callers feed a translator through the methods its protocol declares (feed_line,
    # feed_decoded, feed, finish; a JSON-RPC translator's feed_received), never one they
    # discover: what an engine author must write is what the protocol says.
    found = {
        str(path.relative_to(REPO)): lookups
        for path in sorted((REPO / "agentrun").rglob("*.py"))
        if (lookups := _member_lookups(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_translator_rule_catches_what_it_forbids() -> None:
    assert {"feed", "feed_line", "feed_decoded", "finish", "feed_received"} <= _TRANSLATOR_MEMBERS
    source = (
        "a = getattr(t, 'feed_line', None)\n"
        "b = hasattr(t, 'feed_received')\n"
        "c = getattr(t, 'feed_anything')\n"
        "d = getattr(t, 'model', None)\n"
    )
    assert _member_lookups(source) == [(1, "feed_line"), (2, "feed_received"), (3, "feed_anything")]


# -- the session holds its engine as a driver ------------------------------------------------

SESSION_MODULE = "agentrun._turns.session"


def _tree(module: str) -> ast.Module:
    path = architecture.modules()[module]
    return ast.parse(path.read_text(encoding="utf-8"))


def _session_private_members() -> set[str]:
    """The private names ``Session`` defines: its ``_methods`` and its ``self._attributes``."""
    (session,) = [
        node
        for node in _tree(SESSION_MODULE).body
        if isinstance(node, ast.ClassDef) and node.name == "Session"
    ]
    names: set[str] = set()
    for node in ast.walk(session):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("_"):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
        ):
            names.add(node.attr)
    return {name for name in names if not name.startswith("__")}


def _private_uses_of_session(module: str, private: set[str]) -> list[str]:
    """Where ``module`` reads a private member of a session: an attribute access on a name that
    says it is one (``session``, ``self.session``, ``host``) or on a line that silences
    pyright's private-usage check (the only way strict pyright lets code reach one)."""
    path = architecture.modules()[module]
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[str] = []
    for node in ast.walk(_tree(module)):
        if not isinstance(node, ast.Attribute) or node.attr not in private:
            continue
        owner = ast.unparse(node.value)
        silenced = "reportPrivateUsage" in lines[node.lineno - 1]
        if silenced or owner.split(".")[-1] in {"session", "host", "_session"}:
            found.append(f"{module}:{node.lineno} {owner}.{node.attr}")
    return found


def test_no_module_but_the_session_uses_its_private_members() -> None:
    private = _session_private_members()
    assert {"_active", "_handoff", "_caller_error"} <= private
    uses = [
        use
        for module in architecture.modules()
        if module != SESSION_MODULE
        for use in _private_uses_of_session(module, private)
    ]
    assert uses == []


def test_the_private_member_check_finds_a_use() -> None:
    # the rule must be able to fail: a module reaching into a session as turn.py once did
    source = (
        "def f(turn):\n    return turn.session._handoff  # pyright: ignore[reportPrivateUsage]\n"
    )
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    access = node.body[0]
    assert isinstance(access, ast.Return) and isinstance(access.value, ast.Attribute)
    assert access.value.attr in _session_private_members()
    assert ast.unparse(access.value.value).split(".")[-1] == "session"


def _subclasses_session(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).split(".")[-1] == "Session" for base in node.bases)


def test_engines_do_not_subclass_the_session() -> None:
    # Engines are drivers the session holds (EngineDriver); Session is only the callers' class.
    subclasses = [
        f"{module}.{node.name}"
        for module in architecture.modules()
        for node in ast.walk(_tree(module))
        if isinstance(node, ast.ClassDef) and _subclasses_session(node)
    ]
    assert subclasses == []
    sample = ast.parse("class Engine(agentrun.Session): ...").body[0]
    assert isinstance(sample, ast.ClassDef) and _subclasses_session(sample)


def test_the_turn_reaches_its_session_through_public_names_only() -> None:
    text = architecture.modules()["agentrun._turns.turn"].read_text(encoding="utf-8")
    assert "reportPrivateUsage" not in text
    imported = {
        found.target for found in architecture.imports() if found.source == "agentrun._turns.turn"
    }
    # not even for type checking: the turn knows its session as a TurnHost
    assert SESSION_MODULE not in imported
    assert "agentrun._turns.driver" not in imported
