"""A job's accounts, and the one API every flow keeps them through.

A `Ledger` (the base of `refinekit.Job`) holds what a job has spent (usage per model, answer
and judge apart, each reply counted once), what its calls in flight hold of its budget, the
corrections it used, and the lock they change under. Only this module reads or changes them;
everything else calls its functions:

- `mark(job)` / `count(job, reply, since)`: count a reply once (an outer decorated function
  that returns an inner call's reply does not count it again);
- `add_usage(...)` / `add_judge_usage(...)`: count usage refinekit measured itself (a stream,
  a judge's request, `record_usage`);
- `per_model(job)`, `first_answer(job)`: what was spent, per model, for pricing;
- `take_correction(job, limit)`: one more correction, if any is left;
- `locked(job)`, `reserved_of(job)`, `ramp_of(job, name)`: for `refinekit._engine.reserve`,
  which makes reservations under the job's lock.

A call's `Reservation` holds amounts (`Held`) of its job's budget from before it is sent
(made by `reserve`); counting a reply `settle`s what it used, from held into spent, through
the reservation it was made under (the current one, `HELD`) and those that one sits in;
`Reservation.release` gives back the rest.
"""

from __future__ import annotations

import contextlib
import math
import threading
from contextvars import ContextVar, Token

from .._core.types import Usage
from .._providers.replies import model_of, usage_of
from .prices import Budget, Prices
from .ramp import Turn

__all__ = [
    "HELD",
    "NOTHELD",
    "NOTHING",
    "Held",
    "Ledger",
    "Ramp",
    "Reservation",
    "add_judge_usage",
    "add_usage",
    "check_budget_option",
    "count",
    "first_answer",
    "in_use",
    "locked",
    "mark",
    "per_model",
    "ramp_of",
    "reserved_of",
    "settle",
    "take_correction",
    "tier_corrections",
]


_in_use = False
"""Whether any budget was given (to a decorator or a job) in this process: until one is, the
drivers' check costs one global lookup."""


def in_use() -> bool:
    """Whether any budget was given in this process (until then, nothing is ever checked)."""
    return _in_use


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


class Held:
    """Amounts of a budget held and not yet counted: calls, tokens and cost."""

    __slots__ = ("calls", "cost", "tokens")

    def __init__(self, calls: int = 0, tokens: int = 0, cost: float = 0.0) -> None:
        self.calls = calls
        self.tokens = tokens
        self.cost = cost

    def __repr__(self) -> str:
        return f"Held(calls={self.calls}, tokens={self.tokens}, cost={self.cost:.6g})"


NOTHING = Held()


class Ramp:
    """The first calls of one function in a job, under a token or cost limit, ramping up.

    Nothing is known of a first call's tokens or cost before its reply, so first calls started
    at once (an `asyncio.gather` of decorated calls, threads) could together pass a limit by
    their whole usage. So, as `refinekit eval --max-cost` does: a first call of the function
    goes alone until one has been measured, then as many at once as have been measured (1, 2,
    4, ... as they end), each estimated at the largest usage measured (its calls, tokens and
    cost), which must fit in what is left. Waiting first calls are woken as one ends.
    """

    __slots__ = ("_waiting", "in_flight", "largest", "measured")

    def __init__(self) -> None:
        self.in_flight = 0
        self.measured = 0
        self.largest = Held()
        self._waiting: list[Turn] = []

    def turn(self) -> Turn:
        """A first call's wait for its turn (the job's lock held)."""
        turn = Turn()
        self._waiting.append(turn)
        return turn

    def ended(self, used: Held, completed: bool) -> None:
        """A first call ended, having used `used` (the job's lock held): wake the waiting.

        It measured a first call when it returned (a reply refinekit could not count, a
        `str`, measures nothing: none to wait for) or something was counted in it.
        """
        self.in_flight -= 1
        if completed or used.calls:  # its usage is a measure of the next
            self.measured += 1
            largest = self.largest
            largest.calls = max(largest.calls, used.calls)
            largest.tokens = max(largest.tokens, used.tokens)
            largest.cost = max(largest.cost, used.cost)
        waiting, self._waiting = self._waiting, []
        for turn in waiting:
            turn.wake()


