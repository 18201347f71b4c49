"""What type checkers see of a decorated function: its call, `.outcome`, `.retry_with`, `.stream`.

The decorators' typed signatures return these protocols; the objects `wrap` makes
(`refinekit._engine.wrapper.Decorated`) are what runs.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

from .itemstream import AsyncItemStream, ItemStream
from .outcome import Outcome

__all__ = [
    "AsyncDecoratedFunction",
    "AsyncStreamingFunction",
    "DecoratedFunction",
    "StreamingFunction",
]

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)
I_co = TypeVar("I_co", covariant=True)


class DecoratedFunction(Protocol[P, R_co]):
    """What type checkers see of a decorated `def` function: its call, `.outcome`, `.retry_with`.

    Looked up on an instance (a decorated method) it is bound, and typed `Any`.
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def outcome(self, *args: P.args, **kwargs: P.kwargs) -> Outcome[R_co]:
        """The call's `Outcome`."""
        ...

    def retry_with(self, **changes: Any) -> DecoratedFunction[P, R_co]:
        """The function decorated again with `changes` to the decorator's options."""
        ...

    def __get__(self, instance: Any, owner: type | None = None, /) -> Any: ...


class AsyncDecoratedFunction(Protocol[P, R_co]):
    """What type checkers see of a decorated `async def` function (see `DecoratedFunction`)."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]: ...

    def outcome(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, Outcome[R_co]]:
        """The call's `Outcome`, awaitable."""
        ...

    def retry_with(self, **changes: Any) -> AsyncDecoratedFunction[P, R_co]:
        """The function decorated again with `changes` to the decorator's options."""
        ...

    def __get__(self, instance: Any, owner: type | None = None, /) -> Any: ...


class StreamingFunction(DecoratedFunction[P, R_co], Protocol[P, R_co, I_co]):
    """A decorated `def` function whose call can be consumed as it runs: `fn.stream(...)`."""

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> ItemStream[I_co]:
        """The call's items as they come (see docs/streaming.md)."""
        ...

    def retry_with(self, **changes: Any) -> StreamingFunction[P, R_co, I_co]:
        """The function decorated again with `changes` to the decorator's options."""
        ...


class AsyncStreamingFunction(AsyncDecoratedFunction[P, R_co], Protocol[P, R_co, I_co]):
    """A decorated `async def` function whose call can be consumed as it runs."""

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> AsyncItemStream[I_co]:
        """The call's items as they come, an async iterator (see docs/streaming.md)."""
        ...

    def retry_with(self, **changes: Any) -> AsyncStreamingFunction[P, R_co, I_co]:
        """The function decorated again with `changes` to the decorator's options."""
        ...
