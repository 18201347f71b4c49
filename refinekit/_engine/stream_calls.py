"""`fn.stream(...)`: a decorated call driven so that its flow's `Emit`s reach the caller.

The flow runs on the one pair of drivers (`refinekit._engine.flow.drive_sync` /
`drive_async`), which hand each `Emit` command's item to the caller; the flow resumes when the
caller asks for the next item: nothing is read from the model ahead of the caller. When the
flow returns, the decorator's `last(value)` gives the last item (`@self_correct`'s `Final`), if
any.

`stream_sync` / `stream_async` make one call's items: the call's job and the instruments'
`call` context around a driver (the wrapper's `fn.stream(...)` hands them its flow). The caller
gets an `ItemStream` (an iterator) or an `AsyncItemStream` (an async iterator) of them.
Each runs the call in a context of its own, copied when `fn.stream(...)` is called, so that the
call's job, attempt and budget scope never leak into the caller's code between two items, and
the call is cleaned up in its own context wherever the caller drops it. Closing it early
(`close()` / `aclose()`, leaving a `with` block, `break` then garbage collection) closes the
flow: the model's stream is closed at once, and the call ends without an error.

The async stream runs the flow in one task of its own, started at the first item and handed
each request for an item in turn; closing the stream (or cancelling the caller) cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from typing import Any, Generic, TypeVar

from . import events as _hooks
from .flow import Flow, Hand, drive_async, drive_sync
from .job import enter_job, leave_job
from .prices import Budget
from .stream_commands import LISTENING

__all__ = [
    "AsyncItemStream",
    "ItemStream",
    "stream_async",
    "stream_sync",
]

I_co = TypeVar("I_co", covariant=True)

Last = Callable[[Any], Any]
"""The item a flow's return value gives the stream last (None: no item)."""

Run = Callable[[Hand], Coroutine[Any, Any, None]]
"""An async call's items: run, it hands each to its argument (an `AsyncItemStream`'s)."""


MakeFlow = Callable[..., Flow[Any]]
"""A decorator's flow: `(cfg, fn, args, kwargs, job, record) -> Flow`."""

Args = tuple[Any, ...]
Kwargs = dict[str, Any]


@contextlib.contextmanager
def _streamed(
    flow: MakeFlow,
    cfg: Any,
    budget: Budget | None,
    fn: Callable[..., Any],
    args: Args,
    kwargs: Kwargs,
) -> Iterator[Flow[Any]]:
    """One streamed call's flow, in its job and inside the instruments' `call` context.

    The call joins the job current in the stream's context (or opens one under `budget`,
    closed at its end).
    """
    LISTENING.set(True)
    job, token = enter_job(budget)
    try:
        with _hooks.observed_call(flow, cfg, job):
            yield flow(cfg, fn, args, kwargs, job, None)
    finally:
        leave_job(token)


def stream_sync(
    flow: MakeFlow,
    cfg: Any,
    budget: Budget | None,
    fn: Callable[..., Any],
    args: Args,
    kwargs: Kwargs,
    last: Last | None,
) -> Generator[Any, None, None]:
    """The items of one call, in the stream's own context (an `ItemStream`'s generator).

    Its flow is driven with `drive_sync`; `last` makes the last item of the flow's value.
    """
    with _streamed(flow, cfg, budget, fn, args, kwargs) as made:
        result: list[Any] = []
        yield from drive_sync(made, result)
        item = None if last is None else last(result[0])
        if item is not None:
            yield item


def stream_async(
    flow: MakeFlow,
    cfg: Any,
    budget: Budget | None,
    fn: Callable[..., Any],
    args: Args,
    kwargs: Kwargs,
    last: Last | None,
) -> Run:
    """The items of one async call, run in the stream's own task (an `AsyncItemStream`'s).

    As `stream_sync`, driven with `drive_async`: run with a `Hand`, it hands each item to it.
    """

    async def run(hand: Hand) -> None:
        with _streamed(flow, cfg, budget, fn, args, kwargs) as made:
            value = await drive_async(made, hand)
            item = None if last is None else last(value)
            if item is not None:
                await hand(item)

    return run


class ItemStream(Iterator[I_co], Generic[I_co]):
    """The items of a decorated call as it runs: an iterator, closed early with `close()`.

    A context manager too: leaving the block closes it (and the model's stream with it).
    """

    __slots__ = ("_context", "_items")

    def __init__(self, items: Generator[Any, None, None]) -> None:
        self._items = items
        self._context = contextvars.copy_context()

    def __iter__(self) -> ItemStream[I_co]:
        return self

    def __next__(self) -> I_co:
        return self._context.run(next, self._items)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the call: the model's stream is closed at once; no error is raised."""
        self._context.run(self._items.close)

    def __enter__(self) -> ItemStream[I_co]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


_ITEM, _END, _ERROR = 0, 1, 2


class AsyncItemStream(AsyncIterator[I_co], Generic[I_co]):
    """The items of an async decorated call as it runs: an async iterator; `aclose()` stops it.

    An async context manager too: leaving the block closes it.
    """

    __slots__ = ("_context", "_done", "_requests", "_run", "_task")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._context = contextvars.copy_context()
        self._task: asyncio.Task[None] | None = None
        self._requests: asyncio.Queue[asyncio.Future[tuple[int, Any]]] | None = None
        self._done = False

    def __aiter__(self) -> AsyncItemStream[I_co]:
        return self

    @staticmethod
    async def _serve(run: Run, requests: asyncio.Queue[asyncio.Future[tuple[int, Any]]]) -> None:
        """The call's task: one item per request, until the flow ends.

        It holds no reference to its `AsyncItemStream`, so a stream dropped by its consumer
        (a task cancelled between two items) is freed at once and its `__del__` stops the call.
        """
        request: asyncio.Future[tuple[int, Any]] | None = await requests.get()

        async def hand(item: Any) -> None:
            nonlocal request
            assert request is not None
            request.set_result((_ITEM, item))
            request = None
            request = await requests.get()  # the flow waits for the caller's next request

        try:
            try:
                await run(hand)
            except Exception as exc:
                assert request is not None
                request.set_result((_ERROR, exc))
                return
            assert request is not None
            request.set_result((_END, None))
        finally:
            if request is not None and not request.done():
                request.cancel()

    async def __anext__(self) -> I_co:
        if self._done:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._requests = asyncio.Queue()
            # The task runs in the stream's context (a copy of it on Python 3.10).
            self._task = self._context.run(loop.create_task, self._serve(self._run, self._requests))
        assert self._requests is not None
        request: asyncio.Future[tuple[int, Any]] = loop.create_future()
        self._requests.put_nowait(request)
        try:
            kind, value = await request
        except BaseException:
            await self.aclose()
            raise
        if kind == _ITEM:
            return value  # type: ignore[no-any-return]
        self._done = True
        with contextlib.suppress(BaseException):
            await self._task
        if kind == _END:
            raise StopAsyncIteration
        raise value

    async def aclose(self) -> None:
        """Stop the call: the model's stream is closed at once; no error is raised."""
        self._done = True
        task = self._task
        if task is None:  # never started: nothing ran
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def __aenter__(self) -> AsyncItemStream[I_co]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):  # its loop may be closed already
                task.cancel()
