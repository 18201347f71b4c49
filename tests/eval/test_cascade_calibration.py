"""A cascade judge in a calibration and in an eval: the fit stored, read back, reported, applied.

The cascade: `checks.numbers_supported()` (a fail is certain, confidence 1; a pass carries no
confidence, so the next level judges it), then a model level whose probability that the answer
passes is scripted per answer: a criteria judge over real HTTP to the scripted server, or a
function returning the same probability (for the command line, which imports it by name).

Eleven labelled answers to "When does the store open?" (the context: it opens at 9 and
closes at 17):

- f1 to f5 give a number the context does not hold; people fail them; the check fails them
  (confidence 1). The model passes f1 to f3 (P 0.9: wrong) and fails f4, f5 (P 0.1).
- b1 to b6 hold no wrong number (the check passes them, no confidence); the model's P(pass),
  its confidence and people's label: b1 0.955 (0.955, pass), b2 0.905 (0.905, pass), b3
  0.035 (0.965, fail), b4 0.805 (0.805, fail: wrong), b5 0.605 (0.605, pass), b6 0.195
  (0.805, pass: wrong).

Fitted at agreement 0.6 with risk 0.1 (`fit_cascade`: each path of levels, both levels or
the model alone, gets risk 0.05; one threshold t for a path's levels, tried from 1.0 down by
0.01 once it keeps at least 6 items, the fewest that can pass; each t is kept while
P(Bin(kept, 0.4) <= wrong) <= 0.05). Both levels: t = 0.96 keeps f1 to f5 and b3 (p = 0.6 ** 6
= 0.047); 0.95 adds b1, 0.90 b2 (8 kept, none wrong: p = 0.6 ** 8 = 0.0168); 0.80 adds b4 and
b6, both wrong (10 kept, 2 wrong: p = 0.167), so the sequence stops at t = 0.81. The model
alone: t = 0.90 keeps 8 with 3 wrong (f1 to f3): p = 0.59, no threshold. So the fit is 0.81 at
both levels. The fitted cascade then: the check decides f1 to f5 (5 of 11, all agreeing), the
model b1, b2, b3 (3 of 11, all agreeing), and it abstains on b4, b5, b6 (3 of 11). Model calls
per verdict: 0 for the five the check decided, 1 for each of the six others: 6 / 11, against 1
for the model alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import Cli, judge_replies, write_csv

import refinekit.eval
from refinekit import EvaluationRequest, Verdict, checks, judges
from refinekit.eval import EvalOptions, UsageProblem
from refinekit.eval._plans import EvalPlan
from refinekit.eval._report import calibration_report
from refinekit.eval._resume import start
from refinekit.eval._store import open_store
from refinekit.eval._store._sqlite import SQLiteStore
from refinekit.eval._workflow import _for_worker
from refinekit.testing import ScriptedOpenAI

CONTEXT = "The store opens at 9 and closes at 17."
ANSWERS = {
    "f1": ("It opens at 10.", 0.9, "fail"),
    "f2": ("It opens at 8.", 0.9, "fail"),
    "f3": ("It opens at 11.", 0.9, "fail"),
    "f4": ("It opens at 12.", 0.1, "fail"),
    "f5": ("It closes at 18.", 0.1, "fail"),
    "b1": ("It opens at 9.", 0.955, "pass"),
    "b2": ("It closes at 17.", 0.905, "pass"),
    "b3": ("It never opens.", 0.035, "fail"),
    "b4": ("It opens at 9 in the evening.", 0.805, "fail"),
    "b5": ("It opens in the morning.", 0.605, "pass"),
    "b6": ("It opens at 9 on weekdays.", 0.195, "pass"),
}
P_PASS = {text: p for text, p, _ in ANSWERS.values()}


def given(question: str, answer: str) -> str:
    """The eval's answer function: the labelled answer, as written."""
    return answer


def model_like(request: EvaluationRequest) -> Verdict:
    """The model level as a function: the same probability, in the verdict's metadata."""
    p = P_PASS[request.answer]
    return Verdict(passed=p >= 0.5, score=p, metadata={"probability": p})


CASCADE = judges.cascade(("numbers", checks.numbers_supported()), ("model", model_like))
NOT_A_CASCADE = model_like


