"""Panels over real HTTP: `judges.panel` with rule checks and model judges on ScriptedOpenAI.

Every test that judges runs twice (the `kind` fixture): judges on `openai.OpenAI` called with
`evaluate`, and judges on `openai.AsyncOpenAI` called with `aevaluate`. Each model judge has
a model of its own on the server ("a", "b", "c"), so a test sees which member was asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from helpers import Evaluate

import refinekit
from refinekit import (
    Budget,
    BudgetExceeded,
    ContextDocument,
    EvaluationRequest,
    JudgeMisconfigured,
    JudgeUnavailable,
    Verdict,
    checks,
    judges,
    retry_on_low_quality,
)
from refinekit.judges import JudgeModel, MemoryCache
from refinekit.judges._panel import every_member, outcome
from refinekit.testing import Reply, ScriptedOpenAI

POLICY = ContextDocument("Unused items can be returned within 30 days.", source="refunds.md")
GOOD = EvaluationRequest(
    question="How long do I have to return an item?",
    answer="Within 30 days, if it is unused.",
    context=(POLICY,),
)
WRONG_NUMBER = GOOD.model_copy(update={"answer": "Within 60 days, if it is unused."})


@pytest.fixture
def judge(client: Any) -> Callable[..., judges.Judge]:
    """`judge("a")`: a relevancy judge asking model "a" of the scripted server."""

    def make(model: str, **settings: Any) -> judges.Judge:
        return judges.relevancy(JudgeModel(client, model, **settings))

    return make


def asked(server: ScriptedOpenAI) -> list[str]:
    return [str(r.body["model"]) for r in server.requests if r.body is not None]


def votes(verdict: Verdict) -> dict[str, str]:
    return {m["name"]: m["vote"] for m in verdict.metadata["panel"]["members"]}


# --- the early stop: cheap members first, no call whose vote cannot matter -------------------


async def test_a_rule_check_and_a_judge_that_agree_cost_one_call(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No"])
    server.script("b", ["Yes"])
    # the judges are listed first: the check still runs first, being free
    jury = judges.panel([judge("a"), judge("b"), checks.numbers_supported()])
    verdict = await evaluate(jury, WRONG_NUMBER)
    assert not verdict.passed
    assert asked(server) == ["a"]
    assert votes(verdict) == {
        "relevancy": "fail",
        "relevancy#2": "skipped",
        "numbers_supported": "fail",
    }
    panel = verdict.metadata["panel"]
    assert (panel["passes"], panel["fails"], panel["abstained"], panel["skipped"]) == (0, 2, 0, 1)
    assert panel["decision"] == "fail"
    assert [c.outcome for c in verdict.criteria] == ["fail", "skipped", "fail"]
    assert "60" in verdict.feedback  # the failing members' feedback, for a retry


async def test_when_the_first_two_disagree_the_third_member_decides(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No"])
    server.script("b", ["Yes"])
    jury = judges.panel([checks.numbers_supported(), judge("a"), judge("b")])
    verdict = await evaluate(jury, GOOD)
    assert verdict.passed
    assert asked(server) == ["a", "b"]
    assert verdict.score == pytest.approx(2 / 3)


async def test_every_member_runs_when_asked_and_the_verdict_is_the_same(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No", "No"])
    server.script("b", ["Yes"])
    jury = judges.panel([checks.numbers_supported(), judge("a"), judge("b")])
    stopped = await evaluate(jury, WRONG_NUMBER)
    with every_member():
        full = await evaluate(jury, WRONG_NUMBER)
    assert asked(server) == ["a", "a", "b"]
    assert stopped.passed is full.passed is False
    assert votes(full) == {"numbers_supported": "fail", "relevancy": "fail", "relevancy#2": "pass"}


async def test_order_given_keeps_the_list_order(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No"])
    server.script("b", ["No"])
    jury = judges.panel([judge("a"), judge("b"), checks.numbers_supported()], order="given")
    verdict = await evaluate(jury, GOOD)
    assert asked(server) == ["a", "b"]  # two fails of three: the check is not needed
    assert not verdict.passed
    assert votes(verdict)["numbers_supported"] == "skipped"


# --- abstentions: counted, shown, never dropped silently -------------------------------------


async def test_a_judge_that_cannot_be_read_abstains_and_is_shown(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["I would rather not say."])
    server.script("b", ["Yes"])
    jury = judges.panel([checks.numbers_supported(), judge("a"), judge("b")])
    verdict = await evaluate(jury, GOOD)
    assert verdict.passed  # 2 votes of 3 members: the quorum (2) is met, both pass
    panel = verdict.metadata["panel"]
    assert (panel["passes"], panel["fails"], panel["abstained"]) == (2, 0, 1)
    member = panel["members"][1]
    assert member["vote"] == "abstain"
    assert member["reason"].startswith("JudgeReplyError:")
    assert [c.outcome for c in verdict.criteria] == ["pass", "uncertain", "pass"]


async def test_an_abstention_never_turns_a_split_into_a_decision_by_list_order(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    # inspect_ai #4721: three graders, the middle one unreadable; the panel shrank to two and
    # `mode` broke the tie by list order. Here the tie is a tie whatever the order.
    decisions = []
    for first, last in (("Yes", "No"), ("No", "Yes")):
        server.script("a", [first])
        server.script("b", ["I cannot tell."])
        server.script("c", [last])
        jury = judges.panel([judge("a"), judge("b"), judge("c")])
        verdict = await evaluate(jury, GOOD)
        decisions.append((verdict.passed, verdict.status, verdict.metadata["panel"]["decision"]))
        assert verdict.metadata["panel"]["abstained"] == 1
    assert decisions == [(False, "judged", "tie")] * 2
    server.script("a", ["Yes"])
    server.script("b", ["I cannot tell."])
    server.script("c", ["No"])
    jury = judges.panel([judge("a"), judge("b"), judge("c")], on_tie="inconclusive")
    verdict = await evaluate(jury, GOOD)
    assert verdict.status == "inconclusive"
    assert str(verdict.reason).startswith("PANEL_TIE")


async def test_below_quorum_the_panel_is_unjudged_and_the_policy_decides(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    outage = Reply.error(503, "overloaded")
    server.script("a", [outage, outage])
    server.script("b", [outage, outage])
    server.script("c", ["Yes", "Yes"])
    members = [judge("a"), judge("b"), judge("c")]
    with pytest.raises(JudgeUnavailable, match="below its quorum of 2") as raised:
        await evaluate(judges.panel(members), GOOD)
    assert raised.value.panel["abstained"] == 2  # type: ignore[attr-defined]
    verdict = await evaluate(judges.panel(members, judge_error_policy="fail_open"), GOOD)
    assert verdict.status == "unjudged"
    assert not verdict.passed
    assert verdict.metadata["panel"]["decision"] == "below_quorum"
    assert verdict.metadata["panel"]["abstained"] == 2


async def test_a_quorum_of_one_lets_a_single_vote_decide(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", [Reply.error(503, "overloaded")])
    server.script("b", [Reply.error(503, "overloaded")])
    server.script("c", ["Yes"])
    verdict = await evaluate(judges.panel([judge("a"), judge("b"), judge("c")], quorum=1), GOOD)
    assert verdict.passed
    assert verdict.metadata["panel"]["abstained"] == 2


async def test_inconclusive_members_below_quorum_make_an_inconclusive_panel(
    evaluate: Evaluate, judge: Callable[..., judges.Judge], server: ScriptedOpenAI
) -> None:
    traced = GOOD.model_copy(update={"trace_issues": ("a result with no call",)})
    verdict = await evaluate(judges.panel([judge("a"), judge("b")]), traced)
    assert verdict.status == "inconclusive"
    assert str(verdict.reason).startswith("PANEL_BELOW_QUORUM")
    assert asked(server) == []  # the judges say so without a call


# --- what is raised, never counted as an abstention ------------------------------------------


async def test_a_misconfigured_member_is_raised(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", [Reply.error(401, "bad key")])
    with pytest.raises(JudgeMisconfigured):
        await evaluate(judges.panel([judge("a"), judge("b"), judge("c")]), GOOD)


async def test_a_member_failing_closed_is_raised(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", [Reply.error(503, "overloaded")])
    strict = judges.relevancy(judge("a").judge_model, judge_error_policy="fail_closed")
    with pytest.raises(JudgeUnavailable) as raised:
        await evaluate(judges.panel([strict, judge("b"), judge("c")]), GOOD)
    assert raised.value.fail_closed


async def test_a_bug_in_a_check_member_propagates(evaluate: Evaluate) -> None:
    def broken(request: EvaluationRequest) -> bool:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        await evaluate(judges.panel([broken, lambda r: True, lambda r: True]), GOOD)


# --- budgets and the judge cache apply per member --------------------------------------------


async def test_a_member_whose_call_the_budget_cannot_cover_stops_the_panel(
    kind: str, server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["Yes"])
    server.script("b", ["No"])
    server.script("c", ["Yes"])
    jury = judges.panel([judge("a"), judge("b"), judge("c")])
    budgeted = refinekit.job(budget=Budget(max_calls=1))
    if kind == "sync":
        with budgeted, pytest.raises(BudgetExceeded):
            await evaluate(jury, GOOD)
    else:
        async with budgeted:
            with pytest.raises(BudgetExceeded):
                await evaluate(jury, GOOD)
    assert asked(server) == ["a"]  # the second call was not sent


async def test_each_member_is_answered_from_its_own_judge_cache(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No"])
    server.script("b", ["Yes"])
    server.script("c", ["Yes", "Yes"])
    cache = MemoryCache()
    jury = judges.panel([judge("a", cache=cache), judge("b", cache=cache), judge("c")])
    first = await evaluate(jury, GOOD)
    second = await evaluate(jury, GOOD)
    # the cached members made no second call; the one without a cache did
    assert asked(server) == ["a", "b", "c", "c"]
    assert first.passed is second.passed is True
    assert votes(second) == votes(first)


# --- the other rules, nesting, use as an evaluator -------------------------------------------


async def test_the_mean_of_criteria_probabilities(
    server: ScriptedOpenAI, client: Any, evaluate: Evaluate
) -> None:
    def criteria(model: str) -> judges.Judge:
        return judges.criteria(JudgeModel(client, model), [judges.Criterion("ok", "Is it ok?")])

    server.script("a", [Reply.text("Yes", {"Yes": 0.9, "No": 0.1})])
    server.script("b", [Reply.text("No", {"Yes": 0.3, "No": 0.7})])
    jury = judges.panel([criteria("a"), criteria("b")], rule="mean", threshold=0.55)
    verdict = await evaluate(jury, GOOD)
    assert verdict.score == pytest.approx(0.6)
    assert verdict.passed


async def test_all_stops_at_the_first_fail_and_any_at_the_first_pass(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["No", "Yes"])
    every = await evaluate(judges.panel([judge("a"), judge("b")], rule="all"), GOOD)
    some = await evaluate(judges.panel([judge("a"), judge("b")], rule="any"), GOOD)
    assert asked(server) == ["a", "a"]
    assert not every.passed
    assert some.passed


async def test_a_panel_is_a_member_of_another(
    server: ScriptedOpenAI, judge: Callable[..., judges.Judge], evaluate: Evaluate
) -> None:
    server.script("a", ["Yes"])
    server.script("b", ["Yes"])
    inner = judges.panel([judge("a"), judge("b")], rule="all", name="models")
    outer = judges.panel([checks.numbers_supported(), inner], rule="all")
    assert outer.expected_calls == 2
    verdict = await evaluate(outer, GOOD)
    assert verdict.passed
    nested = verdict.metadata["panel"]["members"][1]
    assert nested["name"] == "models"
    assert nested["metadata"]["panel"]["passes"] == 2


def test_a_panel_under_retry_on_low_quality_sends_the_failing_members_feedback(
    server: ScriptedOpenAI,
) -> None:
    server.script("a", ["Yes"])
    with server.client() as client:
        jury = judges.panel(
            [checks.numbers_supported(), judges.relevancy(JudgeModel(client, "a"))],
            rule="all",
        )
        seen: list[str | None] = []

        @retry_on_low_quality(evaluator=jury, max_retries=2)
        def answer(question: str, feedback: str | None = None) -> str:
            seen.append(feedback)
            refinekit.record_context(POLICY)
            return "Within 60 days." if feedback is None else "Within 30 days, if unused."

        assert answer("How long?") == "Within 30 days, if unused."
    assert len(seen) == 2
    assert seen[0] is None
    assert "60" in str(seen[1])  # the check's feedback, no judge call
    assert asked(server) == ["a"]  # only the second answer reached the judge


# --- the decision itself: the votes, never their order ---------------------------------------


@pytest.mark.parametrize("rule", ["majority", "mean", "all", "any"])
def test_the_decision_does_not_depend_on_the_order_of_the_votes(rule: Any) -> None:
    for votes_ in itertools.product([1.0, 0.0, None, 0.4], repeat=4):
        decisions = {
            outcome(rule, list(order), quorum=2, threshold=0.5)
            for order in itertools.permutations(votes_)
        }
        assert len(decisions) == 1, votes_


def test_bad_panels_are_refused_with_what_to_fix() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        judges.panel([])
    with pytest.raises(ValueError, match="quorum must be a whole number from 1 to the 2"):
        judges.panel([lambda r: True, lambda r: True], quorum=3)
    with pytest.raises(ValueError, match="rule must be"):
        judges.panel([lambda r: True], rule="mode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_tie must be"):
        judges.panel([lambda r: True], on_tie="first")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="named 'x'"):
        judges.panel([("x", lambda r: True), ("x", lambda r: True)])
    with pytest.raises(TypeError, match="not an evaluator"):
        judges.panel([42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list of evaluators"):
        judges.panel(checks.not_empty())  # type: ignore[arg-type]


# --- a pairwise judge against a reference: both orders recorded -------------------------------


def _better_is(text: str) -> Callable[[Any], str]:
    """A pairwise judge's reply: whichever answer slot holds `text` is better."""

    def reply(request: Any) -> str:
        content = str(request.body["messages"][-1]["content"])
        first = content[content.index("<answer_a>") : content.index("</answer_a>")]
        return "A" if text in first else "B"

    return reply


async def test_pairwise_against_a_reference_records_whether_the_orders_agreed(
    server: ScriptedOpenAI, client: Any, evaluate: Evaluate
) -> None:
    versus = judges.pairwise(JudgeModel(client, "a")).against("reference")
    row = {"reference": "You can return it within 30 days."}
    request = WRONG_NUMBER.model_copy(update={"metadata": {"row": row}})
    server.script("a", [_better_is("30 days")] * 2)
    verdict = await evaluate(versus, request)
    assert not verdict.passed
    assert verdict.metadata["orders"] == ["b", "b"]
    assert verdict.metadata["position_consistent"] is True
    server.script("a", ["A", "A"])  # a judge that always prefers the first slot
    biased = await evaluate(versus, request)
    assert biased.metadata["orders"] == ["a", "b"]
    assert biased.metadata["position_consistent"] is False
    assert biased.passed  # the orders disagree: a tie
    assert biased.score == 0.5
    assert len(server.requests) == 4
    missing = await evaluate(versus, WRONG_NUMBER)
    assert (missing.status, missing.reason) == ("inconclusive", "NO_REFERENCE")
    assert len(server.requests) == 4
    assert versus.expected_calls == 2
