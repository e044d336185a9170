"""Conformance of agentrun's ACP models with the published ACP v1 JSON Schema and real traffic.

* Everything the client sends validates against the schema definition of its method.
* Every message in the recorded OpenCode ACP sessions parses into our models.
* Instances generated from each schema definition (every ``session/update`` variant, the
  agent's requests, the results of our requests) parse into the matching model, without
  a catch-all variant, and dump back to the same JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel
from repo_paths import FIXTURES

from agentrun.engines.acp import _schema as acp

SCHEMA_DIR = FIXTURES / "acp-schema"
SAMPLES_DIR = FIXTURES / "opencode-acp" / "wire-samples"

SCHEMAS: dict[str, dict[str, Any]] = {
    "stable": json.loads((SCHEMA_DIR / "schema.json").read_text()),
    "unstable": json.loads((SCHEMA_DIR / "schema.unstable.json").read_text()),
}


def defs(which: str) -> dict[str, Any]:
    return SCHEMAS[which]["$defs"]


@cache
def validator(which: str, name: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": defs(which), "$ref": f"#/$defs/{name}"})


def method_def(method: str, part: str) -> tuple[str, str] | None:
    """(schema, definition name) of a method's ``params`` or ``result``, stable first."""
    for which in ("stable", "unstable"):
        for name, node in defs(which).items():
            if node.get("x-method") != method:
                continue
            is_result = name.endswith("Response")
            if (part == "result") == is_result:
                return which, name
    return None


def assert_valid(which: str, name: str, instance: Any) -> None:
    errors = sorted(validator(which, name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(
        f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]
    )


def walk_models(value: Any) -> Iterator[BaseModel]:
    if isinstance(value, BaseModel):
        yield value
        for name in type(value).model_fields:
            yield from walk_models(getattr(value, name))
    elif isinstance(value, list):
        for item in value:  # pyright: ignore[reportUnknownVariableType]
            yield from walk_models(item)


def assert_no_catch_all(model: BaseModel) -> None:
    for sub in walk_models(model):
        assert not isinstance(
            sub, (acp.UnknownUpdate, acp.UnknownContentBlock, acp.UnknownToolCallContent)
        ), f"fell back to {type(sub).__name__}: {sub!r}"


def round_trip(model: BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


# -- 1. what we send is schema-valid ------------------------------------------------------

SID = "ses_e039c7981ffeF48X1RlPS9EncZ"
STDIO = acp.McpServerStdio(
    name="fs",
    command="/usr/bin/mcp-fs",
    args=["--root", "/w"],
    env=[acp.EnvVariable(name="A", value="1")],
)
HTTP = acp.McpServerHttp(
    name="web", url="http://127.0.0.1:9/mcp", headers=[acp.HttpHeader(name="X", value="y")]
)
SSE = acp.McpServerSse(name="events", url="http://127.0.0.1:9/sse")
ALL_BLOCKS: list[acp.ContentBlock] = [
    acp.TextContent(text="say hi"),
    acp.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
    acp.AudioContent(data="UklGRg==", mime_type="audio/wav"),
    acp.ResourceLink(uri="file:///w/a.py", name="a.py", mime_type="text/x-python", size=12),
    acp.EmbeddedResource(
        resource=acp.TextResourceContents(uri="file:///w/b.py", text="print(1)\n")
    ),
    acp.EmbeddedResource(resource=acp.BlobResourceContents(uri="file:///w/c.bin", blob="AAE=")),
]

SENT: list[tuple[str, str, BaseModel]] = [
    ("initialize", "params", acp.InitializeRequest()),
    (
        "initialize",
        "params",
        acp.InitializeRequest(
            client_capabilities=acp.ClientCapabilities(
                fs=acp.FileSystemCapabilities(read_text_file=True, write_text_file=True)
            ),
            client_info=acp.Implementation(name="agentrun", title="agentrun", version="0.1.0"),
        ),
    ),
    ("session/new", "params", acp.NewSessionRequest(cwd="/workspace")),
    (
        "session/new",
        "params",
        acp.NewSessionRequest(
            cwd="/workspace", mcp_servers=[STDIO, HTTP, SSE], additional_directories=["/other"]
        ),
    ),
    ("session/load", "params", acp.LoadSessionRequest(session_id=SID, cwd="/workspace")),
    (
        "session/resume",
        "params",
        acp.ResumeSessionRequest(session_id=SID, cwd="/workspace", mcp_servers=[STDIO]),
    ),
    ("session/fork", "params", acp.ForkSessionRequest(session_id=SID, cwd="/workspace")),
    ("session/list", "params", acp.ListSessionsRequest(cwd="/workspace")),
    ("session/close", "params", acp.CloseSessionRequest(session_id=SID)),
    (
        "session/prompt",
        "params",
        acp.PromptRequest(session_id=SID, prompt=[acp.TextContent(text="hi")]),
    ),
    ("session/prompt", "params", acp.PromptRequest(session_id=SID, prompt=ALL_BLOCKS)),
    ("session/cancel", "params", acp.CancelNotification(session_id=SID)),
    ("session/set_mode", "params", acp.SetSessionModeRequest(session_id=SID, mode_id="plan")),
    (
        "session/set_config_option",
        "params",
        acp.SetSessionConfigOptionRequest(
            session_id=SID, config_id="model", value="fake/fake-model"
        ),
    ),
    (
        "session/set_config_option",
        "params",
        acp.SetSessionConfigOptionRequest(session_id=SID, config_id="fast", value=True),
    ),
    (
        "session/request_permission",
        "result",
        acp.RequestPermissionResponse(outcome=acp.SelectedPermissionOutcome(option_id="once")),
    ),
    (
        "session/request_permission",
        "result",
        acp.RequestPermissionResponse(outcome=acp.CancelledPermissionOutcome()),
    ),
    ("fs/read_text_file", "result", acp.ReadTextFileResponse(content="line 1\n")),
    ("fs/write_text_file", "result", acp.WriteTextFileResponse()),
]


@pytest.mark.parametrize(
    ("method", "part", "model"), SENT, ids=[f"{m}-{p}-{i}" for i, (m, p, _) in enumerate(SENT)]
)
def test_sent_messages_validate_against_the_schema(
    method: str, part: str, model: BaseModel
) -> None:
    found = method_def(method, part)
    assert found is not None, f"no schema definition for {method} {part}"
    which, name = found
    wire = acp.to_wire(model)
    assert_valid(which, name, wire)
    # And it reads back into an equal model.
    assert type(model).model_validate(wire) == model


def test_initialize_defaults_announce_no_fs_and_no_terminal() -> None:
    wire = acp.to_wire(acp.InitializeRequest(client_info=acp.Implementation(name="x", version="1")))
    assert wire == {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False},
            "terminal": False,
        },
        "clientInfo": {"name": "x", "version": "1"},
    }


