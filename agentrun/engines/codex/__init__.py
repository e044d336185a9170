"""OpenAI Codex: ``codex exec --json``, one process per turn (the ``codex`` engine), and
``codex app-server``, one JSON-RPC process per session (the ``codex-app-server`` engine).

:class:`CodexEngine` drives the program; :class:`CodexExecTranslator` turns its JSON lines (and
the thread's rollout file) into messages, also for ``agentrun replay --engine codex``. See
``docs/engines/codex.md``.
"""

from ._app_engine import CodexAppServerDriver, CodexAppServerEngine
from ._app_translate import CodexAppServerTranslator
from ._argv import ExecArgs, build_exec_argv
from ._engine import CodexDriver, CodexEngine
from ._rollout import Rollout, find_rollout, read_rollout
from ._translate import CodexExecTranslator, codex_usage

__all__ = [
    "CodexAppServerDriver",
    "CodexAppServerEngine",
    "CodexAppServerTranslator",
    "CodexDriver",
    "CodexEngine",
    "CodexExecTranslator",
    "ExecArgs",
    "Rollout",
    "build_exec_argv",
    "codex_usage",
    "find_rollout",
    "read_rollout",
]
