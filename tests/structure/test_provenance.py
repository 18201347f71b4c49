"""`refinekit.provenance`: where each grounded value of a validated object is in its source."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from refinekit import InSource, ValueEvidence, in_source, provenance, self_correct

TEXT = "Invoice INV-7 from ACME  Audio Ltd. Lines: 2 x cable (SKU C-9), 1 x amp. Total 1,020.50 €"


class Line(BaseModel):
    sku: Annotated[str, InSource]
    quantity: Annotated[int, InSource]


class Invoice(BaseModel):
    number: Annotated[str, InSource]
    vendor: Annotated[str, InSource]
    total: Annotated[Decimal, InSource]
    currency: Annotated[Literal["EUR", "USD"], in_source(aliases={"EUR": ["€"]})]
    note: Annotated[str | None, InSource] = None
    lines: list[Line] = []
    pages: int = 1  # not grounded: no evidence for it


def test_each_grounded_value_has_its_span_in_the_source() -> None:
    invoice = Invoice.model_validate(
        {
            "number": "INV-7",
            "vendor": "acme audio ltd",
            "total": 1020.5,
            "currency": "EUR",
            "lines": [{"sku": "C-9", "quantity": 2}],
        },
        context={"source": TEXT},
    )
    found = provenance(invoice, source=TEXT)
    assert found == (
        ValueEvidence(path="number", value="INV-7", text="INV-7", start=8, end=13, source="source"),
        ValueEvidence(
            path="vendor",
            value="acme audio ltd",
            text="ACME  Audio Ltd",
            start=19,
            end=34,
            source="source",
        ),
        ValueEvidence(
            path="total", value="1020.5", text="1,020.50", start=79, end=87, source="source"
        ),
        ValueEvidence(path="currency", value="EUR", text="€", start=88, end=89, source="source"),
        ValueEvidence(
            path="lines[0].sku", value="C-9", text="C-9", start=58, end=61, source="source"
        ),
        ValueEvidence(
            path="lines[0].quantity", value="2", text="2", start=43, end=44, source="source"
        ),
    )
    for record in found:  # the offsets point at the span, as written in the source
        assert record.start is not None
        assert record.end is not None
        assert TEXT[record.start : record.end] == record.text
    # a grounded field left None (note) and an ungrounded one (pages) have no record


def test_a_value_the_source_does_not_state_has_no_span() -> None:
    # validated without the source in its context, so InSource did not check it
    invoice = Invoice(number="INV-8", vendor="Acme", total=Decimal("3"), currency="USD")
    records = {r.path: r for r in provenance(invoice, source=TEXT)}
    assert not records["number"].found
    assert records["number"] == ValueEvidence(path="number", value="INV-8")
    assert not records["total"].found
    assert not records["currency"].found
    assert records["vendor"].found


def test_a_field_of_another_key_reads_that_text_of_the_context() -> None:
    class Ticket(BaseModel):
        order: Annotated[str, in_source("email")]
        product: Annotated[str, InSource]

    context = {"email": "About order A-1001, thanks.", "source": "Catalogue: Blue Kettle."}
    ticket = Ticket.model_validate({"order": "A-1001", "product": "blue kettle"}, context=context)
    assert [(r.path, r.source, r.text) for r in provenance(ticket, source=context)] == [
        ("order", "email", "A-1001"),
        ("product", "source", "Blue Kettle"),
    ]
    # a text the context lacks: no span, never a guess from another text
    (order, _) = provenance(ticket, source={"source": context["source"]})
    assert order == ValueEvidence(path="order", value="A-1001")


def test_the_value_of_a_self_correct_call_says_where_its_values_came_from() -> None:
    class Short(BaseModel):
        number: Annotated[str, InSource]
        total: Annotated[Decimal, InSource]

    @self_correct(schema=Short, validation_context=lambda args: {"source": args["text"]})
    def extract(messages: list[dict[str, Any]], text: str) -> str:
        return json.dumps({"number": "inv-7", "total": 1020.5})

    got = extract([{"role": "user", "content": "Extract."}], text=TEXT)
    assert [(r.path, r.text) for r in provenance(got, source=TEXT)] == [
        ("number", "INV-7"),
        ("total", "1,020.50"),
    ]


def test_provenance_says_what_to_pass() -> None:
    invoice = Invoice(number="INV-7", vendor="Acme", total=Decimal("3"), currency="EUR")
    with pytest.raises(TypeError, match="source= takes the source text"):
        provenance(invoice, source=42)  # type: ignore[arg-type]
    before = invoice.model_dump()
    provenance(invoice, source=TEXT)
    assert invoice.model_dump() == before
