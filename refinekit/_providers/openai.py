"""What refinekit knows of OpenAI's replies: a `ChatCompletion` and its messages, by shape.

LiteLLM's `ModelResponse` is this shape too. Nothing here imports `openai` (the reply
reader, `replies`, reads any SDK's replies without their SDK); what refinekit knows of the
`openai` client itself (errors, counterparts, deadlines) is `openai_client`'s.
"""

from __future__ import annotations

from typing import Any

from .._core.types import Usage
from .fields import get, tokens

__all__ = ["finish_reason", "first_message", "is_completion", "model", "tool_call", "usage"]


def is_completion(obj: Any) -> bool:
    """Whether `obj` is shaped like a chat completion (it has `choices`).

    A pydantic response class that declares `choices` (the `openai` client's `ChatCompletion`,
    LiteLLM's `ModelResponse`) is one even when the body it was built from had none (`{}`,
    `"choices": null`).
    """
    if isinstance(obj, str):
        return False
    if get(obj, "choices") is not None:
        return True
    return "choices" in getattr(type(obj), "model_fields", {})


def first_message(completion: Any) -> Any:
    """The message of a completion's first choice; None when it has no choice."""
    choices = get(completion, "choices")
    return get(choices[0], "message") if choices else None


def tool_call(call: Any) -> tuple[Any, Any]:
    """One of a message's `tool_calls` as (name, arguments): `function.name`, `.arguments`."""
    function = get(call, "function")
    return get(function, "name"), get(function, "arguments")


def finish_reason(completion: Any) -> Any:
    """The first choice's `finish_reason`, as sent (None without a choice)."""
    choices = get(completion, "choices")
    return get(choices[0], "finish_reason") if choices else None


def usage(completion: Any) -> Usage:
    """A completion's `usage` (`prompt_tokens`, `completion_tokens`); one call without one."""
    block = get(completion, "usage")
    if block is None:
        return Usage(model_calls=1)
    return Usage(
        model_calls=1,
        prompt_tokens=tokens(block, "prompt_tokens"),
        completion_tokens=tokens(block, "completion_tokens"),
    )


def model(completion: Any) -> Any:
    """The completion's `model`, as sent."""
    return get(completion, "model")
