"""Harbor's own ATIF models and validator, for tests that check the library's trajectories
against the reference implementation of the RFC.

Harbor needs Python >= 3.12, so it is not a dependency of the tests: it runs in a subprocess
(``fixtures/atif/harbor_build.py``) under an interpreter that has ``harbor`` installed —
``$AGENTRUN_HARBOR_PYTHON``, else a ``python3.12`` / ``python3.13`` / ``python3.14`` on the
``PATH`` that can import it. :func:`harbor_python` skips the test, saying so, where none is
found. To have one::

    make harbor   # or: python3.12 -m venv /tmp/harbor && /tmp/harbor/bin/pip install harbor==0.26.0
    AGENTRUN_HARBOR_PYTHON=/tmp/harbor/bin/python pytest tests/core/test_trajectory_harbor.py

(Harbor's trajectory models need only pydantic: ``pip install --no-deps harbor==0.26.0
'pydantic>=2.14'`` is enough.)
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from typing import Any

import pytest
from repo_paths import FIXTURES

BUILD = FIXTURES / "atif" / "harbor_build.py"
_PROBE = "import harbor.models.trajectories, harbor.utils.trajectory_validator"


def _can_import_harbor(python: str) -> bool:
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.lru_cache(maxsize=1)
def _found() -> str | None:
    given = os.environ.get("AGENTRUN_HARBOR_PYTHON")
    if given:
        return given
    for name in ("python3.14", "python3.13", "python3.12"):
        found = shutil.which(name)
        if found is not None and _can_import_harbor(found):
            return found
    return None


def harbor_python() -> str:
    """An interpreter that can import Harbor's ATIF models; the test is skipped where there is
    none (and fails when ``$AGENTRUN_HARBOR_PYTHON`` names one that cannot)."""
    found = _found()
    if found is None:
        pytest.skip(
            "Harbor is not installed here: it needs Python >= 3.12 with `harbor` installed; set "
            "AGENTRUN_HARBOR_PYTHON to such an interpreter (see tests/harbor_support.py)"
        )
    if not _can_import_harbor(found):
        pytest.fail(f"AGENTRUN_HARBOR_PYTHON={found} cannot import Harbor's ATIF models")
    return found


def harbor(python: str, command: str, given: str | None = None) -> str:
    """What ``harbor_build.py command`` prints, ``given`` on its stdin."""
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


def harbor_errors(python: str, documents: list[dict[str, Any]]) -> list[list[str]]:
    """The errors Harbor's ``TrajectoryValidator`` finds in each document (empty: valid)."""
    return json.loads(harbor(python, "validate", json.dumps(documents)))
