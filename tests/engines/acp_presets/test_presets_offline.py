"""The offline configurations of the Claude and Codex ACP presets, without running an agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from agentrun import EngineUnavailableError
from agentrun.offline import claude_acp_offline, claude_offline, codex_acp_offline, offline_config


def test_codex_acp_config_lets_the_mode_decide_and_knows_the_model(tmp_path: Path) -> None:
    try:
        config = codex_acp_offline("http://127.0.0.1:9", tmp_path, context_window=100_000)
    except EngineUnavailableError as exc:  # the catalog comes from the pinned codex
        pytest.skip(str(exc))
    toml = tomllib.loads(Path(config.env["CODEX_HOME"], "config.toml").read_text())
    # Without these keys the ACP mode decides, and permission requests reach the client.
    assert "approval_policy" not in toml and "sandbox_mode" not in toml
    assert toml["model_providers"]["fake"]["base_url"] == "http://127.0.0.1:9/v1"
    catalog = json.loads(Path(toml["model_catalog_json"]).read_text())
    (entry,) = catalog["models"]
    assert (entry["slug"], entry["context_window"]) == (toml["model"], 100_000)
    assert config.context_window == 100_000 * entry["effective_context_window_percent"] // 100
    assert config.args == ()
    assert config.agent == offline_config("codex-acp", "http://127.0.0.1:9", tmp_path / "b").agent


def test_claude_acp_config_is_the_claude_environment(tmp_path: Path) -> None:
    config = claude_acp_offline("http://127.0.0.1:9", tmp_path / "a")
    plain = claude_offline("http://127.0.0.1:9", tmp_path / "b")
    assert config.agent == "claude-acp"
    differing = {
        k for k in config.env.keys() | plain.env.keys() if config.env.get(k) != plain.env.get(k)
    }
    assert differing <= {"HOME"}
    assert config.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
