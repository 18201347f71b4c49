"""Reading model replies: their text, their tool calls and their token usage, never changing them.

The one reader of what a model sent back, for every part of refinekit. A reply is one of:

- an OpenAI `ChatCompletion` (or its dict form), which a LiteLLM `ModelResponse` is too;
- a message: an OpenAI `ChatCompletionMessage` (or its dict form);
- an Anthropic `Message` (or its dict form): text and `tool_use` content blocks, `usage`
  with `input_tokens` / `output_tokens`;
- a LangChain `AIMessage` (or its dict form): text or content parts, `tool_calls` as
  `{"name", "args", "id"}`, `usage_metadata`;
- a plain `str`.

They are told apart by their shape, never by importing their SDK: nothing here imports
`openai`, `anthropic`, `litellm` or `langchain_core`; what each SDK's replies look like is
its module's (`openai`, LiteLLM's shape too; `anthropic`; `langchain`). Attribute and key
access are alike (`get`), so a reply made by another SDK in one of these shapes reads the
same.

- `message_of(reply)`: the message a reply carries (a completion's first choice's);
- `first_message(reply)`: a completion's first message, or None when there is no choice;
- `message_text(message)`: its text (content, or its text parts or blocks);
- `tool_call_names(message)`: the tools it asked to call;
- `reply_text(reply)`: the text `@self_correct` parses (a single tool call's arguments too);
- `final_text(reply)`: a final answer's text, handed to the caller (`returns="text"`);
- `answer_text(value)`: any answer as text for an evaluator (a model as JSON);
- `usage_of(reply)`: the token usage it carries;
- `finish_reason_of(reply)`: why the model stopped (`"length"`: cut off at its limit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import pydantic_core
from pydantic import BaseModel

from .._core.errors import ReplyShapeError
from .._core.types import Usage
from . import anthropic, langchain, openai
from .fields import get

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionMessage

__all__ = [
    "Reply",
    "Returns",
    "answer_text",
    "check_returns",
    "final_text",
    "finish_reason_of",
    "first_message",
    "get",
    "is_completion",
    "is_reply",
    "message_of",
    "message_text",
    "model_of",
    "reply_text",
    "text_answer",
    "tool_call_names",
    "usage_of",
]


class HasChoices(Protocol):
    """A completion, for type checkers: OpenAI's `ChatCompletion`, LiteLLM's `ModelResponse`."""

    @property
    def choices(self) -> object:
        """The completion's choices."""


class HasContent(Protocol):
    """A message, for type checkers: OpenAI's, an Anthropic `Message`, a LangChain `AIMessage`."""

    @property
    def content(self) -> object:
        """The message's content: text, or parts or blocks."""


SDKReply: TypeAlias = HasChoices | HasContent
"""A model reply of any SDK the reader reads, for type checkers (see the module's docstring)."""

Reply: TypeAlias = "str | ChatCompletion | ChatCompletionMessage | SDKReply | Mapping[str, Any]"
"""What a function returns when refinekit reads its text: the model's reply, or the text."""

Returns = Literal["value", "text"]
"""A decorator's `returns=`: the function's value as it is, or its reply's text."""

Kind = Literal["completion", "anthropic", "langchain"]


is_completion = openai.is_completion
"""Whether `obj` is shaped like a chat completion (`openai.is_completion`)."""


def _kind(obj: Any) -> Kind | None:
    """Which kind of whole model reply `obj` is; None for a str, a bare message or anything else.

    An Anthropic `Message` says `type: "message"` and `role: "assistant"` and has a list of
    content blocks; a LangChain `AIMessage` says `type: "ai"` (`"AIMessageChunk"` for a
    streamed one, added up).
    """
    if isinstance(obj, (str, bytes)) or obj is None:
        return None
    if openai.is_completion(obj):
        return "completion"
    if anthropic.is_message(obj):
        return "anthropic"
    if langchain.is_message(obj):
        return "langchain"
    return None


_PROVIDERS: dict[Kind, Any] = {"completion": openai, "anthropic": anthropic, "langchain": langchain}
"""Each kind of reply's module: its `usage`, `finish_reason` and `model`."""


def is_reply(obj: Any) -> bool:
    """Whether `obj` is a whole model reply: a completion, an Anthropic or LangChain message."""
    return _kind(obj) is not None


first_message = openai.first_message
"""The message of a completion's first choice; None when it has no choice."""


