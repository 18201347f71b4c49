"""The pairwise judge: which of two answers is better, asked in both orders.

The judge sees the two answers as A then B, and again as B then A; when the two verdicts
disagree the result is a tie, so a judge's preference for a position cannot decide.

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key):

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_pairwise.py
"""

from __future__ import annotations

from contextlib import ExitStack

from _endpoint import judge_model  # scripted server, or the endpoint you configured

from refinekit import ContextDocument, judges
from refinekit.testing import RecordedRequest

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
KEEPS = "Yes, if the order is unused and you ask within seven days of delivery."
DROPS = "Yes, you can get a full refund, no questions asked."
ALSO_KEEPS = "You can, within seven days of delivery, as long as the order is unused."


def scripted_judge(request: RecordedRequest) -> str:
    """Stands in for the judge model: it prefers the answer that keeps the condition
    'unused'; when both or neither do, it says A, whichever answer that is (position bias)."""
    prompt = request.body["messages"][-1]["content"] if request.body else ""
    first = "unused" in prompt.split("<answer_a>")[-1].split("</answer_a>")[0]
    second = "unused" in prompt.split("<answer_b>")[-1].split("</answer_b>")[0]
    return "B" if second and not first else "A"


SCRIPTED = [scripted_judge] * 4  # 2 comparisons x 2 orders


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        pairwise = judges.pairwise(jm)
        print(f"pairwise judge, question: {QUESTION}")
        winner = pairwise.compare(QUESTION, KEEPS, DROPS, context=[POLICY])
        print(f"  a={KEEPS!r}\n  b={DROPS!r}\n  winner: {winner}")
        winner = pairwise.compare(QUESTION, KEEPS, ALSO_KEEPS, context=[POLICY])
        print(f"  a={KEEPS!r}\n  b={ALSO_KEEPS!r}\n  winner: {winner}", end="")
        print(" (the two orders disagreed)" if winner == "tie" else "")


if __name__ == "__main__":
    main()
