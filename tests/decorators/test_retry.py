"""`@retry_on_low_quality`: every rule, each checked on a `def` and on an `async def` function."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest
import tenacity
from helpers import call, completion, passes_on, reject_all
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

import refinekit
import refinekit._engine.flow
from refinekit import (
    Attempt,
    ContextDocument,
    CriterionResult,
    EvaluationRequest,
    Event,
    LowQualityAnswer,
    Usage,
    Verdict,
    retry_on_low_quality,
)

# --- helpers shared by the sync and async variants -----------------------------------------------


def decorated(kind: str, impl: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """`impl` under `@retry_on_low_quality(**options)`, as a `def` or as an `async def`."""
    if kind == "sync":
        return retry_on_low_quality(**options)(impl)

    @functools.wraps(impl)  # keeps impl's signature, so `feedback` and `question` are seen
    async def impl_async(*args: Any, **kwargs: Any) -> Any:
        return impl(*args, **kwargs)

    assert inspect.iscoroutinefunction(impl_async)
    return retry_on_low_quality(**options)(impl_async)


def stub() -> tuple[Callable[..., str], list[str | None]]:
    """An answer function returning "a1", "a2", ...; the list records the feedback of each call."""
    feedback_seen: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        feedback_seen.append(feedback)
        return f"a{len(feedback_seen)}"

    return answer, feedback_seen


def recording(verdict: Callable[[EvaluationRequest], Verdict] | None = None) -> Any:
    """An evaluator that records every request it judges in `.requests` (default: all pass)."""
    verdict = verdict or passes_on(1)

    def evaluate(request: EvaluationRequest) -> Verdict:
        evaluate.requests.append(request)  # type: ignore[attr-defined]
        return verdict(request)

    evaluate.requests = []  # type: ignore[attr-defined]
    return evaluate


def waits(events: list[Event]) -> list[float | None]:
    return [e.wait for e in events if e.kind == "retry"]


# --- the attempt cap -----------------------------------------------------------------------------


@pytest.mark.parametrize("max_retries", [0, 1, 2, 5])
def test_calls_exactly_max_retries_plus_one_times_when_every_answer_is_rejected(
    kind: str, max_retries: int
) -> None:
    answer, feedback_seen = stub()
    fn = decorated(kind, answer, evaluator=reject_all, max_retries=max_retries)
    with pytest.raises(LowQualityAnswer):
        call(fn, "q")
    assert len(feedback_seen) == max_retries + 1


@pytest.mark.parametrize("max_retries", [0, 3])
def test_the_cap_holds_when_the_function_raises_low_quality_answer(
    kind: str, max_retries: int
) -> None:
    calls: list[int] = []

    def answer(question: str) -> str:
        calls.append(1)
        raise LowQualityAnswer("still wrong")

    with pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, max_retries=max_retries), "q")
    assert len(calls) == max_retries + 1


def test_a_first_pass_success_makes_exactly_one_call(kind: str) -> None:
    answer, feedback_seen = stub()
    evaluator = recording()
    fn = decorated(kind, answer, evaluator=evaluator)
    assert call(fn, "q") == "a1"
    assert feedback_seen == [None]
    assert len(evaluator.requests) == 1


def test_without_evaluator_a_returned_answer_is_accepted(kind: str) -> None:
    answer, feedback_seen = stub()
    assert call(decorated(kind, answer), "q") == "a1"
    assert feedback_seen == [None]


def test_the_answer_that_passes_is_returned(kind: str) -> None:
    answer, feedback_seen = stub()
    assert call(decorated(kind, answer, evaluator=passes_on(3)), "q") == "a3"
    assert len(feedback_seen) == 3


# --- decoration-time errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        pytest.param({"max_retries": -1}, ValueError, id="max_retries=-1"),
        pytest.param({"max_retries": 101}, ValueError, id="max_retries=101"),
        pytest.param({"max_retries": 2.5}, ValueError, id="max_retries=2.5"),
        pytest.param({"max_retries": True}, ValueError, id="max_retries=True"),
        pytest.param({"max_retries": "2"}, ValueError, id="max_retries='2'"),
        pytest.param({"max_retries": None}, ValueError, id="max_retries=None"),
        pytest.param({"on_exhausted": "whatever"}, ValueError, id="on_exhausted"),
        pytest.param({"question": "nonexistent_param"}, ValueError, id="question"),
        pytest.param({"evaluator": 42}, TypeError, id="evaluator=42"),
        pytest.param({"wait": "fast"}, TypeError, id="wait='fast'"),
        pytest.param({"wait": True}, TypeError, id="wait=True"),
        pytest.param({"wait": -1}, ValueError, id="wait=-1"),
        pytest.param({"skip": True}, TypeError, id="skip=True"),
        pytest.param({"context": "docs"}, TypeError, id="context='docs'"),
        pytest.param({"answer": 1}, TypeError, id="answer=1"),
    ],
)
def test_bad_options_fail_when_decorating(
    kind: str, options: dict[str, Any], error: type[Exception]
) -> None:
    answer, feedback_seen = stub()
    with pytest.raises(error):
        decorated(kind, answer, **options)
    assert feedback_seen == []


@pytest.mark.parametrize("max_retries", [0, 100])
def test_max_retries_bounds_are_accepted(kind: str, max_retries: int) -> None:
    answer, _ = stub()
    assert call(decorated(kind, answer, max_retries=max_retries), "q") == "a1"


# --- feedback ------------------------------------------------------------------------------------


def test_feedback_reaches_the_next_call_as_keyword(kind: str) -> None:
    answer, feedback_seen = stub()
    call(decorated(kind, answer, evaluator=passes_on(3)), "q")
    assert feedback_seen == [None, "fix #1", "fix #2"]


def test_feedback_replaces_a_feedback_the_caller_passed_positionally(kind: str) -> None:
    answer, feedback_seen = stub()
    call(decorated(kind, answer, evaluator=passes_on(2)), "q", "from caller")
    assert feedback_seen == ["from caller", "fix #1"]


def test_feedback_reaches_a_keyword_only_parameter(kind: str) -> None:
    seen: list[tuple[str, str | None]] = []

    def answer(question: str, *, feedback: str | None = None) -> str:
        seen.append((question, feedback))
        return "a"

    call(decorated(kind, answer, evaluator=passes_on(2)), "q")
    assert seen == [("q", None), ("q", "fix #1")]


def test_a_function_without_feedback_parameter_gets_the_original_arguments(kind: str) -> None:
    seen: list[tuple[str, int]] = []

    def answer(question: str, n: int = 1) -> str:
        seen.append((question, n))
        return "a"

    call(decorated(kind, answer, evaluator=passes_on(3)), "q", n=7)
    assert seen == [("q", 7)] * 3


def test_current_attempt_describes_each_attempt(kind: str) -> None:
    infos: list[refinekit.AttemptInfo | None] = []

    def answer(question: str) -> str:
        infos.append(refinekit.current_attempt())
        return f"a{len(infos)}"

    call(decorated(kind, answer, evaluator=passes_on(3), max_retries=2), "q")
    assert None not in infos
    assert [i.number for i in infos if i] == [1, 2, 3]
    assert [i.max_attempts for i in infos if i] == [3, 3, 3]
    assert [i.feedback for i in infos if i] == [None, "fix #1", "fix #2"]
    assert [i.previous_answer for i in infos if i] == [None, "a1", "a2"]
    assert [i.is_last for i in infos if i] == [False, False, True]


def test_current_attempt_is_none_outside_a_decorated_call(kind: str) -> None:
    answer, _ = stub()
    assert refinekit.current_attempt() is None
    call(decorated(kind, answer, evaluator=passes_on(2)), "q")
    assert refinekit.current_attempt() is None


def test_feedback_does_not_compound_into_the_prompt(kind: str) -> None:
    prompts: list[str] = []

    def answer(question: str, feedback: str | None = None) -> str:
        prompt = question if feedback is None else f"{question}\nFix this: {feedback}"
        prompts.append(prompt)
        return prompt

    call(decorated(kind, answer, evaluator=passes_on(3)), "What is 2+2?")
    assert prompts == [
        "What is 2+2?",
        "What is 2+2?\nFix this: fix #1",
        "What is 2+2?\nFix this: fix #2",
    ]


def test_each_attempt_gets_the_original_arguments_not_the_previous_prompt(kind: str) -> None:
    sent: list[list[str]] = []

    def answer(messages: list[str], feedback: str | None = None) -> str:
        messages = [*messages, feedback] if feedback else list(messages)
        sent.append(messages)
        return "a"

    original = ["system", "user question"]
    call(decorated(kind, answer, evaluator=passes_on(3)), original)
    assert sent == [original, [*original, "fix #1"], [*original, "fix #2"]]
    assert original == ["system", "user question"]


# --- exceptions ----------------------------------------------------------------------------------


def test_low_quality_answer_raised_by_the_function_triggers_a_retry(kind: str) -> None:
    feedback_seen: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        feedback_seen.append(feedback)
        if len(feedback_seen) == 1:
            raise LowQualityAnswer("too short")
        return "a long enough answer"

    assert call(decorated(kind, answer), "q") == "a long enough answer"
    assert feedback_seen == [None, "too short"]


class CustomError(Exception):
    pass


@pytest.mark.parametrize("error", [ValueError("boom"), CustomError("custom")])
def test_other_exceptions_propagate_at_once_unretried(kind: str, error: Exception) -> None:
    calls: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        calls.append(feedback)
        if len(calls) == 2:
            raise error
        return "a"

    with pytest.raises(type(error)) as raised:
        call(decorated(kind, answer, evaluator=reject_all, max_retries=5), "q")
    assert raised.value is error
    assert calls == [None, "fix #1"]


def test_an_exception_raised_by_the_evaluator_propagates(kind: str) -> None:
    answer, feedback_seen = stub()
    bug = KeyError("a bug in the check")

    def evaluator(request: EvaluationRequest) -> Verdict:
        raise bug

    with pytest.raises(KeyError) as raised:
        call(decorated(kind, answer, evaluator=evaluator), "q")
    assert raised.value is bug
    assert feedback_seen == [None]


# --- exhaustion ----------------------------------------------------------------------------------


def test_exhaustion_raises_the_last_low_quality_answer_itself(kind: str) -> None:
    raised: list[LowQualityAnswer] = []

    def answer(question: str, feedback: str | None = None) -> str:
        raised.append(LowQualityAnswer(f"f{len(raised) + 1}", answer=f"a{len(raised) + 1}"))
        raise raised[-1]

    with pytest.raises(LowQualityAnswer) as exc_info:
        call(decorated(kind, answer, max_retries=2), "q")
    error = exc_info.value
    assert error is raised[-1]
    assert error.feedback == "f3"
    assert [a.number for a in error.attempts] == [1, 2, 3]
    assert [a.answer for a in error.attempts] == ["a1", "a2", "a3"]
    assert [a.verdict for a in error.attempts] == [e.verdict for e in raised]
    assert [a.feedback for a in error.attempts] == [None, "f1", "f2"]
    assert all(a.duration >= 0 for a in error.attempts)
    assert "after 3 attempts" in str(error)


def test_exhaustion_after_evaluator_rejections_carries_verdicts_and_best(kind: str) -> None:
    verdicts: list[Verdict] = []

    def evaluator(request: EvaluationRequest) -> Verdict:
        verdicts.append(Verdict(passed=False, feedback=f"bad {request.answer}"))
        return verdicts[-1]

    answer, _ = stub()
    with pytest.raises(LowQualityAnswer) as exc_info:
        call(decorated(kind, answer, evaluator=evaluator, max_retries=1), "q")
    error = exc_info.value
    assert error.feedback == "bad a2"
    assert error.verdict is verdicts[-1]
    assert [a.verdict for a in error.attempts] == verdicts
    assert [a.answer for a in error.attempts] == ["a1", "a2"]
    assert [a.feedback for a in error.attempts] == [None, "bad a1"]
    assert isinstance(error.best, Attempt)
    assert error.best.answer == "a2"  # equal verdicts: the later attempt wins


def criteria(passed: int, failed: int) -> Verdict:
    results = [CriterionResult(name=f"p{i}", outcome="pass") for i in range(passed)]
    results += [CriterionResult(name=f"f{i}", outcome="fail") for i in range(failed)]
    return Verdict(passed=False, feedback="improve", criteria=tuple(results))


def scripted(*verdicts: Verdict) -> Callable[[EvaluationRequest], Verdict]:
    """An evaluator giving attempt n the n-th verdict."""
    return lambda request: verdicts[request.metadata["attempt"] - 1]


@pytest.mark.parametrize(
    ("verdicts", "best"),
    [
        pytest.param((criteria(2, 1), criteria(3, 1), criteria(1, 1)), "a2", id="most-net"),
        pytest.param((criteria(3, 0), criteria(1, 1), criteria(0, 2)), "a1", id="first"),
        pytest.param((criteria(2, 1), criteria(3, 2), criteria(0, 2)), "a2", id="tie-later"),
        pytest.param((criteria(1, 0), criteria(2, 1), criteria(3, 2)), "a3", id="tie-3-way"),
        pytest.param((criteria(3, 0), criteria(4, 3), criteria(0, 1)), "a1", id="net-of-failed"),
    ],
)
def test_return_best_returns_most_criteria_passed_net_of_failed(
    kind: str, verdicts: tuple[Verdict, ...], best: str
) -> None:
    answer, _ = stub()
    fn = decorated(kind, answer, evaluator=scripted(*verdicts), on_exhausted="return_best")
    assert call(fn, "q") == best


def test_return_best_never_returns_an_attempt_without_answer(kind: str) -> None:
    calls: list[int] = []

    def answer(question: str) -> str:
        calls.append(1)
        if len(calls) == 2:
            raise LowQualityAnswer("no answer at all")  # would win the tie if it counted
        return f"a{len(calls)}"

    fn = decorated(kind, answer, evaluator=reject_all, max_retries=1, on_exhausted="return_best")
    assert call(fn, "q") == "a1"


def test_return_best_raises_the_last_error_when_no_attempt_has_an_answer(kind: str) -> None:
    raised: list[LowQualityAnswer] = []

    def answer(question: str) -> str:
        raised.append(LowQualityAnswer(f"nothing #{len(raised) + 1}"))
        raise raised[-1]

    with pytest.raises(LowQualityAnswer) as exc_info:
        call(decorated(kind, answer, on_exhausted="return_best"), "q")
    assert exc_info.value is raised[-1]
    assert exc_info.value.best is None
    assert len(exc_info.value.attempts) == 3


# --- the EvaluationRequest -----------------------------------------------------------------------


def judged(kind: str, impl: Callable[..., Any], *args: Any, **options: Any) -> EvaluationRequest:
    """Call `impl` decorated with a recording evaluator; the request of its first attempt."""
    evaluator = recording()
    call(decorated(kind, impl, evaluator=evaluator, **options), *args)
    return evaluator.requests[0]  # type: ignore[no-any-return]


def test_question_defaults_to_the_question_parameter(kind: str) -> None:
    def answer(topic: str, question: str) -> str:
        return "a"

    assert judged(kind, answer, "maths", "What is 2+2?").question == "What is 2+2?"


def test_question_is_found_when_passed_by_keyword(kind: str) -> None:
    evaluator = recording()

    def answer(context: str, question: str = "", *, style: str = "short") -> str:
        return "a"

    call(decorated(kind, answer, evaluator=evaluator), "ctx", style="long", question="Why?")
    assert evaluator.requests[0].question == "Why?"


def test_question_defaults_to_the_first_str_argument(kind: str) -> None:
    def answer(n: int, text: str, other: str) -> str:
        return "a"

    assert judged(kind, answer, 3, "first", "second").question == "first"


def test_question_is_empty_without_str_argument(kind: str) -> None:
    def answer(n: int) -> str:
        return "a"

    assert judged(kind, answer, 3).question == ""


def test_question_default_value_is_used(kind: str) -> None:
    def answer(question: str = "the default question") -> str:
        return "a"

    assert judged(kind, answer).question == "the default question"


def test_question_names_a_parameter(kind: str) -> None:
    def answer(system: str, prompt: str) -> str:
        return "a"

    assert judged(kind, answer, "be brief", "Why?", question="prompt").question == "Why?"


def test_question_callable_gets_the_bound_arguments(kind: str) -> None:
    def answer(city: str, year: int = 2020) -> str:
        return "a"

    def question(arguments: Any) -> str:
        return f"{arguments['city']} in {arguments['year']}"

    assert judged(kind, answer, "Oslo", question=question).question == "Oslo in 2020"


class Capital(BaseModel):
    country: str
    city: str


def test_a_question_that_is_not_text_is_judged_as_json(kind: str) -> None:
    # found the one way every decorator finds it (@guarded screens an input the same way)
    def answer(question: Capital) -> str:
        return "a"

    asked = Capital(country="Norway", city="Oslo")
    assert judged(kind, answer, asked).question == '{"country":"Norway","city":"Oslo"}'


def test_a_question_callable_must_return_text(kind: str) -> None:
    def answer(question: str) -> str:
        return "a"

    fn = decorated(kind, answer, evaluator=recording(), question=lambda arguments: 42)
    with pytest.raises(TypeError, match=r"question= of .* must return a str, got int"):
        call(fn, "q")


def test_answer_text_str_as_is_and_pydantic_model_as_json(kind: str) -> None:
    def text(question: str) -> str:
        return "  Oslo  "

    def model(question: str) -> Capital:
        return Capital(country="Norway", city="Oslo")

    assert judged(kind, text, "q").answer == "  Oslo  "
    assert judged(kind, model, "q").answer == '{"country":"Norway","city":"Oslo"}'


def test_answer_callable_turns_the_value_into_text(kind: str) -> None:
    def answer(question: str) -> dict[str, str]:
        return {"text": "Oslo", "lang": "en"}

    assert judged(kind, answer, "q", answer=lambda value: value["text"]).answer == "Oslo"


def test_answer_callable_must_return_str(kind: str) -> None:
    answer, _ = stub()
    with pytest.raises(TypeError, match="must return a str"):
        judged(kind, answer, "q", answer=len)


def test_context_comes_from_the_callable_and_from_record_context(kind: str) -> None:
    def answer(question: str, doc: str) -> str:
        refinekit.record_context("plain text")
        refinekit.record_context({"text": "dict text", "source": "b.md"})
        refinekit.record_context(
            [ContextDocument(text="model text", source="c.md"), {"text": "listed"}]
        )
        return "a"

    def context(arguments: Any) -> list[dict[str, str]]:
        return [{"text": arguments["doc"], "source": "a.md"}]

    request = judged(kind, answer, "q", "the doc", context=context)
    assert [(d.text, d.source) for d in request.context] == [
        ("the doc", "a.md"),
        ("plain text", None),
        ("dict text", "b.md"),
        ("model text", "c.md"),
        ("listed", None),
    ]


def test_recorded_context_belongs_to_one_attempt(kind: str) -> None:
    def answer(question: str) -> str:
        attempt = refinekit.current_attempt()
        assert attempt is not None
        refinekit.record_context(f"doc of attempt {attempt.number}")
        return "a"

    evaluator = recording(passes_on(3))
    call(decorated(kind, answer, evaluator=evaluator), "q")
    assert [[d.text for d in r.context] for r in evaluator.requests] == [
        ["doc of attempt 1"],
        ["doc of attempt 2"],
        ["doc of attempt 3"],
    ]


def test_record_context_outside_a_decorated_function_does_nothing(kind: str) -> None:
    refinekit.record_context(["recorded outside", {"text": "b"}])
    answer, _ = stub()
    assert judged(kind, answer, "q").context == ()


def test_a_nested_calls_accepted_context_reaches_the_outer_evaluator() -> None:
    @retry_on_low_quality(evaluator=passes_on(2), max_retries=1)
    def inner(question: str) -> str:
        attempt = refinekit.current_attempt()
        assert attempt is not None
        refinekit.record_context(f"inner doc of attempt {attempt.number}")
        return "inner answer"

    outer_judge = recording()

    @retry_on_low_quality(evaluator=outer_judge)
    def outer(question: str) -> str:
        refinekit.record_context("outer doc")
        return inner(question) + ", and more"

    assert outer("q") == "inner answer, and more"
    [request] = outer_judge.requests
    # the rejected inner attempt's document is not what the answer was built on
    assert [d.text for d in request.context] == ["outer doc", "inner doc of attempt 2"]


async def test_a_nested_async_calls_accepted_context_reaches_the_outer_evaluator() -> None:
    @retry_on_low_quality(evaluator=passes_on(2), max_retries=1)
    async def inner(question: str) -> str:
        attempt = refinekit.current_attempt()
        assert attempt is not None
        refinekit.record_context({"text": f"inner doc {attempt.number}", "source": "i.md"})
        return "inner answer"

    outer_judge = recording()

    @retry_on_low_quality(evaluator=outer_judge)
    async def outer(question: str) -> str:
        return await inner(question)

    await outer("q")
    [request] = outer_judge.requests
    assert [(d.text, d.source) for d in request.context] == [("inner doc 2", "i.md")]


def test_a_nested_call_that_gave_up_passes_no_context_to_the_outer_evaluator() -> None:
    @retry_on_low_quality(evaluator=reject_all, max_retries=1)
    def inner(question: str) -> str:
        refinekit.record_context("a rejected inner doc")
        return "inner answer"

    outer_judge = recording()

    @retry_on_low_quality(evaluator=outer_judge)
    def outer(question: str) -> str:
        refinekit.record_context("outer doc")
        try:
            return inner(question)
        except LowQualityAnswer:
            return "a fallback answer"

    assert outer("q") == "a fallback answer"
    [request] = outer_judge.requests
    assert [d.text for d in request.context] == ["outer doc"]


def test_a_nested_calls_returned_best_attempt_passes_its_own_context_on() -> None:
    def graded(request: EvaluationRequest) -> Verdict:  # attempt 2 is the best of three
        good = request.answer == "answer 2"
        return Verdict(
            passed=False,
            feedback="not yet",
            criteria=(CriterionResult(name="c", outcome="pass" if good else "fail"),),
        )

    @retry_on_low_quality(evaluator=graded, max_retries=2, on_exhausted="return_best")
    def inner(question: str) -> str:
        attempt = refinekit.current_attempt()
        assert attempt is not None
        refinekit.record_context(f"inner doc {attempt.number}")
        return f"answer {attempt.number}"

    outer_judge = recording()

    @retry_on_low_quality(evaluator=outer_judge)
    def outer(question: str) -> str:
        return inner(question)

    assert outer("q") == "answer 2"
    [request] = outer_judge.requests
    assert [d.text for d in request.context] == ["inner doc 2"]


def test_request_metadata_has_function_and_attempt(kind: str) -> None:
    answer, _ = stub()
    evaluator = recording(passes_on(2))
    call(decorated(kind, answer, evaluator=evaluator), "q")
    assert [r.metadata for r in evaluator.requests] == [
        {"function": answer.__qualname__, "attempt": 1},
        {"function": answer.__qualname__, "attempt": 2},
    ]


# --- skip ----------------------------------------------------------------------------------------


def test_skipped_answers_are_returned_unjudged(kind: str) -> None:
    def answer(question: str) -> str:
        return "I cannot answer that."

    evaluator = recording(passes_on(10**6))
    fn = decorated(
        kind, answer, evaluator=evaluator, skip=lambda r: r.answer.startswith("I cannot")
    )
    assert call(fn, "q") == "I cannot answer that."
    assert evaluator.requests == []


def test_answers_the_skip_predicate_declines_are_judged(kind: str) -> None:
    answer, _ = stub()
    evaluator = recording(passes_on(2))
    fn = decorated(kind, answer, evaluator=evaluator, skip=lambda r: r.answer == "never")
    assert call(fn, "q") == "a2"
    assert len(evaluator.requests) == 2


def test_skip_without_evaluator_returns_the_answer(kind: str) -> None:
    answer, feedback_seen = stub()
    assert call(decorated(kind, answer, skip=lambda r: False), "q") == "a1"
    assert feedback_seen == [None]


# --- evaluator shapes ----------------------------------------------------------------------------


def good_answer(request: EvaluationRequest) -> Verdict:
    return Verdict(passed=request.answer == "good", feedback="say good")


class SyncEvaluator:
    def evaluate(self, request: EvaluationRequest) -> Verdict:
        return good_answer(request)


class AsyncOnlyEvaluator:
    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        await asyncio.sleep(0)
        return good_answer(request)


def bool_check(request: EvaluationRequest) -> bool:
    return request.answer == "good"


async def async_check(request: EvaluationRequest) -> Verdict:
    return good_answer(request)


EVALUATOR_SHAPES = [
    pytest.param(SyncEvaluator(), id="evaluate-method"),
    pytest.param(AsyncOnlyEvaluator(), id="aevaluate-only"),
    pytest.param(bool_check, id="function-bool"),
    pytest.param(async_check, id="async-function"),
]


def bad_then_good() -> tuple[Callable[..., str], list[str | None]]:
    feedback_seen: list[str | None] = []

    def answer(question: str, feedback: str | None = None) -> str:
        feedback_seen.append(feedback)
        return "bad" if len(feedback_seen) == 1 else "good"

    return answer, feedback_seen


@pytest.mark.parametrize("evaluator", EVALUATOR_SHAPES)
def test_every_evaluator_shape_judges_sync_and_async_functions(kind: str, evaluator: Any) -> None:
    answer, feedback_seen = bad_then_good()
    assert call(decorated(kind, answer, evaluator=evaluator), "q") == "good"
    assert len(feedback_seen) == 2
    assert feedback_seen[1]  # the rejection's feedback reached the retry


def test_a_false_from_a_bool_check_names_the_check_in_feedback(kind: str) -> None:
    answer, feedback_seen = bad_then_good()
    call(decorated(kind, answer, evaluator=bool_check), "q")
    assert "bool_check" in str(feedback_seen[1])


async def test_an_async_only_evaluator_works_from_a_sync_function_in_a_running_loop() -> None:
    answer, feedback_seen = bad_then_good()
    fn = retry_on_low_quality(evaluator=AsyncOnlyEvaluator())(answer)
    assert fn("q") == "good"
    assert len(feedback_seen) == 2


async def test_a_sync_evaluator_runs_off_the_event_loop_in_an_async_function() -> None:
    threads: list[int] = []

    def evaluator(request: EvaluationRequest) -> bool:
        threads.append(threading.get_ident())
        return True

    @retry_on_low_quality(evaluator=evaluator)
    async def answer(question: str) -> str:
        return "a"

    assert await answer("q") == "a"
    assert threads != [threading.get_ident()]  # a blocking check never stalls the loop


@pytest.mark.parametrize("result", ["yes", None, 1])
def test_an_evaluator_returning_neither_verdict_nor_bool_raises_type_error(
    kind: str, result: object
) -> None:
    answer, _ = stub()
    with pytest.raises(TypeError, match="Verdict or a bool"):
        call(decorated(kind, answer, evaluator=lambda request: result), "q")


def test_an_async_evaluator_returning_a_str_raises_type_error(kind: str) -> None:
    async def evaluator(request: EvaluationRequest) -> str:
        return "passed"

    answer, _ = stub()
    with pytest.raises(TypeError, match="Verdict or a bool"):
        call(decorated(kind, answer, evaluator=evaluator), "q")


# --- backoff -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        pytest.param(tenacity.wait_fixed(3), [3, 3, 3], id="wait_fixed"),
        pytest.param(tenacity.wait_incrementing(start=1, increment=2), [1, 3, 5], id="incr"),
        pytest.param(tenacity.wait_exponential(multiplier=1, max=3), [1, 2, 3], id="exp"),
        pytest.param(tenacity.wait_fixed(1) + tenacity.wait_fixed(0.5), [1.5] * 3, id="sum"),
        pytest.param(2.5, [2.5, 2.5, 2.5], id="number"),
        pytest.param(0, [0, 0, 0], id="zero"),
        pytest.param(lambda state: state.attempt_number * 10, [10, 20, 30], id="callable"),
    ],
)
def test_wait_strategies_give_the_waits_reported_in_retry_events(
    kind: str, events: list[Event], wait: Any, expected: list[float]
) -> None:
    answer, _ = stub()
    with pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, evaluator=reject_all, max_retries=3, wait=wait), "q")
    assert waits(events) == expected


def test_the_default_wait_doubles_from_0_2_with_jitter_capped_at_5(
    kind: str, events: list[Event]
) -> None:
    answer, _ = stub()
    with pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, evaluator=reject_all, max_retries=8), "q")
    reported = waits(events)
    bases = [min(0.2 * 2 ** (n - 1), 5.0) for n in range(1, 9)]
    assert len(reported) == 8
    for wait, base in zip(reported, bases, strict=True):
        assert wait is not None
        assert base <= wait <= min(base + 0.2, 5.0)
    assert reported[-2:] == [5.0, 5.0]
    assert reported[:5] != bases[:5]  # jitter is added


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """Record the sleeps refinekit's drivers make; nothing sleeps for real."""
    calls: dict[str, list[float]] = {"time": [], "asyncio": []}

    def fake_sleep(seconds: float) -> None:
        calls["time"].append(seconds)

    async def fake_asleep(seconds: float, result: Any = None) -> Any:
        calls["asyncio"].append(seconds)
        return result

    monkeypatch.setattr(refinekit._engine.flow.time, "sleep", fake_sleep)
    monkeypatch.setattr(refinekit._engine.flow.asyncio, "sleep", fake_asleep)
    return calls


