"""Seeded fault mixes through the scripted server for `@self_correct`, `@retry_on_low_quality`
(model judges over `JudgeModel`, both error policies, judges' own policies) and `@reviewed`
(enforce and shadow, the default reviser), sync and async: every job ends in a value or a
documented exception, as the decorator's documented semantics predict, within its call
budget, never hanging, never counting an outage as a pass, never showing a planted secret."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from faultmix import DECORATORS, FAULT_KINDS
from jobs import MixReport, run_mix
from oracle import explain_violations

from refinekit import AnswerRejected, judges, reviewed
from refinekit.testing import Reply, ScriptedOpenAI

JOBS = {"self_correct": 120, "retry_on_low_quality": 120, "reviewed": 100}


def explain(report: MixReport, decorator: str) -> str:
    selection = f"tests/reliability -k {decorator}"
    return explain_violations(
        report.violations, "fault mix", report.seed, selection, report.figures()
    )


@pytest.mark.reliability
@pytest.mark.parametrize("decorator", DECORATORS)
def test_seeded_fault_mix(decorator: str, fault_seed: int) -> None:
    report = run_mix(fault_seed, {decorator: JOBS[decorator]})

    if report.violations:
        pytest.fail(explain(report, decorator))
    served = {kind for r in report.results for kind in r.served}
    missing = set(FAULT_KINDS) - served
    assert len(missing) <= 2, f"the mix served no {sorted(missing)}: widen it"
    outcomes = {r.outcome for r in report.results}
    assert len(outcomes) >= 6, f"only {sorted(outcomes)}: the mix is too narrow"


@pytest.mark.parametrize("decorator", DECORATORS)
def test_fault_mix_fast_slice(decorator: str, fault_seed: int) -> None:
    """A few jobs of each decorator, in the main suite."""
    report = run_mix(fault_seed + 1, {decorator: 10})

    if report.violations:
        pytest.fail(explain(report, decorator))
    assert len(report.results) == 10


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_judge_that_hangs_past_judge_timeout_leaves_no_request_running(mode: str) -> None:
    """The judge_timeout path of the mix, every run: the judge's request ends with the call."""
    with ScriptedOpenAI() as server, server.client(timeout=30) as client:
        server.script("answer", ["Refunds: within 30 days."])
        server.script("judge", [Reply.hang()])
        judge = judges.relevancy(judges.JudgeModel(client, "judge"))  # no timeout of its own

        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="answer", messages=[{"role": "user", "content": question}]
            )

        async def aanswer(question: str) -> Any:
            return answer(question)

        review = reviewed(judge=judge, judge_timeout=0.3, max_revisions=0)

        def ask() -> str:
            if mode == "sync":
                return review(answer)("Can I get a refund?")
            return asyncio.run(review(aanswer)("Can I get a refund?"))

        with pytest.raises(AnswerRejected) as caught:
            ask()
        assert caught.value.reason == "judge_timeout"
        assert [v.status for v in caught.value.verdicts] == ["unjudged"]
        deadline = time.monotonic() + 5
        while server.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.in_flight == 0, "the judge's request outlived the call"
