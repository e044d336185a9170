"""Structured output's check of a final answer, without an agent: where the JSON may be, what a
pydantic model and a schema dict reject, and which ``output=`` arguments are refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentrun import ConfigurationError
from agentrun._turns.output import OutputSpec, output_spec, schema_errors


class Point(BaseModel):
    x: int
    y: int


def _spec(output: Any) -> OutputSpec:
    spec = output_spec(output)
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    "text",
    [
        '{"x": 1, "y": 2}',
        '  {"x": 1, "y": 2}\n',
        'Here it is:\n```json\n{"x": 1, "y": 2}\n```\nDone.',
        'First try:\n```\n{"x": "a"}\n```\nBetter:\n```json\n{"x": 1, "y": 2}\n```',
    ],
)
def test_the_answer_is_found_whole_or_in_a_fenced_block(text: str) -> None:
    assert _spec(Point).check(text) == (Point(x=1, y=2), [])


def test_what_is_wrong_is_said_per_field() -> None:
    value, errors = _spec(Point).check('{"x": "left"}')
    assert value is None
    assert errors == [
        "x: Input should be a valid integer, unable to parse string as an integer",
        "y: Field required",
    ]
    assert _spec(Point).check("") == (None, ["the final answer holds no JSON value"])
    assert _spec(Point).check("no json")[1][0].startswith("not JSON")


def test_a_schema_dict_is_checked_by_its_keywords() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["name", "tags"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 2},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2},
            "level": {"enum": ["low", "high"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "id": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "$defs": {"tag": {"type": "string"}},
    }
    spec = _spec(schema)
    good = {"name": "ab", "tags": ["t"], "level": "low", "score": 0.5, "id": None}
    assert spec.check(str(good).replace("'", '"').replace("None", "null")) == (good, [])
    bad = {"name": "a", "tags": [1, "b", "c"], "level": "mid", "score": 2, "id": "x", "more": 1}
    assert schema_errors(bad, schema) == [
        "(root).name: shorter than 2",
        "(root).tags[0]: expected string, got 1",
        "(root).tags: more than 2 items",
        "(root).level: \"mid\" is not one of ['low', 'high']",
        "(root).score: greater than 1",
        "(root).id: does not match any",
        "(root).more: extra field not permitted",
    ]
    assert schema_errors({}, schema) == [
        "(root).name: field required",
        "(root).tags: field required",
    ]
    assert schema_errors(True, {"type": "integer"}) == ["(root): expected integer, got true"]
    assert schema_errors(3.0, {"type": "integer"}) == []


def test_the_prompt_carries_the_schema_and_the_repair_prompt_the_errors() -> None:
    spec = _spec(Point)
    prompt = spec.prompt("where is it?")
    assert prompt.startswith("where is it?\n\n") and '"required": [' in prompt
    repair = spec.repair_prompt(["y: Field required"])
    assert "- y: Field required" in repair


@pytest.mark.parametrize("output", [Point(x=1, y=2), str, "schema", 3, {"bad": {1, 2}}])
def test_anything_but_a_model_class_or_a_schema_is_refused(output: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        output_spec(output)
    assert caught.value.option == "output"


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "strng"}, '(root).type: "strng" is not one of'),
        ({"type": ["string", 3]}, "(root).type: 3 is not one of"),
        ({"enum": "a"}, "(root).enum: must be an array"),
        ({"required": [1]}, "(root).required: must be an array of property names"),
        ({"properties": []}, "(root).properties: must be an object of schemas"),
        ({"properties": {"a": {"maxLength": -1}}}, "(root).properties.a.maxLength: must be a"),
        ({"items": 3}, "(root).items: a schema must be an object"),
        ({"anyOf": []}, "(root).anyOf: must be a non-empty array of schemas"),
        ({"allOf": [{"minimum": "0"}]}, "(root).allOf[0].minimum: must be a number"),
        ({"$ref": "#/$defs/Gone", "$defs": {}}, "(root).$ref: #/$defs/Gone points to nothing"),
    ],
)
def test_a_schema_that_is_no_usable_json_schema_is_refused(
    schema: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        output_spec(schema)
    assert caught.value.option == "output"
    assert said in caught.value.message, caught.value.message


def test_usable_schemas_pass_the_shape_check() -> None:
    for schema in (
        {},
        {"type": ["string", "null"], "enum": ["a", None]},
        {"$ref": "#/$defs/P", "$defs": {"P": {"type": "object", "additionalProperties": False}}},
        {"items": True, "minItems": 0, "maximum": 2.5, "oneOf": [{"type": "array"}]},
        Point.model_json_schema(),
    ):
        assert output_spec(schema) is not None
