"""`fn.outcome(...)`: what one call did; `fn.retry_with(...)`: a variant; the facts on errors."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
from helpers import acall, as_kind, completion
from pydantic import BaseModel

import refinekit
from refinekit import (
    AnswerRejected,
    CorrectionExhausted,
    EvaluationRequest,
    Event,
    LowQualityAnswer,
    Outcome,
    Usage,
    Verdict,
    guarded,
    judges,
    retry_on_low_quality,
    reviewed,
    self_correct,
)
from refinekit.testing import Reply, ScriptedOpenAI

QUESTION = "How long is the refund window?"
CONVERSATION = [{"role": "user", "content": "Extract the invoice."}]


class Invoice(BaseModel):
    number: str
    total_cents: int


def passes_on(n: int) -> Callable[[EvaluationRequest], Verdict]:
    def evaluate(request: EvaluationRequest) -> Verdict:
        attempt = request.metadata["attempt"]
        return Verdict(passed=attempt >= n, feedback="" if attempt >= n else f"fix #{attempt}")

    return evaluate


async def outcome_of(fn: Any, *args: Any, **kwargs: Any) -> Outcome[Any]:
    """`fn.outcome(...)`, awaited when `fn` is async (it then returns a coroutine)."""
    made = fn.outcome(*args, **kwargs)
    if inspect.iscoroutinefunction(fn):
        assert inspect.iscoroutine(made)
        made = await made
    assert isinstance(made, Outcome)
    return made


@pytest.fixture
async def clients(kind: str, server: ScriptedOpenAI) -> AsyncIterator[Any]:
    """The kind's client on the scripted server, closed after."""
    client: Any = server.client() if kind == "sync" else server.async_client()
    yield client
    if isinstance(client, openai.AsyncOpenAI):
        await client.close()
    else:
        client.close()


# --- @retry_on_low_quality -----------------------------------------------------------------------


async def test_outcome_of_a_retried_call_has_its_attempts_verdicts_usage_and_job(
    kind: str, server: ScriptedOpenAI, clients: Any, events: list[Event]
) -> None:
    server.script(
        "answer",
        [
            Reply.text("Always.", prompt_tokens=30, completion_tokens=2),
            Reply.text("Thirty days, unused.", prompt_tokens=40, completion_tokens=5),
        ],
    )
    server.script(
        "judge",
        [
            Reply.text("No", prompt_tokens=100, completion_tokens=1),
            Reply.text("Yes", prompt_tokens=110, completion_tokens=1),
        ],
    )
    judge = judges.relevancy(judges.JudgeModel(clients, "judge"))
    decorate = retry_on_low_quality(evaluator=judge, wait=1.5)
    if kind == "sync":

        @decorate
        def answer(question: str, feedback: str | None = None) -> Any:
            messages = [{"role": "user", "content": f"{question} {feedback or ''}"}]
            return clients.chat.completions.create(model="answer", messages=messages)

    else:

        @decorate
        async def answer(question: str, feedback: str | None = None) -> Any:
            messages = [{"role": "user", "content": f"{question} {feedback or ''}"}]
            return await clients.chat.completions.create(model="answer", messages=messages)

    outcome = await outcome_of(answer, QUESTION)
    assert outcome.value.choices[0].message.content == "Thirty days, unused."
    assert outcome.decorator == "retry_on_low_quality"
    assert outcome.function.endswith("answer")
    assert outcome.attempt_count == 2
    assert [a.number for a in outcome.attempts] == [1, 2]
    first, second = outcome.attempts
    assert not first.verdict.passed
    assert second.verdict.passed
    assert second.feedback == first.verdict.feedback
    assert outcome.verdicts == (first.verdict, second.verdict)
    assert outcome.verdict == second.verdict
    assert outcome.usage == Usage(model_calls=2, prompt_tokens=70, completion_tokens=7)
    assert outcome.judge_usage == Usage(model_calls=2, prompt_tokens=210, completion_tokens=2)
    assert outcome.idle_for == 1.5  # computed, not slept: tests run in testing mode
    assert outcome.corrections_used == 0
    assert {e.job_id for e in events} == {outcome.job_id}
    assert outcome.duration >= 0


