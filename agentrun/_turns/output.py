"""Structured output: a turn whose final answer must be JSON of a given shape.

``run_turn(session, prompt, output=Model)`` (or ``session.turn(prompt, output=...)``) takes a
pydantic model class or a JSON Schema ``dict``. :func:`output_spec` turns it into an
:class:`OutputSpec`: the JSON Schema the agent is given, and the check of its final answer.

How the agent learns the schema: engines that have a mechanism of their own (Codex exec's
``--output-schema``, Codex app-server's ``outputSchema``) get :attr:`OutputSpec.schema` through
``TurnContext.output_schema``; every other engine gets the schema with the prompt
(:meth:`OutputSpec.prompt`). Either way the final answer (``summary.text``) is checked here: JSON
as the whole answer or inside a fenced block, validated by the model class (an instance) or by
the schema (the decoded value). A pydantic model is the full check; a schema ``dict`` is checked
for the keywords :func:`schema_errors` knows (``type``, ``enum``, ``const``, ``required``,
``properties``, ``additionalProperties``, ``items``, ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``minimum``/``maximum``, ``anyOf``/``oneOf``/``allOf`` and
``$ref`` into ``$defs``/``definitions``); others are not checked.

A schema ``dict`` is refused up front (a :class:`ConfigurationError` naming ``output``) when
checking an answer against it could not end: a ``$ref`` that comes back to where it started
without going into the value (``a`` → ``a``, ``a`` → ``allOf`` ``b`` → ``a``), or nesting deeper
than :data:`MAX_SCHEMA_NESTING` levels. Checking an answer goes at most
:data:`MAX_CHECK_DEPTH` schemas deep (an answer nested deeper is a problem with it, reported as
any other).

Imports the vocabulary only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from .._vocabulary.errors import ConfigurationError

__all__ = [
    "MAX_CHECK_DEPTH",
    "MAX_SCHEMA_NESTING",
    "OutputSpec",
    "OutputType",
    "output_spec",
    "schema_errors",
    "schema_problems",
]

#: What ``output=`` takes: a pydantic model class or a JSON Schema.
OutputType = type[BaseModel] | Mapping[str, Any]

#: How deep a schema ``dict`` may nest (objects and arrays, as JSON): deeper is refused.
MAX_SCHEMA_NESTING = 100
#: How many schemas deep checking an answer goes (each ``$ref``, ``allOf``/``anyOf``/``oneOf``
#: member, property or item is one level): deeper, the answer is reported as too deep.
MAX_CHECK_DEPTH = 200

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n(.*?)\n?```", re.DOTALL)


@dataclass(frozen=True)
class OutputSpec:
    """The schema of a turn's answer and the check of it."""

    #: The JSON Schema of the answer.
    schema: dict[str, Any]
    #: The model class the answer is validated into (``None``: a schema dict was given).
    model: type[BaseModel] | None = None

    def prompt(self, prompt: str) -> str:
        """``prompt`` with the schema and how to answer (for engines without a mechanism)."""
        return (
            f"{prompt}\n\n"
            "Give your final answer as one JSON value, and nothing else, that conforms to this "
            "JSON Schema:\n"
            f"```json\n{json.dumps(self.schema, indent=2, sort_keys=True)}\n```"
        )

    def repair_prompt(self, errors: list[str]) -> str:
        """The prompt of the one repair turn after an answer that did not validate (the turn
        adds the schema the way it adds it to every prompt)."""
        listed = "\n".join(f"- {e}" for e in errors[:20])
        return (
            "Your previous final answer did not match the required JSON Schema:\n"
            f"{listed}\n"
            "Answer again with the corrected JSON value only."
        )

    def check(self, text: str | None) -> tuple[Any, list[str]]:
        """The validated answer in ``text`` and ``[]``, or ``None`` and what is wrong."""
        candidates = _candidates(text or "")
        if not candidates:
            return None, ["the final answer holds no JSON value"]
        errors: list[str] = []
        for candidate in candidates:
            value, problems = self._check_one(candidate)
            if not problems:
                return value, []
            errors = problems  # report the last (the fenced block, else the whole text)
        return None, errors

    def _check_one(self, candidate: str) -> tuple[Any, list[str]]:
        try:
            decoded = json.loads(candidate)
        except ValueError as exc:
            return None, [f"not JSON: {exc}"]
        except RecursionError:
            return None, ["not JSON: nested too deep to read"]
        if self.model is not None:
            try:
                return self.model.model_validate(decoded), []
            except ValidationError as exc:
                return None, [
                    f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                    for e in exc.errors()
                ]
        problems = schema_errors(decoded, self.schema)
        return (None, problems) if problems else (decoded, [])


