"""`FakeJudge`: an evaluator that returns scripted verdicts in order and records its requests.

`FakeStream`: a scripted stream of a reply (text deltas, or OpenAI chunks), in process, that
records how far it was read and whether it was closed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

from .._core.types import EvaluationRequest, Verdict
from ._script import split

__all__ = ["FakeJudge", "FakeStream"]


def _as_verdict(value: Verdict | bool | str, name: str) -> Verdict:
    if isinstance(value, Verdict):
        return value
    if isinstance(value, bool):
        return Verdict(
            passed=value,
            score=1.0 if value else 0.0,
            feedback="" if value else f"The answer failed the check {name!r}.",
        )
    if isinstance(value, str):
        word, _, feedback = value.partition(":")
        word = word.strip().lower()
        if word in ("pass", "fail"):
            passed = word == "pass"
            return Verdict(passed=passed, score=1.0 if passed else 0.0, feedback=feedback.strip())
        raise ValueError(
            f"fake judge {name!r}: a scripted verdict string is 'pass', 'fail' or "
            f"'fail: <feedback>', not {value!r}"
        )
    raise TypeError(
        f"fake judge {name!r}: a scripted verdict is a str, a bool or a refinekit.Verdict, "
        f"not {type(value).__name__}"
    )


class FakeJudge:
    """An evaluator that returns scripted verdicts in order and records every request.

    Use it wherever refinekit takes an evaluator, sync or async::

        judge = FakeJudge("fail: cite a source", "pass")

        @retry_on_low_quality(evaluator=judge)
        def answer(question: str) -> str: ...

        answer("What is the refund window?")
        assert len(judge.requests) == 2

    Asked for more verdicts than were scripted, it raises an `AssertionError` naming itself,
    so a test fails loudly instead of looping or passing by accident.

    Args:
        *verdicts: The verdicts, in the order they are returned: `"pass"`, `"fail"`,
            `"fail: <feedback>"` (case-insensitive), a bool, or a `refinekit.Verdict`.
        name: The evaluator's name, used in criteria and error messages.

    Attributes:
        name: The evaluator's name.
        requests: Every `EvaluationRequest` received, in order (including one asked beyond
            the script).
        verdicts: The scripted verdicts, as `Verdict` objects.

    Raises:
        ValueError: A string that is not `pass` or `fail[: feedback]`.
        TypeError: A verdict of another type.
    """

    def __init__(self, *verdicts: Verdict | bool | str, name: str = "fake_judge") -> None:
        self.name = name
        self.verdicts = tuple(_as_verdict(v, name) for v in verdicts)
        self.requests: list[EvaluationRequest] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many scripted verdicts have not been returned yet."""
        with self._lock:
            return max(0, len(self.verdicts) - len(self.requests))

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        """Record the request and return the next scripted verdict.

        Args:
            request: What to judge.

        Returns:
            The next scripted verdict.

        Raises:
            AssertionError: Every scripted verdict has been returned already.
        """
        with self._lock:
            self.requests.append(request)
            asked = len(self.requests)
        if asked > len(self.verdicts):
            raise AssertionError(
                f"fake judge {self.name!r} was asked for verdict #{asked} but only "
                f"{len(self.verdicts)} were scripted; script more verdicts, or find out why "
                f"the code under test judges more often than expected "
                f"(question: {request.question[:60]!r}, answer: {request.answer[:60]!r})"
            )
        return self.verdicts[asked - 1]

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        """`evaluate`, as a coroutine: record the request, return the next scripted verdict."""
        return self.evaluate(request)

    def __repr__(self) -> str:
        return f"<FakeJudge {self.name} {len(self.requests)}/{len(self.verdicts)} used>"


