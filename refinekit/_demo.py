"""`refinekit demo`: both decorators end to end, offline, with a stand-in model."""

from __future__ import annotations

import textwrap
from typing import Any, TextIO

from pydantic import BaseModel

from . import checks
from ._correct import self_correct
from ._errors import CorrectionExhausted, LowQualityAnswer
from ._hooks import Event, subscribe
from ._job import record_context
from ._retry import retry_on_low_quality

DOCS = [
    {"text": "Invoices are due 30 days after issue.", "source": "handbook/billing.md"},
    {"text": "Late invoices accrue 2% interest a month.", "source": "handbook/late-fees.md"},
]


class Invoice(BaseModel):
    """What the extraction demo asks for."""

    number: str
    total_cents: int


class _StandInModel:
    """A deterministic stand-in for a chat model: canned replies, in order, per task."""

    def __init__(self) -> None:
        self.conversations: list[list[dict[str, Any]]] = []
        self.answers = iter(
            [
                "Invoices are due 30 days after they are issued.",
                "Invoices are due 30 days after they are issued (handbook/billing.md).",
            ]
        )
        self.extractions = iter(
            [
                "Sure! number INV-7, total 12.50 EUR",
                '{"number": "INV-7", "total_cents": 12.5}',
                '```json\n{"number": "INV-7", "total_cents": 1250}\n```',
            ]
        )

    def answer(self, prompt: str) -> str:
        return next(self.answers)

    def extract(self, messages: list[dict[str, Any]]) -> str:
        self.conversations.append(messages)
        return next(self.extractions)


def run_demo(out: TextIO) -> int:
    """Run the demo, writing what happens to `out`; return the exit status."""
    model = _StandInModel()

    def say(text: str = "") -> None:
        print(text, file=out)

    def show(event: Event) -> None:
        if event.kind == "retry":
            say(f"  -> attempt {event.attempt}/{event.max_attempts} rejected: {event.feedback}")
            say(f"     waiting {event.wait:.2f}s, then retrying with that feedback")
        elif event.kind == "correction":
            say(f"  -> correction {event.attempt}/{event.max_attempts}: {event.error}")

    @retry_on_low_quality(
        evaluator=checks.all_of(checks.not_empty(), checks.cites_source()), wait=0.05
    )
    def answer(question: str, feedback: str | None = None) -> str:
        record_context(DOCS)
        prompt = f"Answer from the documents, citing the source path.\nQuestion: {question}"
        if feedback is not None:
            prompt += f"\nA reviewer rejected your last answer: {feedback}"
        reply = model.answer(prompt)
        say(f"  model answered: {reply!r}")
        return reply

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> str:
        reply = model.extract(messages)
        say(f"  model replied ({len(messages)} messages sent): {reply!r}")
        return reply

    say("refinekit demo: OFFLINE, with a deterministic stand-in model (canned replies, no")
    say("network, no API key). It shows the mechanics, not the quality of any real model.")
    say()
    with subscribe(show):
        say("1. @retry_on_low_quality(evaluator=all_of(not_empty(), cites_source()))")
        try:
            result = answer("When are invoices due?")
        except LowQualityAnswer as e:
            say(f"  gave up: {e}")
            return 1
        say(f"  caller got: {result!r}")
        say()
        say("2. @self_correct(schema=Invoice)")
        request = [{"role": "user", "content": "Extract the invoice: INV-7, 12.50 EUR."}]
        try:
            invoice = extract(request)
        except CorrectionExhausted as e:
            say(f"  gave up: {e}")
            return 1
        say(f"  caller got: {invoice!r}")
        say(f"  caller's conversation still has {len(request)} message(s): it is never mutated")
    say()
    say("The correction turn the model was sent after its first reply:")
    say(textwrap.indent(model.conversations[1][2]["content"], "  | ", lambda _: True))
    return 0
