"""Invoice texts in varied phrasings, each with its ground truth (`invoices`)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel

__all__ = ["Invoice", "InvoiceItem", "invoices"]

Currency = Literal["EUR", "USD", "GBP"]
CURRENCIES: tuple[Currency, ...] = ("EUR", "USD", "GBP")


# What is extracted from an invoice text: small enough for a 135M model to have a chance.
# `total` is the amount as written (1,204.50 is 1204.5): asking a 135M model for cents (an
# integer, 120450) got no total right in a trial, and left nothing to compare. No docstring:
# it would become the JSON schema's description, which instructor and refinekit both send.
class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Currency
    total: Decimal


@dataclass(frozen=True)
class InvoiceItem:
    """One invoice text and its ground truth."""

    index: int
    template: str
    text: str
    truth: Invoice


VENDORS = (
    "Acme Ltd",
    "Northwind Traders",
    "Globex GmbH",
    "Initech LLC",
    "Blue Harbor Foods",
    "Kestrel Print Co.",
    "Meridian Legal LLP",
    "Orchard & Vale",
    "Pinecrest Logistics",
    "Sable Tech BV",
    "Tallis Bakery",
    "Verdant Gardens",
    "Bramble Books",
    "Copperleaf Studio",
    "Dunmore Electrical",
    "Fenwick & Sons",
    "Harbourview Hotel",
    "Ironbridge Tools",
    "Juniper Health",
    "Larkspur Design",
    "Marlowe Cleaning",
    "Nordlicht AG",
    "Oakridge Dental",
    "Quayside Catering",
    "Redfern Motors",
    "Silverline Couriers",
    "Thistle Textiles",
    "Upland Coffee",
    "Wexford Plumbing",
    "Yarrow Software",
    "Zenith Paints SA",
    "Beacon Security",
)

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _invoice_number(rng: random.Random) -> str:
    style = rng.randrange(5)
    if style == 0:
        return f"INV-{rng.randrange(1, 10000):04d}"
    if style == 1:
        return str(rng.randrange(1000, 100000))
    if style == 2:
        return f"{rng.choice('ABCDEFGHKLMNPRST')}-{rng.randrange(10, 1000)}"
    if style == 3:
        return f"{rng.randrange(2019, 2026)}-{rng.randrange(1, 1000):03d}"
    return f"FA{rng.randrange(1, 100000):05d}"


def _digits(cents: int, thousands: bool) -> str:
    units, rest = divmod(cents, 100)
    whole = f"{units:,}" if thousands else str(units)
    return f"{whole}.{rest:02d}"


def _amount(rng: random.Random, currency: str, cents: int) -> str:
    """The amount as an invoice would write it: symbol, code or word, before or after."""
    digits = _digits(cents, thousands=rng.random() < 0.7)
    symbol = {"EUR": "€", "USD": "$", "GBP": "£"}[currency]
    word = {"EUR": "euros", "USD": "US dollars", "GBP": "pounds"}[currency]
    style = rng.randrange(4)
    if style == 0:
        return f"{symbol}{digits}"
    if style == 1:
        return f"{currency} {digits}"
    if style == 2:
        return f"{digits} {currency}"
    return f"{digits} {word}"


def _date(rng: random.Random) -> str:
    return f"{rng.randrange(1, 29)} {rng.choice(MONTHS)} {rng.randrange(2023, 2026)}"


# A template: a function of (rng, number, vendor, currency, cents) -> text.
_Template = Callable[[random.Random, str, str, str, int], str]


def _phrasing(text: str) -> _Template:
    """A template of a format string, its fields filled in the order the text has them.

    `{number}` and `{vendor}` are the invoice's; `{amount}` (the total as an invoice writes
    it), `{date}` and `{items}` (a count of items) are drawn from the random source.
    """
    drawn = [name for _, name, _, _ in string.Formatter().parse(text) if name]

    def fill(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
        fields = {"number": number, "vendor": vendor}
        for name in drawn:
            if name == "amount":
                fields[name] = _amount(rng, currency, cents)
            elif name == "date":
                fields[name] = _date(rng)
            elif name == "items":
                fields[name] = str(rng.randrange(2, 13))
        return text.format(**fields)

    return fill


def _vat(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    subtotal = round(cents / (1 + rng.choice((0.2, 0.1, 0.07))))
    vat = cents - subtotal
    return (
        f"Invoice number {number}\nSupplier: {vendor}\n"
        f"Subtotal: {_amount(rng, currency, subtotal)}\nVAT: {_amount(rng, currency, vat)}\n"
        f"Total due: {_amount(rng, currency, cents)}"
    )


TEMPLATES: tuple[tuple[str, _Template], ...] = (
    ("one_line", _phrasing("Invoice {number} from {vendor}, total due {amount}.")),
    ("bill", _phrasing("Bill no. {number}\nFrom: {vendor}\nAmount payable: {amount}")),
    (
        "email",
        _phrasing(
            "Hello, please find attached invoice #{number} from {vendor}. The total is "
            "{amount}. Kind regards"
        ),
    ),
    ("header", _phrasing("{vendor} - INVOICE\nNumber: {number}\nDate: {date}\nTotal: {amount}")),
    ("request", _phrasing("Payment request {number}: {vendor} asks for {amount} by {date}.")),
    ("we_invoice", _phrasing("We, {vendor}, invoice you {amount} (invoice number {number}).")),
    ("vat", _vat),
    (
        "reminder",
        _phrasing(
            "Re: invoice {number}. Dear customer, {vendor} reminds you that {amount} is still "
            "outstanding."
        ),
    ),
    ("pipes", _phrasing("{vendor} | Inv. {number} | {date} | Amount due {amount}")),
    (
        "order",
        _phrasing(
            "Your order has shipped. Invoice {number} ({vendor}): {items} items, grand total "
            "{amount}."
        ),
    ),
)
"""The phrasings, used in turn (item i has template i mod 10); `vat` adds a subtotal and a VAT
amount, and `header`, `request` and `pipes` a date: numbers that are not the total."""


def invoices(n: int, seed: int) -> list[InvoiceItem]:
    """`n` invoice texts with their ground truth, the same for the same `seed`.

    Totals run from 1.00 to 999.99 (a quarter of them whole amounts), in EUR, USD or GBP: a
    135M model miscopies longer numbers most of the time.
    """
    rng = random.Random(seed)
    items = []
    for index in range(n):
        name, template = TEMPLATES[index % len(TEMPLATES)]
        number = _invoice_number(rng)
        vendor = rng.choice(VENDORS)
        currency = rng.choice(CURRENCIES)
        cents = rng.randrange(1, 1000) * 100 if rng.random() < 0.25 else rng.randrange(100, 10**5)
        text = template(rng, number, vendor, currency, cents)
        total = Decimal(cents) / 100
        truth = Invoice(number=number, vendor=vendor, currency=currency, total=total)
        items.append(InvoiceItem(index=index, template=name, text=text, truth=truth))
    return items
