"""Every message serializes, however deep the values an agent sends: each translator is fed real
events with one value at a time replaced by an object nested 300 levels deep (past the depth
pydantic can write as JSON, 255), straight to ``feed`` as a caller of ``get_translator`` does;
every message it makes, and the turn's summary, must serialize."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from test_compliance import FIXTURE_DIRS, TRANSLATORS
from test_fuzz import CORPUS

from agentrun import Message, TurnSummary, get_translator
from agentrun.engines._registry import translator_names

DEPTH = 300
#: Events and fields per event tried for each translator (the corpus is large).
EVENTS = 120
FIELDS = 24


def _deep() -> Any:
    value: Any = {"deep": True}
    for level in range(DEPTH):
        value = {"x": [value]} if level % 2 else {"x": value}
    return value


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to the values inside ``value`` (not the event itself), 8 levels deep."""
    paths: list[tuple[Any, ...]] = [prefix] if prefix else []
    if len(prefix) >= 8:
        return paths
    if isinstance(value, dict):
        for key, child in value.items():
            paths.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value[:4]):
            paths.extend(_paths(child, (*prefix, index)))
    return paths


def _with(event: Any, path: tuple[Any, ...], new: Any) -> Any:
    event = copy.deepcopy(event)
    parent = event
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return event


def test_every_translator_is_covered() -> None:
    assert set(translator_names()) <= set(TRANSLATORS) | set(FIXTURE_DIRS)
    assert [name for name in translator_names() if not _corpus(name)] == []


def _corpus(name: str) -> list[Any]:
    # An ACP preset without recordings of its own reads the ACP ones.
    return CORPUS.get(name) or CORPUS["acp"]


@pytest.mark.parametrize("name", translator_names())
def test_deeply_nested_values_never_make_a_message_that_cannot_serialize(name: str) -> None:
    translator = get_translator(name)
    messages: list[Message] = []
    for event in _corpus(name)[:EVENTS]:
        for path in _paths(event)[:FIELDS]:
            messages.extend(translator.feed(_with(event, path, _deep())))
        messages.extend(translator.feed(copy.deepcopy(event)))
    messages.extend(translator.finish())
    assert messages
    for message in messages:
        json.loads(message.model_dump_json())
    json.loads(TurnSummary.from_messages(messages).model_dump_json())
