"""The package is fully typed for its users: ``pyright --verifytypes`` reports 100 %."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_public_api_is_completely_typed(tmp_path: Path) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        pytest.skip("pyright is not installed (pip install -e '.[dev]')")
    venv = str(Path(sys.executable).parent.parent)
    env = {
        **os.environ,
        "VIRTUAL_ENV": venv,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        [pyright, "--verifytypes", "agentrun", "--ignoreexternal", "--outputjson"],
        cwd=tmp_path,  # outside the checkout: the installed package, as users see it
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(done.stdout)
    completeness = report["typeCompleteness"]
    problems = [
        f"{d.get('file', '')}:{d.get('range', {}).get('start', {}).get('line', '?')} {d['message']}"
        for d in report.get("generalDiagnostics", [])
        if d.get("severity") == "error"
    ]
    assert completeness["completenessScore"] == 1, "\n".join(problems[:30])
