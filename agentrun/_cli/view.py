"""``agentrun view [PATH ...]``: one local page over journals, fleet results, compare reports and
ATIF trajectories, served on 127.0.0.1 (or written as one file with ``--export``).

The server is the library's own small HTTP/1.1 layer on anyio (the model server's), so the
command needs no extra. It serves the page, the data as JSON and one Server-Sent Events stream
that says when a watched file grew (journals and results grow by appended lines), so a running
fleet or session is watched, not polled by the page. It listens on loopback only and answers
only requests addressed to a loopback name (a page elsewhere cannot reach it through DNS
rebinding). The page is one HTML document with its script and style inline (no CDN, nothing
fetched from elsewhere; a Content-Security-Policy holds it to that) and inserts every string of
the data as text, never as markup.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import ipaddress
import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import anyio.to_thread

from .._vocabulary.errors import ConfigurationError
from ..offline._http import HttpRequest, Limits, Responder, dumps, serve_connection
from .view_data import ViewCache, ViewData, default_paths, load_view, watched_files

__all__ = ["add_parser", "export_view", "render_page", "serve_view", "view"]

#: Seconds between two looks at the watched files.
POLL_INTERVAL = 0.3
#: Seconds between keep-alive comments on an idle event stream.
KEEPALIVE_INTERVAL = 15.0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = cast(
        argparse.ArgumentParser,
        sub.add_parser(
            "view",
            help="a local page over sessions, fleet results, compare reports and trajectories",
            description="Serve one page on 127.0.0.1 over journals (a directory of them, or "
            "one), fleet results (JSON lines), compare reports (agentrun compare --json) and "
            "ATIF trajectories; it updates itself while they grow. Default: the journal store.",
        ),
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="what to show")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address")
    parser.add_argument(
        "--port", type=port_number, default=0, help="the port (default: any free one)"
    )
    parser.add_argument("--export", metavar="FILE", help="write one static HTML file and exit")
    return parser


def port_number(text: str) -> int:
    """A ``--port`` argument: 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {text}")
    return value


def view(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.paths] or default_paths()
    _check_host(args.host)
    if args.export:
        written = export_view(paths, Path(args.export))
        print(f"agentrun view: wrote {written}", flush=True)
        return 0

    def ready(url: str) -> None:
        print(f"agentrun view: {url}", flush=True)

    # Stopped by Ctrl-C (exit 130, as every command).
    anyio.run(lambda: serve_view(paths, host=args.host, port=args.port, on_ready=ready))
    return 0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_host(host: str) -> None:
    if not is_loopback(host):
        raise ConfigurationError(
            f"agentrun view listens on loopback only, not {host!r}", option="host"
        )


def _asset(name: str) -> str:
    return resources.files(__package__ or "agentrun._cli").joinpath(name).read_text("utf-8")


