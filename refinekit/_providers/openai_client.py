"""What refinekit knows of the `openai` client: its errors, its settings, its time limits.

The engine and the two core decorators never import this module (they wrap any callable,
whatever SDK it uses); the judges import it, and `@reviewed` only when its default reviser
calls a model.

- `api_error`: an `openai` error as refinekit's `JudgeError` tree (or None);
- `retry_after_of`: the wait a server asked for;
- `sync_counterpart` / `async_counterpart`: a client of the other kind, same settings;
- `bounded`: a client whose requests end by the current `Timed` deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

import openai

from .._core.config import is_testing
from .._core.deadline import current_deadline
from .._core.errors import DeadlinePassed, JudgeError, JudgeMisconfigured, JudgeUnavailable
from .._core.redact import redact

__all__ = [
    "MISCONFIGURED",
    "api_error",
    "async_counterpart",
    "bounded",
    "client_settings",
    "error_message",
    "retry_after_of",
    "sdk_error",
    "status_error",
    "sync_counterpart",
]

MISCONFIGURED = frozenset({400, 401, 403, 404, 422})
"""HTTP statuses that mean a bad key, model or request: a misconfiguration, never an outage."""

_HINTS = {
    401: " (check the API key)",
    403: " (check the key's permissions)",
    404: " (check the model name and base URL)",
}


# --- errors ---------------------------------------------------------------------------------


def api_error(
    exc: BaseException, *, model: str, where: str, secrets: Sequence[str] = ()
) -> JudgeError | None:
    """The refinekit error for a failed request to a judge model; None when `exc` is not one.

    Its message never holds a credential: the server's error text may echo the key it was
    sent, so `secrets` (the client's key, its base URL's password, its credential headers)
    and anything key-shaped are redacted from it.

    Args:
        exc: What the `openai` client raised.
        model: The judge model's name.
        where: Who failed, for the message (e.g. "judge model 'x' at http://host/v1").
        secrets: What to redact from the server's error text.
    """
    return sdk_error(
        exc, openai, model=model, where=where, secrets=secrets, reply="a chat completion"
    )


def sdk_error(
    exc: BaseException,
    sdk: ModuleType,
    *,
    model: str,
    where: str,
    secrets: Sequence[str],
    reply: str,
) -> JudgeError | None:
    """The refinekit error for a failed request of an SDK built as `openai`'s is (`anthropic`).

    Both raise the same errors: a timeout, a connection error, an HTTP error status, a reply
    that is not the API's.

    Args:
        exc: What the SDK's client raised.
        sdk: The SDK's module (`openai`, `anthropic`).
        model: The judge model's name.
        where: Who failed, for the message.
        secrets: What to redact from the server's error text.
        reply: What the API replies, for the message ("a chat completion").
    """
    where = redact(where, secrets)
    if isinstance(exc, sdk.APITimeoutError):
        return JudgeUnavailable(f"{where}: request timed out", model=model)
    if isinstance(exc, sdk.APIConnectionError):
        return JudgeUnavailable(f"{where}: could not connect", model=model)
    if isinstance(exc, sdk.APIStatusError):
        return status_error(exc, exc.status_code, error_message(exc, secrets), model, where)
    # a body that is not JSON, nested deeper than Python's json reads (a RecursionError), or
    # holding an integer longer than Python converts (4,300 digits)
    if isinstance(exc, (sdk.APIResponseValidationError, json.JSONDecodeError, RecursionError)) or (
        type(exc) is ValueError and "integer string conversion" in str(exc)
    ):
        return JudgeUnavailable(f"{where}: the reply was not {reply}", model=model)
    return None


def status_error(
    exc: BaseException, status: int, detail: str, model: str, where: str
) -> JudgeError:
    """The refinekit error for an HTTP error status from a judge's endpoint (any SDK's).

    Args:
        exc: The SDK's error (its response's headers give `retry_after`).
        status: The HTTP status.
        detail: The server's error message, redacted.
        model: The judge model's name.
        where: Who failed, for the message, redacted.
    """
    message = f"{where}: HTTP {status}" + (f": {detail}" if detail else "")
    if status in MISCONFIGURED:
        hint = _HINTS.get(status, "")
        return JudgeMisconfigured(message + hint, model=model, status_code=status)
    if status >= 500 and _refused_request(detail):
        # llama.cpp's server (and others built on FastAPI) answer a request they cannot
        # take, e.g. response_format {"type": "json_schema"}, with a 500 and a validation
        # error: no retry helps, so it is a misconfiguration, not an outage.
        return JudgeMisconfigured(
            message + " (the server refused the request itself; if it names response_format, "
            "this server does not support that mode: try mode='JSON' or 'MD_JSON')",
            model=model,
            status_code=status,
        )
    if status == 408 or status == 429 or status >= 500:
        error = JudgeUnavailable(message, model=model, status_code=status)
        error.retry_after = retry_after_of(exc)
        return error
    return JudgeMisconfigured(message, model=model, status_code=status)


def _refused_request(detail: str) -> bool:
    """Whether an error message is a server's validation error about the request's body."""
    lowered = detail.lower()
    return "validation error" in lowered and ("'body'" in lowered or "response_format" in lowered)


def error_message(exc: Any, secrets: Sequence[str] = ()) -> str:
    """The server's error message, on one line, redacted (before it is shortened).

    Read from the error's JSON `body`: OpenAI's `{"error": {"message"}}`, Anthropic's
    `{"type": "error", "error": {"message"}}`, or a body's own `message`.
    """
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else None
    text = redact(" ".join(str(message or "").split()), secrets)
    return text[:300]


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms` or `retry-after`), if it said.

    Read from the headers of the response an `openai` error carries; None without one.
    """
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


