"""The context-window tracker and the model catalog."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentrun import Catalog, ContextTracker, Usage, default_catalog
from agentrun._vocabulary.context import FOUND_LIMIT

CALL = Usage(input_tokens=12, cache_read_tokens=8192, cache_write_tokens=2048, output_tokens=15)


def test_catalog_exact_alias_family_and_provider_prefix() -> None:
    catalog = default_catalog()
    exact = catalog.lookup("claude-sonnet-4-5-20250929")
    assert exact is not None and (exact.context_window, exact.matched_by) == (200000, "exact")
    alias = catalog.lookup("sonnet")
    assert alias is not None and (alias.id, alias.matched_by) == ("claude-sonnet-5-5", "alias")
    family = catalog.lookup("claude-opus-5-7-20270101")
    assert family is not None and (family.context_window, family.matched_by) == (
        1000000,
        "family",
    )
    prefixed = catalog.lookup("anthropic/claude-3-5-haiku-20241022")
    assert prefixed is not None and prefixed.max_output_tokens == 8192
    assert catalog.lookup("fake/fake-model") is None
    assert catalog.lookup(None) is None


def test_catalog_extension_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "models.json"
    extra.write_text(json.dumps({"models": {"fake-model": {"context_window": 32000}}}))
    monkeypatch.setenv("AGENTRUN_MODEL_CATALOG", str(extra))
    info = default_catalog().lookup("fake/fake-model")
    assert info is not None and info.context_window == 32000


def test_used_is_the_latest_call_never_a_sum() -> None:
    tracker = ContextTracker(model="claude-opus-5-5")
    first = tracker.observe_call(CALL)
    second = tracker.observe_call(Usage(input_tokens=100, cache_read_tokens=10252))
    assert first is not None and first.context is not None
    assert second is not None and second.context is not None
    assert first.context.used_tokens == 10252
    assert second.context.used_tokens == 10352
    assert (second.context.size_tokens, second.context.size_source) == (1000000, "catalog")
    assert tracker.observe_call(Usage(output_tokens=5)) is None


def test_size_sources_in_priority_order() -> None:
    unknown = ContextTracker(model="mystery-model")
    reading = unknown.observe_call(CALL)
    assert reading is not None and reading.context is not None
    assert (reading.context.size_tokens, reading.context.size_source) == (None, None)
    assert reading.context.fraction is None

    user = ContextTracker(model="claude-opus-5-5", override=150000)
    message = user.observe_call(CALL)
    assert message is not None and message.context is not None
    assert message.context.size_source == "user"

    user.report_size(200000)
    refreshed = user.refresh()
    assert refreshed is not None and refreshed.context is not None
    assert (refreshed.context.size_tokens, refreshed.context.size_source) == (200000, "agent")
    assert refreshed.context.used_tokens == 10252
    assert user.refresh() is None, "nothing changed, nothing to re-issue"


def test_agent_reported_reading() -> None:
    tracker = ContextTracker(model=None)
    message = tracker.observe_reported(1200, 200000)
    assert message.context is not None
    assert message.context.used_source == "agent" and message.context.size_source == "agent"
    assert message.context.fraction == pytest.approx(0.006)


def test_custom_catalog() -> None:
    catalog = Catalog({"models": {"m": {"context_window": 10, "aliases": ["mm"]}}})
    tracker = ContextTracker(model="mm", catalog=catalog)
    message = tracker.observe_call(Usage(input_tokens=5))
    assert message is not None and message.context is not None
    assert message.context.fraction == 0.5


def test_a_call_with_no_prompt_tokens_is_not_a_reading() -> None:
    # Agents send all-zero usage before their first call (Codex app-server as a turn starts):
    # a zero fill would re-arm every context threshold.
    tracker = ContextTracker(model="m", override=1000)
    assert tracker.observe_call(Usage(input_tokens=0, cache_read_tokens=0, output_tokens=0)) is None
    assert tracker.observe_call(Usage(output_tokens=5)) is None
    reading = tracker.observe_call(Usage(input_tokens=10))
    assert reading is not None and reading.context is not None
    assert reading.context.used_tokens == 10


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "no-such-model-anywhere"])
def test_a_reading_of_a_call_is_what_validation_makes(model: str) -> None:
    """A reading made only of the library's numbers is assembled without the validator: the
    same fields, the same fields set, at every level, as the validated constructors make."""
    from agentrun import ContextWindow, Message

    tracker = ContextTracker(model=model)
    raw = {"type": "step_finish"}
    made = tracker.observe_call(Usage(input_tokens=5, cache_read_tokens=7), raw=raw)
    size, source = tracker.size()
    validated = Message.context_window(
        ContextWindow(
            used_tokens=12, size_tokens=size, used_source="call_usage", size_source=source
        ),
        raw=raw,
    )
    assert made is not None
    assert made == validated
    assert made.raw is raw
    for ours, theirs in ((made, validated), (made.context, validated.context),
                         (made.usage, validated.usage)):  # fmt: skip
        assert ours is not None
        assert theirs is not None
        assert type(ours) is type(theirs)
        assert list(vars(ours).items()) == list(vars(theirs).items())
        assert ours.model_fields_set == theirs.model_fields_set


def test_a_catalog_matches_a_name_again_after_it_is_extended() -> None:
    catalog = Catalog({"models": {}})
    assert catalog.lookup("acme/fake-model") is None
    catalog.extend({"models": {"fake-model": {"context_window": 1000}}})
    found = catalog.lookup("acme/fake-model")
    assert found is not None and found.context_window == 1000
    assert catalog.lookup("fake-other") is None
    catalog.extend({"families": [{"prefix": "fake-", "context_window": 2000}]})
    family = catalog.lookup("fake-other")
    assert family is not None
    assert (family.id, family.context_window, family.matched_by) == ("fake-", 2000, "family")
    catalog.extend({"models": {"fake-model": {"context_window": 3000}}})
    again = catalog.lookup("acme/fake-model")
    assert again is not None and again.context_window == 3000


def test_a_catalog_remembers_a_bounded_number_of_names() -> None:
    """Each name's match is remembered, never more than ``FOUND_LIMIT`` of them: a process that
    meets many names (generated ones) keeps a bounded memo and the right answers."""
    catalog = Catalog({"families": [{"prefix": "fake-", "context_window": 2000}]})
    for i in range(FOUND_LIMIT * 2 + 3):
        found = catalog.lookup(f"fake-{i}")
        assert found is not None and found.context_window == 2000
        assert catalog.lookup(f"other-{i}") is None
        assert len(catalog._found) <= FOUND_LIMIT  # pyright: ignore[reportPrivateUsage]


def _window(model: str) -> int | None:
    reading = ContextTracker(model=model).observe_call(CALL)
    assert reading is not None and reading.context is not None
    return reading.context.size_tokens


def test_trackers_follow_the_catalog_variable_as_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "models.json"
    extra.write_text(json.dumps({"models": {"fake-model": {"context_window": 32000}}}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"models": {"fake-model": {"context_window": 64000}}}))
    monkeypatch.delenv("AGENTRUN_MODEL_CATALOG", raising=False)
    assert _window("fake-model") is None
    monkeypatch.setenv("AGENTRUN_MODEL_CATALOG", str(extra))
    assert _window("fake-model") == 32000
    monkeypatch.setenv("AGENTRUN_MODEL_CATALOG", str(other))
    assert _window("fake-model") == 64000
    # An environment put in place of os.environ (a plain mapping) is read as well.
    monkeypatch.setattr(os, "environ", {"AGENTRUN_MODEL_CATALOG": str(extra)})
    assert _window("fake-model") == 32000
    monkeypatch.setattr(os, "environ", {})
    assert _window("fake-model") is None
    monkeypatch.undo()
    monkeypatch.delenv("AGENTRUN_MODEL_CATALOG", raising=False)
    assert _window("fake-model") is None