def message_of(reply: Any) -> Any:
    """The message a reply carries: a completion's first choice's, else the reply itself.

    An Anthropic `Message` and a LangChain `AIMessage` are their own message; None for a
    completion with no choice.
    """
    if is_completion(reply):
        return first_message(reply)
    return reply


def message_text(message: Any, *, refusal: bool = False) -> str:
    """A message's text: its `content`, or the text of its content parts; else "".

    Content parts are OpenAI's (`{"type": "text", "text": ...}`), Anthropic's content blocks
    (only the text blocks have text) or, in a LangChain message only, a `str` or a text part
    each (a bare `str` part is not a part of OpenAI's, whose messages then read as "").

    Args:
        message: The message (None reads as "").
        refusal: Read a message with no content as its `refusal` text, when it has one.
    """
    content = get(message, "content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        bare = _kind(message) == "langchain"  # LangChain's parts may be bare strings
        return "".join(
            (p if bare else "") if isinstance(p, str) else str(get(p, "text") or "")
            for p in content
        )
    if refusal:
        said = get(message, "refusal")
        if isinstance(said, str):
            return said
    return ""


def _tool_calls(message: Any) -> list[tuple[Any, Any]]:
    """The tool calls a message makes, as (name, arguments) in the SDK's own types.

    OpenAI's `tool_calls` carry `function.name` and `function.arguments` (a JSON string);
    LangChain's carry `name` and `args` (a dict), and those it could not parse are in its
    `invalid_tool_calls` (`args` the raw text); Anthropic's are the `tool_use` content
    blocks, `name` and `input` (a dict).
    """
    calls = [
        openai.tool_call(call) if get(call, "function") is not None else langchain.tool_call(call)
        for call in get(message, "tool_calls") or ()
    ]
    calls += langchain.invalid_tool_calls(message)
    return calls or anthropic.tool_uses(message)


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text to parse (a JSON string is kept as sent)."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False, default=str)


def tool_call_names(message: Any) -> tuple[str, ...]:
    """The names of the tools a message asks to call (a legacy `function_call` too)."""
    names = tuple(str(name or "?") for name, _ in _tool_calls(message))
    legacy = get(message, "function_call")
    if legacy is not None:
        names += (str(get(legacy, "name") or "?"),)
    return names


def _parse_text(message: Any) -> str:
    calls = _tool_calls(message)
    if calls:
        if len(calls) != 1:
            rendered = [{"name": name, "arguments": args} for name, args in calls]
            raise ReplyShapeError(
                f"the reply made {len(calls)} tool calls; exactly one was expected",
                json.dumps(rendered, default=str),
            )
        return _arguments_text(calls[0][1])
    return message_text(message, refusal=True)


def reply_text(reply: Any) -> str:
    """The text to parse from what a wrapped function returned.

    A `str` is itself; an OpenAI `ChatCompletion` or LiteLLM `ModelResponse` (or its dict
    form) gives its first choice's message; a message (OpenAI's, an Anthropic `Message`, a
    LangChain `AIMessage`) gives its text (its refusal when it has no content), or the
    arguments of its single tool call as JSON.

    Raises:
        ReplyShapeError: The message made several tool calls, or the completion has no choice.
        TypeError: The reply is none of those shapes.
    """
    if isinstance(reply, str):
        return reply
    kind = _kind(reply)
    if kind == "completion":
        if not get(reply, "choices"):
            raise ReplyShapeError("the reply has no choices")
        return _parse_text(first_message(reply))
    if (
        kind is not None
        or get(reply, "content") is not None
        or get(reply, "tool_calls") is not None
        or (get(reply, "role") == "assistant")
    ):
        return _parse_text(reply)
    raise TypeError(
        "a function decorated with @self_correct must return the model's reply: a str, an "
        "OpenAI ChatCompletion or message, a LiteLLM ModelResponse, an Anthropic Message or a "
        f"LangChain AIMessage; it returned {type(reply).__name__}"
    )


def final_text(reply: Any) -> str:
    """A final answer's text, as the caller gets it from a decorator's `returns="text"`.

    A `str` is itself; a completion (OpenAI, LiteLLM) gives its first choice's message text, an
    Anthropic `Message` its text blocks, a LangChain `AIMessage` its content, a bare message
    its content: the text `answer_text` gives an evaluator, so the caller gets the very text
    that was judged (a refusal's text when the message has no content).

    Raises:
        TypeError: The reply asks for tool calls (it is not a final answer), the completion
            has no choice, or the value is none of these shapes; the message says which.
    """
    if isinstance(reply, str):
        return reply
    kind = _kind(reply)
    if kind == "completion":
        message = first_message(reply)
        if message is None:
            raise TypeError("the reply has no choices, so it has no text")
    elif kind is not None or (
        reply is not None
        and not isinstance(reply, bytes)
        and (get(reply, "content") is not None or get(reply, "role") == "assistant")
    ):
        message = reply
    else:
        raise TypeError(
            "the function must return the model's reply (an OpenAI ChatCompletion or "
            "message, a LiteLLM ModelResponse, an Anthropic Message, a LangChain AIMessage) "
            f"or its text (a str); it returned {type(reply).__name__}"
        )
    names = tool_call_names(message)
    if names:
        raise TypeError(
            f"the reply asks to call {', '.join(names)}: a tool call is not a final answer; "
            "run the tools and return the model's final reply"
        )
    return message_text(message, refusal=True)


def check_returns(returns: object) -> bool:
    """Whether a decorator's `returns=` asks for the text; `ValueError` on an unknown value."""
    if returns not in ("value", "text") or not isinstance(returns, str):
        raise ValueError(
            "returns must be 'value' (the function's return value, as it is) or 'text' (the "
            f"reply's text, its usage still counted), got {returns!r}"
        )
    return returns == "text"


def text_answer(value: Any, function: str, decorator: str) -> str:
    """`final_text(value)`, its `TypeError` naming the decorated function and the option."""
    try:
        return final_text(value)
    except TypeError as e:
        raise TypeError(f"{function} is decorated with @{decorator}(returns='text'): {e}") from None


def finish_reason_of(reply: Any) -> str | None:
    """Why the model stopped, when the reply says: `"length"` for a reply cut off at its limit.

    Read from a completion's first choice, an Anthropic `Message`'s `stop_reason`, or a
    LangChain `AIMessage`'s `response_metadata` (`finish_reason` or `stop_reason`);
    Anthropic's reasons read as OpenAI's (`max_tokens` as `"length"`). None for a `str` or
    a bare message, which do not carry it.
    """
    kind = _kind(reply)
    if kind is None:
        return None
    reason = _PROVIDERS[kind].finish_reason(reply)
    if not isinstance(reason, str):
        return None
    return anthropic.STOP_REASONS.get(reason, reason)


def usage_of(reply: Any) -> Usage | None:
    """The token usage a whole reply carries; None for anything else (a str, a bare message).

    A completion's `usage` (`prompt_tokens`, `completion_tokens`); an Anthropic `Message`'s
    (`input_tokens` plus the cache's `cache_creation_input_tokens` and
    `cache_read_input_tokens`, as prompt tokens; `output_tokens`); a LangChain `AIMessage`'s
    `usage_metadata` (`input_tokens`, `output_tokens`). A reply without a usage block still
    counts as one model call.
    """
    kind = _kind(reply)
    return None if kind is None else _PROVIDERS[kind].usage(reply)


def refusal_of(reply: Any) -> str | None:
    """The refusal a reply carries, when the model declined: else None.

    An OpenAI completion's (or message's) `refusal` with no content, or an Anthropic
    `Message` whose `stop_reason` is `"refusal"` (its text, if any). A `str` carries none.
    """
    if isinstance(reply, str) or reply is None:
        return None
    kind = _kind(reply)
    if kind == "anthropic":
        if get(reply, "stop_reason") != "refusal":
            return None
        return message_text(reply)
    message = message_of(reply) if kind == "completion" else reply
    said = get(message, "refusal")
    if isinstance(said, str) and said and not get(message, "content"):
        return said
    return None


def model_of(reply: Any) -> str | None:
    """The model name a whole reply says answered it; None when it names none (or is no reply).

    A completion's `model` (OpenAI, LiteLLM's `ModelResponse`), an Anthropic `Message`'s
    `model`, a LangChain `AIMessage`'s `response_metadata` (`model_name`, else `model`).
    """
    kind = _kind(reply)
    name = None if kind is None else _PROVIDERS[kind].model(reply)
    return name if isinstance(name, str) and name else None


def answer_text(value: Any) -> str:
    """An answer as text for an evaluator: str as is, a reply's text, a model as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if is_reply(value):
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
