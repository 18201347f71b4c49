"""The ramp of concurrent first calls: one until one is measured, then as many as measured.

Nothing is known of a first call's tokens or cost before its reply. Under a token or cost
limit, `refinekit._engine.reserve.before_attempt` keeps, per function of a job, a `Ramp`: how
many of its first calls are in flight, how many have been measured, and the largest usage
one had (its estimate for the next). A first call that must wait for its turn gets `NotYet`
with a `Turn`; the flow waits for it with the `WaitTurn` command (`reserve.admit`), woken
from whatever thread or event loop ends a first call.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

from .ledger import Held

if TYPE_CHECKING:
    from .job import Job

__all__ = ["NotYet", "Ramp", "Turn", "WaitTurn"]


class Ramp:
    """The first calls of one function in a job, under a token or cost limit, ramping up.

    Nothing is known of a first call's tokens or cost before its reply, so first calls started
    at once (an `asyncio.gather` of decorated calls, threads) could together pass a limit by
    their whole usage. So, as `refinekit eval --max-cost` does: a first call of the function
    goes alone until one has been measured, then as many at once as have been measured (1, 2,
    4, ... as they end), each estimated at the largest usage measured (its calls, tokens and
    cost), which must fit in what is left. Waiting first calls are woken as one ends.
    """

    __slots__ = ("_waiting", "in_flight", "job", "largest", "measured")

    def __init__(self, job: Job) -> None:
        self.job = job
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


class Turn:
    """One wait for a first call's turn: woken from any thread, awaited or waited on."""

    __slots__ = ("_event", "_future", "_lock", "_woken")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._woken = False
        self._future: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def wake(self) -> None:
        with self._lock:
            self._woken = True
            future = self._future
        self._event.set()
        if future is not None:
            loop, waiter = future
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, waiter)

    def wait(self) -> None:
        self._event.wait()

    async def await_(self) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._woken:
                return
            self._future = (loop, waiter)
        await waiter


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class NotYet(Exception):
    """A first call must wait for its turn (`Ramp`): `admit` waits, then asks again."""

    def __init__(self, turn: Turn) -> None:
        super().__init__("a first call waits for its turn")
        self.turn = turn


class WaitTurn:
    """Wait until a first call of the function ends (a flow's command)."""

    __slots__ = ("turn",)

    def __init__(self, turn: Turn) -> None:
        self.turn = turn

    def run_sync(self) -> None:
        self.turn.wait()

    async def run_async(self) -> None:
        await self.turn.await_()
