"""``run_turn``: one turn to its end, the same for every engine.

Checks the arguments at the boundary (:func:`~.boundary.check_turn_arguments`), runs the turn
(:meth:`Turn.run_to_end`) and then what the session's context policy asks for after it
(:func:`~.handoff.follow_context_policy`). Imports the sibling modules only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.limits import TurnLimits, merged_limits
from .._vocabulary.summary import TurnSummary, WindDown
from .boundary import check_turn_arguments
from .handoff import follow_context_policy
from .session import Session
from .turn import MessageCallback

if TYPE_CHECKING:
    from .output import OutputType

__all__ = ["run_turn"]


async def run_turn(
    session: Session,
    prompt: str,
    *,
    on_message: MessageCallback | None = None,
    timeout: float | None = None,
    idle_timeout: float | None = None,
    tool_timeout: float | None = None,
    stall_after: float | None = None,
    output: OutputType | None = None,
    wind_down: float | WindDown | None = None,
    limits: TurnLimits | None = None,
) -> TurnSummary:
    """Run one turn to its end and return its :class:`TurnSummary`.

    Works the same for every engine and for the first and every later turn. Bad arguments raise
    :class:`ConfigurationError` before anything is sent.

    ``timeout`` bounds the whole turn. ``idle_timeout`` bounds how long the agent may be quiet;
    while one of its tool calls is open ``tool_timeout`` applies instead (when given), while the
    permission callback decides no quiet clock runs, and a retry delay the agent announces is
    added. A ``stall`` message reports a quiet spell (once) after ``stall_after`` seconds,
    by default halfway to the idle limit in force. ``on_message``
    (sync or async) sees every message as it arrives; if it raises, the turn is cancelled in the
    agent and the exception propagates. Failures that end the turn raise (see
    :class:`TurnError`, :class:`ProcessExitError`) with the partial summary attached.

    ``output`` (a pydantic model class or a JSON Schema ``dict``) asks for structured output:
    the agent is given the schema (its own way where it has one, else with the prompt) and
    ``summary.output`` is the validated final answer. An answer that does not validate gets
    one repair turn in the same session (the returned summary is then the repair turn's, with
    ``output_repairs == 1``); still invalid raises :class:`OutputValidationError`.

    ``wind_down`` (seconds, or a :class:`WindDown` with its own text; needs ``timeout`` and must
    be less than it) winds the turn down: that long before the deadline the agent is steered
    with a wrap-up instruction so it can end the turn by itself (``summary.wound_down`` says
    whether it did); engines that take no input during a turn get a ``system`` ``wind_down``
    message instead. At the deadline the turn is cancelled as without it.

    ``limits`` (a :class:`TurnLimits`) holds ``timeout``, ``idle_timeout``, ``tool_timeout``,
    ``stall_after`` and ``wind_down`` as one value, checked when it was made; a field it sets
    may not be given as a keyword argument too (:class:`ConfigurationError`).
    """
    if not isinstance(session, Session):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(
            f"session must be a Session (from engine.start(...)), got {type(session).__name__}",
            option="session",
        )
    check_turn_arguments(prompt, on_message=on_message)
    limits = merged_limits(
        limits,
        timeout=timeout,
        idle_timeout=idle_timeout,
        tool_timeout=tool_timeout,
        stall_after=stall_after,
        wind_down=wind_down,
    )
    spec = None
    if output is not None:
        from .output import output_spec  # structured output loads on first use

        spec = output_spec(output)
    turn = session.turn(
        prompt,
        limits=limits,
        output=spec,
    )
    turn.output_repairable = True
    summary = await turn.run_to_end(on_message)
    summary = await follow_context_policy(session, turn, summary, on_message)
    if spec is None or not turn.output_errors:
        return summary
    # The answer did not validate: ask once more, in the same session.
    repair = session.turn(
        spec.repair_prompt(turn.output_errors),
        limits=limits,
        output=spec,
    )
    repair.summary.output_repairs = 1
    summary = await repair.run_to_end(on_message)
    return await follow_context_policy(session, repair, summary, on_message)
