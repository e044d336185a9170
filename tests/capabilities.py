"""Which engine can do what, and the test that shows it: the source of ``docs/capabilities.md``.

Every (engine, capability) cell is one of

* :class:`Proven` — test node ids that run that engine's real agent for that capability;
* :class:`Cannot` — the engine cannot, and says so with a typed error (an
  :class:`agentrun.AgentrunError` subclass), and the node ids of the test that sees it raised;
* :class:`Notice` — the engine cannot, the feature does what it can instead and says so in a
  documented notice message (nothing fails), and the node ids of the test that sees the notice;
* :class:`Marked` — the engine cannot know it, and every result says so in a documented field
  (``cost_source`` ``unavailable``; nothing fails, nothing is invented), and the node ids of the
  test that reads the field;
* :class:`Open` — neither yet, with a one-line reason: the work that is left.

``python tests/capabilities.py`` prints the page, ``--write`` writes it.
``tests/docs/test_capabilities.py`` checks that the page is what this module makes, that every
cited node id is collected by pytest (so a cell cannot cite a test that is gone, or that no longer
runs that engine), and that every typed cannot names a real, documented error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "capabilities.md"

#: The ten engines: the nine of ``agentrun.offline.EMBEDDED_ENGINES`` and the generic ``acp``.
ENGINES: tuple[str, ...] = (
    "claude",
    "claude-acp",
    "codex",
    "codex-app-server",
    "codex-acp",
    "opencode",
    "opencode-acp",
    "gemini",
    "qwen",
    "acp",
)


@dataclass(frozen=True)
class Proven:
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Cannot:
    error: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    subtype: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Marked:
    field: str
    value: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Open:
    reason: str


Cell = Proven | Cannot | Notice | Marked | Open


@dataclass(frozen=True)
class Capability:
    name: str
    means: str
    cells: Mapping[str, Cell]


def _ids(template: str, engines: tuple[str, ...] | list[str]) -> dict[str, Proven]:
    """One :class:`Proven` per engine, its node id ``template`` with ``{e}`` the engine."""
    return {e: Proven((template.format(e=e),)) for e in engines}


def _open(reason: str, engines: tuple[str, ...] | list[str]) -> dict[str, Open]:
    return {e: Open(reason) for e in engines}


ALL = ENGINES
NINE = tuple(e for e in ENGINES if e != "acp")

COMPLIANCE = "tests/compliance/test_compliance.py::test_a_cancelled_turn_leaves_nothing_to_the_next"
STEERING = "tests/engines/test_steering_e2e.py"
STEERABLE = ("claude", "codex-app-server")
FORK = (
    "tests/engines/test_fork_e2e.py::"
    "test_a_fork_goes_on_with_the_conversation_and_the_source_is_unchanged"
)
#: The agents that advertise no ACP ``session/fork``.
CANNOT_FORK = ("gemini", "qwen")
REFUSES_STEER = tuple(e for e in ENGINES if e not in STEERABLE)

CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        "turns",
        "a prompt runs as a turn: messages streamed, one result",
        {
            **_ids(
                "tests/compliance/test_failed_tools.py::"
                "test_a_failed_command_is_a_failed_tool_result[asyncio-{e}]",
                NINE,
            ),
            "acp": Proven((f"{COMPLIANCE}[asyncio-acp-start]",)),
        },
    ),
    Capability(
        "context gauge",
        "the context fill (`context_window` messages) after model calls",
        {
            **_ids(
                "tests/engines/test_policies_e2e.py::"
                "test_context_thresholds_through_a_real_agent[asyncio-{e}]",
                ("claude", "opencode", "codex-app-server", "acp"),
            ),
            **_ids(
                "tests/acp_server/test_acp_server.py::test_conversation_over_acp[asyncio-{e}]",
                ("claude-acp", "codex", "codex-acp", "opencode-acp", "qwen"),
            ),
            # Gemini CLI 0.61 sends no `usage_update`; its prompt result's
            # `_meta.quota.token_count.input_tokens` sums the prompts of all the turn's model
            # calls, with no window size: the fill cannot be known. A context policy is
            # reported ignored; the ACP facade test checks no fill is invented.
            "gemini": Notice(
                "unsupported_option",
                (
                    "tests/engines/test_policies_e2e.py::"
                    "test_a_context_policy_on_an_agent_that_cannot_know_the_fill_is_reported_ignored"
                    "[asyncio-gemini]",
                ),
            ),
        },
    ),
    Capability(
        "usage",
        "a turn's tokens are what the model server served",
        {
            **_ids(
                "tests/engines/test_ledger_e2e.py::"
                "test_a_turns_usage_is_what_the_server_served[asyncio-{e}]",
                tuple(e for e in ALL if e != "opencode-acp"),
            ),
            # OpenCode 1.18.33 over ACP sends only the last model call's tokens (and the
            # session's cost): a turn of several calls has its exact cost and no token figure,
            # the last call's kept apart in `last_call_usage` (a one-call turn's are its own).
            "opencode-acp": Marked(
                "usage_source",
                "unavailable",
                (
                    "tests/engines/test_ledger_e2e.py::"
                    "test_a_tool_turns_usage_is_the_turns_and_the_last_call_is_kept_apart"
                    "[asyncio-opencode-acp]",
                ),
            ),
        },
    ),
    Capability(
        "cost",
        "a turn's cost is known: reported, derived or estimated, and says which",
        {
            **_ids(
                "tests/engines/test_usage_sources_e2e.py::"
                "test_every_result_says_where_its_tokens_and_cost_came_from[asyncio-{e}]",
                (
                    "claude",
                    "codex",
                    "codex-app-server",
                    "codex-acp",
                    "opencode",
                    "opencode-acp",
                    "qwen",
                    "acp",
                ),
            ),
            "claude-acp": Proven(
                (
                    "tests/acp_server/test_acp_server.py::"
                    "test_conversation_over_acp[asyncio-claude-acp]",
                )
            ),
            # Gemini CLI 0.61 sends a turn's tokens as `_meta.quota.token_count` on the prompt
            # result: the whole prompt (cache reads not told apart) and the answer. A price
            # needs the split, so nothing is priced.
            "gemini": Marked(
                "cost_source",
                "unavailable",
                (
                    "tests/engines/test_usage_sources_e2e.py::"
                    "test_tokens_without_their_split_are_never_priced[asyncio-gemini]",
                ),
            ),
        },
    ),
    Capability(
        "session totals",
        "a session's tokens and cost summed over its turns, across a resume",
        {
            **_ids(
                "tests/engines/test_session_totals_e2e.py::"
                "test_a_sessions_totals_are_what_the_server_served_across_a_resume"
                "[asyncio-{e}]",
                ALL,
            ),
        },
    ),
    Capability(
        "cancel",
        "a turn cancelled mid-stream ends, and the session takes the next prompt",
        _ids(f"{COMPLIANCE}[asyncio-{{e}}-mid_stream]", ALL),
    ),
    Capability(
        "isolation",
        "nothing of a cancelled turn (at its start, mid-stream, in a tool, in a hung call) "
        "reaches the next",
        {
            e: Proven(
                tuple(
                    f"{COMPLIANCE}[asyncio-{e}-{moment}]"
                    for moment in ("start", "mid_stream", "tool", "hung_model_call")
                )
            )
            for e in ALL
        },
    ),
    Capability(
        "structured output",
        "`output_type=`: the answer validated into a model",
        {
            **_ids(
                "tests/engines/test_structured_output_e2e.py::"
                "test_the_answer_is_validated_into_the_model[asyncio-{e}]",
                ALL,
            ),
        },
    ),
    Capability(
        "steer",
        "`turn.steer(text)`: input to a running turn",
        {
            **_ids(
                f"{STEERING}::test_a_steer_while_a_tool_runs_reaches_the_next_model_request"
                "[asyncio-{e}]",
                STEERABLE,
            ),
            **{
                e: Cannot(
                    "SteeringNotSupportedError",
                    (
                        f"{STEERING}::test_engines_without_input_during_a_turn_refuse_at_once"
                        f"[asyncio-{e}]",
                    ),
                )
                for e in REFUSES_STEER
            },
        },
    ),
    Capability(
        "wind-down",
        "`wind_down=`: the agent told to wrap up before the turn's deadline",
        {
            **_ids(
                f"{STEERING}::test_a_wound_down_turn_ends_by_itself_before_its_deadline"
                "[asyncio-{e}]",
                STEERABLE,
            ),
            **{
                e: Notice(
                    "wind_down",
                    (
                        f"{STEERING}::test_engines_without_input_during_a_turn_refuse_at_once"
                        f"[asyncio-{e}]",
                    ),
                )
                for e in REFUSES_STEER
            },
        },
    ),
    Capability(
        "resume",
        "a session continued by its resume id from another process",
        {
            **_ids(
                "tests/cli/test_sessions.py::"
                "test_sessions_resume_continues_a_session_from_another_process[{e}]",
                (
                    "claude",
                    "claude-acp",
                    "codex",
                    "codex-app-server",
                    "codex-acp",
                    "opencode",
                    "opencode-acp",
                ),
            ),
            **_ids(
                "tests/engines/test_session_totals_e2e.py::"
                "test_a_sessions_totals_are_what_the_server_served_across_a_resume"
                "[asyncio-{e}]",
                ("qwen", "acp"),
            ),
            # Resumed at once, in the minute the session began: Gemini CLI 0.61 would erase it
            # on `session/load`; the library waits out that minute (engines/acp/_gemini_chats.py).
            "gemini": Proven(
                (
                    "tests/cli/test_sessions.py::"
                    "test_sessions_resume_continues_a_session_from_another_process[gemini]",
                    "tests/engines/test_session_totals_e2e.py::"
                    "test_a_sessions_totals_are_what_the_server_served_across_a_resume"
                    "[asyncio-gemini]",
                )
            ),
        },
    ),
    Capability(
        "fork",
        "`fork=True` (`agentrun sessions fork`): a copy continued in a new agent session, "
        "the source unchanged",
        {
            **{
                e: Proven(
                    (
                        f"{FORK}[asyncio-{e}]",
                        *(
                            (
                                "tests/cli/test_sessions.py::"
                                f"test_sessions_fork_continues_a_copy_in_a_new_session[{e}]",
                            )
                            if e in ("claude", "codex-app-server")
                            else ()
                        ),
                    )
                )
                for e in ENGINES
                if e not in CANNOT_FORK
            },
            **{e: Cannot("ForkNotSupportedError", (f"{FORK}[asyncio-{e}]",)) for e in CANNOT_FORK},
        },
    ),
    Capability(
        "ATIF",
        "a live session exported as a valid ATIF trajectory",
        _ids(
            "tests/engines/test_trajectory_e2e.py::"
            "test_a_live_session_exports_a_valid_trajectory[asyncio-{e}]",
            ALL,
        ),
    ),
    Capability(
        "ACP facade",
        "`agentrun acp`: the engine served to an ACP client",
        {
            **_ids(
                "tests/acp_server/test_acp_server.py::test_conversation_over_acp[asyncio-{e}]", ALL
            ),
        },
    ),
    Capability(
        "sandbox",
        "`SessionOptions(sandbox=...)`: the agent cannot get out of the bubblewrap sandbox",
        _ids(
            "tests/compliance/test_sandbox_escape.py::"
            "test_a_sandboxed_agent_cannot_get_out[asyncio-{e}-bubblewrap]",
            ALL,
        ),
    ),
    Capability(
        "credential proxy",
        "`--upstream`: the real key reaches the upstream only; usage is the proxy's ledger",
        {
            **_ids(
                "tests/cli/test_proxy_cli.py::"
                "test_the_real_key_reaches_the_upstream_only_and_usage_is_the_ledger[asyncio-{e}-host]",
                NINE,
            ),
            # `agentrun run --live` cannot start the generic engine (it has no agent of its
            # own there): the same guarantee through the library's CredentialProxy.
            "acp": Proven(
                (
                    "tests/engines/test_proxy_e2e.py::"
                    "test_the_real_key_reaches_the_upstream_only_and_usage_is_the_proxys_ledger"
                    "[asyncio-acp]",
                )
            ),
        },
    ),
)


def _symbol(cell: Cell) -> str:
    if isinstance(cell, Proven):
        return "✔"
    if isinstance(cell, Cannot):
        return f"cannot: `{cell.error}`"
    if isinstance(cell, Notice):
        return f"notice: `{cell.subtype}`"
    if isinstance(cell, Marked):
        return f"marked: `{cell.field}={cell.value}`"
    return "✗"


def _evidence(capability: Capability) -> list[str]:
    """The capability's cells grouped by what shows them, one bullet per test or reason."""
    groups: dict[str, list[str]] = {}
    for engine in ENGINES:
        cell = capability.cells[engine]
        if isinstance(cell, Open):
            key = f"✗ {cell.reason}"
        else:
            base = sorted({test.split("[", 1)[0] for test in cell.tests})
            tests = ", ".join(f"`{b}`" for b in base)
            if isinstance(cell, Proven):
                key = f"✔ {tests}"
            elif isinstance(cell, Notice):
                key = f"notice: {tests}"
            elif isinstance(cell, Marked):
                key = f"marked: {tests}"
            else:
                key = f"cannot: {tests}"
        groups.setdefault(key, []).append(engine)
    return [f"* {key} — {', '.join(engines)}" for key, engines in groups.items()]


