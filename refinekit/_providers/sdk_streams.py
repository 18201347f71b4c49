"""Reading streamed replies: every SDK's stream as one sequence of `Delta`s, closed on demand.

The one reader of what a model streams, for every part of refinekit, as `replies` is for whole
replies. A *stream* is one of:

- an `openai` `Stream` / `AsyncStream` of `ChatCompletionChunk`s (`create(stream=True)`), or
  the `client.chat.completions.stream(...)` context manager (entered here);
- an Anthropic `Stream` / `AsyncStream` of Messages API events (`messages.create(stream=True)`),
  or the `client.messages.stream(...)` context manager (entered here), or its entered
  `MessageStream`;
- LiteLLM's `CustomStreamWrapper` (`litellm.completion(stream=True)`, or `acompletion`), whose
  chunks are OpenAI's shape;
- a LangChain `.stream()` / `.astream()` iterator of `AIMessageChunk`s;
- any iterator (or async iterator) of those chunks or events, or of their dict forms, or of
  `str` text deltas (a plain text stream). An iterator, not an iterable: a `list` is no stream.

They are told apart by their shape, never by importing their SDK: nothing here imports
`openai`, `anthropic`, `litellm` or `langchain_core`; what each SDK's chunks look like is its
module's (`openai.ChunkReader`, LiteLLM's chunks too; `anthropic.EventReader`;
`langchain.ChunkReader`; `litellm`: which of its wrappers is async).

The interface:

- `is_stream(obj)` / `is_async_stream(obj)`: whether `obj` is a stream `read` / `aread`
  reads. A LiteLLM wrapper is async when it streams an `acompletion` (when it does not say,
  it is both); a `str`, a `list`, a dict, a whole reply are not streams.
- `read(obj) -> Deltas` (an `Iterator[Delta]`) and `aread(obj) -> AsyncDeltas` (an
  `AsyncIterator[Delta]`): one `Delta` per chunk (or event) the stream yields, in order,
  even an empty one (a role chunk, a `ping`); a chunk with parts of several tool calls gives
  one per call. A `Delta` says the text it adds, a tool call's arguments it adds (and the
  call's name and number), the usage so far, the finish reason (`"length"`: cut off), the
  model: see `Delta`. A UTF-16 surrogate pair split over two chunks (each chunk's JSON
  escaping one half) is given whole, in the delta of its second half, as the whole reply
  would give it; a lone half stays as it came. Nothing is read before the first `next` (a
  context manager is entered then, which sends its request). `aread` also reads a sync
  stream (each chunk read on the event loop's thread); `read` refuses an async one
  (`TypeError`).
- `Deltas.close()` / `await AsyncDeltas.aclose()` close the underlying stream at once: for
  the `openai` and `anthropic` clients the HTTP response is closed, so the server stops
  generating; a generator is closed (its `finally` and `with` blocks run, which closes the
  stream it reads); an entered context manager is exited, and one never entered sends
  nothing. Both are idempotent, and both
  readers are context managers that close on exit. A stream read to its end, or that
  breaks, is closed by the reader itself. `chunks` counts the chunks read so far.
- A stream that breaks before its end raises `StreamInterrupted` (its `reason`, `chunks` read
  before, the SDK's or transport's error as its `__cause__`): the connection dropped or timed
  out (an `httpx`/`httpcore` error, a `ConnectionError`, the SDK's connection or timeout
  error: "the connection broke", "the stream timed out"; LiteLLM's mid-stream error: "the
  stream broke"), a chunk that is not JSON or not UTF-8 (the SDK's `UnicodeDecodeError`), an
  error event in the stream (its `reason` redacted). Other exceptions (an HTTP
  status error of a lazily sent request, a bug in a generator) propagate unchanged; an item
  that is no chunk of a known shape raises `TypeError`. A stream that simply ends without a
  finish reason said none (a plain text stream never does); for an SDK's chunks
  (`says_finish`) that means it was cut off, which its reader decides.

The reader never changes what the stream yields (`Delta.raw` is the chunk as it came).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from typing import Any, Literal

from .._core.errors import StreamInterrupted
from .._core.redact import client_secrets, redact
from . import anthropic, langchain, litellm, openai
from .deltas import Delta

__all__ = [
    "AsyncDeltas",
    "Delta",
    "Deltas",
    "StreamInterrupted",
    "aread",
    "is_async_stream",
    "is_stream",
    "read",
    "says_finish",
]

_Kind = Literal["text", "openai", "anthropic", "langchain"]


def _manager(obj: Any) -> bool | None:
    """Whether `obj` is an SDK's stream context manager: True async, False sync, None not one."""
    kind = type(obj)
    if not kind.__module__.startswith(("openai", "anthropic")):
        return None
    found = openai.MANAGERS.get(kind.__name__, anthropic.MANAGERS.get(kind.__name__))
    return found


