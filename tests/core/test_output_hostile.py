"""Structured output schemas whose check could not end: ``$ref`` loops that never go into the
value and schemas nested too deep are refused up front; an answer nested too deep is a problem
with the answer, never a ``RecursionError``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from agentrun import ConfigurationError
from agentrun._turns.output import (
    MAX_CHECK_DEPTH,
    MAX_SCHEMA_NESTING,
    output_spec,
    schema_errors,
)


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _containing_itself() -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["again"] = schema
    return schema


LOOPS: dict[str, tuple[dict[str, Any], str]] = {
    "a -> a": (
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
        "#/$defs/a -> #/$defs/a",
    ),
    "a -> allOf b -> a": (
        {
            "$ref": "#/$defs/a",
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
        },
        "#/$defs/a.allOf[0] -> #/$defs/b -> #/$defs/a",
    ),
    "a property's oneOf back to it": (
        {"properties": {"x": {"oneOf": [{"$ref": "#/properties/x"}]}}},
        "(root).properties.x.oneOf[0] -> #/properties/x",
    ),
    "an anyOf member back to its $defs entry, reached through items": (
        {
            "type": "array",
            "items": {"$ref": "#/$defs/t"},
            "$defs": {"t": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/t"}]}},
        },
        "#/$defs/t.anyOf[1] -> #/$defs/t",
    ),
}


@pytest.mark.parametrize(("schema", "said"), list(LOOPS.values()), ids=list(LOOPS))
def test_a_ref_loop_without_progress_is_refused_up_front(schema: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        output_spec(schema)
    assert caught.value.option == "output"
    assert "without going into the value" in caught.value.message
    assert said in caught.value.message, caught.value.message


@pytest.mark.parametrize(
    "schema",
    [_nested(MAX_SCHEMA_NESTING), _nested(5000), _containing_itself()],
    ids=["just too deep", "5000 deep", "contains itself"],
)
def test_a_schema_nested_too_deep_is_refused_up_front(schema: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        output_spec(schema)
    assert caught.value.option == "output"
    assert f"deeper than {MAX_SCHEMA_NESTING} levels" in caught.value.message


class Node(BaseModel):
    name: str
    children: list[Node] = []


def test_recursive_schemas_that_go_into_the_value_are_usable() -> None:
    linked = {
        "$ref": "#/$defs/n",
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
    }
    for schema in (linked, Node.model_json_schema(), _nested(MAX_SCHEMA_NESTING // 2 - 1)):
        assert output_spec(schema) is not None
    spec = output_spec(linked)
    assert spec is not None
    answer = {"next": {"next": {}}}
    assert spec.check(json.dumps(answer)) == (answer, [])


def test_an_answer_nested_too_deep_to_check_is_a_problem_with_the_answer() -> None:
    linked = {
        "$ref": "#/$defs/n",
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
    }
    spec = output_spec(linked)
    assert spec is not None
    deep = '{"next": ' * 900 + "{}" + "}" * 900
    value, problems = spec.check(deep)
    assert value is None
    (problem,) = problems
    assert problem.endswith(f"nested too deep to check (over {MAX_CHECK_DEPTH} schemas)")
    # Too deep even to read as JSON.
    flat = output_spec({"type": "array"})
    assert flat is not None
    assert flat.check("[" * 100_000 + "]" * 100_000) == (
        None,
        ["not JSON: nested too deep to read"],
    )


def test_the_check_depth_bound_holds_for_a_schema_called_directly() -> None:
    # schema_errors is public: a loop given to it directly ends at the bound too.
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    (problem,) = schema_errors(1, loop)
    assert "nested too deep to check" in problem
