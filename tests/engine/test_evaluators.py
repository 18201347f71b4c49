"""Composition (all_of, any_of, weighted) and the evaluator adapter, on the sync and async paths."""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from refinekit import (
    EvaluationRequest,
    LowQualityAnswer,
    Verdict,
    all_of,
    any_of,
    checks,
    retry_on_low_quality,
    weighted,
)
from refinekit._engine.evaluators import as_evaluator

REQUEST = EvaluationRequest(question="Q?", answer="An answer citing a.md.")


def judge(evaluator: Any, request: EvaluationRequest, kind: str) -> Verdict:
    """Judge through `evaluate` (no loop running) or `aevaluate` (on a fresh loop)."""
    if kind == "sync":
        result: Verdict = evaluator.evaluate(request)
        return result
    return asyncio.run(evaluator.aevaluate(request))


class Counting:
    """A sync-and-async evaluator with a fixed verdict that records each call in `log`."""

    def __init__(
        self,
        name: str,
        log: list[str],
        *,
        passed: bool,
        score: float | None = None,
        feedback: str | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.calls = 0
        default = "" if passed else f"{name} wants a fix."
        self.verdict = Verdict(
            passed=passed, score=score, feedback=default if feedback is None else feedback
        )

    def _judge(self) -> Verdict:
        self.calls += 1
        self.log.append(self.name)
        return self.verdict

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        return self._judge()

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        return self._judge()


class ExpensiveJudge:
    """Stands for a model judge: async only, and counts what it would cost."""

    name = "model_judge"

    def __init__(self) -> None:
        self.calls = 0

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        self.calls += 1
        return Verdict(passed=True, score=1.0)


def outcomes(verdict: Verdict) -> list[tuple[str, str]]:
    return [(c.name, c.outcome) for c in verdict.criteria]


# --- all_of ---------------------------------------------------------------------------------


def test_all_of_runs_every_evaluator_in_order_when_all_pass(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=True, score=0.9)
    b = Counting("b", log, passed=True, score=0.6)
    c = Counting("c", log, passed=True)
    verdict = judge(all_of(a, b, c), REQUEST, kind)
    assert verdict.passed
    assert log == ["a", "b", "c"]
    assert verdict.score == 0.6
    assert verdict.feedback == ""
    assert outcomes(verdict) == [("a", "pass"), ("b", "pass"), ("c", "pass")]
    assert [c.probability for c in verdict.criteria] == [0.9, 0.6, 1.0]


def test_all_of_stops_at_the_first_failure(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=True)
    b = Counting("b", log, passed=False, score=0.2, feedback="Cite a source.")
    c = Counting("c", log, passed=True)
    expensive = ExpensiveJudge()
    verdict = judge(all_of(a, b, c, expensive), REQUEST, kind)
    assert not verdict.passed
    assert log == ["a", "b"]
    assert c.calls == 0
    assert expensive.calls == 0
    assert verdict.feedback == "Cite a source."
    assert verdict.score == 0.2
    assert verdict.metadata == {"failed": "b"}
    assert outcomes(verdict) == [
        ("a", "pass"),
        ("b", "fail"),
        ("c", "skipped"),
        ("model_judge", "skipped"),
    ]
    assert verdict.criteria[1].feedback == "Cite a source."


def test_all_of_never_pays_for_a_judge_after_a_failed_rule(kind: str) -> None:
    expensive = ExpensiveJudge()
    evaluator = all_of(checks.not_empty(), checks.cites_source(), expensive)
    empty = EvaluationRequest(answer="   ")
    verdict = judge(evaluator, empty, kind)
    assert verdict.feedback == "Answer the question; the answer was empty."
    assert outcomes(verdict) == [
        ("not_empty", "fail"),
        ("cites_source", "skipped"),
        ("model_judge", "skipped"),
    ]
    assert verdict.criteria[0].source == "code"
    assert expensive.calls == 0
    judge(evaluator, EvaluationRequest(answer="x"), kind)
    assert expensive.calls == 0
    assert judge(evaluator, REQUEST.model_copy(update={"context": ()}), kind).passed is False
    assert expensive.calls == 0


def test_all_of_reaches_the_judge_when_the_rules_pass(kind: str) -> None:
    expensive = ExpensiveJudge()
    evaluator = all_of(checks.not_empty(), checks.contains("a.md"), expensive)
    verdict = judge(evaluator, REQUEST, kind)
    assert verdict.passed
    assert expensive.calls == 1
    assert outcomes(verdict)[-1] == ("model_judge", "pass")


def test_all_of_guards_an_expensive_judge_inside_retry() -> None:
    expensive = ExpensiveJudge()
    answers = iter(["No sources, sorry.", "Per a.md: yes."])

    @retry_on_low_quality(
        evaluator=all_of(checks.cites_source(), expensive),
        max_retries=1,
        context=lambda args: [{"text": "doc", "source": "a.md"}],
    )
    def answer(question: str, feedback: str | None = None) -> str:
        return next(answers)

    assert answer("Is it?") == "Per a.md: yes."
    assert expensive.calls == 1


def test_all_of_needs_evaluators() -> None:
    with pytest.raises(ValueError, match="at least one evaluator"):
        all_of()
    with pytest.raises(TypeError, match="is not an evaluator"):
        all_of(checks.not_empty(), 42)  # type: ignore[arg-type]


# --- any_of ---------------------------------------------------------------------------------


def test_any_of_stops_at_the_first_pass(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=False, score=0.3)
    b = Counting("b", log, passed=True, score=0.8)
    c = Counting("c", log, passed=True)
    verdict = judge(any_of(a, b, c), REQUEST, kind)
    assert verdict.passed
    assert log == ["a", "b"]
    assert c.calls == 0
    assert verdict.score == 0.8
    assert verdict.feedback == ""
    assert verdict.metadata == {"passed": "b"}
    assert outcomes(verdict) == [("a", "fail"), ("b", "pass"), ("c", "skipped")]


def test_any_of_fails_with_every_feedback(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=False, score=0.1, feedback="Cite a source.")
    b = Counting("b", log, passed=False, score=0.4, feedback="Mention the price.")
    verdict = judge(any_of(a, b), REQUEST, kind)
    assert not verdict.passed
    assert log == ["a", "b"]
    assert verdict.score == 0.4
    assert verdict.feedback == "Fix at least one of: Cite a source. | Mention the price."
    assert outcomes(verdict) == [("a", "fail"), ("b", "fail")]


def test_any_of_with_one_failure_keeps_its_feedback_as_is(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=False, feedback="Cite a source.")
    b = Counting("b", log, passed=False, feedback="")
    verdict = judge(any_of(a, b), REQUEST, kind)
    assert verdict.feedback == "Cite a source."


def test_any_of_needs_evaluators() -> None:
    with pytest.raises(ValueError, match="at least one evaluator"):
        any_of()


# --- weighted -------------------------------------------------------------------------------


def test_weighted_score_is_the_weighted_mean(kind: str) -> None:
    log: list[str] = []
    good = Counting("good", log, passed=True, score=0.9)
    bad = Counting("bad", log, passed=False, score=0.3, feedback="Too vague.")
    verdict = judge(weighted((good, 3), (bad, 1)), REQUEST, kind)
    assert verdict.score == pytest.approx((3 * 0.9 + 1 * 0.3) / 4)
    assert verdict.passed
    assert verdict.feedback == ""
    assert log == ["good", "bad"]
    assert outcomes(verdict) == [("good", "pass"), ("bad", "fail")]
    assert verdict.metadata == {"threshold": 0.5}


def test_weighted_counts_a_verdict_without_score_as_one_or_zero(kind: str) -> None:
    log: list[str] = []
    yes = Counting("yes", log, passed=True)
    no = Counting("no", log, passed=False)
    verdict = judge(weighted((yes, 1), (no, 3), threshold=0.2), REQUEST, kind)
    assert verdict.score == 0.25
    assert verdict.passed


def test_weighted_passes_at_the_threshold_and_fails_below(kind: str) -> None:
    log: list[str] = []
    yes = Counting("yes", log, passed=True, score=1.0)
    no = Counting("no", log, passed=False, score=0.0, feedback="Add the total.")
    at = judge(weighted((yes, 3), (no, 1), threshold=0.75), REQUEST, kind)
    assert at.passed
    assert at.score == 0.75
    below = judge(weighted((yes, 3), (no, 1), threshold=0.76), REQUEST, kind)
    assert not below.passed
    assert below.feedback == "Add the total."


def test_weighted_runs_every_evaluator_and_joins_the_feedback(kind: str) -> None:
    log: list[str] = []
    a = Counting("a", log, passed=False, score=0.0, feedback="Cite a source.")
    b = Counting("b", log, passed=True, score=1.0)
    c = Counting("c", log, passed=False, score=0.0, feedback="Be shorter.")
    verdict = judge(weighted((a, 1), (b, 1), (c, 1), threshold=0.9), REQUEST, kind)
    assert log == ["a", "b", "c"]
    assert not verdict.passed
    assert verdict.feedback == "Cite a source. Be shorter."


def test_weighted_without_feedback_says_the_score_is_too_low(kind: str) -> None:
    log: list[str] = []
    low = Counting("low", log, passed=True, score=0.2)
    verdict = judge(weighted((low, 1), threshold=0.5), REQUEST, kind)
    assert not verdict.passed
    assert verdict.feedback == "The answer scored too low."


def test_weighted_uses_rule_check_scores(kind: str) -> None:
    contains = checks.contains("a.md", "b.md", "c.md", "d.md")
    verdict = judge(weighted((contains, 1), threshold=0.25), REQUEST, kind)
    assert verdict.score == 0.25
    assert verdict.passed


@pytest.mark.parametrize("weight", [0, -1, 0.0, math.nan, math.inf, True, "1"])
def test_weighted_rejects_a_weight_that_is_not_positive(weight: object) -> None:
    with pytest.raises(ValueError, match="weight of not_empty must be a finite number > 0"):
        weighted((checks.not_empty(), weight))  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [-0.01, 1.01, math.nan, True, "0.5"])
