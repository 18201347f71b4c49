"""Streams for the decorators' streaming tests: plain (async) iterators that record their reads.

The tests over real HTTP use the scripted server's streaming (test_streaming_http.py);
these stand-ins say exactly how many parts were read before the stream was closed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

from pydantic import BaseModel

KINDS = ["sync", "async"]
USER = [{"role": "user", "content": "Extract the invoice: A-1, EUR 12.50"}]


# The invoice the streaming tests extract (no docstring: it would be the schema's description).
class Invoice(BaseModel):
    number: str
    currency: Literal["EUR", "USD"]
    total_cents: int


GOOD = '{"number": "A-1", "currency": "EUR", "total_cents": 1250}'
INVOICE = Invoice(number="A-1", currency="EUR", total_cents=1250)


class Source:
    """A text stream, sync or async, that records how many parts it gave and whether it closed.

    Args:
        parts: The text deltas, in order.
        error: Raised after the parts (a broken connection, say).
    """

    def __init__(self, *parts: str, error: Exception | None = None) -> None:
        self.parts = parts
        self.error = error
        self.given = 0
        self.closed = False

    def _given(self) -> Iterator[str]:
        for part in self.parts:
            self.given += 1
            yield part
        if self.error is not None:
            raise self.error

    def sync(self) -> Iterator[str]:
        try:
            yield from self._given()
        finally:
            self.closed = True

    async def async_(self) -> AsyncIterator[str]:
        try:
            for part in self._given():
                yield part
        finally:
            self.closed = True

    def of(self, kind: str) -> Any:
        return self.sync() if kind == "sync" else self.async_()


def chunked(text: str, size: int) -> tuple[str, ...]:
    """`text` in parts of `size` characters."""
    return tuple(text[i : i + size] for i in range(0, len(text), size))


class StreamingModel:
    """A stand-in model function returning its sources' streams in turn (the last repeats).

    `received` holds a deep copy of each call's first argument (the conversation).
    """

    def __init__(self, kind: str, *sources: Source | str) -> None:
        self.kind = kind
        self.sources = sources
        self.received: list[Any] = []

    def _next(self, first: Any) -> Any:
        self.received.append(copy.deepcopy(first))
        source = self.sources[min(len(self.received), len(self.sources)) - 1]
        return source if isinstance(source, str) else source.of(self.kind)

    def function(self) -> Callable[..., Any]:
        """The function to decorate: `def` or `async def` as `kind` says."""
        if self.kind == "sync":

            def call(first: Any, *args: Any, **kwargs: Any) -> Any:
                return self._next(first)

            return call

        async def acall(first: Any, *args: Any, **kwargs: Any) -> Any:
            return self._next(first)

        return acall


def collect(kind: str, decorated: Any, *args: Any, **kwargs: Any) -> list[Any]:
    """Every item of `decorated.stream(*args, **kwargs)`, sync or async."""
    if kind == "sync":
        return list(decorated.stream(*args, **kwargs))

    async def main() -> list[Any]:
        return [item async for item in decorated.stream(*args, **kwargs)]

    return asyncio.run(main())


def call(kind: str, decorated: Any, *args: Any, **kwargs: Any) -> Any:
    """`decorated(*args, **kwargs)`, awaited when `kind` is async."""
    if kind == "sync":
        return decorated(*args, **kwargs)
    return asyncio.run(decorated(*args, **kwargs))