def test_set_model_is_not_in_the_published_schema() -> None:
    # session/set_model was unstable and has been removed upstream; OpenCode still serves it.
    assert method_def("session/set_model", "params") is None
    wire = acp.to_wire(acp.SetSessionModelRequest(session_id=SID, model_id="fake/fake-model"))
    assert wire == {"sessionId": SID, "modelId": "fake/fake-model"}


def test_every_session_update_kind_of_the_schema_is_modelled() -> None:
    for which in ("stable", "unstable"):
        kinds = {
            v["properties"]["sessionUpdate"]["const"] for v in defs(which)["SessionUpdate"]["oneOf"]
        }
        modelled = set(acp.UPDATE_TAGS)
        assert kinds <= modelled, f"{which}: not modelled: {sorted(kinds - modelled)}"


# -- 2. recorded traffic parses -------------------------------------------------------------

RESULT_MODELS: dict[str, type[BaseModel]] = {
    "initialize": acp.InitializeResponse,
    "session/new": acp.NewSessionResponse,
    "session/load": acp.LoadSessionResponse,
    "session/resume": acp.ResumeSessionResponse,
    "session/fork": acp.ForkSessionResponse,
    "session/list": acp.ListSessionsResponse,
    "session/close": acp.CloseSessionResponse,
    "session/prompt": acp.PromptResponse,
    "session/set_mode": acp.SetSessionModeResponse,
    "session/set_config_option": acp.SetSessionConfigOptionResponse,
    "session/set_model": acp.SetSessionModelResponse,
}
PARAMS_MODELS: dict[str, type[BaseModel]] = {
    "initialize": acp.InitializeRequest,
    "session/new": acp.NewSessionRequest,
    "session/prompt": acp.PromptRequest,
    "session/cancel": acp.CancelNotification,
}
SAMPLE_FILES = sorted(SAMPLES_DIR.glob("*.jsonl"))


