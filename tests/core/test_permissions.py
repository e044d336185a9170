"""The one permission flow every engine shares, without an agent."""

from __future__ import annotations

import pytest

from agentrun import MessageType
from agentrun._vocabulary.permissions import (
    PermissionDecision,
    PermissionOption,
    PermissionRequest,
    approve_all,
    ask_permission,
    deny_all,
)

pytestmark = pytest.mark.anyio

OPTIONS = (
    PermissionOption(option_id="a1", kind="allow_once"),
    PermissionOption(option_id="a2", kind="allow_always"),
    PermissionOption(option_id="r1", kind="reject_once"),
    PermissionOption(option_id="r2", kind="reject_always"),
)
REQUEST = PermissionRequest(tool_name="bash", tool_use_id="t1", input={"command": "ls"})


def test_a_one_off_approval_is_never_widened() -> None:
    assert PermissionDecision.allow_once().choose(OPTIONS) == OPTIONS[0]
    only_always = (OPTIONS[1],)
    assert PermissionDecision.allow_once().choose(only_always) is None
    assert PermissionDecision.allow_always().choose(only_always) == OPTIONS[1]


def test_denials_and_explicit_options() -> None:
    assert PermissionDecision.deny().choose(OPTIONS) == OPTIONS[2]
    assert PermissionDecision.deny(always=True).choose(OPTIONS) == OPTIONS[3]
    assert PermissionDecision(allow=True, option_id="r2").choose(OPTIONS) == OPTIONS[3]
    assert PermissionDecision(allow=True, option_id="nope").choose(OPTIONS) is None


@pytest.mark.parametrize("hitl", [None, False])
async def test_without_a_human_in_the_loop_the_answer_is_no(hitl: bool | None) -> None:
    decision, notes = await ask_permission(approve_all, hitl, REQUEST, engine="x")
    assert not decision.allow
    (note,) = notes
    assert note.type is MessageType.SYSTEM and note.subtype == "permission_denied"
    assert note.denials[0].tool_use_id == "t1"


async def test_hitl_without_a_handler_denies_and_records_it() -> None:
    decision, notes = await ask_permission(None, True, REQUEST, engine="x")
    assert not decision.allow
    assert [n.subtype for n in notes] == ["permission_denied"]


async def test_the_handler_decides() -> None:
    allowed, notes = await ask_permission(approve_all, True, REQUEST, engine="x")
    assert allowed.allow and notes == []
    denied, notes = await ask_permission(deny_all, True, REQUEST, engine="x")
    assert not denied.allow
    assert notes[0].denials[0].reason == "denied by policy"


async def test_a_handler_that_raises_denies_with_an_error_and_never_hangs() -> None:
    async def broken(request: PermissionRequest) -> PermissionDecision:
        raise KeyError("oops")

    decision, notes = await ask_permission(broken, True, REQUEST, engine="x")
    assert not decision.allow
    assert [n.type for n in notes] == [MessageType.ERROR, MessageType.SYSTEM]
    assert notes[0].error is not None and notes[0].error.code == "permission_callback"
