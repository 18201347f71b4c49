"""What refinekit knows of LangChain's replies: an `AIMessage` (or its dict form), by shape.

Nothing here imports `langchain_core`. A LangChain message's content parts may be bare
strings, its tool calls carry `name` and `args` (and those it could not parse are its
`invalid_tool_calls`), its usage is `usage_metadata` and its finish reason and model are in
`response_metadata` (in the provider's own words).

And its streamed replies: `.stream()` / `.astream()` iterators of `AIMessageChunk`s, read into
`Delta`s by a `ChunkReader` (content text, `tool_call_chunks`, `usage_metadata`, the finish
reason in `response_metadata`).
"""

from __future__ import annotations

from typing import Any

from .._core.types import Usage
from .anthropic import STOP_REASONS
from .chunks import Delta, ToolCalls, call_part, with_calls
from .fields import call_usage, get, tokens

__all__ = [
    "ChunkReader",
    "finish_reason",
    "invalid_tool_calls",
    "is_chunk",
    "is_message",
    "model",
    "tool_call",
    "usage",
]

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


_PROMPT = ("input_tokens",)
"""The usage block's fields of the prompt's tokens."""


def usage(message: Any) -> Usage:
    """`usage_metadata`'s `input_tokens` and `output_tokens`; one call without it."""
    return call_usage(get(message, "usage_metadata"), _PROMPT, "output_tokens")


def model(message: Any) -> Any:
    """`response_metadata`'s `model_name`, else its `model`."""
    metadata = get(message, "response_metadata")
    if metadata is None:
        return None
    name = get(metadata, "model_name")
    return name if isinstance(name, str) and name else get(metadata, "model")


def is_chunk(obj: Any) -> bool:
    """Whether `obj` is a streamed `AIMessageChunk` (`type: "AIMessageChunk"`), or its dict form."""
    return not isinstance(obj, (str, bytes)) and get(obj, "type") == "AIMessageChunk"


class ChunkReader:
    """Reads one stream's `AIMessageChunk`s into `Delta`s, in order (sans-I/O).

    The text is the content (a `str`, or its `str` and text parts); each `tool_call_chunks`
    entry adds to the call of its `index` (renumbered from 0 in the order calls start); the
    `usage_metadata` of the chunks, which LangChain adds up when it adds chunks, is added up
    here too (each delta with usage has the total so far); the finish reason and model are
    read from `response_metadata` (a provider's `stop_reason` too).
    """

    def __init__(self) -> None:
        self._prompt = 0
        self._output = 0
        self._calls = ToolCalls()  # tool_call_chunks' index (or id) -> ours

    def read(self, chunk: Any) -> list[Delta]:
        """The deltas of one chunk: one, or one per tool call it adds to."""
        content = get(chunk, "content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                p if isinstance(p, str) else str(get(p, "text") or "")
                for p in content
                if isinstance(p, str) or get(p, "type") == "text"
            )
        else:
            text = ""
        block = get(chunk, "usage_metadata")
        used = None
        if block is not None:
            self._prompt += tokens(block, "input_tokens")
            self._output += tokens(block, "output_tokens")
            used = Usage(model_calls=1, prompt_tokens=self._prompt, completion_tokens=self._output)
        reason = finish_reason(chunk)
        name = model(chunk)
        first = Delta(
            text=text,
            usage=used,
            finish_reason=STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None,
            model=name if isinstance(name, str) and name else None,
            raw=chunk,
        )
        calls = [self._call(call, chunk) for call in get(chunk, "tool_call_chunks") or ()]
        return with_calls(first, calls)

    def _call(self, call: Any, chunk: Any) -> Delta:
        return call_part(self._calls.number(call), get(call, "name"), get(call, "args"), chunk)