def load_sample(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_samples_are_present() -> None:
    assert len(SAMPLE_FILES) == 5


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=[p.stem for p in SAMPLE_FILES])
def test_recorded_traffic_parses(path: Path) -> None:
    sent_methods: dict[Any, str] = {}
    counts = {"update": 0, "request": 0, "result": 0, "error": 0, "sent": 0}
    for record in load_sample(path):
        msg = record.get("msg")
        if msg is None:
            continue
        if record["dir"] == "send":
            if "method" in msg:
                counts["sent"] += 1
                if "id" in msg:
                    sent_methods[msg["id"]] = msg["method"]
                model = PARAMS_MODELS[msg["method"]]
                parsed = model.model_validate(msg["params"])
                # Our models reproduce what the recording client sent, byte for byte.
                assert acp.to_wire(parsed) == msg["params"]
                found = method_def(msg["method"], "params")
                assert found is not None
                assert_valid(*found, msg["params"])
            else:
                found = method_def("session/request_permission", "result")
                assert found is not None
                assert_valid(*found, msg["result"])
                acp.RequestPermissionResponse.model_validate(msg["result"])
            continue
        if msg.get("method") == "session/update":
            counts["update"] += 1
            note = acp.parse_session_notification(msg["params"])
            assert_no_catch_all(note)
            assert note.session_id.startswith("ses_")
            assert round_trip(note) == msg["params"]
        elif "method" in msg:
            counts["request"] += 1
            request = acp.parse_client_request(msg["method"], msg["params"])
            assert request is not None
            assert_no_catch_all(request)
            assert round_trip(request) == msg["params"]
        elif "error" in msg:
            counts["error"] += 1
            assert isinstance(msg["error"]["code"], int)
        else:
            counts["result"] += 1
            method = sent_methods[msg["id"]]
            result = RESULT_MODELS[method].model_validate(msg["result"])
            assert_no_catch_all(result)
            assert round_trip(result) == msg["result"]
    assert counts["update"] > 0
    assert counts["result"] >= 2


def test_recorded_agent_messages_conform_to_the_unstable_schema() -> None:
    """OpenCode's messages are schema-valid (the prompt ``usage`` needs the unstable schema)."""
    checked = 0
    for path in SAMPLE_FILES:
        sent_methods: dict[Any, str] = {}
        for record in load_sample(path):
            msg = record.get("msg")
            if msg is None:
                continue
            if record["dir"] == "send":
                if "method" in msg and "id" in msg:
                    sent_methods[msg["id"]] = msg["method"]
                continue
            if "method" in msg:
                assert_valid("unstable", method_def(msg["method"], "params")[1], msg["params"])  # type: ignore[index]
            elif "result" in msg:
                name = method_def(sent_methods[msg["id"]], "result")[1]  # type: ignore[index]
                assert_valid("unstable", name, msg["result"])
            else:
                assert_valid("unstable", "Error", msg["error"])
            checked += 1
    assert checked > 50


def test_sample_details() -> None:
    records = load_sample(SAMPLES_DIR / "acp_basic_two_prompts.jsonl")
    updates = [
        acp.parse_session_notification(r["msg"]["params"]).update
        for r in records
        if r["dir"] == "recv" and r["msg"].get("method") == "session/update"
    ]
    usage = [u for u in updates if isinstance(u, acp.UsageUpdate)]
    assert [(u.used, u.size) for u in usage] == [(1200, 200000), (1500, 200000)]
    # cost is cumulative for the session
    assert [u.cost.amount for u in usage if u.cost] == [0.001034, 0.00146]
    assert usage[0].cost is not None
    assert usage[0].cost.currency == "USD"
    text = "".join(
        u.content.text
        for u in updates
        if isinstance(u, acp.AgentMessageChunk) and isinstance(u.content, acp.TextContent)
    )
    assert text
    prompt_results = [
        acp.PromptResponse.model_validate(r["msg"]["result"])
        for r in records
        if r["dir"] == "recv" and "stopReason" in r["msg"].get("result", {})
    ]
    assert prompt_results[0].stop_reason == "end_turn"
    assert prompt_results[0].usage is not None
    assert prompt_results[0].usage.input_tokens == 1000
    assert prompt_results[0].usage.cached_write_tokens is None

    records = load_sample(SAMPLES_DIR / "acp_tool_permission_allow.jsonl")
    (req,) = [
        r["msg"]
        for r in records
        if r["msg"] is not None and r["msg"].get("method") == "session/request_permission"
    ]
    parsed = acp.parse_client_request(req["method"], req["params"])
    assert isinstance(parsed, acp.RequestPermissionRequest)
    assert [o.kind for o in parsed.options] == ["allow_once", "allow_always", "reject_once"]
    assert parsed.tool_call.tool_call_id == "call_bash_acp"


