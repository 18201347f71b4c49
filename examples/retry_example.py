"""@retry_on_low_quality, end to end and offline.

The "model" here is a deterministic stand-in: it forgets to cite its source, then cites it
once the feedback tells it to. Run: python examples/retry_example.py
"""

from __future__ import annotations

import refinekit
from refinekit import LowQualityAnswer, checks, record_context, retry_on_low_quality, retry_prompt

DOCS = [{"text": "Refunds are accepted within 30 days.", "source": "policies/refunds.md"}]


def stand_in_model(prompt: str) -> str:
    if "Cite the source as [policies/refunds.md]" in prompt:
        return "Refunds are accepted within 30 days (policies/refunds.md)."
    return "Refunds are accepted within 30 days."


@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=2, wait=0.01)
def answer(question: str) -> str:
    record_context(DOCS)
    # the prompt as on the first attempt; on a retry, retry_prompt adds the rejected answer
    # and the feedback ("Cite the source as [policies/refunds.md].") after it
    prompt = retry_prompt(f"Question: {question}")
    attempt = refinekit.current_attempt()
    assert attempt is not None
    reply = stand_in_model(prompt)
    print(f"attempt {attempt.number}/{attempt.max_attempts}: {reply}")
    return reply


@retry_on_low_quality(evaluator=checks.max_length(10), max_retries=1, wait=0.01)
def too_long(question: str) -> str:
    return "This answer is always longer than ten characters."


def main() -> None:
    print("(offline: a deterministic stand-in model, no network)")
    print("caller got:", answer("How long do I have to return an item?"))
    try:
        too_long("Say it briefly.")
    except LowQualityAnswer as e:
        print(f"gave up after {len(e.attempts)} attempts: {e.feedback}")


if __name__ == "__main__":
    main()
