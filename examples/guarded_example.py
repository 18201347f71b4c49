"""@guarded, end to end and offline.

A deterministic stand-in model answers support questions; a rule check screens the input and
the answer for payment card numbers. `@guarded` sits outside `@retry_on_low_quality`, the order
recommended for screening inputs: a blocked input costs no attempt at all.
Run: python examples/guarded_example.py
"""

from __future__ import annotations

import re

import refinekit
from refinekit import Verdict, checks, guarded, record_context, retry_on_low_quality

DOCS = [{"text": "Refunds are accepted within 30 days.", "source": "policies/refunds.md"}]
CARD = re.compile(r"\b(?:\d[ -]?){13,16}\b")
model_calls: list[str] = []

no_card_numbers = checks.Check(
    "no_card_numbers",
    lambda request: Verdict(
        passed=CARD.search(request.answer) is None, feedback="Never repeat a card number."
    ),
)


def stand_in_model(question: str, feedback: str | None) -> str:
    model_calls.append(question)
    if "card" in question:
        return "The card on file is 4111 1111 1111 1111 (policies/refunds.md)."
    if feedback is None:
        return "Refunds are accepted within 30 days."
    return "Refunds are accepted within 30 days (policies/refunds.md)."


@guarded(screen=no_card_numbers, screen_input=True)
@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=1, wait=0.01)
def answer(question: str, feedback: str | None = None) -> str:
    record_context(DOCS)
    attempt = refinekit.current_attempt()
    assert attempt is not None
    reply = stand_in_model(question, feedback)
    print(f"  attempt {attempt.number}/{attempt.max_attempts}: {reply}")
    return reply


screens: list[refinekit.Event] = []


def report(event: refinekit.Event) -> None:
    if event.decorator == "guarded":  # one event per screen: verdict, blocked or unjudged
        screens.append(event)
    if event.kind == "blocked":
        print(f"  blocked: {event.error}")


def main() -> None:
    print("(offline: a deterministic stand-in model and a rule check, no network)")
    with refinekit.subscribe(report):
        for question in (
            "How long do I have to return an item?",
            "Which card is on my account?",
            "Refund 4111 1111 1111 1111 please.",
        ):
            print(f"asked: {question}")
            print(f"caller got: {answer(question)}")
    print(f"model calls: {len(model_calls)}, screens: {len(screens)}")


if __name__ == "__main__":
    main()
