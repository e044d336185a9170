"""``agentrun fleet --view``: the fleet watched in a real headless Chromium while it runs,
interrupted, resumed, and exported as one report, all through the command a user types.

Every wait is on a condition (a line on standard error, a DOM state) with a bound on a hang;
screenshots are kept in the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from browser_support import Browser
from repo_paths import REPO

from agentrun._cli.fleet import TaskResult

pytestmark = pytest.mark.agent

# One model answer that takes a while (a chunk of text a second), so a task is still running
# when the page is looked at and when the fleet is interrupted.
SLOW_SCRIPT = [
    {
        "blocks": [{"type": "text", "text": "one two three four five six seven eight nine ten"}],
        "chunk_delay": 1,
        "chunk_chars": 4,
    }
]
TASKS = [
    {"name": "slow-1", "engine": "claude", "prompt": "count to ten", "script": "slow.json"},
    {"name": "quick", "engine": "claude", "prompt": "check the shell", "check": "true"},
    {
        "name": "greeting",
        "engine": "codex",
        "prompt": "check the shell",
        "workspace": "repo",
        "check": ["grep", "-q", "hello", "README.md"],
    },
    {"name": "missing", "engine": "codex", "prompt": "check the shell", "check": "test -f NOPE"},
]
ROWS = "document.querySelectorAll('tr.run')"
TASK_CELLS = "[...document.querySelectorAll('tr.run td:first-child')].map(td => td.textContent)"


def _row_state(task: str, column: int = 3) -> str:
    """A cell of ``task``'s row on the page ('' without the row): by default its ok cell
    (``running``, ``yes``, ``no``); column 4, its check's verdict (``passed``, ``failed``)."""
    return (
        "(() => { const row = [...document.querySelectorAll('tr.run')].find("
        f"tr => tr.children[0].textContent === {json.dumps(task)});"
        f" return row ? row.children[{column}].textContent : ''; }})()"
    )


