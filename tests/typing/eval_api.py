"""Checked by mypy (strict) in CI: what type checkers see of `refinekit.eval`."""

from __future__ import annotations

from pathlib import Path

from typing_extensions import assert_type

import refinekit.eval
from refinekit import EvaluationRequest, Verdict, checks
from refinekit.eval import (
    CalibrationResult,
    CaseRecord,
    Comparison,
    EvalResult,
    RunEvent,
    RunInfo,
    Summary,
)


def answer(question: str) -> str:
    return question


async def aanswer(question: str) -> str:
    return question


def judge(request: EvaluationRequest) -> Verdict:
    return Verdict(passed=True)


def on_event(event: RunEvent) -> None:
    if isinstance(event, refinekit.eval.CaseFinished):
        assert_type(event.record, CaseRecord)


def check_eval() -> None:  # never called: mypy reads it
    result = refinekit.eval.run(
        Path("golden.csv"),
        target=answer,
        judge=checks.not_empty(),
        retry=("raised",),
        compare="previous",
        on_event=on_event,
    )
    assert_type(result, EvalResult)
    assert_type(result.summary, Summary)
    assert_type(result.summary.rate, float | None)
    assert_type(result.cases, list[CaseRecord])
    assert_type(result.comparison, Comparison | None)
    assert_type(result.passed, bool)
    assert_type(result.pass_rate_held, bool | None)
    by_name = refinekit.eval.run("golden.jsonl", target="app:answer", judge="app:judge", db="x")
    assert_type(by_name.run, RunInfo)
    assert_type(refinekit.eval.compare(result, by_name.run_id), Comparison)
    assert_type(refinekit.eval.html_report(result), str)
    assert_type(refinekit.eval.runs(kind="eval"), list[RunInfo])
    assert_type(refinekit.eval.store_path(None), Path)
    assert_type(refinekit.eval.store_location(None), Path | refinekit.eval.StoreURL)
    assert_type(refinekit.eval.run("g.csv", target="app:answer", run_id=3), EvalResult)


def check_calibrate() -> None:  # never called: mypy reads it
    result = refinekit.eval.calibrate("labelled.csv", judge=judge, min_kappa=0.4)
    assert_type(result, CalibrationResult)
    assert_type(result.calibration.kappa, float | None)
    assert_type(result.kappa_held, bool | None)


async def check_async() -> None:  # never called: mypy reads it
    assert_type(await refinekit.eval.arun("golden.csv", target=aanswer), EvalResult)
    assert_type(await refinekit.eval.acalibrate("labelled.csv", judge=judge), CalibrationResult)
