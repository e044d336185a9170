"""Runs the Python blocks of one documentation page, in order, in one namespace.

Started by ``tests/docs/test_docs.py`` in the page's scratch directory. Each request is one JSON
line on stdin: ``{"file": ..., "source": ..., "log": ...}``; the block's output (and that of
every process it starts) goes to the file ``log``, and the answer is one JSON line on the
original stdout: ``{"ok": true}`` or ``{"ok": false, "error": "<traceback>"}``.

A block runs as a module would (``__name__ == "__main__"``, so ``anyio.run(main)`` works); a
block that uses ``await`` at top level runs as in ``python -m asyncio``, on its own event loop.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import traceback
from typing import Any


def _run(source: str, filename: str, namespace: dict[str, Any]) -> None:
    code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if not code.co_flags & inspect.CO_COROUTINE:
        exec(code, namespace)
        return
    import anyio

    async def main() -> None:
        await eval(code, namespace)

    anyio.run(main)


def _redirect(path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    requests = os.fdopen(os.dup(0), encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # a block reading stdin (input()) sees its end, not the requests
    os.close(devnull)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    answer: dict[str, Any]
    for line in requests:
        request = json.loads(line)
        _redirect(request["log"])
        try:
            _run(request["source"], request["file"], namespace)
        except SystemExit as exc:
            answer = {"ok": exc.code in (None, 0), "error": f"SystemExit({exc.code!r})"}
        except Exception as exc:
            error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            answer = {"ok": False, "error": error}
        else:
            answer = {"ok": True}
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
