"""Sync code on the run's event loop, and the run's event loop under sync code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["call", "in_thread", "run_blocking"]

T = TypeVar("T")


async def call(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`function(*args, **kwargs)` awaited: an `async def` on the loop, a `def` in a thread."""
    if inspect.iscoroutinefunction(function):
        return await function(*args, **kwargs)
    result = await in_thread(function, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` in a daemon thread of its own, in a copy of this context.

    Not `asyncio.to_thread`: the loop's default executor has min(32, CPUs + 4) threads, which
    would cap `--concurrency` for sync functions, and its threads are joined when the loop
    and the interpreter shut down, so an interrupted run would wait for (or hang on) every
    call still in flight. A daemon thread is left behind instead, as the process exits.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the case was cancelled meanwhile
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def run() -> None:
        try:
            result, error = context.run(function, *args, **kwargs), None
        except BaseException as e:  # handed to the awaiting case, whatever it is
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="refinekit-eval", daemon=True).start()
    return await future


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end from sync code, on a loop of its own.

    When a loop is already running in this thread (a notebook), the coroutine runs on a new
    loop in a worker thread, in a copy of this context, and this thread waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="refinekit") as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()
