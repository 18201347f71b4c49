"""Evaluation from Python: `refinekit.eval.run`, `calibrate`, `compare`, `html_report`, `runs`.

The same workflow as eval_workflow.py (see docs/workflow.md, "From Python"), as a CI script or
a notebook would run it: the answer functions and the judge are passed as objects, each call
owns its run from start to finish (stored, resumable), and returns its figures and gates
instead of printing them. The application is examples/_workflow_app.py; the golden and
labelled sets are examples/golden_docs.csv and examples/labelled_docs.csv.

A refinekit.testing.ScriptedOpenAI server on 127.0.0.1 plays the answering model and the
judge (offline, nothing leaves the machine): its replies are scripted, so this shows the API,
not a model's quality. Runs go to a temporary store, and the testing switch makes every
backoff instant. It exits 0 only when every outcome is the expected one.

Run: python examples/eval_python.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from _workflow_models import answering_model, judge_model

import refinekit.eval
from refinekit.testing import ScriptedOpenAI, set_testing

HERE = Path(__file__).resolve().parent


def main() -> int:
    print("offline: a ScriptedOpenAI server on 127.0.0.1 plays the answering model and the judge;")
    print("its replies are scripted, so this shows the API, not a model's quality")
    problems: list[str] = []

    def expect(what: str, got: object, wanted: object) -> None:
        if got != wanted:
            problems.append(f"{what}: {got!r}, expected {wanted!r}")

    with ScriptedOpenAI() as server, set_testing(), tempfile.TemporaryDirectory() as tmp:
        server.script("shop-model", [answering_model] * 40)
        server.script("judge", [judge_model] * 60)
        # the application's clients read these, as they would read your endpoint's
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted-key"
        from _workflow_app import answer, answer_v2, grounded

        db = Path(tmp) / "runs.db"
        finished: list[int] = []

        def progress(event: refinekit.eval.RunEvent) -> None:
            """What a progress bar would show: told as each case finishes."""
            if isinstance(event, refinekit.eval.RunStarted):
                print(f"run {event.run.id}: {event.cases} cases, {event.resumed} resumed")
            elif isinstance(event, refinekit.eval.CaseFinished):
                finished.append(event.done)

        # main's function, judged, gated on the pass rate's 95% lower bound
        main_run = refinekit.eval.run(
            HERE / "golden_docs.csv",
            target=answer,
            judge=grounded,
            min_pass_rate=0.4,
            db=db,
            on_event=progress,
        )
        s = main_run.summary
        print(
            f"main: pass rate {s.rate:.3f} ({s.passed}/{s.counted}), 95% lower bound "
            f"{s.lower:.3f}; gate held: {main_run.pass_rate_held}"
        )
        for case in main_run.cases:
            if case.outcome != "passed":
                print(f"  #{case.position} {case.outcome}: {case.question} -> {case.feedback}")
        expect("cases told", finished, list(range(1, 11)))
        expect("main passed", main_run.passed, True)

        # the branch's function, compared with main's run on the questions both share
        branch = refinekit.eval.run(
            HERE / "golden_docs.csv",
            target=answer_v2,
            judge=grounded,
            min_pass_rate=0.4,
            compare="previous",
            db=db,
        )
        c = branch.comparison
        assert c is not None
        print(
            f"branch: pass rate {branch.summary.rate:.3f}, lower bound {branch.summary.lower:.3f}; "
            f"against run {c.before.id}: {len(c.regressed)} regressed, {len(c.improved)} "
            f"improved, McNemar p = {c.p_value:.4f}"
        )
        print(f"branch gates: pass rate held {branch.pass_rate_held}, passed {branch.passed}")
        expect("branch passed", branch.passed, False)
        expect("regressed", [now.position for _, now in c.regressed], [3, 4, 7])

        # the judge, against people's labels
        cal = refinekit.eval.calibrate(HERE / "labelled_docs.csv", judge=grounded, db=db)
        k, t = cal.calibration, cal.calibration.thresholds
        assert k.kappa is not None
        assert t is not None
        print(f"calibrate: {k.items} items, kappa {k.kappa:.3f}, accuracy {k.accuracy:.3f}")
        print(f"  as a criterion: Criterion(..., pass_at={t.pass_at}, fail_at={t.fail_at})")
        expect("thresholds", (t.pass_at, t.fail_at), (0.85, 0.45))

        # the report of the branch's run, and the store
        report = Path(tmp) / "eval.html"
        html = refinekit.eval.html_report(branch, report)
        print(f"report: {len(html):,} characters, with the comparison: {'McNemar' in html}")
        for run in refinekit.eval.runs(db=db):
            print(f"  stored run {run.id}: {run.kind} {run.status}, target {run.target}")
    print()
    if problems:
        print("NOT as expected:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print("every outcome as expected: the branch regressed and failed its gate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
