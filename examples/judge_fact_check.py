"""The fact_check judge: does the context (the document) support the answer (the claim)?

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key). A small fact-checking model such as Bespoke-MiniCheck wants
`judges.fact_check(jm, prompt="minicheck")`:

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_fact_check.py
"""

from __future__ import annotations

from contextlib import ExitStack

from _endpoint import judge_model  # scripted server, or the endpoint you configured

from refinekit import ContextDocument, EvaluationRequest, judges

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
CLAIMS = [
    "An unused order can be refunded within a week of delivery.",
    "Any order can be refunded within thirty days.",
]
SCRIPTED = ["Yes", "No"]  # the scripted judge's replies, in order


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        fact_check = judges.fact_check(jm)
        print(f"fact_check judge, document: {POLICY.text}")
        for claim in CLAIMS:
            verdict = fact_check.evaluate(EvaluationRequest(answer=claim, context=(POLICY,)))
            outcome = "supported" if verdict.passed else "NOT supported"
            print(f"  {claim!r}: {outcome} (the judge said {verdict.metadata['reply']!r})")


if __name__ == "__main__":
    main()