async def test_outcome_value_is_what_the_plain_call_returns(kind: str) -> None:
    calls: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        calls.append(feedback)
        return f"a{len(calls)}"

    fn = retry_on_low_quality(evaluator=passes_on(2))(as_kind(kind, answer))
    assert await acall(fn, QUESTION) == "a2"
    outcome = await outcome_of(fn, QUESTION)
    assert outcome.value == "a4"
    assert calls == [None, "fix #1", None, "fix #1"]  # the same calls, nothing more


async def test_outcome_raises_what_the_plain_call_raises_with_the_same_facts(kind: str) -> None:
    def answer(question: str) -> str:
        return "never good enough"

    fn = retry_on_low_quality(evaluator=lambda r: False, max_retries=1)(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer) as plain:
        await acall(fn, QUESTION)
    with pytest.raises(LowQualityAnswer) as via_outcome:
        await outcome_of(fn, QUESTION)
    for error in (plain.value, via_outcome.value):
        assert len(error.attempts) == 2
        assert error.job_id is not None
        assert error.usage == Usage()
        assert error.judge_usage == Usage()
    assert plain.value.job_id != via_outcome.value.job_id  # two calls, two jobs


async def test_return_best_is_a_success_with_every_attempt(kind: str) -> None:
    answers = iter(["good", "worse", "worst"])

    def answer(question: str) -> str:
        return next(answers)

    def judge(request: EvaluationRequest) -> Verdict:
        return Verdict(passed=False, feedback="no", score=1.0 if request.answer == "good" else 0)

    fn = retry_on_low_quality(evaluator=judge, on_exhausted="return_best")(as_kind(kind, answer))
    outcome = await outcome_of(fn, QUESTION)
    assert outcome.value == "worst"  # no criteria: every attempt ranks the same, the later wins
    assert [a.answer for a in outcome.attempts] == ["good", "worse", "worst"]
    assert not any(v.passed for v in outcome.verdicts)


async def test_an_answer_returned_unjudged_says_why_in_its_attempt(kind: str) -> None:
    fn = retry_on_low_quality(skip=lambda request: True)(as_kind(kind, lambda question: "a"))
    outcome = await outcome_of(fn, QUESTION)
    assert outcome.attempt_count == 1
    assert outcome.attempts[0].verdict.status == "unjudged"
    assert outcome.attempts[0].verdict.reason == "skipped"
    assert outcome.verdicts == ()  # nothing judged it


async def test_outcome_counts_this_calls_usage_inside_a_longer_job(kind: str) -> None:
    replies = iter([completion("one", 10, 1), completion("two", 20, 2)])
    fn = retry_on_low_quality()(as_kind(kind, lambda question: next(replies)))
    with refinekit.job() as job:
        await acall(fn, QUESTION)
        outcome = await outcome_of(fn, QUESTION)
    assert outcome.job_id == job.id
    assert outcome.usage == Usage(model_calls=1, prompt_tokens=20, completion_tokens=2)
    assert job.usage == Usage(model_calls=2, prompt_tokens=30, completion_tokens=3)


# --- @self_correct, @reviewed, @guarded ----------------------------------------------------------


async def test_self_correct_outcome_has_each_reply_and_the_corrections(kind: str) -> None:
    replies = iter([completion("not json", 12, 3), completion('{"number": "7", "total_cents": 5}')])
    fn = self_correct(schema=Invoice)(as_kind(kind, lambda messages: next(replies)))
    outcome = await outcome_of(fn, CONVERSATION)
    assert outcome.value == Invoice(number="7", total_cents=5)
    assert outcome.decorator == "self_correct"
    assert outcome.corrections_used == 1
    assert outcome.attempt_count == 2
    failed, parsed = outcome.attempts
    assert not failed.verdict.passed
    assert failed.answer == "not json"
    assert failed.verdict.metadata["failure"] == "not_json"
    assert failed.feedback is None
    assert parsed.verdict.passed
    assert parsed.answer == outcome.value
    assert parsed.feedback is not None  # the correction turn this reply answered
    assert "JSON" in parsed.feedback
    assert outcome.usage == Usage(model_calls=2, prompt_tokens=22, completion_tokens=8)


