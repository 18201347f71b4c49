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
import re
import sys
import tempfile
from pathlib import Path

from refinekit.cli import main as refinekit
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI, set_testing

HERE = Path(__file__).resolve().parent

# --- what the scripted server answers -------------------------------------------------------

# The answering model: the reply to each question, on main (v1) and on the branch (v2), which
# asks for one short sentence. On main, the first reply to "When will I get my refund?" forgets
# its citation; cites_source rejects it and the retry cites.
MAIN = {
    "How long do I have to return an item?": "You have 30 days from delivery to return an "
    "unused item [policies/refunds.md].",
    "When will I get my refund?": "Refunds go back to your original payment method within 5 "
    "business days [policies/refunds.md].",
    "Do you ship to Canada?": "Yes, we ship to Canada [policies/shipping.md].",
    "How long does express shipping take?": "Express shipping takes 1 to 2 business days "
    "[policies/shipping.md].",
    "Can I pay by invoice?": "Yes, anyone can pay by invoice [policies/payment.md].",
    "Do you accept PayPal?": "Yes, we accept PayPal and cards [policies/payment.md].",
    "What does the warranty cover?": "Every product has a two-year warranty against "
    "manufacturing defects [policies/warranty.md].",
    "Is accidental damage covered by the warranty?": "No, accidental damage is not covered by "
    "the warranty [policies/warranty.md].",
    "How do I delete my account?": "Go to Settings > Privacy to delete your account; deletion "
    "is final after 14 days [policies/accounts.md].",
    "Are your stores open on Sunday?": "No, our stores are shut on Sundays [policies/stores.md].",
}
UNCITED = "Refunds go back to your original payment method within 5 business days."
BRANCH = {
    "How long do I have to return an item?": "Within 30 days of delivery, if unused "
    "[policies/refunds.md].",
    "When will I get my refund?": "Within 5 business days [policies/refunds.md].",
    "Do you ship to Canada?": "Yes [policies/shipping.md].",
    "How long does express shipping take?": "Express shipping is next-day [policies/shipping.md].",
    "Can I pay by invoice?": "Only business customers with an account can pay by invoice "
    "[policies/payment.md].",
    "Do you accept PayPal?": "Yes, we accept PayPal [policies/payment.md].",
    "What does the warranty cover?": "A lifetime warranty against defects [policies/warranty.md].",
    "Is accidental damage covered by the warranty?": "No, accidental damage is not covered "
    "[policies/warranty.md].",
    "How do I delete my account?": "In Settings > Privacy [policies/accounts.md].",
    "Are your stores open on Sunday?": "No, our stores are shut on Sundays [policies/stores.md].",
}

# The judge: its probability that each answer is grounded (it replies YES or NO with these
# token probabilities, which the criteria judge reads from the logprobs). Golden answers
# first, then the answers of the labelled set.
GROUNDED = {
    MAIN["How long do I have to return an item?"]: 0.97,
    MAIN["When will I get my refund?"]: 0.96,
    MAIN["Do you ship to Canada?"]: 0.95,
    MAIN["How long does express shipping take?"]: 0.96,
    MAIN["Can I pay by invoice?"]: 0.10,  # "anyone": the context says business customers
    MAIN["Do you accept PayPal?"]: 0.94,
    MAIN["What does the warranty cover?"]: 0.97,
    MAIN["Is accidental damage covered by the warranty?"]: 0.95,
    MAIN["How do I delete my account?"]: 0.93,
    MAIN["Are your stores open on Sunday?"]: 0.92,
    BRANCH["How long do I have to return an item?"]: 0.93,
    BRANCH["When will I get my refund?"]: 0.90,
    BRANCH["Do you ship to Canada?"]: 0.85,
    BRANCH["How long does express shipping take?"]: 0.08,
    BRANCH["Can I pay by invoice?"]: 0.95,
    BRANCH["Do you accept PayPal?"]: 0.96,
    BRANCH["What does the warranty cover?"]: 0.05,
    BRANCH["Is accidental damage covered by the warranty?"]: 0.95,
    BRANCH["How do I delete my account?"]: 0.90,
    # the labelled set: people passed these ...
    "You can return an unused order within 30 days of delivery.": 0.98,
    "Refunds go back to your original payment method within 5 business days.": 0.97,
    "Yes, we ship to Canada.": 0.96,
    "Standard shipping takes 3 to 5 business days.": 0.95,
    "Yes, we accept PayPal.": 0.93,
    "Business customers with an account can pay by invoice.": 0.92,
    "Products have a two-year warranty against manufacturing defects.": 0.90,
    "No, accidental damage is not covered.": 0.88,
    "Go to Settings > Privacy to delete your account.": 0.85,
    "No. We're open Monday to Saturday.": 0.70,
    "Deletion becomes final 14 days after you ask.": 0.55,
    "Express shipping gets it to you in a day or two.": 0.30,
    # ... and failed these
    "Yes, anyone can pay by invoice.": 0.90,
    "You can return any order within 30 days.": 0.75,
    "Refunds take about a week.": 0.60,
    "We ship worldwide.": 0.45,
    "The warranty covers accidental damage for two years.": 0.35,
    "Stores are open every day from 9:00 to 18:00.": 0.20,
    "Express shipping takes 3 to 5 business days.": 0.15,
    "You cannot delete your account.": 0.10,
    "We only accept cards.": 0.08,
    "Every product has a lifetime warranty.": 0.05,
    "Refunds are paid in store credit only.": 0.04,
    "We do not ship to Canada.": 0.02,
}


def answering_model(request: RecordedRequest) -> str:
    """Stands in for the answering model: the scripted reply to the question it was sent."""
    system, user = (m["content"] for m in request.body["messages"])
    question = re.search(r"Question: (.*)", user).group(1)
    if "one short sentence" in system:
        return BRANCH[question]
    if question == "When will I get my refund?" and "rejected" not in user:
        return UNCITED
    return MAIN[question]


def judge_model(request: RecordedRequest) -> Reply:
    """Stands in for the judge: YES or NO, with its scripted probability as logprobs."""
    prompt = request.body["messages"][-1]["content"]
    answer = re.search(r"<answer>\n(.*?)\n</answer>", prompt, re.DOTALL).group(1)
    p = GROUNDED[answer]
    if p >= 0.5:
        return Reply.text("YES", {"YES": p, "NO": round(1 - p, 2)})
    return Reply.text("NO", {"NO": round(1 - p, 2), "YES": p})


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
