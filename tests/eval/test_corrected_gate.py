"""`calibration=` / `refinekit eval --calibration RUN`: the pass rate corrected for the judge.

A judge calibrated against people's labels (`refinekit.eval.calibrate`) has a sensitivity
and a specificity; an eval run given that calibration reports the Rogan-Gladen corrected rate
with an interval that holds the judge's uncertainty too, and gates on its lower bound. An
uncalibrated judge (none given, another judge's, a kappa too low) is named so: a warning, or
with `strict_calibration` an error before anything runs. The judges are plain functions, so
that every figure is known; the estimator itself is tested in test_stats.py and by
simulation in benchmarks/bench_corrected_gate.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import Cli, write_csv

import refinekit.eval
from refinekit import EvaluationRequest
from refinekit.eval import EvalResult, UsageProblem
from refinekit.eval._stats import corrected_interval, wilson_interval
from refinekit.eval._store._sqlite import SQLiteStore


def lenient(request: EvaluationRequest) -> bool:
    """Passes the good answers and the so-so ones; people pass only the good ones."""
    return request.answer in ("good", "so-so")


def coin(request: EvaluationRequest) -> bool:
    """A judge that agrees with people no better than chance on the labelled set."""
    return request.question.endswith(("0", "2", "4", "6", "8"))


# the calibration: 20 good (people pass, the judge passes), 20 bad (both fail), 10 so-so
# (people fail, the judge passes): sensitivity 20/20, specificity 20/30
LABELLED = (
    [{"question": f"g{i}", "answer": "good", "label": "pass"} for i in range(20)]
    + [{"question": f"b{i}", "answer": "bad", "label": "fail"} for i in range(20)]
    + [{"question": f"s{i}", "answer": "so-so", "label": "fail"} for i in range(10)]
)
# the golden set: 10 good, 10 so-so, 10 bad: the judge passes 20 of 30
GOLDEN = {f"q{i}": ("good", "so-so", "bad")[i % 3] for i in range(30)}


def answer(question: str) -> str:
    return GOLDEN[question]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "labelled": write_csv(tmp_path / "labelled.csv", LABELLED),
        "golden": write_csv(tmp_path / "golden.csv", [{"question": q} for q in GOLDEN]),
        "db": tmp_path / "runs.db",
    }


def evaluated(files: dict[str, Path], judge: Any = lenient, **options: Any) -> EvalResult:
    """`refinekit.eval.run` of the golden set answered by `answer`, judged by `judge`."""
    return refinekit.eval.run(
        files["golden"], target=answer, judge=judge, db=files["db"], **options
    )


def calibrated(files: dict[str, Path], judge: Any = lenient) -> int:
    result = refinekit.eval.calibrate(files["labelled"], judge=judge, db=files["db"])
    assert result.calibration.items == 50
    return result.run_id


def test_the_gate_holds_the_corrected_lower_bound_not_wilsons(files: dict[str, Path]) -> None:
    run = calibrated(files)

    result = evaluated(files, calibration=run, min_pass_rate=0.45)

    rate, lower, upper = corrected_interval(20, 30, 20, 20, 20, 30)
    c = result.corrected
    assert c is not None
    assert (c.calibration.run, c.calibration.sensitivity) == (run, 1.0)
    assert c.calibration.specificity == pytest.approx(2 / 3)
    assert c.rate == pytest.approx(rate)  # (2/3 + 2/3 - 1) / (1 + 2/3 - 1) = 0.5
    assert c.rate == pytest.approx(0.5)
    assert (c.lower, c.upper) == pytest.approx((lower, upper))
    assert c.observed == pytest.approx(2 / 3)
    assert c.sensitivity_interval == pytest.approx(wilson_interval(20, 20))
    # the judge's own pass rate would have held the gate; the corrected one does not
    assert result.summary.lower == pytest.approx(wilson_interval(20, 30)[0])
    assert result.summary.lower >= 0.45 > c.lower
    assert result.gate_lower == c.lower
    assert result.pass_rate_held is False
    assert result.passed is False
    assert result.judge_warning is None
    stored = result.run.summary["corrected"]
    assert stored["calibration_run"] == run
    assert stored["lower"] == pytest.approx(lower)
    assert json.loads(json.dumps(stored)) == stored  # JSON-ready, as the store keeps it


def test_the_async_api_corrects_alike(files: dict[str, Path]) -> None:
    run = calibrated(files)

    result = asyncio.run(
        refinekit.eval.arun(
            files["golden"], target=answer, judge=lenient, db=files["db"], calibration="latest"
        )
    )

    assert result.corrected is not None
    assert result.corrected.calibration.run == run
    assert result.corrected.rate == pytest.approx(0.5)


def test_latest_is_the_newest_calibration_of_this_judge(files: dict[str, Path]) -> None:
    calibrated(files)
    newer = calibrated(files)  # a second calibration of the same judge: a run of its own
    refinekit.eval.calibrate(files["labelled"], judge=coin, db=files["db"])  # another judge

    result = evaluated(files, calibration="latest")

    assert result.corrected is not None
    assert result.corrected.calibration.run == newer


def test_a_gate_without_calibration_warns_that_the_judge_is_uncalibrated(
    files: dict[str, Path],
) -> None:
    result = evaluated(files, min_pass_rate=0.45)

    assert result.corrected is None
    assert result.judge_warning is not None
    assert result.judge_warning.startswith("the judge is uncalibrated: no calibration")
    assert result.pass_rate_held is True  # on the Wilson bound, as before
    assert result.run.summary["judge_warning"] == result.judge_warning
    ungated = evaluated(files, resume=False)
    assert ungated.judge_warning is None  # no gate, nothing to warn of


def test_the_reports_warning_shows_the_command_it_names_as_code_not_backticks(
    files: dict[str, Path],
) -> None:
    result = evaluated(files, min_pass_rate=0.45)
    assert result.judge_warning is not None
    assert "`refinekit calibrate`" in result.judge_warning  # as the terminal prints it

    html = refinekit.eval.html_report(result)

    assert "a <code>refinekit calibrate</code> run of this judge" in html
    assert "`" not in html


def test_strict_calibration_refuses_an_uncalibrated_gate_before_anything_runs(
    files: dict[str, Path],
) -> None:
    calls: list[str] = []

    def counted(question: str) -> str:
        calls.append(question)
        return answer(question)

    with pytest.raises(UsageProblem, match="the judge is uncalibrated: no calibration"):
        refinekit.eval.run(
            files["golden"],
            target=counted,
            judge=lenient,
            db=files["db"],
            min_pass_rate=0.45,
            strict_calibration=True,
        )
    assert calls == []


def test_a_judge_whose_kappa_bound_is_too_low_is_uncalibrated(files: dict[str, Path]) -> None:
    run = calibrated(files, judge=coin)

    result = evaluated(files, judge=coin, calibration=run)

    assert result.corrected is None
    assert result.judge_warning is not None
    assert "under --min-judge-kappa 0.200" in result.judge_warning
    with pytest.raises(UsageProblem, match="min-judge-kappa"):
        evaluated(files, judge=coin, calibration=run, strict_calibration=True)
    # the threshold is the caller's: at -1 any calibration corrects
    loose = evaluated(files, judge=coin, calibration=run, min_judge_kappa=-1.0, resume=False)
    assert loose.corrected is not None


def test_a_calibration_of_another_judge_is_named(files: dict[str, Path]) -> None:
    run = calibrated(files, judge=coin)

    result = evaluated(files, calibration=run)

    assert result.corrected is None
    assert result.judge_warning is not None
    assert "calibrated the judge 'test_corrected_gate:coin'" in result.judge_warning


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calibration": "soon"}, "takes a calibrate run's id"),
        ({"calibration": 0}, "takes a calibrate run's id"),
        ({"calibration": True}, "takes a calibrate run's id"),
        ({"calibration": 99}, "the store has no run 99"),
        ({"calibration": 1, "repeat": 3}, "cannot be combined with --repeat"),
        ({"calibration": 1, "judge": None}, "give --judge"),
        ({"min_judge_kappa": 2.0}, "min_judge_kappa"),
        ({"min_judge_kappa": None}, "min_judge_kappa must be a number"),
    ],
)
def test_bad_calibration_options_are_usage_problems(
    files: dict[str, Path], options: dict[str, Any], message: str
) -> None:
    calibrated(files)
    kwargs: dict[str, Any] = {"target": answer, "judge": lenient, "db": files["db"]} | options
    with pytest.raises(UsageProblem, match=message):
        refinekit.eval.run(files["golden"], **kwargs)


def test_an_eval_run_is_no_calibration(files: dict[str, Path]) -> None:
    first = evaluated(files)
    with pytest.raises(UsageProblem, match="is an eval run, not a calibrate run"):
        evaluated(files, calibration=first.run_id, resume=False)


def test_the_cli_prints_the_corrected_rate_and_gates_on_it(
    files: dict[str, Path], cli: Cli
) -> None:
    module = __name__
    db = str(files["db"])
    made = cli("calibrate", str(files["labelled"]), "--judge", f"{module}:lenient", "--db", db)
    assert made.code == 0, made.err

    command = ("eval", str(files["golden"]), "--target", f"{module}:answer")
    command += ("--judge", f"{module}:lenient", "--db", db, "--min-pass-rate", "0.45")
    result = cli(*command, "--calibration", "latest")

    _, lower, _ = corrected_interval(20, 30, 20, 20, 20, 30)
    assert result.code == 1, result.err
    assert "corrected for the judge (calibration run 1: sensitivity 1.000" in result.out
    assert "pass rate 0.500" in result.out
    assert f"gate: corrected lower bound {lower:.3f} is under --min-pass-rate 0.450: FAIL" in (
        result.out
    )
    uncalibrated = cli(*command, "--strict-calibration")
    assert uncalibrated.code == 2
    assert "the judge is uncalibrated" in uncalibrated.err
    with SQLiteStore(files["db"]) as store:
        assert [r.kind for r in store.runs()] == ["calibrate", "eval"]  # the strict run: none


def test_the_report_holds_the_gate_against_the_corrected_bound(files: dict[str, Path]) -> None:
    from refinekit.eval._report import eval_report

    run = calibrated(files)
    corrected = evaluated(files, calibration=run, min_pass_rate=0.45)
    warned = evaluated(files, min_pass_rate=0.45, resume=False)

    with SQLiteStore(files["db"]) as store:
        html = eval_report(store, corrected.run_id, min_pass_rate=0.45)
        plain = eval_report(store, warned.run_id, min_pass_rate=0.45)

    assert corrected.corrected is not None
    assert f"corrected lower bound {corrected.corrected.lower:.3f}" in html
    assert "with <code>--calibration 1</code>" in html
    assert '<span class="badge failed">failed</span>' in html  # as the run's own gate
    assert "Wilson lower bound" in plain
    assert '<span class="badge held">held</span>' in plain
    assert "<b>Warning:</b> the judge is uncalibrated: no calibration" in plain
