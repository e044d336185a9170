"""The users' catalog files (``$AGENTRUN_PRICE_CATALOG``, ``$AGENTRUN_MODEL_CATALOG``): whatever
is wrong with one is a ConfigurationError naming the variable and the file; prices are finite and
non-negative however a catalog is built."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrun import (
    ConfigurationError,
    ModelPrice,
    PriceCatalog,
    Usage,
    default_catalog,
    default_prices,
)
from agentrun._vocabulary.prices import account_usage

#: (name, file content or None for "the file is missing" / "dir" for a directory) -> what the
#: message must also say.
BAD_PRICE_FILES = [
    ("not-json", "{models: nope", "JSON"),
    ("a-list", "[1, 2]", "object"),
    ("models-a-list", '{"models": [1]}', "models"),
    ("entry-a-number", '{"models": {"m": 5}}', "'m'"),
    ("aliases-a-string", '{"models": {"m": {"input": 1, "output": 2, "aliases": "m2"}}}',
     "aliases"),
    ("nan-price", '{"models": {"m": {"input": NaN, "output": 2}}}', "'m'"),
    ("infinite-price", '{"models": {"m": {"input": 1, "output": Infinity}}}', "'m'"),
    ("negative-cache", '{"models": {"m": {"input": 1, "output": 2, "cached_input": -1}}}',
     "cached_input"),
    ("text-price", '{"models": {"m": {"input": "1", "output": 2}}}', "'m'"),
    ("missing", None, "no such file"),
    ("directory", "dir", "directory"),
    ("not-utf8", b"\xff\xfe{}", "UTF-8"),
    # A misspelt or missing 'models' added no price without a word before.
    ("misspelt-models", '{"model": {"m": {"input": 1, "output": 2}}}', "'model' (did you mean 'models'?)"),
    ("no-models", '{"_about": "mine"}', "no 'models'"),
    ("empty", "{}", "no 'models'"),
    ("a-key-beside-models", '{"models": {}, "aliases": {"m": "n"}}', "'aliases'"),
]  # fmt: skip

BAD_MODEL_FILES = [
    ("not-json", '{"models": ', "JSON"),
    ("a-string", '"models"', "object"),
    ("models-a-list", '{"models": ["gpt"]}', "models"),
    ("entry-a-string", '{"models": {"m": "big"}}', "'m'"),
    ("families-an-object", '{"families": {"prefix": "m"}}', "families"),
    ("family-without-prefix", '{"families": [{"context_window": 5}]}', "prefix"),
    ("window-a-string", '{"models": {"m": {"context_window": "200k"}}}', "context_window"),
    ("window-negative", '{"models": {"m": {"context_window": -1}}}', "context_window"),
    ("missing", None, "no such file"),
    ("directory", "dir", "directory"),
    # A misspelt top-level key added no entry without a word before.
    ("misspelt-models", '{"model": {"m": {"context_window": 5}}}', "'model' (did you mean 'models'?)"),
    ("misspelt-families", '{"familes": [{"prefix": "m"}]}', "'familes' (did you mean 'families'?)"),
    ("no-entries", '{"_about": "mine"}', "no 'models' or 'families'"),
    ("empty", "{}", "no 'models' or 'families'"),
]  # fmt: skip


def _write(tmp_path: Path, content: str | bytes | None) -> Path:
    path = tmp_path / "catalog.json"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return path


@pytest.mark.parametrize(("variable", "load", "cases"), [
    ("AGENTRUN_PRICE_CATALOG", default_prices, BAD_PRICE_FILES),
    ("AGENTRUN_MODEL_CATALOG", default_catalog, BAD_MODEL_FILES),
], ids=["prices", "models"])  # fmt: skip
def test_a_bad_users_file_names_the_variable_and_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    load: Callable[[], Any],
    cases: list[tuple[str, str | bytes | None, str]],
) -> None:
    for name, content, said in cases:
        folder = tmp_path / name
        folder.mkdir()
        path = _write(folder, content)
        monkeypatch.setenv(variable, str(path))
        with pytest.raises(ConfigurationError) as caught:
            load()
        message = str(caught.value)
        assert variable in message and str(path) in message, (name, message)
        assert said.lower() in message.lower(), (name, message)
        assert caught.value.option == variable
    # A good file with explicit nulls still merges.
    good = tmp_path / "good.json"
    good.write_text('{"models": {"m": {"input": 1, "output": 2, "cached_input": null,'
                    ' "context_window": 1000, "max_output_tokens": null}}}')  # fmt: skip
    monkeypatch.setenv(variable, str(good))
    assert load().lookup("m") is not None


def test_a_price_file_with_comments_and_its_models_merges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, '{"_about": "my prices", "models": {"m": {"input": 1, "output": 2}}}')
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(path))
    found = default_prices().lookup("m")
    assert found is not None and (found.input, found.output) == (1.0, 2.0)


def test_a_bad_price_file_stops_the_accounting_with_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, '{"models": {"m": {"input": NaN, "output": NaN}}}')
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(path))
    with pytest.raises(ConfigurationError, match="AGENTRUN_PRICE_CATALOG"):
        account_usage(Usage(input_tokens=10, output_tokens=10), model="m")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.5, "3", True])
def test_prices_built_in_code_are_finite_and_not_negative(value: object) -> None:
    for field in ("input", "output", "cached_input", "cache_write"):
        entry: dict[str, object] = {"input": 1.0, "output": 2.0, field: value}
        with pytest.raises(ConfigurationError, match=field):
            PriceCatalog({"models": {"m": entry}})
    if isinstance(value, float):
        with pytest.raises(ConfigurationError, match="input"):
            ModelPrice(id="m", input=value, output=1.0)
