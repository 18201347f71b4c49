"""Escalation: the ladder of tiers a decorated call climbs (`escalate=`).

A decorator with `escalate=` makes a `Ladder` for each function when decorating (its tiers'
calls checked against the function's signature), and runs its flow through `climb`: each
tier's own flow (the decorator's, with the tier's budget: its corrections, its retries) runs
in turn, cheapest first. A tier below the last ends by raising `Escalate` (its budget spent),
`ModelRefused`, or an error of `on_errors`; `climb` then reports the tier, checks that the
budget can cover the next tier's first call (priced as its model: `EscalationUnaffordable`
otherwise), emits an `escalation` event and runs the next tier, told the failure when `carry`
says so. The last tier's failure is raised as without a ladder, with every tier's report.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import replace
from typing import Any, TypeVar

from .._core.errors import (
    BudgetExceeded,
    CorrectionExhausted,
    LowQualityAnswer,
)
from .._core.tiers import (
    Escalation,
    EscalationUnaffordable,
    ModelRefused,
    Tier,
)
from .._core.types import AttemptInfo, Cost, TierReport
from .bridge import is_async_callable
from .budget import estimate_tokens
from .events import emit, known_cost, make_event
from .job import Job, current_attempt, effective, in_use
from .ledger import Held
from .reserve import unaffordable

__all__ = ["Escalate", "Ladder", "Rung", "Tally", "climb", "set_learner", "tier_step"]

T = TypeVar("T")

Learner = Callable[[str, Escalation], int]
"""`(function, escalation) -> the index of the tier to start at` (`start="learned"`)."""

_LEARNER: list[Learner] = []


def set_learner(learner: Learner) -> None:
    """Install what `start="learned"` asks where to start (the package installs eval's)."""
    _LEARNER[:] = [learner]


class Escalate(Exception):
    """A tier below the last spent its budget: the ladder moves up (never reaches a caller).

    Attributes:
        error: What the tier would have raised as the last tier (its exhaustion).
        carry: What the next tier is told when `carry` is on (the decorator's own form), or
            None.
        summary: The failure in a line, for the `escalation` event.
    """

    def __init__(self, error: BaseException, carry: Any, summary: str) -> None:
        super().__init__(summary)
        self.error = error
        self.carry = carry
        self.summary = summary


class Rung:
    """One tier as a function's ladder holds it: how to call it, and its own budget."""

    __slots__ = ("budget", "index", "keyword", "last", "position", "tier")

    def __init__(
        self, index: int, tier: Tier, last: bool, budget: int, keyword: str, position: int | None
    ) -> None:
        self.index = index
        self.tier = tier
        self.last = last
        self.budget = budget
        self.keyword = keyword
        self.position = position

    @property
    def name(self) -> str:
        return self.tier.name

    def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """What this tier calls, with which arguments: `fn` with its model, or its callable."""
        tier = self.tier
        if tier.call is not None:
            return tier.call, args, kwargs
        i = self.position
        if i is not None and len(args) > i:  # given positionally: replaced in place
            return fn, (*args[:i], tier.model, *args[i + 1 :]), kwargs
        return fn, args, {**kwargs, self.keyword: tier.model}

    def info(self, number: int, maximum: int, feedback: str | None, previous: Any) -> AttemptInfo:
        """The attempt `current_attempt()` gives during this tier's call."""
        return AttemptInfo(
            number, maximum, feedback, previous, tier=self.tier.name, model=self.tier.model
        )

    def inner_info(self, number: int, maximum: int) -> AttemptInfo:
        """The attempt of a decorator that has none of its own (`@self_correct`).

        The enclosing attempt with this tier (its documents still go to it), or a call's own.
        """
        outer = current_attempt()
        if outer is None:
            return self.info(number, maximum, None, None)
        return AttemptInfo(
            outer.number,
            outer.max_attempts,
            outer.feedback,
            outer.previous_answer,
            tier=self.tier.name,
            model=self.tier.model,
            _context=outer._context,
        )


class Ladder:
    """A function's ladder: its rungs, checked against its signature when decorating.

    Args:
        escalation: The ladder as given.
        fn: The decorated function (its signature: a model tier's keyword must be one of its
            parameters).
        function: Its name, for errors.
        budget_name: The per-tier budget's name (`max_corrections`, `max_retries`).
        default: The decorator's own budget, for a tier that sets none.
        is_async: Whether the function is async to call (an async tier needs it).
    """

    __slots__ = ("escalation", "function", "rungs", "total")

    def __init__(
        self,
        escalation: Escalation,
        fn: Callable[..., Any],
        function: str,
        budget_name: str,
        default: int,
        *,
        is_async: bool,
    ) -> None:
        self.escalation = escalation
        self.function = function
        keyword = escalation.keyword
        position: int | None = None
        if any(t.call is None for t in escalation.tiers):
            parameters = list(inspect.signature(fn).parameters.values())
            param = next((p for p in parameters if p.name == keyword), None)
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
            if (param is None and not takes_any) or (
                param is not None and param.kind is inspect.Parameter.POSITIONAL_ONLY
            ):
                raise TypeError(
                    f"escalate=: {function} must declare a keyword parameter {keyword!r} to "
                    f"take a tier's model name (e.g. `def {function.split('.')[-1]}(..., "
                    f"{keyword}: str = ...)`), or give Escalation(keyword=...) the one it has"
                )
            if param is not None and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                position = parameters.index(param)
        if not is_async:
            for tier in escalation.tiers:
                if tier.call is not None and is_async_callable(tier.call):
                    raise TypeError(
                        f"escalate=: tier {tier.name!r} is async, and {function} is not: a "
                        "sync function's tiers must be sync callables"
                    )
        count = len(escalation.tiers)
        rungs = []
        for i, tier in enumerate(escalation.tiers):
            own = getattr(tier, budget_name)
            rungs.append(
                Rung(i, tier, i == count - 1, default if own is None else own, keyword, position)
            )
        self.rungs: tuple[Rung, ...] = tuple(rungs)
        self.total = sum(r.budget + 1 for r in self.rungs)
        """The most calls of the function a call can make, all tiers together."""

    def after(self, rung: Rung) -> int:
        """The most calls the tiers above `rung` can make."""
        return sum(r.budget + 1 for r in self.rungs[rung.index + 1 :])

    @classmethod
    def of(
        cls,
        escalation: Escalation | None,
        fn: Callable[..., Any],
        function: str,
        budget_name: str,
        default: int,
    ) -> Ladder | None:
        """The ladder of `fn` (None without `escalate=`), sync or async as `fn` is to call."""
        if escalation is None:
            return None
        is_async = is_async_callable(fn) or inspect.isasyncgenfunction(fn)
        return cls(escalation, fn, function, budget_name, default, is_async=is_async)

    def start(self) -> int:
        """The tier a call starts at: the first, or where the learned start says."""
        if self.escalation.start != "learned" or not _LEARNER:
            return 0
        return max(0, min(len(self.rungs) - 1, _LEARNER[0](self.function, self.escalation)))


class Tally:
    """What one call's current tier has made so far (its flow counts its calls here)."""

    __slots__ = ("answered_by", "calls", "cost", "judge_usage", "usage")

    def __init__(self, job: Job) -> None:
        self.calls = 0
        # The tier whose answer the flow returned, when not this one (the best attempt of
        # an earlier tier, with `on_exhausted="return_best"`).
        self.answered_by: str | None = None
        self.usage = job.usage
        self.judge_usage = job.judge_usage
        self.cost = known_cost(job)

    def report(self, job: Job, rung: Rung, ended: Any) -> TierReport:
        now = known_cost(job)
        cost = None if now is None else now - (self.cost or Cost())
        return TierReport(
            name=rung.name,
            model=rung.tier.model,
            calls=self.calls,
            answered=ended == "answered",
            ended=ended,
            usage=job.usage - self.usage,
            judge_usage=job.judge_usage - self.judge_usage,
            cost=cost,
        )


Run = Callable[[Rung, Any, Tally], Generator[Any, Any, T]]
"""A tier's flow: `(rung, carried, tally) -> Flow`; `carried` is the failure below (or None)."""


def tier_step(
    made: Generator[Any, Any, T], tally: Tally | None, planned: str
) -> Generator[Any, Any, T]:
    """`yield from made` (an attempt step), its call counted at the tier (a sub-flow).

    A call the budget refused before it was made (`planned` is the step's) is not counted;
    one the function raised in was made.
    """
    if tally is None:
        return (yield from made)
    tally.calls += 1
    try:
        return (yield from made)
    except BudgetExceeded as stopped:
        if stopped.planned == planned:
            tally.calls -= 1
        raise


def _reason(error: BaseException, on_errors: tuple[type[BaseException], ...]) -> str | None:
    """Why a tier's failure moves the call up (None: it propagates, as without a ladder)."""
    if isinstance(error, Escalate):
        return "exhausted"
    if isinstance(error, ModelRefused):
        return "refused"
    if on_errors and isinstance(error, on_errors) and not isinstance(error, BudgetExceeded):
        return "error"
    return None


def _ended(error: BaseException, reason: str | None) -> Any:
    if reason is not None:
        return reason
    # the last tier's own exhaustion (a nested call's, below the last, propagates as "error")
    if isinstance(error, (CorrectionExhausted, LowQualityAnswer)):
        return "exhausted"
    # a stop of the job's budget within the tier ends it as one before it would
    return "unaffordable" if isinstance(error, BudgetExceeded) else "error"


def climb(
    ladder: Ladder,
    job: Job,
    record: Any,
    run: Run[T],
    *,
    decorator: str,
    extra_chars: Callable[[Any], int] = lambda carried: 0,
) -> Generator[Any, Any, T]:
    """Run each tier's flow in turn until one answers (a sub-flow: `yield from`).

    Args:
        ladder: The function's ladder.
        job: The job.
        record: The call's `Record` (`fn.outcome(...)`), or None: its `tier` and `tiers`
            are filled in.
        run: A tier's flow.
        decorator: The decorator's name, for events.
        extra_chars: What the carried failure adds to the next tier's first prompt.

    Raises:
        EscalationUnaffordable: The budget cannot cover the next tier's first call.
        Exception: The last tier's failure (its `tiers` set), or any other error of a tier.
    """
    escalation = ladder.escalation
    reports: list[TierReport] = []
    carried: Any = None
    failure: BaseException | None = None
    start = ladder.start()
    for rung in ladder.rungs[:start]:
        reports.append(TierReport(rung.name, rung.tier.model, 0, False, "skipped"))
    for rung in ladder.rungs[start:]:
        if failure is not None:
            _afford(job, rung, reports[-1], extra_chars(carried), failure, reports)
            emit(
                make_event(
                    "escalation",
                    decorator,
                    ladder.function,
                    job,
                    rung.index + 1,
                    len(ladder.rungs),
                    tier=rung.name,
                    left=reports[-1],
                    failure=reports[-1].ended,
                    error=failure.summary if isinstance(failure, Escalate) else str(failure),
                )
            )
        tally = Tally(job)
        try:
            value = yield from run(rung, carried, tally)
        except Exception as error:
            reason = _reason(error, escalation.on_errors)
            reports.append(tally.report(job, rung, _ended(error, reason)))
            if reason is None or rung.last:
                _attach(error.error if isinstance(error, Escalate) else error, reports, record)
                raise
            failure = error
            carried = error.carry if isinstance(error, Escalate) and escalation.carry else None
            continue
        by = tally.answered_by
        if by is None or by == rung.name:
            reports.append(tally.report(job, rung, "answered"))
        else:  # an earlier tier's best attempt, returned when the last tier's were rejected
            reports.append(tally.report(job, rung, "exhausted"))
            reports = [replace(r, answered=True) if r.name == by else r for r in reports]
        if record is not None:
            record.tier, record.tiers = by or rung.name, tuple(reports)
        return value
    raise AssertionError("a ladder's last tier returns or raises")  # pragma: no cover


def _attach(error: BaseException, reports: list[TierReport], record: Any) -> None:
    if hasattr(error, "tiers") and isinstance(getattr(error, "tiers", None), tuple):
        error.tiers = tuple(reports)
    if record is not None:
        record.tiers = tuple(reports)


def _afford(
    job: Job,
    rung: Rung,
    below: TierReport,
    extra_chars: int,
    failure: BaseException,
    reports: list[TierReport],
) -> None:
    """Stop before a tier whose first call the budget cannot cover (priced as its model)."""
    if not in_use():
        return
    budget = effective(job)
    if budget is None:
        return
    # A call's tokens as the tier below measured them; a tier that made no counted call (a
    # refusal raised at once, a transport error) measured nothing: the last one that did.
    measured = next((r for r in reversed(reports) if r.usage.model_calls), below)
    calls = max(1, measured.usage.model_calls)
    prompt = measured.usage.prompt_tokens // calls + estimate_tokens(extra_chars)
    completion = measured.usage.completion_tokens // calls
    cost = 0.0
    if budget.prices is not None and budget.max_cost is not None:
        model = rung.tier.model
        if model is not None:
            cost = budget.prices.cost(model, prompt, completion)
        elif measured.cost is not None:
            cost = measured.cost.answer / calls
    planned = f"first call of tier {rung.name!r}" + (
        f" (model {rung.tier.model!r})" if rung.tier.model else ""
    )
    stopped = unaffordable(job, budget, planned, Held(1, prompt + completion, cost))
    if stopped is None:
        return
    shown = failure.error if isinstance(failure, Escalate) else failure
    error = EscalationUnaffordable(
        f"{stopped} (escalating from tier {below.name!r}, which failed: {_line(shown)})",
        tier=rung.name,
        failure=shown,
        limit=stopped.limit,
        maximum=stopped.maximum,
        spent=stopped.spent,
        needed=stopped.needed,
        planned=stopped.planned,
        usage=stopped.usage,
        judge_usage=stopped.judge_usage,
        cost=stopped.cost,
        job_id=stopped.job_id,
        reserved=stopped.reserved,
    )
    reports.append(TierReport(rung.name, rung.tier.model, 0, False, "unaffordable"))
    error.tiers = tuple(reports)
    raise error from shown


def _line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
