"""Labelled answers to judge, half of them wrong in a way only the context shows."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CITIES", "COUNTRIES", "PRODUCTS", "JudgingItem", "judging_items"]


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
