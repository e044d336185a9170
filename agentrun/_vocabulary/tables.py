"""Reading the library's read-only tables: the ones shipped in the package (``catalog.json``,
``prices.json``) and the user's additions to them, JSON files named by an environment variable
(``$AGENTRUN_MODEL_CATALOG``, ``$AGENTRUN_PRICE_CATALOG``).

The one module of the vocabulary that opens files (``scripts/architecture.py`` holds the others
to that): the tables are values the library only reads, loaded once and again only when the
variable changes (:class:`~.context.SharedDefault`), so the catalog and the prices built from them
stay in the vocabulary with the usage they price.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

from .errors import ConfigurationError

__all__ = ["extend_from", "packaged_json", "user_extension", "user_file_error"]


@lru_cache(maxsize=4)
def packaged_json(name: str) -> dict[str, Any]:
    """A JSON table shipped in the package (``catalog.json``, ``prices.json``), read once."""
    from importlib import resources

    text = (
        resources.files(__package__ or "agentrun._vocabulary")
        .joinpath(name)
        .read_text(encoding="utf-8")
    )
    return cast("dict[str, Any]", json.loads(text))


def user_extension(env: str) -> tuple[str, Any] | None:
    """The file named by ``$env`` and the JSON in it, which extends a built-in table; a file that
    cannot be read or is not JSON is a :class:`ConfigurationError` naming the variable and the
    file."""
    path = os.environ.get(env)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return path, json.load(fh)
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "it is a directory, not a file"
    except OSError as exc:
        problem = f"it cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError:
        problem = "it is not UTF-8 text"
    except json.JSONDecodeError as exc:
        problem = f"it is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    raise user_file_error(env, path, problem)


def user_file_error(env: str, path: str, problem: str) -> ConfigurationError:
    """The error for the file named by ``$env`` (``problem``: what is wrong with it)."""
    return ConfigurationError(f"${env} names {path!r}: {problem}", option=env)


def extend_from(env: str, extend: Callable[[Any], None]) -> None:
    """Merge the file named by ``$env`` (if any) through ``extend``; a table of the wrong shape
    is a :class:`ConfigurationError` naming the variable and the file."""
    extra = user_extension(env)
    if extra is None:
        return
    path, data = extra
    try:
        extend(data)
    except ConfigurationError as exc:
        raise user_file_error(env, path, exc.message) from None
