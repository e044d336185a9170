"""Engine-specific session options: a name nobody reads is refused, naming the known ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from repo_paths import REPO

from agentrun import ConfigurationError, SessionOptions
from agentrun._vocabulary.options import ENGINE_OPTION_KEYS


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("claude.permision_mode", "known: claude.permission_mode"),
        (
            "codex.profil",
            "codex.profile, codex.ephemeral, codex.skip_git_repo_check, codex.config.<key>",
        ),
        ("codex.config.", "codex.config.<key>"),
        ("opencode.permissions", "opencode.permission, opencode.title, opencode.variant"),
        ("acp.mdoe", "known: acp.mode, acp.config.<key>"),
        ("gemini.mode", "the gemini engine reads its options as 'acp.<name>'"),
        ("codex-app-server.profile", "as 'codex.<name>'"),
    ],
)
def test_an_unknown_engine_option_is_a_configuration_error_naming_the_known_ones(
    key: str, said: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SessionOptions(options={key: "x"})
    assert caught.value.error_code == "configuration"
    assert f"unknown engine option {key!r}" in str(caught.value) and said in str(caught.value)


@pytest.mark.parametrize(
    "key",
    [
        "claude.permission_mode",
        "codex.config.model_providers.fake.stream_max_retries",
        "acp.config.thought_level",
        "opencode.variant",
        "my-plugin.anything",  # an engine from another package: its own business
    ],
)
def test_known_options_and_other_packages_options_pass(key: str) -> None:
    assert SessionOptions(options={key: "x"}).options == {key: "x"}


def _options_read_by_the_engines() -> set[tuple[str, str]]:
    """Every ``x.option("<namespace>", "<name>")`` with literal arguments in the engines, and
    the prefixes they test with ``key.startswith("<namespace>.<prefix>.")``."""
    found: set[tuple[str, str]] = set()
    for path in (REPO / "agentrun/engines").rglob("*.py"):
        for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if (
                node.func.attr == "option"
                and len(args) >= 2
                and all(isinstance(a, str) for a in args[:2])
            ):
                found.add((str(args[0]), str(args[1])))
            elif node.func.attr == "startswith" and args and isinstance(args[0], str):
                namespace, _, rest = str(args[0]).partition(".")
                if namespace in ENGINE_OPTION_KEYS and rest.endswith("."):
                    found.add((namespace, rest))
    return found


def test_the_table_of_known_options_is_what_the_engines_read() -> None:
    read = _options_read_by_the_engines()
    assert ("claude", "permission_mode") in read and ("codex", "config.") in read
    declared = {(ns, name) for ns, names in ENGINE_OPTION_KEYS.items() for name in names}
    # codex reads two flags through a helper: _flag(options, "ephemeral"), so by name only.
    codex_flags = {("codex", "ephemeral"), ("codex", "skip_git_repo_check")}
    assert read | codex_flags == declared