def _candidates(text: str) -> list[str]:
    """Where the JSON may be: the whole answer, then each fenced block, last one first."""
    out: list[str] = []
    stripped = text.strip()
    if stripped:
        out.append(stripped)
    blocks = [m.group(1).strip() for m in _FENCE.finditer(text)]
    out += [b for b in reversed(blocks) if b and b != stripped]
    return out


def output_spec(output: object) -> OutputSpec | None:
    """The :class:`OutputSpec` of an ``output=`` argument (``None`` for ``None``); anything but
    a pydantic model class or a JSON Schema mapping is a :class:`ConfigurationError`."""
    if output is None:
        return None
    if isinstance(output, OutputSpec):
        return output
    if isinstance(output, type) and issubclass(output, BaseModel):
        return OutputSpec(schema=output.model_json_schema(), model=output)
    if isinstance(output, Mapping):
        schema = cast(Mapping[str, Any], output)
        if _nests_deeper(schema, MAX_SCHEMA_NESTING):
            raise ConfigurationError(
                f"output schema nests deeper than {MAX_SCHEMA_NESTING} levels", option="output"
            )
        try:
            plain = json.loads(json.dumps(dict(schema)))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"output schema is not JSON: {exc}", option="output") from None
        problems = schema_problems(plain) or _ref_loops(plain)
        if problems:
            raise ConfigurationError(
                "output schema is not a usable JSON Schema: " + "; ".join(problems[:5]),
                option="output",
            )
        return OutputSpec(schema=cast(dict[str, Any], plain))
    kind: str = type(cast(object, output)).__name__
    raise ConfigurationError(
        f"output must be a pydantic model class or a JSON Schema dict, got {kind}",
        option="output",
    )


