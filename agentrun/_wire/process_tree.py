"""Stopping what a program leaves behind: its process group and its detached descendants.

* Every process group started here is in a registry until it is reaped; an ``atexit`` hook
  SIGKILLs the groups still alive when the interpreter exits.
* Every program gets :data:`PROCESS_TREE_ENV` with a token of its own; its descendants inherit it,
  so those that leave the process group (``setsid``, ``nohup … &``) are still found in ``/proc``
  (Linux) and stopped when the program is closed. :class:`TreeKiller` serves the closes waiting at
  the same time with one scan.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading

import anyio
from anyio.lowlevel import RunVar

__all__ = [
    "PROCESS_TREE_ENV",
    "SIGKILL",
    "TreeKiller",
    "kill_group",
    "kill_tree",
    "kill_trees",
    "live_process_groups",
    "register",
    "tree_alive",
    "unregister",
]

_log = logging.getLogger("agentrun.subprocess")

SIGKILL: int = getattr(signal, "SIGKILL", signal.SIGTERM)


# -- registry of live process groups ------------------------------------------------------

_live_groups: set[int] = set()
_live_lock = threading.Lock()


def live_process_groups() -> frozenset[int]:
    """Process groups started here that have not been reaped yet."""
    with _live_lock:
        return frozenset(_live_groups)


def register(pgid: int) -> None:
    with _live_lock:
        _live_groups.add(pgid)


def unregister(pgid: int) -> None:
    with _live_lock:
        _live_groups.discard(pgid)


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; return False when it no longer exists."""
    if sys.platform == "win32":  # pragma: no cover - no process groups there
        try:
            os.kill(pgid, sig)
        except OSError:
            return False
        return True
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # macOS reports EPERM for a group made only of zombies.
        _log.debug("no permission to signal process group %d", pgid)
        return False
    return True


def _reap_live_groups() -> None:
    with _live_lock:
        groups = list(_live_groups)
        _live_groups.clear()
    for pgid in groups:
        kill_group(pgid, SIGKILL)


atexit.register(_reap_live_groups)


#: Every program started here gets this variable with a token of its own. Its descendants
#: inherit it, so those that leave the process group (``setsid``, ``nohup … &``) are still found
#: and stopped when the program is closed (where ``/proc`` shows environments: Linux).
PROCESS_TREE_ENV = "AGENTRUN_PROCESS_TREE"


def tree_members(trees: dict[str, int]) -> dict[str, set[int]]:
    """For each ``token -> leader``: the live processes that carry the token in their
    environment or descend from the leader (Linux; elsewhere nothing is found and the process
    group is all that is stopped). One pass over ``/proc`` serves every tree asked about."""
    found: dict[str, set[int]] = {token: set() for token in trees}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    prefix = f"{PROCESS_TREE_ENV}=".encode()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] == b"Z":
                continue  # a zombie holds nothing; its parent reaps it
            children.setdefault(int(fields[1]), []).append(pid)
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if prefix in environ:
            for entry in environ.split(b"\0"):
                if entry.startswith(prefix):
                    members = found.get(entry[len(prefix) :].decode("ascii", "replace"))
                    if members is not None:
                        members.add(pid)
    for token, leader in trees.items():
        members = found[token]
        stack = [leader]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in members:
                    members.add(child)
                    stack.append(child)
        members.discard(leader)
    return found


def kill_trees(trees: dict[str, int]) -> dict[str, int]:
    """SIGKILL every process of each tree; how many were signalled, per tree."""
    killed: dict[str, int] = {}
    for token, members in tree_members(trees).items():
        killed[token] = 0
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, SIGKILL)
                killed[token] += 1
    return killed


async def tree_alive(token: str, leader: int) -> bool:
    """Whether a process of the tree still lives (zombies do not count)."""
    members = await anyio.to_thread.run_sync(tree_members, {token: leader})
    return bool(members[token])


class TreeKiller:
    """Stops the trees of closing programs, one ``/proc`` scan (in a worker thread) for all the
    closes waiting at the time: many sessions closing at once cost a few scans rather than one
    each, and never more than one scanning thread competes with the event loop for the GIL."""

    def __init__(self) -> None:
        #: Closes waiting for a scan that has not started yet: token -> leader.
        self._unscanned: dict[str, int] = {}
        #: Results of finished scans for the closes still waiting: token -> processes killed.
        self._killed: dict[str, int] = {}
        self._waiting: set[str] = set()
        #: Set when the scan under way ends (None: no scan under way).
        self._scan_done: anyio.Event | None = None

    async def kill(self, token: str, leader: int) -> int:
        """Kill the tree of ``token``/``leader``; how many processes were signalled."""
        self._waiting.add(token)
        self._unscanned[token] = leader
        try:
            while token not in self._killed:
                if self._scan_done is not None:
                    await self._scan_done.wait()
                else:
                    await self._scan()
            return self._killed[token]
        finally:
            self._waiting.discard(token)
            self._unscanned.pop(token, None)
            self._killed.pop(token, None)

    async def _scan(self) -> None:
        trees, self._unscanned = self._unscanned, {}
        self._scan_done = done = anyio.Event()
        killed = dict.fromkeys(trees, 0)
        try:
            # Not abandoned on cancel: once started, the scan serves every tree it took.
            killed.update(await anyio.to_thread.run_sync(kill_trees, trees))
        finally:
            self._killed.update((t, n) for t, n in killed.items() if t in self._waiting)
            self._scan_done = None
            done.set()


_TREE_KILLER: RunVar[TreeKiller] = RunVar("agentrun_tree_killer")


async def kill_tree(token: str, leader: int) -> int:
    """SIGKILL every process of the tree (see :class:`TreeKiller`); how many were signalled."""
    try:
        killer = _TREE_KILLER.get()
    except LookupError:
        killer = TreeKiller()
        _TREE_KILLER.set(killer)
    return await killer.kill(token, leader)
