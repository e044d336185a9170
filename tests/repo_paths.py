"""Where the tests find the repository's files, wherever the test module sits below ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = REPO / "fixtures"
FAKES = TESTS / "fakes"
