"""`@retry_on_low_quality` over a streamed text answer: buffered or provisional.

`retry`'s flow hands each attempt's value to `Attempts.read`: a stream is read as text
(`refinekit._engine.text_answers`), stopped early when a rule check's prefix checker rejects it
(the attempt is then rejected with that verdict, and no judge is asked); anything else is kept
as it is. What the consumer of `fn.stream(...)` sees depends on the mode:

- `"buffered"` (the default): nothing while the attempts run; when the call returns (an
  answer that passed, one returned unjudged, or the best attempt), its text is replayed as the
  pieces it streamed (a whole answer as one piece). A rejected answer is never shown.
- `"provisional"`: each attempt's pieces as they come; before a retry, a `Reset` (cause
  `"retry"`), then the retry's pieces; when the best attempt is returned and the consumer last
  saw another, a `Reset` (cause `"best"`) and the best attempt replayed.

An exhausted call that raises `LowQualityAnswer` ends the stream with that error.
"""

from __future__ import annotations

from typing import Any, Literal

from .._core.stream_items import ResetCause, ToolCallChunk
from .._core.types import Verdict
from .._engine.flow import Flow
from .._engine.job import Job
from .._engine.stream_commands import Emit, is_streamed, listening
from .._engine.text_answers import read_text, replay, reset

__all__ = ["STREAM_MODES", "Attempts", "StreamMode", "check_stream_mode"]

StreamMode = Literal["buffered", "provisional"]
"""How `fn.stream(...)` of a `@retry_on_low_quality` function shows its attempts."""

STREAM_MODES = ("buffered", "provisional")


def check_stream_mode(mode: object) -> StreamMode:
    """`mode` when it is a stream mode; `ValueError` otherwise."""
    if mode not in STREAM_MODES or not isinstance(mode, str):
        raise ValueError(f"stream_mode must be 'buffered' or 'provisional', got {mode!r}")
    return "buffered" if mode == "buffered" else "provisional"


class Attempts:
    """One call's attempts as the consumer of its stream sees them."""

    def __init__(self, function: str, mode: StreamMode, maximum: int, evaluator: Any) -> None:
        self.function = function
        self.provisional = mode == "provisional"
        self.maximum = maximum
        self.evaluator = evaluator
        self.pieces: list[tuple[Any, list[str | ToolCallChunk]]] = []  # (answer, its pieces)
        self.shown: tuple[Any, int] | None = None  # the answer the consumer saw last, its attempt
        self.refusal: str | None = None  # the last stream read ended as a refusal: its text

    def read(
        self, value: Any, job: Job, number: int, prompt_chars: int = 0
    ) -> Flow[tuple[Any, Verdict | None]]:
        """The attempt's answer (a stream's text), and a prefix check's rejection if any.

        `prompt_chars`: the characters of the attempt's text arguments (the prompt's estimate
        when the server reports no usage).
        """
        if not is_streamed(value):
            return value, None
        read = yield from read_text(
            value,
            job,
            emit=self.provisional,
            evaluator=self.evaluator,
            decorator="retry_on_low_quality",
            function=self.function,
            number=number,
            maximum=self.maximum,
            prompt_chars=prompt_chars,
        )
        if read.tool_round:
            raise TypeError(
                f"{self.function} is decorated with @retry_on_low_quality and streamed tool calls: "
                "a tool call is not a final answer; run the tools and return the final reply"
            )
        self.refusal = read.text if read.read.finish_reason == "refusal" else None
        self.pieces.append((read.text, read.items))
        if read.shown:
            self.shown = (read.text, number)
        return read.text, read.rejected

    def show(self, value: Any, number: int, streamed: bool) -> Flow[None]:
        """An answer that came whole, shown at once in provisional mode."""
        if self.provisional and not streamed and listening():
            yield Emit(value)
            self.shown = (value, number)

    def retrying(self, job: Job, number: int, feedback: str, aborted: bool) -> Flow[None]:
        """Before a retry: in provisional mode, the consumer's view of this attempt is void."""
        if self.provisional and self.shown is not None:
            yield from self._reset("retry", job, number, feedback, aborted)
            self.shown = None

    def finish(self, job: Job, value: Any) -> Flow[None]:
        """The returned answer, as the consumer gets it (see the module's docstring)."""
        if not listening():
            return
        if self.shown is not None and self.shown[0] == value:
            return  # provisional: the consumer saw this very text last
        if self.provisional and self.shown is not None:
            best = "the best attempt, not this one, is returned"
            yield from self._reset("best", job, self.shown[1], best)
        for answer, items in reversed(self.pieces):
            if answer == value:
                yield from replay(items)
                return
        yield Emit(value)

    def _reset(
        self, cause: ResetCause, job: Job, number: int, reason: str, aborted: bool = False
    ) -> Flow[None]:
        """Void what the consumer saw of attempt `number` (a sub-flow)."""
        return reset(
            cause,
            job,
            decorator="retry_on_low_quality",
            function=self.function,
            number=number,
            maximum=self.maximum,
            reason=reason,
            aborted=aborted,
        )
