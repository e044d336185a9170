"""Loopback-only network isolation for test runs.

On Linux a process with the right privileges (root, or unprivileged user namespaces) can start
a command in a fresh network namespace that has nothing but a loopback interface::

    unshare -n sh -c 'ip link set lo up && exec "$@"' sh CMD...

Everything inside - pytest, the model server the tests start, and the agent programs they run -
then shares ``127.0.0.1``, and any attempt to reach another host fails at once with "network is
unreachable". ``python -m agentrun.offline netns -- CMD...`` does exactly that, or, when it is
not possible, runs CMD directly after a one-line warning (the offline configuration of
:mod:`agentrun.offline` then is the only guard).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .._vocabulary.errors import ConfigurationError, EngineUnavailableError

__all__ = [
    "can_isolate_network",
    "isolated_argv",
    "network_is_loopback_only",
    "run_isolated",
]

_SCRIPT = 'ip link set lo up && exec "$@"'


@functools.lru_cache(maxsize=1)
def can_isolate_network() -> bool:
    """Whether ``unshare -n`` works here and ``ip`` is available to raise ``lo``."""
    if not sys.platform.startswith("linux"):
        return False
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("ip") is None:
        return False
    try:
        done = subprocess.run(
            [unshare, "-n", "sh", "-c", "ip link set lo up"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def network_is_loopback_only() -> bool:
    """True when the only network interface of this process's namespace is ``lo``.

    Reads ``/proc/self/net/dev`` (per network namespace); ``/sys/class/net`` would show the
    namespace sysfs was mounted in, not ours.
    """
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    names = {line.split(":", 1)[0].strip() for line in lines if ":" in line}
    return names == {"lo"}


def isolated_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped so it runs in a loopback-only namespace (raises if impossible)."""
    if not can_isolate_network():
        raise EngineUnavailableError("cannot create a network namespace here (unshare -n failed)")
    return ["unshare", "-n", "sh", "-c", _SCRIPT, "sh", *argv]


def run_isolated(argv: Sequence[str]) -> int:
    """Run ``argv`` in a loopback-only namespace if possible; return its exit status."""
    if not argv:
        raise ConfigurationError("no command given")
    if network_is_loopback_only():
        cmd = list(argv)
    elif can_isolate_network():
        cmd = isolated_argv(argv)
    else:
        print(
            "agentrun netns: cannot create a loopback-only network namespace (unshare -n); "
            "running without it - relying on the offline configuration alone",
            file=sys.stderr,
            flush=True,
        )
        cmd = list(argv)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"agentrun netns: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvp does not return
