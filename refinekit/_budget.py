"""Budgets per job: limits on tokens, cost and model calls, and the prices that make a cost.

Everything about a budget lives here; the rest of refinekit calls a few hooks:

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
import math
import re
from collections.abc import Callable, Generator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import BudgetExceeded, MissingPrice
from ._model import Attempt, Cost, Usage

if TYPE_CHECKING:
    from ._job import Job

T = TypeVar("T")

__all__ = [
    "Budget",
    "PriceFunction",
    "Prices",
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

PriceFunction = Callable[[str | None, int, int], float]
"""A price callable: `(model, prompt_tokens, completion_tokens) -> cost` (model None: unnamed)."""

_DATED = re.compile(r"[-@](\d{4}-\d{2}-\d{2}|\d{8})$")
"""A dated model snapshot's suffix: `gpt-4.1-mini-2025-04-14`, `claude-3-5-haiku-20241022`."""


def _per_million(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"Prices: the {name} must be a number (per million tokens), not {type(value).__name__}"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"Prices: the {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _pair(model: str, value: object) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        shown = type(value).__name__ if not isinstance(value, (tuple, list)) else len(value)
        raise TypeError(
            f"Prices: the price of {model!r} must be a pair (input, output) of prices per "
            f"million tokens, e.g. (0.40, 1.60); got {shown!r}"
        )
    return (
        _per_million(f"input price of {model!r}", value[0]),
        _per_million(f"output price of {model!r}", value[1]),
    )


class Prices:
    """Prices you give, to turn token usage into cost (refinekit ships no price table).

    Either a mapping of model name to `(input, output)` prices per million tokens, or a
    callable `(model, prompt_tokens, completion_tokens) -> cost`:

        Prices({"gpt-4.1-mini": (0.40, 1.60)})
        Prices(lambda model, prompt, completion: (prompt * 0.4 + completion * 1.6) / 1e6)

    A reply names the model that answered it, often a dated snapshot: a name is looked up as
    it is, then without a date suffix (`gpt-4.1-mini-2025-04-14` is priced as
    `gpt-4.1-mini`, `claude-3-5-haiku-20241022` as `claude-3-5-haiku`). A model found neither
    way is priced at `default` when given; without a default, pricing it raises
    `MissingPrice`, naming the model: an unpriced call never counts as free.

    Args:
        prices: The mapping (copied: changing yours later changes nothing here), or the
            callable. The callable is called with model None for a call that named no model.
        default: `(input, output)` per million tokens for a model the mapping does not name.
            Only with a mapping.

    Raises:
        TypeError: `prices` is neither a mapping nor callable; a model name is not a non-empty
            str; a price is not a pair of numbers; `default` with a callable.
        ValueError: A price is negative, infinite or NaN.
    """

    __slots__ = ("_default", "_function", "_table")

    def __init__(
        self,
        prices: Mapping[str, tuple[float, float]] | PriceFunction,
        *,
        default: tuple[float, float] | None = None,
    ) -> None:
        self._table: dict[str, tuple[float, float]] | None = None
        self._function: PriceFunction | None = None
        if isinstance(prices, Mapping):
            table = {}
            for model, value in prices.items():
                if not isinstance(model, str) or not model:
                    raise TypeError(f"Prices: a model name must be a non-empty str, got {model!r}")
                table[model] = _pair(model, value)
            self._table = table
        elif callable(prices):
            if default is not None:
                raise TypeError(
                    "Prices: default= is for a mapping of prices; a price callable prices "
                    "every model itself"
                )
            self._function = prices
        else:
            raise TypeError(
                "Prices takes a mapping {model: (input, output)} of prices per million tokens "
                f"or a callable (model, prompt_tokens, completion_tokens) -> cost, not "
                f"{type(prices).__name__}"
            )
        self._default = None if default is None else _pair("default", default)

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int) -> float:
        """What `prompt_tokens` in and `completion_tokens` out cost on `model`.

        Args:
            model: The model's name as the reply (or `record_usage(model=...)`) gave it; None
                when the call named none.
            prompt_tokens: Input tokens.
            completion_tokens: Output tokens.

        Returns:
            The cost, in the currency of the prices.

        Raises:
            MissingPrice: No price for `model` and no default.
            TypeError: The price callable returned something that is not a number.
            ValueError: The price callable returned a negative, infinite or NaN cost.
        """
        if self._function is not None:
            value = self._function(model, prompt_tokens, completion_tokens)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"Prices: the price callable returned {type(value).__name__} for model "
                    f"{model!r}; it must return a number"
                )
            if not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"Prices: the price callable returned {value!r} for model {model!r}; it "
                    "must return a finite number >= 0"
                )
            return float(value)
        pair = self.price_of(model)
        return (prompt_tokens * pair[0] + completion_tokens * pair[1]) / 1_000_000

    def price_of(self, model: str | None) -> tuple[float, float]:
        """The `(input, output)` prices per million tokens used for `model` (a mapping only).

        Raises:
            MissingPrice: No price for `model` and no default.
            TypeError: These prices are a callable.
        """
        if self._table is None:
            raise TypeError("Prices: a price callable has no per-model table")
        if model is not None:
            found = self._table.get(model)
            if found is None:
                undated = _DATED.sub("", model)
                found = self._table.get(undated)
            if found is not None:
                return found
        if self._default is not None:
            return self._default
        if model is None:
            raise MissingPrice(
                "a model call named no model, so it cannot be priced: pass model= to "
                "refinekit.record_usage(), or give Prices(..., default=(input, output))",
                model=None,
            )
        raise MissingPrice(
            f"no price for model {model!r}: add it to the prices, e.g. "
            f"Prices({{{model!r}: (input, output)}}) per million tokens, or give "
            "Prices(..., default=(input, output))",
            model=model,
        )

    def _key(self) -> tuple[Any, ...]:
        table = None if self._table is None else tuple(sorted(self._table.items()))
        return (table, self._function, self._default)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prices):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._table, self._function, self._default)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._table, self._function, self._default = state

    def __repr__(self) -> str:
        if self._function is not None:
            return f"Prices({self._function!r})"
        extra = "" if self._default is None else f", default={self._default!r}"
        return f"Prices({self._table!r}{extra})"


