"""Values from the document, and where each one came from. Offline.

A deterministic stand-in "model" extracts an invoice: it first says "USD" where the invoice
says "12.50 EUR", `InSource` refuses it, and the correction's template does not send the
wrong currency back. The validated object then says where each grounded value is in the
text (`refinekit.provenance`), and `checks.values_supported()` refuses a prose answer that
names a vendor the document never states.
Run: python examples/grounded_values.py
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel

from refinekit import (
    ContextDocument,
    EvaluationRequest,
    InSource,
    checks,
    in_source,
    provenance,
    self_correct,
)

TEXT = "Invoice INV-7 from ACME  Audio Ltd, 3 March 2025. Total due: 12.50 EUR."


class Invoice(BaseModel):
    number: Annotated[str, InSource]
    vendor: Annotated[str, InSource]
    total: Annotated[Decimal, InSource]
    currency: Annotated[Literal["EUR", "USD"], in_source(aliases={"EUR": ["€"], "USD": ["$"]})]


REPLIES = iter(
    [
        '{"number": "INV-7", "vendor": "Acme Audio Ltd", "total": 12.5, "currency": "USD"}',
        '{"number": "INV-7", "vendor": "Acme Audio Ltd", "total": 12.5, "currency": "EUR"}',
    ]
)


@self_correct(schema=Invoice, validation_context=lambda args: {"source": args["text"]})
def extract(messages: list[dict[str, Any]], text: str) -> str:
    if len(messages) > 1:  # the correction turn: its last line is the template
        print("correction template:", messages[-1]["content"].splitlines()[-1])
    return next(REPLIES)


def main() -> None:
    print("(offline: a deterministic stand-in model, no network)")
    invoice = extract([{"role": "user", "content": f"Extract the invoice: {TEXT}"}], text=TEXT)
    print("caller got:", repr(invoice))
    for value in provenance(invoice, source=TEXT):
        print(f"  {value.path} = {value.value!r}: {value.text!r} at {value.start}-{value.end}")

    check = checks.values_supported()
    for answer in ('"Acme Audio Ltd" asks 12.50 EUR.', '"Globex Corp" asks 12.50 EUR.'):
        request = EvaluationRequest(answer=answer, context=(ContextDocument(TEXT),))
        verdict = check.evaluate(request)
        print(f"{answer!r}: {'passed' if verdict.passed else 'refused: ' + verdict.feedback}")


if __name__ == "__main__":
    main()
