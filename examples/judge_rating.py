"""The rating judge: a 1-to-4 rating with one sentence of feedback, read with instructor.

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key); a server without JSON mode wants `judges.rating(jm, mode="MD_JSON")`:

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_rating.py
"""

from __future__ import annotations

from contextlib import ExitStack

from _endpoint import judge_model  # scripted server, or the endpoint you configured

from refinekit import ContextDocument, EvaluationRequest, judges

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
ANSWERS = [
    "Yes, you can get a full refund, no questions asked.",
    "Yes, if the order is unused and you ask within seven days of delivery.",
]
SCRIPTED = [  # the scripted judge's replies: JSON, what instructor reads in JSON mode
    '{"rating": 2, "feedback": "The answer drops the conditions: unused, within seven days."}',
    '{"rating": 4, "feedback": "Correct, complete and supported by the policy."}',
]


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        rating = judges.rating(jm, scale=4, passing=3)
        print(f"rating judge (1 to 4, passing at 3), question: {QUESTION}")
        for answer in ANSWERS:
            request = EvaluationRequest(question=QUESTION, answer=answer, context=(POLICY,))
            verdict = rating.evaluate(request)
            outcome = "passed" if verdict.passed else "failed"
            print(f"  {answer!r}")
            print(
                f"    rating {verdict.metadata['rating']}/4, score {verdict.score:.2f}: {outcome}"
            )
            print(f"    feedback: {verdict.feedback}")


if __name__ == "__main__":
    main()
