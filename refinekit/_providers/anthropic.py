"""What refinekit knows of Anthropic's replies: a Messages API `Message`, by shape.

Nothing here imports `anthropic`; what refinekit knows of the `anthropic` client itself
(errors, counterparts, a judge's request) is `anthropic_client`'s.
"""

from __future__ import annotations

from typing import Any

from .._core.types import Usage
from .fields import get, tokens

__all__ = ["STOP_REASONS", "finish_reason", "is_message", "model", "tool_uses", "usage"]

STOP_REASONS = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
}
"""Anthropic's stop reasons as OpenAI's finish reasons (`max_tokens` is `"length"`)."""


def is_message(obj: Any) -> bool:
    """Whether `obj` is a `Message`: `type: "message"`, `role: "assistant"`, a list of blocks."""
    return (
        get(obj, "type") == "message"
        and get(obj, "role") == "assistant"
        and isinstance(get(obj, "content"), list)
    )


def tool_uses(message: Any) -> list[tuple[Any, Any]]:
    """The message's `tool_use` content blocks as (name, input)."""
    content = get(message, "content")
    return [
        (get(block, "name"), get(block, "input"))
        for block in (content if isinstance(content, list) else ())
        if not isinstance(block, str) and get(block, "type") == "tool_use"
    ]


def finish_reason(message: Any) -> Any:
    """The message's `stop_reason`, as sent."""
    return get(message, "stop_reason")


def usage(message: Any) -> Usage:
    """A `Message`'s usage; one call without one.

    `input_tokens` plus the cache's `cache_creation_input_tokens` and
    `cache_read_input_tokens` as prompt tokens; `output_tokens`.
    """
    block = get(message, "usage")
    if block is None:
        return Usage(model_calls=1)
    prompt = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return Usage(
        model_calls=1,
        prompt_tokens=tokens(block, *prompt),
        completion_tokens=tokens(block, "output_tokens"),
    )


def model(message: Any) -> Any:
    """The message's `model`, as sent."""
    return get(message, "model")
