"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ended by a NUL byte, commands on the browser's fd 3, answers on its fd 4), so the
tests need no WebSocket client. Chromium comes from the distribution's packages (``make
chromium`` installs it where root and apt-get are there); a test skips when it is missing."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

__all__ = ["Browser", "chromium_or_skip"]

_PROGRAMS = ("chromium", "chromium-browser", "google-chrome")


def chromium_or_skip() -> str:
    for name in _PROGRAMS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium installed (make chromium installs it)")


class BrowserError(Exception):
    pass


class Browser:
    """One headless browser with one page. ``evaluate`` runs JavaScript in the page and returns
    its value; ``wait_for`` evaluates until the expression is true (or fails after ``within``
    seconds, a bound on a hang, not a timing claim)."""

    def __init__(self, profile: Path, *, width: int = 1280, height: int = 900) -> None:
        self.program = chromium_or_skip()
        self.profile = profile
        self.size = (width, height)
        self.events: list[dict[str, Any]] = []
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next = 0
        self.session = ""

    def __enter__(self) -> Browser:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # the child: the protocol's pipes on fds 3 and 4
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            self.program,
            "--headless",
            "--disable-gpu",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--window-size={self.size[0]},{self.size[1]}",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium's sandbox refuses to run as root
        self._process = subprocess.Popen(
            [*args, "about:blank"],
            close_fds=False,  # the parent's own descriptors are not inheritable
            preexec_fn=wire,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.command("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.command("Page.enable", session=True)
        self.command("Runtime.enable", session=True)
        self.command(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=self.size[0],
            height=self.size[1],
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(BrowserError):  # it may be gone already
            self.command("Browser.close", within=10)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        self._reader.join(timeout=10)
        os.close(self._from_browser)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    self._answers.put(message)
                else:
                    self.events.append(message)

    def command(
        self, method: str, *, session: bool = False, within: float = 60, **params: Any
    ) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + within
        while True:
            try:
                answer = self._answers.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise BrowserError(f"no answer to {method} within {within}s") from None
            if answer.get("id") != self._next:
                continue
            if "error" in answer:
                raise BrowserError(f"{method}: {answer['error']}")
            return answer.get("result", {})

    def open(self, url: str) -> None:
        self.command("Page.navigate", session=True, url=url)
        self.wait_for("document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        result = self.command(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, within: float = 60) -> Any:
        deadline = time.monotonic() + within
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"never true within {within}s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path, *, height: int | None = None) -> Path:
        """A PNG of the viewport (``height``: its top ``height`` pixels only)."""
        clip: dict[str, Any] = {}
        if height is not None:
            clip["clip"] = {"x": 0, "y": 0, "width": self.size[0], "height": height, "scale": 1}
        data = self.command("Page.captureScreenshot", session=True, format="png", **clip)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def dom(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))