def test_weighted_rejects_a_threshold_outside_0_to_1(threshold: object) -> None:
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        weighted((checks.not_empty(), 1), threshold=threshold)  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [0, 1, 0.0, 1.0])
def test_weighted_accepts_threshold_bounds(threshold: float) -> None:
    evaluator = weighted((checks.not_empty(), 1), threshold=threshold)
    assert evaluator.evaluate(REQUEST).passed


def test_weighted_needs_pairs() -> None:
    with pytest.raises(ValueError, match="at least one"):
        weighted()


@pytest.mark.parametrize(
    "pair",
    [
        [checks.not_empty(), 1],
        (checks.not_empty(),),
        (checks.not_empty(), 1, 2),
        checks.not_empty(),
    ],
    ids=["list", "one", "three", "bare"],
)
def test_weighted_rejects_a_malformed_pair(pair: object) -> None:
    with pytest.raises(TypeError, match=r"takes \(evaluator, weight\) pairs"):
        weighted(pair)  # type: ignore[arg-type]


# --- nesting --------------------------------------------------------------------------------


def test_all_of_inside_any_of(kind: str) -> None:
    log: list[str] = []
    first = all_of(
        Counting("rule", log, passed=False, feedback="Rule failed."),
        Counting("judge", log, passed=True),
    )
    fallback = Counting("fallback", log, passed=True)
    verdict = judge(any_of(first, fallback), REQUEST, kind)
    assert verdict.passed
    assert log == ["rule", "fallback"]
    assert outcomes(verdict) == [
        ("rule", "fail"),
        ("judge", "skipped"),
        ("fallback", "pass"),
    ]
    assert verdict.metadata == {"passed": "fallback"}


