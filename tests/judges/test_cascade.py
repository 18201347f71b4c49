"""Cascades over real HTTP: `judges.cascade` with rule checks and model judges on ScriptedOpenAI.

Every test that judges runs twice (the `kind` fixture): judges on `openai.OpenAI` called with
`evaluate`, and judges on `openai.AsyncOpenAI` called with `aevaluate`. The cheap judge asks
model "cheap" of the scripted server and the strong one model "strong", so a test sees which
level was asked. Tests without a model judge use rule checks and `FakeJudge`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers import Evaluate
from streaming_helpers import Source, StreamingModel, chunked
from streaming_helpers import call as stream_call

import refinekit
from refinekit import (
    Budget,
    BudgetExceeded,
    ContextDocument,
    CriterionResult,
    EvaluationRequest,
    JudgeMisconfigured,
    JudgeUnavailable,
    Verdict,
    checks,
    judges,
    retry_on_low_quality,
)
from refinekit.eval import fit_cascade
from refinekit.judges import JudgeModel, MemoryCache
from refinekit.judges._panel import every_member
from refinekit.testing import FakeJudge, Reply, ScriptedOpenAI

POLICY = ContextDocument("Unused items can be returned within 30 days.", source="refunds.md")
GOOD = EvaluationRequest(
    question="How long do I have to return an item?",
    answer="Within 30 days, if it is unused.",
    context=(POLICY,),
)
WRONG_NUMBER = GOOD.model_copy(update={"answer": "Within 60 days, if it is unused."})


def yes(p: float) -> Reply:
    """A yes/no reply whose token probabilities give P(yes) = p."""
    return Reply.text("Yes" if p >= 0.5 else "No", {"Yes": p, "No": 1 - p})


@pytest.fixture
def judge(client: Any) -> Callable[..., judges.Judge]:
    """`judge("cheap")`: a one-criterion judge asking that model of the scripted server."""

    def make(model: str, **settings: Any) -> judges.Judge:
        return judges.criteria(
            JudgeModel(client, model, **settings),
            [judges.Criterion("supported", "Does the context support the answer?")],
        )

    return make


def asked(server: ScriptedOpenAI) -> list[str]:
    return [str(r.body["model"]) for r in server.requests if r.body is not None]


def levels(verdict: Verdict) -> list[tuple[bool | None, float | None]]:
    return [(x["passed"], x["confidence"]) for x in verdict.metadata["cascade"]["levels"]]


# --- a sure cheap verdict is kept; an unsure one escalates ------------------------------------


async def test_a_sure_cheap_verdict_costs_no_strong_call(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.97)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.8])
    verdict = await evaluate(gate, GOOD)
    assert verdict.passed
    assert asked(server) == ["cheap"]
    record = verdict.metadata["cascade"]
    assert record["level"] == 0
    assert record["confidence"] == pytest.approx(0.97)
    assert levels(verdict) == [(True, pytest.approx(0.97)), (None, None)]
    assert [x["asked"] for x in record["levels"]] == [True, False]
    assert record["thresholds"] == [0.9, 0.8]
    assert record["guaranteed"] is True
    # the deciding level's own verdict, with its criteria
    assert [c.name for c in verdict.criteria] == ["supported"]


async def test_an_unsure_cheap_verdict_escalates_to_the_strong_judge(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.85)])  # a pass, but only 0.85 sure
    server.script("strong", [yes(0.05)])  # a fail, 0.95 sure
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.8])
    verdict = await evaluate(gate, GOOD)
    assert not verdict.passed
    assert asked(server) == ["cheap", "strong"]
    assert verdict.metadata["cascade"]["level"] == 1
    assert levels(verdict) == [(True, pytest.approx(0.85)), (False, pytest.approx(0.95))]


async def test_a_failed_rule_check_decides_before_any_model_call(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    gate = judges.cascade(checks.numbers_supported(), judge("cheap"), thresholds=[0.99, 0.9])
    verdict = await evaluate(gate, WRONG_NUMBER)
    assert not verdict.passed
    assert asked(server) == []
    assert verdict.metadata["cascade"]["level"] == 0
    assert "60" in verdict.feedback  # the check's feedback, for a retry


async def test_a_passing_rule_check_is_no_evidence_and_escalates(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.95)])
    gate = judges.cascade(checks.numbers_supported(), judge("cheap"), thresholds=[0.5, 0.9])
    verdict = await evaluate(gate, GOOD)
    assert verdict.passed
    assert asked(server) == ["cheap"]
    assert levels(verdict) == [(True, None), (True, pytest.approx(0.95))]
    assert verdict.metadata["cascade"]["level"] == 1


# --- the last level: abstain, or decide outside the guarantee --------------------------------


async def test_no_level_sure_enough_makes_an_inconclusive_verdict(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.7)])
    server.script("strong", [yes(0.82)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    verdict = await evaluate(gate, GOOD)
    assert verdict.status == "inconclusive"
    assert not verdict.passed
    assert str(verdict.reason).startswith("CASCADE_NOT_SURE")
    record = verdict.metadata["cascade"]
    assert record["level"] is None
    assert record["confidence"] is None
    assert levels(verdict) == [(False, 0.5), (True, pytest.approx(0.82))]


async def test_without_abstaining_the_last_level_decides_outside_the_guarantee(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.7)])
    server.script("strong", [yes(0.82)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9], abstain=False)
    verdict = await evaluate(gate, GOOD)
    assert verdict.passed
    record = verdict.metadata["cascade"]
    assert record["level"] == 1
    assert record["guaranteed"] is False


async def test_unfitted_only_a_certain_verdict_stops_early(evaluate: Evaluate) -> None:
    strong = FakeJudge("pass", "pass", name="strong")
    gate = judges.cascade(checks.numbers_supported(), strong)
    assert gate.thresholds is None
    failed = await evaluate(gate, WRONG_NUMBER)  # a failed check: certain
    assert not failed.passed
    assert failed.metadata["cascade"]["level"] == 0
    assert strong.requests == []
    passed = await evaluate(gate, GOOD)  # the last level decides, whatever its confidence
    assert passed.passed
    assert passed.metadata["cascade"]["level"] == 1
    assert passed.metadata["cascade"]["guaranteed"] is False
    assert len(strong.requests) == 1


# --- levels that cannot judge pass the answer on ---------------------------------------------


async def test_an_unreadable_cheap_reply_escalates(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", ["I would rather not say."])
    server.script("strong", [yes(0.97)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    verdict = await evaluate(gate, GOOD)
    assert verdict.passed
    first = verdict.metadata["cascade"]["levels"][0]
    assert (first["passed"], first["confidence"]) == (None, None)
    assert first["reason"].startswith("JudgeReplyError")


async def test_a_last_level_outage_with_no_level_sure_is_raised(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    outage = Reply.error(503, "overloaded")
    server.script("cheap", [yes(0.7)])
    server.script("strong", [outage, outage])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    with pytest.raises(JudgeUnavailable):
        await evaluate(gate, GOOD)


async def test_a_misconfigured_judge_is_raised(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [Reply.error(401, "bad key")])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    with pytest.raises(JudgeMisconfigured):
        await evaluate(gate, GOOD)


async def test_a_budget_pays_only_for_the_levels_asked_and_its_stop_is_raised(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], kind: str
) -> None:
    server.script("cheap", [yes(0.97), yes(0.7)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    with refinekit.job(budget=Budget(max_calls=1)):  # one judge call: the cheap one is enough
        verdict = gate.evaluate(GOOD) if kind == "sync" else await gate.aevaluate(GOOD)
    assert verdict.passed
    with pytest.raises(BudgetExceeded), refinekit.job(budget=Budget(max_calls=1)):
        _ = gate.evaluate(GOOD) if kind == "sync" else await gate.aevaluate(GOOD)  # no strong
    assert asked(server) == ["cheap", "cheap"]


# --- a calibration run asks every level ------------------------------------------------------


async def test_every_member_runs_every_level_and_keeps_the_cascaded_verdict(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", [yes(0.97), yes(0.97)])
    server.script("strong", [yes(0.1)])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    stopped = await evaluate(gate, GOOD)
    with every_member():
        full = await evaluate(gate, GOOD)
    assert asked(server) == ["cheap", "cheap", "strong"]
    assert stopped.passed is full.passed is True
    assert full.metadata["cascade"]["level"] == 0
    assert levels(full) == [(True, pytest.approx(0.97)), (False, pytest.approx(0.9))]
    assert [x["asked"] for x in full.metadata["cascade"]["levels"]] == [True, True]


async def test_every_member_records_a_last_level_outage_after_a_decision(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    outage = Reply.error(503, "overloaded")
    server.script("cheap", [yes(0.97)])
    server.script("strong", [outage, outage])
    gate = judges.cascade(judge("cheap"), judge("strong"), thresholds=[0.9, 0.9])
    with every_member():
        verdict = await evaluate(gate, GOOD)
    assert verdict.passed
    last = verdict.metadata["cascade"]["levels"][1]
    assert (last["passed"], last["confidence"]) == (None, None)
    assert last["reason"].startswith("JudgeUnavailable")


# --- fitted thresholds -----------------------------------------------------------------------


def test_a_fit_is_applied_to_a_new_cascade_and_the_old_one_is_unchanged() -> None:
    # 40 items both levels get right, 0.95 sure; 40 both get wrong, 0.7 sure
    fit = fit_cascade(
        [[True, True]] * 80, [[0.95, 0.95]] * 40 + [[0.7, 0.7]] * 40, [True] * 40 + [False] * 40
    )
    assert fit.thresholds == (0.71, 0.71)
    cheap = FakeJudge(Verdict(passed=True, metadata={"probability": 0.96}), name="cheap")
    strong = FakeJudge(name="strong")
    gate = judges.cascade(cheap, strong)
    fitted = gate.with_fit(fit)
    assert gate.thresholds is None
    assert fitted.thresholds == (0.71, 0.71)
    assert fitted.levels == gate.levels
    verdict = fitted.evaluate(GOOD)
    assert verdict.passed
    record = verdict.metadata["cascade"]
    assert (record["level"], record["target"], record["risk"]) == (0, 0.9, 0.1)
    assert strong.requests == []
    assert judges.cascade(cheap, strong, fit=fit).thresholds == fitted.thresholds


def test_a_level_whose_threshold_is_none_never_decides_and_is_not_asked() -> None:
    cheap = FakeJudge(Verdict(passed=True, metadata={"probability": 1.0}), name="cheap")
    sure_fail = Verdict(passed=False, metadata={"probability": 0.0})
    strong = FakeJudge(sure_fail, sure_fail, name="strong")
    verdict = judges.cascade(cheap, strong, thresholds=[None, 0.9]).evaluate(GOOD)
    assert not verdict.passed
    assert verdict.metadata["cascade"]["level"] == 1
    assert cheap.requests == []  # it could not decide: not asked
    with every_member():  # a calibration asks it all the same
        judges.cascade(cheap, strong, thresholds=[None, 0.9]).evaluate(GOOD)
    assert len(cheap.requests) == 1
    # a fit that certified nothing: the cascade abstains without a call
    nothing = judges.cascade(cheap, strong, thresholds=[None, None]).evaluate(GOOD)
    assert nothing.status == "inconclusive"
    assert (len(cheap.requests), len(strong.requests)) == (1, 2)


# --- confidence ------------------------------------------------------------------------------


def test_a_confidence_function_of_the_callers_replaces_the_default() -> None:
    cheap = FakeJudge(Verdict(passed=True, score=0.93), name="cheap")
    strong = FakeJudge(name="strong")

    def by_score(verdict: Verdict) -> float | None:
        return verdict.score

    verdict = judges.cascade(cheap, strong, thresholds=[0.9, 0.9], confidence=by_score).evaluate(
        GOOD
    )
    assert verdict.metadata["cascade"]["confidence"] == pytest.approx(0.93)
    # one per level: None there is the default
    per_level = judges.cascade(
        FakeJudge(Verdict(passed=True, score=0.93)), strong, confidence=[by_score, None]
    )
    assert per_level.confidence[1] is judges.confidence_of


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (Verdict.inconclusive("no evidence"), None),
        (Verdict(passed=True, metadata={"source": "code"}), None),  # a passing check
        (Verdict(passed=False, metadata={"source": "code"}), 1.0),  # a failing one
        (
            Verdict(
                passed=False,
                criteria=(
                    CriterionResult(name="cites", outcome="fail", probability=0.0, source="code"),
                    CriterionResult(name="supported", outcome="skipped"),
                ),
            ),
            1.0,
        ),
        (
            Verdict(
                passed=True,
                criteria=(
                    CriterionResult(name="a", outcome="pass", probability=0.99, source="logprobs"),
                    CriterionResult(name="b", outcome="pass", probability=0.9, source="logprobs"),
                ),
            ),
            0.9,  # the weakest criterion: every one must hold
        ),
        (Verdict(passed=False, metadata={"probability": 0.2}), 0.8),
        (Verdict(passed=False, metadata={"probability": 0.7}), 0.5),  # against its probability
        (Verdict(passed=True, metadata={"rating": 4, "scale": 4, "passing": 3}), 0.5 + 1 / 3),
        (Verdict(passed=True, metadata={"rating": 3, "scale": 4, "passing": 3}), 0.5 + 1 / 6),
        (Verdict(passed=False, metadata={"rating": 1, "scale": 4, "passing": 3}), 0.5 + 1 / 3),
        (Verdict(passed=True, metadata={"samples": {"n": 5, "passes": 4, "fails": 1}}), 0.8),
        (Verdict(passed=True), None),  # a bool from a function: nothing to go by
    ],
)
def test_confidence_of_reads_what_the_verdict_carries(
    verdict: Verdict, expected: float | None
) -> None:
    got = judges.confidence_of(verdict)
    assert got == (None if expected is None else pytest.approx(expected))


async def test_a_panels_margin_is_its_confidence(
    server: ScriptedOpenAI, client: Any, evaluate: Evaluate
) -> None:
    server.script("a", ["Yes", "Yes"])
    server.script("b", ["Yes", "Yes"])
    server.script("c", ["No"])
    members = [judges.relevancy(JudgeModel(client, m)) for m in ("a", "b", "c")]
    strong = FakeJudge("pass", name="strong")
    gate = judges.cascade(judges.panel(members), strong, thresholds=[0.6, 0.9])
    stopped = await evaluate(gate, GOOD)  # two votes settle it: "c" is not asked
    assert asked(server) == ["a", "b"]
    assert stopped.metadata["cascade"]["level"] == 0
    # the member not asked counts against the margin: never surer than with every member
    assert stopped.metadata["cascade"]["confidence"] == pytest.approx(2 / 3)
    with every_member():
        full = await evaluate(gate, GOOD)
    assert full.metadata["cascade"]["confidence"] == pytest.approx(2 / 3)  # 2 of 3 agree
    assert levels(full)[1] == (True, None)  # the strong level asked too, for calibration


async def test_a_ratings_distance_from_its_cut_is_its_confidence(
    server: ScriptedOpenAI, client: Any, evaluate: Evaluate
) -> None:
    server.script("cheap", ['{"rating": 4, "feedback": "Complete."}'])
    rating = judges.rating(JudgeModel(client, "cheap"), scale=4, passing=3)
    gate = judges.cascade(rating, FakeJudge(name="strong"), thresholds=[0.8, 0.8])
    verdict = await evaluate(gate, GOOD)
    assert verdict.metadata["cascade"]["level"] == 0
    assert verdict.metadata["cascade"]["confidence"] == pytest.approx(0.5 + 1 / 3)


async def test_a_nested_cascade_gives_its_deciding_levels_confidence(evaluate: Evaluate) -> None:
    sure = FakeJudge(Verdict(passed=False, metadata={"probability": 0.03}), name="sure")
    inner = judges.cascade(sure, FakeJudge(name="x"), thresholds=[0.9, 0.9], name="inner")
    outer = judges.cascade(inner, FakeJudge(name="last"), thresholds=[0.95, 0.9])
    verdict = await evaluate(outer, GOOD)
    assert not verdict.passed
    assert verdict.metadata["cascade"]["level"] == 0
    assert verdict.metadata["cascade"]["confidence"] == pytest.approx(0.97)


# --- repeated samples ------------------------------------------------------------------------


async def test_sampled_keeps_the_majority_and_its_share_is_the_confidence(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", ["Yes", "Yes", "No", "Yes", "Yes"])
    five = judges.sampled(judge("cheap", temperature=1.0), 5)
    verdict = await evaluate(five, GOOD)
    assert verdict.passed
    assert len(server.requests) == 5
    assert verdict.metadata["samples"] == {"n": 5, "passes": 4, "fails": 1, "abstained": 0}
    assert judges.confidence_of(verdict) == pytest.approx(0.8)
    assert five.expected_calls == 5


async def test_sampled_keys_each_sample_apart_in_a_cache(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("cheap", ["Yes", "No", "Yes"])
    three = judges.sampled(judge("cheap", cache=MemoryCache()), 3)
    first = await evaluate(three, GOOD)
    again = await evaluate(three, GOOD)  # every sample from the cache: no call
    assert len(server.requests) == 3
    assert first.metadata["samples"] == again.metadata["samples"]
    assert first.metadata["samples"]["passes"] == 2


async def test_an_even_split_of_samples_is_inconclusive(evaluate: Evaluate) -> None:
    verdict = await evaluate(judges.sampled(FakeJudge("pass", "fail"), 2), GOOD)
    assert verdict.status == "inconclusive"
    assert str(verdict.reason).startswith("SAMPLES_SPLIT")


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: judges.cascade(), ValueError, "at least one level"),
        (lambda: judges.cascade(42), TypeError, "not an evaluator"),
        (lambda: judges.cascade(("", checks.not_empty())), TypeError, "a cascade level"),
        (
            lambda: judges.cascade(("a", checks.not_empty()), ("a", checks.not_empty())),
            ValueError,
            "named 'a'",
        ),
        (lambda: judges.cascade(checks.not_empty(), thresholds=[0.9, 0.9]), ValueError, "one"),
        (lambda: judges.cascade(checks.not_empty(), thresholds=[0.3]), ValueError, "0.5 to 1"),
        (lambda: judges.cascade(checks.not_empty(), thresholds=["high"]), TypeError, "number"),
        (lambda: judges.cascade(checks.not_empty(), thresholds=0.9), TypeError, "list"),
        (lambda: judges.cascade(checks.not_empty(), abstain="yes"), TypeError, "abstain"),
        (lambda: judges.cascade(checks.not_empty(), confidence=[None, None]), ValueError, "one"),
        (lambda: judges.cascade(checks.not_empty(), confidence=[0.9]), TypeError, "function"),
        (lambda: judges.cascade(checks.not_empty(), fit=object()), TypeError, "CascadeFit"),
        (lambda: judges.sampled(checks.not_empty(), 1), ValueError, "2 or more"),
    ],
)
def test_bad_input_is_a_typed_error_saying_what_to_fix(
    make: Callable[[], object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        make()


def test_thresholds_and_a_fit_together_are_refused() -> None:
    fit = fit_cascade([[True]] * 30, [[0.99]] * 30, [True] * 30)
    with pytest.raises(ValueError, match="not both"):
        judges.cascade(checks.not_empty(), thresholds=[0.9], fit=fit)
    with pytest.raises(ValueError, match="one entry per level"):
        judges.cascade(checks.not_empty(), checks.not_empty()).with_fit(fit)


def test_a_confidence_out_of_range_is_a_typed_error() -> None:
    gate = judges.cascade(FakeJudge("pass"), FakeJudge(), confidence=lambda v: 2.0)
    with pytest.raises(ValueError, match="confidence of level 0"):
        gate.evaluate(GOOD)
    gate = judges.cascade(FakeJudge("pass"), FakeJudge(), confidence=lambda v: "sure")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="confidence of level 0"):
        gate.evaluate(GOOD)


def test_the_callers_thresholds_list_is_not_changed() -> None:
    given = [0.9, 0.8]
    judges.cascade(checks.not_empty(), FakeJudge(), thresholds=given)
    assert given == [0.9, 0.8]


# --- under a decorator -----------------------------------------------------------------------


def test_a_cascade_under_retry_on_low_quality_sends_the_deciding_levels_feedback(
    server: ScriptedOpenAI,
) -> None:
    server.script("cheap", [yes(0.97)])
    with server.client() as client:
        cheap = judges.criteria(
            JudgeModel(client, "cheap"),
            [judges.Criterion("supported", "Does the context support the answer?")],
        )
        strong = FakeJudge(name="strong")  # never asked: the cheap judge is sure
        gate = judges.cascade(checks.numbers_supported(), cheap, strong, thresholds=[0.9] * 3)
        seen: list[str | None] = []

        @retry_on_low_quality(evaluator=gate, max_retries=2)
        def answer(question: str, feedback: str | None = None) -> str:
            seen.append(feedback)
            refinekit.record_context(POLICY)
            return "Within 60 days." if feedback is None else "Within 30 days, if unused."

        assert answer("How long?") == "Within 30 days, if unused."
    assert "60" in str(seen[1])  # the check decided the first answer: its feedback, no call
    assert asked(server) == ["cheap"]  # the second answer: the cheap judge, sure enough
    assert strong.requests == []


@pytest.mark.parametrize("stream_kind", ["sync", "async"])
def test_a_cascade_judges_a_streamed_answer_when_complete(stream_kind: str) -> None:
    poor = "Refunds are accepted, no questions asked."
    good = "Refunds are accepted within 30 days [policies/refunds.md]."
    model = StreamingModel(stream_kind, Source(*chunked(poor, 6)), Source(*chunked(good, 6)))
    strong = FakeJudge("pass", name="strong")
    gate = judges.cascade(checks.contains("[policies/refunds.md]"), strong)
    answer = retry_on_low_quality(evaluator=gate, max_retries=1)(model.function())
    assert stream_call(stream_kind, answer, "Can I get a refund?") == good
    # the poor answer failed the check (sure): the strong judge saw only the good one
    assert [r.answer for r in strong.requests] == [good]
