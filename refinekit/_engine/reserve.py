"""Reservations: what a model call holds of its job's budget from before it is sent.

Every model call refinekit makes or starts reserves its share of the job's budget before it
is sent, atomically under the job's lock (threads sharing a job's context and asyncio tasks
alike), and is not made when that share does not fit in what is neither spent nor held by
the calls in flight (`BudgetExceeded`):

- `before_attempt(...)`: an attempt of the wrapped function (a first call: one call; another
  attempt or a correction: the previous attempt's own usage plus its feedback or correction
  turn, characters / 4); current until released, so that the calls made inside it take
  their share from it. The first calls of one function ramp up under a token or cost limit
  (`ledger.Ramp`: one until one is measured, then as many as measured, at the largest
  measured usage), waiting for their turn (`NotYet`; the attempt step waits for it);
- `before_call(...)`: a revision (one call, its prompt's estimate);
- `judge_call(...)` / `judge_calls(...)`: a judge's request (one call, its prompt's
  characters / 4), or a judge's concurrent requests reserved together, in order (`Tickets`);
  `ensure(...)`: a rating judge's retried request.

A stream being read holds its usage so far in its reservation as it arrives (`StreamHold`).
Counting a reply (`refinekit._engine.ledger.count`) settles the reservation it was made
under, and `Reservation.release` gives back what is left when the call has ended, failed or
was cancelled. The job's accounts and their lock are `ledger`'s, reached through its
functions; what is spent, and the error that stops a job, are `budget`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from .._core.errors import BudgetExceeded
from .._core.types import Usage
from .budget import estimate_tokens, exceeded, request_tokens, spent_of, streamed_over
from .job import LISTENING, Job, current_job, effective, in_use
from .ledger import HELD, NOTHELD, NOTHING, Held, Reservation, locked, ramp_of, reserved_of
from .prices import Budget
from .ramp import NotYet

__all__ = [
    "NOTHELD",
    "Held",
    "Reservation",
    "StreamHold",
    "Tickets",
    "before_attempt",
    "unaffordable",
    "before_call",
    "ensure",
    "judge_call",
    "judge_calls",
]


def _refusal(
    job: Job, budget: Budget, planned: str, need: Held, lendable: Held
) -> BudgetExceeded | None:
    """Why a call needing `need` cannot be made now (under the job's lock); None if it fits.

    `lendable` is what the call may take over from the reservation it runs in. It fits a
    limit when what is spent, plus what calls in flight hold, plus what it needs beyond
    `lendable`, is within it, and something is left for it at all (a limit spent in full,
    or held in full by calls in flight, leaves nothing, whatever the estimate).
    """
    spent_tokens, spent_calls, spent_cost = spent_of(job, budget, locked=True)
    reserved = reserved_of(job)
    checks: list[tuple[str, float | None, float, float, float, float]] = [
        ("max_calls", budget.max_calls, spent_calls, reserved.calls, lendable.calls, need.calls),
        (
            "max_tokens",
            budget.max_tokens,
            spent_tokens,
            reserved.tokens,
            lendable.tokens,
            need.tokens,
        ),
    ]
    if spent_cost is not None:
        checks.append(
            ("max_cost", budget.max_cost, spent_cost.total, reserved.cost, lendable.cost, need.cost)
        )
    for limit, maximum, spent, held, lent, needed in checks:
        if maximum is None:
            continue
        others = max(0, held - lent)  # held by other calls in flight
        fresh = max(0, needed - lent)
        if spent + others >= maximum or spent + held + fresh > maximum:
            return exceeded(job, limit, maximum, spent, spent_cost, needed, planned, others)
    return None


def _current_parent(job: Job) -> Reservation | None:
    parent = HELD.get()
    if parent is None or parent.job is not job or not parent.open:
        return None
    return parent


def unaffordable(job: Job, budget: Budget, planned: str, need: Held) -> BudgetExceeded | None:
    """Why a call needing `need` could not be made now (nothing reserved); None if it fits.

    As `_grant` decides it: what the reservation the code runs in holds is lent to it.
    """
    with locked(job):
        parent = _current_parent(job)
        return _refusal(job, budget, planned, need, parent.held if parent is not None else NOTHING)


def _grant(job: Job, budget: Budget, planned: str, need: Held) -> Reservation:
    """Reserve `need` for a call, or raise why it cannot be made."""
    with locked(job):
        return _grant_locked(job, budget, planned, need)


def _grant_locked(job: Job, budget: Budget, planned: str, need: Held) -> Reservation:
    """`_grant`, the job's lock held."""
    parent = _current_parent(job)
    lendable = parent.held if parent is not None else NOTHING
    refused = _refusal(job, budget, planned, need, lendable)
    if refused is not None:
        raise refused
    held = Reservation(job, parent, budget.prices)
    taken, reserved = held.taken, reserved_of(job)
    taken.calls = min(need.calls, lendable.calls)
    taken.tokens = min(need.tokens, lendable.tokens)
    taken.cost = min(need.cost, lendable.cost)
    if parent is not None:
        parent.held.calls -= taken.calls
        parent.held.tokens -= taken.tokens
        parent.held.cost -= taken.cost
    reserved.calls += need.calls - taken.calls
    reserved.tokens += need.tokens - taken.tokens
    reserved.cost += need.cost - taken.cost
    held.held = Held(need.calls, need.tokens, need.cost)
    return held


def _price_of(budget: Budget, model: str | None, tokens: int) -> float:
    """`tokens` prompt tokens of `model`, priced with a cost limit (unknown model: 0)."""
    if budget.max_cost is None or budget.prices is None or model is None:
        return 0.0
    return budget.prices.cost(model, tokens, 0)


def before_attempt(
    job: Job,
    planned: str,
    previous: Reservation | None,
    extra_chars: int,
    *,
    first_of: str | None = None,
) -> Reservation:
    """Before a call of the wrapped function (`planned`): reserve its estimate, or stop.

    The first call's estimate is one call (nothing is known of its tokens or cost: it is
    refused only when a limit is already spent, or held by calls in flight, in full).
    Another one's is the previous attempt's own usage (what was counted inside `previous`,
    its reservation: its calls, at least one, its tokens and cost, the calls of decorators
    inside it too, and nothing of the calls running beside it) plus what the new attempt
    adds to the prompt (`extra_chars`, the feedback or the correction turn: characters / 4)
    as prompt tokens (priced, with a cost limit, at the previous attempt's cost per token).

    `first_of`: the function, for a first call (`previous` None) that ramps up (see `Ramp`):
    under a token or cost limit, a first call made outside any other reservation of the job
    is estimated at the largest usage a first call of the function had in the job, and
    waits (`NotYet`) while as many first calls of it are in flight as have been measured
    (at least one).

    Returns:
        The reservation, current until released (what the function's calls count settles
        it); `NOTHELD` without a budget. Release it once the reply is counted, and give it
        as `previous` to the next attempt.

    Raises:
        BudgetExceeded: The estimate does not fit.
        NotYet: A first call that must wait for its turn (the attempt step waits for it).
    """
    if not in_use():
        return NOTHELD
    budget = effective(job)
    if budget is None:
        return NOTHELD
    last = previous.used if previous is not None else NOTHING
    extra = estimate_tokens(extra_chars)
    tokens = last.tokens + extra
    cost = last.cost
    if last.tokens and extra:
        cost += last.cost * extra / last.tokens
    if budget.prices is None:
        cost = 0.0
    ramped = (
        first_of is not None
        and previous is None
        and (budget.max_tokens is not None or budget.max_cost is not None)
        and not LISTENING.get()
    )
    if not ramped:
        held = _grant(job, budget, planned, Held(max(1, last.calls), tokens, cost))
    else:
        assert first_of is not None
        with locked(job):
            if _current_parent(job) is not None:  # inside another call: its estimate covers it
                held = _grant_locked(job, budget, planned, Held(1, tokens, cost))
            else:
                ramp = ramp_of(job, first_of)
                if ramp.in_flight >= max(1, ramp.measured):
                    raise NotYet(ramp.turn())
                known = ramp.largest
                need = Held(max(1, known.calls), known.tokens, known.cost if budget.prices else 0.0)
                held = _grant_locked(job, budget, planned, need)
                ramp.in_flight += 1
                held.ramp = ramp
    held.make_current()
    return held


def before_call(
    job: Job | None,
    planned: str,
    model: str | None,
    tokens: int,
    *,
    current: bool = False,
) -> Reservation:
    """Before a model call refinekit makes: reserve one call of `tokens` prompt tokens.

    With a cost limit the estimate is priced as prompt tokens of `model` (a model that is not
    known, as a custom reviser's, is estimated at no cost; its reply is counted afterwards).

    Args:
        job: The job (None: nothing to hold).
        planned: The call, for the error ("revision 1 of answer").
        model: The model the call goes to, to price the estimate.
        tokens: The estimate of its prompt.
        current: Make the reservation current until released (calls made inside the call,
            `record_usage` in a custom reviser, settle it).

    Returns:
        The reservation (`NOTHELD` without a budget); release it when the call has ended.

    Raises:
        BudgetExceeded: The job is over a limit, or the call does not fit in what is left.
        MissingPrice: A cost limit, and `model` has no price.
    """
    if job is None or not in_use():
        return NOTHELD
    budget = effective(job)
    if budget is None:
        return NOTHELD
    held = _grant(job, budget, planned, Held(1, tokens, _price_of(budget, model, tokens)))
    if current:
        held.make_current()
    return held


def ensure(reservation: Reservation, planned: str, model: str | None, tokens: int) -> None:
    """Before a request under `reservation`: one call of `tokens` prompt tokens.

    For a rating judge's requests as instructor sends them (its schema instruction added,
    each retry after a reply that did not validate): what the reservation lacks of one
    call and `tokens` (priced as `model`'s) is reserved into it, if it fits.

    Raises:
        BudgetExceeded: The request does not fit.
    """
    job = reservation.job
    if job is None or not reservation.open:
        return
    budget = effective(cast(Job, job))
    if budget is None:
        return
    need = Held(1, tokens, _price_of(budget, model, tokens))
    with locked(job):
        held = reservation.held
        if held.calls >= need.calls and held.tokens >= need.tokens and held.cost >= need.cost:
            return
        refused = _refusal(cast(Job, job), budget, planned, need, held)
        if refused is not None:
            raise refused
        reserved = reserved_of(job)
        reserved.calls += max(0, need.calls - held.calls)
        reserved.tokens += max(0, need.tokens - held.tokens)
        reserved.cost += max(0.0, need.cost - held.cost)
        held.calls = max(held.calls, need.calls)
        held.tokens = max(held.tokens, need.tokens)
        held.cost = max(held.cost, need.cost)


def _judge_planned(model: str) -> str:
    return f"judge call to model {model!r}"


def judge_call(
    model: str, request: Mapping[str, Any], ticket: Reservation | None = None
) -> Reservation:
    """Before a judge model's request: its reservation.

    `ticket` when one was reserved for it (`judge_calls`); else one call and its prompt
    (characters / 4) reserved now.

    Raises:
        BudgetExceeded: The job is over a limit, or the call does not fit in what is left.
        MissingPrice: A cost limit, and `model` has no price.
    """
    if ticket is not None and ticket.open:
        return ticket
    if not in_use():
        return NOTHELD
    return before_call(current_job(), _judge_planned(model), model, request_tokens(request))


def judge_calls(model: str, requests: Sequence[Mapping[str, Any]]) -> list[Reservation | None]:
    """A judge's concurrent requests, reserved together (at once, in order, as one step).

    Each request that fits gets its reservation; one that does not gets None, and is sent
    only if, when its turn comes (after a cache miss), what it needs has been freed
    (`judge_call` tries again, and raises `BudgetExceeded` when it still does not fit). The
    caller releases them all when the requests have ended (a cache hit never uses its own).

    Raises:
        MissingPrice: A cost limit, and `model` has no price.
    """
    if not in_use():
        return [None] * len(requests)
    job = current_job()
    budget = None if job is None else effective(job)
    if job is None or budget is None:
        return [None] * len(requests)
    planned = _judge_planned(model)
    needs = []
    for request in requests:
        tokens = request_tokens(request)
        needs.append(Held(1, tokens, _price_of(budget, model, tokens)))
    tickets: list[Reservation | None] = []
    with locked(job):  # one step: no other call takes a share between two of them
        for need in needs:
            try:
                tickets.append(_grant_locked(job, budget, planned, need))
            except BudgetExceeded:
                tickets.append(None)
    return tickets


class Tickets:
    """`judge_calls`' tickets, released together when the block ends (`with ... as tickets`)."""

    __slots__ = ("held",)

    def __init__(self, held: list[Reservation | None]) -> None:
        self.held = held

    def __enter__(self) -> Tickets:
        return self

    def __exit__(self, *exc: object) -> None:
        for ticket in self.held:
            if ticket is not None:
                ticket.release()


class StreamHold:
    """What a stream holds of its job's budget as it arrives, before its usage is counted.

    A stream's request holds its reservation (the attempt's, current when the stream is read)
    from the moment it is sent. As its text arrives, what it has used so far beyond what the
    reservation held when it began is added to that reservation (`grow`): the calls in flight
    beside it (other streams, other calls) see it as held, so that streams sharing a job stop
    together when their sum passes a limit, not each at the limit on its own. Counting the
    stream's usage settles it, as any reply's.
    """

    __slots__ = ("_base_cost", "_base_tokens", "_cost", "_tokens", "budget", "job", "node")

    def __init__(self, job: Job, budget: Budget) -> None:
        self.job = job
        self.budget = budget
        self.node = _current_parent(job)
        node = self.node
        self._base_tokens = node.held.tokens if node is not None else 0
        self._base_cost = node.held.cost if node is not None else 0.0
        self._tokens = 0  # what this stream added to the reservation
        self._cost = 0.0

    def grow(self, running: Usage, model: str | None) -> BudgetExceeded | None:
        """Hold `running` (the stream's usage so far); why to stop it now (None: go on).

        Stop: what is spent plus what every call in flight holds (this stream's usage so far
        included) passes `max_tokens` or `max_cost`.
        """
        job, budget, node = self.job, self.budget, self.node
        cost = None
        if budget.prices is not None and budget.max_cost is not None:
            try:
                cost = budget.prices.cost(model, running.prompt_tokens, running.completion_tokens)
            except Exception:  # a missing price: the job's own check raises it when counted
                cost = None
        with locked(job):
            reserved = reserved_of(job)
            if node is not None and node.open:
                more = max(0, running.total_tokens - self._base_tokens) - self._tokens
                if more > 0:
                    node.held.tokens += more
                    reserved.tokens += more
                    self._tokens += more
                if cost is not None:
                    extra = max(0.0, cost - self._base_cost) - self._cost
                    if extra > 0:
                        node.held.cost += extra
                        reserved.cost += extra
                        self._cost += extra
                held_tokens, held_cost = reserved.tokens, reserved.cost
            else:  # nothing reserved for it: its own usage, beside what the others hold
                held_tokens = reserved.tokens + running.total_tokens
                held_cost = reserved.cost + (cost or 0.0)
            spent_tokens, _, spent_cost = spent_of(job, budget, locked=True)
        if budget.max_tokens is not None and spent_tokens + held_tokens > budget.max_tokens:
            return streamed_over(job, "max_tokens", budget.max_tokens, spent_tokens, held_tokens)
        if (
            budget.max_cost is not None
            and cost is not None
            and spent_cost is not None
            and spent_cost.total + held_cost > budget.max_cost
        ):
            total = spent_cost.total
            return streamed_over(job, "max_cost", budget.max_cost, total, held_cost)
        return None
