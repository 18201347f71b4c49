"""What refinekit knows of the `anthropic` client: its errors, its settings, its time limits.

The counterpart of `openai_client` for judges over Anthropic's Messages API. Only the judges import
it, when a `JudgeModel` has an `anthropic` client, so `anthropic` is imported only by those
who use it (it is not a dependency of refinekit).

- `client_kind`: whether a client is an `anthropic.Anthropic` or `AsyncAnthropic`;
- `api_error`: an `anthropic` error as refinekit's `JudgeError` tree (or None);
- `sync_counterpart` / `async_counterpart`: a client of the other kind, same settings;
- `bounded`: a client whose requests end by the current `Timed` deadline;
- `request`: a judge's chat messages as a Messages API request.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._core.deadline import current_deadline
from .._core.errors import JudgeError
from .openai_client import (
    client_settings,
    deadline_bounded,
    error_message,
    retry_wait,
    sdk_error,
)

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "api_error",
    "async_counterpart",
    "bounded",
    "client_kind",
    "request",
    "sync_counterpart",
]


def client_kind(client: object) -> Literal["sync", "async"] | None:
    """Which kind of Anthropic client `client` is: "sync", "async", or None for any other.

    Never imports `anthropic`: a program that made an Anthropic client has imported it.
    """
    module = sys.modules.get("anthropic")
    if module is None:
        return None
    if isinstance(client, module.Anthropic):
        return "sync"
    if isinstance(client, module.AsyncAnthropic):
        return "async"
    return None


# --- errors ---------------------------------------------------------------------------------


def api_error(
    exc: BaseException, *, model: str, where: str, secrets: Sequence[str] = ()
) -> JudgeError | None:
    """The refinekit error for a failed Messages API request; None when `exc` is not one.

    The same mapping as `openai_client.api_error`: timeouts, connection errors, HTTP 408, 429 and
    5xx (Anthropic's 529 "overloaded" too) are `JudgeUnavailable`; 400, 401, 403, 404, 413
    and 422 are `JudgeMisconfigured`. The message never holds a credential (`secrets` and
    anything key-shaped are redacted from the server's error text).

    Args:
        exc: What the `anthropic` client raised.
        model: The judge model's name.
        where: Who failed, for the message.
        secrets: What to redact from the server's error text.
    """
    import anthropic

    error = sdk_error(
        exc, anthropic, model=model, where=where, secrets=secrets, reply="a Messages API reply"
    )
    if (
        error is not None
        and isinstance(exc, anthropic.APIStatusError)
        and exc.status_code == 400
        and "temperature" in error_message(exc, secrets).lower()
    ):
        error.args = (
            f"{error} (this model may take only its default temperature: pass "
            "temperature=None to JudgeModel)",
        )
    return error


# --- clients --------------------------------------------------------------------------------


def sync_counterpart(client: anthropic.AsyncAnthropic) -> anthropic.Anthropic:
    """A new sync client with `client`'s base URL, key, timeout, retries and headers."""
    import anthropic

    return anthropic.Anthropic(**client_settings(client, "auth_token"))


def async_counterpart(client: anthropic.Anthropic) -> anthropic.AsyncAnthropic:
    """A new async client with `client`'s base URL, key, timeout, retries and headers."""
    import anthropic

    return anthropic.AsyncAnthropic(**client_settings(client, "auth_token"))


# --- requests -------------------------------------------------------------------------------


def request(
    messages: list[dict[str, Any]],
    *,
    model: str,
    temperature: float | None,
    max_tokens: int,
    timeout: float | None,
) -> dict[str, Any]:
    """A judge's chat messages as the keyword arguments of `messages.create`.

    System messages become the `system` prompt (joined by blank lines); the others are sent
    as they are. `max_tokens` is required by the Messages API; there is no `seed`. A
    `temperature` goes in `extra_body` (anthropic 1.0 dropped the keyword; the API still takes
    it, on the models that have one); None sends none.
    """
    system = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": [m for m in messages if m.get("role") != "system"],
        "max_tokens": max_tokens,
    }
    if temperature is not None:
        kwargs["extra_body"] = {"temperature": temperature}
    if system:
        kwargs["system"] = "\n\n".join(system)
    if timeout is not None:
        kwargs["timeout"] = timeout
    return kwargs


# --- time limits ----------------------------------------------------------------------------


def bounded(client: Any) -> Any:
    """`client`, or, within a time limit, a copy whose `messages.create` ends by its deadline.

    As `openai_client.bounded` does for chat completions: each request's timeout is cut to the
    time left, and the client's transport retries are done here, only while they can end
    before the deadline.
    """
    import anthropic

    deadline = current_deadline()
    if deadline is None:
        return client
    copy = client.with_options(max_retries=0)
    messages = copy.messages
    retries = client.max_retries

    def own_timeout(kwargs: dict[str, Any]) -> Any:
        own = kwargs.pop("timeout", client.timeout)
        return None if isinstance(own, anthropic.NotGiven) else own

    create = deadline_bounded(
        messages.create,
        is_async=isinstance(copy, anthropic.AsyncAnthropic),
        own_timeout=own_timeout,
        deadline=deadline,
        wait_after=lambda exc, taken: _retry_wait(exc, taken, retries, deadline),
    )
    setattr(messages, "create", create)  # noqa: B010 - on our own copy only
    return copy


def _retry_wait(exc: Exception, taken: int, retries: int, deadline: float) -> float | None:
    """Seconds to wait before retrying a failed request, or None: no retry (see `bounded`)."""
    import anthropic

    return retry_wait(
        exc, taken, retries, deadline, anthropic.APIStatusError, anthropic.APIConnectionError
    )
