"""Reading model replies: their text and their token usage, without changing them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pydantic_core
from pydantic import BaseModel

from ._model import Usage


class ReplyShapeError(ValueError):
    """A reply that holds no single text to parse (e.g. two tool calls); corrected like bad JSON.

    `text` renders what the reply did hold, to show the model what it sent.
    """

    def __init__(self, message: str, text: str = "") -> None:
        super().__init__(message)
        self.text = text


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _is_completion(obj: Any) -> bool:
    return _get(obj, "choices") is not None and not isinstance(obj, str)


def _message_text(message: Any) -> str:
    tool_calls = _get(message, "tool_calls")
    if tool_calls:
        if len(tool_calls) != 1:
            rendered = [
                {
                    "name": _get(_get(call, "function"), "name"),
                    "arguments": _get(_get(call, "function"), "arguments"),
                }
                for call in tool_calls
            ]
            raise ReplyShapeError(
                f"the reply made {len(tool_calls)} tool calls; exactly one was expected",
                json.dumps(rendered, default=str),
            )
        function = _get(tool_calls[0], "function")
        arguments = _get(function, "arguments") if function is not None else None
        return arguments if isinstance(arguments, str) else ""
    content = _get(message, "content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(_get(p, "text") or "") for p in content)
    refusal = _get(message, "refusal")
    return refusal if isinstance(refusal, str) else ""


def reply_text(reply: Any) -> str:
    """The text to parse from what a wrapped function returned.

    A `str` is itself; an OpenAI `ChatCompletion` (or its dict form) gives its first choice's
    message; a message gives its content, or the arguments of its single tool call.

    Raises:
        ReplyShapeError: The message made several tool calls, or the completion has no choice.
        TypeError: The reply is none of those shapes.
    """
    if isinstance(reply, str):
        return reply
    if _is_completion(reply):
        choices = _get(reply, "choices")
        if not choices:
            raise ReplyShapeError("the reply has no choices")
        return _message_text(_get(choices[0], "message"))
    if (
        _get(reply, "content") is not None
        or _get(reply, "tool_calls") is not None
        or (_get(reply, "role") == "assistant")
    ):
        return _message_text(reply)
    raise TypeError(
        "a function decorated with @self_correct must return the model's reply: a str, an "
        f"OpenAI ChatCompletion or a message; it returned {type(reply).__name__}"
    )


def finish_reason_of(reply: Any) -> str | None:
    """Why the model stopped, when the reply says: `"length"` for a reply cut off at its limit.

    Read from an OpenAI `ChatCompletion` (its first choice) or its dict form; None for a
    `str` or a message, which do not carry it.
    """
    if isinstance(reply, str) or not _is_completion(reply):
        return None
    choices = _get(reply, "choices")
    if not choices:
        return None
    reason = _get(choices[0], "finish_reason")
    return reason if isinstance(reason, str) else None


def usage_of(reply: Any) -> Usage | None:
    """The token usage a `ChatCompletion` (or its dict form) carries, or None."""
    if isinstance(reply, str) or not _is_completion(reply):
        return None
    usage = _get(reply, "usage")
    if usage is None:
        return Usage(model_calls=1)
    prompt = _get(usage, "prompt_tokens")
    completion = _get(usage, "completion_tokens")
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
    if _is_completion(value):
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
