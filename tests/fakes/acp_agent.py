"""A scripted ACP agent for the engine's unit tests (run with ``sys.executable``).

Reads JSON-RPC lines on stdin, answers on stdout. What a prompt does depends on its first word:

``unknown``     an update kind no ACP version has, then text
``permission``  a tool call and a ``session/request_permission``; the text reports the outcome
``crash``       one text chunk, a line on stderr, then exit code 3
``read PATH`` / ``write PATH``   ``fs/read_text_file`` / ``fs/write_text_file``; the text
                reports the answer
``slow``        text chunks every 50 ms until ``session/cancel``, then ``stopReason: cancelled``
``stubborn``    like ``slow``, but keeps streaming for 1 s after ``session/cancel`` before it
                answers ``cancelled``
``deaf``        text chunks every 50 ms, ``session/cancel`` ignored, never answers
``error``       a JSON-RPC error -32603 with ``data.errorName``
``plan``        a ``plan`` update, a ``current_mode_update`` and a thought
``late``        answers at once, then sends a text chunk after the answer
``huge answer`` answers the prompt with a line of 200,000 bytes; a test sets a lower line limit
``huge ask``    asks for permission in a line of 200,000 bytes; the text reports the answer
``ask``         an ``elicitation/create`` form (a choice, a number, a multi-select, a boolean);
                the text reports whether the client advertised forms and what it answered
anything else   echoes the prompt, one ``usage_update``, ``end_turn`` with usage

Options (argv): ``--hang-new`` never answers ``session/new``; ``--no-modes`` advertises no modes
or models; ``--stay`` ignores end of input (must be killed); ``--close`` advertises and honours
``session/close`` (exits at once); ``--slow-start`` spends 4 s starting up before it reads its input
(as a real agent loading its configuration does: end of input goes unseen meanwhile).
``--paged-list`` advertises ``session/list``, which names ``fake-1`` … ``fake-5`` two a page
(``nextCursor``), and refuses ``session/load`` / ``session/resume`` of any other id, and of
``fake-5``, with a bare internal error (as ``opencode acp`` does).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import Any

ARGS = set(sys.argv[1:])
_write_lock = threading.Lock()
_answers: dict[Any, queue.Queue[dict[str, Any]]] = {}
_next_id = [0]
_cancelled = threading.Event()
_cost = [0.0]
_sessions: set[str] = set()
_client_capabilities: dict[str, Any] = {}


def send(obj: dict[str, Any]) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **obj}) + "\n")
        sys.stdout.flush()


def update(session_id: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session_id, "update": body}})


def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
    request_id = _next_id[0]
    _next_id[0] += 1
    box: queue.Queue[dict[str, Any]] = queue.Queue()
    _answers[request_id] = box
    send({"id": request_id, "method": method, "params": params})
    return box.get(timeout=30)


def text(session_id: str, words: str, message_id: str = "m1") -> None:
    update(
        session_id,
        {
            "sessionUpdate": "agent_message_chunk",
            "messageId": message_id,
            "content": {"type": "text", "text": words},
        },
    )


def session_state() -> dict[str, Any]:
    if "--no-modes" in ARGS:
        return {}
    return {
        "modes": {
            "currentModeId": "default",
            "availableModes": [
                {"id": "default", "name": "Default"},
                {"id": "plan", "name": "Plan"},
            ],
        },
        "models": {
            "currentModelId": "small",
            "availableModels": [
                {"modelId": "small", "name": "Small"},
                {"modelId": "large", "name": "Large"},
            ],
        },
    }


def prompt(request_id: Any, params: dict[str, Any]) -> None:
    sid = params["sessionId"]
    if sid not in _sessions:
        send(
            {
                "id": request_id,
                "error": {
                    "code": -32602,
                    "message": f"Invalid params: session not found: {sid}",
                    "data": {"sessionId": sid},
                },
            }
        )
        return
    words = params["prompt"][0]["text"]
    head, _, rest = words.partition(" ")
    stop = "end_turn"
    if head == "unknown":
        update(sid, {"sessionUpdate": "future_thing", "answer": 42})
        text(sid, "after the unknown update")
    elif head == "permission":
        update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_1",
                "title": "bash",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": "touch x"},
            },
        )
        answer = ask(
            "session/request_permission",
            {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_1", "title": "touch x", "kind": "execute"},
                "options": [
                    {"optionId": "yes", "kind": "allow_once", "name": "Allow"},
                    {"optionId": "always", "kind": "allow_always", "name": "Always"},
                    {"optionId": "no", "kind": "reject_once", "name": "Reject"},
                ],
            },
        )
        outcome = answer.get("result", {}).get("outcome", {})
        chosen = outcome.get("optionId", outcome.get("outcome"))
        ok = chosen in ("yes", "always")
        update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_1",
                "status": "completed" if ok else "failed",
                "rawOutput": {"output": "done"} if ok else {"error": "rejected"},
            },
        )
        text(sid, f"outcome={chosen}", "m2")
    elif head == "ask":
        form = {
            "type": "object",
            "properties": {
                "color": {"type": "string", "title": "Color", "description": "Which color?",
                          "oneOf": [{"const": "red", "title": "Red"},
                                    {"const": "blue", "title": "Blue"}]},
                "count": {"type": "integer", "title": "How many?"},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
                "confirm": {"type": "boolean", "title": "Go ahead?"},
            },
            "required": ["color"],
        }  # fmt: skip
        answer = ask(
            "elicitation/create",
            {"sessionId": sid, "message": "A few details, please", "requestedSchema": form},
        )
        forms = "elicitation" in _client_capabilities
        outcome = answer.get("result", answer.get("error"))
        text(sid, f"forms={forms} " + json.dumps(outcome, sort_keys=True))
    elif head == "crash":
        text(sid, "partial answer")
        sys.stderr.write("fatal: the fake agent crashed on purpose\n")
        sys.stderr.flush()
        time.sleep(0.05)
        sys.stdout.flush()
        import os

        os._exit(3)
    elif head in ("read", "write"):
        method = "fs/read_text_file" if head == "read" else "fs/write_text_file"
        body: dict[str, Any] = {"sessionId": sid, "path": rest}
        if head == "write":
            body["content"] = "written by the fake agent\n"
        answer = ask(method, body)
        if "error" in answer:
            text(sid, f"error {answer['error']['code']}: {answer['error']['message']}")
        else:
            text(sid, f"ok {json.dumps(answer.get('result'))}")
    elif head == "slow":
        _cancelled.clear()
        n = 0
        while not _cancelled.wait(0.05):
            text(sid, f"{n} ", "slow")
            n += 1
            if n > 400:
                break
        update(sid, {"sessionUpdate": "usage_update", "used": 0, "size": 1000})
        stop = "cancelled"
    elif head == "stubborn":
        _cancelled.clear()
        n = 0
        while not _cancelled.wait(0.05):
            text(sid, f"{n} ", "stubborn")
            n += 1
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            text(sid, f"{n} ", "stubborn")
            n += 1
            time.sleep(0.05)
        stop = "cancelled"
    elif head == "deaf":
        while True:
            text(sid, "still here ", "deaf")
            time.sleep(0.05)
    elif head == "late":
        # The answer first, then an update nobody asked for any more.
        send({"id": request_id, "result": {"stopReason": "end_turn"}})
        time.sleep(0.1)
        text(sid, "stale words", "stale")
        return
    elif head == "huge" and rest == "answer":
        padding = {"_meta": {"padding": "x" * 200_000}}
        send({"id": request_id, "result": {"stopReason": "end_turn", **padding}})
        return
    elif head == "huge" and rest == "ask":
        call = {"toolCallId": "call_1", "title": "big", "rawInput": {"text": "x" * 200_000}}
        option = {"optionId": "yes", "kind": "allow_once", "name": "Allow"}
        answer = ask(
            "session/request_permission",
            {"sessionId": sid, "toolCall": call, "options": [option]},
        )
        text(sid, "answered " + json.dumps(answer.get("error", answer.get("result"))))
    elif head == "error":
        send(
            {
                "id": request_id,
                "error": {
                    "code": -32603,
                    "message": "Internal error: upstream said no",
                    "data": {"errorName": "APIError"},
                },
            }
        )
        return
    elif head == "plan":
        update(
            sid,
            {
                "sessionUpdate": "plan",
                "entries": [{"content": "step one", "priority": "high", "status": "pending"}],
            },
        )
        update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
        update(
            sid,
            {
                "sessionUpdate": "agent_thought_chunk",
                "messageId": "t1",
                "content": {"type": "text", "text": "thinking it over"},
            },
        )
        text(sid, "planned")
    else:
        text(sid, f"echo: {words}")
    _cost[0] += 0.25
    update(
        sid,
        {
            "sessionUpdate": "usage_update",
            "used": 1000 + len(words),
            "size": 100000,
            "cost": {"amount": _cost[0], "currency": "USD"},
        },
    )
    send(
        {
            "id": request_id,
            "result": {
                "stopReason": stop,
                "usage": {
                    "inputTokens": 10,
                    "outputTokens": 5,
                    "thoughtTokens": 2,
                    "cachedReadTokens": 990,
                    "totalTokens": 1007,
                },
            },
        }
    )


def handle(msg: dict[str, Any]) -> None:
    method = msg.get("method")
    if method is None:
        box = _answers.pop(msg.get("id"), None)
        if box is not None:
            box.put(msg)
        return
    params = msg.get("params") or {}
    request_id = msg.get("id")
    if method == "initialize":
        _client_capabilities.update(params.get("clientCapabilities") or {})
        send(
            {
                "id": request_id,
                "result": {
                    "protocolVersion": 1,
                    "agentCapabilities": {
                        "loadSession": True,
                        "sessionCapabilities": {
                            "resume": {},
                            "fork": {},
                            **({"list": {}} if "--paged-list" in ARGS else {}),
                            **({"close": {}} if "--close" in ARGS else {}),
                        },
                    },
                    "agentInfo": {"name": "FakeAgent", "version": "0.0.1"},
                    "authMethods": [],
                },
            }
        )
    elif method == "session/new":
        if "--hang-new" in ARGS:
            return
        sid = f"fake-{len(_sessions) + 1}"
        _sessions.add(sid)
        send({"id": request_id, "result": {"sessionId": sid, **session_state()}})
    elif method == "session/list" and "--paged-list" in ARGS:
        listed = [f"fake-{n}" for n in range(1, 6)]
        start = int(params.get("cursor") or 0)
        page = [
            {"sessionId": sid, "cwd": params.get("cwd") or "/"} for sid in listed[start : start + 2]
        ]
        following = {"nextCursor": str(start + 2)} if start + 2 < len(listed) else {}
        send({"id": request_id, "result": {"sessions": page, **following}})
    elif method in ("session/load", "session/resume"):
        sid = params["sessionId"]
        if "--paged-list" in ARGS and (sid == "fake-5" or not sid.startswith("fake-")):
            error = {"code": -32603, "message": "Internal error: service failure"}
            send({"id": request_id, "error": error})
            return
        if not sid.startswith("fake-"):
            send(
                {
                    "id": request_id,
                    "error": {
                        "code": -32602,
                        "message": f"Invalid params: session not found: {sid}",
                    },
                }
            )
            return
        _sessions.add(sid)
        if method == "session/load":
            update(
                sid,
                {
                    "sessionUpdate": "user_message_chunk",
                    "messageId": "u0",
                    "content": {"type": "text", "text": "earlier question"},
                },
            )
            text(sid, "earlier answer", "a0")
            _cost[0] = 1.0
            update(
                sid,
                {
                    "sessionUpdate": "usage_update",
                    "used": 500,
                    "size": 100000,
                    "cost": {"amount": 1.0, "currency": "USD"},
                },
            )
        send({"id": request_id, "result": session_state()})
    elif method == "session/fork":
        sid = f"fake-{len(_sessions) + 1}"
        _sessions.add(sid)
        text(sid, "forked history", "a0")
        send({"id": request_id, "result": {"sessionId": sid, **session_state()}})
    elif method in ("session/set_mode", "session/set_model"):
        send({"id": request_id, "result": {}})
    elif method == "session/prompt":
        threading.Thread(target=prompt, args=(request_id, params), daemon=True).start()
    elif method == "session/cancel":
        _cancelled.set()
    elif method == "session/close" and "--close" in ARGS:
        send({"id": request_id, "result": {}})
        import os

        os._exit(0)
    elif request_id is not None:
        send(
            {"id": request_id, "error": {"code": -32601, "message": f"Method not found: {method}"}}
        )


def main() -> None:
    if "--slow-start" in ARGS:
        time.sleep(4.0)
    for line in sys.stdin:
        line = line.strip()
        if line:
            handle(json.loads(line))
    if "--stay" in ARGS:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
