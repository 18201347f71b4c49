"""The criteria judge: named yes/no criteria, each with its outcome and probability.

Code checks run first (free); when one fails, no model call is made. The model criteria are
asked concurrently, and each probability says where it came from: `logprobs` (the judge's
probabilities for its YES/NO token, when the endpoint returns them) or `answer` (1.0 or 0.0
from the reply's text).

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key):

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_criteria.py
"""

from __future__ import annotations

from contextlib import ExitStack

from _endpoint import judge_model  # scripted server, or the endpoint you configured

from refinekit import ContextDocument, EvaluationRequest, judges
from refinekit.testing import RecordedRequest, Reply

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
CRITERIA = [
    judges.Criterion(  # a code check: a callable of the request, run before any model call
        "cites_policy",
        lambda request: "policies/refunds.md" in request.answer,
        when_false="Cite the policy's source path, policies/refunds.md.",
    ),
    judges.Criterion(
        "answers_question",
        "Does the answer tell the customer whether they can get a refund?",
        when_false="Say whether the customer can get a refund.",
    ),
    judges.Criterion(
        "keeps_conditions",
        "Does the answer keep every condition the context puts on a refund?",
        when_false="Keep the policy's conditions: 'unused' and 'within seven days'.",
    ),
]
ANSWERS = [
    "Yes, you can get a full refund, no questions asked. [policies/refunds.md]",
    "Yes, if the order is unused and you ask within seven days.",
    "Yes, if the order is unused and you ask within seven days. [policies/refunds.md]",
]


def scripted_judge(request: RecordedRequest) -> Reply:
    """Stands in for the judge model. It reads the criterion and the answer it is asked about,
    so concurrent requests get the right reply whatever their order; YES and NO come with
    their probabilities, returned as logprobs."""
    prompt = request.body["messages"][-1]["content"] if request.body else ""
    answer = prompt.split("<answer>")[-1]
    if CRITERIA[2].question in prompt:  # keeps_conditions
        holds = "unused" in answer and "seven days" in answer
    else:  # answers_question
        holds = "refund" in answer
    return (
        Reply.text("YES", {"YES": 0.95, "NO": 0.05})
        if holds
        else Reply.text("NO", {"NO": 0.9, "YES": 0.1})
    )


SCRIPTED = [scripted_judge] * 4  # 2 model criteria x the 2 answers that pass the code check


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        criteria = judges.criteria(jm, CRITERIA)
        print(f"criteria judge, question: {QUESTION}")
        for answer in ANSWERS:
            request = EvaluationRequest(question=QUESTION, answer=answer, context=(POLICY,))
            verdict = criteria.evaluate(request)
            print(f"  {answer!r}: {'passed' if verdict.passed else 'failed'}")
            for c in verdict.criteria:
                p = "" if c.probability is None else f" p={c.probability:.2f} from {c.source}"
                print(f"    {c.name}={c.outcome}{p}")
            if verdict.feedback:
                print(f"    feedback for the next attempt: {verdict.feedback}")


if __name__ == "__main__":
    main()
