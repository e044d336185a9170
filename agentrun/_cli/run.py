"""``agentrun run``: real agent turns, rendered for a person or as JSON lines.

Everything the command line says is checked before anything starts (the engine's name, the
prompt, the script, the engine options); a bad value is one line and exit 2. Ctrl-C cancels the
running turn in the agent, shows what it had done, says ``interrupted`` and exits 130; a second
Ctrl-C stops the agent at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio

from .._turns.boundary import check_turn_arguments
from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import Turn
from .._vocabulary.errors import AgentrunError, ConfigurationError
from .._vocabulary.limits import NO_LIMITS, TurnLimits
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.metering import UsageMeter
from .._vocabulary.options import SessionOptions
from .._vocabulary.sandbox import Sandbox
from .._vocabulary.summary import TurnSummary, WindDown
from ..engines._registry import engine_names, get_engine
from .proxied import check_proxy_arguments, wants_proxy
from .render import Renderer, clean

if TYPE_CHECKING:
    from ..offline import ModelServer, Script

__all__ = [
    "DEFAULT_PROMPT",
    "EXIT_INTERRUPTED",
    "json_line",
    "load_script",
    "read_prompt",
    "run",
    "sandbox_option",
]

DEFAULT_PROMPT = "Check that the shell works, then tell me what you found."

#: The exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: The exit status of a run that failed once it had started.
EXIT_FAILED = 1


def json_line(message: Message) -> str:
    """A message as one JSON line: fields that are unknown (``None``) are left out."""
    return json.dumps(message.model_dump(mode="json", exclude_none=True))


@dataclass
class _Plan:
    """What ``agentrun run`` will do, every part of it checked."""

    prompts: list[str]
    script: Script | None
    options: dict[str, str]
    #: ``--output-schema``: the JSON Schema of each turn's final answer.
    output_schema: dict[str, Any] | None = None
    #: ``--timeout``, ``--idle-timeout``, ``--tool-timeout``, ``--stall-after`` and
    #: ``--wind-down`` (with ``--wind-down-text``), checked together.
    limits: TurnLimits = NO_LIMITS


@dataclass
class _Interrupt:
    """Ctrl-C while the command runs: the first cancels the turn, the next stops everything."""

    scope: anyio.CancelScope
    turn: Turn | None = None
    count: int = 0


def read_prompt(args: argparse.Namespace, *, default: str = DEFAULT_PROMPT) -> str:
    """The prompt: the argument, ``-`` for standard input, or ``--prompt-file``."""
    given: str | None = args.prompt
    path: str | None = args.prompt_file
    if given is not None and path is not None:
        raise ConfigurationError("give the prompt or --prompt-file, not both", option="prompt")
    if path is not None:
        source = "standard input" if path == "-" else path
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigurationError(
                f"cannot read the prompt file {path}: {why}", option="prompt_file"
            ) from None
    elif given == "-":
        source = "standard input"
        text = sys.stdin.read()
    elif given is not None:
        return given
    else:
        return default
    if not text.strip():
        raise ConfigurationError(f"the prompt from {source} is empty", option="prompt")
    return text


def load_script(path: str | None) -> Script | None:
    """The model server script at ``path``; a missing file, bad JSON or a block of an unknown
    type is a one-line :class:`ConfigurationError`."""
    if path is None:
        return None
    from pydantic import ValidationError

    from ..offline import Script

    try:
        return Script.from_file(path)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the script {path}: {exc.strerror or exc}", option="script"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the script {path} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            option="script",
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the script"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigurationError(
            f"the script {path} is not a model server script: {where}: {first['msg']}{more}",
            option="script",
        ) from None
    except ValueError as exc:  # not UTF-8, or a rule of the script's own
        raise ConfigurationError(f"the script {path}: {exc}", option="script") from None


def load_output_schema(path: str | None) -> dict[str, Any] | None:
    """The JSON Schema at ``path`` (``--output-schema``); a missing file, bad JSON or anything
    but a JSON object is a one-line :class:`ConfigurationError`."""
    if path is None:
        return None
    try:
        value: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the output schema {path}: {exc.strerror or exc}", option="output_schema"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"the output schema {path} is not UTF-8: {exc.reason}", option="output_schema"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the output schema {path} is not JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno})",
            option="output_schema",
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"the output schema {path} is not a JSON Schema object", option="output_schema"
        )
    return cast(dict[str, Any], value)


def parse_options(pairs: list[str]) -> dict[str, str]:
    """``--option KEY=VALUE`` pairs, checked as :class:`SessionOptions` checks them."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(
                f"--option {pair!r} is not KEY=VALUE (e.g. claude.permission_mode=plan)",
                option="option",
            )
        options[key.strip()] = value
    SessionOptions(options=options)  # raises ConfigurationError naming the known keys
    return options


