"""Start-up: ``import agentrun`` in a fresh interpreter against the floor of any library that
exports pydantic models (``import anyio; from pydantic import BaseModel``), and against that
floor plus the definition of one model (what pydantic loads on the first model class); and
``claude_agent_sdk`` when it is installed. Every program runs once before it is timed, with its
bytecode cached in a cache of the benchmark's own (``PYTHONPYCACHEPREFIX``), as an installed
package has it (pip compiles on install), whether or not ``PYTHONDONTWRITEBYTECODE`` is set.

    python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from _common import Row, interleaved, print_table

FLOOR = "import anyio; from pydantic import BaseModel"
FLOOR_MODEL = (
    "import anyio\nfrom pydantic import BaseModel, Field\n"
    "class M(BaseModel):\n    x: int = Field(default=0, ge=0)\nM()"
)


def _python(code: str, env: dict[str, str]) -> Callable[[], object]:
    def run() -> int:
        return subprocess.run([sys.executable, "-c", code], env=env, check=True).returncode

    return run


def measure(runs: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        candidates = {
            "floor": _python(FLOOR, env),
            "floor+model": _python(FLOOR_MODEL, env),
            "agentrun": _python("import agentrun", env),
            "agentrun+use": _python("from agentrun import Message, SessionOptions, run_turn", env),
            "agentrun cli": _python("import agentrun.cli", env),
        }
        if importlib.util.find_spec("claude_agent_sdk") is not None:
            candidates["claude_agent_sdk"] = _python("import claude_agent_sdk", env)
        for run in candidates.values():
            run()  # fills the bytecode cache
        result = interleaved(runs, candidates)
    floor = result["floor"][0]
    rows = [
        Row("startup import agentrun", "fresh interpreter", "anyio + BaseModel",
            result["agentrun"][0] / floor, result["agentrun"][0], result["agentrun"][1],
            "<= 1.6x"),
        Row("  same, against", "import agentrun", "floor + one model",
            result["agentrun"][0] / result["floor+model"][0], result["agentrun"][0],
            result["agentrun"][1]),
        Row("  agentrun, first names", "Message, SessionOptions, run_turn", "anyio + BaseModel",
            result["agentrun+use"][0] / floor, result["agentrun+use"][0],
            result["agentrun+use"][1]),
        Row("  import agentrun.cli", "fresh interpreter", "anyio + BaseModel",
            result["agentrun cli"][0] / floor, result["agentrun cli"][0],
            result["agentrun cli"][1]),
    ]  # fmt: skip
    if "claude_agent_sdk" in result:
        rows.append(
            Row("  claude_agent_sdk", "import claude_agent_sdk", "anyio + BaseModel",
                result["claude_agent_sdk"][0] / floor, result["claude_agent_sdk"][0],
                result["claude_agent_sdk"][1])
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    print_table(measure(parser.parse_args().runs))


if __name__ == "__main__":
    main()