def criteria_cascade(client: openai.OpenAI) -> judges.Cascade:
    criterion = judges.Criterion("right", "Is the answer right?", pass_at=0.5, fail_at=0.5)
    model = judges.criteria(judges.JudgeModel(client, "judge"), [criterion])
    return judges.cascade(("numbers", checks.numbers_supported()), ("model", model))


@pytest.fixture
def labelled(tmp_path: Path) -> Path:
    rows = [
        {"question": "When does the store open?", "answer": text, "context": CONTEXT, "label": lab}
        for text, _, lab in ANSWERS.values()
    ]
    return write_csv(tmp_path / "labelled.csv", rows)


@pytest.fixture
def scripted(scripted_openai: ScriptedOpenAI) -> ScriptedOpenAI:
    scripted_openai.script("judge", judge_replies(P_PASS), times=None)
    return scripted_openai


def check_fit(k: Any) -> None:
    """The fitted cascade's figures, worked in the module's docstring."""
    assert k is not None
    assert (k.target, k.risk, k.items) == (0.6, 0.1, 11)
    assert [level.name for level in k.levels] == ["numbers", "model"]
    assert [level.threshold for level in k.levels] == [pytest.approx(0.81)] * 2
    assert [level.decided for level in k.levels] == [5, 3]
    assert [level.share for level in k.levels] == [pytest.approx(5 / 11), pytest.approx(3 / 11)]
    assert [level.agreement for level in k.levels] == [1.0, 1.0]
    assert [level.guaranteed for level in k.levels] == [0.6, 0.6]
    # alone: the check agrees on f1-f5, b1, b2, b5, b6; the model on f4, f5, b1, b2, b3, b5
    assert [level.alone for level in k.levels] == [pytest.approx(9 / 11), pytest.approx(6 / 11)]
    assert [level.calls for level in k.levels] == [0.0, 1.0]
    assert (k.abstained, k.abstained_share) == (3, pytest.approx(3 / 11))
    assert k.coverage == pytest.approx(8 / 11)
    assert (k.agreement, k.kappa) == (1.0, 1.0)
    assert (k.both_pass, k.human_fail_only, k.judge_fail_only, k.both_fail) == (2, 0, 0, 6)
    assert k.calls_per_verdict == pytest.approx(6 / 11)
    assert k.strongest_calls == 1.0
    assert k.fit["thresholds"] == [pytest.approx(0.81)] * 2
    assert k.fit["p_value"] == pytest.approx(0.6**8)