def _discard(manager: Any) -> None:
    """Drop a context manager never entered: its request is not sent (a pending one closed).

    An async manager holds its request as a coroutine, closed here so that it is not left
    never awaited.
    """
    for value in vars(manager).values():
        if inspect.iscoroutine(value):
            value.close()


def _not_data(obj: Any) -> bool:
    return obj is not None and not isinstance(obj, (str, bytes, bytearray, Mapping))


def is_stream(obj: Any) -> bool:
    """Whether `obj` is a stream `read` reads: an iterator of chunks, events or text deltas.

    See the module's docstring for the streams of each SDK.
    """
    if not _not_data(obj):
        return False
    manager = _manager(obj)
    if manager is not None:
        return not manager
    if litellm.is_wrapper(obj):
        return litellm.is_async(obj) is not True
    kind = type(obj)
    return hasattr(kind, "__next__") and hasattr(kind, "__iter__")


def is_async_stream(obj: Any) -> bool:
    """Whether `obj` is an async stream `aread` reads (it reads a sync one too).

    An async iterator (or async iterable) of chunks, events or text deltas, or an SDK's async
    stream context manager.
    """
    if not _not_data(obj):
        return False
    manager = _manager(obj)
    if manager is not None:
        return manager
    if litellm.is_wrapper(obj):
        return litellm.is_async(obj) is not False
    kind = type(obj)
    return hasattr(kind, "__anext__") or hasattr(kind, "__aiter__")