async def test_reviewed_outcome_has_one_attempt_per_draft(kind: str) -> None:
    def judge(request: EvaluationRequest) -> Verdict:
        return Verdict(passed="30 days" in request.answer, feedback="Say how long.")

    def revise(revision: refinekit.RevisionRequest) -> str:
        return revision.draft + " Within 30 days."

    fn = reviewed(judge=judge, reviser=revise)(as_kind(kind, lambda question: "Yes."))
    outcome = await outcome_of(fn, QUESTION)
    assert outcome.value == "Yes. Within 30 days."
    assert [a.answer for a in outcome.attempts] == ["Yes.", "Yes. Within 30 days."]
    assert [a.verdict.passed for a in outcome.attempts] == [False, True]
    assert outcome.attempts[1].feedback == "Say how long."
    assert outcome.verdicts == tuple(a.verdict for a in outcome.attempts)


async def test_a_rejected_review_raises_with_the_job_facts(kind: str) -> None:
    fn = reviewed(judge=lambda r: False, max_revisions=0)(as_kind(kind, lambda question: "No."))
    with pytest.raises(AnswerRejected) as raised:
        await outcome_of(fn, QUESTION)
    assert raised.value.job_id is not None
    assert raised.value.judge_usage == Usage()


async def test_guarded_outcome_never_holds_the_blocked_text(kind: str) -> None:
    fn = guarded(screen=lambda request: "secret" not in request.answer, screen_input=True)(
        as_kind(kind, lambda question: "the secret is 42")
    )
    outcome = await outcome_of(fn, QUESTION)
    assert outcome.value == "I can't help with that."
    assert [a.answer for a in outcome.attempts] == ["I can't help with that."]
    assert [v.passed for v in outcome.verdicts] == [True, False]  # input, then output
    assert outcome.attempts[0].verdict == outcome.verdicts[-1]


async def test_a_correction_exhausted_carries_the_job_facts(kind: str) -> None:
    fn = self_correct(schema=Invoice, max_corrections=0)(as_kind(kind, lambda messages: "no"))
    with pytest.raises(CorrectionExhausted) as raised:
        await outcome_of(fn, CONVERSATION)
    assert raised.value.job_id is not None
    assert raised.value.judge_usage == Usage()


# --- stacked decorators share a job --------------------------------------------------------------


async def test_stacked_the_outer_outcome_has_the_inner_calls_job_facts(
    kind: str, events: list[Event]
) -> None:
    replies = iter(
        [
            completion("not json", 10, 1),
            completion('{"number": "1", "total_cents": 0}', 20, 2),
            completion('{"number": "2", "total_cents": 9}', 30, 3),
        ]
    )

    def extract(messages: list[dict[str, Any]]) -> Any:
        return next(replies)

    def judge(request: EvaluationRequest) -> Verdict:
        return Verdict(passed='"total_cents":9' in request.answer, feedback="The total is 9.")

    inner = self_correct(schema=Invoice)(as_kind(kind, extract))
    outer = retry_on_low_quality(evaluator=judge)(inner)
    outcome = await outcome_of(outer, CONVERSATION)
    assert outcome.value == Invoice(number="2", total_cents=9)
    assert outcome.decorator == "retry_on_low_quality"
    assert outcome.attempt_count == 2  # the outer's attempts: each a call of the inner
    assert outcome.corrections_used == 1  # the inner's, spent in the shared job
    assert outcome.usage == Usage(model_calls=3, prompt_tokens=60, completion_tokens=6)
    assert {e.job_id for e in events} == {outcome.job_id}
    assert {e.decorator for e in events} == {"self_correct", "retry_on_low_quality"}


# --- retry_with ----------------------------------------------------------------------------------


