"""The I/O-free way refinekit's loops are written once for sync and async.

A loop (retry, correction, composite evaluation) is a generator that yields *commands*
("call the function", "evaluate this", "sleep N seconds") and receives their results. Two thin
drivers run the commands: `run_sync` with plain calls and `time.sleep`, `run_async` with
`await` and `asyncio.sleep`. No behaviour lives in a driver, so none exists on one side only.
This is the shape of httpx's auth flows.

Before each command both drivers ask the job's budget (`refinekit._engine.budget.check`): a job a
counted call has taken over a limit gets `BudgetExceeded` thrown into the flow at that step,
as a failed command's error is, instead of running the command.

A command whose type is in `OPENERS` (a stream's reader: `refinekit._engine.streaming.Open`)
gives the flow something to close; however the flow ends (returned, raised, cancelled), the
drivers close what it opened (`close()` on the sync side, `aclose()` on the async side), so a
stream's HTTP response never outlives its flow. Closing twice is harmless.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._core.deadline import DEADLINE, current_deadline
from .._core.errors import TimedOut
from . import budget as _budget
from . import events as _hooks
from .bridge import in_worker

if TYPE_CHECKING:
    from .._core.types import EvaluationRequest, Verdict

T = TypeVar("T")


class Call:
    """Call the wrapped function; the flow receives its return value (or its exception)."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def run_sync(self) -> Any:
        result = self.fn(*self.args, **self.kwargs)
        if type(result) is CoroutineType:
            result.close()  # never awaited on purpose: no "never awaited" warning
            name = getattr(self.fn, "__qualname__", None) or type(self.fn).__name__
            raise TypeError(
                f"{name} returned a coroutine to a sync refinekit decorator, which cannot await "
                "it: declare the function `async def` (or give its class an `async def "
                "__call__`) so that the decorated call is async too"
            )
        return result

    async def run_async(self) -> Any:
        result = self.fn(*self.args, **self.kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


class Evaluate:
    """Judge a request with an evaluator (see `evaluators.as_evaluator`)."""

    __slots__ = ("evaluator", "request")

    def __init__(self, evaluator: Any, request: EvaluationRequest):
        self.evaluator = evaluator
        self.request = request

    def run_sync(self) -> Verdict:
        result: Verdict = self.evaluator.evaluate(self.request)
        return result

    async def run_async(self) -> Verdict:
        result: Verdict = await self.evaluator.aevaluate(self.request)
        return result


class Sleep:
    """Wait before the next attempt."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run_sync(self) -> None:
        time.sleep(self.seconds)

    async def run_async(self) -> None:
        await asyncio.sleep(self.seconds)


class Command(Protocol):
    """Anything a flow may yield: it knows how to run blocking and how to run awaited."""

    def run_sync(self) -> Any: ...

    def run_async(self) -> Awaitable[Any]: ...


class Gather:
    """Run several commands at once: threads on the sync path, tasks on the async path.

    The flow receives one result per command, in order; a command that raised gives its
    exception as its result (as `asyncio.gather(..., return_exceptions=True)` does), so the
    flow decides which failure matters. Each thread runs in a copy of the caller's context.
    """

    __slots__ = ("commands",)

    def __init__(self, commands: Sequence[Command]):
        self.commands = tuple(commands)

    def run_sync(self) -> list[Any]:
        if len(self.commands) <= 1:
            return [_outcome(c.run_sync) for c in self.commands]
        futures = [in_worker(functools.partial(_outcome, c.run_sync)) for c in self.commands]
        return [f.result() for f in futures]

    async def run_async(self) -> list[Any]:
        return list(
            await asyncio.gather(*(c.run_async() for c in self.commands), return_exceptions=True)
        )


class Timed:
    """Run a command with a time limit; past it, the flow receives `TimedOut`.

    The sync path runs the command in a worker thread (in a copy of the caller's context) and
    stops waiting at the limit; the async path runs it as a task and cancels it. Both run the
    command with the limit's deadline in a context variable (`current_deadline()`), the earlier one
    when limits nest: refinekit's judge model calls bound their HTTP requests by it, so an
    abandoned sync worker ends at the deadline too. Another blocking call (a custom
    evaluator's) cannot be interrupted: on the sync path (and for a sync evaluator run in a
    thread on the async path) it finishes in the background and its result is dropped.

    Only an outcome the command gives before the deadline counts: a result or an error that
    comes later (a judge request cut off at the deadline, a verdict made from that failure)
    is dropped and the flow receives `TimedOut`, whichever thread notices first. The
    command's own errors before the deadline (its own `TimeoutError` too) pass unchanged.
    """

    __slots__ = ("command", "seconds")

    def __init__(self, command: Command, seconds: float):
        self.command = command
        self.seconds = seconds

    def _timed_out(self) -> TimedOut:
        return TimedOut(f"no result within {self.seconds:.3g} s")

    def _deadline(self) -> float:
        deadline = time.monotonic() + self.seconds
        outer = current_deadline()
        return deadline if outer is None else min(deadline, outer)

    def run_sync(self) -> Any:
        deadline = self._deadline()
        finished: list[float] = []

        def run() -> Any:
            DEADLINE.set(deadline)  # in the worker's own copy of the context
            try:
                return self.command.run_sync()
            finally:
                finished.append(time.monotonic())

        future = in_worker(run)
        concurrent.futures.wait([future], timeout=max(0.0, deadline - time.monotonic()))
        if not future.done() or finished[0] >= deadline:
            error = None if not future.done() else future.exception()
            raise self._timed_out() from error
        return future.result()

    async def run_async(self) -> Any:
        deadline = self._deadline()
        finished: list[float] = []

        async def run() -> Any:
            DEADLINE.set(deadline)  # in the task's own copy of the context
            try:
                return await self.command.run_async()
            finally:
                finished.append(time.monotonic())

        task = asyncio.ensure_future(run())
        timed_out = False
        try:
            await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
        finally:
            if not task.done():  # timed out, or the caller's task itself was cancelled
                timed_out = True
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({task})
                if not task.cancelled():
                    task.exception()  # retrieved: no "exception was never retrieved"
        if timed_out or finished[0] >= deadline:
            error = None if timed_out or task.cancelled() else task.exception()
            raise self._timed_out() from error
        return task.result()


OPENERS: set[type] = set()
"""Command types whose result must be closed when the flow ends (see the module's docstring)."""


def _close_sync(opened: list[Any]) -> None:
    for resource in opened:
        with contextlib.suppress(Exception):  # the flow's own outcome is what surfaces
            resource.close()


async def _close_async(opened: list[Any]) -> None:
    for resource in opened:
        with contextlib.suppress(Exception):
            close = getattr(resource, "aclose", None)
            if close is not None:
                await close()
            else:
                resource.close()


def _outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except Exception as exc:
        return exc


Flow = Generator[Command, Any, T]


def run_sync(flow: Flow[T]) -> T:
    """Drive a flow with blocking calls (through the installed tracer, if any: `events.tracing`)."""
    tracing = _hooks.tracing
    value: Any = None
    error: Exception | None = None
    opened: list[Any] = []
    try:
        while True:
            try:
                command = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            try:
                _budget.check()  # a job over its budget goes no further
                value = command.run_sync() if tracing is None else tracing.run_sync(command)
                if type(command) in OPENERS:
                    opened.append(value)
            except Exception as exc:
                value, error = None, exc
            except BaseException:
                flow.close()
                raise
    finally:
        if opened:
            _close_sync(opened)


async def run_async(flow: Flow[T]) -> T:
    """Drive a flow on the running event loop; never blocks it. Traced as `run_sync` is."""
    tracing = _hooks.tracing
    value: Any = None
    error: Exception | None = None
    opened: list[Any] = []
    try:
        while True:
            try:
                command = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            try:
                _budget.check()  # a job over its budget goes no further
                if tracing is None:
                    value = await command.run_async()
                else:
                    value = await tracing.run_async(command)
                if type(command) in OPENERS:
                    opened.append(value)
            except Exception as exc:
                value, error = None, exc
            except BaseException:
                flow.close()
                raise
    finally:
        if opened:
            await _close_async(opened)
