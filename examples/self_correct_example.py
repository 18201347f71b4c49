"""@self_correct, end to end and offline.

The "model" here is a deterministic stand-in that gets the format wrong twice, then right; it
prints the conversation it is sent, so you can see the correction turns.
Run: python examples/self_correct_example.py
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import refinekit
from refinekit import ResponseValidationError, self_correct


class Invoice(BaseModel):
    number: str
    total_cents: int


REPLIES = iter(
    [
        "The invoice number is INV-7 and the total is 12.50.",  # not JSON
        '{"number": "INV-7"}',  # a required field missing
        'Here you go: {"number": "INV-7", "total_cents": 1250}',  # JSON in prose: accepted
    ]
)


@self_correct(schema=Invoice)
def extract(messages: list[dict[str, Any]]) -> str:
    print(f"model call with {len(messages)} message(s); last: {messages[-1]['content'][:70]!r}")
    return next(REPLIES)


@self_correct(schema=Invoice, max_corrections=1)
def stubborn(messages: list[dict[str, Any]]) -> str:
    return '{"number": 7}'


def main() -> None:
    print("(offline: a deterministic stand-in model, no network)")
    conversation = [{"role": "user", "content": "Extract the invoice: INV-7, 12.50 EUR"}]
    print("caller got:", repr(extract(conversation)))
    print("caller's conversation is untouched:", len(conversation), "message")
    with refinekit.job() as job:
        try:
            stubborn(conversation)
        except ResponseValidationError as e:
            print(f"gave up: {e}")
            print(f"corrections used in this job: {job.corrections_used}")


if __name__ == "__main__":
    main()
