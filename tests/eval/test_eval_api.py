"""`refinekit.eval` from Python: a run owned from start to finish, its events, its result.

The same runs as `refinekit eval` and `refinekit calibrate` (tests/cli/test_cli_eval.py), called
through the public API with the target and the judge given as objects; the judges are
criteria judges over real HTTP to the scripted server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
from helpers import judge_replies, write_csv, yes_no

import refinekit.eval
from refinekit import judges
from refinekit.eval import (
    CaseFinished,
    EvalResult,
    RunAborted,
    RunEvent,
    RunStarted,
    RunStopped,
    UsageProblem,
)
from refinekit.eval._stats import wilson_interval
from refinekit.testing import Reply, ScriptedOpenAI

ANSWERS = {
    "Refund window?": "Within seven days [refunds.md].",
    "Shipping cost?": "It is free.",
    "Gift cards?": "Gift cards are never refunded.",
}
BETTER = {**ANSWERS, "Shipping cost?": "Free within the EU [shipping.md]."}
GROUNDED = {
    "Within seven days [refunds.md].": 0.9,
    "It is free.": 0.2,
    "Gift cards are never refunded.": 0.8,
    "Free within the EU [shipping.md].": 0.85,
}


def answer(question: str) -> str:
    """The answer function under test: a plain `def`."""
    return ANSWERS[question]


def better(question: str) -> str:
    """The branch's answer function: it fixes the shipping answer."""
    return BETTER[question]


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "golden.csv", [{"question": q} for q in ANSWERS])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "runs.db"


def grounded(client: openai.OpenAI, model: str = "judge") -> judges.Judge:
    return judges.criteria(
        judges.JudgeModel(client, model),
        [judges.Criterion("grounded", "Is the answer supported?", when_false="Say less.")],
    )