class Ledger:
    """A job's accounts: what it spent, what its calls in flight hold, and their lock.

    The base of `refinekit.Job`; only this module's functions change it.
    """

    __slots__ = (
        "_corrections_used",
        "_counted",
        "_first",
        "_judge_usage",
        "_lock",
        "_models",
        "_ramps",
        "_reserved",
        "_tiers",
        "_usage",
    )

    def __init__(self) -> None:
        self._corrections_used = 0
        # Corrections per escalation tier (function, tier): made by the first one.
        self._tiers: dict[tuple[str, str], int] | None = None
        self._usage = Usage()
        self._judge_usage = Usage()
        self._models: dict[tuple[bool, str | None], Usage] = {}
        self._counted: list[object] = []
        self._first: tuple[str | None, Usage] | None = None
        # One lock per job, whatever shares it (threads with a copy of its context, asyncio
        # tasks): counting a reply, and reserving a call's share before it is sent
        # (`refinekit._engine.reserve`), each happen whole under it.
        self._lock = threading.Lock()
        # What the calls in flight hold of the budget and is not counted yet (calls, tokens,
        # cost); made by the first reservation, so a job without a budget never has one.
        self._reserved: Held | None = None
        # First calls per function ramping up (`Ramp`): made by the first one under a token
        # or cost limit.
        self._ramps: dict[str, Ramp] | None = None

    @property
    def corrections_used(self) -> int:
        """Corrections `@self_correct` has used in this job so far."""
        return self._corrections_used

    @property
    def usage(self) -> Usage:
        """Token usage and calls of the answering model in this job so far (judges apart)."""
        return self._usage

    @property
    def judge_usage(self) -> Usage:
        """Token usage and calls of model judges in this job so far, apart from `usage`."""
        return self._judge_usage


HELD: ContextVar[Reservation | None] = ContextVar("refinekit_reservation", default=None)
"""The reservation of the attempt (or revision) the code runs in: calls made inside it take
their share from it, and replies counted inside it settle it."""


class Reservation:
    """The share of its job's budget a call holds from before it is sent until it is counted.

    Made by `refinekit._engine.reserve`, under the job's lock, only when what is spent, what
    the calls in flight hold and the call's estimate fit the limits. Counting a reply settles
    it (`settle`: what it held turns into spent, through the reservations it sits in), and
    `release` gives back what is left when the call has ended (or failed, or was cancelled):
    to the reservation it took it from, the rest to the job. A context manager: released on
    exit. `NOTHELD` stands for "no budget, nothing held".

    A reservation made inside another one (a call within an attempt of the wrapped function,
    a judge call inside a decorated function) takes what it needs from that one first: the
    attempt's estimate covers what runs inside it, and only what it lacks comes out of what
    is left of the budget.
    """

    __slots__ = ("_token", "held", "job", "open", "parent", "prices", "ramp", "taken", "used")

    def __init__(self, job: Ledger | None, parent: Reservation | None, prices: Prices | None):
        self.job = job
        self.parent = parent
        self.prices = prices
        self.held = Held()
        self.taken = Held()  # what came from `parent`: goes back to it on release
        self.used = Held()  # all that was counted inside it: an attempt's own usage
        self.open = job is not None
        self.ramp: Ramp | None = None  # a first call ramping up: told when it ends
        self._token: Token[Reservation | None] | None = None

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.open or self._token is not None:  # NOTHELD: nothing to do, at no cost
            self.release(completed=exc_type is None)

    def make_current(self) -> None:
        """Make it current (`HELD`) until released: calls made inside it take their share."""
        self._token = HELD.set(self)

    def release(self, *, completed: bool = True) -> None:
        """Give back what is held and not counted; no-op when released already.

        `completed`: the call ended without an error (for a first call ramping up: it
        measured what a first call of its function uses, whatever refinekit could count).
        """
        job = self.job
        if job is not None and self.open:
            with job._lock:
                if self.open:
                    self.open = False
                    parent = self.parent if self.parent is not None and self.parent.open else None
                    _give_back(reserved_of(job), self.held, self.taken, parent)
                    if self.ramp is not None:
                        self.ramp.ended(self.used, completed)
        token = self._token
        if token is not None:
            self._token = None
            with contextlib.suppress(ValueError):  # a flow closed from another context
                HELD.reset(token)

    def __repr__(self) -> str:
        state = "open" if self.open else "released"
        return f"<Reservation {state} {self.held!r}>"


