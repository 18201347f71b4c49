"""A batched run's judge requests: each one waits for a batch instead of going out alone.

While a batched run (`--batch`) judges its answers, an instrument (`BatchInstrument`, see
`refinekit._engine.events.Instrument`) replaces each chat request its judge sends
(`refinekit.judges._calls.Complete`, inside a judge cache's lookup too, so a hit never waits)
by a `Batched` command: it hands the request to the run's `Collector` and waits for the reply.
The collector submits the requests of every judging that is waiting in one batch per judge
model (`refinekit.eval._batch_rounds`), and each reply comes back to the judge as the direct
call would have returned it: the judge reads it, the cache stores it, its tokens count in the
case's judge usage. A request its batch could not answer (failed, expired, cancelled) is sent
directly instead. A time limit around a judge's request is dropped while it waits: a batch
takes minutes to hours.

A structured request (instructor's, `Structured`) is sent directly, as without `--batch`:
instructor may ask again after a reply that does not validate.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._core.types import Usage
from .._engine import events as _hooks
from .._engine.job import current_job
from .._engine.ledger import add_judge_usage
from .._providers.replies import model_of, usage_of
from ..judges._cache import request_key
from ..judges._calls import Complete, Structured
from ..judges._client import JudgeModel

__all__ = [
    "BatchInstrument",
    "Batched",
    "Tracker",
    "Waiting",
    "batch_judges",
    "batching",
    "installed",
    "item_key",
]


@dataclass
class Tracker:
    """One judging of one answer (a case, a repeat): whether it waits, and what it was given.

    Attributes:
        case: The case's key.
        repeat: The repeat's number, from 1.
        waiting: Its requests waiting for a batch now.
        done: Whether it ended.
        batched: The model and usage of each reply a batch gave it (priced at the batch
            price).
        direct: Its requests a batch could not answer, sent directly.
        structured: Its structured (instructor) requests, sent directly.
    """

    case: str
    repeat: int
    waiting: int = 0
    done: bool = False
    batched: list[tuple[str | None, Usage]] = field(default_factory=list)
    direct: int = 0
    structured: int = 0


@dataclass
class Waiting:
    """A request waiting for its batch: the command, and the judgings waiting for its reply."""

    command: Complete
    futures: list[asyncio.Future[Any]] = field(default_factory=list)


class Collector:
    """Where the batched requests wait; `refinekit.eval._batch_rounds.Rounds` submits them.

    `ask` is called on the event loop the run's judging runs on (`loop`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[str, Waiting] = {}
        self.trackers: list[Tracker] = []
        self.changed = asyncio.Event()

    def track(self, case: str, repeat: int) -> Tracker:
        """A new judging to wait for."""
        tracker = Tracker(case, repeat)
        self.trackers.append(tracker)
        return tracker

    def ended(self, tracker: Tracker) -> None:
        """A judging ended."""
        tracker.done = True
        self.changed.set()

    def quiet(self) -> bool:
        """Whether every judging ended or waits for a batch."""
        return all(t.done or t.waiting > 0 for t in self.trackers)

    def finished(self) -> bool:
        """Whether every judging ended."""
        return all(t.done for t in self.trackers)

    async def ask(self, command: Complete, key: str, tracker: Tracker) -> Any:
        """Wait for the reply to `command` (None: send it directly)."""
        future: asyncio.Future[Any] = self.loop.create_future()
        self.waiting.setdefault(key, Waiting(command)).futures.append(future)
        tracker.waiting += 1
        self.changed.set()
        try:
            return await future
        finally:
            tracker.waiting -= 1
            self.changed.set()

    def resolve(self, key: str, reply: Any) -> None:
        """Give the judgings waiting for `key` its reply (None: each sends it directly)."""
        entry = self.waiting.pop(key, None)
        if entry is None:
            return
        for future in entry.futures:
            if not future.done():
                future.set_result(reply)


_COLLECTING: contextvars.ContextVar[tuple[Collector, Tracker] | None] = contextvars.ContextVar(
    "refinekit_batch_collecting", default=None
)
"""The collector and the judging the code running now belongs to (none: nothing is batched)."""


@contextlib.contextmanager
def batching(collector: Collector, tracker: Tracker) -> Iterator[None]:
    """Inside the block (its tasks and threads too), the judge's chat requests are batched."""
    token = _COLLECTING.set((collector, tracker))
    try:
        yield
    finally:
        _COLLECTING.reset(token)