def test_testing_mode_never_sleeps(
    kind: str, sleeps: dict[str, list[float]], events: list[Event]
) -> None:
    assert refinekit.testing.is_testing()
    answer, _ = stub()
    with pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, evaluator=reject_all, wait=tenacity.wait_fixed(3)), "q")
    assert waits(events) == [3, 3]  # computed and reported, not slept
    assert sleeps == {"time": [], "asyncio": []}


def test_outside_testing_mode_sync_sleeps_with_time_sleep(
    sleeps: dict[str, list[float]], events: list[Event]
) -> None:
    answer, _ = stub()
    fn = decorated("sync", answer, evaluator=reject_all, wait=tenacity.wait_incrementing(1, 2))
    with refinekit.testing.set_testing(False), pytest.raises(LowQualityAnswer):
        call(fn, "q")
    assert sleeps == {"time": [1, 3], "asyncio": []}
    assert waits(events) == [1, 3]
    assert refinekit.testing.is_testing()  # the context manager restored the switch


def test_outside_testing_mode_async_sleeps_with_asyncio_sleep(
    sleeps: dict[str, list[float]], events: list[Event]
) -> None:
    answer, _ = stub()
    fn = decorated("async", answer, evaluator=reject_all, wait=tenacity.wait_incrementing(1, 2))
    with refinekit.testing.set_testing(False), pytest.raises(LowQualityAnswer):
        call(fn, "q")
    assert sleeps == {"time": [], "asyncio": [1, 3]}
    assert waits(events) == [1, 3]


