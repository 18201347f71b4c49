"""tenacity's habits on `@retry_on_low_quality`: `stop=`, `before_sleep=`, `after=`.

The strategies and callbacks get a real `tenacity.RetryCallState`, filled in as tenacity's own
loop fills it, so tenacity's ready-made ones (`stop_after_delay`, `before_sleep_log`,
`after_log`) work unchanged. No test sleeps: the waits are computed, not slept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import tenacity
from helpers import acall, as_kind, call

from refinekit import EvaluationRequest, Event, LowQualityAnswer, Verdict, retry_on_low_quality

QUESTION = "How long is the refund window?"


def rejects_until(n: int) -> Callable[[EvaluationRequest], Verdict]:
    def evaluate(request: EvaluationRequest) -> Verdict:
        attempt = request.metadata["attempt"]
        return Verdict(passed=attempt >= n, feedback="" if attempt >= n else f"fix #{attempt}")

    return evaluate


def counting() -> tuple[Callable[..., str], list[str | None]]:
    asked: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        asked.append(feedback)
        return f"a{len(asked)}"

    return answer, asked


# --- stop= ---------------------------------------------------------------------------------------


async def test_a_stop_strategy_ends_the_attempts_before_max_retries(kind: str) -> None:
    answer, asked = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(10), max_retries=5, stop=tenacity.stop_after_attempt(2)
    )(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer) as raised:
        await acall(fn, QUESTION)
    assert len(asked) == 2
    assert len(raised.value.attempts) == 2
    assert raised.value.feedback == "fix #2"


async def test_max_retries_stays_the_hard_cap_whatever_the_stop(kind: str) -> None:
    answer, asked = counting()
    fn = retry_on_low_quality(evaluator=rejects_until(10), max_retries=1, stop=tenacity.stop_never)(
        as_kind(kind, answer)
    )
    with pytest.raises(LowQualityAnswer):
        await acall(fn, QUESTION)
    assert len(asked) == 2


async def test_a_stop_returns_the_best_attempt_when_asked(kind: str) -> None:
    answer, _ = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(10),
        max_retries=5,
        stop=tenacity.stop_after_attempt(3),
        on_exhausted="return_best",
    )(as_kind(kind, answer))
    outcome = fn.outcome(QUESTION)
    if kind == "async":
        outcome = await outcome
    assert outcome.value == "a3"
    assert outcome.attempt_count == 3


def test_stop_after_delay_counts_from_the_start_of_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    asked: list[str | None] = []

    @retry_on_low_quality(
        evaluator=rejects_until(10), max_retries=5, stop=tenacity.stop_after_delay(10)
    )
    def answer(question: str, feedback: str | None = None) -> str:
        asked.append(feedback)
        clock[0] += 6  # each attempt takes 6 seconds
        return "a"

    with pytest.raises(LowQualityAnswer):
        answer(QUESTION)
    # 6 s after the start: go on; 12 s: stop. (Counted from the first failure, it would be 3.)
    assert len(asked) == 2


async def test_stop_before_delay_sees_the_upcoming_wait(kind: str) -> None:
    answer, asked = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(10), max_retries=5, wait=30, stop=tenacity.stop_before_delay(20)
    )(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer):
        await acall(fn, QUESTION)
    assert len(asked) == 1  # the next retry would start 30 s in, past 20 s


# --- before_sleep= and after= --------------------------------------------------------------------


async def test_tenacity_log_callbacks_work_as_they_are(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("app.retries")
    answer, _ = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(10),
        max_retries=1,
        wait=1.5,
        before_sleep=tenacity.before_sleep_log(logger, logging.INFO),
        after=tenacity.after_log(logger, logging.INFO),
    )(as_kind(kind, answer))
    with caplog.at_level(logging.INFO, logger="app.retries"), pytest.raises(LowQualityAnswer):
        await acall(fn, QUESTION)
    lines = [r.getMessage() for r in caplog.records if r.name == "app.retries"]
    assert len(lines) == 3
    assert lines[0].startswith("Finished call to '")
    assert "this was the 1st time calling it" in lines[0]
    assert lines[1].startswith("Retrying ")
    assert lines[1].endswith(
        " in 1.5 seconds as it raised LowQualityAnswer: answer rejected: fix #1."
    )
    assert "this was the 2nd time calling it" in lines[2]  # after the last attempt too


async def test_callbacks_get_the_state_tenacity_would_hold(kind: str, events: list[Event]) -> None:
    seen: list[tuple[Any, ...]] = []

    def after(state: tenacity.RetryCallState) -> None:
        assert state.outcome is not None
        error = state.outcome.exception()
        assert isinstance(error, LowQualityAnswer)
        seen.append(("after", state.attempt_number, error.feedback, state.args))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        assert state.next_action is not None
        seen.append(("before_sleep", state.attempt_number, state.next_action.sleep, state.idle_for))
        seen.append(("events so far", [e.kind for e in events if e.kind == "retry"]))

    answer, _ = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(3),
        max_retries=3,
        wait=tenacity.wait_incrementing(start=1, increment=1),
        after=after,
        before_sleep=before_sleep,
    )(as_kind(kind, answer))
    assert await acall(fn, QUESTION) == "a3"
    assert seen == [
        ("after", 1, "fix #1", (QUESTION,)),
        ("before_sleep", 1, 1.0, 1.0),
        ("events so far", ["retry"]),  # the retry event comes first
        ("after", 2, "fix #2", (QUESTION,)),
        ("before_sleep", 2, 2.0, 3.0),
        ("events so far", ["retry", "retry"]),
    ]


async def test_an_async_callback_is_awaited_on_the_async_path() -> None:
    seen: list[int] = []

    async def before_sleep(state: tenacity.RetryCallState) -> None:
        seen.append(state.attempt_number)

    answer, _ = counting()
    fn = retry_on_low_quality(evaluator=rejects_until(2), before_sleep=before_sleep)(
        as_kind("async", answer)
    )
    assert await fn(QUESTION) == "a2"
    assert seen == [1]


def test_an_async_callback_on_the_sync_path_is_a_clear_error() -> None:
    async def before_sleep(state: tenacity.RetryCallState) -> None:
        raise AssertionError("never run")

    answer, _ = counting()
    fn = retry_on_low_quality(evaluator=rejects_until(2), before_sleep=before_sleep)(answer)
    with pytest.raises(TypeError, match="returned a coroutine to a sync refinekit decorator"):
        fn(QUESTION)


def test_a_callback_that_raises_propagates() -> None:
    def after(state: tenacity.RetryCallState) -> None:
        raise RuntimeError("the callback broke")

    answer, asked = counting()
    fn = retry_on_low_quality(evaluator=rejects_until(2), after=after)(answer)
    with pytest.raises(RuntimeError, match="the callback broke"):
        call(fn, QUESTION)
    assert len(asked) == 1


@pytest.mark.parametrize("option", ["stop", "before_sleep", "after"])
def test_options_that_are_not_callable_are_refused_when_decorating(option: str) -> None:
    with pytest.raises(TypeError, match=f"{option}= must be"):
        retry_on_low_quality(**{option: 5})


def test_retry_with_changes_the_stop(kind: str) -> None:
    answer, asked = counting()
    fn = retry_on_low_quality(evaluator=rejects_until(10), max_retries=4)(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer):
        call(fn.retry_with(stop=tenacity.stop_after_attempt(1)), QUESTION)
    assert len(asked) == 1
    with pytest.raises(LowQualityAnswer):
        call(fn, QUESTION)
    assert len(asked) == 6


def test_an_early_stop_is_an_exhaustion_at_the_last_attempt(events: list[Event]) -> None:
    answer, _ = counting()
    fn = retry_on_low_quality(
        evaluator=rejects_until(10), max_retries=5, stop=tenacity.stop_after_attempt(2)
    )(answer)
    with pytest.raises(LowQualityAnswer):
        fn(QUESTION)
    exhausted = [e for e in events if e.kind == "exhausted"]
    assert [(e.attempt, e.max_attempts, e.is_last) for e in exhausted] == [(2, 2, True)]
