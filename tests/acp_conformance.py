"""Conformance of recorded ACP traffic to the published schema: every message that crossed
the wire, checked by the zod validators of the ``@agentclientprotocol/sdk`` npm package
(``engines/node_modules``) run by the pinned Node.js (``acp_conformance.mjs``).

Record each message as ``{"to": "agent" | "client", "message": ...}`` in wire order ("to" is
the side that received it); :func:`check_wire` sends them through the validators and returns
their report: ``checked`` (messages validated), ``failures`` (each message that did not
validate, with the schema type and the first issues), ``unknown`` (messages of methods neither
the stable nor the unstable schema defines, as ``"<method> <kind> to <side>"``) and ``methods``
(how often each method and kind was seen).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from repo_paths import REPO, TESTS

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._wire.programs import engines_dirs, resolve_node

VALIDATOR = TESTS / "acp_conformance.mjs"
SDK_PACKAGE = Path("@agentclientprotocol") / "sdk"
#: Methods the latest schema no longer has that an agent may still take (``session/set_model``,
#: dropped for the model config option).
DROPPED_METHODS = frozenset({"session/set_model"})


def _node_modules() -> Path:
    for engines in (*engines_dirs(), REPO / "engines"):
        if (engines / "node_modules" / SDK_PACKAGE / "package.json").is_file():
            return engines / "node_modules"
    pytest.skip("the @agentclientprotocol/sdk npm package is not installed (engines/)")


def check_wire(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The validators' report on ``records`` (see the module docstring)."""
    node_modules = _node_modules()
    try:
        node = resolve_node(minimum=20, engine="acp-conformance")
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    lines = "".join(json.dumps(r) + "\n" for r in records)
    done = subprocess.run(
        [node, str(VALIDATOR), str(node_modules)],
        input=lines.encode(), capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def failures_text(report: dict[str, Any]) -> str:
    """The failures, one per line, short enough for an assertion message."""
    out: list[str] = []
    for failure in report["failures"]:
        issues = json.dumps(failure.get("issues"))[:600]
        message = json.dumps(failure.get("message"))[:600]
        out.append(f"{failure.get('to')} {failure.get('method')} {failure.get('kind')} "
                   f"({failure.get('type')}): {issues}\n    {message}")  # fmt: skip
    return "\n".join(out)


def assert_conforms(records: list[dict[str, Any]], *, library: str) -> dict[str, Any]:
    """Every recorded message validates, and every message the library sent (``library``: the
    side it plays, ``"agent"`` or ``"client"``) is of a method the schema defines, but for
    :data:`DROPPED_METHODS`; what the other side sent outside the schema (vendor methods of a
    real agent) is left in the report's ``unknown`` for the caller. Returns the report."""
    assert records, "nothing was recorded"
    report = check_wire(records)
    assert report["failures"] == [], failures_text(report)
    other = "client" if library == "agent" else "agent"
    sent = [u for u in report["unknown"] if u.endswith(f" to {other}")]
    assert all(u.split(" ", 1)[0] in DROPPED_METHODS for u in sent), sent
    assert report["checked"] > 0
    return report


def taps_to_records(tapped: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """What a library session's ``wire_tap`` saw of an ACP agent as records: what the engine
    sent went to the agent, what it read to the client (stderr and non-JSON lines left out)."""
    records: list[dict[str, Any]] = []
    for direction, line in tapped:
        if direction not in ("send", "recv"):
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            records.append({"to": "agent" if direction == "send" else "client",
                            "message": message})  # fmt: skip
    return records