def test_any_of_inside_all_of_carries_the_inner_feedback(kind: str) -> None:
    log: list[str] = []
    inner = any_of(
        Counting("x", log, passed=False, feedback="X."),
        Counting("y", log, passed=False, feedback="Y."),
    )
    after = Counting("after", log, passed=True)
    verdict = judge(all_of(inner, after), REQUEST, kind)
    assert not verdict.passed
    assert log == ["x", "y"]
    assert verdict.feedback == "Fix at least one of: X. | Y."
    assert outcomes(verdict) == [("x", "fail"), ("y", "fail"), ("after", "skipped")]
    assert verdict.metadata == {"failed": "any_of(x, y)"}


# --- sync and async agree -------------------------------------------------------------------


def _compositions() -> dict[str, Callable[[], Any]]:
    def log_free(name: str, passed: bool, score: float | None = None) -> Counting:
        return Counting(name, [], passed=passed, score=score)

    return {
        "all_of-pass": lambda: all_of(checks.not_empty(), checks.contains("a.md")),
        "all_of-fail": lambda: all_of(
            checks.not_empty(), checks.max_length(5), log_free("later", True)
        ),
        "any_of-pass": lambda: any_of(checks.matches(r"\d"), checks.contains("citing")),
        "any_of-fail": lambda: any_of(checks.matches(r"\d"), checks.max_length(3)),
        "weighted": lambda: weighted(
            (checks.contains("a.md", "z.md"), 2), (log_free("j", False, 0.4), 1), threshold=0.4
        ),
        "nested": lambda: all_of(
            any_of(all_of(checks.not_empty(), log_free("f", False)), checks.contains("answer")),
            weighted((checks.max_length(5), 1), (checks.not_empty(), 1)),
        ),
        "async-only": lambda: all_of(ExpensiveJudge(), lambda r: False),
    }


