"""The package's layers, read from its own imports.

``python scripts/architecture.py`` prints the layer graph as a Mermaid diagram and any rule the
imports break; ``--write`` puts the diagram into ``docs/architecture.md`` between its markers.
``tests/core/test_architecture.py`` runs the same checks, so the rules and the picture cannot
drift from the code.

The rules:

* a module imports only modules of its own layer or of lower ones (lazy imports inside functions
  and imports for type checking included);
* nothing outside ``agentrun/testing/`` imports :mod:`agentrun.testing`;
* the package face (``agentrun/__init__.py``) is imported by no module of the library;
* module-level imports form no cycle;
* an engine's folder imports no other engine's folder;
* the vocabulary, the layer of values, opens no file: only ``_vocabulary/tables.py`` reads (the
  read-only tables shipped in the package and the user's additions to them); what reads or writes
  sessions' files is the store's.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentrun"

#: Layers, lowest first: (name, what it holds, module prefixes).
LAYERS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "vocabulary",
        "messages, summary, errors, options, policies, permissions, questions, prices, catalog",
        ("agentrun._vocabulary", "agentrun._version"),
    ),
    (
        "store",
        "session journals on disk, ATIF trajectories in and out",
        ("agentrun._store",),
    ),
    ("wire", "processes, line framing, JSON-RPC, finding programs", ("agentrun._wire",)),
    (
        "turn model",
        "engine, session, turn, run_turn, deadlines, compaction and hand-off",
        ("agentrun._turns",),
    ),
    (
        "engine bases",
        "long-lived, spawn-per-turn, JSON-RPC session, the translator protocol",
        ("agentrun._bases",),
    ),
    ("engines", "one folder per agent, the registry, replay", ("agentrun.engines",)),
    (
        "offline",
        "the embedded model server, scripts, the embedded default, the recorder",
        ("agentrun.offline",),
    ),
    ("fleets", "fleets, compare, Ray", ("agentrun._fleets",)),
    (
        "face",
        "the public names, the CLI, the MCP and ACP servers, OpenTelemetry, engine-writer bases",
        (
            "agentrun.__init__",
            "agentrun._acp_server",
            "agentrun.__main__",
            "agentrun.cli",
            "agentrun._cli",
            "agentrun._render",
            "agentrun.abc",
            "agentrun.mcp_server",
            "agentrun.otel",
            "agentrun.trajectory",
        ),
    ),
    ("test kit", "fault shim, scripted engine", ("agentrun.testing",)),
]


@dataclass(frozen=True)
class Import:
    source: str  #: the importing module
    target: str  #: the imported module (or package)
    line: int
    module_level: bool  #: executed when the importing module is imported


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (packages as ``pkg.__init__``)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(found: dict[str, Path], name: str) -> str | None:
    """The module a dotted name refers to: itself, or its package's ``__init__``."""
    if name in found:
        return name
    if f"{name}.__init__" in found:
        return f"{name}.__init__"
    return None


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports() -> Iterator[Import]:
    found = modules()
    for name, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = (
            name.rsplit(".", 1)[0] if not name.endswith("__init__") else name[: -len(".__init__")]
        )
        if name.endswith(".__init__"):
            package = name[: -len(".__init__")]
        top = {id(n) for n in tree.body}
        typing_only = _type_checking_lines(tree)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem]
                # ``from . import x`` may name a module
                targets += [f"{stem}.{alias.name}" for alias in node.names]
            else:
                continue
            module_level = id(node) in top and node.lineno not in typing_only
            seen: set[str] = set()
            for target in targets:
                if not target.startswith("agentrun"):
                    continue
                resolved = _resolve(found, target)
                if resolved is None or resolved in seen or resolved == name:
                    continue
                seen.add(resolved)
                yield Import(name, resolved, node.lineno, module_level)


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, _, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise ValueError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")
    return best


