"""Judges over Anthropic natively: a JudgeModel with an `anthropic` client (the Messages API).

By default it runs on refinekit.testing.ScriptedOpenAI, a real HTTP server on 127.0.0.1 that
also speaks Anthropic's Messages API (POST /v1/messages) and whose replies are scripted: it
shows the wiring, not a model's quality. To run it on Anthropic, set ANTHROPIC_API_KEY and
REFINEKIT_JUDGE_MODEL (the client reads ANTHROPIC_BASE_URL itself, for a gateway):

    ANTHROPIC_API_KEY=sk-ant-... REFINEKIT_JUDGE_MODEL=claude-haiku-4-5 \
        python examples/judge_anthropic.py
"""

from __future__ import annotations

import os
from contextlib import ExitStack

import anthropic

import refinekit
from refinekit import ContextDocument, judges, record_context, retry_on_low_quality
from refinekit.testing import Reply, ScriptedOpenAI

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
DRAFTS = [
    "Yes, you can get a full refund, no questions asked.",
    "Yes, if the order is unused and you ask within seven days of delivery.",
]
SCRIPTED = [  # the scripted judge's replies, in the order the judges ask
    "NO",  # criteria, draft 1: the conditions are dropped
    "YES",  # criteria, draft 2
    "YES",  # criteria, the final answer judged again below
    Reply.tool_call("Rating", {"rating": 4, "feedback": "Correct and supported."}),  # rating
]


def judge_model(stack: ExitStack) -> judges.JudgeModel:
    """Anthropic when configured, else the scripted server's Messages API."""
    model = os.environ.get("REFINEKIT_JUDGE_MODEL")
    if os.environ.get("ANTHROPIC_API_KEY") and model:
        print(f"real endpoint (ANTHROPIC_API_KEY), judge model {model!r}")
        client = stack.enter_context(anthropic.Anthropic())
    else:
        server = stack.enter_context(ScriptedOpenAI())
        server.script("claude-judge", SCRIPTED)
        print("scripted: a ScriptedOpenAI server on 127.0.0.1 plays Anthropic's Messages API;")
        print("its replies are scripted, so this shows the wiring, not a model's quality")
        client = stack.enter_context(server.anthropic_client())
        model = "claude-judge"
    # Newer Claude models take only their default temperature: send none.
    return judges.JudgeModel(client, model, temperature=None)


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack)
        keeps_conditions = judges.criteria(
            jm,
            [
                judges.Criterion(
                    "keeps_conditions",
                    "Does the answer keep every condition the context puts on the refund?",
                    when_false="Keep the policy's conditions: unused, within seven days.",
                )
            ],
        )
        drafts = iter(DRAFTS)

        @retry_on_low_quality(evaluator=keeps_conditions, max_retries=2)
        def answer(question: str, feedback: str | None = None) -> str:
            record_context(POLICY)
            if feedback:
                print(f"  retry with feedback: {feedback}")
            return next(drafts)  # a stand-in for your model call

        with refinekit.job() as job:
            final = answer(QUESTION)
        print(f"answer: {final}")
        print(f"judge calls: {job.judge_usage.model_calls}, tokens {job.judge_usage.total_tokens}")

        # No token probabilities over the Messages API: each criterion is read from the text.
        request = refinekit.EvaluationRequest(question=QUESTION, answer=final, context=(POLICY,))
        for result in keeps_conditions.evaluate(request).criteria:
            print(f"{result.name}={result.outcome} p={result.probability} from {result.source}")
        rating = judges.rating(jm, mode="TOOLS").evaluate(request)  # instructor, tool use
        print(f"rating {rating.metadata['rating']}/4: {rating.feedback}")


if __name__ == "__main__":
    main()