def render() -> str:
    """The page: the table, then each capability's evidence."""
    lines = [
        "# Capabilities: what each engine can do",
        "",
        "<!-- Generated by `python tests/capabilities.py --write` from tests/capabilities.py; "
        "do not edit. -->",
        "",
        "What each engine can do, as the test suite shows it. This page is generated from "
        "`tests/capabilities.py`, which names, for every cell, the tests that prove it; "
        "`tests/docs/test_capabilities.py` fails when the page differs from that mapping, when a "
        "cited test is not collected by pytest (gone, renamed, or no longer run on that engine), "
        "or when a typed cannot names no documented error. Regenerate with "
        "`python tests/capabilities.py --write`.",
        "",
        "* ✔ — a test runs that engine's real agent (against the embedded model server) for it",
        "* cannot: `Error` — the engine cannot, and says so at once with that typed error "
        "(a test sees it raised)",
        "* notice: `subtype` — the engine cannot; the feature goes on without it and says so in a "
        "`system` message of that subtype, nothing fails (a test sees the notice)",
        "* marked: `field=value` — the engine cannot know it; every result says so in that "
        "documented field, nothing fails and nothing is invented (a test reads the field)",
        "* ✗ — not done or not tested yet; the reason is under Evidence",
        "",
        "| capability | " + " | ".join(f"`{e}`" for e in ENGINES) + " |",
        "|---|" + "---|" * len(ENGINES),
    ]
    for capability in CAPABILITIES:
        cells = " | ".join(_symbol(capability.cells[e]) for e in ENGINES)
        lines.append(f"| {capability.name} | {cells} |")
    lines += [
        "",
        "The engines are the nine of `agentrun.offline.EMBEDDED_ENGINES` and the generic `acp` "
        "engine (the compliance suite runs it as claude-agent-acp started as a plain command). "
        "Tests run on asyncio and trio; the cited node ids are the asyncio ones.",
        "",
        "## Evidence",
    ]
    for capability in CAPABILITIES:
        lines += ["", f"### {capability.name}", "", capability.means + ".", ""]
        lines += _evidence(capability)
    lines += [
        "",
        "See also [reliability.md](reliability.md) for each guarantee and the test that keeps it.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--write"]:
        PAGE.write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