NOTHELD = Reservation(None, None, None)
"""No budget in effect: nothing is held, releasing does nothing."""


def _give_back(reserved: Held, held: Held, taken: Held, parent: Reservation | None) -> None:
    """What `held` has left goes to `parent` (up to what came from it), the rest to the job."""
    back_calls = min(held.calls, taken.calls) if parent is not None else 0
    back_tokens = min(held.tokens, taken.tokens) if parent is not None else 0
    back_cost = min(held.cost, taken.cost) if parent is not None else 0.0
    if parent is not None:
        parent.held.calls += back_calls
        parent.held.tokens += back_tokens
        parent.held.cost += back_cost
    reserved.calls -= held.calls - back_calls
    reserved.tokens -= held.tokens - back_tokens
    reserved.cost = max(0.0, reserved.cost - (held.cost - back_cost))
    held.calls, held.tokens, held.cost = 0, 0, 0.0


def locked(job: Ledger) -> threading.Lock:
    """The job's lock: reservations are made, and replies counted, each whole under it."""
    return job._lock


def reserved_of(job: Ledger) -> Held:
    """What `job`'s calls in flight hold, made at its first reservation (the lock is held)."""
    reserved = job._reserved
    if reserved is None:
        reserved = job._reserved = Held()
    return reserved


def ramp_of(job: Ledger, function: str) -> Ramp:
    """The ramp of `function`'s first calls in `job`, made at its first (the lock is held)."""
    ramps = job._ramps
    if ramps is None:
        ramps = job._ramps = {}
    ramp = ramps.get(function)
    if ramp is None:
        ramp = ramps[function] = Ramp()
    return ramp


def mark(job: Ledger) -> int:
    """A mark to pass to `count` as `since`, taken before calling the wrapped function."""
    return len(job._counted)


def count(job: Ledger, reply: object, since: int | None = None) -> None:
    """Count the token usage a reply carries, once (see `add_usage`).

    Anything that is not a model reply (a str, a pydantic model, a stream, None) adds nothing.
    """
    usage = usage_of(reply)
    if usage is not None:
        add_usage(job, usage, reply, since, model_of(reply))


def add_usage(
    job: Ledger,
    usage: Usage,
    reply: object = None,
    since: int | None = None,
    model: str | None = None,
    reservation: Reservation | None = None,
) -> None:
    """Add a reply's usage, unless a nested refinekit call counted that reply after `since`.

    An outer decorated function often returns the very reply an inner decorated call got;
    it was paid for once, so it is counted once. What is counted settles `reservation`
    (default: the current one; `settle`): it turns from reserved into spent.
    """
    with job._lock:
        if reply is not None:
            if since is not None and any(r is reply for r in job._counted[since:]):
                return
            job._counted.append(reply)
        if job._first is None:
            job._first = (model, usage)
        job._usage = job._usage + usage
        _split(job, False, model, usage)
        if _in_use:  # without any budget, nothing is ever reserved
            settle(job, usage, model, reservation)


