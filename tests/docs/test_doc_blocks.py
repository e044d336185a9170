"""How the docs tests read a page: which blocks, what their markers mean, where they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import DocsError, find_blocks, parse_blocks
from repo_paths import REPO

PAGE = """# A page

```python
print("runs")
```

<!-- live -->
```sh
agentrun run --live "hi"
```

<!-- skip: shows output -->
```python
>>> 1 + 1
```

```json
{"not": "collected"}
```

1. In a list:

   ```bash
   agentrun --help
   ```

````py
```nested```
````
"""


def test_blocks_markers_and_lines() -> None:
    blocks = parse_blocks(PAGE, "docs/page.md")
    got = [(b.id, b.lang, b.mode, b.reason) for b in blocks]
    assert got == [
        ("docs/page.md:3", "python", "run", ""),
        ("docs/page.md:8", "sh", "compile", "needs an account (live only): compiled, not run"),
        ("docs/page.md:13", "python", "skip", "shows output"),
        ("docs/page.md:23", "sh", "run", ""),
        ("docs/page.md:27", "python", "run", ""),
    ]
    assert blocks[3].source == "agentrun --help\n"  # a list item's block is dedented
    assert blocks[4].source == "```nested```\n"
    # Padded to the page's lines: a traceback names the line of the Markdown file.
    assert blocks[0].padded().splitlines()[3] == 'print("runs")'


def test_a_skip_must_say_why_and_a_fence_must_close() -> None:
    with pytest.raises(DocsError, match=r"docs/bad.md:1: a skipped block must say why"):
        parse_blocks("<!-- skip -->\n```python\npass\n```\n", "docs/bad.md")
    with pytest.raises(DocsError, match=r"docs/bad.md:2: the code fence is never closed"):
        parse_blocks("text\n```python\npass\n", "docs/bad.md")


def test_every_page_is_read_and_a_new_page_is_picked_up(tmp_path: Path) -> None:
    pages = {b.page for b in find_blocks(REPO)}
    assert {"README.md", "docs/turns.md", "docs/engines/writing-an-engine.md"} <= pages
    (tmp_path / "docs" / "new").mkdir(parents=True)
    (tmp_path / "docs" / "new" / "page.md").write_text("```sh\necho hi\n```\n")
    (tmp_path / "NOTES.md").write_text("```python\npass\n```\n")
    assert [b.id for b in find_blocks(tmp_path)] == ["NOTES.md:1", "docs/new/page.md:1"]


def test_the_documented_toy_engine_is_the_tested_one() -> None:
    # The page's python blocks: the echo driver first, then the toy engine's whole file.
    blocks = [b for b in find_blocks(REPO) if b.page == "docs/engines/writing-an-engine.md"
              and b.lang == "python"]  # fmt: skip
    toy = (REPO / "tests/engines/toy/toy_engine.py").read_text()
    (block,) = [b for b in blocks if b.source.startswith('"""A complete engine for the toy')]
    assert block.source == toy
