"""`trials=K` / `refinekit eval --trials K`: the answer function run K times per case.

pass^k (every trial passed: the case's outcome, the pass rate, what the gate holds), pass@k
(at least one passed), each with its Wilson interval; each case's flip rate; one record (and
one row) per case, its trials kept in it.
"""

from __future__ import annotations

import asyncio
import csv
import itertools
from pathlib import Path
from typing import Any

import pytest
from helpers import Cli

import refinekit.eval
from refinekit import EvaluationRequest
from refinekit.eval import UsageProblem
from refinekit.eval._stats import wilson_interval

# steady passes every time, flaky passes on its 1st and 3rd trials, broken never
PLANS = {"steady": ["good"], "flaky": ["good", "bad"], "broken": ["bad"]}
_turns: dict[str, itertools.cycle[str]] = {}


def answer(question: str) -> str:
    return next(_turns.setdefault(question, itertools.cycle(PLANS[question])))


async def aanswer(question: str) -> str:
    await asyncio.sleep(0)
    return answer(question)


def good(request: EvaluationRequest) -> bool:
    return request.answer == "good"


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    _turns.clear()
    path = tmp_path / "golden.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["question"])
        writer.writeheader()
        writer.writerows({"question": q} for q in PLANS)
    return path


def check(result: Any) -> None:
    assert [c.outcome for c in result.cases] == ["passed", "failed", "failed"]  # one per case
    assert [[t["outcome"] for t in c.trials] for c in result.cases] == [
        ["passed"] * 3,
        ["passed", "failed", "passed"],
        ["failed"] * 3,
    ]
    assert [(c.passes, c.judgements, c.flipped) for c in result.cases] == [
        (3, 3, False),
        (2, 3, True),
        (0, 3, False),
    ]
    flaky = result.cases[1]
    assert flaky.answer == "bad"  # the trial that did not pass is the one shown
    t = result.summary.trials
    assert t is not None
    assert (t["k"], t["counted"]) == (3, 3)
    assert t["pass_all"]["cases"] == 1
    assert t["pass_all"]["rate"] == pytest.approx(1 / 3)
    assert (t["pass_all"]["lower"], t["pass_all"]["upper"]) == pytest.approx(wilson_interval(1, 3))
    assert t["pass_any"]["cases"] == 2
    assert (t["pass_any"]["lower"], t["pass_any"]["upper"]) == pytest.approx(wilson_interval(2, 3))
    assert t["per_trial"] == pytest.approx(5 / 9)
    assert t["flipped"] == 1
    # flaky's trials disagree in 2 of their 3 pairs; the others in none
    assert t["flip_rate"] == pytest.approx((0 + 2 / 3 + 0) / 3)
    assert result.summary.rate == pytest.approx(1 / 3)  # the pass rate is pass^k's


def test_trials_report_pass_all_pass_any_and_flips(golden: Path, tmp_path: Path) -> None:
    result = refinekit.eval.run(golden, target=answer, judge=good, trials=3, db=tmp_path / "r.db")

    check(result)
    assert result.run.summary["trials"]["pass_any"]["cases"] == 2  # stored with the run


def test_trials_of_an_async_target_alike(golden: Path, tmp_path: Path) -> None:
    result = asyncio.run(
        refinekit.eval.arun(golden, target=aanswer, judge=good, trials=3, db=tmp_path / "r.db")
    )

    check(result)


def test_the_gate_holds_pass_k(golden: Path, tmp_path: Path) -> None:
    once = refinekit.eval.run(
        golden, target=answer, judge=good, min_pass_rate=0.1, db=tmp_path / "a.db"
    )
    _turns.clear()
    thrice = refinekit.eval.run(
        golden, target=answer, judge=good, trials=3, min_pass_rate=0.1, db=tmp_path / "b.db"
    )

    # once: steady and flaky pass (2 of 3); three times: only steady (1 of 3)
    assert once.summary.lower == pytest.approx(wilson_interval(2, 3)[0])
    assert once.pass_rate_held is True
    assert thrice.summary.lower == pytest.approx(wilson_interval(1, 3)[0])
    assert thrice.pass_rate_held is False


def test_without_trials_nothing_changes(golden: Path, tmp_path: Path) -> None:
    result = refinekit.eval.run(golden, target=answer, judge=good, db=tmp_path / "r.db")

    assert result.summary.trials is None
    assert all(c.trials == [] for c in result.cases)
    assert "trials" not in result.run.summary


@pytest.mark.parametrize("trials", [0, 51, 2.5, True])
def test_bad_trials_are_usage_problems(golden: Path, tmp_path: Path, trials: Any) -> None:
    with pytest.raises(UsageProblem, match="trials"):
        refinekit.eval.run(golden, target=answer, judge=good, trials=trials, db=tmp_path / "r.db")


def test_the_cli_prints_one_row_per_case_and_the_pass_k_lines(golden: Path, cli: Cli) -> None:
    result = cli(
        "eval",
        str(golden),
        "--target",
        f"{__name__}:answer",
        "--judge",
        f"{__name__}:good",
        "--trials",
        "3",
    )

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    header = next(i for i, line in enumerate(lines) if "outcome" in line and "trials" in line)
    rows = [line.split() for line in lines[header + 1 :] if line[:4].strip().isdigit()]
    assert [r[:3] for r in rows] == [
        ["1", "pass", "3/3"],
        ["2", "FAIL", "2/3"],
        ["3", "FAIL", "0/3"],
    ]
    lo, hi = wilson_interval(1, 3)
    assert (
        f"trials: 3 per case; pass^3 0.333 (1/3, 95% {lo:.3f} to {hi:.3f}): every trial passed "
        "(the pass rate); pass@3 0.667"
    ) in result.out
    assert "1 of 3 cases flipped between trials (mean flip rate 0.222" in result.out


def test_the_report_has_one_row_per_case_and_the_pass_k_table(golden: Path, tmp_path: Path) -> None:
    from refinekit.eval._report import eval_report
    from refinekit.eval._store._sqlite import SQLiteStore

    db = tmp_path / "r.db"
    result = refinekit.eval.run(golden, target=answer, judge=good, trials=3, db=db)

    with SQLiteStore(db) as store:
        html = eval_report(store, result.run_id)

    cases = html[html.index('<table class="wide cases">') :]
    cases = cases[: cases.index("</table>")]
    assert cases.count("<tr>") == 1 + 3  # the header and one row per case, not 9
    assert 'id="trials"' in html
    assert '<td>pass^3</td><td>every trial</td><td class="n">1/3</td>' in html
    assert '<td>pass@3</td><td>at least one trial</td><td class="n">2/3</td>' in html
