"""Jobs (budgets and usage shared by nested refinekit calls) and the current attempt.

A job is a `Ledger` (`refinekit._engine.ledger`: its accounts, kept only through that
module's functions) with the budget it runs under (its own, tightened for a while by an
inner decorator's: `join` / `leave`, `effective`) and its cost (`cost_of`). How a job is held
to its budget imports this module: `refinekit._engine.budget` (what is spent, the error that
stops a job) and `refinekit._engine.reserve` (what a call reserves before it is sent).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from .._core.types import AttemptInfo, ContextDocument, Cost, Usage
from .ledger import Ledger, add_judge_usage, add_usage, check_budget_option, in_use
from .ledger import per_model as _per_model
from .prices import Budget, Prices

__all__ = [
    "LISTENING",
    "Job",
    "check_budget_option",
    "cost_of",
    "current_attempt",
    "current_job",
    "effective",
    "in_use",
    "job",
    "join",
    "leave",
    "record_context",
    "record_usage",
]

_JOB: ContextVar[Job | None] = ContextVar("refinekit_job", default=None)
_ATTEMPT: ContextVar[AttemptInfo | None] = ContextVar("refinekit_attempt", default=None)
LISTENING: ContextVar[bool] = ContextVar("refinekit_stream_listening", default=False)
"""Whether the flow runs under `fn.stream(...)`: its `Emit`s reach a consumer, and it goes
only as fast as the consumer asks (`refinekit._engine.streaming`)."""


_SCOPE: ContextVar[tuple[Job, Budget] | None] = ContextVar("refinekit_budget", default=None)


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


def cost_of(
    job: Job,
    prices: Prices | None = None,
    *,
    per_model: dict[tuple[bool, str | None], Usage] | None = None,
) -> Cost | None:
    """The job's cost so far with `prices` (default: the effective budget's); None without.

    `per_model`: the job's usage per model when the caller holds the job's lock.

    Raises:
        MissingPrice: A model the job called has no price.
    """
    if prices is None:
        if not in_use():
            return None
        budget = effective(job)
        prices = None if budget is None else budget.prices
        if prices is None:
            return None
    answer = judge = 0.0
    models = _per_model(job) if per_model is None else per_model
    for (is_judge, model), usage in models.items():
        value = prices.cost(model, usage.prompt_tokens, usage.completion_tokens)
        if is_judge:
            judge += value
        else:
            answer += value
    return Cost(answer, judge)


class Job(Ledger):
    """The budgets and usage of one unit of work.

    The outermost refinekit call opens a job and every refinekit call inside it joins that job,
    so a correction budget is spent once per job: an outer retry does not reset it. Jobs live
    in a `contextvars` context, so concurrent jobs (threads, asyncio tasks started outside a
    job) never share counters. Open one yourself with `refinekit.job()` to make, for example,
    every re-run of one queue message a single job.

    Attributes:
        id: A short random id, carried by every event of the job.
    """

    __slots__ = ("_budget", "_token", "id")

    def __init__(self, budget: Budget | None = None) -> None:
        super().__init__()
        self.id = os.urandom(6).hex()
        self._budget = check_budget_option(budget)
        self._token: Token[Job | None] | None = None

    @property
    def budget(self) -> Budget | None:
        """The job's `refinekit.Budget` (given to `job()` or the decorator that opened it)."""
        return self._budget

    @property
    def cost(self) -> Cost | None:
        """What the job's model calls cost so far (answer and judge apart); None without prices.

        Priced with the job budget's `prices`.

        Raises:
            MissingPrice: A model the job called has no price.
        """
        if self._budget is None or self._budget.prices is None:
            return None
        return cost_of(self, self._budget.prices)

    def __enter__(self) -> Job:
        if self._token is not None:
            raise RuntimeError("this refinekit job is already open; call refinekit.job() again")
        self._token = _JOB.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _JOB.reset(self._token)
            self._token = None

    async def __aenter__(self) -> Job:
        return self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)

    def __repr__(self) -> str:
        return f"<refinekit.Job {self.id} corrections_used={self.corrections_used}>"


def job(*, budget: Budget | None = None) -> Job:
    """Open a new job explicitly: `with refinekit.job(): ...` or `async with refinekit.job(): ...`.

    Every refinekit call inside the block joins this job and shares its budgets, however
    often your code re-runs them. A `job()` block always starts a fresh job, even inside
    another one (with its own usage and budget).

    Args:
        budget: A `refinekit.Budget` for everything inside the block: answer calls,
            corrections and judge calls (see docs/budgets.md). A decorator's `budget=` inside
            can only tighten it.

    Returns:
        The job, a sync and async context manager.

    Raises:
        TypeError: `budget` is not a `refinekit.Budget`.
    """
    return Job(budget)


def current_job() -> Job | None:
    """The job the calling code runs in, or None outside any refinekit call or `job()` block."""
    return _JOB.get()