def test_run_judges_every_case_stores_the_run_and_tells_its_events(
    golden: Path, db: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    scripted_openai.script("judge", [judge_replies(GROUNDED)] * 3)
    events: list[RunEvent] = []

    result = refinekit.eval.run(
        golden, target=answer, judge=grounded(judge_client), db=db, on_event=events.append
    )

    assert isinstance(result, EvalResult)
    assert [c.outcome for c in result.cases] == ["passed", "failed", "passed"]
    assert [c.answer for c in result.cases] == list(ANSWERS.values())
    assert result.cases[1].feedback == "Say less."
    assert (result.summary.passed, result.summary.counted) == (2, 3)
    assert result.summary.rate == pytest.approx(2 / 3)
    assert (result.summary.lower, result.summary.upper) == pytest.approx(wilson_interval(2, 3))
    assert result.summary.usage["judge"]["model_calls"] == 3
    assert (result.run_id, result.run.status, result.db) == (1, "complete", db)
    assert result.run.target == f"{answer.__module__}:answer"
    assert result.run.judge == "criteria"
    assert (result.setup_failed, result.measured, result.passed) == (False, True, True)
    assert result.pass_rate_held is None  # no gate asked for
    assert result.comparison is None
    assert len(scripted_openai.requests_for("judge")) == 3  # over HTTP, once per answer

    started, *finished = events
    assert isinstance(started, RunStarted)
    assert (started.run.id, started.cases, started.resuming, started.resumed) == (1, 3, False, 0)
    assert (started.db, started.dataset) == (db, golden)
    assert all(isinstance(e, CaseFinished) for e in finished)
    done = [e for e in finished if isinstance(e, CaseFinished)]
    assert [e.done for e in done] == [1, 2, 3]
    assert {e.total for e in done} == {3}
    assert dict(done[-1].counts) == {"passed": 2, "failed": 1}
    assert sorted(e.record.position for e in done) == [1, 2, 3]

    assert refinekit.eval.runs(db=db) == [result.run]
    assert refinekit.eval.runs(db=db, kind="calibrate") == []
    page = tmp_report = db.parent / "eval.html"
    html = refinekit.eval.html_report(result, tmp_report)
    assert page.read_text(encoding="utf-8") == html
    assert "refinekit eval \u2014 run 1" in html
    assert '<span class="big">0.667</span>' in html


def test_the_gates_the_comparison_and_compare(
    golden: Path, db: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    scripted_openai.script("judge", [judge_replies(GROUNDED)] * 6)
    judge = grounded(judge_client)

    main = refinekit.eval.run(golden, target=answer, judge=judge, db=db, min_pass_rate=0.5)

    assert main.summary.lower < 0.5
    assert (main.pass_rate_held, main.passed) == (False, False)

    branch = refinekit.eval.run(
        golden, target=better, judge=judge, db=db, min_pass_rate=0.2, compare="previous"
    )

    assert branch.summary.passed == 3
    assert (branch.pass_rate_held, branch.regressed, branch.passed) == (True, False, True)
    comparison = branch.comparison
    assert comparison is not None
    assert (comparison.before.id, comparison.after.id) == (main.run_id, branch.run_id)
    assert [now.question for _, now in comparison.improved] == ["Shipping cost?"]
    assert (comparison.shared, comparison.regressed) == (3, [])
    # the same comparison, asked of the store afterwards: by results, or by ids
    again = refinekit.eval.compare(main, branch)
    by_id = refinekit.eval.compare(main.run_id, branch.run_id, db=db)
    for other in (again, by_id):
        assert (other.shared, other.p_value) == (comparison.shared, comparison.p_value)
        assert [now.key for _, now in other.improved] == [now.key for _, now in comparison.improved]


def test_a_stopped_run_raises_run_aborted_and_the_same_call_resumes_it(
    golden: Path, db: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    # the judge's key is revoked after its first verdict: a misconfiguration fails every case
    scripted_openai.script("judge-old-key", [yes_no(0.9), Reply.error(401, "bad key")])
    events: list[RunEvent] = []

    with pytest.raises(RunAborted, match="the judge is misconfigured") as stopped:
        refinekit.eval.run(
            golden,
            target=answer,
            judge=grounded(judge_client, "judge-old-key"),
            db=db,
            concurrency=1,
            on_event=events.append,
        )

    assert (stopped.value.run_id, stopped.value.stored, stopped.value.cases) == (1, 1, 3)
    assert isinstance(events[-1], RunStopped)
    assert events[-1].error is stopped.value
    assert (events[-1].run.status, events[-1].stored) == ("incomplete", 1)
    [info] = refinekit.eval.runs(db=db)
    assert (info.status, info.summary) == ("incomplete", {"stored": 1, "cases": 3, "retried": 0})

    # the key is fixed: the same call resumes the run, without judging q1 again
    scripted_openai.script("judge", [judge_replies(GROUNDED)] * 2)
    events.clear()

    result = refinekit.eval.run(
        golden,
        target=answer,
        judge=grounded(judge_client),
        db=db,
        concurrency=1,
        on_event=events.append,
    )

    assert isinstance(events[0], RunStarted)
    assert (events[0].resuming, events[0].resumed, events[0].run.id) == (True, 1, 1)
    assert (result.run_id, result.run.status, len(result.cases)) == (1, "complete", 3)
    assert [c.outcome for c in result.cases] == ["passed", "failed", "passed"]
    assert len(scripted_openai.requests_for("judge")) == 2
    # resume=False starts over
    scripted_openai.script("judge", [judge_replies(GROUNDED)] * 3)
    fresh = refinekit.eval.run(
        golden, target=answer, judge=grounded(judge_client), db=db, resume=False
    )
    assert fresh.run_id == 2


@pytest.mark.parametrize("policy", [None, "fail_open", "fail_closed"])
def test_a_judge_that_could_not_judge_leaves_its_case_unavailable_whatever_its_policy(
    golden: Path,
    db: Path,
    scripted_openai: ScriptedOpenAI,
    judge_client: openai.OpenAI,
    policy: judges.JudgeErrorPolicy | None,
) -> None:
    """An outage on one case is recorded and the run goes on; a judge's own "fail_closed"
    policy (no answer through unjudged) is kept too: an unavailable case never passes."""
    scripted_openai.script("judge", [Reply.error(503, "overloaded"), yes_no(0.9), yes_no(0.2)])
    judge = judges.criteria(
        judges.JudgeModel(judge_client, "judge"),
        [judges.Criterion("grounded", "Is the answer supported?")],
        judge_error_policy=policy,
    )

    result = refinekit.eval.run(golden, target=answer, judge=judge, db=db, concurrency=1)

    assert [c.outcome for c in result.cases] == ["unavailable", "passed", "failed"]
    assert (result.cases[0].error or "").startswith("JudgeUnavailable: ")
    assert "503" in (result.cases[0].error or "")
    assert (result.summary.unavailable, result.summary.counted) == (1, 2)
    assert result.run.status == "complete"


async def test_arun_on_the_running_loop_and_run_called_from_one(tmp_path: Path, db: Path) -> None:
    golden = write_csv(
        tmp_path / "golden.csv",
        [{"question": "q1", "must_mention": "one"}, {"question": "q2", "must_mention": "two"}],
    )

    async def aanswer(question: str) -> str:
        await asyncio.sleep(0)
        return {"q1": "one", "q2": "three"}[question]

    result = await refinekit.eval.arun(golden, target=aanswer, db=db)

    assert [c.outcome for c in result.cases] == ["passed", "failed"]
    assert result.run.judge is None
    assert result.cases[1].feedback == "Mention 'two'."
    # the sync call from a running loop (a notebook cell) runs the cases on a loop of its own
    again = refinekit.eval.run(golden, target=aanswer, db=db)
    assert (again.run_id, [c.outcome for c in again.cases]) == (2, ["passed", "failed"])


async def test_a_cancelled_arun_is_stored_incomplete_and_resumes(tmp_path: Path, db: Path) -> None:
    golden = write_csv(
        tmp_path / "golden.csv", [{"question": q, "must_mention": "ok"} for q in ("q1", "q2", "q3")]
    )
    blocking = {"q2"}
    asked: list[str] = []
    reached = asyncio.Event()

    async def slow(question: str) -> str:
        asked.append(question)
        if question in blocking:
            reached.set()
            await asyncio.Event().wait()  # until cancelled
        return "ok"

    events: list[RunEvent] = []
    task = asyncio.ensure_future(
        refinekit.eval.arun(golden, target=slow, db=db, concurrency=1, on_event=events.append)
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert isinstance(events[-1], RunStopped)
    [info] = refinekit.eval.runs(db=db)
    assert (info.status, info.summary) == ("incomplete", {"stored": 1, "cases": 3, "retried": 0})

    blocking.clear()
    result = await refinekit.eval.arun(golden, target=slow, db=db, concurrency=1)

    assert (result.run_id, result.summary.passed) == (1, 3)
    assert asked == ["q1", "q2", "q2", "q3"]  # q1 was not asked again


def test_calibrate_measures_the_judge_against_the_labels(
    tmp_path: Path, db: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    rows = [
        {"question": f"q{i}", "answer": f"answer {i}", "label": "pass" if i <= 3 else "fail"}
        for i in range(1, 7)
    ]
    labelled = write_csv(tmp_path / "labelled.csv", rows)
    probabilities = {"answer 1": 0.9, "answer 2": 0.8, "answer 3": 0.3, "answer 4": 0.2}
    probabilities |= {"answer 5": 0.1, "answer 6": 0.95}
    scripted_openai.script("judge", [judge_replies(probabilities)] * 6)

    result = refinekit.eval.calibrate(labelled, judge=grounded(judge_client), db=db, min_kappa=0.5)

    c = result.calibration
    assert (c.items, c.both_pass, c.human_fail_only, c.judge_fail_only, c.both_fail) == (
        6, 2, 1, 1, 2,
    )  # fmt: skip
    assert c.kappa == pytest.approx(1 / 3)
    assert (result.kappa_held, result.passed, result.setup_failed) == (False, False, False)
    assert c.reliability is not None  # every verdict carried the judge's probability
    assert c.thresholds is not None
    assert [case.label for case in result.cases] == ["pass"] * 3 + ["fail"] * 3
    assert (result.run.kind, result.run.status) == ("calibrate", "complete")
    assert "Reliability diagram" in refinekit.eval.html_report(result)


def test_usage_problems_raise_before_anything_runs(golden: Path, db: Path) -> None:
    def two(question: str, customer: str) -> str:
        return question

    with pytest.raises(UsageProblem, match="needs 'customer', and the file has no column"):
        refinekit.eval.run(golden, target=two, db=db)
    with pytest.raises(UsageProblem, match="nothing to judge the answers by"):
        refinekit.eval.run(golden, target=answer, db=db)
    for wrong in (
        {"concurrency": 0},
        {"repeat": 51},
        {"min_pass_rate": 1.5},
        {"alpha": 0.0},
        {"retry": ("passed",)},
    ):
        with pytest.raises(UsageProblem):
            refinekit.eval.run(golden, target=answer, judge=lambda r: True, db=db, **wrong)
    with pytest.raises(UsageProblem, match="judge"):
        refinekit.eval.run(golden, target=answer, judge=42, db=db)  # type: ignore[arg-type]
    with pytest.raises(UsageProblem, match="no module named"):
        refinekit.eval.run(golden, target="no_such_module:answer", judge=lambda r: True, db=db)
    assert not db.exists()  # no store was made: nothing ran
    assert refinekit.eval.runs(db=db) == []


def test_a_setup_failure_is_no_measurement(golden: Path, db: Path) -> None:
    def down(question: str) -> str:
        raise ConnectionError("the endpoint is down")

    result = refinekit.eval.run(
        golden, target=down, judge=lambda r: True, db=db, min_pass_rate=0.1, compare="previous"
    )

    assert [c.outcome for c in result.cases] == ["raised"] * 3
    assert result.cases[0].error == "ConnectionError: the endpoint is down"
    assert (result.setup_failed, result.measured, result.passed) == (True, False, False)
    assert result.pass_rate_held is False
    assert result.comparison is None
    assert result.run.summary["setup_failed"] is True


def test_cases_a_check_failed_for_want_of_context_are_counted_failed_and_apart(
    golden: Path, db: Path
) -> None:
    from refinekit import checks, record_context

    def sometimes(question: str) -> str:
        if question == "Refund window?":
            record_context({"text": "Within seven days.", "source": "refunds.md"})
        return ANSWERS[question]

    result = refinekit.eval.run(golden, target=sometimes, judge=checks.cites_source(), db=db)

    assert [c.outcome for c in result.cases] == ["passed", "failed", "failed"]
    assert result.summary.no_context == 2  # of the 3: counted failed, and counted apart
    assert (result.summary.failed, result.summary.rate) == (2, 1 / 3)
    assert result.run.summary["no_context"] == 2  # stored with the run's figures
