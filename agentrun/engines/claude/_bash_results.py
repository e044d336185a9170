"""What a ``Bash`` tool result says of its command's exit code."""

from __future__ import annotations

import re
from typing import Any

from ..._vocabulary.jsonvalues import as_dict as _obj
from ..._vocabulary.jsonvalues import as_list as _list

__all__ = ["bash_exit_code"]

#: A decoded JSON object.
Json = dict[str, Any]


#: The first line of a failed ``Bash`` result: Claude Code's only word on a non-zero exit code.
_BASH_EXIT = re.compile(r"Exit code (\d{1,9})(?:\n|$)")
#: Keys of a ``Bash`` result's ``tool_use_result`` that leave its exit code unknown: a command
#: cut short, one left running in the background, a non-zero code Claude Code took as success
#: (``returnCodeInterpretation``, e.g. grep's "No matches found").
_BASH_CODE_UNKNOWN = ("interrupted", "backgroundTaskId", "returnCodeInterpretation")


def bash_exit_code(block: Json, result: object) -> int | None:
    """A ``Bash`` tool result's exit code, or ``None`` when Claude Code does not tell it.

    A success carries the structured ``tool_use_result`` (``stdout``, ``stderr``, ...): its code
    is 0 unless one of ``_BASH_CODE_UNKNOWN`` says otherwise. A failure is ``is_error`` with no
    structured field; its text starts with ``Exit code N`` (a refusal or a timeout names none).
    """
    if block.get("is_error") is True:
        content = block.get("content")
        if not isinstance(content, str):
            first = _obj(next(iter(_list(content) or []), None)) or {}
            content = first.get("text")
        found = _BASH_EXIT.match(content) if isinstance(content, str) else None
        return int(found.group(1)) if found else None
    fields = _obj(result)
    if fields is None or "stdout" not in fields:
        return None
    if any(fields.get(key) for key in _BASH_CODE_UNKNOWN):
        return None
    return 0
