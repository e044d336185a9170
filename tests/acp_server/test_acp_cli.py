"""``agentrun acp`` refuses bad arguments before it serves anything."""

from __future__ import annotations

import pytest

from agentrun.cli import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["acp", "--engine", "nonesuch"], "unknown engine 'nonesuch'"),
        (["acp", "--engine", "claude", "--script", "x.json"], "--script needs --embedded"),
        (["acp", "--engine", "replay", "--embedded"], "has no embedded configuration"),
    ],
)
def test_bad_arguments_are_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert said in capsys.readouterr().err
