"""Reading a source text for the values it holds: spans at word boundaries, and numbers.

What grounding compares is defined here once: a string is in a text when, with case and runs
of whitespace ignored, it is a substring of it (`normal`); a number is in a text when one of
the text's numbers, as written in digits, has its value (`numbers`: `1,020.50` is 1020.5).
`candidate_spans` lists the strings a grounded field may take from a text, `locate` and
`locate_number` say where a value is in it. The validator (`InSource`), grounded decoding
(`response_format(..., source=...)`), the correction's template and the rule checks
(`checks.numbers_supported`, `checks.values_supported`) all read a text this way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = [
    "MAX_SOURCE_CHARS",
    "Found",
    "Number",
    "candidate_numbers",
    "candidate_spans",
    "locate",
    "locate_number",
    "locate_word_number",
    "normal",
    "number_value",
    "numbers",
    "word_numbers",
]

MAX_SOURCE_CHARS = 20_000
"""The most characters of a source that are read for spans and suggestions."""

_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
_LEADING = "\"'([{<#*\u201c\u2018\u00ab"  # and the opening curly quotes, guillemet
_TRAILING = "\"'.,;:!?)]}>*|\u201d\u2019\u00bb"

# A number as written: 4, 4.0, 1,020.50 (thousands in groups of three), 15% or 15 percent. Not
# part of a word or a code (`FA00731`, `v2`), nor the tail of a longer number.
_NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\w*\d)(?:\s?(%|per\s?cent\b|percent\b))?",
    re.IGNORECASE,
)
_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
_TENS = {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80}
_WORDS = dict(zip(_SMALL.split(" "), range(21), strict=True)) | _TENS
_WORDS |= {"ninety": 90, "hundred": 100, "thousand": 1000}
_WORD_NUMBER = re.compile(
    r"\b(" + "|".join(_WORDS) + r")\b(?:\s?(%|per\s?cent\b|percent\b))?", re.IGNORECASE
)

Number = tuple[Decimal, bool]
"""A number's value (normalised: 12.50 is 12.5) and whether it is a percentage."""


@dataclass(frozen=True)
class Found:
    """Where a value is in a text: `text[start:end]`, as written there."""

    start: int
    end: int
    text: str


def normal(text: str) -> str:
    """`text` as grounding compares it: case folded, runs of whitespace one space, trimmed."""
    return _SPACES.sub(" ", text).strip().casefold()


def numbers(text: str) -> list[tuple[Found, Number]]:
    """Each number written in digits in `text`: where, and its (value, is a percentage)."""
    found = []
    for match in _NUMBER.finditer(text):
        whole, fraction, percent = match.groups()
        try:
            value = Decimal(whole.replace(",", "") + (fraction or ""))
        except InvalidOperation:  # pragma: no cover - the pattern only matches digits
            continue
        written = match.group(0)
        stripped = written.rstrip()
        place = Found(match.start(), match.start() + len(stripped), stripped)
        found.append((place, (value.normalize(), percent is not None)))
    return found


def word_numbers(text: str) -> list[Number]:
    """The numbers `text` writes as words, zero to twenty, the tens, hundred and thousand."""
    return [
        (Decimal(_WORDS[m.group(1).lower()]), m.group(2) is not None)
        for m in _WORD_NUMBER.finditer(text)
    ]


def number_value(value: object) -> Decimal | None:
    """A JSON or Python number as grounding compares it (None for anything else, bools too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return None
    try:
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError):
        return None
    return number.normalize() if number.is_finite() else None


def _normal_map(text: str) -> tuple[str, list[int]]:
    """`normal(text)` and, for each of its characters, the index it came from in `text`."""
    out: list[str] = []
    where: list[int] = []
    space = False
    for i, c in enumerate(text):
        if c.isspace():
            space = bool(out)
            continue
        if space:
            out.append(" ")
            where.append(i - 1)
            space = False
        folded = c.casefold()
        out.extend(folded)
        where.extend([i] * len(folded))
    return "".join(out), where


def locate(value: str, text: str) -> Found | None:
    """Where `value` first appears in `text`, compared as `normal` compares; None if nowhere.

    An occurrence at word boundaries is preferred to one inside a word (`"Co"` in `"Co."`
    rather than in `"Cobalt"`).
    """
    target = normal(value)
    if not target:
        return None
    folded, where = _normal_map(text[:MAX_SOURCE_CHARS])
    first: int | None = None
    start = folded.find(target)
    while start >= 0:
        end = start + len(target)
        if first is None:
            first = start
        before = folded[start - 1] if start else " "
        after = folded[end] if end < len(folded) else " "
        if not (before.isalnum() and target[0].isalnum()) and not (
            after.isalnum() and target[-1].isalnum()
        ):
            first = start
            break
        start = folded.find(target, start + 1)
    if first is None:
        return None
    begin, finish = where[first], where[first + len(target) - 1] + 1
    return Found(begin, finish, text[begin:finish])


def locate_number(value: Decimal, text: str, *, percent: bool | None = None) -> Found | None:
    """Where a number of `value` is first written in digits in `text` (None if nowhere).

    Args:
        value: The number, normalised (`number_value`).
        text: The text.
        percent: Only a percentage (True), only a plain number (False), or either (None).
    """
    for place, (number, is_percent) in numbers(text[:MAX_SOURCE_CHARS]):
        if number == value and (percent is None or percent == is_percent):
            return place
    return None


def locate_word_number(value: Decimal, text: str, *, percent: bool | None = None) -> Found | None:
    """Where a number of `value` is first written as a word in `text` ("two", "twenty %").

    The words are those of `word_numbers`: zero to twenty, the tens, hundred and thousand.

    Args:
        value: The number, normalised (`number_value`).
        text: The text.
        percent: Only a percentage (True), only a plain number (False), or either (None).
    """
    for match in _WORD_NUMBER.finditer(text[:MAX_SOURCE_CHARS]):
        number = Decimal(_WORDS[match.group(1).lower()]).normalize()
        is_percent = match.group(2) is not None
        if number == value and (percent is None or percent == is_percent):
            return Found(match.start(), match.end(), match.group(0))
    return None


def candidate_spans(text: str, *, max_words: int, max_chars: int) -> list[str]:
    """Every span of `text` of 1 to `max_words` words, as a grounded string may take it.

    A span starts and ends at word boundaries (words are runs of non-space characters); its
    runs of whitespace are one space, so each span passes `InSource` for `text`. Each comes
    as written and, when it differs, without the punctuation at its edges (`"Co."` and
    `"Co"`, `"#4521,"` and `"4521"`). Spans longer than `max_chars` are left out. In order
    of first appearance, without repeats.
    """
    words = [(m.start(), m.end()) for m in _WORD.finditer(text[:MAX_SOURCE_CHARS])]
    seen: dict[str, None] = {}
    for i in range(len(words)):
        for size in range(1, max_words + 1):
            if i + size > len(words):
                break
            raw = " ".join(text[words[i][0] : words[i + size - 1][1]].split())
            for span in (raw, raw.lstrip(_LEADING).rstrip(_TRAILING)):
                if span and len(span) <= max_chars:
                    seen.setdefault(span, None)
    return list(seen)


def candidate_numbers(text: str, *, integers: bool) -> list[Decimal]:
    """The values of the numbers `text` writes in digits, first appearance first, no repeats.

    Args:
        text: The source text.
        integers: Only the whole numbers (for an integer field).
    """
    seen: dict[Decimal, None] = {}
    for _, (value, _percent) in numbers(text[:MAX_SOURCE_CHARS]):
        if not integers or value == value.to_integral_value():
            seen.setdefault(value, None)
    return list(seen)