@pytest.mark.parametrize("name", list(_compositions()))
def test_sync_and_async_give_identical_verdicts(name: str) -> None:
    make = _compositions()[name]
    sync_verdict = make().evaluate(REQUEST)
    async_verdict = asyncio.run(make().aevaluate(REQUEST))
    assert sync_verdict == async_verdict
    assert sync_verdict.criteria


# --- the adapter ----------------------------------------------------------------------------


def test_a_plain_function_returning_bool(kind: str) -> None:
    def mentions_price(request: EvaluationRequest) -> bool:
        return "price" in request.answer

    evaluator = as_evaluator(mentions_price)
    assert evaluator.name == "mentions_price"
    failed = judge(evaluator, REQUEST, kind)
    assert failed == Verdict(
        passed=False, score=0.0, feedback="The answer failed the check 'mentions_price'."
    )
    passed = judge(evaluator, EvaluationRequest(answer="the price is 3"), kind)
    assert passed == Verdict(passed=True, score=1.0)


def test_a_lambda_is_named_check(kind: str) -> None:
    evaluator = as_evaluator(lambda request: False)
    assert evaluator.name == "check"
    assert judge(evaluator, REQUEST, kind).feedback == "The answer failed the check 'check'."


def test_a_plain_function_returning_a_verdict(kind: str) -> None:
    given = Verdict(passed=False, score=0.4, feedback="Say which plan.", metadata={"k": 1})
    assert judge(as_evaluator(lambda request: given), REQUEST, kind) == given


def test_an_async_function(kind: str) -> None:
    async def relevant(request: EvaluationRequest) -> Verdict:
        return Verdict(passed=request.question == "Q?", score=0.7)

    verdict = judge(as_evaluator(relevant), REQUEST, kind)
    assert verdict == Verdict(passed=True, score=0.7)


def test_an_async_callable_object(kind: str) -> None:
    class Judge:
        async def __call__(self, request: EvaluationRequest) -> bool:
            return True

    evaluator = as_evaluator(Judge())
    assert judge(evaluator, REQUEST, kind).passed


class Recorder:
    """Collects which method of an evaluator object ran."""

    def __init__(self) -> None:
        self.used: list[str] = []


def test_an_object_with_only_evaluate(kind: str) -> None:
    rec = Recorder()

    class SyncOnly:
        def evaluate(self, request: EvaluationRequest) -> Verdict:
            rec.used.append("evaluate")
            return Verdict(passed=False, feedback="sync says no")

    evaluator = as_evaluator(SyncOnly())
    assert evaluator.name == "SyncOnly"
    assert judge(evaluator, REQUEST, kind).feedback == "sync says no"
    assert rec.used == ["evaluate"]


def test_an_object_with_only_aevaluate(kind: str) -> None:
    rec = Recorder()

    class AsyncOnly:
        async def aevaluate(self, request: EvaluationRequest) -> Verdict:
            rec.used.append("aevaluate")
            return Verdict(passed=False, feedback="async says no")

    assert judge(as_evaluator(AsyncOnly()), REQUEST, kind).feedback == "async says no"
    assert rec.used == ["aevaluate"]


def test_an_object_with_both_uses_the_matching_method(kind: str) -> None:
    rec = Recorder()

    class Both:
        def evaluate(self, request: EvaluationRequest) -> Verdict:
            rec.used.append("evaluate")
            return Verdict(passed=True)

        async def aevaluate(self, request: EvaluationRequest) -> Verdict:
            rec.used.append("aevaluate")
            return Verdict(passed=True)

    judge(as_evaluator(Both()), REQUEST, kind)
    assert rec.used == ["evaluate" if kind == "sync" else "aevaluate"]


def test_as_evaluator_keeps_an_adapted_evaluator() -> None:
    adapted = as_evaluator(checks.not_empty())
    assert as_evaluator(adapted) is adapted
    assert adapted.name == "not_empty"


async def test_a_sync_evaluator_runs_in_a_worker_thread_on_the_async_path() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def sync_judge(request: EvaluationRequest) -> bool:
        seen.append(threading.get_ident())
        return True

    assert (await as_evaluator(sync_judge).aevaluate(REQUEST)).passed
    assert seen
    assert seen[0] != loop_thread


async def test_a_sync_evaluator_never_blocks_the_event_loop() -> None:
    # The evaluator asks the loop to set an event, then waits for it: were it run on the
    # loop's thread, the loop could not run the callback and the wait would time out.
    loop = asyncio.get_running_loop()
    released = threading.Event()

    def waiting_judge(request: EvaluationRequest) -> bool:
        loop.call_soon_threadsafe(released.set)
        return released.wait(timeout=10)

    assert (await as_evaluator(waiting_judge).aevaluate(REQUEST)).passed


