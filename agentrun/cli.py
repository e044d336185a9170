"""The ``agentrun`` command's entry point (the console script); the commands live in ``_cli``."""

from __future__ import annotations

import sys

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
