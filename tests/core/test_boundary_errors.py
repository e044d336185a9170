"""What leaves the public context managers is the single typed error, never an exception group.

``async with engine.start(...)`` runs the session's background tasks in a task group, which
wraps whatever leaves the block; the boundary unwraps a group of one so ``except
ProcessExitError`` (or the caller's own ``except KeyError``) works as documented, on asyncio and
trio alike.
"""

from __future__ import annotations

import re
import sys

import pytest
from repo_paths import FAKES, REPO

from agentrun import (
    ErrorInfo,
    NotAuthenticatedError,
    ProcessExitError,
    SessionOptions,
    TurnTimeoutError,
    run_turn,
)
from agentrun._turns.boundary import single_error
from agentrun._vocabulary.errors import account_error, account_failure
from agentrun.engines.claude import ClaudeEngine
from agentrun.testing import Fail, Hang, ScriptedEngine
from agentrun.testing._scripted_engine import text

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio


def _claude_fake(mode: str) -> ClaudeEngine:
    return ClaudeEngine(
        argv_prefix=[sys.executable, str(FAKES / "claude_fake.py"), mode],
        cancel_grace=1.0,
        close_stdin_timeout=1.0,
        terminate_timeout=1.0,
    )


async def _raise_inside() -> None:
    async with ScriptedEngine().start() as session:
        await run_turn(session, "hi")
        raise KeyError("mine")


async def test_the_callers_own_error_leaves_the_block_as_itself() -> None:
    with pytest.raises(KeyError) as caught:
        await _raise_inside()
    assert type(caught.value) is KeyError


async def _one_turn(engine: ScriptedEngine | ClaudeEngine, timeout: float = 30) -> None:
    async with engine.start(SessionOptions()) as session:
        await run_turn(session, "hi", timeout=timeout)


async def test_an_agent_that_dies_is_a_process_exit_error_not_a_group() -> None:
    with pytest.raises(ProcessExitError) as caught:
        await _one_turn(_claude_fake("crash"))
    assert caught.value.summary is not None


async def test_a_failed_turn_of_a_background_engine_is_raised_alone() -> None:
    engine = ScriptedEngine([[text("partial"), Fail(ProcessExitError("gone", exit_code=9))]])
    with pytest.raises(ProcessExitError, match="gone"):
        await _one_turn(engine)


async def test_a_timeout_is_a_turn_timeout_error() -> None:
    with pytest.raises(TurnTimeoutError):
        await _one_turn(ScriptedEngine([[text("working"), Hang()]]), timeout=0.2)


def test_single_error_keeps_real_groups() -> None:
    inner = ValueError("x")
    nested = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [inner])])
    assert single_error(nested) is inner
    several = BaseExceptionGroup("two", [ValueError("a"), KeyError("b")])
    assert single_error(several) is several
    plain = RuntimeError("plain")
    assert single_error(plain) is plain


def test_every_error_has_a_stable_snake_case_code_and_derives_from_agentrun_error() -> None:
    import agentrun
    from agentrun import AgentrunError
    from agentrun._wire.jsonrpc import ConnectionClosedError, JsonRpcError, RequestTimeoutError
    from agentrun.engines.acp import AcpTimeoutError

    classes = [getattr(agentrun, n) for n in agentrun.__all__ if n.endswith("Error")]
    classes += [JsonRpcError, ConnectionClosedError, RequestTimeoutError, AcpTimeoutError]
    for cls in classes:
        assert issubclass(cls, AgentrunError), cls
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", cls.error_code), (cls, cls.error_code)
        assert not issubclass(cls, OSError), cls  # a timeout of ours is not an OS error
    assert agentrun.SessionNotFoundError.error_code == "session_not_found"


def test_engine_names_round_trip() -> None:
    from agentrun import engine_names, get_engine

    for name in engine_names():
        if name == "replay":
            continue  # needs a transcript
        assert get_engine(name).name == name


def test_errors_pickle_with_their_fields() -> None:
    """Errors cross process boundaries (Ray actors, multiprocessing) intact."""
    import pickle

    from agentrun import ConfigurationError, TurnTimeoutError

    crash = pickle.loads(pickle.dumps(ProcessExitError("agent died", exit_code=3, stderr_tail="x")))
    assert type(crash) is ProcessExitError and crash.exit_code == 3 and crash.stderr_tail == "x"
    idle = pickle.loads(pickle.dumps(TurnTimeoutError("quiet", kind="idle", seconds=2.0)))
    assert (idle.kind, idle.seconds, str(idle)) == ("idle", 2.0, "quiet")
    bad = pickle.loads(pickle.dumps(ConfigurationError("bad model", option="model")))
    assert bad.option == "model" and isinstance(bad, ValueError)


