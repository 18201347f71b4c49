"""A streamed text answer inside the text decorators' flows: read, checked by prefix, replayed.

`@retry_on_low_quality`, `@reviewed` and `@guarded` read a stream their function returned with
`read_text` (a sub-flow on `streaming.read_stream`): its text deltas are passed through to the
consumer of `fn.stream(...)` as they come (`emit=True`: provisional, pass-through) or kept for
later (`replay`: buffered); a tool-call round's parts are kept as `ToolCallChunk`s in order.

A rule check that can reject an answer from a part of it (`checks.excludes(...)`: a forbidden
phrase; `checks.max_length(n)`: past n characters) has a *prefix checker*: fed each delta, it
says when what came so far already fails, whatever follows. `prefix_checker(evaluator)` finds
one in an evaluator (through `all_of` and `any_of`); `read_text` then aborts the stream at the
first such rejection (`TextRead.rejected` is its verdict). A model judge has none: it waits for
the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.stream_items import Reset, ResetCause, ToolCallChunk
from .._core.types import Verdict
from .._providers.sdk_streams import Delta
from .evaluators import Adapted, _AllOf, _AnyOf
from .events import emit, make_event
from .flow import Flow
from .job import Job
from .stream_commands import Emit, StreamRead, listening, read_stream

__all__ = [
    "PrefixCheck",
    "TextRead",
    "prefix_checker",
    "publish",
    "read_text",
    "replay",
    "reset",
]

PrefixCheck = Callable[[str], "Verdict | None"]
"""Fed each text delta in turn: a failing verdict once the text so far fails, else None."""


def prefix_checker(evaluator: Any) -> PrefixCheck | None:
    """A fresh prefix checker for `evaluator` (one per stream); None when it has none.

    An evaluator has one when it (or the object an adapter wraps) has a `prefix_checker()`
    method returning one (a `refinekit.checks.Check` made with `prefix=`); `all_of` has one
    when any part has (any part's rejection fails it), `any_of` when every part has (it fails
    when all of them reject).
    """
    inner = evaluator.wrapped if isinstance(evaluator, Adapted) else evaluator
    if isinstance(inner, (_AllOf, _AnyOf)):
        made = [prefix_checker(child) for child in inner.children]
        if isinstance(inner, _AllOf):
            parts = [m for m in made if m is not None]
            return _all(parts) if parts else None
        if any(m is None for m in made):
            return None
        return _any([m for m in made if m is not None])
    make = getattr(inner, "prefix_checker", None)
    if not callable(make):
        return None
    check = make()
    return check if callable(check) else None


def _all(parts: list[PrefixCheck]) -> PrefixCheck:
    def check(text: str) -> Verdict | None:
        for part in parts:
            verdict = part(text)
            if verdict is not None:
                return verdict
        return None

    return check


def _any(parts: list[PrefixCheck]) -> PrefixCheck:
    rejected: list[Verdict | None] = [None] * len(parts)

    def check(text: str) -> Verdict | None:
        for i, part in enumerate(parts):
            verdict = part(text)
            if verdict is not None and rejected[i] is None:
                rejected[i] = verdict
        if all(r is not None for r in rejected):
            return rejected[0]
        return None

    return check


class _TextSink:
    """Keeps a text stream's items; passes them through (`emit`); aborts on a prefix rejection."""

    def __init__(self, emit: bool, check: PrefixCheck | None) -> None:
        self.emit = emit
        self.check = check
        self.items: list[str | ToolCallChunk] = []
        self.rejected: Verdict | None = None

    def feed(self, delta: Delta) -> tuple[Sequence[Any], str | None]:
        out: list[Any] = []
        if delta.text:
            out.append(delta.text)
        if delta.tool_name is not None or delta.tool_arguments:
            out.append(ToolCallChunk(delta.tool_index, delta.tool_name, delta.tool_arguments))
        self.items.extend(out)
        if self.check is not None and delta.text:
            verdict = self.check(delta.text)
            if verdict is not None:
                self.rejected = verdict
                shown = out if self.emit else ()
                return shown, f"rejected by a rule check: {verdict.feedback or 'failed'}"
        return (out if self.emit else ()), None


@dataclass
class TextRead:
    """A text stream as the text decorators read it.

    Attributes:
        read: What reading it came to (its text, usage, chunks, how it ended).
        items: Its text pieces and tool-call parts, in order (what `replay` emits).
        rejected: The verdict of the prefix check that stopped it early; None: not stopped.
        shown: Whether its items went to the consumer as they came.
    """

    read: StreamRead
    items: list[str | ToolCallChunk] = field(default_factory=list)
    rejected: Verdict | None = None
    shown: bool = False

    @property
    def text(self) -> str:
        """The text it streamed."""
        return self.read.text

    @property
    def tool_round(self) -> bool:
        """Whether it streamed tool calls (a tool-call round, not a final answer)."""
        return bool(self.read.tools)


def read_text(
    stream: Any,
    job: Job,
    *,
    emit: bool,
    evaluator: Any = None,
    decorator: str,
    function: str,
    number: int,
    maximum: int,
    count: bool = True,
    prompt_chars: int = 0,
) -> Flow[TextRead]:
    """Read a text stream (a sub-flow); its usage counted in `job` unless `count` is False.

    Args:
        stream: The function's stream.
        job: The call's job.
        emit: Pass its pieces through to the consumer as they come (when there is one).
        evaluator: Whose prefix checker may stop it early (None: none).
        decorator: The decorator's name, for the `stream` event.
        function: The decorated function's name.
        number: The attempt it is.
        maximum: The most attempts there can be.
        count: Count its usage in the job.
        prompt_chars: The characters of the call's text arguments (`arguments_chars`): the
            prompt's estimate when the server reports none.

    Raises:
        StreamInterrupted: The stream broke before its end (after its usage was counted).
    """
    shown = emit and listening()
    sink = _TextSink(shown, None if evaluator is None else prefix_checker(evaluator))
    read: StreamRead = yield from read_stream(
        stream,
        job,
        sink,
        decorator=decorator,
        function=function,
        number=number,
        maximum=maximum,
        count=count,
        prompt_chars=prompt_chars,
    )
    if read.interrupted is not None:
        raise read.interrupted
    return TextRead(read, sink.items, sink.rejected, shown)


def replay(items: Sequence[Any]) -> Flow[None]:
    """Emit `items` to the consumer (a sub-flow); nothing without one."""
    if listening():
        for item in items:
            yield Emit(item)


def reset(
    cause: ResetCause,
    job: Job,
    *,
    decorator: str,
    function: str,
    number: int,
    maximum: int,
    reason: str,
    aborted: bool = False,
) -> Flow[None]:
    """Tell the consumer that what it got is void (a sub-flow): a `Reset` and a `reset` event."""
    if listening():
        emit(make_event("reset", decorator, function, job, number, maximum, error=reason))
        yield Emit(Reset(cause, number, reason, aborted))


def publish(text: Any, streamed: TextRead | None) -> Flow[None]:
    """The answer a call returns, as the consumer gets it (a sub-flow; nothing without one).

    Nothing more when the consumer got the stream's pieces as they came; the stream's pieces
    replayed when the answer is its text; else the answer as one item, followed by the
    stream's tool-call parts when it was a tool-call round (its text revised, its calls kept).
    """
    if not listening():
        return
    if streamed is not None and streamed.shown:
        return
    if streamed is not None and streamed.text == text:
        yield from replay(streamed.items)
    else:
        yield Emit(text)
        if streamed is not None and streamed.tool_round:
            yield from replay([item for item in streamed.items if isinstance(item, ToolCallChunk)])
