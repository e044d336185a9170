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

from agentrun import ConfigurationError, Engine, SessionOptions, engine_names, get_engine
from agentrun.mcp_server import build_server
from agentrun.testing import ScriptedEngine, ScriptedSession
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
    assert sorted(engines) == engine_names()
    replay = engines["replay"]
    assert replay["available"] is False and "path" in replay["problem"]
    assert engines["scripted"]["available"] is True


async def test_every_bad_request_says_what_is_wrong(tmp_path: Path) -> None:
    async with Client(build_server(roots=[tmp_path])) as client:
        for arguments, said in [
            ({"engine": "replay"}, "replay"),
            ({"engine": "scripted", "cwd": "a\0b"}, "NUL"),
            ({"engine": "scripted", "model": "--dangerously"}, "model"),
            ({"engine": "scripted", "cwd": str(tmp_path / "missing")}, "not a directory"),
        ]:
            message = _error_text(await client.call_tool("start_session", arguments))
            assert not BARE.match(message) and said in message, (arguments, message)
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

    def __init__(self, started: list[ScriptedSession]) -> None:
        super().__init__(lambda prompt, number: [text(f"ok {number}"), result(f"ok {number}")])
        self.started = started

    def start(self, options: SessionOptions | None = None) -> ScriptedSession:
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
    started: list[ScriptedSession] = []
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
