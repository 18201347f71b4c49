"""Counting model calls and tokens on the wire, the same way for every library.

Each `openai` client of `bench_local_quality.py` gets an `http_client` whose transport wraps
the real one: every POST to `.../chat/completions` is a model call, and the `usage` of its JSON
response body gives the prompt and completion tokens, whatever the library on top reports (or
fails to report) about them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

try:  # the HTTP library the openai client is built on: httpx2 in newer releases, else httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the openai release
    import httpx  # type: ignore[no-redef]

__all__ = ["Counter", "Tally", "async_http_client", "http_client"]


@dataclass
class Tally:
    """Calls and tokens seen so far.

    `errors` counts calls that failed (an HTTP status of 400 or more, or no response at all);
    `cut_off` the replies that stopped at `max_tokens` (`finish_reason` "length"). `last_reply`
    and `last_finish` are the text and `finish_reason` of the last reply seen.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    cut_off: int = 0
    last_reply: str | None = None
    last_finish: str | None = None

    def minus(self, other: Tally) -> Tally:
        """What was added since `other` (an earlier snapshot); the last reply is this one's."""
        return Tally(
            self.calls - other.calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.errors - other.errors,
            self.cut_off - other.cut_off,
            self.last_reply,
            self.last_finish,
        )


class Counter:
    """A thread-safe running `Tally` of the chat completion calls made through its transports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tally = Tally()

    def snapshot(self) -> Tally:
        with self._lock:
            return Tally(**vars(self._tally))

    def record(self, status: int | None, body: bytes) -> None:
        """Count one call: its HTTP status (None: no response) and its response body."""
        data: dict[str, Any] = {}
        if status is not None and status < 400:
            try:
                loaded = json.loads(body)
            except ValueError:
                loaded = None
            data = loaded if isinstance(loaded, dict) else {}
        usage = data.get("usage") or {}
        choices = data.get("choices") or [{}]
        message = choices[0].get("message") or {}
        finish = choices[0].get("finish_reason")
        with self._lock:
            t = self._tally
            t.calls += 1
            t.errors += status is None or status >= 400
            t.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            t.completion_tokens += int(usage.get("completion_tokens") or 0)
            t.cut_off += finish == "length"
            t.last_reply = message.get("content")
            t.last_finish = finish


def _counted(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/chat/completions")


class _Transport(httpx.BaseTransport):
    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not _counted(request):
            return self._inner.handle_request(request)
        try:
            response = self._inner.handle_request(request)
            body = response.read()  # kept by the response: the client reads it again
        except Exception:
            self._counter.record(None, b"")
            raise
        self._counter.record(response.status_code, body)
        return response

    def close(self) -> None:
        self._inner.close()


class _AsyncTransport(httpx.AsyncBaseTransport):
    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not _counted(request):
            return await self._inner.handle_async_request(request)
        try:
            response = await self._inner.handle_async_request(request)
            body = await response.aread()
        except Exception:
            self._counter.record(None, b"")
            raise
        self._counter.record(response.status_code, body)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(counter: Counter, timeout: float) -> httpx.Client:
    """An `httpx` client for `openai.OpenAI(http_client=...)` that counts into `counter`."""
    return httpx.Client(transport=_Transport(counter), timeout=timeout)


def async_http_client(counter: Counter, timeout: float) -> httpx.AsyncClient:
    """An async `httpx` client for `openai.AsyncOpenAI(http_client=...)`, likewise."""
    return httpx.AsyncClient(transport=_AsyncTransport(counter), timeout=timeout)
