"""Environment values never appear in reprs, logs or errors: only their names do."""

from __future__ import annotations

import logging

import pytest

from agentrun import ConfigurationError, FleetTask, SessionOptions

SECRET = "sk-agentrun-test-secret-4711"


def test_options_show_environment_names_not_values() -> None:
    options = SessionOptions(env={"API_KEY": SECRET, "HOME": "/tmp/x"})
    for text in (repr(options), str(options), repr(FleetTask(engine="claude", prompts=("hi",),
                                                              options=options))):  # fmt: skip
        assert SECRET not in text and "/tmp/x" not in text
        assert "API_KEY" in text
    assert options.env["API_KEY"] == SECRET  # the value itself is kept for the agent


def test_a_rejected_environment_entry_names_the_variable_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigurationError) as caught:
        SessionOptions(env={"API_KEY": SECRET + "\0"})
    assert SECRET not in str(caught.value)
    assert SECRET not in caplog.text
