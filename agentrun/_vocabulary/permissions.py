"""Permission requests: a caller approves or denies each tool use in code.

An engine that can ask (Claude Code's ``can_use_tool`` control requests, ACP's
``session/request_permission``) builds a :class:`PermissionRequest` and awaits the session's
:data:`PermissionHandler`. The handler answers with a :class:`PermissionDecision`. A denial is
recorded as a :class:`~agentrun.PermissionDenial` in the turn's summary. A handler that raises
denies the tool use and produces an ``error`` message with code ``"permission_callback"``; it never
hangs the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .messages import Message, MessageType, PermissionDenial

__all__ = [
    "PermissionDecision",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "approve_all",
    "ask_permission",
    "deny_all",
]


class PermissionOption(BaseModel):
    """One answer the agent offers (ACP). ``kind`` is allow_once / allow_always / reject_once /
    reject_always (or an agent's own string)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    option_id: str
    kind: str
    name: str | None = None


class PermissionRequest(BaseModel):
    """The agent asks whether it may use a tool."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    tool_name: str | None = None
    tool_use_id: str | None = None
    input: Any = None
    #: A human title (ACP: the command or the file path).
    title: str | None = None
    #: ACP tool kind (``execute``, ``edit``, ...).
    kind: str | None = None
    #: The answers the agent offers (ACP); empty when the agent takes a plain allow/deny.
    options: tuple[PermissionOption, ...] = ()
    engine: str | None = None
    raw: Any = Field(default=None, exclude=True, repr=False)


class PermissionDecision(BaseModel):
    """The caller's answer. ``option_id`` picks one of the offered options explicitly;
    otherwise the engine picks the option matching ``allow`` and ``always``."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    allow: bool
    always: bool = False
    reason: str | None = None
    option_id: str | None = None
    #: Claude Code only: replace the tool's input before it runs.
    updated_input: dict[str, Any] | None = None

    @classmethod
    def allow_once(cls) -> PermissionDecision:
        return cls(allow=True)

    @classmethod
    def allow_always(cls) -> PermissionDecision:
        return cls(allow=True, always=True)

    @classmethod
    def deny(cls, reason: str | None = None, *, always: bool = False) -> PermissionDecision:
        return cls(allow=False, always=always, reason=reason)

    def choose(self, options: tuple[PermissionOption, ...]) -> PermissionOption | None:
        """The offered option this decision means, or None when none fits."""
        if self.option_id is not None:
            return next((o for o in options if o.option_id == self.option_id), None)
        verb = "allow" if self.allow else "reject"
        if self.always:
            wanted = [f"{verb}_always", f"{verb}_once"]
        elif self.allow:
            # Never widen a one-off approval into a standing one.
            wanted = ["allow_once"]
        else:
            wanted = ["reject_once", "reject_always"]
        for kind in wanted:
            for option in options:
                if option.kind == kind:
                    return option
        return None


PermissionHandler = Callable[[PermissionRequest], Awaitable[PermissionDecision]]


async def approve_all(request: PermissionRequest) -> PermissionDecision:
    """A handler that allows every tool use once."""
    return PermissionDecision.allow_once()


async def deny_all(request: PermissionRequest) -> PermissionDecision:
    """A handler that refuses every tool use."""
    return PermissionDecision.deny("denied by policy")


async def ask_permission(
    handler: PermissionHandler | None,
    hitl: bool | None,
    request: PermissionRequest,
    *,
    engine: str,
) -> tuple[PermissionDecision, list[Message]]:
    """The one permission flow every engine shares.

    ``hitl`` is not ``True``: denied (the agent asked although nobody is in the loop). ``True``
    with no handler: denied, never approved. A handler that raises: denied, with an ``error``
    message (code ``permission_callback``). Every denial comes with a ``system``
    ``permission_denied`` message carrying the :class:`~agentrun.PermissionDenial`; engines whose
    translator records the denial from the answer on the wire drop that note.
    """
    notes: list[Message] = []
    if hitl is not True:
        decision = PermissionDecision.deny("permission prompts are not enabled (hitl is not True)")
    elif handler is None:
        decision = PermissionDecision.deny("no permission handler is set (hitl=True)")
    else:
        try:
            decision = await handler(request)
        except Exception as exc:
            notes.append(
                Message.error_message(
                    f"{engine}: the permission callback raised {exc!r}; the tool use was denied",
                    code="permission_callback",
                    data={"tool_name": request.tool_name, "tool_use_id": request.tool_use_id},
                )
            )
            decision = PermissionDecision.deny("the permission callback failed")
    if not decision.allow:
        notes.append(
            Message(
                type=MessageType.SYSTEM,
                subtype="permission_denied",
                denials=(
                    PermissionDenial(
                        tool_name=request.tool_name,
                        tool_use_id=request.tool_use_id,
                        input=request.input,
                        reason=decision.reason or "denied by the permission callback",
                    ),
                ),
                data={"source": "permission_callback"},
            )
        )
    return decision, notes
