"""`Delta`: one piece of a streamed reply, whatever SDK streamed it (see `sdk_streams`).

And what the chunk readers of OpenAI's and LangChain's shapes share (`ToolCalls`, `call_part`,
`with_calls`): both stream a tool call in parts named by an index (or an id), several calls'
parts in one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .._core.types import Usage
from .fields import get

__all__ = ["Delta", "ToolCalls", "call_part", "with_calls"]


@dataclass(frozen=True)
class Delta:
    """What one chunk of a streamed reply added (`refinekit._providers.sdk_streams` reads them).

    Attributes:
        text: The content text it adds ("" for none).
        tool_arguments: The part of a tool call's arguments (JSON text) it adds ("" for none);
            the call is `tool_index`'s.
        usage: The reply's token usage so far, when the chunk reports it: each one replaces
            the one before (SDKs that report usage in parts are added up by the reader), so
            the last one read is the reply's. Its `model_calls` is 1.
        finish_reason: Why the model stopped, when the chunk says (the last chunks do),
            normalised as `replies.finish_reason_of` normalises a whole reply: `"length"` for a
            reply cut off at its limit (Anthropic's `max_tokens`), `"stop"`, `"tool_calls"`;
            `"refusal"` for a model that declines (OpenAI's `delta.refusal` text too).
        model: The model name, when the chunk names it.
        tool_name: The tool's name, on the delta that starts a tool call (None otherwise).
        tool_index: Which of the reply's tool calls `tool_arguments` and `tool_name` belong
            to: 0 for the first call the stream made, 1 for the second, ... (the SDK's own
            index, which may count text blocks too, renumbered).
        raw: The SDK's chunk (or event, or `str`) the delta was read from, as it came; not
            compared. A chunk with parts of several tool calls gives one delta per call, all
            with the same `raw`.
    """

    text: str = ""
    tool_arguments: str = ""
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str | None = None
    tool_name: str | None = None
    tool_index: int = 0
    raw: Any = field(default=None, compare=False, repr=False)


class ToolCalls:
    """One stream's tool calls, numbered from 0 in the order they start (sans-I/O).

    A streamed part of a call names its call by `index`, else by `id`; a part with neither
    continues the latest call.
    """

    def __init__(self) -> None:
        self._numbers: dict[Any, int] = {}  # the SDK's index (or id) -> ours

    def number(self, call: Any) -> int:
        """The number of the call that `call` (one streamed part of a tool call) adds to."""
        index = get(call, "index")
        key = index if index is not None else get(call, "id")
        if key is None:  # neither: a continuation of the latest call
            return max(self._numbers.values(), default=0)
        return self._numbers.setdefault(key, len(self._numbers))


def call_part(number: int, name: Any, arguments: Any, raw: Any) -> Delta:
    """The delta of one streamed part of the call `number`, read from the chunk `raw`.

    Its arguments when they are a `str`, its name when it is a non-empty `str`; else none.
    """
    return Delta(
        tool_arguments=arguments if isinstance(arguments, str) else "",
        tool_name=name if isinstance(name, str) and name else None,
        tool_index=number,
        raw=raw,
    )


def with_calls(first: Delta, calls: list[Delta]) -> list[Delta]:
    """One chunk's deltas: `first` (its text, usage, finish reason, model), then its calls'.

    The first call's part (its arguments, name and number) is given on `first` itself; each
    further call's part is a delta of its own.
    """
    if not calls:
        return [first]
    head = calls[0]
    merged = replace(
        first,
        tool_arguments=head.tool_arguments,
        tool_name=head.tool_name,
        tool_index=head.tool_index,
    )
    return [merged, *calls[1:]]
