"""A first call's wait for its turn, while concurrent first calls of a function ramp up.

Nothing is known of a first call's tokens or cost before its reply. Under a token or cost
limit, a job keeps, per function, a `Ramp` (`refinekit._engine.ledger`): one first call
until one is measured, then as many as measured. A first call that must wait for its turn
gets `NotYet` with a `Turn`; the flow waits for it with the `WaitTurn` command (the attempt
step, `refinekit._engine.attempt`), woken from whatever thread or event loop ends a first
call.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

__all__ = ["NotYet", "Turn", "WaitTurn"]


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
    """A first call must wait for its turn (`Ramp`): the attempt step waits, then asks again."""

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
