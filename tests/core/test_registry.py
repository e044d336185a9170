"""Names to engines and translators: every name round-trips; unknown names are typed errors;
installed packages add engines through entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from agentrun import ConfigurationError, engine_names, get_engine, get_translator
from agentrun.engines import _registry as registry

BUILT_IN = ["acp", "claude", "codex", "codex-app-server", "opencode", "opencode-acp"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_engine_name_round_trips(name: str) -> None:
    assert get_engine(name).name == name
    assert name in engine_names()


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_engine_has_a_fresh_translator(name: str) -> None:
    one, two = get_translator(name), get_translator(name)
    assert one is not two
    assert one.feed({"unexpected": True}) is not None


def test_unknown_names_are_configuration_errors_listing_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="claude") as caught:
        get_engine("no-such-agent")
    assert caught.value.option == "engine"
    with pytest.raises(ConfigurationError):
        get_translator("no-such-agent")


def test_installed_packages_register_engines_and_built_ins_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def entry_points(group: str) -> list[EntryPoint]:
        if group == registry.ENGINE_GROUP:
            return [
                EntryPoint("toy-plugin", "agentrun.testing._scripted_engine:ScriptedEngine", group),
                EntryPoint("claude", "agentrun.testing._scripted_engine:ScriptedEngine", group),
            ]
        return []

    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert "toy-plugin" in engine_names()
    assert type(get_engine("toy-plugin")).__name__ == "ScriptedEngine"
    assert type(get_engine("claude")).__name__ == "ClaudeEngine"


def test_a_broken_plugin_table_does_not_break_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(**kwargs: Any) -> list[EntryPoint]:
        raise RuntimeError("a broken distribution")

    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", broken)
    assert set(BUILT_IN) <= set(engine_names())


def test_a_plugin_that_cannot_be_imported_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def entry_points(group: str) -> list[EntryPoint]:
        return [EntryPoint("gone", "no_such_module:Engine", group)]

    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    with pytest.raises(ConfigurationError, match="not available"):
        get_engine("gone")


def test_import_agentrun_loads_no_engine_until_one_is_used() -> None:
    """The engines and replay are imported on first use (a fresh interpreter, as a program
    that only imports the library starts)."""
    program = (
        "import json, sys, agentrun\n"
        "def loaded(): return sorted(m for m in sys.modules if m.startswith('agentrun.engines.'))\n"
        "before = loaded()\n"
        "agentrun.get_translator('opencode')\n"
        "agentrun.replay\n"
        "print(json.dumps([before, loaded()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    ).stdout
    before, after = json.loads(out)
    assert before == ["agentrun.engines._registry"]
    assert {"agentrun.engines._replay", "agentrun.engines.opencode"} <= set(after)