def test_outside_testing_mode_the_default_wait_is_slept(
    kind: str, sleeps: dict[str, list[float]], events: list[Event]
) -> None:
    answer, _ = stub()
    with refinekit.testing.set_testing(False), pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, evaluator=reject_all), "q")
    slept = sleeps["time"] + sleeps["asyncio"]
    assert slept == waits(events)
    assert len(slept) == 2
    assert 0.2 <= slept[0] <= 0.4


def test_a_zero_wait_does_not_sleep_outside_testing_mode(
    kind: str, sleeps: dict[str, list[float]]
) -> None:
    answer, _ = stub()
    with refinekit.testing.set_testing(False), pytest.raises(LowQualityAnswer):
        call(decorated(kind, answer, evaluator=reject_all, wait=0), "q")
    assert sleeps == {"time": [], "asyncio": []}


# --- usage ---------------------------------------------------------------------------------------


def completions_then(
    replies: list[ChatCompletion],
) -> tuple[Callable[..., ChatCompletion], list[refinekit.Job | None]]:
    """An answer function returning `replies` in turn; the list records the job of each call."""
    jobs: list[refinekit.Job | None] = []

    def answer(question: str) -> ChatCompletion:
        jobs.append(refinekit.current_job())
        return replies[len(jobs) - 1]

    return answer, jobs


