"""What refinekit knows of LiteLLM's streams: its `CustomStreamWrapper`, by shape.

LiteLLM's replies are OpenAI's shape (`openai` reads a `ModelResponse`), and so are its
streamed chunks (`ModelResponseStream`, read by `openai.ChunkReader`). What is LiteLLM's own
is the wrapper: one class for both `litellm.completion(stream=True)` (read with `next`) and
`litellm.acompletion(stream=True)` (read with `anext`), each closed by its own `close()` /
`aclose()`. A stream that breaks mid-way raises its `MidStreamFallbackError` (whatever broke
it: a dropped connection, a timeout), with the provider's error inside. Nothing here imports
`litellm`.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["broke_mid_stream", "connection_of", "is_async", "is_wrapper"]


def is_wrapper(obj: Any) -> bool:
    """Whether `obj` is a stream wrapper both sync and async: `__next__` and `__anext__`."""
    kind = type(obj)
    return hasattr(kind, "__next__") and hasattr(kind, "__anext__")


def is_async(wrapper: Any) -> bool | None:
    """Whether a `CustomStreamWrapper` streams an async call; None when it does not say.

    Its `completion_stream` is the provider's stream (an async iterator for an `acompletion`);
    before its first chunk it may have none yet, and a `make_call` (a coroutine function for an
    `acompletion`) to open it.
    """
    stream = getattr(wrapper, "completion_stream", None)
    if stream is not None and not isinstance(stream, (str, bytes)):
        if hasattr(type(stream), "__anext__") or hasattr(type(stream), "__aiter__"):
            return True
        if hasattr(type(stream), "__next__") or hasattr(type(stream), "__iter__"):
            return False
    make_call = getattr(wrapper, "make_call", None)
    if make_call is not None:
        return inspect.iscoroutinefunction(make_call)
    return None


def connection_of(wrapper: Any) -> Any:
    """What to close before `aclose()`, so that a stream's connection is closed too; or None.

    LiteLLM's async calls go through its aiohttp transport, whose response `aclose()`
    releases the connection to aiohttp's pool unread and open (so the server goes on
    generating); closing the aiohttp response itself closes the connection. None when the
    wrapper streams otherwise.
    """
    response = getattr(getattr(wrapper, "completion_stream", None), "response", None)
    stream = getattr(response, "stream", None)  # httpx's, around the transport's
    inner = getattr(getattr(stream, "_stream", stream), "_aiohttp_response", None)
    return inner if callable(getattr(inner, "close", None)) else None


def broke_mid_stream(error: BaseException) -> bool:
    """Whether `error` is LiteLLM's word for a stream that broke after it began."""
    return any(
        cls.__name__ == "MidStreamFallbackError" and cls.__module__.startswith("litellm")
        for cls in type(error).__mro__
    )
