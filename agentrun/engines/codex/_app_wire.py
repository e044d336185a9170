"""The wire schema of a ``codex app-server`` transcript line, for
:meth:`CodexAppServerTranslator.feed_line`: what the translator reads of the lines it sees most,
parsed and validated from the line's bytes in one pass by pydantic-core.

A line is ``{"dir": "send"|"recv", "msg": {...}}``. The schema makes a *view* of it: the few
values the translator reads of that kind of message, each of exactly the type its tolerant
accessors accept (``as_str`` a ``str``, ``as_int`` an ``int``, ``_dict`` an object), nested as in
the message, so the translator runs the same code on the view as on the decoded message. The
kinds whose messages keep the agent's whole event (``raw``) are left to the decoding path:
``from_json`` makes the whole event as Python objects more cheaply than a schema does (measured:
about 1.4 times its instructions for the same dict). Kinds of view, told apart by their keys:

* a notification the translator makes nothing of, whatever it says and whatever the state (a
  quiet one, a user's message, an item that started): ``{"ignored": dir}``;
* another notification the agent sent: ``{"dir", "method", "params"?}``;
* the agent's response to one of our requests: ``{"dir", "response": {"id", "result"?, ...}}``;
* a request we sent: ``{"dir", "request": {"method", "id"?}}``;
* ``{}``: any other object (a kind the schema leaves to the decoding path).

Lines are told apart by their ``method``, or by their direction when they have none, so that the
common kinds never try a schema that fails.

A value of another type than the accessor takes (a number where a string is read, a list where
an object is) fails the line, which then takes the decoding path: what comes out never depends on
which path a line took. Values are strict (no ``"1"`` -> ``1``); ``Any`` values come as
``from_json`` makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic_core import CoreSchema, SchemaValidator
from pydantic_core import core_schema as cs

__all__ = ["DECODED_HEADS", "QUIET", "wire_view"]

#: Notifications that say nothing a caller needs (state the turn already shows).
QUIET = frozenset(
    {
        "remoteControl/status/changed",
        "thread/status/changed",
        "thread/readState/changed",
        "account/rateLimits/updated",
        "turn/started",
        "item/reasoning/summaryPartAdded",
        "deprecationNotice",
        "turn/diff/updated",
        "turn/plan/updated",
        "mcpServer/startupStatus/updated",
    }
)


def _heads() -> tuple[bytes, ...]:
    head = b'{"dir": "recv", "msg": {"method": "'
    heads = [
        head + method + b'"' for method in (b"thread/tokenUsage/updated", b"warning", b"error")
    ]
    for method, kinds in (
        (b"item/started", _TOOL_ITEMS),
        (b"item/completed", (*_TOOL_ITEMS, b"agentMessage", b"reasoning")),
    ):
        item = head + method + b'", "params": {"item": {"type": "'
        heads.extend(item + kind + b'"' for kind in kinds)
    return tuple(heads)


_TOOL_ITEMS = (
    b"commandExecution",
    b"fileChange",
    b"mcpToolCall",
    b"webSearch",
    b"contextCompaction",
)

#: How the recorder writes the head of a line whose messages keep the agent's whole event
#: (``raw``): token usage, warnings, errors, tools, a completed message or reasoning. Such a line
#: is wanted whole as Python objects, which :func:`pydantic_core.from_json` makes more cheaply
#: than any schema does: the translator leaves it to the decoding path without reading it twice.
#: (A cost, not a meaning: a line written otherwise is read through the schema, which leaves
#: these kinds to the decoding path as well.)
DECODED_HEADS = _heads()


def _str() -> CoreSchema:
    """What ``as_str`` reads as a string: a string, or ``null``."""
    return cs.nullable_schema(cs.str_schema(strict=True))


def _any() -> CoreSchema:
    return cs.any_schema()


def _object(**fields: CoreSchema) -> CoreSchema:
    """An object of which only ``fields`` are read, each optional (absent stays absent)."""
    return cs.typed_dict_schema(
        {name: cs.typed_dict_field(schema, required=False) for name, schema in fields.items()},
        extra_behavior="ignore",
    )


def _line(fields: dict[str, cs.TypedDictField], *, send: bool = False) -> CoreSchema:
    """A line of direction ``send`` (ours) or not (the agent's) with ``fields``; its view names
    the direction ``dir`` unless ``fields`` name it otherwise."""
    direction = cs.literal_schema(["send", "->"] if send else ["recv", "<-"])
    return cs.typed_dict_schema(
        {"dir": cs.typed_dict_field(direction), **fields}, extra_behavior="ignore"
    )


def _at(schema: CoreSchema, *path: str, required: bool = False) -> cs.TypedDictField:
    """A field read at ``path`` in the line (absent when any step of it is not an object's)."""
    alias: str | list[str | int] = path[0] if len(path) == 1 else list(path)
    return cs.typed_dict_field(schema, required=required, validation_alias=alias)


def _notification(params: CoreSchema | None = None) -> CoreSchema:
    """An agent's notification (no ``id``, or a ``null`` one): its ``method`` and the view of
    its ``params``. Without ``params``: a notification the translator makes nothing of, whatever
    it says and whatever the state (its view is ``{"ignored": dir}``)."""
    fields = {"_id": _at(cs.none_schema(), "msg", "id")}
    if params is None:
        direction = cs.literal_schema(["recv", "<-"])
        return cs.typed_dict_schema(
            {"ignored": _at(direction, "dir", required=True), **fields}, extra_behavior="ignore"
        )
    fields["method"] = _at(cs.str_schema(strict=True), "msg", "method", required=True)
    fields["params"] = _at(params, "msg", "params")
    return _line(fields)


def _by_item_type(choices: dict[str, CoreSchema]) -> CoreSchema:
    return cs.tagged_union_schema(choices, discriminator=[["msg", "params", "item", "type"]])


#: The requests the engine sends.
_REQUESTS = (
    "initialize",
    "initialized",
    "thread/start",
    "thread/resume",
    "thread/fork",
    "thread/compact/start",
    "turn/start",
    "turn/steer",
    "turn/interrupt",
)


def _build() -> CoreSchema:
    ignored = _notification()
    response = _line(
        {
            "response": _at(
                cs.typed_dict_schema(
                    {
                        "id": cs.typed_dict_field(
                            cs.union_schema(
                                [cs.int_schema(strict=True), cs.str_schema(strict=True)],
                                mode="left_to_right",
                            )
                        ),
                        "method": cs.typed_dict_field(cs.none_schema(), required=False),
                        "result": cs.typed_dict_field(
                            _object(
                                thread=_object(id=_str()), model=_str(), turn=_object(id=_str())
                            ),
                            required=False,
                        ),
                        "error": cs.typed_dict_field(_any(), required=False),
                    },
                    extra_behavior="ignore",
                ),
                "msg",
                required=True,
            )
        }
    )
    request = _line(
        {
            "request": _at(
                cs.typed_dict_schema(
                    {
                        "method": cs.typed_dict_field(cs.str_schema(strict=True)),
                        "id": cs.typed_dict_field(_any(), required=False),
                    },
                    extra_behavior="ignore",
                ),
                "msg",
                required=True,
            )
        },
        send=True,
    )
    # Left to the decoding path (a view of nothing), without trying a schema that fails.
    decoded = cs.typed_dict_schema({}, extra_behavior="ignore")
    tools = [kind.decode() for kind in _TOOL_ITEMS]
    # Tagged by the method, or by the direction where there is none (a response).
    kinds: dict[str, CoreSchema] = dict.fromkeys(
        ("thread/tokenUsage/updated", "warning", "error"), decoded
    )
    kinds.update(dict.fromkeys(QUIET, ignored))
    kinds.update(dict.fromkeys(_REQUESTS, request))
    kinds.update(dict.fromkeys(("recv", "<-"), response))
    kinds.update(
        {
            "turn/started": _notification(_object(turnId=_str(), turn=_object(id=_str()))),
            "thread/started": _notification(_object(turnId=_str(), thread=_object(id=_str()))),
            "item/agentMessage/delta": _notification(
                _object(turnId=_str(), itemId=_str(), delta=cs.str_schema(strict=True))
            ),
            "item/reasoning/summaryTextDelta": _notification(
                _object(turnId=_str(), itemId=_str(), delta=cs.str_schema(strict=True))
            ),
            # Started, these kinds make nothing; a user's message makes nothing at all.
            "item/started": _by_item_type(
                {
                    **dict.fromkeys(("userMessage", "agentMessage", "reasoning"), ignored),
                    **dict.fromkeys(tools, decoded),
                }
            ),
            "item/completed": _by_item_type(
                {
                    "userMessage": ignored,
                    **dict.fromkeys((*tools, "agentMessage", "reasoning"), decoded),
                }
            ),
            "turn/completed": _notification(
                _object(turnId=_str(), turn=_object(status=_str(), error=_any()))
            ),
        }
    )
    return cs.union_schema(
        [cs.tagged_union_schema(kinds, discriminator=[["msg", "method"], ["dir"]]), decoded],
        mode="left_to_right",
    )


@cache
def _validate() -> Callable[[bytes], dict[str, Any]]:
    """The schema, compiled on first use."""
    return SchemaValidator(_build()).validate_json


def wire_view(line: bytes) -> dict[str, Any] | None:
    """The view of ``line``, or ``None`` when it is not a JSON object (or not strict UTF-8, or
    nested deeper than pydantic-core parses).

    Unlike :func:`~agentrun._bases.translator.wire_event`, the line's brackets are not counted
    first: no value of a view reaches a message as a container (the translator reads strings and
    integers of them, and ``turn/start``'s error, which would, is left to the decoding path), so
    a line nested deeper than :data:`~agentrun._wire.framing.MAX_NESTING` makes the same
    messages whether the decoder cut its deep containers or not. The count was a tenth of
    what reading a line cost, on every line."""
    try:
        return _validate()(line)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return None