def test_usage_adds_up_per_attempt_and_the_response_is_returned_unchanged(
    kind: str, events: list[Event]
) -> None:
    replies = [completion(f"draft {i}", 10 * i, i) for i in (1, 2, 3)]
    before = [r.model_dump() for r in replies]
    answer, jobs = completions_then(replies)
    evaluator = recording(passes_on(3))
    result = call(decorated(kind, answer, evaluator=evaluator), "q")
    assert result is replies[2]
    assert [r.model_dump() for r in replies] == before
    assert [r.answer for r in evaluator.requests] == ["draft 1", "draft 2", "draft 3"]
    job = jobs[0]
    assert job is not None
    assert job.usage == Usage(model_calls=3, prompt_tokens=60, completion_tokens=6)
    assert [e.usage for e in events if e.kind == "attempt"] == [
        Usage(1, 10, 1),
        Usage(2, 30, 3),
        Usage(3, 60, 6),
    ]


def test_exhausted_error_carries_the_usage_of_every_attempt(kind: str) -> None:
    replies = [completion("draft", 100, 7), completion("draft", 200, 9)]
    answer, _ = completions_then(replies)
    with pytest.raises(LowQualityAnswer) as exc_info:
        call(decorated(kind, answer, evaluator=reject_all, max_retries=1), "q")
    assert exc_info.value.usage == Usage(model_calls=2, prompt_tokens=300, completion_tokens=16)
    assert exc_info.value.usage.total_tokens == 316


