"""A misbehaving stand-in for an agent program, for subprocess and engine tests.

Run as ``python fault_program.py MODE [ARGS...]``.  stdout carries JSON lines (or the
deliberately broken output of the mode); diagnostics go to stderr.

Modes:
  lines N                 print N lines {"i": i} and exit 0
  crash [CODE]            print 3 lines, a message on stderr, exit CODE (default 3)
  hang                    print {"ready": true} and sleep forever
  ignore_term             ignore SIGTERM, print {"ready": true}, sleep forever
  grandchild              start a grandchild that ignores SIGTERM, print {"grandchild": pid},
                          sleep forever
  orphan                  like grandchild, but exit 0 right away (the grandchild stays)
  orphan_stdout           like orphan, but the grandchild keeps stdout open
  detached_stdout         like orphan_stdout, but the grandchild leaves the process group
                          (setsid) first
  no_newline              print two JSON lines, the second without a trailing newline
  big_line SIZE           print {"before": 1}, one line of SIZE bytes, then {"after": 2}
  garbage                 print invalid UTF-8, plain text and broken JSON between good lines
  stderr_flood SIZE       write SIZE bytes to stderr while printing lines on stdout,
                          end stderr with "TAIL-MARKER"
  echo [CODE [DELAY]]     echo each stdin line as {"echo": line}; at end of stdin print
                          {"eof": true}, sleep DELAY seconds, exit CODE
  stdin_probe             read stdin to its end and print {"stdin": <text>}
  env NAME...             print {"env": {NAME: value or null}}
  exit_now [CODE]         write "bye" to stderr and exit CODE (default 5) immediately
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

out = sys.stdout.buffer
err = sys.stderr.buffer

GRANDCHILD = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def emit(obj: object) -> None:
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()


def sleep_forever() -> None:
    while True:
        time.sleep(60)


def start_grandchild(*, keep_stdout: bool = False, detach: bool = False) -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD],
        stdin=subprocess.DEVNULL,
        stdout=None if keep_stdout else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detach,
    )
    return child.pid


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    if mode == "lines":
        for i in range(int(args[0])):
            emit({"i": i})
        return 0
    if mode == "crash":
        for i in range(3):
            emit({"i": i})
        err.write(b"starting up\nfatal: the model server went away\n")
        err.flush()
        return int(args[0]) if args else 3
    if mode == "hang":
        emit({"ready": True})
        sleep_forever()
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        emit({"ready": True})
        sleep_forever()
    if mode in ("grandchild", "orphan", "orphan_stdout", "detached_stdout"):
        pid = start_grandchild(
            keep_stdout=mode.endswith("_stdout"), detach=mode == "detached_stdout"
        )
        emit({"grandchild": pid})
        if mode != "grandchild":
            return 0
        sleep_forever()
    if mode == "no_newline":
        out.write(b'{"a": 1}\n{"b": 2}')
        out.flush()
        return 0
    if mode == "big_line":
        size = int(args[0])
        emit({"before": 1})
        block = b"x" * (1024 * 1024)
        left = size
        while left > 0:
            out.write(block[: min(left, len(block))])
            left -= len(block)
        out.write(b"\n")
        emit({"after": 2})
        return 0
    if mode == "garbage":
        out.write(b'{"n": 1}\n')
        out.write(b"\xff\xfe\x00 garbage \x80\n")
        out.write(b"[debug] plain text on stdout\n")
        out.write(b'{"broken": \n')
        out.write(b'{"bad_utf8": "\xc3\x28"}\n')
        out.write(b'{"n": 2}\n')
        out.flush()
        return 0
    if mode == "stderr_flood":
        size = int(args[0])
        line = b"E" * 99 + b"\n"
        written = 0
        n = 0
        while written < size:
            err.write(line * 100)
            written += len(line) * 100
            if written % (1024 * 1024) < len(line) * 100:
                emit({"progress": n})
                n += 1
        err.write(b"TAIL-MARKER\n")
        err.flush()
        emit({"done": True, "progress_lines": n})
        return 0
    if mode == "echo":
        code = int(args[0]) if args else 0
        delay = float(args[1]) if len(args) > 1 else 0.0
        for raw in sys.stdin.buffer:
            emit({"echo": raw.rstrip(b"\n").decode()})
        emit({"eof": True})
        time.sleep(delay)
        return code
    if mode == "stdin_probe":
        emit({"stdin": sys.stdin.buffer.read().decode()})
        return 0
    if mode == "env":
        emit({"env": {name: os.environ.get(name) for name in args}})
        return 0
    if mode == "exit_now":
        err.write(b"bye\n")
        err.flush()
        return int(args[0]) if args else 5
    err.write(f"unknown mode {mode!r}\n".encode())
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
