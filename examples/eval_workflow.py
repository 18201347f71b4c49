"""Evaluation as a workflow: `refinekit eval`, `refinekit calibrate` and `refinekit runs`.

The application is examples/_workflow_app.py: a help-centre answer function (decorated with
`@retry_on_low_quality` and `cites_source`) and a `criteria` judge, `grounded`. The golden set
is examples/golden_docs.csv (question, must_mention, expected_source: the judge checks each
answer against the documents the function recorded with `record_context`); the labelled set,
for calibrating the judge, is examples/labelled_docs.csv (question, context, answer, label).
The cadence, as a team would run it (see docs/workflow.md):

1. on every commit: the golden set with its column checks only, no judge model;
2. before a merge: main's function with the judge, then the branch's function with the judge,
   `--min-pass-rate` and `--compare previous`;
3. when the judge changes: `refinekit calibrate` on the labelled set, with `--min-kappa`.

A refinekit.testing.ScriptedOpenAI server on 127.0.0.1 plays the answering model and the
judge (offline, nothing leaves the machine): its replies are scripted, so this shows the
workflow, not a model's quality. Runs go to a temporary store (--db), and the testing switch
makes every backoff instant. It exits 0 only when every outcome is the expected one.

Run: python examples/eval_workflow.py
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

from _workflow_models import answering_model, judge_model

from refinekit.cli import main as refinekit
from refinekit.testing import Reply, ScriptedOpenAI, set_testing

HERE = Path(__file__).resolve().parent

# --- the workflow -----------------------------------------------------------------------------


class _Tee(io.StringIO):
    """What the command prints: shown, and kept for the checks below."""

    def __init__(self) -> None:
        super().__init__()
        self.shown = sys.stdout

    def write(self, text: str) -> int:
        self.shown.write(text)
        return super().write(text)


def run(title: str, *argv: str) -> tuple[int, str]:
    print(f"\n=== {title}\n$ refinekit {' '.join(argv)}")
    out = _Tee()
    with contextlib.redirect_stdout(out):
        status = refinekit(list(argv))
    print(f"(exit status {status})")
    return status, out.getvalue()


def main() -> int:
    print("offline: a ScriptedOpenAI server on 127.0.0.1 plays the answering model and the judge;")
    print("its replies are scripted, so this shows the workflow, not a model's quality")
    problems: list[str] = []

    def expect(status: int, output: str, wanted: int, *lines: str) -> None:
        if status != wanted:
            problems.append(f"exit status {status}, expected {wanted}")
        problems.extend(
            f"missing from the output: {line!r}" for line in lines if line not in output
        )

    cwd = os.getcwd()
    with (
        ScriptedOpenAI() as server,
        set_testing(),
        tempfile.TemporaryDirectory() as tmp,
    ):
        server.script("shop-model", [answering_model] * 40)
        # the judge's first request is rate limited (HTTP 429): eval backs off and asks again
        server.script("judge", [Reply.error(429, "slow down"), *[judge_model] * 60])
        # the application's clients read these, as they would read your endpoint's
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted-key"
        db = str(Path(tmp) / "runs.db")
        os.chdir(HERE)  # the data files' folder; _workflow_app is importable from here
        try:
            status, out = run(
                "1. every commit: the golden set's own column checks, no judge model",
                "eval", "golden_docs.csv", "--target", "_workflow_app:answer", "--db", db,
            )  # fmt: skip
            expect(
                status,
                out,
                0,
                "pass rate 0.900 (9/10), 95% Wilson interval 0.596 to 0.982, over 10 cases",
                "-> Mention 'closed'.",
                "attempts per answer: mean 1.10, max 2",
            )

            status, out = run(
                "2a. before a merge: main's function, judged",
                "eval", "golden_docs.csv", "--target", "_workflow_app:answer",
                "--judge", "_workflow_app:grounded", "--min-pass-rate", "0.4", "--db", db,
            )  # fmt: skip
            expect(
                status,
                out,
                0,
                "pass rate 0.800 (8/10), 95% Wilson interval 0.490 to 0.943",
                "-> Say only what the context supports, with its conditions.",
                "rate limited: backed off once",
                "gate: lower bound 0.490 >= --min-pass-rate 0.400: pass",
            )
            # the judge checked each answer against the documents the function retrieved
            prompts = [r.body["messages"][-1]["content"] for r in server.requests_for("judge")]
            if not all("(source: policies/" in prompt for prompt in prompts):
                problems.append("the judge did not see the documents the function recorded")

            status, out = run(
                "2b. before a merge: the branch's function, judged and compared with main's run",
                "eval", "golden_docs.csv", "--target", "_workflow_app:answer_v2",
                "--judge", "_workflow_app:grounded", "--min-pass-rate", "0.4",
                "--compare", "previous", "--db", db,
            )  # fmt: skip
            expect(
                status,
                out,
                1,
                "pass rate 0.600 (6/10)",
                "gate: lower bound 0.313 is under --min-pass-rate 0.400: FAIL",
                "compare with run 2: 10 questions judged in both runs; 3 regressed, 1 improved; "
                "exact McNemar p = 0.6250",
                "improved: #5 Can I pay by invoice?",
            )

            status, out = run(
                "3. when the judge changes: calibrate it on answers people labelled",
                "calibrate", "labelled_docs.csv", "--judge", "_workflow_app:grounded",
                "--min-kappa", "0.6", "--db", db,
            )  # fmt: skip
            expect(
                status,
                out,
                0,
                "judged 24 items",
                "accuracy 0.833",
                "as a criterion: Criterion(..., pass_at=0.850, fail_at=0.450)",
                "gate: Cohen's kappa 0.667 >= --min-kappa 0.600: pass",
            )

            status, out = run("the run store", "runs", "--db", db)
            expect(status, out, 0, "calibrate complete")
        finally:
            os.chdir(cwd)

    print()
    if problems:
        print("NOT as expected:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print("every outcome as expected: the branch's run failed its pass-rate gate (exit 1),")
    print("and the judge's recommended thresholds are pass_at=0.850, fail_at=0.450")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
