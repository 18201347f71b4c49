"""What refinekit knows of LangChain's replies: an `AIMessage` (or its dict form), by shape.

Nothing here imports `langchain_core`. A LangChain message's content parts may be bare
strings, its tool calls carry `name` and `args` (and those it could not parse are its
`invalid_tool_calls`), its usage is `usage_metadata` and its finish reason and model are in
`response_metadata` (in the provider's own words).
"""

from __future__ import annotations

from typing import Any

from .._core.types import Usage
from .fields import get, tokens

__all__ = ["finish_reason", "invalid_tool_calls", "is_message", "model", "tool_call", "usage"]

_TYPES = frozenset({"ai", "AIMessageChunk"})


def is_message(obj: Any) -> bool:
    """Whether `obj` is an `AIMessage`: `type: "ai"` (`"AIMessageChunk"` streamed, added up)."""
    return get(obj, "type") in _TYPES


def tool_call(call: Any) -> tuple[Any, Any]:
    """One of a message's `tool_calls` as (name, arguments): `name` and `args` (a dict)."""
    return get(call, "name"), get(call, "args")


def invalid_tool_calls(message: Any) -> list[tuple[Any, Any]]:
    """The tool calls LangChain could not parse, as (name, the raw arguments text)."""
    return [
        (get(call, "name"), get(call, "args")) for call in get(message, "invalid_tool_calls") or ()
    ]


def finish_reason(message: Any) -> Any:
    """`response_metadata`'s `finish_reason` (or a provider's `stop_reason`), as sent."""
    metadata = get(message, "response_metadata")
    return get(metadata, "finish_reason") or get(metadata, "stop_reason")


def usage(message: Any) -> Usage:
    """`usage_metadata`'s `input_tokens` and `output_tokens`; one call without it."""
    block = get(message, "usage_metadata")
    if block is None:
        return Usage(model_calls=1)
    return Usage(
        model_calls=1,
        prompt_tokens=tokens(block, "input_tokens"),
        completion_tokens=tokens(block, "output_tokens"),
    )


def model(message: Any) -> Any:
    """`response_metadata`'s `model_name`, else its `model`."""
    metadata = get(message, "response_metadata")
    if metadata is None:
        return None
    name = get(metadata, "model_name")
    return name if isinstance(name, str) and name else get(metadata, "model")
