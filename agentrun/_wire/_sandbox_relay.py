"""The relay inside a sandbox: ``127.0.0.1:<port>`` of the sandbox's own network namespace to a
Unix socket bound into it, then the agent program.

Run by the sandbox's interpreter as ``python -I -S _sandbox_relay.py PORT=SOCKET... -- ARGV...``
(standard library only: nothing of agentrun is importable inside). It binds every listener
before it starts the agent, so the agent's first connection finds it; then it relays in threads
while the agent runs and exits with the agent's status (re-raising the signal that killed it).
Signals sent to the session's process group reach the agent directly; the relay ignores the
polite ones and lives exactly as long as the agent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

CHUNK = 65536


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        for pair in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=pair, daemon=True).start()


def main(args: list[str]) -> int:
    split = args.index("--")
    routes = [item.split("=", 1) for item in args[:split]]
    argv = args[split + 1 :]
    for port, path in routes:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    agent = subprocess.Popen(argv, close_fds=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # The agent holds the session's pipes; the relay lets go of its copies.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    code = agent.wait()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
