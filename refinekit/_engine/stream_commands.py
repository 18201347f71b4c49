"""Streams inside the flows: the commands that read one, and the one sub-flow that reads it.

A decorated function may return a stream (anything `refinekit._providers.sdk_streams.is_stream` or
`is_async_stream` accepts: an `openai` or Anthropic stream, LiteLLM's wrapper, a LangChain
iterator of chunks, a plain iterator of text). A decorator's flow reads it with `read_stream`,
a sub-flow (`yield from`) written once for sync and async, on four commands:

- `Open(stream)`: the stream's reader (`streams.read` on the sync side, `streams.aread` on the
  async side); the drivers close it when the flow ends, however it ends (`flow.OPENERS`);
- `Next(reader)`: its next `Delta`, or None at its end (`StreamInterrupted` when it broke);
- `Close(reader)`: close it now, so that the server stops generating (an early abort);
- `Emit(item)` (`flow.Emit`): hand an item to the consumer of `fn.stream(...)`; the drivers
  hand it on (`flow.drive_sync` / `drive_async`), and a plain call drops it.

`read_stream` hands each delta to a `Sink` (the decorator's: partial validation, a prefix
rule, pass-through), which says what to emit and whether to abort. The stream's request was
sent when the function returned it, so it counts in the job once, however its reading ends:
read to its end, aborted, or closed from outside (the consumer closed `fn.stream(...)`, the
task was cancelled, a step's budget check stopped the job), with what the server reported or
an estimate of characters / 4, said to be one (`Usage.estimated_calls`). While it is read it
holds its usage so far in the reservation it runs in (`reserve.StreamHold`), and it is
stopped when the job's spending plus what every call in flight holds passes a token or cost
limit (`BudgetExceeded`, the stream closed first, its tokens counted). It emits one `stream`
event (chunks, time to its first chunk, whether and why it was aborted).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from .._core.errors import BudgetExceeded, StreamInterrupted
from .._core.types import Usage
from .._providers import sdk_streams as streams
from .._providers.sdk_streams import Delta
from . import budget as _budget
from . import reserve as _reserve
from .events import emit, make_event, wants_debug_events
from .flow import OPENERS, Emit, Flow
from .job import LISTENING, Job, effective, in_use
from .ledger import add_usage

__all__ = [
    "LISTENING",
    "Close",
    "Emit",
    "Next",
    "Open",
    "Sink",
    "StreamLike",
    "StreamRead",
    "SyncStreamLike",
    "arguments_chars",
    "is_streamed",
    "listening",
    "read_stream",
]


StreamLike: TypeAlias = (
    "Iterator[Any] | AsyncIterator[Any] | AbstractContextManager[Any] | "
    "AbstractAsyncContextManager[Any]"
)
"""A stream, for type checkers: an `openai` `Stream` / `AsyncStream` (iterators), an SDK's stream
context manager (`client.messages.stream(...)`), a LangChain iterator, a plain (async)
iterator of text."""

SyncStreamLike: TypeAlias = "Iterator[Any] | AbstractContextManager[Any]"
"""A stream a `def` function returns, for type checkers (see `StreamLike`)."""


def listening() -> bool:
    """Whether the current decorated call is consumed with `fn.stream(...)`."""
    return LISTENING.get()


def is_streamed(value: Any) -> bool:
    """Whether a function's return value is a stream (sync or async) rather than a reply."""
    return streams.is_stream(value) or streams.is_async_stream(value)


def arguments_chars(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """The characters of a call's text arguments: its strings, and its messages' text.

    What a streamed reply's prompt is estimated from (characters / 4) when the server reports
    no usage (an aborted OpenAI stream never gets to its usage chunk): a lower bound, since the
    function may add a system prompt or a template the decorator never sees.
    """
    total = 0
    for value in (*args, *kwargs.values()):
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) for m in value):
            total += _budget._request_chars({"messages": value})
    return total


class Open:
    """The stream's reader: `streams.read` blocking, `streams.aread` awaited."""

    __slots__ = ("function", "stream")

    def __init__(self, stream: Any, function: str) -> None:
        self.stream = stream
        self.function = function

    def run_sync(self) -> streams.Deltas:
        if not streams.is_stream(self.stream) and streams.is_async_stream(self.stream):
            raise TypeError(
                f"{self.function} returned an async stream ({type(self.stream).__name__}) to a "
                "sync refinekit decorator, which cannot read it: declare the function "
                "`async def`, or return a sync stream"
            )
        return streams.read(self.stream)

    async def run_async(self) -> streams.AsyncDeltas:
        return streams.aread(self.stream)


