"""What `fn.stream(...)` yields: partial values, the final value, text, resets, tool-call parts.

A decorated function that returns a stream can be consumed as it grows with `fn.stream(...)`
(an iterator; an async iterator when the function is `async def`). `@self_correct` yields
`Partial` items as the reply's fields complete, then one `Final`; the text decorators
(`@retry_on_low_quality`, `@reviewed`, `@guarded`) yield the answer's text as `str` pieces. Any
of them may yield a `Reset`: everything yielded before it is void (a UI clears what it showed),
and what follows replaces it. `@reviewed` passes a tool-call round through as `ToolCallChunk`s.

This module imports nothing from the rest of refinekit but its redaction (a `Reset.reason`
is redacted when it is made).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from .redact import redact_fields

__all__ = ["Final", "Partial", "Reset", "ResetCause", "ToolCallChunk"]

T_co = TypeVar("T_co", covariant=True)

ResetCause = Literal["correction", "retry", "best"]
"""Why a `Reset` voids what the stream yielded:

- `correction`: `@self_correct` is sending a correction turn (a completed field failed and the
  stream was aborted, or the complete reply did not parse or validate, or it was cut off);
- `retry`: `@retry_on_low_quality` in provisional mode is retrying a rejected answer;
- `best`: `@retry_on_low_quality` in provisional mode ran out of attempts and replays its best
  attempt, which is not the last one shown.
"""


@dataclass(frozen=True)
class Partial(Generic[T_co]):
    """The reply's value so far, from `@self_correct`'s `fn.stream(...)`: not validated as a whole.

    Yielded each time a field of the reply completes (its JSON value is closed) and passes
    its own validation. Only completed fields are in it; a field still being written, or not
    yet seen, is absent. Do not save it as a result: the reply may still fail (a later field, a
    model validator, the whole), and a `Reset` may void it.

    Attributes:
        value: The fields completed so far: a dict of the model's top-level fields whose
            JSON values have closed and passed their own validation, by name, each the
            validated value in its JSON form (a `Decimal` as a str, a nested model as a dict:
            `json.dumps` takes it; see docs/streaming.md, "The items").
        attempt: The call it comes from: 1 for the first call, 2 for the first correction, ...
        final: Always False (a `Final` is True), so `item.final` tells the two apart.
    """

    value: Any
    attempt: int = 1
    final: Literal[False] = False


@dataclass(frozen=True)
class Final(Generic[T_co]):
    """The validated value, from `@self_correct`'s `fn.stream(...)`: the last item of the stream.

    The same value the plain call `fn(...)` returns.

    Attributes:
        value: The value, of the schema's type.
        attempt: The call whose reply it is (1: the first call, 2: after one correction, ...).
        final: Always True.
    """

    value: T_co
    attempt: int = 1
    final: Literal[True] = True


@dataclass(frozen=True)
class Reset:
    """Everything the stream yielded so far is void: clear it; what follows replaces it.

    Attributes:
        cause: Why (see `ResetCause`): a correction, a retry, the best attempt replayed.
        attempt: The attempt (call) whose output is void.
        reason: A short line saying what was wrong with it (the validation error, the
            judge's feedback), for a log or a status line; it may quote the model's text.
            Credentials in it are redacted.
        aborted: Whether that attempt's stream was closed before its end (so the model stopped
            generating).
        kept: The fields of the last `Partial` that still stand: a correction that resumes
            from the reply's validated fields keeps them (`@self_correct(early_abort=
            "resume")`); empty when everything is void.
    """

    cause: ResetCause
    attempt: int
    reason: str
    aborted: bool = False
    kept: tuple[str, ...] = ()
    final: Literal[False] = False

    def __post_init__(self) -> None:
        redact_fields(self, ("reason",))


@dataclass(frozen=True)
class ToolCallChunk:
    """A part of a tool call the model streamed, passed through by `@reviewed`'s stream.

    A reply that calls tools is not an answer, so it is not reviewed: its parts go to the
    consumer as they came.

    Attributes:
        index: Which of the reply's tool calls it belongs to (0 for the first).
        name: The tool's name, on the part that starts the call (None on the others).
        arguments: The part of the call's JSON arguments it adds ("" for none).
    """

    index: int
    name: str | None
    arguments: str