def _json_for_script(value: Any) -> str:
    """JSON that cannot end the ``<script>`` element holding it, nor open a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render_page(embedded: dict[str, Any] | None = None) -> str:
    """The page: served (it fetches its data and follows the event stream) or, with
    ``embedded`` data, a static document that fetches nothing."""
    script = _asset("view_page.js")
    style = _asset("view_page.css")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    connect = "'none'" if embedded is not None else "'self'"
    policy = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        f"img-src data:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )
    data = (
        f'<script type="application/json" id="agentrun-data">{_json_for_script(embedded)}</script>'
        if embedded is not None
        else ""
    )
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>agentrun view</title><style>{style}</style></head>"
        f"<body>{data}<script>{script}</script></body></html>\n"
    )


def export_view(paths: Sequence[Path], dest: Path) -> Path:
    """Write the page with every run and session in it to ``dest``: one file that opens with
    no server and no network."""
    data = load_view(paths)
    embedded = data.summary() | {"all_sessions": data.sessions, "version": 0}
    dest.write_text(render_page(embedded), encoding="utf-8")
    return dest


class _ViewState:
    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self.data = ViewData()
        self.files: dict[str, tuple[int, int]] = {}
        self.version = 0
        self.changed = anyio.Event()
        self.cache: ViewCache = {}

    async def refresh(self) -> bool:
        files = await anyio.to_thread.run_sync(watched_files, self.paths)
        if files == self.files and self.version:
            return False
        # Only the files that changed are read again.
        self.data = await anyio.to_thread.run_sync(load_view, self.paths, self.cache)
        self.files = files
        self.version += 1
        self.changed.set()
        self.changed = anyio.Event()
        return True


async def serve_view(
    paths: Sequence[str | Path],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[str], None] | None = None,
    poll_interval: float = POLL_INTERVAL,
) -> None:
    """Serve the page over ``paths`` on ``host`` (loopback only: anything else is a
    :class:`ConfigurationError`) until cancelled; ``on_ready`` gets the page's URL. The
    watched files are looked at every ``poll_interval`` seconds; a change goes to every open
    page as an event."""
    _check_host(host)
    state = _ViewState([Path(p) for p in paths])
    await state.refresh()
    page = render_page().encode()
    errors: list[Exception] = []

    async def handle(req: HttpRequest, out: Responder) -> bool:
        return await _handle(req, out, state, page)

    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with listener, anyio.create_task_group() as tg:
        bound = listener.extra(anyio.abc.SocketAttribute.local_address)
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
        url = f"http://{shown}:{bound[1]}/"

        async def watch() -> None:
            while True:
                await anyio.sleep(poll_interval)
                await state.refresh()

        async def serve(conn: anyio.abc.SocketStream) -> None:
            await serve_connection(conn, handle, Limits(max_body_bytes=64 * 1024), errors)

        tg.start_soon(watch)
        tg.start_soon(listener.serve, serve)
        if on_ready is not None:
            on_ready(url)


_HEADERS = [
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
]


async def _handle(req: HttpRequest, out: Responder, state: _ViewState, page: bytes) -> bool:
    keep = req.keep_alive
    if not is_loopback(_host_name(req.header("host") or "")):
        await out.send_json(403, {"error": "not a loopback host"}, False, headers=_HEADERS)
        return False
    if req.method not in ("GET", "HEAD"):
        await out.send_json(405, {"error": "GET only"}, keep, headers=_HEADERS)
        return keep
    head = req.method == "HEAD"
    if req.path == "/":
        await out.start(
            200,
            [("content-type", "text/html; charset=utf-8"), *_HEADERS],
            length=len(page),
            keep_alive=keep,
        )
        if not head:
            await out.write(page)
        return keep
    if req.path == "/api/data":
        body = state.data.summary() | {"version": state.version}
        await out.send_json(200, body, keep, head=head, headers=_HEADERS)
        return keep
    if req.path == "/api/session":
        wanted = _query(req.query).get("id", "")
        session = state.data.sessions.get(wanted)
        if session is None:
            await out.send_json(404, {"error": "no such session"}, keep, headers=_HEADERS)
        else:
            await out.send_json(200, session, keep, head=head, headers=_HEADERS)
        return keep
    if req.path == "/events":
        await out.start_events(chunked=False, keep_alive=False, headers=_HEADERS)
        seen = -1
        while True:
            if state.version != seen:
                seen = state.version
                await out.event(dumps({"version": seen}), name="version")
            changed = state.changed
            with anyio.move_on_after(KEEPALIVE_INTERVAL):
                await changed.wait()
                continue
            await out.write(b": keep-alive\n\n")
    await out.send_json(404, {"error": "not found"}, keep, headers=_HEADERS)
    return keep


def _host_name(header: str) -> str:
    """The name of a ``Host`` header: ``[::1]:8080`` -> ``::1``, ``localhost:80`` ->
    ``localhost``."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if ":" in header else header


def _query(text: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(text, max_num_fields=20))