def _nests_deeper(value: object, limit: int) -> bool:
    """Whether ``value``'s mappings and lists nest deeper than ``limit`` (iterative: a schema
    that contains itself is infinitely deep)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: list[object] = list(cast(Mapping[object, object], item).values())
        elif isinstance(item, list | tuple):
            children = list(cast("list[object] | tuple[object, ...]", item))
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _resolve(ref: str, root: object) -> object:
    """The schema a local ``$ref`` (``#/...``) names in ``root``, as :func:`schema_errors`
    follows it (``None``: nothing)."""
    target: object = root
    for part in ref[2:].split("/"):
        target = cast(dict[str, Any], target).get(part) if isinstance(target, dict) else None
    return target


def _same_value_edges(rule: dict[str, Any], root: object, at: str) -> list[tuple[object, str]]:
    """The schemas :func:`schema_errors` checks the same value against after ``rule`` (its
    ``$ref`` and ``allOf``/``anyOf``/``oneOf`` members), each with where it is."""
    found: list[tuple[object, str]] = []
    ref = rule.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        found.append((_resolve(ref, root), ref))
    for key in ("allOf", "anyOf", "oneOf"):
        options = rule.get(key)
        if isinstance(options, list):
            found += [(o, f"{at}.{key}[{i}]") for i, o in enumerate(cast(list[Any], options))]
    return [(target, where) for target, where in found if isinstance(target, dict)]


def _value_edges(rule: dict[str, Any], at: str) -> list[tuple[object, str]]:
    """The schemas :func:`schema_errors` checks a part of the value against (one level into
    it)."""
    found: list[tuple[object, str]] = []
    properties = rule.get("properties")
    if isinstance(properties, dict):
        found += [(s, f"{at}.properties.{k}") for k, s in cast(dict[str, Any], properties).items()]
    for key in ("items", "additionalProperties"):
        found.append((rule.get(key), f"{at}.{key}"))
    return [(target, where) for target, where in found if isinstance(target, dict)]


def _ref_loops(root: dict[str, Any]) -> list[str]:
    """The loops of ``root`` that come back to a schema without going into the value: checking
    any answer against one would never end."""
    # Every schema the check can reach, by identity, with where it was first met.
    where: dict[int, str] = {id(root): "(root)"}
    nodes: dict[int, dict[str, Any]] = {id(root): root}
    pending: list[dict[str, Any]] = [root]
    while pending:
        rule = pending.pop()
        at = where[id(rule)]
        for target, there in _same_value_edges(rule, root, at) + _value_edges(rule, at):
            if id(target) not in nodes:
                nodes[id(target)] = cast(dict[str, Any], target)
                where[id(target)] = there
                pending.append(cast(dict[str, Any], target))
    # A cycle among the same-value steps (iterative depth-first search, three colours).
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in nodes.values():
        if id(start) in state:
            continue
        state[id(start)] = 1
        path: list[tuple[dict[str, Any], list[tuple[object, str]]]] = [
            (start, _same_value_edges(start, root, where[id(start)]))
        ]
        while path:
            rule, edges = path[-1]
            if not edges:
                state[id(rule)] = 2
                path.pop()
                continue
            target, there = edges.pop()
            seen = state.get(id(target))
            if seen == 1:
                loop = [where[id(r)] for r, _ in path]
                first = next(i for i, (r, _) in enumerate(path) if r is target)
                shown = " -> ".join([*loop[first:], there])
                return [
                    f"{loop[first]}: refers back to itself without going into the value "
                    f"({shown}); checking an answer would never end"
                ]
            if seen is None:
                state[id(target)] = 1
                child = cast(dict[str, Any], target)
                path.append((child, _same_value_edges(child, root, where[id(child)])))
    return []


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "number": (int, float),
    "integer": (int,),
}


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")


def schema_problems(schema: Any, root: Any = None, at: str = "(root)") -> list[str]:
    """What makes ``schema`` no usable JSON Schema, in the keywords :func:`schema_errors`
    checks (a keyword of the wrong shape, an unknown type name, a ``$ref`` that leads nowhere);
    ``[]`` when it is usable. Other keywords are left alone."""
    if isinstance(schema, bool):
        return []  # true / false are schemas
    if not isinstance(schema, dict):
        return [f"{at}: a schema must be an object, got {json.dumps(schema)[:80]}"]
    rule = cast(dict[str, Any], schema)
    root = rule if root is None else root
    problems: list[str] = []
    kind = rule.get("type")
    if kind is not None:
        names = cast(list[Any], kind) if isinstance(kind, list) else [kind]
        for name in names:
            if not isinstance(name, str) or name not in _TYPES:
                problems.append(
                    f"{at}.type: {json.dumps(name)[:40]} is not one of {', '.join(_TYPES)}"
                )
    if "enum" in rule and not isinstance(rule["enum"], list):
        problems.append(f"{at}.enum: must be an array")
    required = rule.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(k, str) for k in cast(list[Any], required))
    ):
        problems.append(f"{at}.required: must be an array of property names")
    properties = rule.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            problems.append(f"{at}.properties: must be an object of schemas")
        else:
            for key, sub in cast(dict[str, Any], properties).items():
                problems += schema_problems(sub, root, f"{at}.properties.{key}")
    for key in ("additionalProperties", "items"):
        if key in rule:
            problems += schema_problems(rule[key], root, f"{at}.{key}")
    for key in _COUNTS:
        count = rule.get(key)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 0
        ):
            problems.append(f"{at}.{key}: must be a non-negative integer")
    for key in ("minimum", "maximum"):
        bound = rule.get(key)
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            problems.append(f"{at}.{key}: must be a number")
    for key in _SUBSCHEMA_LISTS:
        if key in rule:
            options = rule[key]
            if not isinstance(options, list) or not options:
                problems.append(f"{at}.{key}: must be a non-empty array of schemas")
                continue
            for i, sub in enumerate(cast(list[Any], options)):
                problems += schema_problems(sub, root, f"{at}.{key}[{i}]")
    for key in ("$defs", "definitions"):
        defs = rule.get(key)
        if defs is not None and not isinstance(defs, dict):
            problems.append(f"{at}.{key}: must be an object of schemas")
        elif defs is not None and rule is root:
            for name, sub in cast(dict[str, Any], defs).items():
                problems += schema_problems(sub, root, f"{at}.{key}.{name}")
    ref = rule.get("$ref")
    if ref is not None:
        if not isinstance(ref, str):
            problems.append(f"{at}.$ref: must be a string")
        elif ref.startswith("#"):
            target: Any = root
            for part in ref[2:].split("/") if ref.startswith("#/") else []:
                target = (
                    cast(dict[str, Any], target).get(part) if isinstance(target, dict) else None
                )
            if target is None:
                problems.append(f"{at}.$ref: {ref} points to nothing in the schema")
    return problems


def _is_type(value: Any, name: str) -> bool:
    if name in ("number", "integer") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    kinds = _TYPES.get(name)
    return True if kinds is None else isinstance(value, kinds)


def schema_errors(
    value: Any, schema: Any, root: Any = None, at: str = "(root)", depth: int = 0
) -> list[str]:
    """What makes ``value`` fail ``schema`` (see the module docstring for the keywords);
    ``depth``: how many schemas deep the check already is (at most :data:`MAX_CHECK_DEPTH`)."""
    if not isinstance(schema, dict):
        return []
    if depth >= MAX_CHECK_DEPTH:
        return [f"{at}: nested too deep to check (over {MAX_CHECK_DEPTH} schemas)"]
    depth += 1
    rule = cast(dict[str, Any], schema)
    root = rule if root is None else root
    errors: list[str] = []
    ref = rule.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = cast(dict[str, Any], target).get(part) if isinstance(target, dict) else None
        errors += schema_errors(value, target, root, at, depth)
    kind = rule.get("type")
    if isinstance(kind, str | list):
        names = [kind] if isinstance(kind, str) else [str(k) for k in cast(list[Any], kind)]
        if not any(_is_type(value, n) for n in names):
            return [*errors, f"{at}: expected {' or '.join(names)}, got {json.dumps(value)[:80]}"]
    if "enum" in rule and value not in rule["enum"]:
        errors.append(f"{at}: {json.dumps(value)[:80]} is not one of {rule['enum']}")
    if "const" in rule and value != rule["const"]:
        errors.append(f"{at}: expected {json.dumps(rule['const'])}")
    if isinstance(value, dict):
        obj = cast(dict[str, Any], value)
        for key in rule.get("required", []):
            if key not in obj:
                errors.append(f"{at}.{key}: field required")
        properties = cast(dict[str, Any], rule.get("properties") or {})
        for key, item in obj.items():
            if key in properties:
                errors += schema_errors(item, properties[key], root, f"{at}.{key}", depth)
            elif rule.get("additionalProperties") is False:
                errors.append(f"{at}.{key}: extra field not permitted")
            elif isinstance(rule.get("additionalProperties"), dict):
                errors += schema_errors(
                    item, rule["additionalProperties"], root, f"{at}.{key}", depth
                )
    if isinstance(value, list):
        items = cast(list[Any], value)
        if isinstance(rule.get("items"), dict):
            for i, item in enumerate(items):
                errors += schema_errors(item, rule["items"], root, f"{at}[{i}]", depth)
        if isinstance(rule.get("minItems"), int) and len(items) < rule["minItems"]:
            errors.append(f"{at}: fewer than {rule['minItems']} items")
        if isinstance(rule.get("maxItems"), int) and len(items) > rule["maxItems"]:
            errors.append(f"{at}: more than {rule['maxItems']} items")
    if isinstance(value, str):
        if isinstance(rule.get("minLength"), int) and len(value) < rule["minLength"]:
            errors.append(f"{at}: shorter than {rule['minLength']}")
        if isinstance(rule.get("maxLength"), int) and len(value) > rule["maxLength"]:
            errors.append(f"{at}: longer than {rule['maxLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = rule.get("minimum"), rule.get("maximum")
        if isinstance(low, int | float) and value < low:
            errors.append(f"{at}: less than {low}")
        if isinstance(high, int | float) and value > high:
            errors.append(f"{at}: greater than {high}")
    for key in ("anyOf", "oneOf"):
        options = rule.get(key)
        if isinstance(options, list):
            passing = [
                o for o in cast(list[Any], options) if not schema_errors(value, o, root, at, depth)
            ]
            if not passing or (key == "oneOf" and len(passing) > 1):
                errors.append(f"{at}: does not match {'exactly one' if key == 'oneOf' else 'any'}")
    for part in cast(list[Any], rule.get("allOf") or []):
        errors += schema_errors(value, part, root, at, depth)
    return errors