# --- clients --------------------------------------------------------------------------------


def client_settings(client: Any, *own: str) -> dict[str, Any]:
    """What a client of an SDK built as `openai`'s is (`anthropic`) is made with, by keyword.

    Its key, base URL, timeout, retries, headers and query, and its SDK's `own` settings.
    """
    settings = {
        name: getattr(client, name)
        for name in ("api_key", *own, "base_url", "timeout", "max_retries")
    }
    settings["default_headers"] = getattr(client, "_custom_headers", None)
    settings["default_query"] = getattr(client, "_custom_query", None)
    return settings


_OWN = ("organization", "project")
"""The settings of an `openai` client that other SDKs' clients do not have."""


def sync_counterpart(client: openai.AsyncOpenAI) -> openai.OpenAI:
    """A new sync client with `client`'s base URL, key, timeout, retries and headers.

    It is the caller's to close.
    """
    return openai.OpenAI(**client_settings(client, *_OWN))


def async_counterpart(client: openai.OpenAI) -> openai.AsyncOpenAI:
    """A new async client with `client`'s base URL, key, timeout, retries and headers.

    It is the caller's to close, on the event loop it is used on.
    """
    return openai.AsyncOpenAI(**client_settings(client, *_OWN))


# --- time limits ----------------------------------------------------------------------------

C = TypeVar("C", openai.OpenAI, openai.AsyncOpenAI)


def bounded(client: C) -> C:
    """`client`, or, within a time limit, a copy whose chat completions end by its deadline.

    The copy (`with_options`, which shares the client's connection pool) sends each request
    with `timeout` cut to the time left, and does the client's transport retries itself
    (its `max_retries`, on the errors the openai client retries, after the wait the server
    asks or the same backoff) only while they can end before the deadline. A request past
    the deadline is not sent. So a judge call that a sync `Timed` stopped waiting for stops
    too, instead of going on in its worker thread.
    """
    deadline = current_deadline()
    if deadline is None:
        return client
    copy = client.with_options(max_retries=0)
    completions = copy.chat.completions
    retries = client.max_retries
    create = deadline_bounded(
        completions.create,
        is_async=isinstance(copy, openai.AsyncOpenAI),
        own_timeout=lambda kwargs: kwargs.pop("timeout", client.timeout),
        deadline=deadline,
        wait_after=lambda exc, taken: _retry_wait(exc, taken, retries, deadline),
    )
    setattr(completions, "create", create)  # noqa: B010 - on our own copy only
    return copy