def add_judge_usage(
    job: Ledger, usage: Usage, model: str | None = None, reservation: Reservation | None = None
) -> None:
    """Count a judge's reply; it settles `reservation` (default: the current one)."""
    with job._lock:
        job._judge_usage = job._judge_usage + usage
        _split(job, True, model, usage)
        if _in_use:  # without any budget, nothing is ever reserved
            settle(job, usage, model, reservation)


def _split(job: Ledger, judge: bool, model: str | None, usage: Usage) -> None:
    key = (judge, model)
    job._models[key] = job._models.get(key, Usage()) + usage


def per_model(job: Ledger, *, locked: bool = False) -> dict[tuple[bool, str | None], Usage]:
    """The job's usage per (judge?, model name), for pricing.

    `locked`: the caller holds the job's lock (a reservation being made).
    """
    if locked:
        return dict(job._models)
    with job._lock:
        return dict(job._models)


def first_answer(job: Ledger) -> tuple[str | None, Usage] | None:
    """The model and usage of the first answer usage counted (the first call), or None."""
    return job._first


def take_correction(job: Ledger, limit: int, tier: tuple[str, str] | None = None) -> bool:
    """Use one more correction, if fewer than `limit` are used; whether one was.

    `tier`: an escalation tier's (function, tier name): `limit` is then that tier's own,
    counted apart (the job's count still grows).
    """
    with job._lock:
        if tier is not None:
            tiers = job._tiers if job._tiers is not None else {}
            used = tiers.get(tier, 0)
            if used >= limit:
                return False
            tiers[tier] = used + 1
            job._tiers = tiers
        elif job._corrections_used >= limit:
            return False
        job._corrections_used += 1
        return True


def tier_corrections(job: Ledger, tier: tuple[str, str]) -> int:
    """Corrections an escalation tier (function, tier name) has used in the job."""
    tiers = job._tiers
    return 0 if tiers is None else tiers.get(tier, 0)


def settle(job: Ledger, usage: Usage, model: str | None, reservation: Reservation | None) -> None:
    """What a counted reply used turns from reserved into spent (the job's lock is held).

    It settles `reservation` (default: the current one, `HELD`), then the reservations that
    one sits in, as far as each holds enough; usage beyond what they held (a call bigger
    than its estimate, a function that made more calls than its attempt reserved) is simply
    spent, and the next step's `check` stops a job it took over a limit. Each of them also
    adds it to what was `used` inside it: an attempt's own usage, whatever runs beside it.
    """
    if reservation is None:
        reservation = HELD.get()
    node = reservation
    while node is not None and not (node.job is job and node.open):
        node = node.parent
    if node is None:
        return
    calls, tokens = usage.model_calls, usage.total_tokens
    cost = _usage_cost(node.prices, model, usage)  # None: not priced (or no price)
    left = math.inf if cost is None else cost
    reserved = reserved_of(job)
    while node is not None:
        if node.job is job and node.open:
            held, used = node.held, node.used
            used.calls += usage.model_calls
            used.tokens += usage.total_tokens
            used.cost += cost or 0.0
            if calls and held.calls:
                taken = min(calls, held.calls)
                held.calls -= taken
                reserved.calls -= taken
                calls -= taken
            if tokens and held.tokens:
                taken = min(tokens, held.tokens)
                held.tokens -= taken
                reserved.tokens -= taken
                tokens -= taken
            if left > 0 and held.cost > 0:  # unpriced: it settles all the cost held
                part = min(left, held.cost)
                held.cost -= part
                reserved.cost = max(0.0, reserved.cost - part)
                left -= part
        node = node.parent


def _usage_cost(prices: Prices | None, model: str | None, usage: Usage) -> float | None:
    """What `usage` cost with `prices`; None without prices or without a price for `model`."""
    if prices is None:
        return None
    try:
        return prices.cost(model, usage.prompt_tokens, usage.completion_tokens)
    except Exception:  # a missing price is raised by the next step's `check`
        return None