# -- 3. tolerance ---------------------------------------------------------------------------


def test_unknown_update_kind_keeps_the_raw_object() -> None:
    raw = {"sessionUpdate": "hologram", "frames": [1, 2], "raw": "field named raw"}
    note = acp.parse_session_notification({"sessionId": "s", "update": raw})
    assert isinstance(note.update, acp.UnknownUpdate)
    assert note.update.session_update == "hologram"
    assert note.update.raw == raw
    assert note.update.error is None
    assert acp.to_wire(note) == {"sessionId": "s", "update": raw}


def test_known_kind_that_does_not_validate_becomes_unknown_with_error() -> None:
    raw = {"sessionUpdate": "usage_update", "used": "lots"}
    note = acp.parse_session_notification({"sessionId": "s", "update": raw})
    assert isinstance(note.update, acp.UnknownUpdate)
    assert note.update.raw == raw
    assert note.update.error is not None
    assert "used" in note.update.error
    assert isinstance(acp.parse_session_update("not an object"), acp.UnknownUpdate)
    with pytest.raises(ValueError, match="sessionId"):
        acp.parse_session_notification({"update": raw})


def test_unknown_content_and_tool_content_and_fields_are_kept() -> None:
    raw = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t1",
        "status": "paused",  # not a known status
        "kind": "teleport",  # not a known kind
        "content": [
            {"type": "content", "content": {"type": "hologram", "uri": "h://1"}},
            {"type": "video", "src": "v.mp4"},
            {"type": "diff", "path": "/w/a", "oldText": None, "newText": "x"},
        ],
        "_meta": {"claudeCode": {"toolName": "Bash"}},
        "futureField": {"x": 1},
    }
    update = acp.parse_session_update(raw)
    assert isinstance(update, acp.ToolCallProgress)
    assert update.status == "paused"
    assert update.kind == "teleport"
    assert update.meta == {"claudeCode": {"toolName": "Bash"}}
    assert update.model_extra == {"futureField": {"x": 1}}
    assert update.content is not None
    first, second, third = update.content
    assert isinstance(first, acp.ContentToolCallContent)
    assert isinstance(first.content, acp.UnknownContentBlock)
    assert first.content.type == "hologram"
    assert isinstance(second, acp.UnknownToolCallContent)
    assert second.type == "video"
    assert isinstance(third, acp.DiffContent)
    assert round_trip(update) == raw


def test_agent_variants_from_the_adapter_notes_parse() -> None:
    # claude-code-acp: a status-less update carrying only _meta; rawOutput as a string.
    meta_only = acp.parse_session_update(
        {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "_meta": {"claudeCode": {}}}
    )
    assert isinstance(meta_only, acp.ToolCallProgress)
    assert meta_only.status is None
    done = acp.parse_session_update(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "toolu_1",
            "status": "completed",
            "rawOutput": "hi",
        }
    )
    assert isinstance(done, acp.ToolCallProgress)
    assert done.raw_output == "hi"
    # codex-acp: usage_update without cost; env_var auth methods; models in session/new.
    usage = acp.parse_session_update(
        {"sessionUpdate": "usage_update", "used": 2007, "size": 124518}
    )
    assert isinstance(usage, acp.UsageUpdate)
    assert usage.cost is None
    init = acp.InitializeResponse.model_validate(
        {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "mcpCapabilities": {"http": True, "acp": False},
            },
            "authMethods": [
                {
                    "id": "codex-api-key",
                    "name": "API key",
                    "type": "env_var",
                    "vars": [{"name": "K"}],
                }
            ],
            "agentInfo": {"name": "codex-acp", "title": "Codex", "version": "0.16.0"},
        }
    )
    assert init.auth_methods[0].type == "env_var"
    assert init.agent_capabilities.session_capabilities.resume is None
    new = acp.NewSessionResponse.model_validate(
        {
            "sessionId": "u",
            "models": {
                "currentModelId": "default",
                "availableModels": [{"modelId": "opus", "name": "Opus"}],
            },
            "modes": {
                "currentModeId": "default",
                "availableModes": [{"id": "plan", "name": "Plan"}],
            },
        }
    )
    assert new.models is not None
    assert new.models.current_model_id == "default"
    # A permission request with string id options and no kind/status on the tool call.
    req = acp.parse_client_request(
        "session/request_permission",
        {
            "sessionId": "s",
            "toolCall": {
                "toolCallId": "toolu_1",
                "rawInput": {"command": "echo hi > f"},
                "title": "`echo`",
            },
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
        },
    )
    assert isinstance(req, acp.RequestPermissionRequest)
    assert acp.parse_client_request("terminal/create", {}) is None


