"""What `@retry_on_low_quality` takes and gives, as types: its tenacity options, the decorator.

The types of the options that come from tenacity (a wait, a stop strategy, a callback) and
their checks, the default backoff, and the decorator as type checkers see it (`Retrying`,
`TextRetrying`: the call returns the function's type, or `str`).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, overload

import tenacity
from tenacity.wait import wait_base

from .._core.numbers import is_real, shown
from .._core.streamed import Reset
from .._engine.decorated import AsyncStreamingFunction, StreamingFunction
from .._engine.streaming import StreamLike, SyncStreamLike
from .._providers.replies import Reply

__all__ = [
    "DEFAULT_WAIT",
    "MAX_RETRIES_LIMIT",
    "Callback",
    "OnExhausted",
    "Retrying",
    "Stop",
    "TextRetrying",
    "Wait",
    "check_callable",
    "check_wait",
]

P = ParamSpec("P")
R = TypeVar("R")

MAX_RETRIES_LIMIT = 100
"""The largest `max_retries` accepted: "retry until it passes" does not exist."""

# tenacity 9.1 renamed `initial` to `multiplier` (and warns on `initial`); 8.x only has `initial`.
_START = (
    "multiplier"
    if "multiplier" in inspect.signature(tenacity.wait_exponential_jitter).parameters
    else "initial"
)
DEFAULT_WAIT: wait_base = tenacity.wait_exponential_jitter(
    exp_base=2, max=5.0, jitter=0.2, **{_START: 0.2}
)
"""The default backoff: 0.2 s doubling per retry, plus up to 0.2 s of jitter, capped at 5 s."""

Wait = wait_base | Callable[[tenacity.RetryCallState], float] | float | int
OnExhausted = Literal["raise", "return_best"]
Stop = Callable[[tenacity.RetryCallState], bool]
"""A tenacity stop strategy (`stop_after_delay(10)`, `stop_after_attempt(3) | ...`)."""
Callback = Callable[[tenacity.RetryCallState], object]
"""A tenacity callback (`before_sleep_log(logger, logging.INFO)`, `after_log(...)`)."""


def check_wait(wait: object) -> Callable[[tenacity.RetryCallState], float]:
    """The wait strategy `wait=` gives (a number: that many seconds each time)."""
    if isinstance(wait, bool):
        raise TypeError("wait must be a tenacity wait strategy or a number of seconds, not a bool")
    if isinstance(wait, (int, float)):
        if not is_real(wait) or wait < 0:  # NaN, infinite, or too large for a float
            raise ValueError(
                f"wait must be a finite number of seconds >= 0 (or a tenacity wait strategy), "
                f"got {shown(wait)}"
            )
        return tenacity.wait_fixed(wait)
    if callable(wait):
        return wait
    raise TypeError(
        "wait must be a tenacity wait strategy (e.g. tenacity.wait_exponential()), a callable "
        f"taking a tenacity.RetryCallState, or a number of seconds; got {type(wait).__name__}"
    )


def check_callable(name: str, value: object, what: str) -> None:
    """`TypeError` unless `value` is None or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{name}= must be {what}, got {type(value).__name__}")


class Retrying(Protocol):
    """The decorator `retry_on_low_quality(...)` returns; the call returns the function's type.

    A function that returns a stream gives its text; `fn.stream(...)` yields the answer's
    pieces (`str`) and `refinekit.Reset`s (docs/streaming.md).
    """

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, StreamLike]], /
    ) -> AsyncStreamingFunction[P, str, str | Reset]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, str, str | Reset]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncStreamingFunction[P, R, R | Reset]: ...

    @overload
    def __call__(
        self, fn: Callable[P, SyncStreamLike], /
    ) -> StreamingFunction[P, str, str | Reset]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> StreamingFunction[P, R, R | Reset]: ...


class TextRetrying(Protocol):
    """The decorator `retry_on_low_quality(returns="text", ...)` returns: the call returns `str`.

    The function returns the model's reply (or its text, or a stream); the caller gets the
    reply's text.
    """

    @overload
    def __call__(
        self, fn: Callable[P, Awaitable[Reply | StreamLike]], /
    ) -> AsyncStreamingFunction[P, str, str | Reset]: ...

    @overload
    def __call__(
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, str, str | Reset]: ...

    @overload
    def __call__(
        self, fn: Callable[P, Reply | SyncStreamLike], /
    ) -> StreamingFunction[P, str, str | Reset]: ...