def test_usage_of_a_reply_carried_by_a_raised_low_quality_answer_counts(kind: str) -> None:
    def answer(question: str) -> str:
        raise LowQualityAnswer("off topic", answer=completion("draft", 5, 1))

    with pytest.raises(LowQualityAnswer) as exc_info:
        call(decorated(kind, answer), "q")
    assert exc_info.value.usage == Usage(model_calls=3, prompt_tokens=15, completion_tokens=3)


def test_nested_decorated_calls_count_a_reply_they_share_once() -> None:
    @retry_on_low_quality()
    def inner(question: str) -> ChatCompletion:
        return completion("draft", 10, 1)

    @retry_on_low_quality(evaluator=passes_on(2))
    def outer(question: str) -> ChatCompletion:
        return inner(question)

    with refinekit.job() as job:
        outer("q")
    assert job.usage == Usage(model_calls=2, prompt_tokens=20, completion_tokens=2)


async def test_nested_async_decorated_calls_count_a_reply_they_share_once() -> None:
    @retry_on_low_quality()
    async def inner(question: str) -> ChatCompletion:
        return completion("draft", 10, 1)

    @retry_on_low_quality(evaluator=passes_on(2))
    async def outer(question: str) -> ChatCompletion:
        return await inner(question)

    async with refinekit.job() as job:
        await outer("q")
    assert job.usage == Usage(model_calls=2, prompt_tokens=20, completion_tokens=2)


