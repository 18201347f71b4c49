"""The I/O-free way refinekit's loops are written once for sync and async, calls and streams.

A loop (retry, correction, composite evaluation) is a generator that yields *commands*
("call the function", "evaluate this", "sleep N seconds") and receives their results. One pair
of drivers runs the commands: `drive_sync` with plain calls and `time.sleep`, `drive_async`
with `await` and `asyncio.sleep`. No behaviour lives in a driver, so none exists on one side
only. This is the shape of httpx's auth flows.

A call is a stream with no items: an `Emit` command hands its item to the consumer of
`fn.stream(...)` (`drive_sync` yields it and resumes the flow when the consumer asks for the
next one; `drive_async` awaits its `emit` callback), and a flow driven as a plain call
(`run_sync` / `run_async`, thin uses of the drivers) emits nothing.

Before each command the drivers ask the job's budget (`refinekit._engine.budget.check`): a job a
counted call has taken over a limit gets `BudgetExceeded` thrown into the flow at that step,
as a failed command's error is, instead of running the command. With an instrument installed
(`refinekit._engine.events.instruments`), each command runs as the instruments give it back.

A command whose type is in `OPENERS` (a stream's reader: `refinekit._engine.streaming.Open`)
gives the flow something to close; however the flow ends (returned, raised, cancelled, its
stream closed by the consumer), the drivers close what it opened (`close()` on the sync side,
`aclose()` on the async side), so a stream's HTTP response never outlives its flow. Closing
twice is harmless.

A command may describe itself to instruments (see `Command`): its `role`, and, when it runs
other commands, `map_commands`.
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
    role = "attempt"

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
    role = "evaluation"

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
    role = "wait"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run_sync(self) -> None:
        time.sleep(self.seconds)

    async def run_async(self) -> None:
        await asyncio.sleep(self.seconds)


class Command(Protocol):
    """Anything a flow may yield: it knows how to run blocking and how to run awaited.

    What an instrument may read of a command, when the command has it (a class attribute or
    a method; nothing else of refinekit reads them):

    - `role`: "attempt" (it runs the function, or asks for a revision: the call's next
      attempt), "wait" (before the next attempt), "evaluation" (`evaluator`, `request`),
      "model_request" (a judge model's request: `judge`, with its `model`, `provider` and
      `where`, and the request's `kwargs`), "time_limit" (`command`, `seconds`), "gather"
      (`commands`), "cached" (`command`, made only on a miss);
    - `map_commands(change)`: the same command running `change(c)` for each command `c` it
      runs (`Gather`, `Timed`, a judge cache's lookup).
    """

    def run_sync(self) -> Any: ...

    def run_async(self) -> Awaitable[Any]: ...


class Gather:
    """Run several commands at once: threads on the sync path, tasks on the async path.

    The flow receives one result per command, in order; a command that raised gives its
    exception as its result (as `asyncio.gather(..., return_exceptions=True)` does), so the
    flow decides which failure matters. Each thread runs in a copy of the caller's context.
    """

    __slots__ = ("commands",)
    role = "gather"

    def __init__(self, commands: Sequence[Command]):
        self.commands = tuple(commands)

    def map_commands(self, change: Callable[[Command], Command]) -> Gather:
        return Gather([change(c) for c in self.commands])

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
    role = "time_limit"

    def __init__(self, command: Command, seconds: float):
        self.command = command
        self.seconds = seconds

    def map_commands(self, change: Callable[[Command], Command]) -> Timed:
        return Timed(change(self.command), self.seconds)

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


class Emit:
    """Hand `item` to the consumer of `fn.stream(...)`; nothing without one.

    The drivers hand it over themselves (it runs no budget check and no instrument).
    """

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def run_sync(self) -> None:
        return None

    async def run_async(self) -> None:
        return None


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

Hand = Callable[[Any], Awaitable[None]]
"""Where `drive_async` hands an emitted item: it returns when the consumer wants the next."""


def drive_sync(flow: Flow[T], result: list[T]) -> Generator[Any, None, None]:
    """Run `flow` with blocking calls; yield the item of each `Emit` it yields.

    The flow resumes when the next item is asked for; its value is appended to `result` (a
    generator's own return value would cost an exception on every call). Closing the
    generator closes the flow.
    """
    installed = _hooks.instruments
    value: Any = None
    error: Exception | None = None
    opened: list[Any] | None = None
    try:
        while True:
            try:
                command = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                result.append(stop.value)
                return
            error = None
            kind = type(command)
            if kind is Emit:
                value = None
                yield command.item  # type: ignore[attr-defined]  # an Emit (`kind`)
                continue
            try:
                _budget.check()  # a job over its budget goes no further
                value = (_hooks.observed(installed, command) if installed else command).run_sync()
                if kind in OPENERS:
                    opened = [value] if opened is None else [*opened, value]
            except Exception as exc:
                value, error = None, exc
    except BaseException:
        flow.close()
        raise
    finally:
        if opened:
            _close_sync(opened)


async def drive_async(flow: Flow[T], emit: Hand | None = None) -> T:
    """Run `flow` on the running event loop (never blocking it); hand each `Emit`'s item to `emit`.

    Returns:
        The flow's value. An item emitted with no `emit` (a plain call) goes nowhere.
    """
    installed = _hooks.instruments
    value: Any = None
    error: Exception | None = None
    opened: list[Any] | None = None
    try:
        while True:
            try:
                command = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            kind = type(command)
            if kind is Emit:
                value = None
                if emit is not None:
                    await emit(command.item)  # type: ignore[attr-defined]  # an Emit
                continue
            try:
                _budget.check()  # a job over its budget goes no further
                if installed:
                    value = await _hooks.observed(installed, command).run_async()
                else:
                    value = await command.run_async()
                if kind in OPENERS:
                    opened = [value] if opened is None else [*opened, value]
            except Exception as exc:
                value, error = None, exc
    except BaseException:
        flow.close()
        raise
    finally:
        if opened:
            await _close_async(opened)


def run_sync(flow: Flow[T]) -> T:
    """Drive a flow to its value with blocking calls (`drive_sync`, as a call: no consumer)."""
    result: list[T] = []
    for _ in drive_sync(flow, result):
        pass  # an item with no consumer goes nowhere
    return result[0]


run_async = drive_async
"""Drive a flow to its value on the running event loop: `drive_async` as a call (no `emit`)."""
