"""Faults injected into a real agent, for the engine compliance suite.

:func:`fault_shim` writes a small program that stands in for an agent's binary
(``SessionOptions.binary``): it runs the real program as its child and passes stdin, stdout and
stderr through unchanged, until a prompt carries a fault marker such as ``[[fault:crash]]`` (seen
on the shim's stdin for agents that read prompts there, or on its command line for agents that
take the prompt as an argument). From then on, for that prompt:

``crash``    one more line of output, then the agent and the shim die (exit 3, a line on stderr)
``garbage``  three lines no agent writes (invalid UTF-8, text that is not JSON, an event of an
             unknown kind) before the next line of output
``huge``     a line of 65 MiB (beyond the default 64 MiB limit) before the next line of output
``detach``   a ``sleep`` in a session of its own (it left the process group) holding stdout;
             its pid goes to ``$AGENTRUN_FAULT_PIDFILE``
``hang``     nothing more reaches the engine, and the shim ignores SIGINT and SIGTERM

Prompts without a marker are untouched, so one session can mix clean and faulty turns.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from .._vocabulary.errors import ConfigurationError

__all__ = ["FAULTS", "fault_prompt", "fault_shim"]

#: The faults the shim knows.
FAULTS = ("crash", "garbage", "huge", "detach", "hang")

#: The environment variable naming the real program.
TARGET_ENV = "AGENTRUN_FAULT_TARGET"
#: Where ``detach`` writes the pid of the process it left behind.
PIDFILE_ENV = "AGENTRUN_FAULT_PIDFILE"

_SHIM = r"""
import os, signal, subprocess, sys, threading, time

MARK = "[[fault:"
target = os.environ["AGENTRUN_FAULT_TARGET"]
state = {"fault": None}
out = sys.stdout.buffer
lock = threading.Lock()


def arm(text):
    at = text.find(MARK)
    if at >= 0:
        fault = text[at + len(MARK):].split("]]", 1)[0]
        state["fault"] = fault
        if fault == "hang":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif fault == "detach":
            child = subprocess.Popen(
                ["sleep", "300"], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            path = os.environ.get("AGENTRUN_FAULT_PIDFILE")
            if path:
                with open(path, "a") as fh:
                    fh.write(f"{child.pid}\n")
            state["fault"] = None


arm(" ".join(sys.argv[1:]))
agent = subprocess.Popen(
    [target, *sys.argv[1:]],
    stdin=subprocess.PIPE if not sys.stdin.isatty() else None,
    stdout=subprocess.PIPE,
)


def pump_stdin():
    try:
        for line in sys.stdin.buffer:
            arm(line.decode("utf-8", "replace"))
            agent.stdin.write(line)
            agent.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            agent.stdin.close()
        except OSError:
            pass


if agent.stdin is not None:
    threading.Thread(target=pump_stdin, daemon=True).start()


def write(data):
    with lock:
        out.write(data)
        out.flush()


for line in agent.stdout:
    fault = state["fault"]
    if fault == "hang":
        continue
    if fault == "garbage":
        state["fault"] = None
        write(b"\xff\xfe not utf-8\n")
        write(b"this line is not json\n")
        write(b'{"type": "x_agentrun_unknown", "jsonrpc": "2.0", "method": "x_agentrun/unknown",'
              b' "params": {"n": 1}}\n')
    if fault == "huge":
        state["fault"] = None
        with lock:
            block = b"x" * (1 << 20)
            out.write(b'{"type": "x_agentrun_huge", "blob": "')
            for _ in range(65):
                out.write(block)
            out.write(b'"}\n')
            out.flush()
    write(line)
    if fault == "crash":
        sys.stderr.write("fault shim: simulated crash\n")
        sys.stderr.flush()
        agent.kill()
        os._exit(3)
code = agent.wait()
while state["fault"] == "hang":
    time.sleep(1)
sys.exit(code if code >= 0 else 128 - code)
"""


def fault_prompt(fault: str, prompt: str = "say something") -> str:
    """A prompt that sets off ``fault`` in an agent started through :func:`fault_shim`."""
    if fault not in FAULTS:
        raise ConfigurationError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    return f"{prompt} [[fault:{fault}]]"


def fault_shim(directory: str | Path, target: str) -> tuple[str, dict[str, str]]:
    """Write the shim under ``directory``; return its path (for ``SessionOptions.binary``) and
    the environment entries it needs (add them to ``SessionOptions.env``)."""
    path = Path(directory) / "agentrun-fault-shim"
    path.write_text(f"#!{sys.executable}\n{_SHIM.lstrip()}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    pidfile = Path(directory) / "agentrun-fault-pids"
    return str(path), {TARGET_ENV: os.path.abspath(target), PIDFILE_ENV: str(pidfile)}
