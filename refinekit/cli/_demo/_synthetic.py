"""Deterministic synthetic data for `benchmarks/bench_local_quality.py` and `demo --local`.

Two sets, each generated from a seed with `random.Random(seed)` only (no other source of
randomness, no clock, no environment), so the same seed gives the same items, byte for byte,
on every machine and Python version the project supports:

- `invoices(n, seed)`: short invoice texts in varied phrasings, each with its ground truth, an
  `Invoice` (number, vendor, currency, total).
- `judging_items(n, seed)`: question, context and answer, with a pass/fail label and the kind
  of mistake a failing answer makes (a changed number, the figure of another place, a dropped
  condition, a flipped yes/no). Exactly half pass (the odd item out fails).
- `citation_items(n, seed)`: a question and one short source document with a source id
  (`policies/warranty-3.md`) and the fact that answers it (`10 months`), for answers that must
  cite their source and state the fact.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel

__all__ = [
    "CitationItem",
    "Invoice",
    "InvoiceItem",
    "JudgingItem",
    "citation_items",
    "invoices",
    "judging_items",
]


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


@dataclass(frozen=True)
class JudgingItem:
    """One labelled answer: `label` is "pass" or "fail"; `kind` is "correct" or the mistake."""

    index: int
    topic: str
    question: str
    context: str
    answer: str
    label: str
    kind: str

    def row(self) -> dict[str, str]:
        """The row of the labelled file `refinekit calibrate` reads."""
        return {
            "question": self.question,
            "context": self.context,
            "answer": self.answer,
            "label": self.label,
        }


# ---------------------------------------------------------------------------------------------
# Invoices
# ---------------------------------------------------------------------------------------------

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


# Each template: (name, a function of (rng, number, vendor, currency, cents) -> text).
_Template = Callable[[random.Random, str, str, str, int], str]


def _t_one_line(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return f"Invoice {number} from {vendor}, total due {_amount(rng, currency, cents)}."


def _t_bill(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return f"Bill no. {number}\nFrom: {vendor}\nAmount payable: {_amount(rng, currency, cents)}"


def _t_email(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return (
        f"Hello, please find attached invoice #{number} from {vendor}. The total is "
        f"{_amount(rng, currency, cents)}. Kind regards"
    )


def _t_header(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return (
        f"{vendor} - INVOICE\nNumber: {number}\nDate: {_date(rng)}\n"
        f"Total: {_amount(rng, currency, cents)}"
    )


def _t_request(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return (
        f"Payment request {number}: {vendor} asks for {_amount(rng, currency, cents)} "
        f"by {_date(rng)}."
    )


def _t_we(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return f"We, {vendor}, invoice you {_amount(rng, currency, cents)} (invoice number {number})."


def _t_vat(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    subtotal = round(cents / (1 + rng.choice((0.2, 0.1, 0.07))))
    vat = cents - subtotal
    return (
        f"Invoice number {number}\nSupplier: {vendor}\n"
        f"Subtotal: {_amount(rng, currency, subtotal)}\nVAT: {_amount(rng, currency, vat)}\n"
        f"Total due: {_amount(rng, currency, cents)}"
    )


def _t_reminder(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return (
        f"Re: invoice {number}. Dear customer, {vendor} reminds you that "
        f"{_amount(rng, currency, cents)} is still outstanding."
    )


def _t_pipes(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return f"{vendor} | Inv. {number} | {_date(rng)} | Amount due {_amount(rng, currency, cents)}"


def _t_order(rng: random.Random, number: str, vendor: str, currency: str, cents: int) -> str:
    return (
        f"Your order has shipped. Invoice {number} ({vendor}): {rng.randrange(2, 13)} items, "
        f"grand total {_amount(rng, currency, cents)}."
    )


TEMPLATES: tuple[tuple[str, _Template], ...] = (
    ("one_line", _t_one_line),
    ("bill", _t_bill),
    ("email", _t_email),
    ("header", _t_header),
    ("request", _t_request),
    ("we_invoice", _t_we),
    ("vat", _t_vat),
    ("reminder", _t_reminder),
    ("pipes", _t_pipes),
    ("order", _t_order),
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


# ---------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------

CITIES = ("Lyon", "Porto", "Leeds", "Graz", "Malmo", "Turin", "Ghent", "Cork", "Bilbao", "Brno")
COUNTRIES = ("France", "Spain", "Italy", "Portugal", "Norway", "Ireland", "Poland", "Greece")
PRODUCTS = ("headphones", "kettles", "desk lamps", "bicycles", "monitors", "blenders")

_Answers = dict[str, str]


def _other(rng: random.Random, value: int, low: int, high: int) -> int:
    return rng.choice([v for v in range(low, high + 1) if v != value])


def _shipping(rng: random.Random) -> tuple[str, str, _Answers]:
    here, there = rng.sample(CITIES, 2)
    days = rng.randrange(2, 8)
    days_there = _other(rng, days, 2, 9)
    context = (
        f"The warehouse in {here} ships orders within {days} business days; the warehouse in "
        f"{there} ships within {days_there}."
    )
    question = f"How fast does the {here} warehouse ship orders?"
    wrong = _other(rng, days, 2, 9)
    while wrong == days_there:
        wrong = _other(rng, days, 2, 9)
    return (
        context,
        question,
        {
            "correct": f"The {here} warehouse ships orders within {days} business days.",
            "number": f"The {here} warehouse ships orders within {wrong} business days.",
            "place": f"The {here} warehouse ships orders within {days_there} business days.",
        },
    )


def _refund(rng: random.Random) -> tuple[str, str, _Answers]:
    days = rng.choice((14, 30, 60))
    context = (
        f"Unused items can be returned within {days} days of delivery for a full refund; used "
        "items can only be exchanged."
    )
    question = "Can I get a refund for an item I bought?"
    wrong = rng.choice([d for d in (7, 14, 30, 60, 90) if d != days])
    return (
        context,
        question,
        {
            "correct": f"Yes, if the item is unused and you return it within {days} days of "
            "delivery.",
            "number": f"Yes, if the item is unused and you return it within {wrong} days of "
            "delivery.",
            "condition": f"Yes, you can return any item within {days} days of delivery for a "
            "full refund.",
        },
    )


def _store_hours(rng: random.Random) -> tuple[str, str, _Answers]:
    city = rng.choice(CITIES)
    opens, closes = rng.randrange(7, 11), rng.randrange(17, 21)
    context = (
        f"The {city} store opens Monday to Friday from {opens}:00 to {closes}:00 and is closed "
        "at weekends."
    )
    if rng.random() < 0.5:
        return (
            context,
            f"Is the {city} store open on Saturdays?",
            {
                "correct": "No, the store is closed at weekends.",
                "negation": f"Yes, the store is open on Saturdays from {opens}:00 to {closes}:00.",
            },
        )
    return (
        context,
        f"When does the {city} store close on weekdays?",
        {
            "correct": f"It closes at {closes}:00, Monday to Friday.",
            "number": f"It closes at {_other(rng, closes, 16, 22)}:00, Monday to Friday.",
        },
    )


def _years(n: int) -> str:
    return f"{n} year" if n == 1 else f"{n} years"


def _warranty(rng: random.Random) -> tuple[str, str, _Answers]:
    product = rng.choice(PRODUCTS)
    years = rng.randrange(1, 6)
    context = (
        f"Our {product} come with a {years}-year warranty that covers manufacturing defects but "
        "not accidental damage."
    )
    if rng.random() < 0.5:
        return (
            context,
            f"Does the warranty on your {product} cover accidental damage?",
            {
                "correct": f"No, the {years}-year warranty covers manufacturing defects only.",
                "negation": f"Yes, the {years}-year warranty covers accidental damage.",
            },
        )
    return (
        context,
        f"How long is the warranty on your {product}?",
        {
            "correct": f"{_years(years)}, for manufacturing defects.",
            "number": f"{_years(_other(rng, years, 1, 6))}, for manufacturing defects.",
        },
    )


def _discount(rng: random.Random) -> tuple[str, str, _Answers]:
    percent = rng.choice((5, 10, 15, 20))
    over = rng.choice((50, 100, 200))
    context = f"Members get {percent}% off orders over {over} euros."
    wrong = rng.choice([p for p in (5, 10, 15, 20, 25) if p != percent])
    return (
        context,
        "What discount do members get?",
        {
            "correct": f"Members get {percent}% off orders over {over} euros.",
            "number": f"Members get {wrong}% off orders over {over} euros.",
            "condition": f"Members get {percent}% off every order.",
        },
    )


def _delivery(rng: random.Random) -> tuple[str, str, _Answers]:
    yes1, yes2, yes3, no = rng.sample(COUNTRIES, 4)
    context = f"We deliver to {yes1}, {yes2} and {yes3}, but not to {no}."
    if rng.random() < 0.5:
        return (
            context,
            f"Do you deliver to {no}?",
            {
                "correct": f"No, we do not deliver to {no}.",
                "negation": f"Yes, we deliver to {no}.",
            },
        )
    return (
        context,
        f"Do you deliver to {yes2}?",
        {
            "correct": f"Yes, we deliver to {yes2}.",
            "negation": f"No, we do not deliver to {yes2}.",
        },
    )


def _support(rng: random.Random) -> tuple[str, str, _Answers]:
    opens, closes = rng.randrange(7, 11), rng.randrange(16, 21)
    hours = rng.choice((4, 8, 24, 48))
    context = (
        f"Phone support is available from {opens}:00 to {closes}:00 on weekdays; email "
        f"support answers within {hours} hours."
    )
    wrong = rng.choice([h for h in (2, 4, 8, 24, 48, 72) if h != hours])
    return (
        context,
        "How quickly does email support answer?",
        {
            "correct": f"Email support answers within {hours} hours.",
            "number": f"Email support answers within {wrong} hours.",
            "place": f"Email support answers from {opens}:00 to {closes}:00 on weekdays.",
        },
    )


TOPICS: tuple[tuple[str, Callable[[random.Random], tuple[str, str, _Answers]]], ...] = (
    ("shipping", _shipping),
    ("refund", _refund),
    ("store_hours", _store_hours),
    ("warranty", _warranty),
    ("discount", _discount),
    ("delivery", _delivery),
    ("support", _support),
)
"""The facts, used in turn (item i has topic i mod 7)."""


def judging_items(n: int, seed: int) -> list[JudgingItem]:
    """`n` labelled answers, half passing, the same for the same `seed`.

    A failing answer is one of the topic's wrong answers, chosen at random: a changed number,
    the figure of another place or channel ("place"), a dropped condition, or the opposite
    yes/no ("negation"). Each is fluent and on topic: only reading the context tells it apart.
    """
    rng = random.Random(seed)
    labels = ["pass"] * (n // 2) + ["fail"] * (n - n // 2)
    rng.shuffle(labels)
    items = []
    for index, label in enumerate(labels):
        topic, make = TOPICS[index % len(TOPICS)]
        context, question, answers = make(rng)
        kind = "correct" if label == "pass" else rng.choice(sorted(set(answers) - {"correct"}))
        items.append(
            JudgingItem(
                index=index,
                topic=topic,
                question=question,
                context=context,
                answer=answers[kind],
                label=label,
                kind=kind,
            )
        )
    return items


# ---------------------------------------------------------------------------------------------
# Answers with citations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CitationItem:
    """One question, its source document (`source`, `document`) and the fact that answers it."""

    index: int
    topic: str
    question: str
    source: str
    document: str
    fact: str


# Each topic: (its folder and file stem, a function of rng -> (question, document, fact)).
_Cited = Callable[[random.Random], tuple[str, str, str]]

DEVICES = ("e-reader", "speaker", "headset", "smartwatch", "camera", "power bank")
PLANS = ("Basic", "Plus", "Team", "Studio", "Pro", "Family")


def _c_warranty(rng: random.Random) -> tuple[str, str, str]:
    product = rng.choice(PRODUCTS)
    months = rng.choice((6, 10, 18, 24, 30, 36))
    return (
        f"How long is the warranty on your {product}?",
        f"Our {product} carry a warranty of {months} months from the date of purchase. It "
        "covers manufacturing defects, not accidental damage.",
        f"{months} months",
    )


RETURNABLE = (
    "Unused items",
    "Unopened items",
    "Items in their original packaging",
    "Sale items",
    "Gifts",
)
CHANNELS = ("Email support", "Chat support", "The help desk", "The billing team")
GROUPS = ("Members", "Students", "Teachers", "Seniors", "New customers")


def _c_returns(rng: random.Random) -> tuple[str, str, str]:
    what = rng.choice(RETURNABLE)
    days = rng.choice((10, 14, 21, 30, 45, 60, 90))
    return (
        f"How many days do I have to return {what[0].lower() + what[1:]}?",
        f"{what} can be returned within {days} days of delivery. Refunds are paid to the "
        "original payment method.",
        f"{days} days",
    )


def _c_shipping(rng: random.Random) -> tuple[str, str, str]:
    country = rng.choice(COUNTRIES)
    days = rng.randrange(2, 10)
    return (
        f"How long does delivery to {country} take?",
        f"Orders to {country} are delivered within {days} business days. A tracking link is "
        "sent by email when the parcel leaves the warehouse.",
        f"{days} business days",
    )


def _c_support(rng: random.Random) -> tuple[str, str, str]:
    channel = rng.choice(CHANNELS)
    hours = rng.choice((2, 4, 6, 8, 12, 24, 48))
    return (
        f"How quickly does {channel[0].lower() + channel[1:]} reply?",
        f"{channel} replies within {hours} hours on weekdays. Phone support is for business "
        "customers only.",
        f"{hours} hours",
    )


def _c_discount(rng: random.Random) -> tuple[str, str, str]:
    group = rng.choice(GROUPS)
    percent = rng.choice((5, 10, 12, 15, 20, 25, 30))
    return (
        f"What discount do {group.lower()} get?",
        f"{group} get {percent}% off every order. The discount cannot be combined with other "
        "offers.",
        f"{percent}%",
    )


def _c_battery(rng: random.Random) -> tuple[str, str, str]:
    device = rng.choice(DEVICES)
    hours = rng.choice((6, 9, 12, 15, 20, 30))
    return (
        f"How long does the battery of the {device} last?",
        f"The {device} battery lasts up to {hours} hours on one charge. A full charge takes "
        "about two hours.",
        f"{hours} hours",
    )


def _c_leave(rng: random.Random) -> tuple[str, str, str]:
    who = rng.choice(("full-time employees", "part-time employees", "apprentices", "managers"))
    days = rng.choice((12, 18, 20, 22, 24, 25, 28, 30))
    return (
        f"How many days of paid leave do {who} get per year?",
        f"{who[0].upper() + who[1:]} get {days} days of paid leave per year. Unused days can be "
        "carried over until the end of March.",
        f"{days} days",
    )


def _c_trial(rng: random.Random) -> tuple[str, str, str]:
    plan = rng.choice(PLANS)
    days = rng.choice((7, 10, 14, 21, 30, 45, 60))
    return (
        f"How long is the free trial of the {plan} plan?",
        f"The free trial of the {plan} plan lasts {days} days. No payment card is needed to "
        "start it.",
        f"{days} days",
    )


def _c_fee(rng: random.Random) -> tuple[str, str, str]:
    fee, when = rng.choice(
        (
            ("late payment", "an invoice is paid after its due date"),
            ("cancellation", "an order is cancelled after it has shipped"),
            ("paper invoice", "an invoice is sent by post"),
            ("returned parcel", "a parcel is refused at delivery"),
        )
    )
    euros = rng.choice((3, 5, 8, 10, 12, 15, 20, 25, 40))
    return (
        f"What is the fee for a {fee}?",
        f"A {fee} fee of {euros} euros is charged when {when}.",
        f"{euros} euros",
    )


def _c_checkout(rng: random.Random) -> tuple[str, str, str]:
    city = rng.choice(CITIES)
    hour = rng.choice((10, 11, 12))
    return (
        f"What time is check-out at the {city} hotel?",
        f"Check-out at the {city} hotel is at {hour}:00. Late check-out can be booked at the "
        "front desk.",
        f"{hour}:00",
    )


CITATION_TOPICS: tuple[tuple[str, str, _Cited], ...] = (
    ("warranty", "policies/warranty", _c_warranty),
    ("returns", "policies/returns", _c_returns),
    ("shipping", "faq/shipping", _c_shipping),
    ("support", "support/contact", _c_support),
    ("discount", "offers/members", _c_discount),
    ("battery", "products/battery", _c_battery),
    ("leave", "handbook/leave", _c_leave),
    ("trial", "billing/trial", _c_trial),
    ("fee", "billing/fees", _c_fee),
    ("checkout", "hotels/checkout", _c_checkout),
)
"""The questions, used in turn (item i has topic i mod 10)."""


def citation_items(n: int, seed: int) -> list[CitationItem]:
    """`n` questions, each with one source document and its fact, the same for the same `seed`.

    The document is two sentences: the one with the fact, and one more about something else.
    Its source id is the topic's path with a number, `policies/warranty-3.md`.
    """
    rng = random.Random(seed)
    items = []
    for index in range(n):
        topic, stem, make = CITATION_TOPICS[index % len(CITATION_TOPICS)]
        question, document, fact = make(rng)
        source = f"{stem}-{rng.randrange(1, 10)}.md"
        items.append(CitationItem(index, topic, question, source, document, fact))
    return items
