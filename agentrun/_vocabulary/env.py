"""Environments for agent programs: validated so that a bad entry is a clear error naming the
variable (never its value), and merged over the caller's own environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import ConfigurationError

__all__ = ["merge_env", "validate_env"]


def _check_env_entry(key: object, value: object) -> None:
    # Messages name the variable but never show its value: values are often secrets.
    if not isinstance(key, str):
        raise ConfigurationError(
            f"environment variable names must be strings, got {type(key).__name__}",
            option="env",
        )
    if not key:
        raise ConfigurationError("environment variable name is empty", option="env")
    if "=" in key:
        raise ConfigurationError(f"environment variable name {key!r} contains '='", option="env")
    if "\0" in key:
        raise ConfigurationError(
            f"environment variable name {key!r} contains a NUL character", option="env"
        )
    if not isinstance(value, str):
        raise ConfigurationError(
            f"environment variable {key!r} must be a string, got {type(value).__name__}",
            option="env",
        )
    if "\0" in value:
        raise ConfigurationError(
            f"value of environment variable {key!r} contains a NUL character", option="env"
        )


def validate_env(env: Mapping[str, str]) -> dict[str, str]:
    """Check every entry of ``env`` (see :func:`merge_env`) and return a plain copy."""
    for key, value in env.items():
        _check_env_entry(key, value)
    return dict(env)


def merge_env(
    extra: Mapping[str, str] | None,
    *,
    inherit: bool = True,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Build a child environment: ``base`` (default ``os.environ``) updated with ``extra``.

    With ``inherit=False`` only ``extra`` is used.  Names must be non-empty and free of
    ``=`` and NUL, values free of NUL; a bad entry raises
    :class:`~agentrun.ConfigurationError` (``option="env"``) naming the variable -- never
    its value.
    """
    merged: dict[str, str] = {}
    if inherit:
        merged.update(validate_env(os.environ if base is None else base))
    if extra:
        merged.update(validate_env(extra))
    return merged