# -- 4. generated schema-valid instances parse ----------------------------------------------------

_SKIP_KEYS = {"description", "title", "default", "discriminator", "$schema", "examples"}
_INT_BOUNDS = {
    "uint64": (0, 2**64 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint32": (0, 2**32 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint16": (0, 2**16 - 1),
}
_JSON_LEAF = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)


class SchemaStrategies:
    """Hypothesis strategies for instances of a JSON Schema subset (the one ACP uses)."""

    def __init__(self, all_defs: dict[str, Any]) -> None:
        self.defs = all_defs

    def flatten(self, node: dict[str, Any]) -> dict[str, Any]:
        node = {k: v for k, v in node.items() if k not in _SKIP_KEYS and not k.startswith("x-")}
        if "$ref" in node:
            target = self.defs[node.pop("$ref").rsplit("/", 1)[1]]
            node = self.merge(node, self.flatten(target))
        while "allOf" in node:
            parts = node.pop("allOf")
            for part in parts:
                node = self.merge(node, self.flatten(part))
        return node

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for key, value in b.items():
            if key in _SKIP_KEYS or key.startswith("x-"):
                continue
            if key == "properties":
                props = dict(out.get("properties", {}))
                for name, sub in value.items():
                    props[name] = {"allOf": [props[name], sub]} if name in props else sub
                out["properties"] = props
            elif key == "required":
                out["required"] = sorted(set(out.get("required", [])) | set(value))
            elif key in ("oneOf", "anyOf") and ("oneOf" in out or "anyOf" in out):
                mine = out.pop("oneOf", None) or out.pop("anyOf")
                out["anyOf"] = [{"allOf": [x, y]} for x in mine for y in value]
            else:
                out[key] = value
        return out

    def strategy(self, node: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
        assert depth < 60, "schema nesting too deep"
        node = self.flatten(node)
        if "const" in node:
            return st.just(node["const"])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        branches = node.get("oneOf") or node.get("anyOf")
        if branches:
            base = {k: v for k, v in node.items() if k not in ("oneOf", "anyOf")}
            alternatives = (
                [self.merge(base, self.flatten(b)) for b in branches] if base else branches
            )
            return st.one_of([self.strategy(alt, depth + 1) for alt in alternatives])
        kind = node.get("type")
        if isinstance(kind, list):
            return st.one_of([self.strategy({**node, "type": k}, depth + 1) for k in kind])
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind == "string":
            return st.text(min_size=node.get("minLength", 0), max_size=8)
        if kind == "integer":
            low, high = _INT_BOUNDS.get(node.get("format", ""), (-(2**31), 2**31 - 1))
            return st.integers(node.get("minimum", low), node.get("maximum", high))
        if kind == "number":
            return st.floats(allow_nan=False, allow_infinity=False)
        if kind == "array":
            items = node.get("items", {})
            return st.lists(self.strategy(items, depth + 1), max_size=2 if depth < 30 else 0)
        if kind == "object" or "properties" in node:
            props: dict[str, Any] = node.get("properties", {})
            required = set(node.get("required", []))
            if not props:
                return st.dictionaries(st.text(max_size=4), _JSON, max_size=2)
            return st.fixed_dictionaries(
                {
                    k: (self.strategy(props[k], depth + 1) if k in props else _JSON)
                    for k in sorted(required)
                },
                optional={
                    k: self.strategy(v, depth + 1) for k, v in props.items() if k not in required
                },
            )
        return _JSON  # {}: any JSON value


@cache
def strategy_for(which: str, name: str, variant: int | None = None) -> st.SearchStrategy[Any]:
    gen = SchemaStrategies(defs(which))
    node = defs(which)[name]
    if variant is not None:
        node = node["oneOf"][variant]
    return gen.strategy(node)


HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

UPDATE_VARIANTS = [
    (which, i, variant["properties"]["sessionUpdate"]["const"])
    for which in ("stable", "unstable")
    for i, variant in enumerate(defs(which)["SessionUpdate"]["oneOf"])
]


@pytest.mark.parametrize(
    ("which", "index", "kind"), UPDATE_VARIANTS, ids=[f"{w}-{k}" for w, _, k in UPDATE_VARIANTS]
)
@HYPOTHESIS
@given(data=st.data())
def test_generated_session_updates_parse(
    which: str, index: int, kind: str, data: st.DataObject
) -> None:
    instance = data.draw(strategy_for(which, "SessionUpdate", index))
    assert_valid(which, "SessionUpdate", instance)  # the generator's own check
    update = acp.parse_session_update(instance)
    assert_no_catch_all(update)
    assert getattr(update, "session_update") == kind  # noqa: B009
    assert round_trip(update) == instance
    note = acp.parse_session_notification({"sessionId": "s", "update": instance})
    assert note.update == update


GENERATED_MESSAGES: list[tuple[str, str, type[BaseModel]]] = [
    ("stable", "SessionNotification", acp.SessionNotification),
    ("unstable", "SessionNotification", acp.SessionNotification),
    ("stable", "RequestPermissionRequest", acp.RequestPermissionRequest),
    ("unstable", "RequestPermissionRequest", acp.RequestPermissionRequest),
    ("stable", "ReadTextFileRequest", acp.ReadTextFileRequest),
    ("stable", "WriteTextFileRequest", acp.WriteTextFileRequest),
    ("stable", "InitializeResponse", acp.InitializeResponse),
    ("unstable", "InitializeResponse", acp.InitializeResponse),
    ("stable", "NewSessionResponse", acp.NewSessionResponse),
    ("stable", "LoadSessionResponse", acp.LoadSessionResponse),
    ("stable", "ResumeSessionResponse", acp.ResumeSessionResponse),
    ("unstable", "ForkSessionResponse", acp.ForkSessionResponse),
    ("stable", "ListSessionsResponse", acp.ListSessionsResponse),
    ("stable", "CloseSessionResponse", acp.CloseSessionResponse),
    ("stable", "SetSessionModeResponse", acp.SetSessionModeResponse),
    ("stable", "SetSessionConfigOptionResponse", acp.SetSessionConfigOptionResponse),
    ("stable", "PromptResponse", acp.PromptResponse),
    ("unstable", "PromptResponse", acp.PromptResponse),
]


@pytest.mark.parametrize(
    ("which", "name", "model"),
    GENERATED_MESSAGES,
    ids=[f"{w}-{n}" for w, n, _ in GENERATED_MESSAGES],
)
@HYPOTHESIS
@given(data=st.data())
def test_generated_messages_parse(
    which: str, name: str, model: type[BaseModel], data: st.DataObject
) -> None:
    instance = data.draw(strategy_for(which, name))
    assert_valid(which, name, instance)
    parsed = (
        acp.parse_session_notification(instance)
        if model is acp.SessionNotification
        else model.model_validate(instance)
    )
    assert_no_catch_all(parsed)
    assert round_trip(parsed) == instance


GENERATED_SENDS: list[tuple[str, type[BaseModel]]] = [
    ("InitializeRequest", acp.InitializeRequest),
    ("NewSessionRequest", acp.NewSessionRequest),
    ("LoadSessionRequest", acp.LoadSessionRequest),
    ("ResumeSessionRequest", acp.ResumeSessionRequest),
    ("PromptRequest", acp.PromptRequest),
    ("CancelNotification", acp.CancelNotification),
    ("SetSessionModeRequest", acp.SetSessionModeRequest),
    ("SetSessionConfigOptionRequest", acp.SetSessionConfigOptionRequest),
    ("CloseSessionRequest", acp.CloseSessionRequest),
    ("RequestPermissionResponse", acp.RequestPermissionResponse),
    ("ReadTextFileResponse", acp.ReadTextFileResponse),
    ("WriteTextFileResponse", acp.WriteTextFileResponse),
]


@pytest.mark.parametrize(("name", "model"), GENERATED_SENDS, ids=[n for n, _ in GENERATED_SENDS])
@HYPOTHESIS
@given(data=st.data())
def test_generated_client_messages_survive_our_models(
    name: str, model: type[BaseModel], data: st.DataObject
) -> None:
    """Any schema-valid message of a kind we send goes through our model and stays valid."""
    instance = data.draw(strategy_for("stable", name))
    assert_valid("stable", name, instance)
    parsed = model.model_validate(instance)
    assert_valid("stable", name, acp.to_wire(parsed))