def _limit(name: str, value: object, *, integer: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        kind = "an int" if integer else "a number"
        raise TypeError(f"Budget: {name} must be {kind} or None, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"Budget: {name} must be above 0 (or None for no limit), got {value!r}")


@dataclass(frozen=True)
class Budget:
    """Limits on what one job may spend on model calls: tokens, cost and calls.

    Give it to any decorator (`budget=`) or to `refinekit.job(budget=...)`. It counts the
    whole job: the answer calls, corrections, revisions and judge calls, answer and judge
    together. Nested decorators share the job's budget; an inner decorator's `budget=` can
    only tighten it, for the time of its own call. See docs/budgets.md.

    Attributes:
        max_tokens: Most tokens (prompt plus completion), or None.
        max_cost: Most cost, in the currency of `prices`, or None. Needs `prices`.
        max_calls: Most model calls, or None.
        prices: The prices to compute cost with (also without `max_cost`: then the job,
            its outcomes, events and errors carry a cost, and nothing is limited by it).

    Raises:
        TypeError: A limit of the wrong type; `prices` not a `refinekit.Prices`.
        ValueError: A limit that is not above 0; `max_cost` without `prices`; no limit and no
            prices at all.
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    max_calls: int | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        _limit("max_tokens", self.max_tokens, integer=True)
        _limit("max_cost", self.max_cost, integer=False)
        _limit("max_calls", self.max_calls, integer=True)
        if self.prices is not None and not isinstance(self.prices, Prices):
            raise TypeError(
                "Budget: prices must be a refinekit.Prices, e.g. "
                f"Prices({{'gpt-4.1-mini': (0.40, 1.60)}}), not {type(self.prices).__name__}"
            )
        if self.max_cost is not None and self.prices is None:
            raise ValueError(
                "Budget: max_cost needs prices to compute a cost with: "
                "Budget(max_cost=..., prices=refinekit.Prices({'model': (input, output)}))"
            )
        if (
            self.max_tokens is None
            and self.max_cost is None
            and self.max_calls is None
            and self.prices is None
        ):
            raise ValueError(
                "Budget: give at least one of max_tokens, max_cost, max_calls (or prices, to "
                "count cost without a limit)"
            )

    def tightened(self, inner: Budget) -> Budget:
        """This budget with `inner`'s limits where they are lower (the job's prices first)."""

        def low(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return Budget(
            max_tokens=low(self.max_tokens, inner.max_tokens),
            max_cost=low(self.max_cost, inner.max_cost),
            max_calls=low(self.max_calls, inner.max_calls),
            prices=self.prices if self.prices is not None else inner.prices,
        )


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
