"""Streamed text answers under `@retry_on_low_quality`, `@reviewed` and `@guarded`.

Every test runs on a `def` and on an `async def` function. The streams are plain (async)
iterators that count what was read; test_streaming_http.py runs over real HTTP.
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest
from streaming_helpers import Source, StreamingModel, call, chunked, collect

import refinekit
from refinekit import (
    AnswerRejected,
    EvaluationRequest,
    Event,
    LowQualityAnswer,
    Reset,
    ToolCallChunk,
    Verdict,
    checks,
    guarded,
    retry_on_low_quality,
    reviewed,
)
from refinekit._core.errors import StreamInterrupted

KINDS = ["sync", "async"]
GOOD = "Refunds are accepted within 30 days [policies/refunds.md]."
POOR = "Refunds are accepted, guaranteed, no questions asked, forever and ever."


def pieces(text: str) -> tuple[str, ...]:
    return chunked(text, 6)


class Judge:
    """Passes answers that cite the policy; records what it judged."""

    def __init__(self) -> None:
        self.judged: list[str] = []
        self.seen_by_consumer: list[int] = []
        self.consumer: list[Any] | None = None

    def __call__(self, request: EvaluationRequest) -> Verdict:
        self.judged.append(request.answer)
        if self.consumer is not None:
            self.seen_by_consumer.append(len(self.consumer))
        ok = "[policies/refunds.md]" in request.answer
        return Verdict(passed=ok, feedback="" if ok else "Cite [policies/refunds.md].")


def watched(kind: str, decorated: Any, judge: Judge, *args: Any) -> list[Any]:
    """`collect`, with the judge told how many items the consumer had when it judged."""
    got: list[Any] = []
    judge.consumer = got
    if kind == "sync":
        for item in decorated.stream(*args):
            got.append(item)
        return got

    async def main() -> None:
        async for item in decorated.stream(*args):
            got.append(item)

    asyncio.run(main())
    return got


def events() -> tuple[list[Event], refinekit.Subscription]:
    seen: list[Event] = []
    return seen, refinekit.subscribe(seen.append)


# --- @retry_on_low_quality ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_retry_judges_a_streamed_answer_when_complete_and_returns_its_text(kind: str) -> None:
    first, second = Source(*pieces(POOR)), Source(*pieces(GOOD))
    judge = Judge()
    model = StreamingModel(kind, first, second)
    answer = retry_on_low_quality(evaluator=judge, max_retries=1)(model.function())
    assert call(kind, answer, "Can I get a refund?") == GOOD
    assert judge.judged == [POOR, GOOD]  # each judged whole
    assert first.given == len(first.parts)
    assert second.given == len(second.parts)


@pytest.mark.parametrize("kind", KINDS)
def test_buffered_shows_only_the_answer_that_passed_as_it_streamed(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(POOR)), Source(*pieces(GOOD)))
    answer = retry_on_low_quality(evaluator=judge, max_retries=1)(model.function())
    items = watched(kind, answer, judge, "Can I get a refund?")
    assert items == list(pieces(GOOD))  # replayed as the pieces it streamed; no reset
    assert judge.seen_by_consumer == [0, 0]  # nothing shown before a verdict


@pytest.mark.parametrize("kind", KINDS)
def test_buffered_replays_the_best_attempt_on_exhaustion(kind: str) -> None:
    def judge(request: EvaluationRequest) -> Verdict:
        cites = "[policies/refunds.md]" in request.answer
        return Verdict(
            passed=False,
            feedback="Shorter.",
            criteria=(
                refinekit.CriterionResult(name="cites", outcome="pass" if cites else "fail"),
            ),
        )

    model = StreamingModel(kind, Source(*pieces(GOOD)), Source(*pieces(POOR)))
    answer = retry_on_low_quality(evaluator=judge, max_retries=1, on_exhausted="return_best")(
        model.function()
    )
    assert collect(kind, answer, "q") == list(pieces(GOOD))


@pytest.mark.parametrize("kind", KINDS)
def test_provisional_passes_chunks_through_and_resets_before_a_retry(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(POOR)), Source(*pieces(GOOD)))
    answer = retry_on_low_quality(evaluator=judge, max_retries=1, stream_mode="provisional")(
        model.function()
    )
    seen, subscription = events()
    with subscription:
        items = watched(kind, answer, judge, "q")
    n = len(pieces(POOR))
    assert items[:n] == list(pieces(POOR))
    reset = items[n]
    assert isinstance(reset, Reset)
    assert reset.cause == "retry"
    assert reset.attempt == 1
    assert "Cite" in reset.reason
    assert items[n + 1 :] == list(pieces(GOOD))
    assert judge.seen_by_consumer == [n, n + 1 + len(pieces(GOOD))]  # shown before judged
    assert [e.kind for e in seen if e.kind in ("reset", "retry")] == ["retry", "reset"]


@pytest.mark.parametrize("kind", KINDS)
def test_provisional_replays_the_best_attempt_when_it_is_not_the_last(kind: str) -> None:
    def judge(request: EvaluationRequest) -> Verdict:
        cites = "[policies/refunds.md]" in request.answer
        criteria = (refinekit.CriterionResult(name="c", outcome="pass" if cites else "fail"),)
        return Verdict(passed=False, feedback="More.", criteria=criteria)

    model = StreamingModel(kind, Source(*pieces(GOOD)), Source(*pieces(POOR)))
    answer = retry_on_low_quality(
        evaluator=judge, max_retries=1, on_exhausted="return_best", stream_mode="provisional"
    )(model.function())
    items = collect(kind, answer, "q")
    resets = [i for i in items if isinstance(i, Reset)]
    assert [r.cause for r in resets] == ["retry", "best"]
    assert items[items.index(resets[-1]) + 1 :] == list(pieces(GOOD))


@pytest.mark.parametrize("kind", KINDS)
def test_a_forbidden_phrase_stops_the_stream_early_without_a_judge_call(kind: str) -> None:
    judged: list[str] = []

    def model_judge(request: EvaluationRequest) -> bool:
        judged.append(request.answer)
        return True

    first = Source(*pieces(POOR))
    model = StreamingModel(kind, first, Source(*pieces(GOOD)))
    evaluator = refinekit.all_of(checks.excludes("guaranteed"), model_judge)
    answer = retry_on_low_quality(evaluator=evaluator, max_retries=1)(model.function())
    seen, subscription = events()
    with subscription:
        assert call(kind, answer, "q") == GOOD
    assert first.closed
    assert first.given < len(first.parts)
    assert judged == [GOOD]  # the stopped attempt never reached the model judge
    retry = next(e for e in seen if e.kind == "retry")
    assert retry.feedback == "Do not mention 'guaranteed' in the answer."
    stream = next(e for e in seen if e.kind == "stream")
    assert stream.aborted is not None
    assert "guaranteed" in stream.aborted


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_judge_waits_for_the_end(kind: str) -> None:
    first = Source(*pieces(POOR))
    model = StreamingModel(kind, first, Source(*pieces(GOOD)))
    answer = retry_on_low_quality(evaluator=Judge(), max_retries=1)(model.function())
    call(kind, answer, "q")
    assert first.given == len(first.parts)


@pytest.mark.parametrize("kind", KINDS)
def test_exhausted_retries_end_the_stream_with_the_error(kind: str) -> None:
    model = StreamingModel(kind, Source(*pieces(POOR)))
    answer = retry_on_low_quality(evaluator=Judge(), max_retries=1)(model.function())
    with pytest.raises(LowQualityAnswer) as raised:
        collect(kind, answer, "q")
    assert [a.answer for a in raised.value.attempts] == [POOR, POOR]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_that_breaks_propagates(kind: str) -> None:
    model = StreamingModel(kind, Source("Refunds are", error=ConnectionError("reset")))
    answer = retry_on_low_quality(evaluator=Judge(), max_retries=2)(model.function())
    with pytest.raises(refinekit.StreamInterrupted) as raised:
        call(kind, answer, "q")
    assert len(model.received) == 1  # not retried, as any error of the function
    # a public, typed error: why and where it broke, the transport's error as its cause
    broke = raised.value
    assert isinstance(broke, refinekit.RefinekitError)
    assert type(broke) is refinekit.StreamInterrupted is StreamInterrupted
    assert "the connection broke" in broke.reason
    assert broke.chunks == 1
    assert isinstance(broke.__cause__, ConnectionError)
    copy = pickle.loads(pickle.dumps(broke))
    assert (type(copy), copy.reason, copy.chunks) == (StreamInterrupted, broke.reason, 1)


def test_stream_mode_is_checked_when_decorating() -> None:
    with pytest.raises(ValueError, match="stream_mode"):
        retry_on_low_quality(stream_mode="live")  # type: ignore[call-overload]


# --- @reviewed ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_reviewed_off_passes_the_stream_through(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(POOR)))
    answer = reviewed(judge=judge, mode="off")(model.function())
    assert collect(kind, answer, "q") == list(pieces(POOR))
    outcome = answer.outcome("q") if kind == "sync" else asyncio.run(answer.outcome("q"))
    assert outcome.value == POOR
    assert outcome.usage.model_calls == 0  # off: nothing judged, recorded or counted
    assert judge.judged == []


@pytest.mark.parametrize("kind", KINDS)
def test_reviewed_shadow_passes_the_stream_through_and_reviews_it_aside(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(POOR)))
    answer = reviewed(judge=judge, mode="shadow")(model.function())
    seen, subscription = events()
    with subscription:
        items = watched(kind, answer, judge, "q")
    assert items == list(pieces(POOR))  # unchanged, though it failed review
    assert judge.seen_by_consumer == [len(pieces(POOR))]  # out before it was reviewed
    review = next(e for e in seen if e.kind == "review")
    assert review.verdict is not None
    assert review.verdict.passed is False


@pytest.mark.parametrize("kind", KINDS)
def test_reviewed_enforce_buffers_and_emits_the_approved_text(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(GOOD)))
    answer = reviewed(judge=judge, max_revisions=0)(model.function())
    items = watched(kind, answer, judge, "q")
    assert judge.seen_by_consumer == [0]
    assert items == list(pieces(GOOD))


@pytest.mark.parametrize("kind", KINDS)
def test_reviewed_enforce_never_emits_a_rejected_draft(kind: str) -> None:
    judge = Judge()
    model = StreamingModel(kind, Source(*pieces(POOR)))
    revisions: list[str] = []

    def reviser(request: refinekit.RevisionRequest) -> str:
        revisions.append(request.draft)
        return GOOD

    answer = reviewed(judge=judge, reviser=reviser)(model.function())
    assert collect(kind, answer, "q") == [GOOD]  # the revision, whole: never provisional
    assert revisions == [POOR]
    rejecting = reviewed(judge=judge, max_revisions=0)(
        StreamingModel(kind, Source(*pieces(POOR))).function()
    )
    got: list[Any] = []

    def consume() -> None:
        if kind == "sync":
            got.extend(rejecting.stream("q"))
            return

        async def main() -> None:
            async for item in rejecting.stream("q"):
                got.append(item)

        asyncio.run(main())

    with pytest.raises(AnswerRejected):
        consume()
    assert got == []


def tool_chunks() -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {"index": 0, "id": "call_1", "type": "function"}
    return [
        chunk({"role": "assistant", "tool_calls": [{**call, "function": {"name": "lookup"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"order": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"A-1"}'}}]}),
        chunk({}, "tool_calls"),
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["enforce", "shadow", "off"])
def test_a_tool_call_round_passes_through_unreviewed(kind: str, mode: str) -> None:
    judge = Judge()

    class Chunks(Source):
        def sync(self) -> Any:
            return iter(tool_chunks())

        async def async_(self) -> Any:
            for c in tool_chunks():
                yield c

    model = StreamingModel(kind, Chunks())
    answer = reviewed(judge=judge, mode=mode, max_revisions=0)(model.function())  # type: ignore[arg-type]
    items = collect(kind, answer, "q")
    assert items == [
        ToolCallChunk(0, "lookup", ""),
        ToolCallChunk(0, None, '{"order": '),
        ToolCallChunk(0, None, '"A-1"}'),
    ]
    assert judge.judged == []
    with pytest.raises(TypeError, match="calls tools"):
        call(kind, answer, "q")


# --- @guarded -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_guarded_screens_the_whole_stream_before_showing_it(kind: str) -> None:
    screened: list[str] = []

    def screen(request: EvaluationRequest) -> bool:
        screened.append(request.answer)
        return "forever" not in request.answer

    source = Source(*pieces(POOR))
    safe = guarded(screen=screen)(StreamingModel(kind, Source(*pieces(GOOD))).function())
    assert collect(kind, safe, "q") == list(pieces(GOOD))
    unsafe = guarded(screen=screen)(StreamingModel(kind, source).function())
    assert collect(kind, unsafe, "q") == ["I can't help with that."]
    assert screened == [GOOD, POOR]
    assert source.given == len(source.parts)  # a function screen waits for the end


@pytest.mark.parametrize("kind", KINDS)
def test_guarded_stops_a_stream_at_a_forbidden_phrase(kind: str) -> None:
    source = Source(*pieces(POOR))
    unsafe = guarded(screen=checks.excludes("guaranteed"), refusal="No.")(
        StreamingModel(kind, source).function()
    )
    seen, subscription = events()
    with subscription:
        assert collect(kind, unsafe, "q") == ["No."]
    assert source.closed
    assert source.given < len(source.parts)
    blocked = next(e for e in seen if e.kind == "blocked")
    assert blocked.error is not None
    assert "before its end" in blocked.error
    assert (
        call(
            kind,
            guarded(screen=checks.excludes("guaranteed"), refusal="No.")(
                StreamingModel(kind, Source(*pieces(POOR))).function()
            ),
            "q",
        )
        == "No."
    )
