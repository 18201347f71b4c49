"""Rate-limited model calls (HTTP 429): backed off with tenacity, every case holding off."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from .._core.config import is_testing
from .._core.errors import JudgeError
from .._providers.openai_client import retry_after_of

__all__ = ["RATE_LIMIT_MAX_WAIT", "RATE_LIMIT_TRIES", "RateLimiter"]

RATE_LIMIT_TRIES = 6
RATE_LIMIT_MAX_WAIT = 60.0


def _is_rate_limit(exc: BaseException) -> bool:
    if isinstance(exc, openai.RateLimitError):
        return True
    if isinstance(exc, openai.APIStatusError) and exc.status_code == 429:
        return True
    return isinstance(exc, JudgeError) and exc.status_code == 429


def _retry_after(exc: BaseException) -> float | None:
    """The wait the server asked for, when it is a sane one (up to `RATE_LIMIT_MAX_WAIT`)."""
    told = getattr(exc, "retry_after", None)  # a JudgeUnavailable says what the server said
    if not isinstance(told, (int, float)):
        told = retry_after_of(exc)
    if told is not None and math.isfinite(told) and 0 <= told <= RATE_LIMIT_MAX_WAIT:
        return float(told)
    return None


class RateLimiter:
    """Backs off rate-limited calls; while one waits, every case holds off.

    A call is tried up to `RATE_LIMIT_TRIES` times. After a rate limit it waits what the
    server asked for (`Retry-After`, up to `RATE_LIMIT_MAX_WAIT`), else tenacity's
    exponential backoff with full jitter (`wait_random_exponential`: up to 2, 4, 8, ...
    seconds). The wait is the run's, not the call's: until it is over no case starts a call.

    Attributes:
        waits: The backoffs so far.
        waited: Their seconds, in all (computed, and not slept under the testing switch).
    """

    def __init__(self) -> None:
        self.resume_at = 0.0
        self.waits = 0
        self.waited = 0.0
        self._backoff = wait_random_exponential(multiplier=2, max=RATE_LIMIT_MAX_WAIT)

    async def hold(self) -> None:
        """Wait until no backoff is in force (at once under the testing switch)."""
        delay = self.resume_at - time.monotonic()
        if delay > 0 and not is_testing():
            await asyncio.sleep(delay)

    def _wait(self, state: RetryCallState) -> float:
        """The wait after a rate-limited try; every case holds off until it is over."""
        if state.attempt_number >= RATE_LIMIT_TRIES:  # no try follows (tenacity 9 asks the
            return 0.0  # wait before the stop): no backoff to record, none to impose
        error = state.outcome.exception() if state.outcome is not None else None
        wait = None if error is None else _retry_after(error)
        if wait is None:
            wait = self._backoff(state)
        self.waits += 1
        self.waited += wait
        self.resume_at = max(self.resume_at, time.monotonic() + wait)
        return wait

    async def _sleep(self, seconds: float) -> None:
        await self.hold()  # until the run's backoff is over: this one's, or a longer one

    async def call(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """`await make()`, tried again after a rate limit; any other error is raised at once.

        Raises:
            Exception: What `make` raised: an error that is not a rate limit, or the last
                rate limit when every try was limited.
        """
        await self.hold()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(RATE_LIMIT_TRIES),
            retry=retry_if_exception(_is_rate_limit),
            wait=self._wait,
            sleep=self._sleep,
            reraise=True,
        )

        async def once() -> Any:  # a coroutine function: tenacity awaits what it returns
            return await make()

        return await retrying(once)
