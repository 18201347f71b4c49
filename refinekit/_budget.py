"""Budgets per job: a job held to its limits on tokens, cost and model calls.

What a budget and prices are is `_prices`'s; how a job is held to them lives here, and the
rest of refinekit calls a few hooks:

- `join(job, budget, opened)` / `leave(token)`: a decorated call brings its `budget=` to the
  job it opens (the job's budget) or joins (tightening the job's budget for that call only);
- `check()`: before every command a flow yields (`refinekit._flow`'s drivers), a job already
  over a limit stops there with `BudgetExceeded`;
- `before_attempt(...)`: before another attempt of the wrapped function, the previous
  attempt's own usage (plus its feedback, characters / 4) must fit in what is left;
- `before_judge_call(model, request)`: before a judge model's request, its prompt (characters
  / 4) must fit in what is left, and a call must be left;
- `surface(error, attempts, best)`: the decorator the caller called puts its attempts on the
  error.

The answer and judge usage are counted by the job (`refinekit._job`), per model, so that a
cost can be computed with the prices given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import BudgetExceeded
from ._model import Attempt, Cost, Usage
from ._prices import Budget, Prices

if TYPE_CHECKING:
    from ._job import Job

T = TypeVar("T")

__all__ = [
    "before_attempt",
    "before_call",
    "before_judge_call",
    "check",
    "cost_of",
    "estimate_tokens",
    "join",
    "leave",
    "mark",
    "surface",
    "without_attempts",
]

_in_use = False
"""Whether any budget was given (to a decorator or a job) in this process: until one is, the
drivers' check costs one global lookup."""


def check_budget_option(budget: object) -> Budget | None:
    """A decorator's `budget=`: None or a `Budget` (a TypeError names what to give)."""
    global _in_use
    if budget is None:
        return None
    if isinstance(budget, Budget):
        _in_use = True
        return budget
    raise TypeError(
        "budget= must be a refinekit.Budget, e.g. refinekit.Budget(max_calls=10), not "
        f"{type(budget).__name__}"
    )


# --- the budget a job runs under -------------------------------------------------------------

_SCOPE: ContextVar[tuple[Job, Budget] | None] = ContextVar("refinekit_budget", default=None)


def _current_job() -> Job | None:
    """The current job (`refinekit._job` imports this module, so it is looked up late)."""
    from ._job import current_job

    return current_job()


def effective(job: Job) -> Budget | None:
    """The budget `job` runs under here: its own, tightened by an inner decorator's."""
    scope = _SCOPE.get()
    if scope is not None and scope[0] is job:
        return scope[1]
    return job.budget


def join(job: Job, budget: Budget | None, opened: bool) -> Token[Any] | None:
    """Bring a decorated call's `budget=` to its job; `leave` with the token undoes it.

    A job opened by this call takes the budget as its own. A joined job keeps its own; the
    call's budget tightens it (limits only lower) until the call ends.
    """
    if budget is None:
        return None
    check_budget_option(budget)
    if opened:
        job._budget = budget
        return None
    current = effective(job)
    return _SCOPE.set((job, budget if current is None else current.tightened(budget)))


def leave(token: Token[Any] | None) -> None:
    """Undo what `join` did for a joined job."""
    if token is not None:
        _SCOPE.reset(token)


def cost_of(job: Job, prices: Prices | None = None) -> Cost | None:
    """The job's cost so far with `prices` (default: the effective budget's); None without.

    Raises:
        MissingPrice: A model the job called has no price.
    """
    if prices is None:
        if not _in_use:
            return None
        budget = effective(job)
        prices = None if budget is None else budget.prices
        if prices is None:
            return None
    answer = judge = 0.0
    for (is_judge, model), usage in job._per_model().items():
        value = prices.cost(model, usage.prompt_tokens, usage.completion_tokens)
        if is_judge:
            judge += value
        else:
            answer += value
    return Cost(answer, judge)


