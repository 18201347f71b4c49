"""Rule checks composed with all_of, guarding a @retry_on_low_quality function. Offline.

The "model" and the "judge" are deterministic stand-ins (no network, no model): the model
forgets to cite its source, then cites it once the feedback asks for it. The cheap rule checks
run first, so the stand-in judge (think: a paid model call) only runs on an answer that passed
them. Run: python examples/evaluators_demo.py
"""

from __future__ import annotations

import refinekit
from refinekit import (
    EvaluationRequest,
    Event,
    Verdict,
    checks,
    record_context,
    retry_on_low_quality,
)

DOCS = [
    {"text": "Employees get 25 days of paid leave per year.", "source": "handbook/leave.md"},
    {"text": "Salaries are paid on the last working day.", "source": "handbook/payroll.md"},
]

judge_calls = 0


def stand_in_judge(request: EvaluationRequest) -> Verdict:
    """Stands for a model judge: the last and most expensive evaluator."""
    global judge_calls
    judge_calls += 1
    says_days = "days" in request.answer
    return Verdict(
        passed=says_days,
        score=1.0 if says_days else 0.0,
        feedback="" if says_days else "State the number of days.",
    )


def stand_in_model(prompt: str) -> str:
    """Cites the source only when the prompt asks for it."""
    if "Cite the source" in prompt:
        return "Employees get 25 days of paid leave per year (handbook/leave.md)."
    return "Employees get 25 days of paid leave per year."


evaluator = checks.all_of(
    checks.not_empty(),
    checks.max_length(300),
    checks.cites_source(),
    stand_in_judge,
)


@retry_on_low_quality(evaluator=evaluator, max_retries=2, wait=0)
def answer(question: str) -> str:
    record_context(DOCS)
    # on a retry: the rejected answer, then the feedback, added to the prompt
    prompt = refinekit.retry_prompt(f"Answer from the documents.\nQuestion: {question}")
    reply = stand_in_model(prompt)
    attempt = refinekit.current_attempt()  # None only when called undecorated
    print(f"attempt {attempt.number if attempt else '-'}: {reply!r}")
    return reply


def show(event: Event) -> None:
    if event.kind == "verdict" and event.verdict is not None:
        verdict = event.verdict
        outcome = "passed" if verdict.passed else "failed"
        criteria = ", ".join(f"{c.name}={c.outcome}" for c in verdict.criteria)
        print(f"  verdict: {outcome} (score {verdict.score:.2f}); {criteria}")
    elif event.kind == "retry":
        print(f"  retrying with feedback: {event.feedback}")


def main() -> None:
    print("(offline: deterministic stand-in model and judge, no network)")
    with refinekit.subscribe(show):
        result = answer("How many days of paid leave do I get?")
    print("caller got:", result)
    print(f"stand-in judge calls: {judge_calls} (skipped on the answer that cited nothing)")


if __name__ == "__main__":
    main()
