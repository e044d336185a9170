"""Writing an engine: the interface and the bases an agent's module is built from.

An engine is one small module: an :class:`Engine` whose ``start(options)`` returns
``Session(driver)``, a driver that runs the agent, and a translator from its wire events to
:class:`~agentrun.Message` objects. Every driver implements :class:`EngineDriver` — one
coroutine, ``run_turn(ctx)``, plus optional ``start`` / ``shutdown`` / ``force_stop`` /
``steer`` / ``start_fresh`` — and reaches its session only through :class:`DriverHost`
(``self.host``). Most of it comes from a base:

* :class:`SpawnPerTurnDriver` — one agent process per turn (``opencode run``, ``codex exec``):
  implement ``_command`` and ``_new_translator``; the base spawns, streams, captures the resume
  id and cancels with a signal.
* :class:`LongLivedDriver` — one long-lived process for the whole session, prompts written to
  its stdin (Claude Code): implement ``_argv``, ``_new_translator``, ``start`` (spawn with
  ``_spawn`` and read, handing messages to ``_route``), ``_send_prompt`` and ``_interrupt``; the
  base owns the turn fence, bounded cancellation and the process.
* :class:`JsonRpcDriver` — the same for JSON-RPC agents (ACP agents, ``codex app-server``):
  implement ``_argv``, ``_new_translator``, ``_handshake``, ``_send_prompt`` and ``_interrupt``;
  the base also owns the connection and the table of the agent's requests it answers.
* :class:`EngineDriver` itself, for anything else: implement ``run_turn``.

:class:`Translator` is the one protocol of every translator (it writes ``feed`` and ``finish``
and inherits by subclassing ``feed_line``, ``feed_decoded``, ``sidecars`` / ``use_sidecars``);
:class:`PerTurnTranslator` adds what the spawn-per-turn base needs, :class:`JsonRpcTranslator`
what a JSON-RPC connection offers (``feed_received``). :class:`JsonRpcConnection` raises
:class:`JsonRpcError`, :class:`RequestTimeoutError` and :class:`ConnectionClosedError`, all
:class:`~agentrun.AgentrunError` subclasses.

Shared helpers: :func:`ask_permission` (the permission flow every engine uses),
:class:`RunningTotals` (a turn's own usage or cost from an agent's running totals),
:func:`decode_line` (framing and decoding problems as ``error`` messages). Register a finished
engine under the ``agentrun.engines`` entry-point group (and its translator under
``agentrun.translators``) so ``get_engine``, ``agentrun run --engine`` and ``agentrun replay``
find it. ``docs/engines/writing-an-engine.md`` walks through a complete one.
"""

from ._bases.cumulative import RunningTotals, TotalsScope
from ._bases.jsonrpc_session import JsonRpcDriver, RequestHandlerTable
from ._bases.long_lived import LongLivedDriver
from ._bases.spawn_per_turn import (
    PerTurnTranslator,
    SpawnPerTurnDriver,
    TurnCommand,
    unsupported_message,
)
from ._bases.translator import JsonRpcTranslator, Translator, decode_line
from ._turns.driver import DriverHost, EngineDriver
from ._turns.engine import Engine, ProgramEngine
from ._turns.session import Session
from ._turns.turn import TurnContext
from ._vocabulary.permissions import ask_permission
from ._wire.jsonrpc import (
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    RequestTimeoutError,
)
from ._wire.process import AgentProcess, ProcessSpec, merge_env, open_process

__all__ = [
    "AgentProcess",
    "ConnectionClosedError",
    "DriverHost",
    "Engine",
    "EngineDriver",
    "JsonRpcConnection",
    "JsonRpcDriver",
    "JsonRpcError",
    "JsonRpcTranslator",
    "LongLivedDriver",
    "PerTurnTranslator",
    "ProcessSpec",
    "ProgramEngine",
    "RequestHandlerTable",
    "RequestTimeoutError",
    "RunningTotals",
    "Session",
    "SpawnPerTurnDriver",
    "TotalsScope",
    "Translator",
    "TurnCommand",
    "TurnContext",
    "ask_permission",
    "decode_line",
    "merge_env",
    "open_process",
    "unsupported_message",
]
