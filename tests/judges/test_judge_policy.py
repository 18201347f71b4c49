"""What a judging failure does to a retry and to composites, whatever the judge."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

import refinekit
from refinekit import (
    EvaluationRequest,
    Event,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    Verdict,
    all_of,
    any_of,
    checks,
    retry_on_low_quality,
    weighted,
)


def raising(error: Exception) -> Callable[[EvaluationRequest], Verdict]:
    def judge(request: EvaluationRequest) -> Verdict:
        raise error

    return judge


def unavailable() -> JudgeUnavailable:
    return JudgeUnavailable("judge 'j': HTTP 503", model="j", status_code=503)


def calls_counter() -> tuple[list[str], Callable[..., str]]:
    calls: list[str] = []

    def answer(question: str) -> str:
        calls.append(question)
        return "an answer"

    return calls, answer


@pytest.mark.parametrize(
    "error", [unavailable(), JudgeReplyError("unreadable", model="j", reply="maybe")]
)
def test_fail_open_returns_the_answer_unjudged_with_a_warning_and_an_event(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    calls, answer = calls_counter()
    events: list[Event] = []
    fn = retry_on_low_quality(evaluator=raising(error))(answer)
    with refinekit.subscribe(events.append), caplog.at_level(logging.WARNING, "refinekit"):
        assert fn("q") == "an answer"
    assert calls == ["q"]  # not retried: an outage says nothing about the answer
    unjudged = [e for e in events if e.kind == "unjudged"]
    assert len(unjudged) == 1
    verdict = unjudged[0].verdict
    assert verdict is not None
    assert verdict.status == "unjudged"
    assert verdict.passed is False  # never "passed"
    assert type(error).__name__ in (verdict.reason or "")
    assert any("unjudged" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "error", [unavailable(), JudgeReplyError("unreadable", model="j", reply="maybe")]
)
def test_fail_closed_raises(error: Exception) -> None:
    _, answer = calls_counter()
    fn = retry_on_low_quality(evaluator=raising(error), judge_error_policy="fail_closed")(answer)
    with pytest.raises(type(error)):
        fn("q")


@pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
def test_a_misconfigured_judge_always_raises(policy: Any) -> None:
    _, answer = calls_counter()
    error = JudgeMisconfigured("judge 'j': HTTP 401", model="j", status_code=401)
    fn = retry_on_low_quality(evaluator=raising(error), judge_error_policy=policy)(answer)
    with pytest.raises(JudgeMisconfigured):
        fn("q")


def test_a_bug_in_a_rule_check_always_propagates() -> None:
    _, answer = calls_counter()
    fn = retry_on_low_quality(evaluator=raising(ZeroDivisionError("bug")))(answer)
    with pytest.raises(ZeroDivisionError):
        fn("q")


def test_fail_closed_raises_a_marked_copy_and_leaves_the_evaluators_error_alone() -> None:
    _, answer = calls_counter()
    error = unavailable()
    fn = retry_on_low_quality(evaluator=raising(error), judge_error_policy="fail_closed")(answer)
    with pytest.raises(JudgeUnavailable) as caught:
        fn("q")
    raised = caught.value
    assert raised.fail_closed  # no outer policy lets it through
    assert (str(raised), raised.model, raised.status_code) == (str(error), "j", 503)
    assert not error.fail_closed  # the evaluator's own exception is never changed
    with pytest.raises(AttributeError):
        error.fail_closed = True  # type: ignore[misc]  # a policy decides it, not a setter


async def test_async_path_has_the_same_policy() -> None:
    async def answer(question: str) -> str:
        return "an answer"

    fn = retry_on_low_quality(evaluator=raising(unavailable()))(answer)
    assert await fn("q") == "an answer"
    closed = retry_on_low_quality(
        evaluator=raising(unavailable()), judge_error_policy="fail_closed"
    )(answer)
    with pytest.raises(JudgeUnavailable):
        await closed("q")


def test_an_unknown_policy_is_refused_when_decorating() -> None:
    with pytest.raises(ValueError, match="judge_error_policy"):
        retry_on_low_quality(judge_error_policy="ignore")  # type: ignore[arg-type]


UNJUDGED = Verdict.unjudged("JudgeUnavailable: HTTP 503")


def test_all_of_is_unjudged_when_a_part_is_and_runs_nothing_after() -> None:
    ran: list[str] = []

    def later(request: EvaluationRequest) -> bool:
        ran.append("later")
        return True

    verdict = all_of(checks.not_empty(), lambda r: UNJUDGED, later).evaluate(
        EvaluationRequest(answer="x")
    )
    assert verdict.status == "unjudged"
    assert not verdict.passed
    assert ran == []
    assert [c.outcome for c in verdict.criteria] == ["pass", "skipped", "skipped"]


def test_any_of_passes_on_another_part_but_is_unjudged_otherwise() -> None:
    request = EvaluationRequest(answer="x")
    assert any_of(lambda r: UNJUDGED, lambda r: True).evaluate(request).passed
    verdict = any_of(lambda r: UNJUDGED, lambda r: False).evaluate(request)
    assert verdict.status == "unjudged"
    assert not verdict.passed


def test_weighted_is_unjudged_when_a_part_is() -> None:
    verdict = weighted((lambda r: True, 1.0), (lambda r: UNJUDGED, 1.0)).evaluate(
        EvaluationRequest(answer="x")
    )
    assert verdict.status == "unjudged"
    assert not verdict.passed


def test_an_unjudged_verdict_is_never_passed() -> None:
    assert Verdict.unjudged("why").passed is False
    assert not Verdict.unjudged("why").judged
    assert Verdict(passed=True).judged
