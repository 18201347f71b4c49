"""Budgets per job: a job held to its limits on tokens, cost and model calls.

What a budget and prices are is `prices`'s; the budget a job runs under (its scope) and its
cost are the job's (`refinekit._engine.job`); what a call reserves of a budget before it is
sent is `reserve`'s. Here is how a job is held to its limits; the rest of refinekit calls a
few hooks:

- `check()`: before every command a flow yields (`refinekit._engine.flow`'s drivers), a job already
  over a limit stops there with `BudgetExceeded`;
- `spent_of`, `exceeded`: what a job has spent against its limits, and the error that stops
  it; `estimate_tokens` / `request_tokens`: the characters / 4 estimate;
- `surface(error, attempts, best)`: the decorator the caller called puts its attempts on the
  error.

The answer and judge usage are counted in the job's accounts (`refinekit._engine.ledger`),
per model, so that a cost can be computed with the prices given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar

from .._core.errors import BudgetExceeded
from .._core.types import Attempt, Cost
from .events import emit, make_event
from .job import Job, cost_of, current_job, effective, in_use
from .ledger import per_model
from .prices import Budget

T = TypeVar("T")

__all__ = [
    "check",
    "estimate_tokens",
    "exceeded",
    "recount",
    "request_tokens",
    "spent_of",
    "streamed_over",
    "surface",
    "without_attempts",
]


def estimate_tokens(text_chars: int) -> int:
    """The token estimate of a prompt whose count is not known: its characters / 4, rounded up."""
    return -(-text_chars // 4)


def spent_of(job: Job, budget: Budget, *, locked: bool = False) -> tuple[int, int, Cost | None]:
    """What `job` has spent: tokens and calls (answer and judge together), and its cost.

    `locked`: the caller holds the job's lock (a reservation being made).
    """
    usage, judge = job.usage, job.judge_usage
    models = per_model(job, locked=True) if locked else None
    cost = cost_of(job, budget.prices, per_model=models) if budget.prices is not None else None
    return (
        usage.total_tokens + judge.total_tokens,
        usage.model_calls + judge.model_calls,
        cost,
    )


def _fmt(limit: str, value: float) -> str:
    return f"{value:.6g}" if limit == "max_cost" else str(int(value))


def exceeded(
    job: Job,
    limit: str,
    maximum: float,
    spent: float,
    cost: Cost | None,
    needed: float | None = None,
    planned: str | None = None,
    reserved: float = 0,
) -> BudgetExceeded:
    what = {"max_tokens": "tokens", "max_cost": "cost", "max_calls": "model calls"}[limit]
    usage, judge = job.usage, job.judge_usage
    counts = (
        f"{usage.model_calls} answer and {judge.model_calls} judge calls, "
        f"{usage.total_tokens + judge.total_tokens} tokens"
        + ("" if cost is None else f", cost {cost.total:.6g}")
    )
    if needed is None:
        message = (
            f"budget exceeded: {what} {_fmt(limit, spent)} > {limit}={_fmt(limit, maximum)} "
            f"({counts})"
        )
    else:
        in_flight = (
            f", with {_fmt(limit, reserved)} held by calls in flight" if reserved > 0 else ""
        )
        message = (
            f"budget exceeded: the {planned} was not made: it needs about "
            f"{_fmt(limit, needed)} {what} and {limit}={_fmt(limit, maximum)} leaves "
            f"{_fmt(limit, max(0.0, maximum - spent - reserved))}{in_flight} ({counts})"
        )
    return BudgetExceeded(
        message,
        limit=limit,
        maximum=maximum,
        spent=spent,
        needed=needed,
        planned=planned,
        reserved=reserved,
        usage=usage,
        judge_usage=judge,
        cost=cost,
        job_id=job.id,
    )


def check() -> None:
    """Before a flow's next command: stop when the current job is already over a limit.

    Raises:
        BudgetExceeded: A counted call has taken the job over a limit.
        MissingPrice: The job must be priced and a model it called has no price.
    """
    if not in_use():  # no budget was ever given: nothing to look up
        return
    job = current_job()
    if job is None:
        return
    budget = effective(job)
    if budget is None:
        return
    spent_tokens, spent_calls, spent_cost = spent_of(job, budget)
    checks: list[tuple[str, float | None, float]] = [
        ("max_calls", budget.max_calls, spent_calls),
        ("max_tokens", budget.max_tokens, spent_tokens),
    ]
    if spent_cost is not None:
        checks.append(("max_cost", budget.max_cost, spent_cost.total))
    for limit, maximum, spent in checks:
        if maximum is not None and spent > maximum:
            raise exceeded(job, limit, maximum, spent, spent_cost)


def streamed_over(
    job: Job, limit: str, maximum: float, spent: float, held: float
) -> BudgetExceeded:
    """The stop of a stream closed mid-way by `limit`.

    What is spent plus what the calls in flight hold (its own text so far included) passes
    the limit. Its `needed` is None (the call was made); `recount` brings its counts up to
    date once the stream is counted.
    """
    error = exceeded(job, limit, maximum, spent, None)
    what = {"max_tokens": "tokens", "max_cost": "cost"}[limit]
    error.args = (
        f"budget exceeded: a stream was stopped mid-way: {what} {_fmt(limit, spent)} spent "
        f"and {_fmt(limit, held)} held by the calls in flight (its own text so far included) "
        f"pass {limit}={_fmt(limit, maximum)}",
    )
    error.reserved = held
    return error


def recount(error: BudgetExceeded, job: Job) -> None:
    """Bring a stop's usage, cost and counts up to date with what `job` has counted since.

    A stream a step's check stopped is counted after the error was made (it was sent: its
    usage counts): the error then says what the job has spent with it.
    """
    if error.job_id != job.id:
        return
    budget = effective(job)
    if budget is None:
        return
    try:
        tokens, calls, cost = spent_of(job, budget)
    except Exception:  # a missing price: the error keeps what it had
        return
    spent: float | None = {"max_tokens": tokens, "max_calls": calls}.get(error.limit)
    if error.limit == "max_cost":
        spent = None if cost is None else cost.total
    if error.needed is None and spent is not None:
        error.spent = max(error.spent, spent)
        if error.spent > error.maximum:  # else it says what the calls in flight held
            error.args = exceeded(job, error.limit, error.maximum, error.spent, cost).args
    error.usage, error.judge_usage, error.cost = job.usage, job.judge_usage, cost


def _request_chars(request: Mapping[str, Any]) -> int:
    """The characters of a chat request's prompt: its messages' text (and a `system`)."""
    total = 0

    def add(content: Any) -> None:
        nonlocal total
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping):
                    add(part.get("text"))
                else:
                    add(part)

    for message in request.get("messages") or ():
        if isinstance(message, Mapping):
            add(message.get("content"))
    add(request.get("system"))
    return total


def request_tokens(request: Mapping[str, Any]) -> int:
    """The estimate of a chat request's prompt: its text's characters / 4, rounded up."""
    return estimate_tokens(_request_chars(request))


def without_attempts(
    flow: Callable[..., Generator[Any, Any, T]], decorator: str
) -> Callable[..., Any]:
    """A decorator's flow whose `BudgetExceeded` carries no attempts and no best answer.

    For the decorators none of whose unfinished answers may be used (an unparsed reply, an
    unreviewed or unscreened draft): an inner decorator's attempts do not leak out either.
    """

    @functools.wraps(flow)
    def run(
        cfg: Any, fn: Any, args: Any, kwargs: Any, job: Job, record: Any
    ) -> Generator[Any, Any, T]:
        try:
            return (yield from flow(cfg, fn, args, kwargs, job, record))
        except BudgetExceeded as stopped:
            surface(stopped, [], None, decorator=decorator, function=cfg.function, job=job)
            raise

    return run


def surface(
    error: BudgetExceeded,
    attempts: list[Attempt],
    best: Attempt | None,
    *,
    decorator: str,
    function: str,
    job: Job,
) -> None:
    """Put the attempts of the decorated call on its way out (the outermost one's stay).

    The first decorator it leaves emits a `budget` event (one per stop, whatever the nesting).
    """
    error.attempts = tuple(attempts)
    error.best = best
    if error.__dict__.get("_announced"):
        return
    error.__dict__["_announced"] = True
    number = len(attempts)
    emit(make_event("budget", decorator, function, job, number, number, error=str(error)))
