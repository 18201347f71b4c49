"""What a job's calls in flight hold of its budget, and how a counted reply settles it.

A call's `Reservation` (`refinekit._engine.reserve`) holds amounts (`Held`) of its job's
budget from before it is sent; the job keeps the total its calls in flight hold
(`reserved_of`). When the job counts a reply (`refinekit._engine.job`), `settle` turns what
the reply used from held into spent, through the reservation it was made under (the current
one, `HELD`) and those that one sits in.
"""

from __future__ import annotations

import math
from contextvars import ContextVar
from typing import TYPE_CHECKING

from .._core.types import Usage

if TYPE_CHECKING:
    from .job import Job
    from .prices import Prices
    from .reserve import Reservation

__all__ = ["HELD", "NOTHING", "Held", "reserved_of", "settle"]


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


HELD: ContextVar[Reservation | None] = ContextVar("refinekit_reservation", default=None)
"""The reservation of the attempt (or revision) the code runs in: calls made inside it take
their share from it, and replies counted inside it settle it."""


def reserved_of(job: Job) -> Held:
    """What `job`'s calls in flight hold, made at its first reservation (the lock is held)."""
    reserved = job._reserved
    if reserved is None:
        reserved = job._reserved = Held()
    return reserved


def settle(job: Job, usage: Usage, model: str | None, reservation: Reservation | None) -> None:
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