def _interruption(error: BaseException) -> str | None:
    """Why a stream broke, when `error` says it did (see the module's docstring); else None."""
    if isinstance(error, StreamInterrupted):
        return error.reason
    named = f"{type(error).__name__}: {error}".rstrip(": ")
    if isinstance(error, json.JSONDecodeError):
        return f"a chunk of the stream is not JSON ({named})"
    if isinstance(error, UnicodeDecodeError):  # the SDK decodes each event's bytes itself
        return f"a chunk of the stream is not UTF-8 text ({named})"
    if isinstance(error, ConnectionError):
        return f"the connection broke ({named})"
    if litellm.broke_mid_stream(error):
        return f"the stream broke ({named})"
    for cls in type(error).__mro__:
        package = cls.__module__.partition(".")[0]
        transport = package in ("httpx", "httpx2", "httpcore", "httpcore2", "h11", "aiohttp")
        sdk = package in ("openai", "anthropic", "litellm")
        if (transport or sdk) and "Timeout" in type(error).__name__:
            return f"the stream timed out ({named})"
        if transport or (sdk and cls.__name__ == "APIConnectionError"):
            return f"the connection broke ({named})"
        # an error event in a stream the server had started (HTTP 200): no status of its own
        if sdk and cls.__name__ == "APIError" and getattr(error, "status_code", 200) == 200:
            return f"the stream sent an error ({named})"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _join_pairs(text: str) -> str:
    r"""`text` with each UTF-16 surrogate pair in it as the one character it encodes.

    Two chunks of a stream may each carry half of a pair (a JSON `\ud83d` escape ends one,
    `\ude00` starts the next); joined, they are the character the whole reply gives. A lone
    surrogate stays as it is.
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def says_finish(raw: Any) -> bool:
    """Whether a stream of chunks like `raw` says why it ended (an SDK's: OpenAI, Anthropic).

    Such a stream that ends without a finish reason was cut off (the connection closed before
    its end); a plain text stream or a LangChain one never says, so its end says nothing.
    """
    return (
        raw is not None
        and not isinstance(raw, str)
        and (openai.is_chunk(raw) or openai.is_helper_event(raw) or anthropic.is_event(raw))
    )


def _secrets_of(stream: Any) -> tuple[str, ...]:
    """What the client of an `openai` or `anthropic` stream was configured with (its key)."""
    client = getattr(stream, "_client", None) if _manager(stream) is None else None
    return client_secrets(client) if client is not None else ()


class _Reading:
    """What both readers share (sans-I/O): each chunk's deltas, by its shape; the count.

    A delta's text (or a tool call's arguments) that ends in the first half of a UTF-16
    surrogate pair holds it back until the next one, so that a pair split over two chunks
    reaches the reader whole; `flush` gives what is held when the stream ends.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.chunks = 0
        self._readers: dict[_Kind, Any] = {}
        self._held: dict[int, Delta] = {}  # -1: the text; n: tool call n's arguments
        self._secrets = secrets  # the stream's client's key and such, redacted from a reason

    def _whole(self, delta: Delta) -> Delta:
        """`delta` with a surrogate pair split from the one before joined (see the class)."""
        if not self._held and delta.text.isascii() and delta.tool_arguments.isascii():
            return delta  # no half of a pair held, none in it: as it came (most deltas)
        if delta.text:
            delta = replace(delta, text=self._join(-1, delta.text, delta))
        if delta.tool_arguments:
            arguments = self._join(delta.tool_index, delta.tool_arguments, delta)
            delta = replace(delta, tool_arguments=arguments)
        return delta

    def _join(self, key: int, piece: str, delta: Delta) -> str:
        held = self._held.pop(key, None)
        if held is not None:
            piece = (held.text if key < 0 else held.tool_arguments) + piece
        if "\ud800" <= piece[-1] <= "\udbff":  # half a pair: wait for its other half
            kept = piece[-1]
            self._held[key] = (
                Delta(text=kept, raw=delta.raw)
                if key < 0
                else Delta(tool_arguments=kept, tool_index=key, raw=delta.raw)
            )
            piece = piece[:-1]
        return _join_pairs(piece)

    def flush(self) -> list[Delta]:
        """What was held back when the stream ended (a lone half of a pair, as it came)."""
        held, self._held = list(self._held.values()), {}
        return held

    def deltas(self, item: Any) -> list[Delta]:
        """The deltas of one item the stream yielded (none for a helper event).

        Raises:
            TypeError: The item is no chunk, event or text of a known shape.
            StreamInterrupted: The item is an error event.
        """
        if isinstance(item, str):
            self.chunks += 1
            return [self._whole(Delta(text=item, raw=item))]
        kind: _Kind
        if openai.is_chunk(item) or openai.is_helper_event(item):
            kind = "openai"
        elif langchain.is_chunk(item):
            kind = "langchain"
        elif anthropic.is_event(item):
            kind = "anthropic"
        else:
            raise TypeError(
                "a stream yields text (str), OpenAI or LiteLLM chunks, Anthropic stream events "
                f"or LangChain AIMessageChunks; this one yielded a {type(item).__name__}"
            )
        reader = self._readers.get(kind)
        if reader is None:
            made: dict[_Kind, Any] = {
                "openai": openai.ChunkReader,
                "langchain": langchain.ChunkReader,
                "anthropic": anthropic.EventReader,
            }
            reader = self._readers[kind] = made[kind]()
        try:
            read: list[Delta] | None = reader.read(item)
        except StreamInterrupted as e:  # an error event
            self._redacted(e)
            raise
        if read is None:
            return []
        self.chunks += 1
        return [self._whole(delta) for delta in read]

    def raise_broken(self, error: Exception) -> None:
        """Raise `error` as a `StreamInterrupted` (from it) when it says the stream broke."""
        broken = self._broken(error)
        if broken is not None:
            raise broken from error

    def _broken(self, error: Exception) -> StreamInterrupted | None:
        reason = _interruption(error)
        if reason is None:
            return None
        # It becomes the `__cause__`, printed with every traceback: its text is redacted too.
        error.args = tuple(
            redact(a, self._secrets) if isinstance(a, str) else a for a in error.args
        )
        if isinstance(getattr(error, "message", None), str):
            error.message = redact(error.message, self._secrets)  # type: ignore[attr-defined]
        if isinstance(error, StreamInterrupted):
            return self._redacted(error)
        return StreamInterrupted(redact(reason, self._secrets), self.chunks)

    def _redacted(self, error: StreamInterrupted) -> StreamInterrupted:
        """`error` with the chunks read, its reason without the client's secrets too."""
        error.chunks = self.chunks
        if self._secrets:
            error.reason = redact(error.reason, self._secrets)
            error.args = (error.reason,)
        return error


