"""The fenced code blocks of the documentation, and how each one is tested.

A block is a fence whose info string starts with a Python (``python``, ``py``) or shell (``sh``,
``bash``, ``shell``) language. An HTML comment on the line right before the opening fence
changes what happens to it:

* none: the block runs (see ``tests/docs/test_docs.py``);
* ``<!-- live -->``: it needs an account or a network; it is only compiled (``compile()`` for
  Python, ``bash -n`` for shell);
* ``<!-- skip: REASON -->``: it is neither run nor compiled (shown output, a set-up command),
  and the reason is reported with the skip. A skip without a reason is an error.

Any other fence (``json``, ``toml``, a bare fence) is left alone.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PYTHON", "SHELL", "Block", "DocsError", "doc_pages", "find_blocks", "parse_blocks"]

PYTHON = frozenset({"python", "py", "python3"})
SHELL = frozenset({"sh", "bash", "shell"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^[ \t]*<!--[ \t]*(?P<body>.*?)[ \t]*-->[ \t]*$")
_LIVE = re.compile(r"^live$")
_SKIP = re.compile(r"^skip(?:[ \t]*:[ \t]*(?P<reason>.*))?$")


class DocsError(ValueError):
    """A documentation page whose blocks cannot be read (an unclosed fence, a bare skip)."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and source, and what to do with it."""

    page: str
    """The page's path relative to the repository root (``docs/turns.md``)."""
    line: int
    """The line of the opening fence (1-based)."""
    lang: str
    """``"python"`` or ``"sh"``."""
    source: str
    """The block's text, dedented when the fence is indented (a list item's block)."""
    mode: str
    """``"run"``, ``"compile"`` (live-only) or ``"skip"``."""
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def padded(self) -> str:
        """The source preceded by blank lines, so that its line numbers are the page's."""
        return "\n" * self.line + self.source


def _language(info: str) -> str | None:
    word = info.strip().split(maxsplit=1)[0].lower() if info.strip() else ""
    word = word.lstrip("{.").rstrip("}")
    if word in PYTHON:
        return "python"
    if word in SHELL:
        return "sh"
    return None


def _marker(page: str, line: int, text: str) -> tuple[str, str]:
    found = _MARKER.match(text)
    if found is None:
        return "run", ""
    body = found.group("body")
    if _LIVE.match(body):
        return "compile", "needs an account (live only): compiled, not run"
    skip = _SKIP.match(body)
    if skip is None:
        return "run", ""
    reason = (skip.group("reason") or "").strip()
    if not reason:
        raise DocsError(f"{page}:{line}: a skipped block must say why (<!-- skip: reason -->)")
    return "skip", reason


def parse_blocks(text: str, page: str) -> list[Block]:
    """The Python and shell blocks of the Markdown ``text`` of ``page``."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening.group("fence"), opening.group("indent")
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = i + 1
        while end < len(lines) and close.match(lines[end]) is None:
            end += 1
        if end == len(lines):
            raise DocsError(f"{page}:{i + 1}: the code fence is never closed")
        lang = _language(opening.group("info"))
        if lang is not None:
            before = lines[i - 1] if i > 0 else ""
            mode, reason = _marker(page, i, before)
            body = "\n".join(lines[i + 1 : end])
            source = textwrap.dedent(body) if indent else body
            blocks.append(Block(page, i + 1, lang, source + "\n", mode, reason))
        i = end + 1
    return blocks


def doc_pages(root: Path) -> list[Path]:
    """The pages whose blocks are tested: the Markdown files at the repository root and every
    Markdown file under ``docs/``."""
    pages = sorted(root.glob("*.md")) + sorted((root / "docs").rglob("*.md"))
    return [p for p in pages if p.is_file()]


def find_blocks(root: Path) -> list[Block]:
    """Every block of every page under ``root``, page by page, in the order they appear."""
    blocks: list[Block] = []
    for path in doc_pages(root):
        page = path.relative_to(root).as_posix()
        blocks.extend(parse_blocks(path.read_text(encoding="utf-8"), page))
    return blocks
