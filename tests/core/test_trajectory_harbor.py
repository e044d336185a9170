"""The library's ATIF trajectories validated by Harbor's own models and validator (the reference
implementation of the RFC), and Harbor's own documents read by the library.

Harbor runs in a subprocess under Python >= 3.12 (``tests/harbor_support.py`` says how to have
one); the tests are skipped, saying so, where it is not installed. Where they cannot run,
``test_trajectory_versions.py`` holds the library to the schema as documented, with a document
Harbor's models built."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harbor_support import harbor, harbor_errors, harbor_python
from repo_paths import FIXTURES

import agentrun
from agentrun.engines._registry import _TRANSLATORS  # pyright: ignore[reportPrivateUsage]
from agentrun.trajectory import Trajectory, from_atif, to_atif

COMMITTED = FIXTURES / "atif" / "harbor-0.26.0.json"
#: Where each translator's transcripts live (default: fixtures/<name>/).
_FIXTURE_DIRS = {"acp": ["acp", "opencode-acp"], "opencode-acp": []}


@pytest.fixture(scope="module", name="harbor_python")
def _harbor_python() -> str:
    return harbor_python()


def _json(trajectory: Trajectory) -> dict[str, Any]:
    return trajectory.model_dump(mode="json", exclude_none=True)


def _exported_transcripts() -> dict[str, dict[str, Any]]:
    """Every recorded transcript under fixtures/, exported as the library writes it."""
    exported: dict[str, dict[str, Any]] = {}
    for name in sorted(_TRANSLATORS):
        for folder in _FIXTURE_DIRS.get(name, [name]):
            for path in sorted((FIXTURES / folder).rglob("*.jsonl")):
                if not path.name.endswith(".rollout.jsonl"):
                    turns = agentrun.replay(path, engine=name)
                    exported[f"{name}:{path.relative_to(FIXTURES)}"] = _json(to_atif(turns))
    return exported


def test_harbors_models_build_the_committed_document(harbor_python: str) -> None:
    """The document ``test_trajectory_versions.py`` reads is what Harbor's models build."""
    assert json.loads(harbor(harbor_python, "build")) == json.loads(COMMITTED.read_text())


def test_harbor_validates_every_trajectory_the_library_exports(harbor_python: str) -> None:
    exported = _exported_transcripts()
    assert len(exported) > 100
    assert {d["schema_version"] for d in exported.values()} == {"ATIF-v1.8"}
    errors = harbor_errors(harbor_python, list(exported.values()))
    assert {name: e for name, e in zip(exported, errors, strict=True) if e} == {}


def test_a_harbor_document_round_trips_with_its_media_and_harbor_validates_it(
    harbor_python: str,
) -> None:
    built = json.loads(harbor(harbor_python, "build"))
    first = _json(to_atif(from_atif(built).turns))
    second = _json(to_atif(from_atif(json.dumps(first)).turns))
    assert second == first
    assert harbor_errors(harbor_python, [built, first]) == [[], []]
    # Every media part Harbor wrote is in the library's export, in the same order.
    assert _media(first) == _media(built) != []


def test_harbor_refuses_what_the_library_refuses(harbor_python: str) -> None:
    """The library's refusals are the RFC's: a document of a newer version, and an audio part
    whose source is an image, are refused by Harbor as well."""
    built = json.loads(harbor(harbor_python, "build"))
    newer = {**built, "schema_version": "ATIF-v1.9"}
    mislabelled = json.loads(json.dumps(built))
    mislabelled["steps"][1]["message"][1]["source"] = {"media_type": "image/png", "path": "x"}
    assert all(harbor_errors(harbor_python, [newer, mislabelled]))
    for document in (newer, mislabelled):
        with pytest.raises(agentrun.ConfigurationError):
            from_atif(document)


def _media(document: dict[str, Any]) -> list[Any]:
    """The image and audio parts of a document's steps and results, in order."""
    found: list[Any] = []
    for step in document["steps"]:
        contents = [step["message"]]
        for result in (step.get("observation") or {}).get("results", []):
            contents.append(result.get("content"))
        for content in contents:
            if isinstance(content, list):
                found.extend(p for p in content if p["type"] != "text")
    return found
