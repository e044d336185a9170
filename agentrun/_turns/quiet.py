"""A turn's clocks: its deadline, the agent's quiet, and the ``stall`` reports.

:class:`TurnClocks` holds what decides when a turn times out: the total deadline (``timeout``,
or a policy's wall limit when sooner) and what the agent's silence means — the tool calls it
has open (``tool_timeout`` applies instead of ``idle_timeout``), the caller's pending answers
(no quiet is counted while a permission or question callback decides), a retry delay the
agent announced (added to the limit). :meth:`TurnClocks.watch` reports a quiet spell once with
a ``stall`` message before the idle timeout acts; :meth:`TurnClocks.timeout_error` says which
limit ended a turn.

Imports only the vocabulary: the turn (:mod:`.turn`) owns one and applies its deadline.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from typing import Any

import anyio

from .._vocabulary.errors import TurnTimeoutError
from .._vocabulary.limits import TurnLimits
from .._vocabulary.messages import Message, MessageType

__all__ = ["QUIET_POLL", "TurnClocks"]

#: How often the stall reporter looks again while no report can be due.
QUIET_POLL = 0.5


class TurnClocks:
    """The deadline and quiet clocks of one turn (see the module docstring)."""

    def __init__(self, limits: TurnLimits) -> None:
        #: The limits the clocks apply (``timeout``, ``idle_timeout``, ``tool_timeout``,
        #: ``stall_after``).
        self.limits: TurnLimits = limits
        #: When the turn started.
        self.started_at: float = 0.0
        #: The total deadline (``timeout`` or a policy's wall limit, whichever comes first).
        self.deadline: float = math.inf
        #: True when a policy's wall limit set :attr:`deadline`.
        self.deadline_from_policy: bool = False
        #: Whether anything reads the quiet clocks (an idle or tool timeout, stall reports):
        #: without, a message needs no note of when it came or what it was.
        self.watching: bool = (
            limits.stall_after is not None
            or limits.idle_timeout is not None
            or limits.tool_timeout is not None
        )
        # What the agent's quiet means: the tool calls it has open, the caller's pending
        # answers, a retry delay it announced, what it said last and when.
        self.open_tools: dict[str, str | None] = {}
        self.caller_waits: int = 0
        self.quiet_since: float = 0.0
        self.quiet_extra: float = 0.0
        self.last_seen: Message | None = None
        self.stall_reported: bool = False
        #: Called whenever the quiet deadline may have moved.
        self.on_change: Callable[[], None] = lambda: None

    def start(self, now: float, wall_limit: float | None) -> None:
        """The turn starts at ``now``; a policy may allow at most ``wall_limit`` seconds."""
        self.started_at = self.quiet_since = now
        timeout = self.limits.timeout
        if timeout is not None:
            self.deadline = now + timeout
        if wall_limit is not None and now + wall_limit < self.deadline:
            self.deadline = now + wall_limit
            self.deadline_from_policy = True

    def ran_out(self, now: float) -> bool:
        """Whether the total deadline has passed."""
        return now >= self.deadline - 1e-3

    # -- the agent's quiet -------------------------------------------------------------------

    def idle_limit(self) -> float | None:
        """How long the agent may now be quiet: no limit while the caller is deciding,
        ``tool_timeout`` while a tool call is open (when set), else ``idle_timeout``."""
        if self.caller_waits:
            return None
        limits = self.limits
        if self.open_tools and limits.tool_timeout is not None:
            return limits.tool_timeout
        return limits.idle_timeout

    def next_deadline(self) -> float:
        """When the turn times out now: the total deadline or the end of the allowed quiet."""
        deadline = self.deadline
        limit = self.idle_limit()
        if limit is not None:
            deadline = min(deadline, self.quiet_since + self.quiet_extra + limit)
        return deadline

    def heard(self, message: Message) -> None:
        """The agent said something: the quiet clocks restart, and what it said is noted."""
        if not self.watching:
            return
        kind = message.type
        if kind is MessageType.TOOL_USE or kind is MessageType.TOOL_RESULT:
            tool = message.tool
            if tool is not None and tool.id is not None:
                if kind is MessageType.TOOL_USE:
                    self.open_tools[tool.id] = tool.name
                else:
                    self.open_tools.pop(tool.id, None)
        self.last_seen = message
        self.quiet_since = anyio.current_time()
        self.stall_reported = False
        delay = (message.data or {}).get("delay_s") if kind is MessageType.RETRY else None
        # The agent announced how long it will wait before retrying: quiet that long is no stall.
        self.quiet_extra = float(delay) if isinstance(delay, (int, float)) else 0.0
        self.on_change()

    @contextmanager
    def caller_deciding(self) -> Generator[None, None, None]:
        """While the caller decides (a permission or question callback), no quiet is counted."""
        self.caller_waits += 1
        self.on_change()
        try:
            yield
        finally:
            self.caller_waits -= 1
            self.quiet_since = anyio.current_time()
            self.on_change()

    # -- stall reports -----------------------------------------------------------------------

    def _stall_delay(self) -> float | None:
        if self.caller_waits:
            return None
        stall_after = self.limits.stall_after
        if stall_after is not None:
            return stall_after
        limit = self.idle_limit()
        return None if limit is None else limit / 2

    async def watch(
        self, engine: str, deliver: Callable[[Message], Awaitable[None]], done: anyio.Event
    ) -> None:
        """Report a ``stall`` once per quiet spell, before the idle timeout acts, until
        ``done``."""
        while not done.is_set():
            delay = self._stall_delay()
            if delay is None or self.stall_reported:
                await anyio.sleep(QUIET_POLL)
                continue
            due = self.quiet_since + self.quiet_extra + delay
            now = anyio.current_time()
            if now < due:
                await anyio.sleep(due - now)
                continue
            self.stall_reported = True
            await deliver(self.stall_message(engine, now))

    def stall_message(self, engine: str, now: float) -> Message:
        limit = self.idle_limit()
        open_tools = [{"id": k, "name": v} for k, v in self.open_tools.items()]
        if open_tools:
            waiting_for = "tool"
        elif self.quiet_extra:
            waiting_for = "retry"
        else:
            waiting_for = "agent"
        data: dict[str, Any] = {
            "quiet_s": round(now - self.quiet_since, 3),
            "waiting_for": waiting_for,
            "open_tools": open_tools,
        }
        if limit is not None:
            acts_at = min(self.deadline, self.quiet_since + self.quiet_extra + limit)
            data["acts_in_s"] = round(max(acts_at - now, 0.0), 3)
        last = self.last_seen
        if last is not None:
            seen: dict[str, Any] = {"type": str(last.type)}
            if last.subtype:
                seen["subtype"] = last.subtype
            if last.tool is not None and last.tool.name:
                seen["tool"] = last.tool.name
            data["last_seen"] = seen
        quiet = f"{data['quiet_s']:g}s"
        names = ", ".join(str(t["name"] or t["id"]) for t in open_tools)
        what = f"while {names} runs" if open_tools else f"waiting for the {waiting_for}"
        return Message(
            type=MessageType.STALL,
            text=f"{engine} has been quiet for {quiet} ({what})",
            data=data,
        )

    # -- what ended a turn -------------------------------------------------------------------

    def timeout_error(self, engine: str, number: int) -> TurnTimeoutError:
        """The error of a turn one of these clocks ended: the total or the idle limit."""
        timeout = self.limits.timeout
        if timeout is not None and self.ran_out(anyio.current_time()):
            return TurnTimeoutError(
                f"{engine} turn {number} exceeded its timeout of {timeout:g}s and was cancelled",
                kind="total",
                seconds=timeout,
                engine=engine,
            )
        limit = self.idle_limit()
        seconds = limit if limit is not None else math.nan
        if self.open_tools and self.limits.tool_timeout is not None:
            names = ", ".join(str(n or i) for i, n in self.open_tools.items())
            why = f"tool timeout, while {names} ran"
        else:
            why = "idle timeout"
        return TurnTimeoutError(
            f"{engine} turn {number} was silent for {seconds:g}s ({why}) and was cancelled",
            kind="idle",
            seconds=seconds,
            engine=engine,
        )
