"""Every Python and shell block of README.md, the other root pages and docs/ runs (CONTRIBUTING.md,
"Writing docs").

Each block is one test, named ``page:line``. A page's Python blocks run in order in one namespace
(one worker process per page, ``tests/docs/page_worker.py``), in a scratch directory of the page,
on the embedded default: run the suite inside the loopback-only namespace
(``python -m agentrun.offline netns -- pytest tests/docs``). Shell blocks run with ``bash -e`` in
the same directory, with the virtualenv's ``bin`` first on ``PATH`` (``agentrun``, ``python``) and
``fixtures/`` (its files linked to the repository's), as if typed at the root of a clone. ``<!-- live -->``
blocks are compiled only, ``<!-- skip: reason -->`` blocks are skipped with their reason.
"""

from __future__ import annotations

import ast
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from doc_blocks import Block, find_blocks
from repo_paths import REPO

BLOCKS = find_blocks(REPO)
#: Seconds a block may take (a block may run several real agents).
BLOCK_TIMEOUT = 240
WORKER = Path(__file__).with_name("page_worker.py")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Page:
    """A page's scratch directory and, once a Python block ran, its worker."""

    directory: Path
    worker: subprocess.Popen[str] | None = None
    done: set[int] = field(default_factory=set[int])
    counter: int = 0

    def log(self) -> Path:
        self.counter += 1
        return self.directory.parent / f"{self.directory.name}-block{self.counter}.log"

    def run(self, block: Block) -> tuple[bool, str, str]:
        """Run a Python block in the page's worker: (ok, traceback, output)."""
        if self.worker is None or self.worker.poll() is not None:
            self.worker = subprocess.Popen(
                [sys.executable, str(WORKER)],
                cwd=self.directory,
                env=_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        log = self.log()
        worker = self.worker
        assert worker.stdin is not None and worker.stdout is not None
        request = {"file": str(REPO / block.page), "source": block.padded(), "log": str(log)}
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            answer = _read_line(worker, BLOCK_TIMEOUT)
        except BaseException:
            self.close()
            raise
        self.done.add(block.line)
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        if answer is None:
            self.close()
            return False, f"the worker ended or did not answer in {BLOCK_TIMEOUT} s", output
        reply = json.loads(answer)
        return bool(reply["ok"]), str(reply.get("error", "")), output

    def close(self) -> None:
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if worker.stdin is not None:
            worker.stdin.close()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


def _read_line(worker: subprocess.Popen[str], timeout: float) -> str | None:
    assert worker.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(worker.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    line = worker.stdout.readline()
    return line or None


class Pages:
    """The pages met so far, each with its scratch directory (``fixtures/`` linked in)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._pages: dict[str, Page] = {}

    def __getitem__(self, name: str) -> Page:
        if name not in self._pages:
            slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
            directory = self._factory.mktemp(slug)
            # Folders of their own, files linked: what a block writes under fixtures/ (a
            # recording) stays in the scratch directory, never in the repository.
            shutil.copytree(REPO / "fixtures", directory / "fixtures", copy_function=os.symlink)
            self._pages[name] = Page(directory)
        return self._pages[name]

    def close(self) -> None:
        for page in self._pages.values():
            page.close()


@pytest.fixture(scope="session")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    opened = Pages(tmp_path_factory)
    yield opened
    opened.close()


def _params() -> list[object]:
    params: list[object] = []
    for block in BLOCKS:
        # A page's blocks build on each other (files, names): one worker runs them all.
        marks = [pytest.mark.timeout(BLOCK_TIMEOUT + 30), pytest.mark.xdist_group(block.page)]
        if block.mode == "run":
            marks.append(pytest.mark.agent)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def _compile(block: Block) -> None:
    if block.lang == "python":
        compile(block.padded(), block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    done = subprocess.run(
        ["bash", "-n"], input=block.source, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{block.id}: bash -n failed:\n{done.stderr}"


def _run_python(block: Block, page: Page) -> None:
    # Earlier blocks of the page first (when this one was selected alone): it may build on them.
    for earlier in BLOCKS:
        if earlier.page != block.page or earlier.line >= block.line:
            continue
        if earlier.lang == "python" and earlier.mode == "run" and earlier.line not in page.done:
            ok, error, output = page.run(earlier)
            if not ok:
                pytest.fail(f"the earlier block {earlier.id} failed:\n{output}\n{error}")
    ok, error, output = page.run(block)
    print(output)
    if not ok:
        pytest.fail(f"{block.id} failed:\n--- output ---\n{output}\n--- error ---\n{error}")


def _run_shell(block: Block, page: Page) -> None:
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.source],
            cwd=page.directory,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id} did not finish in {BLOCK_TIMEOUT} s:\n{exc.stdout}\n{exc.stderr}")
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, (
        f"{block.id} exited {done.returncode} after {time.monotonic() - started:.1f} s:\n"
        f"--- stdout ---\n{done.stdout[-6000:]}\n--- stderr ---\n{done.stderr[-6000:]}"
    )


@pytest.mark.parametrize("block", _params())
def test_doc_block(block: Block, pages: Pages) -> None:
    if block.mode == "skip":
        pytest.skip(f"{block.id}: {block.reason}")
    if block.mode == "compile":
        _compile(block)
        return
    if block.lang == "python":
        _run_python(block, pages[block.page])
    else:
        _run_shell(block, pages[block.page])
