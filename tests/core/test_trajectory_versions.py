"""ATIF versions and media: the library writes ATIF-v1.8 (Harbor 0.26's default), reads every
version from v1.0 to v1.8, refuses any other with a typed error that names the range, and keeps
the image and audio parts of what it reads (they export back as they were).

``fixtures/atif/harbor-0.26.0.json`` was built with Harbor 0.26.0's own models
(``fixtures/atif/harbor_build.py build``); ``test_trajectory_harbor.py`` checks that it still is
what they build, where Harbor can be installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES

from agentrun import ConfigurationError, Message, MessageType, ToolCall
from agentrun.trajectory import (
    ATIF_VERSION,
    ATIF_VERSIONS,
    AtifContentPart,
    Trajectory,
    from_atif,
    to_atif,
    trajectory_digest,
)

HARBOR = FIXTURES / "atif" / "harbor-0.26.0.json"
_AGENT = {"name": "other-tool", "version": "1"}
_SPOKEN = {"type": "audio", "source": {"media_type": "audio/mpeg", "path": "media/request.mp3"}}


def _json(trajectory: Trajectory) -> dict[str, Any]:
    return trajectory.model_dump(mode="json", exclude_none=True)


def _harbor() -> dict[str, Any]:
    return json.loads(HARBOR.read_text())


def _document(version: str, steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"schema_version": version, "agent": _AGENT, "steps": steps, **fields}


def _messages(document: Any) -> list[Message]:
    return [m for t in from_atif(document).turns for m in t.messages]


# -- versions ---------------------------------------------------------------------------------


def test_the_library_writes_atif_v1_8_and_reads_v1_0_to_v1_8() -> None:
    assert ATIF_VERSION == "ATIF-v1.8"
    assert tuple(f"ATIF-v1.{minor}" for minor in range(9)) == ATIF_VERSIONS
    exported = to_atif([[Message(type=MessageType.TEXT, text="hi")]], prompts=["hello"])
    assert _json(exported)["schema_version"] == "ATIF-v1.8"


def test_a_document_built_with_harbors_own_models_reads() -> None:
    document = _harbor()
    assert document["schema_version"] == "ATIF-v1.8"  # Harbor 0.26's default
    read = from_atif(document)
    assert read.agent_name == "harbor-agent" and read.session_id == "harbor-run-1"
    assert [t.prompt for t in read.turns] == ["Listen to this:"]
    summary = read.turns[0].summary
    assert [c.name for c in summary.tool_calls] == ["transcribe", "screenshot"]
    assert summary.text == "Done; here is a spoken summary."
    # The embedded subagent (ATIF 1.7) is read under the call that started it.
    subagent = [m for m in read.turns[0].messages if m.parent_tool_use_id == "t1"]
    assert [m.text for m in subagent if m.type is MessageType.TEXT] == [
        "It says: fix the failing test."
    ]


@pytest.mark.parametrize("minor", range(9))
def test_every_version_from_1_0_to_1_8_reads(minor: int) -> None:
    version = f"ATIF-v1.{minor}"
    document = _document(
        version,
        [
            {"step_id": 1, "source": "user", "message": "Fix it"},
            {"step_id": 2, "source": "agent", "message": "Fixed."},
        ],
    )
    read = from_atif(document)
    assert [t.prompt for t in read.turns] == ["Fix it"]
    assert read.turns[0].summary.text == "Fixed."
    # Read as any version, written as the version the library writes.
    assert _json(to_atif(read.turns))["schema_version"] == "ATIF-v1.8"


@pytest.mark.parametrize("version", ["ATIF-v1.9", "ATIF-v2.0", "ATIF-v1.10", "1.8", "", 1.8])
def test_a_version_the_library_does_not_read_is_refused_naming_the_range(version: Any) -> None:
    document = _harbor()
    document["schema_version"] = version
    for source in (document, json.dumps(document)):
        with pytest.raises(ConfigurationError) as caught:
            from_atif(source)
        message = str(caught.value)
        assert "(it reads ATIF-v1.0 to ATIF-v1.8)" in message
        assert f"schema_version is {version!r}" in message
        assert caught.value.option == "trajectory"


def test_an_embedded_subagent_of_a_newer_version_is_refused_naming_where() -> None:
    document = _harbor()
    document["subagent_trajectories"][0]["schema_version"] = "ATIF-v1.9"
    with pytest.raises(ConfigurationError) as caught:
        trajectory_digest(document)
    assert str(caught.value) == (
        "not an ATIF version this library reads: subagent_trajectories.0.schema_version is "
        "'ATIF-v1.9' (it reads ATIF-v1.0 to ATIF-v1.8)"
    )


# -- media parts ------------------------------------------------------------------------------


def test_harbors_audio_and_image_parts_are_kept_and_exported_back_unchanged() -> None:
    document = _harbor()
    read = from_atif(document)
    turn = read.turns[0]
    # The spoken prompt: its parts kept whole (text and audio), its text the prompt.
    assert turn.prompt_content == tuple(document["steps"][1]["message"])
    tool_results = [m for m in turn.messages if m.type is MessageType.TOOL_RESULT]
    screen = document["steps"][2]["observation"]["results"][1]["content"]
    assert tool_results[1].tool is not None and tool_results[1].tool.output == "The screen:"
    assert tool_results[1].data == {"atif_content": screen}
    answer = [m for m in turn.messages if m.type is MessageType.TEXT][-1]
    assert answer.data == {"atif_content": document["steps"][3]["message"]}

    exported = _json(to_atif(read.turns))
    by_source = {s["source"]: s for s in reversed(exported["steps"])}  # first of each
    assert by_source["user"]["message"] == document["steps"][1]["message"]
    agent_steps = [s for s in exported["steps"] if s["source"] == "agent"]
    assert agent_steps[0]["observation"]["results"][1]["content"] == screen
    assert agent_steps[-1]["message"] == document["steps"][3]["message"]
    # export → import → export is stable.
    assert _json(to_atif(from_atif(exported).turns)) == exported


def test_audio_alone_in_every_place_a_part_can_be_is_kept() -> None:
    clip = {"type": "audio", "source": {"media_type": "audio/ogg", "path": "a.ogg"}}
    document = _document(
        "ATIF-v1.8",
        [
            {"step_id": 1, "source": "system", "message": [clip]},
            {"step_id": 2, "source": "user", "message": [_SPOKEN]},
            {
                "step_id": 3,
                "source": "agent",
                "message": [clip],
                "tool_calls": [{"tool_call_id": "c1", "function_name": "say", "arguments": {}}],
                "observation": {"results": [{"source_call_id": "c1", "content": [clip]}]},
            },
        ],
    )
    read = from_atif(document)
    kept = [m.data for t in read.turns for m in t.messages if m.data]
    assert kept == [{"atif_content": [clip]}] * 3  # the system, agent and result parts
    assert read.turns[0].prompt_content == (_SPOKEN,)
    assert read.turns[0].prompt == ""
    exported = _json(to_atif(read.turns))
    messages = [s["message"] for s in exported["steps"]]
    assert messages == [[_SPOKEN], [clip], [clip]]
    assert exported["steps"][2]["observation"]["results"][0]["content"] == [clip]
    assert _json(to_atif(from_atif(exported).turns)) == exported
    assert "[audio: media/request.mp3]" in trajectory_digest(document)


def test_a_turn_of_several_user_steps_keeps_all_their_parts_in_order() -> None:
    document = _document(
        "ATIF-v1.8",
        [
            {"step_id": 1, "source": "user", "message": "First,"},
            {
                "step_id": 2,
                "source": "user",
                "message": [{"type": "text", "text": "then"}, _SPOKEN],
            },
            {"step_id": 3, "source": "agent", "message": "ok"},
        ],
    )
    turn = from_atif(document).turns[0]
    assert turn.prompt == "First,\nthen"
    assert turn.prompt_content == (
        {"type": "text", "text": "First,"},
        {"type": "text", "text": "then"},
        _SPOKEN,
    )
    exported = _json(to_atif([turn]))
    assert exported["steps"][0]["message"] == list(turn.prompt_content)
    assert _json(to_atif(from_atif(exported).turns)) == exported


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("audio/mp3", "audio/mpeg"), (" Audio/X-WAV ", "audio/wav"), ("audio/m4a", "audio/mp4")],
)
def test_an_audio_type_in_another_spelling_reads_as_the_registered_one(
    given: str, canonical: str
) -> None:
    part = {"type": "audio", "source": {"media_type": given, "path": "x", "duration_sec": 2}}
    document = _document("ATIF-v1.8", [{"step_id": 1, "source": "user", "message": [part]}])
    (turn,) = from_atif(document).turns
    assert turn.prompt_content is not None
    assert turn.prompt_content[0]["source"] == {
        "media_type": canonical,
        "path": "x",
        "duration_sec": 2.0,
    }


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ({"type": "audio", "source": {"media_type": "image/png", "path": "x"}}, "another kind"),
        ({"type": "image", "source": {"media_type": "audio/wav", "path": "x"}}, "another kind"),
        ({"type": "audio", "source": {"media_type": "audio/midi", "path": "x"}}, "media_type"),
        ({"type": "audio", "text": "x", "source": _SPOKEN["source"]}, "no 'text'"),
        ({"type": "audio"}, "has 'source'"),
        ({"type": "video", "source": _SPOKEN["source"]}, "type"),
        ({"type": "audio", "source": {**_SPOKEN["source"], "duration_sec": -1}}, "duration_sec"),
        ({"type": "audio", "source": {**_SPOKEN["source"], "bitrate": 1}}, "bitrate"),
    ],
)
def test_a_media_part_that_breaks_the_schema_is_refused(part: Any, expected: str) -> None:
    document = _document("ATIF-v1.8", [{"step_id": 1, "source": "user", "message": [part]}])
    with pytest.raises(ConfigurationError, match=expected):
        from_atif(document)


def test_an_infinite_duration_is_refused() -> None:
    text = json.dumps(
        _document("ATIF-v1.8", [{"step_id": 1, "source": "user", "message": [_SPOKEN]}])
    ).replace('"path": "media/request.mp3"', '"path": "a", "duration_sec": Infinity')
    assert "Infinity" in text
    with pytest.raises(ConfigurationError, match="duration_sec"):
        from_atif(text)


def test_kept_parts_whose_text_no_longer_matches_are_not_written() -> None:
    """A message whose text was changed after import (redacted, say) is written as its text:
    the parts kept for the old text would put it back."""
    parts = [{"type": "text", "text": "secret"}, _SPOKEN]
    changed = Message(type=MessageType.TEXT, text="[redacted]", data={"atif_content": parts})
    kept = Message(type=MessageType.TEXT, text="secret", data={"atif_content": parts})
    not_parts = Message(type=MessageType.TEXT, text="x", data={"atif_content": [{"type": "?"}]})
    result = Message(
        type=MessageType.TOOL_RESULT,
        tool=ToolCall(id="c", output="[redacted]"),
        data={"atif_content": parts},
    )
    use = Message(type=MessageType.TOOL_USE, tool=ToolCall(id="c", name="f", input={}))
    steps = _json(to_atif([[changed], [kept], [not_parts], [use, result]]))["steps"]
    assert [s["message"] for s in steps[:3]] == ["[redacted]", parts, "x"]
    assert steps[3]["observation"]["results"][0]["content"] == "[redacted]"


def test_content_parts_validate_as_the_public_model() -> None:
    read = from_atif(HARBOR)
    parts = [AtifContentPart.model_validate(p) for p in read.turns[0].prompt_content or ()]
    assert [p.type for p in parts] == ["text", "audio"]
    assert parts[1].source is not None and parts[1].source.media_type == "audio/mpeg"


def test_the_harbor_fixture_is_a_path_source_too(tmp_path: Path) -> None:
    copy = tmp_path / "t.json"
    copy.write_bytes(HARBOR.read_bytes())
    assert _json(to_atif(from_atif(copy).turns)) == _json(to_atif(from_atif(_harbor()).turns))