class _Command:
    """``agentrun ...`` as a user starts it, its standard error read line by line."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentrun", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: list[str] = []
        self.out = ""
        self._seen = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_out, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        self.out = self.process.stdout.read()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self.lines.append("")  # the end
            self._seen.notify_all()

    def line(self, starts: str, *, within: float = 300) -> str:
        """The first line of standard error that starts with ``starts`` (waited for, with a
        bound on a hang)."""

        def found() -> str | None:
            return next((ln for ln in self.lines if ln.startswith(starts)), None)

        with self._seen:
            ok = self._seen.wait_for(lambda: found() is not None or "" in self.lines, within)
        line = found()
        assert ok and line is not None, f"no line {starts!r} in {self.lines}"
        return line

    def stop(self, *, within: float = 120) -> tuple[int, str]:
        """Ctrl-C (SIGINT, as a terminal sends it); the exit status and standard output."""
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(timeout=within)
        for reader in self._readers:
            reader.join(timeout=30)
        return status, self.out

    def close(self) -> None:
        """Killed if still running; its pipes closed."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        for reader in self._readers:
            reader.join(timeout=30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def _results(path: Path) -> list[TaskResult]:
    return [TaskResult.model_validate_json(t) for t in path.read_text().splitlines() if t.strip()]


def test_watch_interrupt_resume_and_export_a_fleet(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "README.md").write_text("hello\n")
    (tmp_path / "slow.json").write_text(json.dumps(SLOW_SCRIPT))
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    results = tmp_path / "out" / "results.jsonl"

    fleet = _Command(["fleet", "tasks.jsonl", "-j", "2", "--out", "out", "--view"], tmp_path)
    try:
        url = fleet.line("agentrun view: http://127.0.0.1:").split(": ", 1)[1]
        with Browser(tmp_path / "profile") as browser:
            browser.open(url)
            browser.wait_for("document.querySelector('.live.on') !== null")
            version = browser.evaluate("Number(document.getElementById('main').dataset.version)")
            # Live, turn by turn: the slow task is a row while its agent still works (its
            # journal grows), and a finished task's row arrives with its check's verdict.
            assert browser.wait_for(f"{_row_state('slow-1')} === 'running'", within=180)
            assert browser.wait_for(f"{_row_state('quick', 4)} === 'passed'", within=180)
            assert browser.evaluate(_row_state("quick")) == "yes"
            assert browser.evaluate(f"{_row_state('slow-1')}") == "running"
            assert browser.evaluate("window.performance.navigation.type") == 0  # no reload
            # An update arrives in place while slow-1 still runs (on a fast machine the page's
            # first data may already hold both rows, so the update is waited for, not assumed).
            assert browser.wait_for(
                f"Number(document.getElementById('main').dataset.version) > {version}",
                within=180,
            )
            browser.screenshot(tmp_path / "live-fleet.png")

            # Ctrl-C while slow-1 runs: a valid results file, the command to go on, the page's
            # server gone with the fleet.
            assert "quick" in {r.task for r in _results(results)}
            status, _ = fleet.stop()
            assert status == 130, fleet.lines
            browser.wait_for("document.querySelector('.live.on') === null")
        resume_line = fleet.line("agentrun: interrupted;")
        done = _results(results)
        assert "slow-1" not in {r.task for r in done}
        resume = shlex.split(resume_line.split("resume with: ", 1)[1])
        assert resume[:2] == ["agentrun", "fleet"] and "--view" in resume
        assert resume[resume.index("--resume") + 1] == str(Path("out") / "results.jsonl")
    finally:
        fleet.close()

    # The resume command as printed: the rest runs, and the page stays until Ctrl-C. slow-1 need
    # no longer be slow: its answer comes at once.
    (tmp_path / "slow.json").write_text(json.dumps([{**SLOW_SCRIPT[0], "chunk_delay": 0}]))
    again = _Command(resume[1:], tmp_path)
    try:
        url = again.line("agentrun view: http://127.0.0.1:").split(": ", 1)[1]
        again.line("agentrun: the fleet is done; the view stays at")
        with Browser(tmp_path / "profile-2") as browser:
            browser.open(url)
            browser.wait_for(f"{ROWS}.length === 4")
            assert sorted(browser.evaluate(TASK_CELLS)) == [
                "greeting",
                "missing",
                "quick",
                "slow-1",
            ]
            rates = browser.evaluate(
                "Object.fromEntries([...document.querySelectorAll('section.engine')].map(s =>"
                " [s.dataset.engine, s.querySelector('.pass-rate b').textContent]))"
            )
            assert rates == {"claude": "2/2 (100.0%)", "codex": "1/2 (50.0%)"}
            assert browser.evaluate(_row_state("missing")) == "no"
            browser.screenshot(tmp_path / "resumed.png")
            # A task opens as its conversation, from the journal its result names.
            browser.evaluate(
                "[...document.querySelectorAll('tr.run a')]"
                ".find(a => a.textContent === 'slow-1').click()"
            )
            browser.wait_for("document.querySelector('#conversation') !== null")
            assert "count to ten" in browser.evaluate(
                "document.getElementById('conversation').textContent"
            )
        status, out = again.stop()
        assert status == 1, again.lines  # 'missing' failed its check; nothing was interrupted
        assert "4 tasks, 3 passed, 1 failed" in out
    finally:
        again.close()
    assert sorted(r.task for r in _results(results)) == ["greeting", "missing", "quick", "slow-1"]

    # The report: one file, opened with the network off, every task once.
    exported = subprocess.run(
        [sys.executable, "-m", "agentrun", "view", "out", "--export", "report.html"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    with Browser(tmp_path / "profile-3") as browser:
        browser.command("Network.enable", session=True)
        browser.command(
            "Network.emulateNetworkConditions",
            session=True,
            offline=True,
            latency=0,
            downloadThroughput=-1,
            uploadThroughput=-1,
        )
        browser.open((tmp_path / "report.html").as_uri())
        browser.wait_for(f"{ROWS}.length > 0")
        assert sorted(browser.evaluate(TASK_CELLS)) == ["greeting", "missing", "quick", "slow-1"]
        assert browser.evaluate("document.querySelectorAll('tr.run a').length") == 4
        browser.screenshot(tmp_path / "report.png")
        requested = [
            e["params"]["request"]["url"]
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
    assert requested and all(u.startswith(("file:", "data:", "about:")) for u in requested)
    for name in ("live-fleet.png", "resumed.png", "report.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_a_view_port_in_use_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASKS[1]) + "\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        command = ["fleet", "tasks.jsonl", "--view", "--view-port", port, "--out", "out"]
        done = subprocess.run(
            [sys.executable, "-m", "agentrun", *command],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"agentrun: --view-port {port}: cannot listen"), line
    assert list((tmp_path / "out").iterdir()) == []  # no results file, no journal
