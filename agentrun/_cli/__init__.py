"""The ``agentrun`` command, one module per command; ``agentrun.cli.main`` is the entry point."""

from .main import main

__all__ = ["main"]