def _documented_tree(text: str) -> dict[str, tuple[str | None, str]]:
    """``{class name: (parent name, error_code)}`` of the tree drawn in ``text``: one class a
    line, four columns of ``│``/``├──``/``└──`` a level, then its name and its code."""
    start = text.index("AgentrunError ")
    indent = start - (text.rfind("\n", 0, start) + 1)
    tree: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []
    for line in text[start - indent :].splitlines():
        drawing = re.match(r"([│├└─ ]*)(\w+)\s+(\w+)", line[indent:])
        if drawing is None or not drawing.group(2).endswith("Error"):
            break
        depth = len(drawing.group(1)) // 4
        del parents[depth:]
        tree[drawing.group(2)] = (parents[-1] if parents else None, drawing.group(3))
        parents.append(drawing.group(2))
    return tree


def _public_error_tree() -> dict[str, tuple[str | None, str]]:
    """The same mapping walked from the code: every subclass of AgentrunError, recursively,
    that a public module exports by name."""
    import agentrun
    import agentrun.abc
    import agentrun.engines.acp
    from agentrun import AgentrunError

    public: set[type] = set()
    for module in (agentrun, agentrun.abc, agentrun.engines.acp):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, AgentrunError):
                public.add(value)
    tree: dict[str, tuple[str | None, str]] = {}

    def walk(cls: type[AgentrunError], parent: str | None) -> None:
        here = parent
        if cls in public:
            tree[cls.__name__] = (parent, cls.error_code)
            here = cls.__name__
        for sub in cls.__subclasses__():
            walk(sub, here)

    walk(AgentrunError, None)
    return tree


def test_the_documented_error_tree_is_the_code_s() -> None:
    """docs/vocabulary.md and the errors module draw the same tree as the classes: every public
    error, its parent and its error_code, none missing and none extra."""
    import agentrun._vocabulary.errors as errors_module

    code_tree = _public_error_tree()
    assert len(code_tree) >= 21
    doc = (REPO / "docs" / "vocabulary.md").read_text(encoding="utf-8")
    assert _documented_tree(doc[doc.index("## Errors") :]) == code_tree
    assert _documented_tree(errors_module.__doc__ or "") == code_tree


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ErrorInfo(message="Not logged in · Please run /login", fatal=True), "not_authenticated"),
        (ErrorInfo(message="x", status=401, fatal=True), "not_authenticated"),
        (ErrorInfo(message="Forbidden", status=403, fatal=True), "not_authenticated"),
        (ErrorInfo(message="x", code="authentication_failed", fatal=True), "not_authenticated"),
        (
            ErrorInfo(message="Internal error", data={"details": "401 invalid x-api-key"}),
            "not_authenticated",
        ),
        (ErrorInfo(message="Payment required", status=402, fatal=True), "quota_exceeded"),
        (
            ErrorInfo(message="You exceeded your current quota", status=429, fatal=True),
            "quota_exceeded",
        ),
        (ErrorInfo(message="rate limited, slow down", status=429, fatal=True), None),
        (ErrorInfo(message="API Error: 500 upstream error", status=500, fatal=True), None),
        (ErrorInfo(message="Overloaded", code="overloaded_error", fatal=True), None),
    ],
)
def test_account_failures_are_told_apart_from_other_failures(
    error: ErrorInfo, expected: str | None
) -> None:
    kind = account_failure(error)
    assert (kind.error_code if kind is not None else None) == expected


def test_only_a_fatal_account_error_makes_the_typed_error() -> None:
    words = "Internal error"
    data = {"details": "401 invalid x-api-key"}
    retried = ErrorInfo(message="invalid x-api-key", status=401)
    assert account_error([retried], "claude") is None  # the agent went on after it
    fatal = ErrorInfo(message=words, code="-32603", fatal=True, data=data)
    error = account_error([retried, fatal], "qwen")
    assert isinstance(error, NotAuthenticatedError) and error.engine == "qwen"
    assert error.message == "Internal error: 401 invalid x-api-key"
    assert error.agent_code == "-32603" and error.status is None
