"""The one bridge between sync code, worker threads and event loops.

- `is_async_callable(obj)`: whether calling `obj` gives a coroutine to await. Every place that
  picks the sync or the async path asks it: the decorators, the evaluator adapter, the reviser.
- `in_thread(fn, ...)`: from async code, run a blocking call in a worker thread, awaited.
- `run_blocking(make)`: from sync code, run a coroutine to its end (on an event loop of its
  own, in a worker thread when this thread already runs one).
- `in_worker(fn)`: start a blocking call in a worker thread; a `concurrent.futures.Future`.

All three run the call in a copy of the caller's `contextvars` context, so it still sees the
current job and attempt. The workers are daemon threads, reused while busy work comes in: a
call that was abandoned (its caller timed out, was cancelled or interrupted) never holds up
the event loop's or the interpreter's shutdown, and there is no cap on how many run at once
(an event loop's default executor has `min(32, CPUs + 4)` threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeGuard, TypeVar

__all__ = ["in_thread", "in_worker", "is_async_callable", "run_blocking"]

P = ParamSpec("P")
T = TypeVar("T")

_IDLE_SECONDS = 30.0
"""How long an idle worker thread waits for more work before it ends."""


def is_async_callable(obj: object) -> TypeGuard[Callable[..., Awaitable[Any]]]:
    """Whether calling `obj` gives a coroutine: refinekit then awaits it on the async path.

    True for an `async def` function or method, a `functools.partial` of one, and an object
    whose class defines `async def __call__` (or a partial of one). A class is never async
    to call (calling it makes an instance), whatever its `__call__`.
    """
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    if inspect.isclass(obj) or inspect.isroutine(obj):
        return False
    call = getattr(obj, "__call__", None)  # noqa: B004 - an async callable object
    while isinstance(call, functools.partial):
        call = call.func
    return inspect.iscoroutinefunction(call)


class _Workers:
    """Daemon threads that run blocking calls; an idle one is reused, none is ever joined."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = 0
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._work.put(work)
                return
        threading.Thread(target=self._run, args=(work,), name="refinekit", daemon=True).start()

    def _run(self, work: Callable[[], None]) -> None:
        while True:
            work()
            del work  # nothing of a finished call stays referenced while idle
            with self._lock:
                self._idle += 1
            try:
                work = self._work.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    # `submit` puts work under the lock: nothing queued now means no caller
                    # counted on this worker, so it may end.
                    try:
                        work = self._work.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


_WORKERS = _Workers()


def in_worker(fn: Callable[[], T]) -> Future[T]:
    """Start `fn()` in a worker thread, in a copy of this context; its future.

    The future is never cancelled by refinekit: a caller that stops waiting leaves the call
    to finish (or fail) on its own, and its outcome is dropped.
    """
    future: Future[T] = Future()
    context = contextvars.copy_context()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = context.run(fn)
        except BaseException as exc:  # handed to whoever waits, whatever it is
            future.set_exception(exc)
        else:
            future.set_result(result)

    _WORKERS.submit(work)
    return future


async def in_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a worker thread, awaited without blocking the event loop.

    When the awaiting task is cancelled the call runs on to its end in its thread, and its
    outcome is dropped.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()

    def settle(done: Future[T]) -> None:
        if waiter.done():  # the awaiting task was cancelled meanwhile
            return
        error = done.exception()
        if error is None:
            waiter.set_result(done.result())
        else:
            waiter.set_exception(error)

    def handed_back(done: Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, done)

    in_worker(functools.partial(fn, *args, **kwargs)).add_done_callback(handed_back)
    return await waiter


def run_blocking(make: Callable[[], Awaitable[T]]) -> T:
    """Run the awaitable `make()` gives to its end, from sync code; its result.

    With no event loop running in this thread, on a loop of its own here; from inside a
    running loop (a sync call made from async code), on a loop of its own in a worker thread,
    rather than deadlock this one.
    """

    async def runner() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(runner())
    return in_worker(lambda: asyncio.run(runner())).result()
