"""``agentrun acp`` at the edges of its sessions: the model option an ACP client (``acpx
--model``) picks from, ids the server never issued, and what it keeps of each session.

Each test starts ``agentrun acp --embedded`` as a subprocess and talks ACP to it with the small
client of :mod:`acp_client`; the engines are the real pinned agents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, schema_validator, server_argv
from agents_support import descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _available(engine: str) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


def _model_option(answer: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in answer["configOptions"] if o["id"] == "model")


async def _closed(client: AcpClient, before: set[int]) -> None:
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        assert await client.process.wait() == 0
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("engine", "known"), [("claude", "claude-sonnet-4-5-20250929"), ("codex", "gpt-5.5")]
)
async def test_the_model_option_offers_the_catalogs_models_and_takes_them(
    engine: str, known: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """The model option listed only the current value (``default``), so a client that picks
    from the list (``acpx --model X``) could pick nothing; it lists the catalog's models of the
    engine, and ``session/set_config_option`` and ``session/set_model`` take them."""
    _available(engine)
    before = descendants()
    argv = server_argv(engine, "--embedded", backend=anyio_backend_name)
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert schema_validator("NewSessionResponse").is_valid(new)
        sid = new["sessionId"]
        option = _model_option(new)
        offered = [o["value"] for o in option["options"]]
        assert option["category"] == "model" and option["currentValue"] in offered
        assert "default" in offered and known in offered, offered
        assert len(offered) == len(set(offered))
        # Picked through the config option ...
        changed = await client.request(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": known}
        )
        assert _model_option(changed)["currentValue"] == known
        # ... through the unstable session/set_model, and back to the agent's default.
        assert await client.request(
            "session/set_model", {"sessionId": sid, "modelId": "default"}
        ) == {}  # fmt: skip
        resumed = await client.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        assert _model_option(resumed)["currentValue"] == "default"
        assert await client.request("session/set_model", {"sessionId": sid, "modelId": known}) == {}
        resumed = await client.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        assert _model_option(resumed)["currentValue"] == known
        bad = await client.call("session/set_model", {"sessionId": sid, "modelId": ""})
        assert bad["error"]["code"] == -32602, bad
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()
