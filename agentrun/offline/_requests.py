"""What the model server makes of a request before any API dialect answers it: which API it
addresses (:data:`ApiKind`), whether it is a *side request* (:class:`SideRequest`: a session
title, a prompt suggestion), and the record kept of it (:class:`RecordedRequest`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from ._script import Script

__all__ = [
    "DEFAULT_SIDE_REQUESTS",
    "ApiKind",
    "RecordedRequest",
    "SideRequest",
    "classify",
    "offered_tools",
]

ApiKind = Literal["anthropic", "count_tokens", "responses", "chat", "gemini", "other"]

TITLE_PROMPT_PREFIX = "You are a title generator"


def classify(method: str, path: str) -> ApiKind:
    """The API a request addresses, from its method and path (without the query)."""
    if method != "POST":
        return "other"
    p = path.rstrip("/")
    if p.endswith("/messages/count_tokens"):
        return "count_tokens"
    if p.endswith("/messages"):
        return "anthropic"
    if p.endswith("/responses"):
        return "responses"
    if p.endswith("/chat/completions"):
        return "chat"
    if "/models/" in p and p.endswith((":streamGenerateContent", ":generateContent")):
        return "gemini"
    if "/models/" in p and p.endswith(":countTokens"):
        return "count_tokens"
    return "other"


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the server received."""

    #: Order of arrival, from 0.
    seq: int
    method: str
    #: The path without the query string.
    path: str
    #: The raw query string (``"beta=true"``) or ``""``.
    query: str
    #: Header names in lower case (a repeated header keeps its last value).
    headers: Mapping[str, str]
    #: The (decoded) request body.
    body: bytes
    #: The body parsed as JSON, or ``None``.
    json: Any
    api: ApiKind
    #: True for OpenCode's title-generator side request (no turn consumed).
    title_request: bool = False
    #: The name of the :class:`SideRequest` that answered it (no turn consumed), or ``None``.
    side_request: str | None = None
    #: Index into ``Script.turns`` of the turn that answered, or ``None``.
    turn_index: int | None = None
    #: True when the script had no turns left and the fallback text was sent.
    exhausted: bool = False
    #: The HTTP status answered.
    status: int = 200

    @property
    def model(self) -> str | None:
        body = self.json
        if isinstance(body, dict):
            value = cast(dict[str, Any], body).get("model")
            return value if isinstance(value, str) else None
        return None

    @property
    def is_model_call(self) -> bool:
        """A request that consumed (or tried to consume) a scripted turn (Gemini's included)."""
        return (
            self.api in ("anthropic", "responses", "chat", "gemini") and self.side_request is None
        )


def _text_of(content: Any) -> str:
    """The text of a chat message ``content`` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in cast(list[Any], content):
            if isinstance(part, dict):
                text = cast(dict[str, Any], part).get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return ""


def _is_title_request(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    payload = cast(dict[str, Any], body)
    messages = payload.get("messages")
    if isinstance(messages, list):
        for msg in cast(list[Any], messages):
            if isinstance(msg, dict):
                m = cast(dict[str, Any], msg)
                if m.get("role") == "system" and _text_of(m.get("content")).lstrip().startswith(
                    TITLE_PROMPT_PREFIX
                ):
                    return True
    system = payload.get("system")
    return _text_of(system).lstrip().startswith(TITLE_PROMPT_PREFIX)


def _last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last message or input item of a request (any of the three APIs)."""
    items = body.get("messages")
    if not isinstance(items, list):
        items = body.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, list) or not items:
        return ""
    last = cast(list[Any], items)[-1]
    if not isinstance(last, dict):
        return ""
    return _text_of(cast(dict[str, Any], last).get("content"))


def offered_tools(body: Mapping[str, Any]) -> frozenset[str]:
    """The names of the tools a request offers (Chat Completions, Anthropic and Responses)."""
    tools = body.get("tools")
    names: set[str] = set()
    if isinstance(tools, list):
        for tool in cast(list[Any], tools):
            if not isinstance(tool, dict):
                continue
            entry = cast(dict[str, Any], tool)
            function = entry.get("function")
            name = (
                cast(dict[str, Any], function).get("name")
                if isinstance(function, dict)
                else entry.get("name")
            )
            if isinstance(name, str):
                names.add(name)
    return frozenset(names)


@dataclass(frozen=True)
class SideRequest:
    """A model request that an agent makes beside the conversation (a session title, a prompt
    suggestion): ``match(api, body)`` recognises it and it is answered with ``answer`` (a
    function of the script, so a script can choose the title) without consuming a turn."""

    name: str
    match: Callable[[ApiKind, Mapping[str, Any]], bool]
    answer: Callable[[Script], str] = lambda script: script.title


def _opencode_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    return api == "chat" and _is_title_request(body)


def _claude_session_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    # Claude Code (as the Agent SDK runs it) names the session after a turn.
    text = _last_user_text(body)
    return api == "anthropic" and text.startswith("<session>") and "Write the title" in text


def _prompt_suggestion(api: ApiKind, body: Mapping[str, Any]) -> bool:
    # Claude Code (under the Agent SDK) and Qwen Code ask after a turn what the user might
    # type next.
    return "Reply with ONLY the suggestion" in _last_user_text(body)


def _codex_acp_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    return api == "responses" and "focus only on creating a title" in _last_user_text(body)


#: The side requests of the pinned agents: OpenCode's title generator, the session title
#: Claude Code asks for under claude-agent-acp, the prompt suggestion (answered with nothing)
#: of Claude Code and Qwen Code, and codex-acp's title (JSON ``{"title"}``).
DEFAULT_SIDE_REQUESTS: tuple[SideRequest, ...] = (
    SideRequest("opencode-title", _opencode_title),
    SideRequest("claude-session-title", _claude_session_title),
    SideRequest("prompt-suggestion", _prompt_suggestion, lambda script: ""),
    SideRequest(
        "codex-acp-title", _codex_acp_title, lambda script: json.dumps({"title": script.title})
    ),
)
