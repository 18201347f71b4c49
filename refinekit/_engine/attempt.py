"""The attempt step: one call of the wrapped function, held to its job's budget.

Every decorator calls the function it wraps through `attempt_step(...)` (`yield from`), the one
place that does it:

1. reserve the call's share of the budget (`refinekit._engine.reserve.before_attempt`), a
   first call waiting for its turn (`WaitTurn`), or stop (`BudgetExceeded`);
2. note the replies the job counted so far (`ledger.mark`);
3. yield the `Call`; with `rejects`, a `LowQualityAnswer` the function raises is caught and
   its answer taken as the value;
4. count the reply it returned (or the raised signal carried) once (`ledger.count`).

It returns a `Step`, a context manager holding the reservation until the block ends: a stream
the function returned is read inside it, its usage counted as it is read, settling what the
attempt reserved. A revision (`Revise`) is counted with `counted`.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from .._core.errors import LowQualityAnswer
from .._core.types import AttemptInfo
from .flow import Call
from .job import Job, current_job, enter_attempt, leave_attempt
from .ledger import Reservation, count, mark
from .ramp import NotYet, WaitTurn
from .recorder import Recorder, start_recording, stop_recording
from .reserve import before_attempt

__all__ = ["Step", "attempt_step", "counted"]


class Step:
    """One call of the wrapped function, made and counted; its reservation held until exit.

    Attributes:
        held: The call's reservation: give it as `previous` to the next attempt.
        value: What the function returned (with `rejects`: the answer a raised
            `LowQualityAnswer` carried).
        rejection: The `LowQualityAnswer` the function raised (with `rejects`), else None.
        started: `time.perf_counter()` once the call's share was reserved.
        recorder: The tool calls recorded during the call (with `tools`), else None.
        noted: How many context documents `info` held when the call began (0 without it).
    """

    __slots__ = ("held", "noted", "recorder", "rejection", "started", "value")

    def __init__(self, held: Reservation, started: float) -> None:
        self.held = held
        self.started = started
        self.value: Any = None
        self.rejection: LowQualityAnswer | None = None
        self.recorder: Recorder | None = None
        self.noted = 0

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.held.__exit__(*exc_info)


def attempt_step(
    job: Job,
    function: str,
    call: Call,
    *,
    planned: str | None = None,
    previous: Reservation | None = None,
    extra_chars: int = 0,
    info: AttemptInfo | None = None,
    enter: bool = False,
    tools: bool = False,
    rejects: bool = False,
) -> Generator[Any, Any, Step]:
    """Make one call of the wrapped function, reserved and counted (a sub-flow: `yield from`).

    Args:
        job: The job it runs in.
        function: The function's name: its first calls ramp up under a token or cost limit.
        call: The call of the function.
        planned: The call, for the error that stops it ("attempt 2 of answer"; default: "call
            of" the function).
        previous: The previous attempt's reservation (None for a first call): what it used,
            plus `extra_chars` (its feedback or correction turn, characters / 4), is the
            estimate of this one (see `reserve.before_attempt`).
        extra_chars: What this attempt adds to the prompt.
        info: The attempt the call belongs to: its context documents so far are noted
            (`Step.noted`), and with `enter` it is the current attempt during the call.
        enter: Make `info` current during the call.
        tools: Record the tool calls made during the call (`Step.recorder`).
        rejects: Catch a `LowQualityAnswer` the function raises (`Step.rejection`); its
            answer is the value, and the reply it carries is counted too.

    Returns:
        The step; use it as a context manager (`with ... as step:`): its reservation is
        released when the block ends.

    Raises:
        BudgetExceeded: The call's estimate does not fit in the budget.
    """
    while True:
        try:
            held = before_attempt(
                job, planned or f"call of {function}", previous, extra_chars, first_of=function
            )
            break
        except NotYet as wait:
            yield WaitTurn(wait.turn)
    step = Step(held, time.perf_counter())
    try:
        token = None
        if info is not None:
            step.noted = len(info._context)
            if enter:
                token = enter_attempt(info)
        recorder = step.recorder = start_recording() if tools else None
        since = mark(job)
        try:
            value = yield call
        except LowQualityAnswer as raised:
            if not rejects:
                raise
            step.rejection, value = raised, raised.answer
        finally:
            if recorder is not None:
                stop_recording(recorder)
            if token is not None:
                leave_attempt(token)
        # A rejected reply (returned, or carried by a raised LowQualityAnswer) was paid for
        # too; a stream adds nothing here: it is counted as it is read.
        count(job, value, since)
        step.value = value
    except BaseException as error:
        held.__exit__(type(error), error, error.__traceback__)
        raise
    return step


def counted(reply: object) -> None:
    """Count a revision's reply in the current job (settling the revision's reservation)."""
    job = current_job()
    if job is not None and reply is not None:
        count(job, reply)