def estimate_tokens(text_chars: int) -> int:
    """The token estimate of a prompt whose count is not known: its characters / 4, rounded up."""
    return -(-text_chars // 4)


def _spent(job: Job, budget: Budget) -> tuple[int, int, Cost | None]:
    usage, judge = job.usage, job.judge_usage
    cost = cost_of(job, budget.prices) if budget.prices is not None else None
    return (
        usage.total_tokens + judge.total_tokens,
        usage.model_calls + judge.model_calls,
        cost,
    )


def _fmt(limit: str, value: float) -> str:
    return f"{value:.6g}" if limit == "max_cost" else str(int(value))


def _error(
    job: Job,
    limit: str,
    maximum: float,
    spent: float,
    cost: Cost | None,
    needed: float | None = None,
    planned: str | None = None,
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
        message = (
            f"budget exceeded: the {planned} was not made: it needs about "
            f"{_fmt(limit, needed)} {what} and {limit}={_fmt(limit, maximum)} leaves "
            f"{_fmt(limit, max(0.0, maximum - spent))} ({counts})"
        )
    return BudgetExceeded(
        message,
        limit=limit,
        maximum=maximum,
        spent=spent,
        needed=needed,
        planned=planned,
        usage=usage,
        judge_usage=judge,
        cost=cost,
        job_id=job.id,
    )


def _first_short(
    job: Job,
    budget: Budget,
    tokens: int = 0,
    calls: int = 0,
    cost: float = 0.0,
    planned: str | None = None,
) -> BudgetExceeded | None:
    """The first limit that what is spent plus the need goes over; None when all fit.

    With `planned` (a call not made yet), a limit already spent in full leaves nothing for
    any call, whatever its estimate.
    """
    spent_tokens, spent_calls, spent_cost = _spent(job, budget)
    need = planned is not None
    checks: list[tuple[str, float | None, float, float]] = [
        ("max_calls", budget.max_calls, spent_calls, calls),
        ("max_tokens", budget.max_tokens, spent_tokens, tokens),
    ]
    if spent_cost is not None:
        checks.append(("max_cost", budget.max_cost, spent_cost.total, cost))
    for limit, maximum, spent, needed in checks:
        if maximum is None:
            continue
        if spent > maximum or (need and (spent >= maximum or spent + needed > maximum)):
            return _error(
                job,
                limit,
                maximum,
                spent,
                spent_cost,
                needed if need else None,
                planned,
            )
    return None


def check() -> None:
    """Before a flow's next command: stop when the current job is already over a limit.

    Raises:
        BudgetExceeded: A counted call has taken the job over a limit.
        MissingPrice: The job must be priced and a model it called has no price.
    """
    if not _in_use:  # no budget was ever given: nothing to look up
        return
    job = _current_job()
    if job is None:
        return
    budget = effective(job)
    if budget is None:
        return
    error = _first_short(job, budget)
    if error is not None:
        raise error


Mark = tuple[Usage, float]
"""What a job had spent at a point: its usage (answer and judge together) and cost (0 unpriced)."""


def mark(job: Job) -> Mark | None:
    """What `job` has spent so far, to measure one attempt by; None when it has no budget."""
    if not _in_use:
        return None
    budget = effective(job)
    if budget is None:
        return None
    cost = cost_of(job, budget.prices) if budget.prices is not None else None
    return job.usage + job.judge_usage, 0.0 if cost is None else cost.total


def before_attempt(
    job: Job,
    planned: str,
    start: Mark | None,
    end: Mark | None,
    extra_chars: int,
) -> None:
    """Before a call of the wrapped function (`planned`): its estimate must fit.

    The first call has no estimate: it is only refused when a limit is already spent in full.
    Another one's estimate is the previous attempt's own usage (from `start` to `end`: its calls,
    tokens and cost, the calls of decorators inside it too) plus what the new attempt adds
    to the prompt (`extra_chars`, the feedback or the correction turn: characters / 4) as
    prompt tokens (priced, with a cost limit, at the previous attempt's cost per token).

    Raises:
        BudgetExceeded: The estimate does not fit.
    """
    if not _in_use:
        return
    budget = effective(job)
    if budget is None:
        return
    if start is None or end is None:  # the first call: nothing known of it
        start = end = (Usage(), 0.0)
    previous = Usage(
        end[0].model_calls - start[0].model_calls,
        end[0].prompt_tokens - start[0].prompt_tokens,
        end[0].completion_tokens - start[0].completion_tokens,
    )
    previous_cost = end[1] - start[1]
    extra = estimate_tokens(extra_chars)
    tokens = previous.total_tokens + extra
    cost = previous_cost
    if previous.total_tokens and extra:
        cost += previous_cost * extra / previous.total_tokens
    error = _first_short(
        job,
        budget,
        tokens=tokens,
        calls=previous.model_calls,
        cost=cost,
        planned=planned,
    )
    if error is not None:
        raise error


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


def before_call(job: Job | None, planned: str, model: str | None, tokens: int) -> None:
    """Before a model call refinekit makes: one call of `tokens` prompt tokens must fit.

    With a cost limit the estimate is priced as prompt tokens of `model` (a model that is not
    known, as a custom reviser's, is estimated at no cost; its reply is counted afterwards).

    Raises:
        BudgetExceeded: The job is over a limit, or the call does not fit in what is left.
        MissingPrice: A cost limit, and `model` has no price.
    """
    if job is None or not _in_use:
        return
    budget = effective(job)
    if budget is None:
        return
    cost = 0.0
    if budget.max_cost is not None and budget.prices is not None and model is not None:
        cost = budget.prices.cost(model, tokens, 0)
    error = _first_short(job, budget, tokens=tokens, calls=1, cost=cost, planned=planned)
    if error is not None:
        raise error


def before_judge_call(model: str, request: Mapping[str, Any]) -> None:
    """Before a judge model's request: one call, and its prompt (characters / 4), must fit.

    Raises:
        BudgetExceeded: The job is over a limit, or the call does not fit in what is left.
        MissingPrice: A cost limit, and `model` has no price.
    """
    if not _in_use:
        return
    tokens = estimate_tokens(_request_chars(request))
    before_call(_current_job(), f"judge call to model {model!r}", model, tokens)


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
    from ._hooks import emit, make_event

    number = len(attempts)
    emit(make_event("budget", decorator, function, job, number, number, error=str(error)))