class _Reader:
    """What both readers hold: the stream, what is read of it, the deltas not yet given."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._source: Any = None  # the stream entered (a context manager's), once opened
        self._reading = _Reading(_secrets_of(stream))
        self._pending: deque[Delta] = deque()
        self._closed = False

    @property
    def chunks(self) -> int:
        """The chunks (or events) read from the stream so far."""
        return self._reading.chunks

    @property
    def closed(self) -> bool:
        """Whether the stream is closed: read to its end, broken, or closed."""
        return self._closed


class Deltas(_Reader, Iterator[Delta]):
    """A stream read as `Delta`s (`read(stream)`); `close()` closes the stream at once."""

    def __init__(self, stream: Any) -> None:
        """Read `stream` (nothing is read, nor a context manager entered, before `next`)."""
        super().__init__(stream)
        self._managed = _manager(stream) is not None

    def __iter__(self) -> Deltas:
        return self

    def __next__(self) -> Delta:
        if self._pending:
            return self._pending.popleft()
        while True:
            if self._closed:
                raise StopIteration
            try:
                if self._source is None:
                    self._source = self._stream.__enter__() if self._managed else self._stream
                item = next(self._source)
            except StopIteration:
                held = self._reading.flush()
                self.close()
                if held:  # half a surrogate pair at the very end: given as it came
                    self._pending.extend(held[1:])
                    return held[0]
                raise StopIteration from None
            except Exception as e:
                self._close_quietly()
                self._reading.raise_broken(e)
                raise
            try:
                read = self._reading.deltas(item)
            except Exception:
                self._close_quietly()
                raise
            if read:  # most chunks give one delta: handed on without the queue
                self._pending.extend(read[1:])
                return read[0]

    def close(self) -> None:
        """Close the underlying stream (its HTTP response, its generator); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        source, self._source = self._source, None
        if self._managed:
            if source is not None:
                self._stream.__exit__(None, None, None)
            else:
                _discard(self._stream)
            return
        close = getattr(self._stream, "close", None)
        if callable(close):
            result = close()
            if inspect.iscoroutine(result):  # an async close: not this reader's to await
                result.close()

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):  # the error that broke the stream is raised
            self.close()

    def __enter__(self) -> Deltas:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncDeltas(_Reader, AsyncIterator[Delta]):
    """A stream read as `Delta`s (`aread(stream)`); `aclose()` closes the stream at once."""

    def __init__(self, stream: Any) -> None:
        """Read `stream` (nothing is read, nor a context manager entered, before `anext`)."""
        super().__init__(stream)
        self._managed = _manager(stream)  # True async, False sync, None no manager
        self._async: bool | None
        self._wrapper = litellm.is_wrapper(stream)
        if self._wrapper:
            self._async = litellm.is_async(stream) is not False
        else:
            self._async = None if self._managed is not None else is_async_stream(stream)

    def __aiter__(self) -> AsyncDeltas:
        return self

    async def _open(self) -> Any:
        if self._managed is True:
            entered = await self._stream.__aenter__()
            self._async = True
        elif self._managed is False:
            entered = self._stream.__enter__()
            self._async = False
        else:
            entered = self._stream
        if self._async and not hasattr(type(entered), "__anext__"):
            return entered.__aiter__()  # an async iterable
        return entered

    async def __anext__(self) -> Delta:
        if self._pending:
            return self._pending.popleft()
        while True:
            if self._closed:
                raise StopAsyncIteration
            try:
                if self._source is None:
                    self._source = await self._open()
                if self._async:
                    item = await self._source.__anext__()
                else:
                    item = next(self._source)
            except (StopIteration, StopAsyncIteration):
                held = self._reading.flush()
                await self.aclose()
                if held:  # half a surrogate pair at the very end: given as it came
                    self._pending.extend(held[1:])
                    return held[0]
                raise StopAsyncIteration from None
            except Exception as e:
                await self._close_quietly()
                self._reading.raise_broken(e)
                raise
            try:
                read = self._reading.deltas(item)
            except Exception:
                await self._close_quietly()
                raise
            if read:  # most chunks give one delta: handed on without the queue
                self._pending.extend(read[1:])
                return read[0]

    async def aclose(self) -> None:
        """Close the underlying stream (its HTTP response, its generator); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        source, self._source = self._source, None
        if self._managed is not None:
            if source is None:
                _discard(self._stream)
            elif self._managed:
                await self._stream.__aexit__(None, None, None)
            else:
                self._stream.__exit__(None, None, None)
            return
        connection = litellm.connection_of(self._stream) if self._wrapper else None
        if connection is not None:  # LiteLLM's aiohttp transport keeps it open otherwise
            connection.close()
            await asyncio.sleep(0)  # asyncio closes the socket on the loop's next turn
        for name in ("aclose", "close") if self._async else ("close",):
            close = getattr(self._stream, name, None)
            if callable(close):
                result = close()
                if inspect.isawaitable(result):
                    await result
                return

    async def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):  # the error that broke the stream is raised
            await self.aclose()

    async def __aenter__(self) -> AsyncDeltas:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def read(stream: Any) -> Deltas:
    """A sync stream read as `Delta`s, one per chunk; `close()` closes the stream.

    Args:
        stream: A stream `is_stream` accepts (see the module's docstring).

    Returns:
        The reader, an iterator of `Delta`s.

    Raises:
        TypeError: `stream` is an async stream (read it with `aread`), or no stream.
    """
    if not is_stream(stream):
        if is_async_stream(stream):
            raise TypeError(
                f"a {type(stream).__name__} is an async stream: read it with aread(), in async code"
            )
        raise TypeError(f"not a stream: a {type(stream).__name__} (see refinekit's streaming docs)")
    return Deltas(stream)


def aread(stream: Any) -> AsyncDeltas:
    """A stream (async, or sync) read as `Delta`s, one per chunk; `aclose()` closes it.

    Args:
        stream: A stream `is_async_stream` or `is_stream` accepts (see the module's docstring).

    Returns:
        The reader, an async iterator of `Delta`s.

    Raises:
        TypeError: `stream` is no stream.
    """
    if not (is_async_stream(stream) or is_stream(stream)):
        raise TypeError(f"not a stream: a {type(stream).__name__} (see refinekit's streaming docs)")
    return AsyncDeltas(stream)
