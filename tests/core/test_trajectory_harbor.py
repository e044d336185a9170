"""The library's ATIF trajectories validated by Harbor's own models and validator (the reference
implementation of the RFC), and Harbor's own documents read by the library.

Harbor needs Python >= 3.12, so it is not a dependency of the tests: they run where an
interpreter with ``harbor`` installed is found — ``$AGENTRUN_HARBOR_PYTHON``, else a
``python3.12`` / ``python3.13`` / ``python3.14`` on the ``PATH`` that can import it — and are
skipped elsewhere, saying so. To run them::

    python3.12 -m venv /tmp/harbor && /tmp/harbor/bin/pip install harbor==0.26.0
    AGENTRUN_HARBOR_PYTHON=/tmp/harbor/bin/python pytest tests/core/test_trajectory_harbor.py

(Harbor's trajectory models need only pydantic: ``pip install --no-deps harbor==0.26.0
'pydantic>=2.14'`` is enough.) Where they cannot run, ``test_trajectory_versions.py`` holds the
library to the schema as documented, with a document Harbor's models built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest
from repo_paths import FIXTURES

import agentrun
from agentrun.engines._registry import _TRANSLATORS  # pyright: ignore[reportPrivateUsage]
from agentrun.trajectory import Trajectory, from_atif, to_atif

BUILD = FIXTURES / "atif" / "harbor_build.py"
COMMITTED = FIXTURES / "atif" / "harbor-0.26.0.json"
_PROBE = "import harbor.models.trajectories, harbor.utils.trajectory_validator"
#: Where each translator's transcripts live (default: fixtures/<name>/).
_FIXTURE_DIRS = {"acp": ["acp", "opencode-acp"], "opencode-acp": []}


def _can_import_harbor(python: str) -> bool:
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@pytest.fixture(scope="module")
def harbor_python() -> str:
    given = os.environ.get("AGENTRUN_HARBOR_PYTHON")
    if given:
        if not _can_import_harbor(given):
            pytest.fail(f"AGENTRUN_HARBOR_PYTHON={given} cannot import harbor's ATIF models")
        return given
    for name in ("python3.14", "python3.13", "python3.12"):
        found = shutil.which(name)
        if found is not None and _can_import_harbor(found):
            return found
    pytest.skip(
        "Harbor is not installed here: it needs Python >= 3.12 with `harbor` installed; set "
        "AGENTRUN_HARBOR_PYTHON to such an interpreter (see this module's docstring)"
    )


def _harbor(python: str, command: str, given: str | None = None) -> str:
    done = subprocess.run(
        [python, str(BUILD), command],
        input=given,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _harbor_errors(python: str, documents: list[dict[str, Any]]) -> list[list[str]]:
    return json.loads(_harbor(python, "validate", json.dumps(documents)))


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
    assert json.loads(_harbor(harbor_python, "build")) == json.loads(COMMITTED.read_text())


def test_harbor_validates_every_trajectory_the_library_exports(harbor_python: str) -> None:
    exported = _exported_transcripts()
    assert len(exported) > 100
    assert {d["schema_version"] for d in exported.values()} == {"ATIF-v1.8"}
    errors = _harbor_errors(harbor_python, list(exported.values()))
    assert {name: e for name, e in zip(exported, errors, strict=True) if e} == {}


def test_a_harbor_document_round_trips_with_its_media_and_harbor_validates_it(
    harbor_python: str,
) -> None:
    built = json.loads(_harbor(harbor_python, "build"))
    first = _json(to_atif(from_atif(built).turns))
    second = _json(to_atif(from_atif(json.dumps(first)).turns))
    assert second == first
    assert _harbor_errors(harbor_python, [built, first]) == [[], []]
    # Every media part Harbor wrote is in the library's export, in the same order.
    assert _media(first) == _media(built) != []


def test_harbor_refuses_what_the_library_refuses(harbor_python: str) -> None:
    """The library's refusals are the RFC's: a document of a newer version, and an audio part
    whose source is an image, are refused by Harbor as well."""
    built = json.loads(_harbor(harbor_python, "build"))
    newer = {**built, "schema_version": "ATIF-v1.9"}
    mislabelled = json.loads(json.dumps(built))
    mislabelled["steps"][1]["message"][1]["source"] = {"media_type": "image/png", "path": "x"}
    assert all(_harbor_errors(harbor_python, [newer, mislabelled]))
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
