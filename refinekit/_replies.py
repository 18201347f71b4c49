"""Reading model replies: their text, their tool calls and their token usage, never changing them.

The one reader of what a model sent back, for every part of refinekit: a reply is an OpenAI
`ChatCompletion` (or its dict form), a message of one, or a plain `str`. Attribute and key
access are alike (`get`), so a reply made by another SDK in the same shape reads the same.
Nothing here imports `openai`.

- `first_message(reply)`: the first choice's message, or None when there is no choice;
- `message_text(message)`: its text (content, or its text parts);
- `tool_call_names(message)`: the tools it asked to call;
- `reply_text(reply)`: the text `@self_correct` parses (a single tool call's arguments too);
- `answer_text(value)`: any answer as text for an evaluator (a model as JSON);
- `usage_of(reply)`: the token usage it carries;
- `finish_reason_of(reply)`: why the model stopped (`"length"`: cut off at its limit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pydantic_core
from pydantic import BaseModel

from ._errors import ReplyShapeError
from ._model import Usage

__all__ = [
    "answer_text",
    "finish_reason_of",
    "first_message",
    "get",
    "is_completion",
    "message_text",
    "reply_text",
    "tool_call_names",
    "usage_of",
]


def get(obj: Any, name: str) -> Any:
    """`obj[name]` for a mapping, else `obj.name`; None when it has no such field."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def is_completion(obj: Any) -> bool:
    """Whether `obj` is shaped like a chat completion (it has `choices`).

    A pydantic response class that declares `choices` (the `openai` client's `ChatCompletion`)
    is one even when the body it was built from had none (`{}`, `"choices": null`).
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


def message_text(message: Any, *, refusal: bool = False) -> str:
    """A message's text: its `content`, or the text of its content parts; else "".

    Args:
        message: The message (None reads as "").
        refusal: Read a message with no content as its `refusal` text, when it has one.
    """
    content = get(message, "content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(get(p, "text") or "") for p in content)
    if refusal:
        said = get(message, "refusal")
        if isinstance(said, str):
            return said
    return ""


def tool_call_names(message: Any) -> tuple[str, ...]:
    """The names of the tools a message asks to call (a legacy `function_call` too)."""
    calls = get(message, "tool_calls") or []
    names = tuple(str(get(get(c, "function"), "name") or "?") for c in calls)
    legacy = get(message, "function_call")
    if legacy is not None:
        names += (str(get(legacy, "name") or "?"),)
    return names


def _parse_text(message: Any) -> str:
    tool_calls = get(message, "tool_calls")
    if tool_calls:
        if len(tool_calls) != 1:
            rendered = [
                {
                    "name": get(get(call, "function"), "name"),
                    "arguments": get(get(call, "function"), "arguments"),
                }
                for call in tool_calls
            ]
            raise ReplyShapeError(
                f"the reply made {len(tool_calls)} tool calls; exactly one was expected",
                json.dumps(rendered, default=str),
            )
        function = get(tool_calls[0], "function")
        arguments = get(function, "arguments") if function is not None else None
        return arguments if isinstance(arguments, str) else ""
    return message_text(message, refusal=True)


def reply_text(reply: Any) -> str:
    """The text to parse from what a wrapped function returned.

    A `str` is itself; an OpenAI `ChatCompletion` (or its dict form) gives its first choice's
    message; a message gives its content (its refusal when it has no content), or the
    arguments of its single tool call.

    Raises:
        ReplyShapeError: The message made several tool calls, or the completion has no choice.
        TypeError: The reply is none of those shapes.
    """
    if isinstance(reply, str):
        return reply
    if is_completion(reply):
        if not get(reply, "choices"):
            raise ReplyShapeError("the reply has no choices")
        return _parse_text(first_message(reply))
    if (
        get(reply, "content") is not None
        or get(reply, "tool_calls") is not None
        or (get(reply, "role") == "assistant")
    ):
        return _parse_text(reply)
    raise TypeError(
        "a function decorated with @self_correct must return the model's reply: a str, an "
        f"OpenAI ChatCompletion or a message; it returned {type(reply).__name__}"
    )


def finish_reason_of(reply: Any) -> str | None:
    """Why the model stopped, when the reply says: `"length"` for a reply cut off at its limit.

    Read from an OpenAI `ChatCompletion` (its first choice) or its dict form; None for a
    `str` or a message, which do not carry it.
    """
    if isinstance(reply, str) or not is_completion(reply):
        return None
    choices = get(reply, "choices")
    if not choices:
        return None
    reason = get(choices[0], "finish_reason")
    return reason if isinstance(reason, str) else None


def usage_of(reply: Any) -> Usage | None:
    """The token usage a `ChatCompletion` (or its dict form) carries; None for anything else.

    A completion without a `usage` block still counts as one model call.
    """
    if isinstance(reply, str) or not is_completion(reply):
        return None
    usage = get(reply, "usage")
    if usage is None:
        return Usage(model_calls=1)
    prompt = get(usage, "prompt_tokens")
    completion = get(usage, "completion_tokens")
    return Usage(
        model_calls=1,
        prompt_tokens=prompt if isinstance(prompt, int) else 0,
        completion_tokens=completion if isinstance(completion, int) else 0,
    )


def answer_text(value: Any) -> str:
    """An answer as text for an evaluator: str as is, a reply's text, a model as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if is_completion(value):
        try:
            return reply_text(value)
        except ReplyShapeError:
            pass
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError:
        return str(value)
