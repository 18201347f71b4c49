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

import os
from contextlib import ExitStack
from typing import Any

import openai

from refinekit import ContextDocument, EvaluationRequest, judges
from refinekit.testing import ScriptedOpenAI

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
CLAIMS = [
    "An unused order can be refunded within a week of delivery.",
    "Any order can be refunded within thirty days.",
]
SCRIPTED = ["Yes", "No"]  # the scripted judge's replies, in order


def judge_model(stack: ExitStack, scripted: list[Any]) -> judges.JudgeModel:
    """The real endpoint when configured, else a scripted server answering `scripted`."""
    model = os.environ.get("REFINEKIT_JUDGE_MODEL")
    if os.environ.get("OPENAI_BASE_URL") and model:  # the client reads OPENAI_BASE_URL itself
        print(f"real endpoint (OPENAI_BASE_URL), judge model {model!r}")
        client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
        return judges.JudgeModel(stack.enter_context(client), model)
    server = stack.enter_context(ScriptedOpenAI())
    server.script("judge", scripted)
    print("scripted: a ScriptedOpenAI server on 127.0.0.1 plays the judge; its replies are")
    print("scripted, so this shows the wiring, not a model's quality")
    return judges.JudgeModel(stack.enter_context(server.client()), "judge")


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