def deadline_bounded(
    create: Callable[..., Any],
    *,
    is_async: bool,
    own_timeout: Callable[[dict[str, Any]], Any],
    deadline: float,
    wait_after: Callable[[Exception, int], float | None],
) -> Callable[..., Any]:
    """`create` (an SDK's request method) bounded by `deadline`, retrying itself.

    Each request's timeout is cut to end by `deadline`; a failed request is retried after
    `wait_after(exc, retries_taken)` seconds until that says None. The one loop of `bounded`
    here and of `refinekit._providers.anthropic_client.bounded`, sync or async.
    """
    if is_async:

        async def acreate(**kwargs: Any) -> Any:
            own = own_timeout(kwargs)
            for taken in itertools.count():
                try:
                    return await create(**kwargs, timeout=_cut(own, deadline))
                except Exception as exc:
                    wait = wait_after(exc, taken)
                    if wait is None:
                        raise
                    await asyncio.sleep(wait)

        return acreate

    def screate(**kwargs: Any) -> Any:
        own = own_timeout(kwargs)
        for taken in itertools.count():
            try:
                return create(**kwargs, timeout=_cut(own, deadline))
            except Exception as exc:
                wait = wait_after(exc, taken)
                if wait is None:
                    raise
                time.sleep(wait)

    return screate


def _cut(timeout: Any, deadline: float) -> Any:
    """A request timeout that ends by `deadline` (a number, None or an httpx `Timeout`)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlinePassed("the judge request's time limit had passed")
    if timeout is None or isinstance(timeout, openai.NotGiven):
        return left
    if isinstance(timeout, (int, float)):
        return min(float(timeout), left)
    parts = {}
    for name in ("connect", "read", "write", "pool"):  # an httpx Timeout, e.g. the default
        value = getattr(timeout, name, None)
        parts[name] = left if value is None else min(float(value), left)
    return type(timeout)(**parts)


def _retry_wait(exc: Exception, taken: int, retries: int, deadline: float) -> float | None:
    """Seconds to wait before retrying a failed request, or None: no retry (see `bounded`)."""
    return retry_wait(
        exc, taken, retries, deadline, openai.APIStatusError, openai.APIConnectionError
    )


def retry_wait(
    exc: Exception,
    taken: int,
    retries: int,
    deadline: float,
    status_error_type: type[Exception],
    connection_error_type: type[Exception],
) -> float | None:
    """Seconds to wait before retrying a failed request, or None: no retry.

    The SDKs' own rule (openai's and anthropic's are the same): the server's `x-should-retry`,
    else 408, 409, 429 and 5xx and connection errors (timeouts included), after the server's
    `Retry-After` or an exponential backoff, never past `deadline`. The SDK's error types are
    passed in, so this module's rule serves both SDKs.
    """
    if taken >= retries:
        return None
    if isinstance(exc, status_error_type):
        told = exc.response.headers.get("x-should-retry")  # type: ignore[attr-defined]
        status = exc.status_code  # type: ignore[attr-defined]
        if told == "false" or (told != "true" and status not in (408, 409, 429) and status < 500):
            return None
    elif not isinstance(exc, connection_error_type):  # timeouts included
        return None
    wait = retry_after_of(exc)
    if wait is None:
        wait = min(0.5 * 2.0**taken, 8.0)
    if time.monotonic() + wait >= deadline:
        return None
    return 0.0 if is_testing() else wait
