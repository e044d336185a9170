"""``agentrun view``: the page over journals, fleet results, compare reports and trajectories.

The browser tests load the page in a real headless Chromium (the distribution's package) over a
real fleet run of the embedded default, check the DOM, and keep a screenshot in the test's
temporary directory. The others read hostile and huge data and talk to the server directly.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.from_thread
import pytest
from browser_support import Browser
from repo_paths import REPO

from agentrun import (
    ConfigurationError,
    ErrorInfo,
    Fleet,
    FleetSessionRecord,
    FleetTask,
    FleetTurnRecord,
)
from agentrun._cli.fleet import CheckResult, TaskResult
from agentrun._cli.main import main
from agentrun._cli.view import export_view, render_page, serve_view
from agentrun._cli.view_data import (
    MAX_SESSION_CHARS,
    MAX_TEXT_CHARS,
    ViewCache,
    load_view,
    watched_files,
)
from agentrun._fleets.compare import CompareRun, FileDiff, FilesChanged
from agentrun._store.jsonl_store import JsonlSessionStore
from agentrun.trajectory import ATIF_VERSION

HOSTILE = (
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    "</script><!-- \x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x07link\x1b]8;;\x07 \u2028"
)


# -- data written as the library writes it ---------------------------------------------------


def _journal(directory: Path, journal_id: str, *, output: str, text: str = HOSTILE) -> Path:
    store = JsonlSessionStore(directory)
    records: list[dict[str, Any]] = [
        {"kind": "session", "at": "2026-01-01T00:00:00Z", "id": journal_id, "engine": "claude"},
        {"kind": "turn", "turn": 1, "prompt": text},
        {"kind": "message", "message": {"type": "text", "turn": 1, "text": text}},
        {"kind": "message", "message": {"type": "thinking", "turn": 1, "text": text}},
        {
            "kind": "message",
            "message": {
                "type": "tool_use",
                "turn": 1,
                "tool": {"id": "t1", "name": text[:40], "input": {"command": text}},
            },
        },
        {
            "kind": "message",
            "message": {"type": "tool_result", "turn": 1, "tool": {"id": "t1", "output": output}},
        },
        {
            "kind": "message",
            "message": {
                "type": "system",
                "turn": 1,
                "subtype": "permission",
                "data": {"title": text, "allowed": True, "option_kind": "allow_once"},
            },
        },
        {
            "kind": "message",
            "message": {
                "type": "result",
                "turn": 1,
                "denials": [{"tool_name": "Bash", "reason": text}],
            },
        },
        {
            "kind": "message",
            "message": {"type": "error", "turn": 1, "error": {"message": text, "code": "x"}},
        },
        {
            "kind": "summary",
            "turn": 1,
            "summary": {"turn": 1, "ok": True, "usage": {"output_tokens": 3}, "text": text},
        },
    ]
    for record in records:
        store.append(journal_id, record)
    store.close(journal_id)
    return store.path(journal_id)


def _long_trajectory(path: Path, steps: int) -> Path:
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "agent": {"name": "other", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "start " + HOSTILE}],
    }
    for index in range(2, steps + 1):
        doc["steps"].append(
            {
                "step_id": index,
                "source": "agent",
                "message": f"step {index} {HOSTILE}",
                "metrics": {"prompt_tokens": 1000 + index, "completion_tokens": 5},
            }
        )
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# -- without a browser -----------------------------------------------------------------------


def test_a_non_loopback_host_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "--host", "0.0.0.0", "--export", os.devnull]) == 2
    assert "loopback only" in capsys.readouterr().err
    assert main(["view", "--port", "70000"]) == 2
    assert "a port is 0 to 65535" in capsys.readouterr().err

    async def serve() -> None:
        await serve_view([], host="192.0.2.1")

    with pytest.raises(ConfigurationError, match="loopback only"):
        anyio.run(serve)


def test_hostile_text_never_leaves_the_data_script(tmp_path: Path) -> None:
    _journal(tmp_path / "journals", "j1", output=HOSTILE)
    html = export_view([tmp_path / "journals"], tmp_path / "report.html").read_text()
    # Our inline script and the JSON island are the only elements the document has before the
    # page's own script builds the rest; the data cannot end its element nor open a comment.
    assert html.count("<script") == 2
    data = re.search(r'<script type="application/json" id="agentrun-data">(.*?)</script>', html)
    assert data is not None
    assert "<" not in data.group(1) and ">" not in data.group(1)
    assert json.loads(data.group(1))["all_sessions"]["j1"]["items"][0]["text"] == HOSTILE
    # No address to load anything from, and a policy holding the page to its inline script.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", render_page())
    assert "default-src 'none'" in html and "connect-src 'none'" in html


def test_a_huge_tool_output_is_cut_with_a_marker(tmp_path: Path) -> None:
    _journal(tmp_path / "journals", "big", output="x" * (10 * 1024 * 1024))
    session = load_view([tmp_path / "journals"]).sessions["big"]
    (tool,) = [item for item in session["items"] if item["k"] == "tool"]
    assert len(tool["output"]) < MAX_TEXT_CHARS + 100
    assert tool["output"].endswith(f"[{10 * 1024 * 1024 - MAX_TEXT_CHARS} bytes more]")


def test_a_session_is_bounded_as_a_whole(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path / "journals")
    store.append("many", {"kind": "session", "id": "many", "engine": "claude"})
    for index in range(400):
        tool = {"id": f"t{index}", "name": "Bash", "input": {}}
        store.append("many", {"kind": "message", "message": {"type": "tool_use", "tool": tool}})
        result = {"id": f"t{index}", "output": "z" * 20_000}
        store.append(
            "many", {"kind": "message", "message": {"type": "tool_result", "tool": result}}
        )
    store.close("many")
    items = load_view([tmp_path / "journals"]).sessions["many"]["items"]
    assert len(items) == 400
    assert sum(len(item["output"]) for item in items) < MAX_SESSION_CHARS + 400 * 2_000
    assert items[-1]["output"].endswith(f"[{20_000 - MAX_TEXT_CHARS // 10} bytes more]")


def test_permission_decisions_are_items(tmp_path: Path) -> None:
    _journal(tmp_path / "journals", "j1", output="ok")
    items = load_view([tmp_path / "journals"]).sessions["j1"]["items"]
    decisions = [(i["decision"], i["tool"]) for i in items if i["k"] == "permission"]
    assert decisions == [("allowed", HOSTILE[:200]), ("denied", "Bash")]


def test_only_the_files_that_changed_are_read_again(tmp_path: Path) -> None:
    _journal(tmp_path / "journals", "a", output="ok")
    grown = _journal(tmp_path / "journals", "b", output="ok")
    cache: ViewCache = {}
    load_view([tmp_path / "journals"], cache)
    kept = {name: part for name, (_key, part) in cache.items()}
    with grown.open("a") as journal:
        journal.write(json.dumps({"kind": "turn", "turn": 2, "prompt": "more"}) + "\n")
    data = load_view([tmp_path / "journals"], cache)
    assert cache[str(grown.with_name("a.jsonl"))][1] is kept[str(grown.with_name("a.jsonl"))]
    assert cache[str(grown)][1] is not kept[str(grown)]
    assert data.sessions["b"]["items"][-1]["text"] == "more"


def test_fleet_results_beside_the_journals_are_told_apart(tmp_path: Path) -> None:
    _journal(tmp_path / "runs", "20260101T000000-abcdef", output="ok")
    record = FleetTurnRecord(task="t", engine="claude", turn=1, ok=False, text="x")
    (tmp_path / "runs" / "results.jsonl").write_text(record.model_dump_json() + "\n")
    runs = load_view([tmp_path / "runs"]).runs
    assert sorted((r["kind"], r["engine"]) for r in runs) == [
        ("fleet", "claude"),
        ("journal", "claude"),
    ]


def test_a_fleet_directory_links_each_result_to_the_journal_it_names(tmp_path: Path) -> None:
    """``agentrun fleet``'s output: a result opens the journal it names (not one whose turns
    look the same), an attempt Ctrl-C cut short is no row, a task still running is one."""
    out = tmp_path / "fleet-results"
    _journal(out / "journals" / "a", "20260101T000000-aaaaaa", output="ok", text="same")
    _journal(out / "journals" / "a", "20260101T000001-bbbbbb", output="ok", text="same")
    running = out / "journals" / "b" / "20260101T000002-cccccc.jsonl"
    running.parent.mkdir()
    running.write_text(
        json.dumps({"kind": "session", "at": "2026-01-01T00:00:02Z", "engine": "codex"})
        + "\n"
        + json.dumps({"kind": "turn", "turn": 1, "prompt": "count to ten"})
        + "\n"
    )
    result = TaskResult(
        task="a",
        engine="claude",
        line=1,
        ok=False,
        session=FleetSessionRecord(task="a", engine="claude", ok=True, turns=1),
        check=CheckResult(command=["false"], ok=False, exit_code=1, output="not there"),
        journal_id="20260101T000001-bbbbbb",
    )
    (out / "results.jsonl").write_text(result.model_dump_json() + "\n")
    data = load_view([out])
    assert data.problems == []
    rows = {r["task"]: r for r in data.runs}
    assert sorted(rows) == ["a", "b"]
    assert rows["a"]["kind"] == "fleet" and rows["a"]["session"] == "20260101T000001-bbbbbb"
    assert (rows["a"]["ok"], rows["a"]["check"]) == (False, "failed")
    assert rows["a"]["error"].startswith("check exited 1: not there")
    assert rows["b"]["kind"] == "journal" and rows["b"]["running"] is True
    assert str(running) in watched_files([out])


def test_a_compare_report_opens_as_runs_with_their_workspace_changes(tmp_path: Path) -> None:
    runs = [
        CompareRun(engine="claude", ok=True, text=HOSTILE, cost_usd=0.5, tool_calls=2,
                   files_changed=FilesChanged(added=["new.py"], modified=["a.py"])),
        CompareRun(engine="opencode", model="m", ok=False,
                   error=ErrorInfo(message="boom", code="process_exit")),
    ]  # fmt: skip
    report = tmp_path / "compare.json"
    report.write_text(json.dumps([run.model_dump(mode="json") for run in runs]))
    data = load_view([report])
    assert [(r["task"], r["ok"], r["cost_usd"]) for r in data.runs] == [
        ("claude", True, 0.5),
        ("opencode:m", False, None),
    ]
    diff = data.sessions[data.runs[0]["session"]]["items"][1]
    assert (diff["k"], diff["added"], diff["modified"]) == ("diff", ["new.py"], ["a.py"])
    assert data.runs[1]["error"] == "boom"


def test_a_run_s_file_diffs_are_shown_as_text_and_cut_with_a_marker(tmp_path: Path) -> None:
    changed = FilesChanged(
        added=["<script>x.txt"],
        modified=["a.py", "blob.bin"],
        diffs=[
            FileDiff(path="<script>x.txt", status="added", diff=f"+{HOSTILE}\n"),
            FileDiff(path="a.py", status="modified", diff="-" + "x" * (2 * MAX_TEXT_CHARS)),
            FileDiff(path="blob.bin", status="modified", skipped="binary"),
            FileDiff(path="cut.py", status="added", diff="+kept\n", more_bytes=1234),
        ],
    )
    report = tmp_path / "compare.json"
    report.write_text(json.dumps([CompareRun(engine="claude", ok=True, files_changed=changed)
                                  .model_dump(mode="json")]))  # fmt: skip
    page = export_view([report], tmp_path / "report.html")
    html = page.read_text()
    island = re.search(r'<script type="application/json" id="agentrun-data">(.*?)</script>', html)
    assert island is not None and "<" not in island.group(1) and "\x1b" not in island.group(1)
    data = json.loads(island.group(1))
    (session,) = data["all_sessions"].values()
    (item,) = [i for i in session["items"] if i["k"] == "diff"]
    shown = {d["path"]: d for d in item["diffs"]}
    assert shown["<script>x.txt"]["diff"] == f"+{HOSTILE}\n"
    # Cut at the page's bound or already cut by the run: both say how much more there was.
    assert shown["a.py"]["diff"].endswith(f"[{2 * MAX_TEXT_CHARS + 1 - MAX_TEXT_CHARS} bytes more]")
    assert shown["cut.py"]["diff"] == "+kept\n\n… [1234 bytes more]"
    assert (shown["blob.bin"]["skipped"], shown["blob.bin"]["diff"]) == ("binary", "")
    # The page puts each diff in as text, monospace.
    with Browser(tmp_path / "profile") as browser:
        browser.open(page.as_uri() + "#session=" + quote(next(iter(data["all_sessions"]))))
        browser.wait_for("document.querySelector('.diff pre.patch') !== null")
        assert browser.evaluate("window.__pwned") is None
        assert browser.evaluate("document.querySelectorAll('img, iframe, object').length") == 0
        assert browser.evaluate("document.querySelectorAll('script').length") == 2
        text = browser.evaluate("document.querySelector('.diff').textContent")
        assert "+ <script>x.txt" in text and "<script>window.__pwned = 1</script>" in text
        assert "\x1b" not in text and "\\u001b[31mred" in text
        assert "[1234 bytes more]" in text and "not diffed: binary" in text
        font = "getComputedStyle(document.querySelector('.diff pre.patch')).fontFamily"
        assert "monospace" in browser.evaluate(font)


def test_what_cannot_be_read_is_listed_not_raised(tmp_path: Path) -> None:
    (tmp_path / "odd.json").write_text('{"neither": 1}')
    (tmp_path / "bad.jsonl").write_text('{"task": 1}\n{"torn"')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    data = load_view([tmp_path / "odd.json", tmp_path / "bad.jsonl", tmp_path / "deep.json"])
    assert data.runs == []
    assert len(data.problems) == 3, data.problems


BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])


@contextmanager
def _server(paths: list[Path], backend: str, poll: float = 0.05) -> Iterator[str]:
    """``serve_view`` on an event loop in another thread; yields the URL."""
    ready = threading.Event()
    url: list[str] = []

    def on_ready(address: str) -> None:
        url.append(address)
        ready.set()

    with anyio.from_thread.start_blocking_portal(backend) as portal:
        served = portal.start_task_soon(
            functools.partial(serve_view, paths, on_ready=on_ready, poll_interval=poll)
        )
        assert ready.wait(30)
        try:
            yield url[0]
        finally:
            served.cancel()


def _http(url: str, target: str, host: str | None = None) -> tuple[int, bytes]:
    address = url.split("//")[1].rstrip("/")
    name, port = address.rsplit(":", 1)
    with socket.create_connection((name, int(port)), timeout=30) as conn:
        conn.sendall(
            f"GET {target} HTTP/1.1\r\nhost: {address if host is None else host}\r\nconnection: close\r\n\r\n".encode()
        )
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@BACKENDS
def test_the_server_answers_loopback_names_only(tmp_path: Path, backend: str) -> None:
    _journal(tmp_path / "journals", "j1", output="ok")
    with _server([tmp_path / "journals"], backend) as url:
        status, body = _http(url, "/api/data")
        assert status == 200 and json.loads(body)["runs"][0]["session"] == "j1"
        assert _http(url, "/api/session?id=j1")[0] == 200
        assert _http(url, "/api/session?id=nope")[0] == 404
        # A page on another site reaching 127.0.0.1 through its own name (DNS rebinding).
        assert _http(url, "/api/data", host="evil.example:80")[0] == 403
        for name in ("localhost", "[::1]", "[::1]:80", "127.0.0.2:1"):
            assert _http(url, "/api/data", host=name)[0] == 200, name
        for name in ("", "[::2]:80", "127.0.0.1.evil.example"):
            assert _http(url, "/api/data", host=name)[0] == 403, name


@BACKENDS
def test_a_growing_journal_is_pushed_as_an_event(tmp_path: Path, backend: str) -> None:
    path = _journal(tmp_path / "journals", "j1", output="ok")
    with _server([tmp_path / "journals"], backend) as url:
        address = url.split("//")[1].rstrip("/")
        name, port = address.rsplit(":", 1)
        with socket.create_connection((name, int(port)), timeout=30) as conn:
            conn.sendall(f"GET /events HTTP/1.1\r\nhost: {address}\r\n\r\n".encode())
            reader = conn.makefile("rb")
            first = _next_event(reader)
            with path.open("a") as journal:  # a new turn, appended as the store appends it
                journal.write(json.dumps({"kind": "turn", "turn": 2, "prompt": "more"}) + "\n")
            second = _next_event(reader)
        assert second["version"] == first["version"] + 1
        session = json.loads(_http(url, "/api/session?id=j1")[1])
        assert session["items"][-1] == {"k": "prompt", "turn": 2, "text": "more"}


def _next_event(reader: Any) -> dict[str, Any]:
    while True:
        line = reader.readline()
        assert line, "the event stream ended"
        if line.startswith(b"data: "):
            return json.loads(line[6:])


# -- in a browser ----------------------------------------------------------------------------


async def _fleet(directory: Path, names: list[str]) -> None:
    """A real fleet of the embedded default (Claude Code on the scripted model server),
    journaled, its results written as JSON lines."""
    from agentrun.offline import ModelServer, embedded_engine

    engines: dict[str, Any] = {}
    tasks: list[FleetTask] = []
    async with AsyncExitStack() as stack:
        for name in names:
            server = await stack.enter_async_context(ModelServer())
            workspace = directory / name / "workspace"
            workspace.mkdir(parents=True)
            engine, options = embedded_engine(
                "claude", server.url, directory / name / "agent", cwd=str(workspace)
            )
            engines[name] = engine
            tasks.append(
                FleetTask(
                    engine="claude",
                    prompts=("run the check", "and again"),
                    options=options,
                    name=name,
                    timeout=120,
                )
            )
        store = JsonlSessionStore(directory / "journals")
        fleet = Fleet(limit=2, engine_factory=lambda t: engines[t.name or ""], journal=store)
        result = await fleet.run(tasks)
    assert result.ok, result.table()
    with (directory / "results.jsonl").open("a") as out:
        out.write(result.to_jsonl())


@contextmanager
def _view_command(paths: list[Path]) -> Iterator[str]:
    """``agentrun view PATHS`` as a user starts it; yields the URL it prints."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentrun", "view", *map(str, paths)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("agentrun view: http://127.0.0.1:"), line
        yield line.split(": ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.agent
def test_the_page_over_a_real_fleet_live(tmp_path: Path) -> None:
    anyio.run(_fleet, tmp_path, ["check-a", "check-b"])
    paths = [tmp_path / "journals", tmp_path / "results.jsonl"]
    with _view_command(paths) as url, Browser(tmp_path / "profile") as browser:
        browser.open(url)
        assert browser.wait_for("document.querySelectorAll('tr.run').length === 2")
        tasks = browser.evaluate(
            "[...document.querySelectorAll('tr.run td:first-child')].map(td => td.textContent)"
        )
        assert sorted(tasks) == ["check-a", "check-b"]
        assert browser.evaluate("document.querySelectorAll('#chart-cost svg rect').length") == 2
        assert browser.evaluate("document.querySelectorAll('#chart-tokens svg rect').length") >= 2
        assert browser.wait_for("document.querySelector('.live.on') !== null")
        # Sorted by a column (twice: descending), filtered by the box.
        walls = "[...document.querySelectorAll('tr.run')].map(tr => tr.children[11].textContent)"
        for _ in range(2):
            browser.evaluate("document.querySelector('th[data-key=duration_s]').click()")
        shown = [float(w.rstrip("s")) for w in browser.evaluate(walls)]
        assert shown == sorted(shown, reverse=True)
        browser.evaluate(
            "const box = document.querySelector('header input'); box.value = 'check-b';"
            "box.dispatchEvent(new Event('input'))"
        )
        assert browser.evaluate("document.querySelectorAll('tr.run').length") == 1
        browser.evaluate(
            "const box2 = document.querySelector('header input'); box2.value = '';"
            "box2.dispatchEvent(new Event('input'))"
        )
        browser.screenshot(tmp_path / "runs.png")

        # A row opens its session as a conversation: the tool call with its result.
        browser.evaluate("document.querySelector('tr.run a').click()")
        browser.wait_for("document.querySelector('#conversation [data-tool]') !== null")
        tool = browser.evaluate("document.querySelector('#conversation [data-tool]').textContent")
        assert "Bash" in tool and "hello from agentrun" in tool
        assert browser.evaluate("document.querySelectorAll('#chart-context svg circle').length")
        assert "match the turn's" in browser.evaluate("document.body.textContent")
        browser.screenshot(tmp_path / "session.png")

        # Live: another fleet runs while the page is open; its session arrives in place.
        browser.evaluate("location.hash = ''")
        browser.wait_for("document.querySelectorAll('tr.run').length === 2")
        version = browser.evaluate("Number(document.getElementById('main').dataset.version)")
        anyio.run(_fleet, tmp_path, ["check-c"])
        browser.wait_for(
            "[...document.querySelectorAll('tr.run td:first-child')]"
            ".some(td => td.textContent === 'check-c')"
        )
        assert browser.evaluate("document.querySelectorAll('tr.run').length") == 3
        assert browser.evaluate("Number(document.getElementById('main').dataset.version)") > version
        assert browser.evaluate("window.performance.navigation.type") == 0  # never reloaded
        browser.screenshot(tmp_path / "live.png", height=460)
    for name in ("runs.png", "session.png", "live.png"):
        assert (tmp_path / name).stat().st_size > 10_000


@pytest.mark.agent
def test_the_export_opens_with_the_network_off(tmp_path: Path) -> None:
    anyio.run(_fleet, tmp_path, ["check-a"])
    report = tmp_path / "report.html"
    assert main(["view", str(tmp_path / "journals"), str(tmp_path / "results.jsonl"),
                 "--export", str(report)]) == 0  # fmt: skip
    with Browser(tmp_path / "profile") as browser:
        browser.command("Network.enable", session=True)
        browser.command(
            "Network.emulateNetworkConditions",
            session=True,
            offline=True,
            latency=0,
            downloadThroughput=-1,
            uploadThroughput=-1,
        )
        browser.open(report.as_uri())
        assert browser.wait_for("document.querySelectorAll('tr.run').length === 1")
        browser.evaluate("document.querySelector('tr.run a').click()")
        browser.wait_for("document.querySelector('#conversation [data-tool]') !== null")
        browser.screenshot(tmp_path / "export.png")
        requested = [
            e["params"]["request"]["url"]
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
    assert requested and all(u.startswith(("file:", "data:", "about:")) for u in requested)


def test_hostile_and_huge_data_render_as_text_within_bounds(tmp_path: Path) -> None:
    _journal(tmp_path / "journals", "hostile", output="y" * (10 * 1024 * 1024))
    trajectory = _long_trajectory(tmp_path / "long.json", 10_000)
    report = export_view([tmp_path / "journals", trajectory], tmp_path / "report.html")
    assert report.stat().st_size < 8 * 1024 * 1024
    with Browser(tmp_path / "profile") as browser:
        browser.open(report.as_uri() + "#session=hostile")
        browser.wait_for("document.querySelector('#conversation [data-tool]') !== null")
        assert browser.evaluate("window.__pwned") is None
        # Nothing the data held became an element: no image, no script but the page's own.
        assert browser.evaluate("document.querySelectorAll('img, iframe, object').length") == 0
        assert browser.evaluate("document.querySelectorAll('script').length") == 2
        text = browser.evaluate("document.getElementById('conversation').textContent")
        assert "<script>window.__pwned = 1</script>" in text
        # A terminal's escape shows as JSON writes it, and does nothing.
        assert "\x1b" not in text and "\\u001b[31mred" in text
        assert f"[{10 * 1024 * 1024 - MAX_TEXT_CHARS} bytes more]" in text
        browser.screenshot(tmp_path / "hostile.png")

        browser.evaluate(f"location.hash = 'session=' + encodeURIComponent('atif:{trajectory}')")
        browser.wait_for("document.getElementById('more') !== null")
        shown = browser.evaluate("document.querySelectorAll('#conversation > *').length")
        assert 0 < shown <= 200
        assert "not shown" in browser.evaluate("document.getElementById('more').textContent")
        browser.evaluate("document.getElementById('more').click()")
        assert browser.wait_for("document.querySelectorAll('#conversation > *').length > 200")
        assert browser.evaluate("window.__pwned") is None

    # The served page inserts the same data the same way.
    with _server([tmp_path / "journals"], "asyncio") as url, Browser(tmp_path / "p2") as browser:
        browser.open(url + "#session=hostile")
        browser.wait_for("document.querySelector('#conversation [data-tool]') !== null")
        assert browser.evaluate("document.querySelectorAll('img, iframe, object').length") == 0
        assert browser.evaluate("document.querySelectorAll('script').length") == 1
        assert browser.evaluate("window.__pwned") is None
        assert "<script>window.__pwned = 1</script>" in browser.evaluate(
            "document.getElementById('conversation').textContent"
        )