# --- jobs ----------------------------------------------------------------------------------------


def test_a_decorated_call_opens_one_job_for_all_its_attempts(kind: str) -> None:
    jobs: list[refinekit.Job | None] = []

    def answer(question: str) -> str:
        jobs.append(refinekit.current_job())
        return "a"

    assert refinekit.current_job() is None
    call(decorated(kind, answer, evaluator=passes_on(2)), "q")
    assert jobs[0] is not None
    assert jobs == [jobs[0], jobs[0]]
    assert refinekit.current_job() is None


def test_separate_calls_get_separate_jobs(kind: str) -> None:
    answer, jobs = completions_then([completion("a", 1, 1)] * 2)
    fn = decorated(kind, answer)
    call(fn, "q")
    call(fn, "q")
    assert jobs[0] is not None
    assert jobs[1] is not None
    assert jobs[0] is not jobs[1]


def test_a_nested_sync_decorated_call_joins_the_outer_job() -> None:
    jobs: list[refinekit.Job | None] = []

    @retry_on_low_quality()
    def inner(question: str) -> str:
        jobs.append(refinekit.current_job())
        return "inner"

    @retry_on_low_quality()
    def outer(question: str) -> str:
        jobs.append(refinekit.current_job())
        return inner(question)

    assert outer("q") == "inner"
    assert jobs[0] is not None
    assert jobs[1] is jobs[0]