def _plan(args: argparse.Namespace) -> _Plan:
    from ..offline._embedded import EMBEDDED_ENGINES

    known = engine_names()
    if args.engine not in known:
        raise ConfigurationError(
            f"unknown engine {args.engine!r} (known: {', '.join(known)})", option="engine"
        )
    if not args.live and args.engine not in EMBEDDED_ENGINES:
        raise ConfigurationError(
            f"engine {args.engine!r} is not supported yet on the embedded model server "
            f"(supported: {', '.join(EMBEDDED_ENGINES)}); use --live to drive your own "
            "installation",
            option="engine",
        )
    if args.cwd is not None and not Path(args.cwd).is_dir():
        raise ConfigurationError(f"--cwd {args.cwd}: no such directory", option="cwd")
    for option in ("atif", "dump_requests"):
        _check_output(getattr(args, option, None), option)
    check_proxy_arguments(args)
    if getattr(args, "allow_host", None) and not getattr(args, "sandbox", False):
        raise ConfigurationError("--allow-host needs --sandbox", option="allow_host")
    if args.live and args.script is not None:
        raise ConfigurationError(
            "--script is for the embedded model server; --live uses your own", option="script"
        )
    prompts = [read_prompt(args), *args.then]
    for prompt in prompts:
        check_turn_arguments(prompt)
    limits = TurnLimits(
        timeout=args.timeout,
        idle_timeout=args.idle_timeout,
        tool_timeout=args.tool_timeout,
        stall_after=args.stall_after,
        wind_down=_wind_down(args),
    )
    return _Plan(
        prompts=prompts,
        script=load_script(args.script),
        options=parse_options(args.option),
        output_schema=load_output_schema(getattr(args, "output_schema", None)),
        limits=limits,
    )


def _check_output(path: str | None, option: str) -> None:
    """A file the command writes after the turn (``--atif``, ``--dump-requests``) can be
    written, checked before anything starts: the turn's output is never lost to a bad path."""
    if path is None:
        return
    flag = "--" + option.replace("_", "-")
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        problem = "it is a directory"
    elif not parent.is_dir():
        problem = f"no such directory {parent}"
    elif target.exists() and not os.access(target, os.W_OK):
        problem = "the file is not writable"
    elif not target.exists() and not os.access(parent, os.W_OK | os.X_OK):
        problem = f"cannot create files in {parent}"
    else:
        return
    raise ConfigurationError(f"{flag} {path}: {problem}", option=option)


def _wind_down(args: argparse.Namespace) -> WindDown | None:
    """``--wind-down S`` (with ``--wind-down-text``), or ``None``."""
    seconds: float | None = getattr(args, "wind_down", None)
    text: str | None = getattr(args, "wind_down_text", None)
    if seconds is None:
        if text is not None:
            raise ConfigurationError(
                "--wind-down-text needs --wind-down S", option="wind_down_text"
            )
        return None
    return WindDown(seconds=seconds) if text is None else WindDown(seconds=seconds, text=text)


