"""The judge model: an `openai` client (sync or async), the model's name and its settings."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator
from types import TracebackType
from typing import Any

import openai

from .._openai import async_counterpart, sync_counterpart
from .._prompts import sendable
from .._redact import client_secrets, safe_url

__all__ = ["JudgeModel"]

_COUNTERPART_LOCK = threading.Lock()


class JudgeModel:
    """The model that judges: an `openai` client, the model's name and its settings.

    Any server speaking the OpenAI Chat Completions API works (OpenAI, Ollama, vLLM,
    llama.cpp, LM Studio, ...). The client may be sync (`openai.OpenAI`) or async
    (`openai.AsyncOpenAI`); for the other path refinekit makes its counterpart with the same
    base URL, key, timeout, retries and headers, so a judge works from `def` and `async def`
    code alike. Transport retries are the client's own (`max_retries` on the client).

    The counterparts refinekit makes are its own to close, never your client: an async one
    (one per event loop) is closed when its loop shuts down (`asyncio.run`, `asyncio.Runner`,
    or `loop.shutdown_asyncgens()`), and `close()` / `await aclose()` (or `with` / `async
    with` the `JudgeModel`) close them at once. Your own client stays open: close it
    yourself.

    Args:
        client: An `openai.OpenAI` or `openai.AsyncOpenAI` client.
        model: The judge model's name.
        temperature: Sampling temperature; 0 for repeatable verdicts.
        seed: Sent as `seed` where the server supports it; None to leave it out.
        max_tokens: The most tokens a judge reply may use; None for each judge's own default.
        timeout: Seconds per judge request; None for the client's timeout.
    """

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        model: str,
        *,
        temperature: float = 0.0,
        seed: int | None = 42,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
            raise TypeError(
                "JudgeModel needs an openai.OpenAI or openai.AsyncOpenAI client, "
                f"got {type(client).__name__}"
            )
        if not isinstance(model, str) or not model:
            raise ValueError("JudgeModel needs the judge model's name, a non-empty str")
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
        self._client = client  # the caller's: never closed here
        self._sync = client if isinstance(client, openai.OpenAI) else None
        self._async = client if isinstance(client, openai.AsyncOpenAI) else None
        # Async counterparts made from a sync client, one per event loop: an async HTTP
        # connection pool must not outlive the loop it was made on. Each comes with the
        # async generator that closes it when its loop shuts down (see `_closed_with_loop`).
        self._async_per_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        self.model = model
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.timeout = timeout

    @property
    def where(self) -> str:
        """The endpoint, for messages: the base URL without credentials or query."""
        return safe_url(str(self._client.base_url))

    def __repr__(self) -> str:
        return f"JudgeModel(model={self.model!r}, endpoint={self.where!r})"

    def sync_client(self) -> openai.OpenAI:
        """The sync client: yours, or the counterpart made from your async client."""
        client = self._sync
        if client is None:
            with _COUNTERPART_LOCK:  # criteria ask from several threads at once: make one
                if self._sync is None:
                    assert self._async is not None
                    self._sync = sync_counterpart(self._async)
                client = self._sync
        return client

    def async_client(self) -> openai.AsyncOpenAI:
        """The async client: yours, or this event loop's counterpart made from your sync one."""
        if self._async is not None:
            return self._async
        loop = asyncio.get_running_loop()
        with _COUNTERPART_LOCK:
            made = self._async_per_loop.get(loop)
            if made is None:
                assert self._sync is not None
                client = async_counterpart(self._sync)
                closer = self._closed_with_loop(loop, client)
                _start(closer)  # now the loop's shutdown_asyncgens() will finish it
                made = self._async_per_loop[loop] = (client, closer)
        return made[0]

    async def _closed_with_loop(
        self, loop: asyncio.AbstractEventLoop, client: openai.AsyncOpenAI
    ) -> AsyncGenerator[None, None]:
        """Close `client` when finished: by `aclose()`, or by its loop's shutdown_asyncgens().

        An event loop has no "on close" callback, but it finishes the async generators
        started on it before it closes (`asyncio.run` and `asyncio.Runner` do), so this one
        is started (see `_start`) when the client is made and waits at its `yield`.
        """
        try:
            yield
        finally:
            with _COUNTERPART_LOCK:
                if self._async_per_loop.get(loop, (None,))[0] is client:
                    del self._async_per_loop[loop]
            await client.close()

    def close(self) -> None:
        """Close the clients refinekit made for this judge, never the one you gave it.

        That is the sync counterpart of your async client, and the async counterparts of
        your sync client on event loops that are not running (a running loop's is closed by
        `await aclose()` on it, or when the loop shuts down; called from a running loop, use
        `await aclose()`). The judge stays usable: it makes new ones when it needs them.
        """
        self._close_sync_counterpart()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs here: idle loops can run their closers
            pass
        else:
            return
        with _COUNTERPART_LOCK:
            idle = [
                (loop, closer)
                for loop, (_, closer) in self._async_per_loop.items()
                if not loop.is_running() and not loop.is_closed()
            ]
        for loop, closer in idle:
            loop.run_until_complete(closer.aclose())

    async def aclose(self) -> None:
        """Close the clients refinekit made for this judge, never the one you gave it.

        That is the running loop's async counterpart of your sync client and the sync
        counterpart of your async client (counterparts on other loops are closed when those
        loops shut down). The judge stays usable: it makes new ones when it needs them.
        """
        self._close_sync_counterpart()
        with _COUNTERPART_LOCK:
            made = self._async_per_loop.get(asyncio.get_running_loop())
        if made is not None:
            await made[1].aclose()

    def _close_sync_counterpart(self) -> None:
        with _COUNTERPART_LOCK:
            made = self._sync if self._sync is not self._client else None
            if made is not None:
                self._sync = None
        if made is not None:
            made.close()

    def __enter__(self) -> JudgeModel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> JudgeModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def request(
        self, messages: list[dict[str, Any]], default_max_tokens: int, **extra: Any
    ) -> dict[str, Any]:
        """The keyword arguments of one chat completion request."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": sendable(messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens or default_max_tokens,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        kwargs.update(extra)
        return kwargs


def _start(closer: AsyncGenerator[None, None]) -> None:
    """Run an async generator to its first `yield` from sync code on the loop's thread.

    Its first step registers it with the running loop (the loop's asyncgen hooks), so the
    loop's shutdown_asyncgens() will close it; the step itself awaits nothing.
    """
    step = closer.__anext__()
    try:
        step.send(None)
    except StopIteration:
        return
    raise RuntimeError("the closer's first step awaited something")  # pragma: no cover


def secrets_of(judge: JudgeModel) -> tuple[str, ...]:
    """What the judge's client was configured with (its counterparts share it)."""
    return client_secrets(judge._client)