async def test_a_nested_async_decorated_call_joins_the_outer_job() -> None:
    jobs: list[refinekit.Job | None] = []

    @retry_on_low_quality()
    async def inner(question: str) -> str:
        jobs.append(refinekit.current_job())
        return "inner"

    @retry_on_low_quality()
    async def outer(question: str) -> str:
        jobs.append(refinekit.current_job())
        return await inner(question)

    assert await outer("q") == "inner"
    assert jobs[0] is not None
    assert jobs[1] is jobs[0]
    assert refinekit.current_job() is None


def test_a_decorated_call_joins_an_explicit_job(kind: str) -> None:
    answer, jobs = completions_then([completion("a", 1, 1)])
    with refinekit.job() as explicit:
        call(decorated(kind, answer), "q")
    assert jobs == [explicit]
    assert explicit.usage == Usage(1, 1, 1)


# --- what decoration keeps -----------------------------------------------------------------------


def test_a_decorated_function_keeps_name_docstring_and_signature() -> None:
    def answer(question: str, *, feedback: str | None = None) -> str:
        """Answer the question."""
        return "a"

    async def answer_async(question: str, *, feedback: str | None = None) -> str:
        """Answer the question, asynchronously."""
        return "a"

    for fn in (answer, answer_async):
        wrapped = retry_on_low_quality(evaluator=reject_all)(fn)
        assert wrapped.__name__ == fn.__name__
        assert wrapped.__doc__ == fn.__doc__
        assert inspect.signature(wrapped) == inspect.signature(fn)
        assert inspect.iscoroutinefunction(wrapped) == inspect.iscoroutinefunction(fn)