class FakeStream:
    """A scripted stream of one reply, in process: what a streaming function can return.

    A function decorated by refinekit may return a stream (see docs/streaming.md); in a unit
    test it can return a `FakeStream` instead of calling a model::

        stream = FakeStream('{"number": "A-1", "total": 12.5}', chunks=4)

        @self_correct(schema=Invoice)
        def extract(messages): return stream

        assert extract([]).number == "A-1"
        assert stream.finished

    It is both an iterator and an async iterator (so a sync or an async function may return
    it), and one-shot: a function called again (a correction, a retry) must return a new one.
    It yields the reply's text pieces as `str`s (refinekit's plain text stream), or, with
    `shape="openai"`, OpenAI's `chat.completion.chunk`s as dicts (a role chunk, the pieces,
    the finish reason, and a usage chunk when `prompt_tokens`/`completion_tokens` are given),
    for code that reads a finish reason (`"length"`: cut off) or streamed usage.

    Closing it (`close()`, `aclose()`: what refinekit does on an early abort) ends it: it
    yields nothing more. A stall has no in-process form (a test never sleeps): script
    `Reply.hang(after=...)` on `ScriptedOpenAI` for one, over HTTP.

    Args:
        content: The reply's text.
        chunks: How it is cut: the pieces (`str`s that join to it), or a size (every piece that
            many characters). Default: whitespace-led words (`"a b"` is `"a"`, `" b"`), as
            `Reply.text`.
        shape: `"text"` (the pieces as `str`) or `"openai"` (chunk dicts).
        finish_reason: With `shape="openai"`, the last chunk's finish reason.
        prompt_tokens: With `shape="openai"`, the usage chunk's prompt tokens.
        completion_tokens: With `shape="openai"`, the usage chunk's completion tokens.
        break_after: Raise `ConnectionError` (a dropped connection, which refinekit reads as
            a stream cut off) after this many pieces, instead of going on.

    Attributes:
        pieces: The pieces of the content, as they are yielded.
        sent: The pieces yielded so far.
        finished: Whether every piece was yielded and the stream ended.
        closed: Whether it was closed (by the reader, or having ended or broken).
        client_closed: Whether the reader closed it before its end (an early abort).

    Raises:
        ValueError: Pieces that do not join to `content`, a size below 1, a `break_after`
            outside 0..len(pieces), or OpenAI-only options with `shape="text"`.
        TypeError: `chunks` is neither pieces nor a size.
    """

    def __init__(
        self,
        content: str,
        *,
        chunks: Sequence[str] | int | None = None,
        shape: Literal["text", "openai"] = "text",
        finish_reason: str = "stop",
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        break_after: int | None = None,
    ) -> None:
        if not isinstance(content, str):
            raise TypeError(f"FakeStream streams a reply's text (a str), not {content!r}")
        if shape not in ("text", "openai"):
            raise ValueError(f'FakeStream(shape=...) is "text" or "openai", not {shape!r}')
        usage = prompt_tokens is not None or completion_tokens is not None
        if shape == "text" and (usage or finish_reason != "stop"):
            raise ValueError(
                "a text stream has no finish reason or usage: pass shape='openai' to stream "
                "OpenAI chunks that carry them"
            )
        self.pieces = split(content, chunks)
        if break_after is not None and not 0 <= break_after <= len(self.pieces):
            raise ValueError(
                f"break_after is 0..{len(self.pieces)} (the pieces of the content), "
                f"not {break_after!r}"
            )
        self.content = content
        self.shape = shape
        self.finish_reason = finish_reason
        self.usage = (prompt_tokens or 0, completion_tokens or 0) if usage else None
        self.break_after = break_after
        self.sent = 0
        self.finished = False
        self.closed = False
        self.client_closed = False
        self._items = self._script()

    def _script(self) -> Any:
        if self.shape == "openai":
            yield _chunk({"role": "assistant", "content": ""})
        for piece in self.pieces:
            if self.sent == self.break_after:
                raise ConnectionError(f"fake stream: the connection dropped after {self.sent}")
            self.sent += 1
            yield piece if self.shape == "text" else _chunk({"content": piece})
        if self.sent == self.break_after:
            raise ConnectionError(f"fake stream: the connection dropped after {self.sent}")
        if self.shape == "openai":
            yield _chunk({}, self.finish_reason)
            if self.usage is not None:
                prompt, completion = self.usage
                yield {
                    "object": "chat.completion.chunk",
                    "model": "fake",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                    },
                }
        self.finished = True

    def __iter__(self) -> FakeStream:
        return self

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        try:
            return next(self._items)
        except BaseException:
            self.closed = True
            raise

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """End the stream: it yields nothing more (before its end: `client_closed`)."""
        if not self.closed:
            self.closed = True
            self.client_closed = not self.finished
            self._items.close()

    async def aclose(self) -> None:
        """`close()`, as a coroutine."""
        self.close()

    def __repr__(self) -> str:
        state = "finished" if self.finished else "closed" if self.closed else "open"
        return f"<FakeStream {self.sent}/{len(self.pieces)} pieces sent, {state}>"


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
