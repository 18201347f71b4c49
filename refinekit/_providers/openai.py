"""What refinekit knows of OpenAI's replies: a `ChatCompletion` and its messages, by shape.

And its streamed replies: `chat.completion.chunk`s, read into `Delta`s by a `ChunkReader`
(the content's and the tool calls' deltas, the finish reason, the usage chunk that
`stream_options={"include_usage": True}` adds at the end). LiteLLM's `ModelResponse` and
`ModelResponseStream` chunks are these shapes too. Nothing here imports `openai` (the reply
reader, `replies`, reads any SDK's replies without their SDK); what refinekit knows of the
`openai` client itself (errors, counterparts, deadlines) is `openai_client`'s.
"""

from __future__ import annotations

from typing import Any

from .._core.types import Usage
from .deltas import Delta, ToolCalls, call_part, with_calls
from .fields import call_usage, get

__all__ = [
    "MANAGERS",
    "ChunkReader",
    "finish_reason",
    "first_message",
    "is_chunk",
    "is_completion",
    "is_helper_event",
    "model",
    "tool_call",
    "usage",
]


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


_PROMPT = ("prompt_tokens",)
"""The usage block's fields of the prompt's tokens."""


def usage(completion: Any) -> Usage:
    """A completion's `usage` (`prompt_tokens`, `completion_tokens`); one call without one."""
    return call_usage(get(completion, "usage"), _PROMPT, "completion_tokens")


def model(completion: Any) -> Any:
    """The completion's `model`, as sent."""
    return get(completion, "model")


MANAGERS = {"ChatCompletionStreamManager": False, "AsyncChatCompletionStreamManager": True}
"""`client.chat.completions.stream(...)`'s context managers by class name: is it async."""


def is_chunk(obj: Any) -> bool:
    """Whether `obj` is a streamed chunk: `"chat.completion.chunk"`, or choices with a delta.

    OpenAI's `ChatCompletionChunk`, LiteLLM's `ModelResponseStream`, or their dict forms.
    """
    if isinstance(obj, (str, bytes)) or obj is None:
        return False
    if get(obj, "object") == "chat.completion.chunk":
        return True
    choices = get(obj, "choices")
    return isinstance(choices, list) and bool(choices) and get(choices[0], "delta") is not None


def is_helper_event(obj: Any) -> bool:
    """Whether `obj` is one of a `ChatCompletionStream`'s events (`.stream()`'s helper).

    Its `"chunk"` event carries the chunk (its `chunk`); the others (`"content.delta"`,
    `"tool_calls.function.arguments.delta"`, ...) repeat what the chunks said.
    """
    kind = get(obj, "type")
    return kind == "chunk" or (isinstance(kind, str) and kind.endswith((".delta", ".done")))


class ChunkReader:
    """Reads one stream's chunks into `Delta`s, in order (sans-I/O: it is handed each chunk).

    The first choice's `delta.content` (or `delta.refusal`: the finish reason is then
    `"refusal"`) is text; each `delta.tool_calls`
    entry adds to the call of its `index` (renumbered from 0 in the order calls start);
    `finish_reason` and `usage` are read when a chunk has them (the usage chunk has no choice);
    a call's `name` is given on the first delta that carries it.
    """

    def __init__(self) -> None:
        self._calls = ToolCalls()  # the SDK's tool call index (or id) -> ours
        self._named: set[int] = set()  # the calls whose name was given

    def read(self, chunk: Any) -> list[Delta] | None:
        """The deltas of one chunk: one, or one per tool call it adds to.

        A `ChatCompletionStream` event gives its chunk's (`"chunk"`), or None (the others).
        """
        if not is_chunk(chunk) and is_helper_event(chunk):
            if get(chunk, "type") != "chunk":
                return None
            chunk = get(chunk, "chunk")
        block = get(chunk, "usage")
        used = None if block is None else call_usage(block, _PROMPT, "completion_tokens")
        name = get(chunk, "model")
        named = name if isinstance(name, str) and name else None
        choices = get(chunk, "choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        delta = get(choice, "delta")
        text = get(delta, "content")
        reason = get(choice, "finish_reason")
        if not isinstance(text, str) or not text:
            refusal = get(delta, "refusal")
            text = refusal if isinstance(refusal, str) else ""
            if text:  # the model declines: the stream ends as a refusal, as Anthropic's says
                reason = "refusal"
        first = Delta(
            text=text,
            usage=used,
            finish_reason=reason if isinstance(reason, str) and reason else None,
            model=named,
            raw=chunk,
        )
        calls = [self._call(call, chunk) for call in get(delta, "tool_calls") or ()]
        return with_calls(first, calls)

    def _call(self, call: Any, chunk: Any) -> Delta:
        number = self._calls.number(call)
        function = get(call, "function")
        name = get(function, "name")
        if not isinstance(name, str) or not name or number in self._named:
            name = None  # a name some SDKs repeat on every chunk is given once
        else:
            self._named.add(number)
        return call_part(number, name, get(function, "arguments"), chunk)