class Assistant:
    def __init__(self, name: str) -> None:
        self.name = name
        self.feedback_seen: list[str | None] = []

    @retry_on_low_quality(evaluator=passes_on(2))
    def answer(self, question: str, feedback: str | None = None) -> str:
        self.feedback_seen.append(feedback)
        return f"{self.name}: {question}"

    @retry_on_low_quality(evaluator=passes_on(2))
    async def answer_async(self, question: str, feedback: str | None = None) -> str:
        self.feedback_seen.append(feedback)
        return f"{self.name}: {question}"


@pytest.mark.parametrize("method", ["answer", "answer_async"])
def test_methods_work(method: str) -> None:
    assistant = Assistant("bot")
    assert call(getattr(assistant, method), "q") == "bot: q"
    assert assistant.feedback_seen == [None, "fix #1"]


def test_record_context_refuses_what_is_not_a_document() -> None:
    with pytest.raises(TypeError, match="record_context"):
        refinekit.record_context(42)  # type: ignore[arg-type]


def test_wait_strategies_see_the_rejection_like_in_tenacity() -> None:
    seen: list[BaseException | None] = []

    def wait(state: tenacity.RetryCallState) -> float:
        assert state.outcome is not None
        seen.append(state.outcome.exception())
        assert state.seconds_since_start is not None
        return 0.0

    @retry_on_low_quality(evaluator=lambda r: False, max_retries=1, wait=wait)
    def answer(question: str) -> str:
        return "a"

    with pytest.raises(LowQualityAnswer) as exc_info:
        answer("q")
    assert len(seen) == 1
    assert isinstance(seen[0], LowQualityAnswer)
    assert seen[0].answer == "a"
    assert exc_info.value.attempts[0].verdict == seen[0].verdict


def test_feedback_reaches_the_function_as_text_it_can_send(kind: str) -> None:
    # A custom evaluator's feedback may quote a reply holding a lone surrogate; the function
    # puts the feedback into its next request, so it gets it as valid UTF-8 (U+FFFD).
    seen: list[str | None] = []

    def judge(request: refinekit.EvaluationRequest) -> refinekit.Verdict:
        return refinekit.Verdict(passed=request.answer == "fixed", feedback="drop \ud83d")

    def answer(question: str, feedback: str | None = None) -> str:
        seen.append(feedback)
        return "fixed" if feedback else "broken \ud83d"

    async def aanswer(question: str, feedback: str | None = None) -> str:
        return answer(question, feedback)

    fn = retry_on_low_quality(evaluator=judge, max_retries=1)(answer if kind == "sync" else aanswer)
    assert call(fn, "q?") == "fixed"
    assert seen == [None, "drop \ufffd"]
    assert seen[1] is not None
    seen[1].encode("utf-8")
