"""What refinekit knows of Anthropic's replies: a Messages API `Message`, by shape.

And its streamed replies: the Messages API's stream events (`message_start`,
`content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`), as
`client.messages.create(stream=True)` yields them and as the `messages.stream()` helper's
`MessageStream` does (whose own `text`, `input_json`, ... events repeat the raw ones and are
skipped), read into `Delta`s by an `EventReader`.

Nothing here imports `anthropic`; what refinekit knows of the `anthropic` client itself
(errors, counterparts, a judge's request) is `anthropic_client`'s.
"""

from __future__ import annotations

from typing import Any

from .._core.errors import StreamInterrupted
from .._core.types import Usage
from .chunks import Delta
from .fields import call_usage, get, tokens

__all__ = [
    "MANAGERS",
    "STOP_REASONS",
    "EventReader",
    "finish_reason",
    "is_event",
    "is_message",
    "model",
    "tool_uses",
    "usage",
]

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


_PROMPT = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def usage(message: Any) -> Usage:
    """A `Message`'s usage; one call without one.

    `input_tokens` plus the cache's `cache_creation_input_tokens` and
    `cache_read_input_tokens` as prompt tokens; `output_tokens`.
    """
    return call_usage(get(message, "usage"), _PROMPT, "output_tokens")


def model(message: Any) -> Any:
    """The message's `model`, as sent."""
    return get(message, "model")


MANAGERS = {
    "MessageStreamManager": False,
    "AsyncMessageStreamManager": True,
    "BetaMessageStreamManager": False,
    "BetaAsyncMessageStreamManager": True,
}
"""`client.messages.stream(...)`'s context managers by class name: is it async."""

_EVENTS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)
_HELPER_EVENTS = frozenset({"text", "input_json", "citation", "thinking", "signature"})
"""`MessageStream`'s own events, each repeating a raw `content_block_delta` it also yields."""


def is_event(obj: Any) -> bool:
    """Whether `obj` is a Messages API stream event (or a `MessageStream` helper event)."""
    if isinstance(obj, (str, bytes)) or obj is None:
        return False
    kind = get(obj, "type")
    return kind in _EVENTS or kind in _HELPER_EVENTS


class EventReader:
    """Reads one stream's events into `Delta`s, in order (sans-I/O: it is handed each event).

    `message_start` gives the model and the usage so far (the prompt's tokens);
    `content_block_start` a `tool_use` block's name (its calls renumbered from 0, text blocks
    not counted); `content_block_delta` a `text_delta`'s text or an `input_json_delta`'s
    `partial_json`; `message_delta` the stop reason (as OpenAI's finish reason) and the output
    tokens so far. Other events (`ping`, `*_stop`, thinking deltas) give an empty delta.
    """

    def __init__(self) -> None:
        self._prompt = 0
        self._output = 0
        self._calls: dict[Any, int] = {}  # content block index -> tool call number

    def read(self, event: Any) -> list[Delta] | None:
        """The deltas of one event; None for a helper event that repeats a raw one.

        Raises:
            StreamInterrupted: An `error` event (what a stream's dict form may carry; the
                `anthropic` client raises its own error instead).
        """
        kind = get(event, "type")
        if kind in _HELPER_EVENTS:
            return None
        if kind == "error":
            error = get(event, "error")
            said = get(error, "message") or get(error, "type") or "an error event"
            raise StreamInterrupted(f"the stream sent an error: {said}")
        if kind == "message_start":
            message = get(event, "message")
            used = self._usage(get(message, "usage"))
            return [Delta(usage=used, model=_name(message), raw=event)]
        if kind == "content_block_start":
            block = get(event, "content_block")
            if get(block, "type") == "tool_use":
                number = self._calls.setdefault(get(event, "index"), len(self._calls))
                name = get(block, "name")
                named = name if isinstance(name, str) and name else None
                return [Delta(tool_name=named, tool_index=number, raw=event)]
            text = get(block, "text") if get(block, "type") == "text" else None
            return [Delta(text=text if isinstance(text, str) else "", raw=event)]
        if kind == "content_block_delta":
            delta = get(event, "delta")
            if get(delta, "type") == "text_delta":
                text = get(delta, "text")
                return [Delta(text=text if isinstance(text, str) else "", raw=event)]
            if get(delta, "type") == "input_json_delta":
                part = get(delta, "partial_json")
                number = self._calls.setdefault(get(event, "index"), len(self._calls))
                arguments = part if isinstance(part, str) else ""
                return [Delta(tool_arguments=arguments, tool_index=number, raw=event)]
            return [Delta(raw=event)]
        if kind == "message_delta":
            reason = get(get(event, "delta"), "stop_reason")
            stopped = STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None
            return [Delta(usage=self._usage(get(event, "usage")), finish_reason=stopped, raw=event)]
        return [Delta(raw=event)]

    def _usage(self, block: Any) -> Usage | None:
        """The usage so far: a block's counts replace those before (they are cumulative)."""
        if block is None:
            return None
        if any(get(block, name) is not None for name in _PROMPT):
            self._prompt = tokens(block, *_PROMPT)
        if get(block, "output_tokens") is not None:
            self._output = tokens(block, "output_tokens")
        return Usage(model_calls=1, prompt_tokens=self._prompt, completion_tokens=self._output)


def _name(message: Any) -> str | None:
    name = get(message, "model")
    return name if isinstance(name, str) and name else None