def item_key(command: Complete, tracker: Tracker) -> str:
    """A batched request's key (its `custom_id`): the request, the case and the repeat.

    Two cases asking the very same question of the judge are two requests (each case's
    tokens are its own), and so are two repeats.
    """
    parts = [request_key(command.judge, "batch", command.kwargs, None), tracker.case]
    parts.append(str(tracker.repeat))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


class Batched:
    """A flow command: a judge's chat request answered by a batch (or, failing that, directly)."""

    __slots__ = ("collector", "command", "judge", "kwargs", "tracker")
    role = "model_request"  # see `refinekit._engine.flow.Command`

    def __init__(self, command: Complete, collector: Collector, tracker: Tracker) -> None:
        self.command = command
        self.judge = command.judge
        self.kwargs = command.kwargs
        self.collector = collector
        self.tracker = tracker

    def _count(self, reply: Any) -> Any:
        """Count a batch's reply as the direct call counts its own (the job's judge usage)."""
        usage = usage_of(reply) or Usage(model_calls=1)
        model = model_of(reply)
        job = current_job()
        if job is not None:
            add_judge_usage(job, usage, model, None)
        self.tracker.batched.append((model, usage))
        return reply

    async def run_async(self) -> Any:
        key = item_key(self.command, self.tracker)
        reply = await self.collector.ask(self.command, key, self.tracker)
        if reply is None:
            self.tracker.direct += 1
            return await self.command.run_async()
        return self._count(reply)

    def run_sync(self) -> Any:
        # a sync-only judge runs in a worker thread: the reply is waited for on the loop
        key = item_key(self.command, self.tracker)
        asked = asyncio.run_coroutine_threadsafe(
            self.collector.ask(self.command, key, self.tracker), self.collector.loop
        )
        reply = asked.result()
        if reply is None:
            self.tracker.direct += 1
            return self.command.run_sync()
        return self._count(reply)


def _swap(command: Any, collector: Collector, tracker: Tracker) -> Any:
    """`command` with each chat request it runs batched, and no time limit around one."""
    if type(command) is Complete:
        return Batched(command, collector, tracker)
    if type(command) is Structured:  # instructor may ask again: sent as it is
        tracker.structured += 1
        return command
    if getattr(command, "role", None) == "time_limit":  # a batch takes longer than any limit
        inner = _swap(command.command, collector, tracker)
        return inner if _holds_batched(inner) else command
    change: Callable[[Callable[[Any], Any]], Any] | None = getattr(command, "map_commands", None)
    if change is not None:
        return change(lambda inner: _swap(inner, collector, tracker))
    return command


def _holds_batched(command: Any) -> bool:
    if isinstance(command, Batched):
        return True
    inner = getattr(command, "commands", None) or (getattr(command, "command", None),)
    return any(c is not None and _holds_batched(c) for c in inner)


class BatchInstrument:
    """The engine instrument that batches a judge's chat requests inside `batching`."""

    def call(
        self, flow: Callable[..., Any], cfg: Any, job: Any
    ) -> contextlib.AbstractContextManager[None]:
        """Nothing around a decorated call."""
        return contextlib.nullcontext()

    def command(self, command: Any) -> Any:
        """`command`, its chat requests batched when inside `batching`."""
        collecting = _COLLECTING.get()
        if collecting is None:
            return command
        return _swap(command, *collecting)


_INSTRUMENT = BatchInstrument()
_users = 0
_lock = threading.Lock()


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The batching instrument installed while the block runs (it batches inside `batching`).

    It is the innermost instrument, so it sees a judge's own commands before a tracer wraps
    them. Blocks may nest and overlap (two runs in one process): the last one out removes it.
    """
    global _users
    with _lock:
        _users += 1
        if _INSTRUMENT not in _hooks.instruments:
            _hooks.set_instruments((_INSTRUMENT, *_hooks.instruments))
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _hooks.set_instruments(i for i in _hooks.instruments if i is not _INSTRUMENT)


def batch_judges(judge: Any) -> list[JudgeModel]:
    """The judge models a judge asks (a panel's members' too), in the order found."""
    found: list[JudgeModel] = []
    seen: set[int] = set()

    def walk(part: Any) -> None:
        if id(part) in seen:
            return
        seen.add(id(part))
        model = getattr(part, "judge_model", None)
        if isinstance(model, JudgeModel) and model not in found:
            found.append(model)
        wrapped = getattr(part, "wrapped", None)  # an adapted evaluator (a panel's member)
        if wrapped is not None:
            walk(wrapped)
        for child in getattr(part, "children", None) or ():
            walk(child)

    walk(judge)
    return found
