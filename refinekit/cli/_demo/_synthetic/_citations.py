"""Questions, each with one short source document and the fact that answers it."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ._judging import CITIES, COUNTRIES, PRODUCTS

__all__ = ["CitationItem", "citation_items"]


@dataclass(frozen=True)
class CitationItem:
    """One question, its source document (`source`, `document`) and the fact that answers it."""

    index: int
    topic: str
    question: str
    source: str
    document: str
    fact: str


DEVICES = ("e-reader", "speaker", "headset", "smartwatch", "camera", "power bank")
PLANS = ("Basic", "Plus", "Team", "Studio", "Pro", "Family")
RETURNABLE = (
    "Unused items",
    "Unopened items",
    "Items in their original packaging",
    "Sale items",
    "Gifts",
)
CHANNELS = ("Email support", "Chat support", "The help desk", "The billing team")
GROUPS = ("Members", "Students", "Teachers", "Seniors", "New customers")
STAFF = ("full-time employees", "part-time employees", "apprentices", "managers")
FEES = (
    ("late payment", "an invoice is paid after its due date"),
    ("cancellation", "an order is cancelled after it has shipped"),
    ("paper invoice", "an invoice is sent by post"),
    ("returned parcel", "a parcel is refused at delivery"),
)


@dataclass(frozen=True)
class _CitedTopic:
    """A question, its document and its fact, filled with a subject and a number drawn in turn.

    The texts are format strings: `{s}` is the subject (`{s[0]}`, `{s[1]}` its parts when it
    has several), `{low}` and `{cap}` the subject with its first letter in lower or upper case,
    `{n}` the number.
    """

    topic: str
    stem: str
    subjects: tuple[Any, ...]
    numbers: tuple[int, ...]
    question: str
    document: str
    fact: str

    def draw(self, rng: random.Random) -> tuple[str, str, str]:
        s = rng.choice(self.subjects)
        fields = {"s": s, "n": rng.choice(self.numbers)}
        if isinstance(s, str):
            fields |= {"low": s[:1].lower() + s[1:], "cap": s[:1].upper() + s[1:]}
        return (
            self.question.format(**fields),
            self.document.format(**fields),
            self.fact.format(**fields),
        )


CITATION_TOPICS: tuple[_CitedTopic, ...] = (
    _CitedTopic(
        "warranty",
        "policies/warranty",
        PRODUCTS,
        (6, 10, 18, 24, 30, 36),
        "How long is the warranty on your {s}?",
        "Our {s} carry a warranty of {n} months from the date of purchase. It covers "
        "manufacturing defects, not accidental damage.",
        "{n} months",
    ),
    _CitedTopic(
        "returns",
        "policies/returns",
        RETURNABLE,
        (10, 14, 21, 30, 45, 60, 90),
        "How many days do I have to return {low}?",
        "{s} can be returned within {n} days of delivery. Refunds are paid to the original "
        "payment method.",
        "{n} days",
    ),
    _CitedTopic(
        "shipping",
        "faq/shipping",
        COUNTRIES,
        tuple(range(2, 10)),
        "How long does delivery to {s} take?",
        "Orders to {s} are delivered within {n} business days. A tracking link is sent by "
        "email when the parcel leaves the warehouse.",
        "{n} business days",
    ),
    _CitedTopic(
        "support",
        "support/contact",
        CHANNELS,
        (2, 4, 6, 8, 12, 24, 48),
        "How quickly does {low} reply?",
        "{s} replies within {n} hours on weekdays. Phone support is for business customers only.",
        "{n} hours",
    ),
    _CitedTopic(
        "discount",
        "offers/members",
        GROUPS,
        (5, 10, 12, 15, 20, 25, 30),
        "What discount do {low} get?",
        "{s} get {n}% off every order. The discount cannot be combined with other offers.",
        "{n}%",
    ),
    _CitedTopic(
        "battery",
        "products/battery",
        DEVICES,
        (6, 9, 12, 15, 20, 30),
        "How long does the battery of the {s} last?",
        "The {s} battery lasts up to {n} hours on one charge. A full charge takes about two hours.",
        "{n} hours",
    ),
    _CitedTopic(
        "leave",
        "handbook/leave",
        STAFF,
        (12, 18, 20, 22, 24, 25, 28, 30),
        "How many days of paid leave do {s} get per year?",
        "{cap} get {n} days of paid leave per year. Unused days can be carried over until the "
        "end of March.",
        "{n} days",
    ),
    _CitedTopic(
        "trial",
        "billing/trial",
        PLANS,
        (7, 10, 14, 21, 30, 45, 60),
        "How long is the free trial of the {s} plan?",
        "The free trial of the {s} plan lasts {n} days. No payment card is needed to start it.",
        "{n} days",
    ),
    _CitedTopic(
        "fee",
        "billing/fees",
        FEES,
        (3, 5, 8, 10, 12, 15, 20, 25, 40),
        "What is the fee for a {s[0]}?",
        "A {s[0]} fee of {n} euros is charged when {s[1]}.",
        "{n} euros",
    ),
    _CitedTopic(
        "checkout",
        "hotels/checkout",
        CITIES,
        (10, 11, 12),
        "What time is check-out at the {s} hotel?",
        "Check-out at the {s} hotel is at {n}:00. Late check-out can be booked at the front desk.",
        "{n}:00",
    ),
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
        cited = CITATION_TOPICS[index % len(CITATION_TOPICS)]
        question, document, fact = cited.draw(rng)
        source = f"{cited.stem}-{rng.randrange(1, 10)}.md"
        items.append(CitationItem(index, cited.topic, question, source, document, fact))
    return items