def current_attempt() -> AttemptInfo | None:
    """What attempt of `@retry_on_low_quality` is running, and the feedback it got.

    Returns:
        The attempt's number, its maximum, and the latest rejection's feedback and answer;
        inside a `@reviewed` function (which never re-runs it), and inside a case of
        `refinekit eval`, attempt 1 of 1; None outside all of these.
    """
    return _ATTEMPT.get()


def record_context(
    documents: Iterable[ContextDocument | str | Mapping[str, Any]] | ContextDocument | str,
) -> None:
    """Record the documents the current answer is built from, for the evaluator to see.

    Call it inside a function decorated with `@retry_on_low_quality`, e.g. right after
    retrieval. The documents land in `EvaluationRequest.context` of this attempt only (a
    retry records its own); the accepted (or returned best) attempt's documents also go to an
    enclosing attempt, so an outer evaluator sees what the answer was built on. Inside a case
    of `refinekit eval` they reach the run's judge. Anywhere else it does nothing, so the
    function still works undecorated.

    Args:
        documents: One document or several: `str`, a mapping with `text` (and `source`), or
            `ContextDocument`.

    Raises:
        TypeError: A document has none of the accepted shapes.
    """
    if isinstance(documents, (str, ContextDocument, Mapping)):
        docs = [ContextDocument.coerce(documents)]
    elif isinstance(documents, Iterable):
        docs = [ContextDocument.coerce(d) for d in documents]
    else:
        raise TypeError(
            "record_context() takes a document (a str, a mapping with 'text', a "
            f"ContextDocument) or an iterable of them, not {type(documents).__name__}"
        )
    info = _ATTEMPT.get()
    if info is not None:
        info._context.extend(docs)


def record_usage(
    input_tokens: int = 0,
    output_tokens: int = 0,
    *,
    calls: int = 1,
    judge: bool = False,
    model: str | None = None,
) -> None:
    """Count a model call whose reply refinekit does not see in the current job's usage.

    refinekit counts the usage of the replies a decorated function returns (see
    docs/sdks.md). A function that returns text it got elsewhere (a `str` from an SDK
    refinekit does not read, a streamed reply, several calls made to build one answer)
    reports them here, so they count in `Job.usage` like any reply. Call it once per model
    call, or once with the sums and `calls=`. Do not call it for a reply the function
    returns as it is: that reply is counted already.

    Inside a refinekit call or a `job()` block it adds to that job; anywhere else it does
    nothing, so the function still works undecorated.

    Args:
        input_tokens: The call's prompt (input) tokens, cached ones included.
        output_tokens: The call's completion (output) tokens.
        calls: How many model calls these tokens are for, >= 0.
        judge: True for a call a judge (your own evaluator) made: it counts in
            `Job.judge_usage` instead of `Job.usage`.
        model: The model the call went to, to price it with the job's `refinekit.Prices`
            (a job with prices and a call without a model needs `Prices(default=...)`).

    Raises:
        TypeError: A count is not an int, or `model` is not a str.
        ValueError: A count is negative.
    """
    for name, value in (
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
        ("calls", calls),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"record_usage(): {name} is an int, not {type(value).__name__}")
        if value < 0:
            raise ValueError(f"record_usage(): {name} must be >= 0, got {value}")
    if model is not None and not isinstance(model, str):
        raise TypeError(f"record_usage(): model is a str, not {type(model).__name__}")
    current = _JOB.get()
    if current is None:
        return
    usage = Usage(model_calls=calls, prompt_tokens=input_tokens, completion_tokens=output_tokens)
    if judge:
        add_judge_usage(current, usage, model or None)
    else:
        add_usage(current, usage, model=model or None)


def enter_attempt(info: AttemptInfo) -> Token[AttemptInfo | None]:
    """Make `info` the current attempt; `leave_attempt` with the token restores the previous."""
    return _ATTEMPT.set(info)


def leave_attempt(token: Token[AttemptInfo | None]) -> None:
    """Restore the attempt that was current before `enter_attempt` gave `token`."""
    _ATTEMPT.reset(token)


JobToken = tuple["Token[Job | None] | None", "Token[Any] | None"]
"""What `enter_job` gives `leave_job`: the job's token (None: joined), the budget's."""


def enter_job(budget: Budget | None = None) -> tuple[Job, JobToken]:
    """Join the current job, or open one, bringing a decorator's `budget=` to it.

    A job opened here takes `budget` as its own; a joined job's budget is tightened by it
    for the call (see `join`).
    """
    current = _JOB.get()
    if current is not None:
        return current, (None, join(current, budget, opened=False))
    new = Job(budget)
    return new, (_JOB.set(new), None)


def leave_job(token: JobToken) -> None:
    """Leave the job `enter_job` joined or opened (closing it when it was opened there)."""
    job_token, budget_token = token
    leave(budget_token)
    if job_token is not None:
        _JOB.reset(job_token)
