"""The relevancy judge: is the answer in line with the context, for the question?

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key):

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_relevancy.py
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
ANSWERS = {
    "on-topic answer": "Yes, if the order is unused and you ask within seven days of delivery.",
    "off-topic answer": "Our headphones come in black and in white.",
}
SCRIPTED = ["Yes, it is in line with the context.", "No."]  # the scripted judge's replies


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        relevancy = judges.relevancy(jm)  # in an app: @retry_on_low_quality(evaluator=relevancy)
        print(f"relevancy judge, question: {QUESTION}")
        for label, answer in ANSWERS.items():
            request = EvaluationRequest(question=QUESTION, answer=answer, context=(POLICY,))
            verdict = relevancy.evaluate(request)
            outcome = "passed" if verdict.passed else "failed"
            print(f"  {label}: {outcome} (the judge said {verdict.metadata['reply']!r})")
            if verdict.feedback:
                print(f"    feedback for the next attempt: {verdict.feedback}")


if __name__ == "__main__":
    main()
