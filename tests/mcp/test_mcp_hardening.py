"""``agentrun mcp`` against bad input: every engine name builds or is a clear error, every tool
error says what is wrong, only loopback addresses are served, and fuzzed tool arguments never
crash the server or leave a session open."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from agentrun import ConfigurationError, Engine, Session, SessionOptions, engine_names, get_engine
from agentrun.mcp_server import build_server
from agentrun.testing import ScriptedEngine
from agentrun.testing._scripted_engine import result, text

pytestmark = pytest.mark.anyio

#: The bare text the MCP SDK sends when a tool raised something it did not expect.
BARE = re.compile(r"^Error executing tool \w+$")


def _error_text(answer: Any) -> str:
    assert answer.is_error, answer
    return " ".join(getattr(block, "text", "") for block in answer.content)


@pytest.mark.parametrize("name", engine_names())
def test_every_registered_engine_builds_or_is_a_configuration_error(name: str) -> None:
    outcome: Engine | ConfigurationError
    try:
        outcome = get_engine(name)
    except ConfigurationError as exc:
        outcome = exc
    if isinstance(outcome, ConfigurationError):
        assert name in str(outcome) and outcome.option == "engine"
    else:
        assert isinstance(outcome, Engine)


async def test_list_engines_works_with_the_default_engines(tmp_path: Path) -> None:
    async with Client(build_server(roots=[tmp_path])) as client:
        answer = await client.call_tool("list_engines")
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        engines = {e["name"]: e for e in answer.structured_content["engines"]}
    assert sorted(engines) == [name for name in engine_names() if name != "scripted"]
    replay = engines["replay"]
    assert replay["available"] is False and "path" in replay["problem"]


async def test_the_test_double_is_never_offered_as_an_agent(tmp_path: Path) -> None:
    """``scripted`` echoes the prompt with ``ok: true``: a client taking it for an agent would
    believe work was done. The default server neither lists it nor starts it."""
    async with Client(build_server(roots=[tmp_path])) as client:
        listed = (await client.call_tool("list_engines")).structured_content
        assert listed is not None
        assert "scripted" not in {e["name"] for e in listed["engines"]}
        message = _error_text(await client.call_tool("start_session", {"engine": "scripted"}))
        assert "unknown engine 'scripted'" in message and "claude" in message, message


async def test_every_bad_request_says_what_is_wrong(tmp_path: Path) -> None:
    async with Client(build_server(roots=[tmp_path])) as client:
        for arguments, said in [
            ({"engine": "replay"}, "replay"),
            ({"engine": "claude", "cwd": "a\0b"}, "NUL"),
            ({"engine": "claude", "model": "--dangerously"}, "model"),
            ({"engine": "claude", "cwd": str(tmp_path / "missing")}, "not a directory"),
        ]:
            message = _error_text(await client.call_tool("start_session", arguments))
            assert not BARE.match(message) and said in message, (arguments, message)
    scripted = build_server(roots=[tmp_path], engines={"scripted": ScriptedEngine})
    async with Client(scripted) as client:
        sid = (await client.call_tool("start_session", {"engine": "scripted"})).structured_content
        assert sid is not None
        for arguments, said in [
            ({"prompt": "  "}, "prompt"),
            ({"prompt": "hi", "timeout": -1}, "timeout"),
            ({"prompt": "hi", "timeout": 0}, "timeout"),
        ]:
            answer = await client.call_tool(
                "run_turn", {"session_id": sid["session_id"], **arguments}
            )
            message = _error_text(answer)
            assert not BARE.match(message) and said in message, (arguments, message)


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("start_session", {}, "start_session: the argument 'engine' is missing"),
        ("run_turn", {"session_id": "s-1"}, "run_turn: the argument 'prompt' is missing"),
        ("run_turn", {}, "the argument 'session_id' is missing; the argument 'prompt' is missing"),
        ("run_turn", {"session_id": "s-1", "prompt": "hi", "timeout": "soon"},
         "run_turn: the argument 'timeout' is invalid: Input should be a valid number"),
        ("start_session", {"engine": "claude", "mode": "fast"},
         "the argument 'mode' is invalid: Input should be 'plan' or 'act'"),
        ("close_session", {"session_id": 3}, "the argument 'session_id' is invalid"),
    ],
)  # fmt: skip
async def test_arguments_of_the_wrong_shape_are_named_in_words(
    tmp_path: Path, tool: str, arguments: dict[str, Any], said: str
) -> None:
    async with Client(build_server(roots=[tmp_path])) as client:
        message = _error_text(await client.call_tool(tool, arguments))
    assert said in message, message
    assert "pydantic" not in message and "validation error" not in message, message


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.1", "example.com"])
def test_a_host_that_is_not_loopback_is_refused_whatever_the_transport(
    capsys: pytest.CaptureFixture[str], transport: str, host: str
) -> None:
    from agentrun.cli import main

    assert main(["mcp", "--transport", transport, "--host", host]) == 2
    assert "loopback only" in capsys.readouterr().err


# -- fuzzing ---------------------------------------------------------------------------------------


class _Tracking(ScriptedEngine):
    """The scripted engine, keeping every session it started."""

    def __init__(self, started: list[Session]) -> None:
        super().__init__(lambda prompt, number: [text(f"ok {number}"), result(f"ok {number}")])
        self.started = started

    def start(self, options: SessionOptions | None = None) -> Session:
        session = super().start(options)
        self.started.append(session)
        return session


def _broken() -> Engine:
    raise TypeError("an engine factory that needs arguments")


_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["scripted", "broken", "nope", "scripted-1", "scripted-2", "", "\0", ".."]),
)
_number = st.one_of(
    st.none(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
_calls = st.one_of(
    st.tuples(st.just("list_engines"), st.fixed_dictionaries({})),
    st.tuples(
        st.just("start_session"),
        st.fixed_dictionaries(
            {"engine": _text},
            optional={
                "cwd": st.one_of(st.none(), _text, st.sampled_from(["/", "/tmp", "sub"])),
                "model": st.one_of(st.none(), _text),
                "mode": st.one_of(st.none(), st.sampled_from(["plan", "act", "yolo"])),
                "extra": st.integers(),
            },
        ),
    ),
    *[
        st.tuples(
            st.just(tool),
            st.fixed_dictionaries(
                {"session_id": _text},
                optional={"prompt": _text, "timeout": _number} if tool == "run_turn" else {},
            ),
        )
        for tool in ("run_turn", "cancel_turn", "get_context", "close_session")
    ],
    st.tuples(st.just("no_such_tool"), st.fixed_dictionaries({})),
    st.tuples(
        st.sampled_from(["start_session", "run_turn"]),
        st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), _text)),
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=st.lists(_calls, min_size=1, max_size=8))
def test_fuzzed_tool_calls_get_results_or_reasons_and_leave_no_session(
    tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    (tmp_path / "sub").mkdir(exist_ok=True)
    started: list[Session] = []
    server = build_server(
        roots=[tmp_path],
        max_sessions=3,
        engines={"scripted": lambda: _Tracking(started), "broken": _broken},
    )

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(server) as client:
                for tool, arguments in calls:
                    answer = await client.call_tool(tool, arguments)
                    if answer.is_error:
                        message = _error_text(answer)
                        assert message.strip() and not BARE.match(message), (tool, arguments)
        assert all(session.closed for session in started), "a session outlived the server"

    anyio.run(main)