async def run(args: argparse.Namespace) -> int:
    plan = _plan(args)
    everything = anyio.CancelScope()
    interrupt = _Interrupt(scope=everything)
    status: list[int] = []
    failure: list[Exception] = []
    with everything:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_interrupts, interrupt)
            try:
                status.append(await _run(args, plan, interrupt))
            except Exception as exc:  # raised as itself after the watcher ends
                failure.append(exc)
            finally:
                tg.cancel_scope.cancel()
    if interrupt.count:
        print("agentrun: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    if failure:
        raise failure[0]
    return status[0] if status else EXIT_INTERRUPTED


async def _watch_interrupts(interrupt: _Interrupt) -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            interrupt.count += 1
            if interrupt.count == 1 and interrupt.turn is not None:
                interrupt.turn.cancel()  # the agent ends the turn; its summary is shown
            else:
                interrupt.scope.cancel()  # nothing running to cancel, or asked twice


async def _run(args: argparse.Namespace, plan: _Plan, interrupt: _Interrupt) -> int:
    if args.live and wants_proxy(args):
        return await _run_proxied(args, plan, interrupt)
    if args.live:
        with tempfile.TemporaryDirectory(prefix="agentrun-") as tmp:
            cwd = args.cwd or _workspace(tmp)
            engine = _engine(args.engine, binary=args.binary)
            session = SessionOptions(
                model=args.model,
                cwd=cwd,
                resume_id=args.resume,
                fork=_fork(args),
                options=plan.options,
                **_approval(args),
                **_journal_options(args),
            )
            return await _turns(engine, session, plan, args, interrupt)
    from ..offline import ModelServer
    from ..offline._homes import offline_home, remember_home

    # The agent's home is kept (per session), so a later run can resume this session; it is
    # held in use (no pruning removes it) while the session runs.
    with offline_home(args.engine, args.resume) as home:
        cwd = args.cwd or _workspace(str(home))

        def remember(resume_id: str | None) -> None:
            remember_home(args.engine, resume_id, home)

        async with ModelServer(plan.script) as server:
            status = EXIT_FAILED
            try:
                engine, session = _embedded(args, server.url, str(home), cwd, plan.options)
                status = await _turns(engine, session, plan, args, interrupt, on_close=remember)
            finally:
                written = _dump_requests(args, server)
            return status if written or status else EXIT_FAILED


async def _run_proxied(args: argparse.Namespace, plan: _Plan, interrupt: _Interrupt) -> int:
    """``--live --upstream URL`` / ``--proxy``: the agent, in a kept home of its own, reaches its
    model API only through the metering credential proxy, with the key the proxy minted."""
    from ..offline._homes import offline_home, remember_home
    from .proxied import Meter, open_proxy

    with offline_home(args.engine, args.resume) as home:
        cwd = args.cwd or _workspace(str(home))

        def remember(resume_id: str | None) -> None:
            remember_home(args.engine, resume_id, home)

        with tempfile.TemporaryDirectory(prefix="agentrun-proxy-") as sockets:
            # Sandboxed, the proxy listens on a Unix socket bound into the sandbox, where a
            # relay makes it 127.0.0.1:<port>: the agent has no other way out.
            socket_path = Path(sockets) / "proxy.sock" if sandbox_option(args) else None
            async with open_proxy(args, socket_path=socket_path) as proxy:
                meter = Meter(proxy, as_json=args.json)
                client = proxy.client(args.engine)
                url, routed = proxy.route(sandbox_option(args))
                sandbox = routed if isinstance(routed, Sandbox) else None
                engine, session = _embedded(
                    args, url, str(home), cwd, plan.options, sandbox=sandbox,
                    api_key=client.key, meter=client,
                )  # fmt: skip
                return await _turns(
                    engine, session, plan, args, interrupt, on_close=remember, metered=meter.turn
                )


def _journal_options(args: argparse.Namespace) -> dict[str, Any]:
    """``journal=`` for the session options: ``--journal`` (the default store), or the store
    (and id) ``agentrun sessions`` gave."""
    journal = getattr(args, "journal_store", None)
    if journal is None and getattr(args, "journal", False):
        journal = True
    return {} if journal is None else {"journal": journal}


def _fork(args: argparse.Namespace) -> bool:
    """``agentrun sessions fork``: the agent copies the resumed session into a new one."""
    return bool(getattr(args, "fork", False)) and args.resume is not None


def _dump_requests(args: argparse.Namespace, server: ModelServer) -> bool:
    """``--dump-requests FILE``: every request the model server received, as JSON lines.
    False (said on standard error) when the file could not be written after all."""
    path: str | None = getattr(args, "dump_requests", None)
    if path is None:
        return True
    try:
        with Path(path).open("a", encoding="utf-8") as out:
            for request in server.requests:
                record = {"seq": request.seq, "path": request.path, "json": request.json}
                out.write(json.dumps(record, default=str) + "\n")
    except OSError as exc:
        _cannot_write("the requests", path, exc)
        return False
    return True


def _cannot_write(what: str, path: str, exc: OSError) -> None:
    print(f"agentrun: cannot write {what} to {path}: {exc.strerror or exc}", file=sys.stderr)


def _workspace(tmp: str) -> str:
    path = Path(tmp) / "workspace"
    path.mkdir(exist_ok=True)
    return str(path)


def _engine(name: str, **options: Any) -> Engine:
    options = {k: v for k, v in options.items() if v is not None}
    engine = get_engine(name, **options)
    engine.check()
    return engine


def _embedded(
    args: argparse.Namespace,
    url: str,
    tmp: str,
    cwd: str,
    options: dict[str, str],
    *,
    sandbox: Sandbox | None = None,
    api_key: str | None = None,
    meter: UsageMeter | None = None,
) -> tuple[Engine, SessionOptions]:
    from ..offline import embedded_engine

    return embedded_engine(
        args.engine,
        url,
        Path(tmp) / "agent",
        cwd=cwd,
        model=args.model,
        binary=args.binary,
        resume_id=args.resume,
        fork=_fork(args),
        sandbox=sandbox or sandbox_option(args),
        api_key=api_key,
        **({"options": options} if options else {}),
        **({"meter": meter} if meter is not None else {}),
        **_approval(args),
        **_journal_options(args),
    )


def sandbox_option(args: argparse.Namespace, **fields: Any) -> Sandbox | None:
    """``--sandbox`` (and its ``--allow-host``s) as the session's sandbox."""
    if not getattr(args, "sandbox", False):
        return None
    return Sandbox(allow_hosts=tuple(getattr(args, "allow_host", ())), **fields)


def _approval(args: argparse.Namespace) -> dict[str, Any]:
    """``--approve-all``: every tool call approved (``hitl=False``); else the agent's own
    policy, which asks."""
    return {"hitl": False} if getattr(args, "approve_all", False) else {}


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


async def _turns(
    engine: Engine,
    session: SessionOptions,
    plan: _Plan,
    args: argparse.Namespace,
    interrupt: _Interrupt,
    *,
    on_close: Callable[[str | None], None] | None = None,
    metered: Callable[[TurnSummary], Awaitable[None]] | None = None,
) -> int:
    renderer = None if args.json else Renderer()
    if _interactive():
        # Some agents take seconds to start (ACP agents 3-6 s): say what is happening.
        print(f"starting {clean(engine.name)}…", file=sys.stderr, flush=True)
    recorded: list[tuple[str, list[Message]]] = []
    status = EXIT_FAILED
    written = True
    try:
        async with engine.start(session) as process:
            if on_close is not None:
                on_close(process.resume_id)  # the resume id given, indexed before anything fails
            journal_id = process.journal_id
            if journal_id is not None and _interactive():
                print(f"session journal: {journal_id}", file=sys.stderr, flush=True)
            status = await _session_turns(
                process, plan, args, interrupt, renderer, recorded, on_close, metered
            )
    finally:
        if getattr(args, "atif", None) and recorded:
            written = _write_atif(args.atif, recorded)
    return status if written or status else EXIT_FAILED


def _write_atif(path: str, recorded: list[tuple[str, list[Message]]]) -> bool:
    """The trajectory written to ``path``; False (said on standard error) when it could not be
    after all (the path was checked before the turn started)."""
    from .._store.trajectory import to_atif

    trajectory = to_atif([m for _, m in recorded], prompts=[p for p, _ in recorded])
    try:
        Path(path).write_text(trajectory.model_dump_json(exclude_none=True, indent=2) + "\n")
    except OSError as exc:
        _cannot_write("the trajectory", path, exc)
        return False
    return True


async def _session_turns(
    process: Session,
    plan: _Plan,
    args: argparse.Namespace,
    interrupt: _Interrupt,
    renderer: Renderer | None,
    recorded: list[tuple[str, list[Message]]],
    on_close: Callable[[str | None], None] | None,
    metered: Callable[[TurnSummary], Awaitable[None]] | None = None,
) -> int:
    failed = False
    for prompt in plan.prompts:
        if renderer is not None:
            renderer.out.write(renderer.style("bold", f"▶ {clean(prompt)}") + "\n")
        last: list[Message] = []
        seen: list[Message] = []
        recorded.append((prompt, seen))

        def show(message: Message, last: list[Message] = last, seen: list[Message] = seen) -> None:
            seen.append(message)
            last[:] = [message]
            if renderer is None:
                print(json_line(message), flush=True)
            else:
                renderer.message(message)

        turn = process.turn(prompt, limits=plan.limits, output=plan.output_schema)
        try:
            async with turn:
                interrupt.turn = turn
                async for message in turn:
                    show(message)
        except AgentrunError as exc:
            if metered is not None:
                await metered(exc.summary or turn.summary)
            if exc.summary is not None and renderer is not None:
                renderer.summary(exc.summary)
            raise
        finally:
            interrupt.turn = None
            if on_close is not None:
                on_close(turn.summary.resume_id or process.resume_id)
        summary = turn.summary
        if metered is not None:
            await metered(summary)
        if interrupt.count:
            ended = last[0] if last else None
            if renderer is None and not (
                ended is not None
                and ended.type is MessageType.RESULT
                and ended.stop_reason == "cancelled"
            ):
                # The stream of a cancelled turn ends with a result that says so.
                number = summary.turn if summary.turn is not None else 0
                print(json_line(_cancelled_result(number)), flush=True)
            if renderer is not None:
                summary.stop_reason = summary.stop_reason or "cancelled"
                summary.ok = False
                renderer.summary(summary)
            return EXIT_INTERRUPTED
        if renderer is not None:
            renderer.summary(summary)
        if plan.output_schema is not None:
            _show_output(summary.turn, summary.output, as_json=renderer is None)
        failed = failed or not summary.ok
    return 1 if failed else 0


def _show_output(turn: int | None, output: Any, *, as_json: bool) -> None:
    """The validated answer of a turn run with ``--output-schema``: with ``--json`` one line
    ``{"type": "output", "turn": N, "output": ...}`` after the turn's messages, else the JSON
    itself."""
    if as_json:
        print(json.dumps({"type": "output", "turn": turn, "output": output}), flush=True)
    else:
        print(json.dumps(output, indent=2), flush=True)


def _cancelled_result(turn: int) -> Message:
    return Message(type=MessageType.RESULT, turn=turn, subtype="cancelled", stop_reason="cancelled")
