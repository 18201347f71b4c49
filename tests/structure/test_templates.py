"""The correction's template never carries a wrong value forward.

A value of the failed reply stays in the template only when nothing implicates it: an error
at its place, a validator's message naming its field, or (with a source text in the
validation context) not appearing in that text make it a placeholder; a reply-level error
naming no field keeps no value. The problem line shows the values that conflict.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from refinekit import self_correct
from refinekit._structure.corrections import CHECK_MARKER

LEAD = "Reply with only a JSON object like this one, with the <...> placeholders filled in:"


def corrected(schema: type[BaseModel], bad: dict[str, Any], **options: Any) -> str:
    """The correction turn `@self_correct` sends after the reply `bad` (the next is refused)."""
    received: list[list[dict[str, Any]]] = []

    @self_correct(schema=schema, max_corrections=1, **options)
    def extract(messages: list[dict[str, Any]]) -> str:
        received.append(messages)
        return json.dumps(bad)

    with pytest.raises(Exception, match="validation error"):
        extract([{"role": "user", "content": "Extract it."}])
    return str(received[1][-1]["content"])


def turn(*problems: str, template: str) -> str:
    return "\n".join([CHECK_MARKER, *problems, LEAD, template])


class Totals(BaseModel):
    vendor: str
    subtotal: Decimal
    tax: Decimal
    total: Decimal

    @model_validator(mode="after")
    def adds_up(self) -> Totals:
        if self.subtotal + self.tax != self.total:
            raise ValueError("total must equal subtotal + tax")
        return self


WRONG = {"vendor": "Acme", "subtotal": 100.0, "tax": 8.0, "total": 118.0}


def test_a_model_validator_naming_fields_makes_them_placeholders_with_their_values_said() -> None:
    assert corrected(Totals, WRONG) == turn(
        "Total must equal subtotal + tax (the reply had subtotal 100.0, tax 8.0 and total 118.0).",
        template='{"vendor": "Acme", "subtotal": <number>, "tax": <number>, "total": <number>}',
    )


def test_a_message_that_shows_the_values_is_not_repeated() -> None:
    class Shown(Totals):
        @model_validator(mode="after")
        def adds_up(self) -> Shown:
            if self.subtotal + self.tax != self.total:
                raise ValueError(
                    f"total {float(self.total)} is not subtotal {float(self.subtotal)} + tax "
                    f"{float(self.tax)}"
                )
            return self

    assert corrected(Shown, WRONG) == turn(
        "Total 118.0 is not subtotal 100.0 + tax 8.0.",
        template='{"vendor": "Acme", "subtotal": <number>, "tax": <number>, "total": <number>}',
    )


def test_a_model_validator_naming_no_field_keeps_no_value() -> None:
    class Unnamed(Totals):
        @model_validator(mode="after")
        def adds_up(self) -> Unnamed:
            if self.subtotal + self.tax != self.total:
                raise ValueError("the figures do not add up")
            return self

    assert corrected(Unnamed, WRONG) == turn(
        "The figures do not add up.",
        template='{"vendor": "<string>", "subtotal": <number>, "tax": <number>, "total": <number>}',
    )


def test_a_field_error_naming_another_field_implicates_it_too() -> None:
    class AtLeast(BaseModel):
        vendor: str
        subtotal: Decimal
        total: Decimal

        @field_validator("total")
        @classmethod
        def covers_subtotal(cls, value: Decimal, info: ValidationInfo) -> Decimal:
            if value < info.data.get("subtotal", 0):
                raise ValueError("it must be at least the subtotal")
            return value

    bad = {"vendor": "Acme", "subtotal": 100.0, "total": 10.0}
    assert corrected(AtLeast, bad) == turn(
        '"total": got 10.0; it must be at least the subtotal (the reply had subtotal 100.0).',
        template='{"vendor": "Acme", "subtotal": <number>, "total": <number>}',
    )


class Invoice(BaseModel):
    number: str
    total_cents: int
    currency: str


TEXT = "Invoice INV-7 from Acme Audio GmbH, issued 3 March 2025. Total due: 12.50 EUR."


def test_a_value_the_source_does_not_hold_is_not_kept() -> None:
    # the demo's case: the invoice says EUR, the reply USD; before, "USD" went back as if right
    bad = {"number": "INV-7", "total_cents": 12.5, "currency": "USD"}
    assert corrected(Invoice, bad, validation_context={"source": TEXT}) == turn(
        '"total_cents": got 12.5; it should be a valid integer, got a number with a fractional '
        "part.",
        template='{"number": "INV-7", "total_cents": <integer>, "currency": "<string>"}',
    )


def test_values_the_source_holds_are_kept() -> None:
    bad = {"number": "inv-7", "total_cents": 12.5, "currency": "EUR"}
    made = corrected(Invoice, bad, validation_context={"source": TEXT})
    assert made.splitlines()[-1] == (
        '{"number": "inv-7", "total_cents": <integer>, "currency": "EUR"}'
    )
    # without a source in the context nothing is compared: the valid values stay
    bad = {"number": "INV-9", "total_cents": 12.5, "currency": "USD"}
    assert corrected(Invoice, bad).splitlines()[-1] == (
        '{"number": "INV-9", "total_cents": <integer>, "currency": "USD"}'
    )


def test_a_broken_reply_is_checked_too_and_numbers_by_value() -> None:
    class Priced(BaseModel):
        vendor: str
        total: Decimal
        currency: Literal["EUR", "USD"]

    received: list[list[dict[str, Any]]] = []

    @self_correct(schema=Priced, max_corrections=1, validation_context={"source": TEXT})
    def extract(messages: list[dict[str, Any]]) -> str:
        received.append(messages)
        # not JSON: the values that read cleanly are recovered, then compared with the text
        return '{"vendor": "Acme", "currency": "USD", "total": 12.50 EUR}'

    with pytest.raises(Exception, match="JSON"):
        extract([{"role": "user", "content": "Extract it."}])
    assert str(received[1][-1]["content"]).splitlines()[-1] == (
        '{"vendor": "Acme", "total": <number>, "currency": "<EUR or USD>"}'
    )

    # the number is kept when the text writes it, however it is written there
    class Paid(BaseModel):
        vendor: str
        total: Decimal
        paid: bool

    bad = {"vendor": "Acme", "total": 12.5, "paid": "maybe"}
    assert corrected(Paid, bad, validation_context={"source": TEXT}).splitlines()[-1] == (
        '{"vendor": "Acme", "total": 12.5, "paid": <true or false>}'
    )


def test_a_grounded_value_its_validator_accepted_is_kept_even_as_an_alias() -> None:
    from typing import Annotated

    from refinekit import in_source

    class Grounded(BaseModel):
        number: str
        currency: Annotated[Literal["EUR", "USD"], in_source(aliases={"EUR": ["€"]})]

    bad = {"number": 7, "currency": "EUR"}  # "EUR" is not in the text; "€" is
    made = corrected(Grounded, bad, validation_context={"source": "Bill 7: €12.50"}, repair=False)
    assert made.splitlines()[-1] == '{"number": "7", "currency": "EUR"}'