def test_an_async_evaluator_on_the_sync_path_without_a_loop() -> None:
    threads: list[int] = []

    async def async_judge(request: EvaluationRequest) -> bool:
        asyncio.get_running_loop()
        threads.append(threading.get_ident())
        return True

    assert as_evaluator(async_judge).evaluate(REQUEST).passed
    assert threads == [threading.get_ident()]


def _judge_synchronously(evaluator: Any) -> Verdict:
    """Sync code, as an application's sync helper called from async code would be."""
    result: Verdict = evaluator.evaluate(REQUEST)
    return result


async def test_an_async_evaluator_on_the_sync_path_inside_a_running_loop() -> None:
    outer_loop = asyncio.get_running_loop()
    loops: list[asyncio.AbstractEventLoop] = []

    async def async_judge(request: EvaluationRequest) -> Verdict:
        loops.append(asyncio.get_running_loop())
        return Verdict(passed=False, feedback="async judge ran")

    verdict = _judge_synchronously(as_evaluator(async_judge))
    assert verdict.feedback == "async judge ran"
    assert len(loops) == 1
    assert loops[0] is not outer_loop
    assert outer_loop.is_running()


_MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


async def _reads_mark(request: EvaluationRequest) -> Verdict:
    return Verdict(passed=True, metadata={"mark": _MARK.get()})


def test_an_async_evaluator_on_the_sync_path_sees_the_callers_context() -> None:
    token = _MARK.set("caller")
    try:
        evaluator = as_evaluator(_reads_mark)
        assert evaluator.evaluate(REQUEST).metadata["mark"] == "caller"
    finally:
        _MARK.reset(token)


async def test_an_async_evaluator_inside_a_running_loop_sees_the_callers_context() -> None:
    token = _MARK.set("caller")
    try:
        verdict = _judge_synchronously(as_evaluator(_reads_mark))
        assert verdict.metadata["mark"] == "caller"
    finally:
        _MARK.reset(token)


@pytest.mark.parametrize("returned", [0.9, "yes", None, 1])
def test_a_wrong_return_type_is_a_type_error_naming_the_evaluator(
    returned: object, kind: str
) -> None:
    def scorer(request: EvaluationRequest) -> Any:
        return returned

    with pytest.raises(TypeError, match=r"evaluator 'scorer' returned .*Verdict or a bool"):
        judge(as_evaluator(scorer), REQUEST, kind)


def test_a_wrong_return_type_inside_a_composition_propagates(kind: str) -> None:
    class Sloppy:
        name = "sloppy_judge"

        async def aevaluate(self, request: EvaluationRequest) -> Any:
            return {"passed": True}

    with pytest.raises(TypeError, match="evaluator 'sloppy_judge' returned dict"):
        judge(all_of(checks.not_empty(), Sloppy()), REQUEST, kind)


@pytest.mark.parametrize(
    "obj", [42, "not_empty", None, object()], ids=["int", "str", "none", "object"]
)
def test_a_non_callable_is_not_an_evaluator(obj: object) -> None:
    with pytest.raises(TypeError, match="is not an evaluator"):
        as_evaluator(obj)  # type: ignore[arg-type]


def test_retry_rejects_a_non_evaluator_when_decorating() -> None:
    with pytest.raises(TypeError, match="is not an evaluator"):
        retry_on_low_quality(evaluator=42)  # type: ignore[arg-type]


def test_a_failing_composite_becomes_the_retry_feedback() -> None:
    log: list[str] = []
    seen: list[str | None] = []

    @retry_on_low_quality(
        evaluator=all_of(checks.not_empty(), Counting("strict", log, passed=False)),
        max_retries=1,
    )
    def answer(question: str, feedback: str | None = None) -> str:
        seen.append(feedback)
        return "an answer"

    with pytest.raises(LowQualityAnswer) as info:
        answer("Q?")
    assert seen == [None, "strict wants a fix."]
    assert info.value.feedback == "strict wants a fix."
    assert log == ["strict", "strict"]


def test_a_sync_function_returning_a_coroutine_is_refused_cleanly() -> None:
    async def judge(request: EvaluationRequest) -> bool:
        return True

    evaluator = as_evaluator(lambda request: judge(request))
    with pytest.raises(TypeError, match="async def"):
        evaluator.evaluate(EvaluationRequest(answer="x"))