def _engine_folder(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "engines" and not parts[2].startswith("_"):
        return parts[2]
    return None


def violations() -> list[str]:
    problems: list[str] = []
    every = list(imports())
    for found in every:
        where = f"{found.source} (line {found.line}) imports {found.target}"
        source_layer, target_layer = layer_of(found.source), layer_of(found.target)
        if found.target == "agentrun.__init__" and found.source != "agentrun.__init__":
            problems.append(f"{where}: the package face is imported by no module of the library")
        elif target_layer > source_layer:
            problems.append(
                f"{where}: the {LAYERS[source_layer][0]} layer may not import the "
                f"{LAYERS[target_layer][0]} layer"
            )
        source_engine, target_engine = _engine_folder(found.source), _engine_folder(found.target)
        if source_engine and target_engine and source_engine != target_engine:
            problems.append(f"{where}: an engine's folder imports no other engine's folder")
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(every)]
    problems += values_opening_files()
    return problems


#: The layer of values, which opens no file, and its one module that reads the read-only tables.
VALUES = "agentrun._vocabulary"
READS_TABLES = "agentrun._vocabulary.tables"

#: Calls that open, read, write, make or list files (``open(...)``, ``os.open``,
#: ``Path.read_text``, ...), and modules that exist to work on files.
FILE_FUNCTIONS = frozenset({"open", "fdopen"})
FILE_METHODS = frozenset(
    {
        "open",
        "fdopen",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "mkdir",
        "touch",
        "unlink",
        "rmdir",
        "iterdir",
        "glob",
        "rglob",
    }
)
FILE_MODULES = frozenset({"fcntl", "shutil", "tempfile"})


def file_access(source: str) -> list[int]:
    """The lines of ``source`` that open, read, write, make or list files."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id in FILE_FUNCTIONS) or (
                isinstance(func, ast.Attribute) and func.attr in FILE_METHODS
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] in FILE_MODULES for alias in node.names):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] in FILE_MODULES
        ):
            lines.append(node.lineno)
    return sorted(lines)


def values_opening_files() -> list[str]:
    """Each place a module of the vocabulary (but the table reader) works on files."""
    problems: list[str] = []
    for name, path in modules().items():
        if not (name == VALUES or name.startswith(VALUES + ".")) or name == READS_TABLES:
            continue
        for line in file_access(path.read_text(encoding="utf-8")):
            problems.append(
                f"{name} (line {line}) works on files: the vocabulary holds values; "
                "file I/O belongs to the store (or, for a read-only table, to "
                f"{READS_TABLES})"
            )
    return problems


def cycles(every: list[Import]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for found in every:
        if found.module_level:
            graph.setdefault(found.source, set()).add(found.target)
    result: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # a package's __init__ importing its own submodules is how packages work
            if node.endswith(".__init__") and nxt.startswith(node[: -len("__init__")]):
                continue
            if state.get(nxt) == 1:
                result.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return result


def layer_edges() -> set[tuple[int, int]]:
    return {
        (layer_of(i.source), layer_of(i.target))
        for i in imports()
        if layer_of(i.source) != layer_of(i.target)
    }


def mermaid() -> str:
    """The layers and which imports which, as a Mermaid flowchart (highest layer on top)."""
    lines = ["```mermaid", "flowchart TD"]
    for index, (name, holds, prefixes) in enumerate(LAYERS):
        folders = ", ".join(p.removeprefix("agentrun.") for p in prefixes[:3])
        if len(prefixes) > 3:
            folders += ", …"
        lines.append(f'    L{index}["<b>{name}</b><br/>{folders}<br/><i>{holds}</i>"]')
    for source, target in sorted(layer_edges(), key=lambda e: (-e[0], -e[1])):
        lines.append(f"    L{source} --> L{target}")
    lines.append("```")
    return "\n".join(lines)


BEGIN = "<!-- layers: generated by scripts/architecture.py --write -->"
END = "<!-- /layers -->"


def render_doc(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{mermaid()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    doc = REPO / "docs" / "architecture.md"
    if "--write" in argv:
        doc.write_text(render_doc(doc.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(mermaid())
    problems = violations()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
