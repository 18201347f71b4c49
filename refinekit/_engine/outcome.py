"""What one decorated call did: `Outcome`, and the record a flow fills while it runs.

`fn.outcome(...)` runs the call exactly as `fn(...)` does, with a `Record` handed to the
decorator's flow; the flow adds its attempts and verdicts (and the backoff it computed) to it,
and the record, with the job's counters before and after the call, becomes the `Outcome`. A
plain call passes no record, and costs nothing more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._core.types import Attempt, Cost, TierReport, Usage, Verdict
from .job import cost_of

if TYPE_CHECKING:
    from .job import Job

__all__ = ["Outcome", "Record"]

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Outcome(Generic[T_co]):
    """What one call of a decorated function did: its value and how it got there.

    Returned by `fn.outcome(*args, **kwargs)` (awaitable when `fn` is async), which calls
    `fn` exactly as `fn(*args, **kwargs)` does and raises what that call raises.

    Attributes:
        value: What the call returned (what `fn(*args, **kwargs)` would have returned).
        decorator: The decorator the outcome is of (the outermost one of a stack):
            `"retry_on_low_quality"`, `"self_correct"`, `"reviewed"` or `"guarded"`.
        function: The qualified name of the decorated function.
        job_id: The id of the job the call ran in (the one its events carry).
        attempts: This decorator's attempts, in order, each with its verdict: a call of the
            function for `@retry_on_low_quality` (the last one is the answer returned, unless
            `on_exhausted="return_best"` returned an earlier one) and `@self_correct` (one per
            reply; its verdict says whether the reply parsed and validated), a draft for
            `@reviewed` (the original, then each revision), the one call for `@guarded`.
        verdicts: Every verdict this decorator got, in order (an attempt returned unjudged
            has none; `@guarded`'s input screen has one).
        corrections_used: Corrections `@self_correct` had used in the job when the call ended
            (as `CorrectionExhausted.corrections_used` counts them).
        usage: The answering model's usage during the call (judges apart).
        judge_usage: Model judges' usage during the call.
        cost: What the model calls of the call cost (answer and judge apart), when the job's
            budget has prices (`refinekit.Budget(prices=...)`); None otherwise.
        idle_for: Seconds of backoff between attempts (as computed: in testing mode they are
            not slept), tenacity's `statistics["idle_for"]`.
        duration: Seconds from the start of the call to its end.
        tier: With `escalate=`, the name of the tier whose answer was returned; else None.
        tiers: With `escalate=`, what each tier tried did, in order (`refinekit.TierReport`:
            its calls, usage and cost, and why it was left); else empty.
    """

    value: T_co
    decorator: str
    function: str
    job_id: str
    attempts: tuple[Attempt, ...]
    verdicts: tuple[Verdict, ...]
    corrections_used: int
    usage: Usage
    judge_usage: Usage
    idle_for: float
    duration: float
    cost: Cost | None = None
    tier: str | None = None
    tiers: tuple[TierReport, ...] = ()

    @property
    def attempt_count(self) -> int:
        """How many attempts the call made: tenacity's `statistics["attempt_number"]`."""
        return len(self.attempts)

    @property
    def verdict(self) -> Verdict | None:
        """The last verdict, or None when nothing was judged."""
        return self.verdicts[-1] if self.verdicts else None


class Record:
    """What a flow adds while `fn.outcome(...)` runs; made an `Outcome` when the call ends."""

    __slots__ = (
        "_cost",
        "_judge_usage",
        "_started",
        "_usage",
        "attempts",
        "idle_for",
        "job",
        "tier",
        "tiers",
        "verdicts",
    )

    def __init__(self, job: Job) -> None:
        self.job = job
        self.attempts: list[Attempt] = []
        self.verdicts: list[Verdict] = []
        self.idle_for = 0.0
        self.tier: str | None = None
        self.tiers: tuple[TierReport, ...] = ()
        self._usage = job.usage
        self._judge_usage = job.judge_usage
        self._cost = cost_of(job)
        self._started = time.perf_counter()

    def outcome(self, value: Any, decorator: str, function: str) -> Outcome[Any]:
        """The finished call's outcome."""
        job = self.job
        cost = cost_of(job)
        return Outcome(
            value=value,
            decorator=decorator,
            function=function,
            job_id=job.id,
            attempts=tuple(self.attempts),
            verdicts=tuple(self.verdicts),
            corrections_used=job.corrections_used,
            usage=job.usage - self._usage,
            judge_usage=job.judge_usage - self._judge_usage,
            idle_for=self.idle_for,
            duration=time.perf_counter() - self._started,
            cost=None if cost is None else cost - (self._cost or Cost()),
            tier=self.tier,
            tiers=self.tiers,
        )