async def test_retry_with_derives_a_variant_and_leaves_the_original(kind: str) -> None:
    calls: list[int] = []

    def answer(question: str) -> str:
        calls.append(1)
        return "a"

    fn = retry_on_low_quality(evaluator=lambda r: False, max_retries=2)(as_kind(kind, answer))
    once = fn.retry_with(max_retries=0)
    assert once is not fn
    assert once.__name__ == fn.__name__
    assert inspect.signature(once) == inspect.signature(fn)
    with pytest.raises(LowQualityAnswer):
        await acall(once, QUESTION)
    assert len(calls) == 1
    with pytest.raises(LowQualityAnswer):
        await acall(fn, QUESTION)
    assert len(calls) == 4  # the original still makes 3 attempts
    best = fn.retry_with(on_exhausted="return_best")
    assert await acall(best, QUESTION) == "a"


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (lambda: self_correct(schema=Invoice), {"max_corrections": 0}),
        (lambda: reviewed(judge=lambda r: True, max_revisions=0), {"mode": "shadow"}),
        (lambda: guarded(screen=lambda r: True), {"refusal": "No."}),
    ],
    ids=["self_correct", "reviewed", "guarded"],
)
def test_every_decorator_has_retry_with(make: Any, change: dict[str, Any]) -> None:
    def fn(messages: Any) -> str:
        return '{"number": "1", "total_cents": 1}'

    decorated = make()(fn)
    variant = decorated.retry_with(**change)
    assert variant is not decorated
    assert variant.__wrapped__ is fn
    assert variant.__name__ == "fn"


def test_retry_with_refuses_an_unknown_option_or_a_bad_value() -> None:
    fn = retry_on_low_quality()(lambda question: "a")
    with pytest.raises(TypeError, match="retry_on_low_quality takes no option 'max_retry'"):
        fn.retry_with(max_retry=1)
    with pytest.raises(ValueError, match="max_retries"):
        fn.retry_with(max_retries=-1)


# --- the errors carry the job's facts, judges' usage apart ---------------------------------------


async def test_every_error_carries_the_judges_usage_and_the_job(
    kind: str, server: ScriptedOpenAI, clients: Any
) -> None:
    server.script("judge", [Reply.text("No", prompt_tokens=100, completion_tokens=1)] * 4)
    judge = judges.relevancy(judges.JudgeModel(clients, "judge"))
    answer = as_kind(kind, lambda question: "Always.")
    retried = retry_on_low_quality(evaluator=judge, max_retries=1)(answer)
    with pytest.raises(LowQualityAnswer) as low:
        await acall(retried, QUESTION)
    assert low.value.judge_usage == Usage(model_calls=2, prompt_tokens=200, completion_tokens=2)
    review = reviewed(judge=judge, max_revisions=0)(answer)
    with pytest.raises(AnswerRejected) as rejected:
        await acall(review, QUESTION)
    assert rejected.value.judge_usage == Usage(
        model_calls=1, prompt_tokens=100, completion_tokens=1
    )
    extract = self_correct(schema=Invoice, max_corrections=0)(as_kind(kind, lambda m: "no"))
    with refinekit.job() as job:
        with pytest.raises(LowQualityAnswer):
            await acall(retried.retry_with(max_retries=0), QUESTION)
        with pytest.raises(CorrectionExhausted) as exhausted:
            await acall(extract, CONVERSATION)
    assert exhausted.value.job_id == job.id
    assert exhausted.value.judge_usage == job.judge_usage
    assert job.judge_usage.model_calls == 1
    assert len({low.value.job_id, rejected.value.job_id, job.id}) == 3


async def test_outcome_emits_the_events_the_plain_call_emits(kind: str) -> None:
    calls: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        calls.append(feedback)
        return "a"

    fn = retry_on_low_quality(evaluator=passes_on(2))(as_kind(kind, answer))
    plain: list[Event] = []
    with refinekit.subscribe(plain.append):
        await acall(fn, QUESTION)
    recorded: list[Event] = []
    with refinekit.subscribe(recorded.append):
        await outcome_of(fn, QUESTION)
    assert [(e.kind, e.attempt) for e in plain] == [(e.kind, e.attempt) for e in recorded]
    assert calls == [None, "fix #1", None, "fix #1"]