def test_calibrating_a_cascade_fits_it_and_stores_the_fit(
    labelled: Path, tmp_path: Path, scripted: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    db = tmp_path / "runs.db"

    result = refinekit.eval.calibrate(
        labelled, judge=criteria_cascade(judge_client), db=db, target=0.6, risk=0.1
    )

    check_fit(result.calibration.cascade)
    # every level ran on every item: the model was asked of all eleven, over HTTP
    assert len(scripted.requests_for("judge")) == 11
    # stored with the run's figures, as the eval reads them back
    with SQLiteStore(db) as store:
        stored = store.run(result.run_id).summary["cascade"]
    assert stored["fit"]["thresholds"] == [pytest.approx(0.81)] * 2
    assert (stored["target"], stored["risk"]) == (0.6, 0.1)
    assert [level["decided"] for level in stored["levels"]] == [5, 3]
    # the abstained share is under a half: no warning
    assert not any("abstains" in w for w in result.calibration.warnings)


def test_the_fit_is_priced_against_the_strongest_level_alone(
    labelled: Path, tmp_path: Path, scripted: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    result = refinekit.eval.calibrate(
        labelled,
        judge=criteria_cascade(judge_client),
        db=tmp_path / "runs.db",
        target=0.6,
        risk=0.1,
        prices={"judge": (1.0, 4.0)},
    )

    k = result.calibration.cascade
    assert k is not None
    per_call = sum(c.cost["judge"] for c in result.cases) / 11  # every level ran: 11 calls
    assert per_call > 0
    assert k.strongest_cost == pytest.approx(per_call)
    assert k.cost_per_verdict == pytest.approx(6 / 11 * per_call)


def test_a_target_no_level_reaches_abstains_everywhere_and_warns(
    labelled: Path, tmp_path: Path
) -> None:
    # at 0.9 a test needs 29 kept items with no error (0.9 ** 29 < 0.05): 11 never pass
    result = refinekit.eval.calibrate(labelled, judge=CASCADE, db=tmp_path / "runs.db")

    k = result.calibration.cascade
    assert k is not None
    assert (k.target, k.risk) == (0.9, 0.1)  # the defaults
    assert [level.threshold for level in k.levels] == [None, None]
    assert [level.guaranteed for level in k.levels] == [None, None]
    assert (k.abstained, k.coverage) == (11, 0.0)
    assert k.agreement is None
    assert k.calls_per_verdict == 0.0  # a level that can decide nothing is not asked
    assert (
        "the fitted cascade abstains on 11 of 11 items (100%): no level's verdicts reach "
        "agreement 0.90 at risk 0.10 on the rest; lower --target-agreement, label more "
        "items, or use stronger levels"
    ) in result.calibration.warnings


def test_a_judge_that_is_no_cascade_has_no_fit(labelled: Path, tmp_path: Path) -> None:
    result = refinekit.eval.calibrate(labelled, judge=model_like, db=tmp_path / "runs.db")

    assert result.calibration.cascade is None
    assert result.run.summary["cascade"] is None


def test_the_report_shows_each_level(labelled: Path, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = refinekit.eval.calibrate(labelled, judge=CASCADE, db=db, target=0.6)

    with SQLiteStore(db) as store:
        html = calibration_report(store, result.run_id, result.calibration)

    assert 'id="cascade"' in html
    assert (
        '<tr><td>numbers</td><td class="n">0.810</td><td class="n">5</td>'
        '<td class="n">0.455</td><td class="n">&ge; 0.600</td><td class="n">1.000</td>'
        '<td class="n">0.818</td><td class="n">0</td></tr>'
    ) in html
    assert "abstained (3 of 11 items)" in html
    assert "<b>0.55</b> model calls, against 1 for the strongest level alone" in html


# --- eval --calibration: the stored fit applied ---------------------------------------------


def test_eval_with_the_calibration_judges_with_its_fit(
    labelled: Path, tmp_path: Path, scripted: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    db = tmp_path / "runs.db"
    cascade = criteria_cascade(judge_client)
    run = refinekit.eval.calibrate(labelled, judge=cascade, db=db, target=0.6).run_id
    asked = len(scripted.requests_for("judge"))

    result = refinekit.eval.run(
        labelled, target=given, judge=cascade, calibration=run, db=db, min_pass_rate=0.1
    )

    # the check decided f1-f5 with no model call; the model was asked of the six others
    assert len(scripted.requests_for("judge")) - asked == 6
    assert (result.summary.passed, result.summary.failed) == (2, 6)
    assert result.summary.inconclusive == 3  # b4, b5, b6: no level sure enough
    shares = result.summary.cascade
    assert shares is not None
    assert shares["items"] == 11
    assert [x["decided"] for x in shares["levels"]] == [5, 3]
    assert [x["name"] for x in shares["levels"]] == ["numbers", "model"]
    assert shares["levels"][0]["share"] == pytest.approx(5 / 11)
    assert (shares["abstained"], shares["abstained_share"]) == (3, pytest.approx(3 / 11))
    assert result.cascade_fit is not None
    assert result.cascade_fit["calibration_run"] == run
    assert result.cascade_fit["thresholds"] == [pytest.approx(0.81)] * 2
    assert result.run.summary["cascade_fit"]["calibration_run"] == run
    assert result.run.summary["cascade"]["levels"][1]["decided"] == 3
    # corrected with the fitted cascade's own table on the items it decided (2 of 2 people's
    # passes passed, 6 of 6 failures failed), not with the unfitted cascade's
    assert result.corrected is not None
    assert result.corrected.calibration.sensitivity == 1.0
    assert result.corrected.calibration.specificity == 1.0
    # the caller's cascade is not changed
    assert cascade.thresholds is None
    html = refinekit.eval.html_report(result)
    assert f"judged with the fit of calibration run <code>{run}</code>" in html
    assert '<tr><td>model</td><td class="n">3</td><td class="n">0.273</td></tr>' in html


def test_without_a_calibration_a_cascade_runs_unfitted(
    labelled: Path, tmp_path: Path, scripted: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    result = refinekit.eval.run(
        labelled, target=given, judge=criteria_cascade(judge_client), db=tmp_path / "r.db"
    )

    # unfitted: a certain fail stops early, the last level decides the rest
    assert result.cascade_fit is None
    shares = result.summary.cascade
    assert shares is not None
    assert [x["decided"] for x in shares["levels"]] == [5, 6]
    assert shares["abstained"] == 0
    assert "cascade_fit" not in result.run.summary


def test_a_calibration_without_a_fit_is_a_usage_problem(labelled: Path, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run = refinekit.eval.calibrate(labelled, judge=model_like, db=db).run_id

    with pytest.raises(UsageProblem, match=f"calibration run {run} stored no cascade fit"):
        refinekit.eval.run(labelled, target=given, judge=CASCADE, calibration=run, db=db)


def test_a_fit_of_another_number_of_levels_is_a_usage_problem(
    labelled: Path, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    run = refinekit.eval.calibrate(labelled, judge=CASCADE, db=db, target=0.6).run_id
    three = judges.cascade(
        ("numbers", checks.numbers_supported()), ("model", model_like), ("again", model_like)
    )

    with pytest.raises(UsageProblem, match="its cascade fit has 2 levels and this run's cascade"):
        refinekit.eval.run(labelled, target=given, judge=three, calibration=run, db=db)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target": 1.0}, "target must be a number above 0 and below 1, got 1.0"),
        ({"target": 0}, "target must be a number above 0 and below 1, got 0"),
        ({"risk": float("nan")}, "risk must be a number above 0 and below 1, got nan"),
        ({"risk": "0.1"}, "risk must be a number above 0 and below 1, got '0.1'"),
        ({"target": True}, "target must be a number above 0 and below 1, got True"),
    ],
)
def test_bad_targets_and_risks_are_usage_problems(
    labelled: Path, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageProblem, match=message.replace("(", r"\(")):
        refinekit.eval.calibrate(labelled, judge=CASCADE, db=tmp_path / "r.db", **options)
    assert not (tmp_path / "r.db").exists()  # nothing ran


# --- the command line ---------------------------------------------------------------------------


def test_calibrate_prints_the_fitted_levels(labelled: Path, tmp_path: Path, cli: Cli) -> None:
    report = tmp_path / "calibration.html"

    result = cli(
        "calibrate",
        str(labelled),
        "--judge",
        f"{__name__}:CASCADE",
        "--target-agreement",
        "0.6",
        "--risk",
        "0.1",
        "--report",
        str(report),
    )

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("cascade fitted on"))
    assert lines[start] == (
        "cascade fitted on 11 items: each level's kept verdicts agree with people at 0.60 or "
        "better, with probability 0.90 (--target-agreement 0.6, --risk 0.1); `refinekit eval "
        "--calibration RUN` applies it"
    )
    # level, threshold, decided, share, guaranteed, observed, alone, model calls
    assert lines[start + 2] == (
        f"  {'numbers':<28}     0.810        5   0.45      >=0.60      1.00   0.82      0"
    )
    assert lines[start + 3] == (
        f"  {'model':<28}     0.810        3   0.27      >=0.60      1.00   0.55      1"
    )
    assert lines[start + 4] == (
        "  abstained (no level sure enough): 3 items (0.27); decided 0.73, agreement 1.000, "
        "kappa 1.000"
    )
    assert lines[start + 5] == (
        "  cost per verdict: 0.55 model calls, against 1 for the strongest level alone"
    )
    assert 'id="cascade"' in report.read_text(encoding="utf-8")


def test_eval_says_which_fit_it_used_and_the_share_of_each_level(
    labelled: Path, tmp_path: Path, cli: Cli
) -> None:
    db = str(tmp_path / "runs.db")
    calibrated = cli(
        "calibrate", str(labelled), "--judge", f"{__name__}:CASCADE", "--db", db,
        "--target-agreement", "0.6",
    )  # fmt: skip
    assert calibrated.code == 0, calibrated.err

    result = cli(
        "eval", str(labelled), "--target", f"{__name__}:given", "--judge", f"{__name__}:CASCADE",
        "--calibration", "1", "--db", db,
    )  # fmt: skip

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert (
        "cascade: the fit of calibration run 1 (agreement >= 0.60 at risk 0.10; thresholds "
        "0.810, 0.810)"
    ) in lines
    assert (
        "cascade levels, of 11 cases: numbers 5 (0.45), model 3 (0.27), abstained 3 (0.27)"
    ) in lines


def test_eval_with_a_calibration_of_no_cascade_exits_2(
    labelled: Path, tmp_path: Path, cli: Cli
) -> None:
    db = str(tmp_path / "runs.db")
    assert cli(
        "calibrate", str(labelled), "--judge", f"{__name__}:NOT_A_CASCADE", "--db", db
    ).code == 0  # fmt: skip

    result = cli(
        "eval", str(labelled), "--target", f"{__name__}:given", "--judge", f"{__name__}:CASCADE",
        "--calibration", "1", "--db", db,
    )  # fmt: skip

    assert result.code == 2
    assert "calibration run 1 stored no cascade fit" in result.err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--target-agreement", "0"), ("--target-agreement", "1.5"), ("--risk", "x"), ("--risk", "1")],
)
def test_bad_cascade_flags_exit_2(
    labelled: Path, tmp_path: Path, cli: Cli, flag: str, value: str
) -> None:
    result = cli("calibrate", str(labelled), "--judge", f"{__name__}:CASCADE", flag, value)

    assert result.code == 2
    assert "above 0 and below 1" in result.err


def test_the_stored_fit_is_json(labelled: Path, tmp_path: Path) -> None:
    result = refinekit.eval.calibrate(labelled, judge=CASCADE, db=tmp_path / "r.db", target=0.6)

    stored = result.run.summary["cascade"]
    again = refinekit.eval.CascadeFit.from_dict(json.loads(json.dumps(stored["fit"])))
    assert again.thresholds == (pytest.approx(0.81), pytest.approx(0.81))
    assert (again.target, again.risk, again.n) == (0.6, 0.1, 11)


def test_a_ray_worker_of_the_run_judges_with_the_same_fit(labelled: Path, tmp_path: Path) -> None:
    # what the driver sends each Ray worker: the fit's calibration run, applied there too
    db = tmp_path / "runs.db"
    run = refinekit.eval.calibrate(labelled, judge=CASCADE, db=db, target=0.6).run_id
    options = EvalOptions(labelled, target=given, judge=CASCADE, calibration=run, db=db)
    plan = EvalPlan(options)
    with open_store(plan.db) as store:
        plan.prepare(store)

    sent = _for_worker(plan, 7)

    assert sent.calibration == run
    assert sent.judge is CASCADE  # the worker fits its own copy, as the driver did
    assert isinstance(sent, EvalOptions)
    worker = EvalPlan(sent)
    with open_store(worker.db) as store:
        worker.apply_fit(store, run)
    assert isinstance(worker.judge, judges.Cascade)
    assert worker.judge.thresholds == (pytest.approx(0.81), pytest.approx(0.81))


def test_a_run_is_resumed_only_under_the_fit_its_verdicts_had(
    labelled: Path, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    fitted = refinekit.eval.calibrate(labelled, judge=CASCADE, db=db, target=0.6).run_id
    looser = refinekit.eval.calibrate(labelled, judge=CASCADE, db=db, target=0.4).run_id

    workers = iter(range(100))

    def started(calibration: int) -> int:
        options = EvalOptions(labelled, target=given, judge=CASCADE, calibration=calibration, db=db)
        plan = EvalPlan(options)
        with open_store(db) as store:
            plan.prepare(store)
            return start(store, plan, version="test", worker=f"w{next(workers)}").run.id

    with open_store(db) as store:
        fits = [store.run(r).summary["cascade"]["fit"]["thresholds"] for r in (fitted, looser)]
    assert fits[0] != fits[1]
    first = started(fitted)  # left running, unfinished
    assert started(fitted) == first  # the same command, the same fit: the same run
    assert started(looser) != first  # other thresholds: a run of its own
