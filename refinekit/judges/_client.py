"""The judge model: an `openai` or `anthropic` client (sync or async), the model, its settings."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Literal

import openai

from .._core.numbers import is_number, is_real, shown
from .._core.redact import client_secrets, register_secrets, safe_url
from .._engine.prompts import sendable
from .._providers.anthropic_client import async_counterpart as anthropic_async_counterpart
from .._providers.anthropic_client import client_kind
from .._providers.anthropic_client import request as anthropic_request
from .._providers.anthropic_client import sync_counterpart as anthropic_sync_counterpart
from .._providers.openai_client import async_counterpart, sync_counterpart
from ._cache_backends import JudgeCache

if TYPE_CHECKING:
    import anthropic

    Client = openai.OpenAI | openai.AsyncOpenAI | anthropic.Anthropic | anthropic.AsyncAnthropic

__all__ = ["JudgeModel"]

_COUNTERPART_LOCK = threading.Lock()


class JudgeModel:
    """The model that judges: an `openai` or `anthropic` client, the model's name, its settings.

    Any server speaking the OpenAI Chat Completions API works (OpenAI, Ollama, vLLM,
    llama.cpp, LM Studio, LiteLLM's proxy, ...), through an `openai` client; Anthropic's
    models work natively through an `anthropic` client (Messages API requests: the system
    prompt as `system=`, always a `max_tokens`, no `seed`; see docs/judges.md for what each
    judge does there). The client may be sync (`openai.OpenAI`, `anthropic.Anthropic`) or
    async (`openai.AsyncOpenAI`, `anthropic.AsyncAnthropic`); for the other path refinekit
    makes its counterpart with the same base URL, key, timeout, retries and headers, so a
    judge works from `def` and `async def` code alike. Transport retries are the client's own
    (`max_retries` on the client).

    The counterparts refinekit makes are its own to close, never your client: an async one
    (one per event loop) is closed when its loop shuts down (`asyncio.run`, `asyncio.Runner`,
    or `loop.shutdown_asyncgens()`), and `close()` / `await aclose()` (or `with` / `async
    with` the `JudgeModel`) close them at once; a sync counterpart is also closed when the
    `JudgeModel` is garbage-collected unclosed. Your own client stays open: close it
    yourself.

    Attributes:
        provider: "openai" or "anthropic": which API the client speaks.

    Args:
        client: An `openai.OpenAI` or `openai.AsyncOpenAI` client, or an
            `anthropic.Anthropic` or `anthropic.AsyncAnthropic` client.
        model: The judge model's name.
        temperature: Sampling temperature; 0 for repeatable verdicts; None sends none (the
            model's default). Claude models that take only their default temperature refuse
            any other: give them None.
        seed: Sent as `seed` where the server supports it; None to leave it out.
        max_tokens: The most tokens a judge reply may use; None for each judge's own default.
        timeout: Seconds per judge request, a finite number above 0; None for the client's
            timeout.
        cache: A judge cache (`MemoryCache`, `SQLiteCache`, or any `JudgeCache`) for every
            judge using this model: a request asked before (the same judge kind, endpoint,
            model, messages and parameters) is answered from it, with no model call and no
            usage counted. None (the default): no cache. See docs/judge_cache.md.
        cache_sampled: Cache replies sampled at a temperature above 0 (or at the model's
            default, `temperature=None`) too. False by default: a cache would hide the
            variability such a judge has on purpose; only temperature 0 is cached.
    """

    def __init__(
        self,
        client: Client,
        model: str,
        *,
        temperature: float | None = 0.0,
        seed: int | None = 42,
        max_tokens: int | None = None,
        timeout: float | None = None,
        cache: JudgeCache | None = None,
        cache_sampled: bool = False,
    ) -> None:
        anthropic_kind = client_kind(client)
        if anthropic_kind is None and not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
            raise TypeError(
                "JudgeModel needs an openai.OpenAI or openai.AsyncOpenAI client, or an "
                f"anthropic.Anthropic or anthropic.AsyncAnthropic one, got {type(client).__name__}"
            )
        if not isinstance(model, str) or not model:
            raise ValueError("JudgeModel needs the judge model's name, a non-empty str")
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
        if timeout is not None and (not is_number(timeout) or not is_real(timeout) or timeout <= 0):
            raise ValueError(
                "timeout must be a finite number of seconds > 0, or None for the client's "
                f"timeout; got {shown(timeout)}"
            )
        if cache is not None and not isinstance(cache, JudgeCache):
            raise TypeError(
                "cache must be a judge cache (refinekit.judges.MemoryCache, SQLiteCache, or an "
                f"object with get(key) and set(key, value) methods), got {type(cache).__name__}"
            )
        if not isinstance(cache_sampled, bool):
            raise TypeError(f"cache_sampled must be a bool, got {cache_sampled!r}")
        self._client: Any = client  # the caller's: never closed here
        self.provider: Literal["openai", "anthropic"] = (
            "openai" if anthropic_kind is None else "anthropic"
        )
        is_sync = isinstance(client, openai.OpenAI) or anthropic_kind == "sync"
        # typed Any: an `openai` or an `anthropic` client, by `provider`
        self._sync: Any = client if is_sync else None
        # closes the sync counterpart refinekit made (never your client) when this model is
        # collected or the interpreter exits, if `close()` did not: its pooled connections are
        # then closed in order, not left to the garbage collector (a ResourceWarning each)
        self._sync_closer: weakref.finalize[Any, Any] | None = None
        self._async: Any = None if is_sync else client
        # Async counterparts made from a sync client, one per event loop: an async HTTP
        # connection pool must not outlive the loop it was made on. Each comes with the
        # async generator that closes it when its loop shuts down (see `_closed_with_loop`).
        self._async_per_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        self.model = model
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.cache = cache
        self.cache_sampled = cache_sampled
        # the client's key, base URL credentials and credential headers: redacted literally
        # from whatever refinekit logs, raises, emits, traces, stores or reports while this
        # model lives (read from the client, which is left as it is)
        register_secrets(self, client_secrets(client))

    @property
    def where(self) -> str:
        """The endpoint, for messages: the base URL without credentials or query."""
        return safe_url(str(self._client.base_url))

    def __repr__(self) -> str:
        return f"JudgeModel(model={self.model!r}, endpoint={self.where!r})"

    def sync_client(self) -> Any:
        """The sync client: yours, or the counterpart made from your async client.

        An `openai.OpenAI` or an `anthropic.Anthropic` client, by `provider`.
        """
        client = self._sync
        if client is None:
            with _COUNTERPART_LOCK:  # criteria ask from several threads at once: make one
                if self._sync is None:
                    assert self._async is not None
                    if self.provider == "anthropic":
                        self._sync = anthropic_sync_counterpart(self._async)
                    else:
                        self._sync = sync_counterpart(self._async)
                    self._sync_closer = weakref.finalize(self, self._sync.close)
                client = self._sync
        return client

    def async_client(self) -> Any:
        """The async client: yours, or this event loop's counterpart made from your sync one.

        An `openai.AsyncOpenAI` or an `anthropic.AsyncAnthropic` client, by `provider`.
        """
        if self._async is not None:
            return self._async
        loop = asyncio.get_running_loop()
        with _COUNTERPART_LOCK:
            made = self._async_per_loop.get(loop)
            if made is None:
                assert self._sync is not None
                client: Any
                if self.provider == "anthropic":
                    client = anthropic_async_counterpart(self._sync)
                else:
                    client = async_counterpart(self._sync)
                closer = self._closed_with_loop(loop, client)
                _start(closer)  # now the loop's shutdown_asyncgens() will finish it
                made = self._async_per_loop[loop] = (client, closer)
        return made[0]

    async def _closed_with_loop(
        self, loop: asyncio.AbstractEventLoop, client: Any
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
            closer = self._sync_closer
            if closer is not None:
                self._sync = None
                self._sync_closer = None
        if closer is not None:
            closer()  # the counterpart's close(), once

    def __enter__(self) -> JudgeModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> JudgeModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def request(
        self, messages: list[dict[str, Any]], default_max_tokens: int, **extra: Any
    ) -> dict[str, Any]:
        """The keyword arguments of one request: a chat completion's, or a Messages API one's.

        For an Anthropic client the system messages become `system=`, `seed` is left out,
        and `extra` (OpenAI's options) is not sent.
        """
        if self.provider == "anthropic":
            return anthropic_request(
                sendable(messages),
                model=self.model,
                temperature=self.temperature,
                max_tokens=self.max_tokens or default_max_tokens,
                timeout=self.timeout,
            )
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": sendable(messages),
            "max_tokens": self.max_tokens or default_max_tokens,
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
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