OPENERS.add(Open)


class Next:
    """The reader's next `Delta`; None at the end of the stream."""

    __slots__ = ("reader",)

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def run_sync(self) -> Delta | None:
        return next(self.reader, None)

    async def run_async(self) -> Delta | None:
        try:
            return await self.reader.__anext__()  # type: ignore[no-any-return]
        except StopAsyncIteration:
            return None


class Close:
    """Close the reader now (its HTTP response too: the server stops generating)."""

    __slots__ = ("reader",)

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def run_sync(self) -> None:
        self.reader.close()

    async def run_async(self) -> None:
        await self.reader.aclose()


class Sink(Protocol):
    """What a decorator does with each delta of a stream it reads."""

    def feed(self, delta: Delta) -> tuple[Sequence[Any], str | None]:
        """The items to emit for `delta`, and why to abort the stream now (None: go on)."""
        ...


@dataclass
class StreamRead:
    """What reading one stream came to.

    Attributes:
        text: The text it streamed (what arrived before an abort or a break).
        pieces: That text as it arrived, delta by delta (empty deltas left out).
        tools: The tool calls it streamed, by index: `[name, arguments so far]`.
        finish_reason: Why the model stopped, when the stream said (`"length"`: cut off).
        usage: The usage counted in the job for it.
        estimated: Whether `usage` is an estimate (characters / 4): the server reported none
            (an aborted stream never gets to its usage).
        model: The model, when a chunk named it.
        chunks: The chunks read.
        first_chunk: Seconds from opening the stream to its first chunk (None: none came).
        aborted: Why it was closed before its end (None: it was read to its end or broke).
        interrupted: How it broke before its end (the connection, a malformed chunk).
    """

    text: str = ""
    pieces: list[str] = field(default_factory=list)
    tools: dict[int, list[Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    estimated: bool = False
    model: str | None = None
    chunks: int = 0
    first_chunk: float | None = None
    aborted: str | None = None
    interrupted: StreamInterrupted | None = None

    @property
    def complete(self) -> bool:
        """Whether the stream came to its own end (not aborted, not broken)."""
        return self.aborted is None and self.interrupted is None

    def tool_text(self) -> str | None:
        """The arguments of its single tool call (what `@self_correct` parses); None: no call."""
        if len(self.tools) != 1:
            return None
        return str(next(iter(self.tools.values()))[1])


def _estimate(chars: int) -> int:
    return _budget.estimate_tokens(chars)


def _usage(read: StreamRead, reported: Usage | None, prompt_chars: int, chars: int) -> Usage:
    """The stream's usage: the server's when the stream ended with it, else an estimate."""
    if reported is not None and read.complete:
        return Usage(1, reported.prompt_tokens, reported.completion_tokens)
    read.estimated = True
    prompt = reported.prompt_tokens if reported is not None and reported.prompt_tokens else 0
    completion = reported.completion_tokens if reported is not None else 0
    return Usage(1, prompt or _estimate(prompt_chars), max(completion, _estimate(chars)), 1)


def read_stream(
    stream: Any,
    job: Job,
    sink: Sink,
    *,
    decorator: str,
    function: str,
    number: int,
    maximum: int,
    prompt_chars: int = 0,
    count: bool = True,
    kept: int | None = None,
) -> Flow[StreamRead]:
    """Read `stream` to its end (or until `sink` aborts it); its usage counted in `job`.

    Args:
        stream: The function's stream.
        job: The call's job.
        sink: What to emit for each delta and when to abort.
        decorator: The decorator's name, for the `stream` event.
        function: The decorated function's name.
        number: The attempt this stream is (for the event).
        maximum: The most attempts there can be.
        prompt_chars: The characters of the request's prompt, when known: the estimate of the
            prompt's tokens when the server reports none.
        count: Count its usage in the job (`@reviewed`'s mode "off" counts nothing).
        kept: For a request that resumed a failed reply: how many validated fields it kept
            (the `stream` event says so, `resumed`).

    Raises:
        BudgetExceeded: The job's budget ran out mid-stream: the stream was closed first and
            its tokens so far counted.
    """
    read = StreamRead()
    parts: list[str] = []
    chars = 0
    reported: Usage | None = None
    budget = effective(job) if count and in_use() else None
    # The request was sent when the function returned its stream: it holds the reservation
    # it runs in from here, its usage so far held as it arrives, and it is counted however
    # its reading ends (to its end, aborted, abandoned by the consumer, cancelled, stopped).
    hold = _reserve.StreamHold(job, budget) if budget is not None else None
    reader: Any = None
    stopped: BudgetExceeded | None = None
    try:
        reader = yield Open(stream, function)
        opened = time.perf_counter()
        tools = read.tools
        step = Next(reader)  # one command for every delta: it holds nothing of its own
        prompt_estimate = _estimate(prompt_chars) if hold is not None else 0
        while True:
            try:
                delta: Delta | None = yield step
            except StreamInterrupted as broken:
                read.interrupted = broken
                break
            if delta is None:
                break
            if read.first_chunk is None:
                read.first_chunk = time.perf_counter() - opened
            text = delta.text
            if text:
                parts.append(text)
                chars += len(text)
            arguments = delta.tool_arguments
            if arguments or delta.tool_name is not None:
                call = tools.setdefault(delta.tool_index, [None, ""])
                if delta.tool_name is not None:
                    call[0] = delta.tool_name
                call[1] += arguments
                chars += len(arguments)
            if delta.usage is not None:
                reported = delta.usage
            if delta.finish_reason is not None and read.finish_reason != "refusal":
                read.finish_reason = delta.finish_reason  # a refusal stays one to the end
            if delta.model:
                read.model = delta.model
            items, abort = sink.feed(delta)
            for item in items:
                yield Emit(item)
            if abort is not None:
                read.aborted = abort
                yield Close(reader)
                break
            if hold is not None:
                if reported is None:
                    prompt, completion = prompt_estimate, _estimate(chars)
                else:
                    prompt = reported.prompt_tokens
                    completion = max(reported.completion_tokens, _estimate(chars))
                stopped = hold.grow(Usage(1, prompt, completion), read.model)
                if stopped is not None:
                    read.aborted = "budget"
                    yield Close(reader)
                    break
    except BaseException as ended:
        # Ended before its end by what runs it: the consumer closed `fn.stream(...)` (or
        # dropped it), the task was cancelled, or a step's budget check stopped the job. It
        # was sent: it counts, its usage estimated when the server reported none.
        if read.aborted is None and read.interrupted is None:
            read.aborted = "budget" if isinstance(ended, BudgetExceeded) else "closed"
        _finish(read, reader, parts, reported, prompt_chars, chars, job, hold, count)
        _event(read, job, decorator, function, number, maximum, kept)
        if isinstance(ended, BudgetExceeded):
            _budget.recount(ended, job)  # its usage as it is now, this stream's counted
        raise
    _finish(read, reader, parts, reported, prompt_chars, chars, job, hold, count)
    _event(read, job, decorator, function, number, maximum, kept)
    if stopped is not None:
        _budget.check()  # the job is over its budget now that the stream's tokens count
        _budget.recount(stopped, job)  # else the calls in flight beside it will take it over
        raise stopped
    return read


def _finish(
    read: StreamRead,
    reader: Any,
    parts: list[str],
    reported: Usage | None,
    prompt_chars: int,
    chars: int,
    job: Job,
    hold: _reserve.StreamHold | None,
    count: bool,
) -> None:
    """What the stream came to, its usage counted in `job` (settling what it held)."""
    read.chunks = getattr(reader, "chunks", 0)
    read.text = "".join(parts)
    read.pieces = parts
    read.usage = _usage(read, reported, prompt_chars, chars)
    if count:
        node = hold.node if hold is not None else None
        add_usage(job, read.usage, model=read.model, reservation=node)


def _event(
    read: StreamRead,
    job: Job,
    decorator: str,
    function: str,
    number: int,
    maximum: int,
    kept: int | None = None,
) -> None:
    why = read.aborted
    if why is None and read.interrupted is not None:
        why = f"interrupted: {read.interrupted.reason}"
    if why is None and kept is None and not wants_debug_events():
        return
    emit(
        make_event(
            "stream",
            decorator,
            function,
            job,
            number,
            maximum,
            chunks=read.chunks,
            first_chunk=read.first_chunk,
            aborted=why,
            estimated=read.estimated,
            resumed=kept is not None,
            kept=kept,
        )
    )
