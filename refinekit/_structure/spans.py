"""Reading a source text for the values it holds: spans at word boundaries, and numbers.

What grounding compares is defined here once: a string is in a text when, with case and runs
of whitespace ignored, it is a substring of it (`normal`); a number is in a text when one of
the text's numbers, as written in digits, has its value exactly (`numbers`: `1,020.50` is
1020.5; read by `_core.numbers.read_numbers`, over the whole text).
`candidate_spans` lists the strings a grounded field may take from a text, `locate` and
`locate_number` say where a value is in it. The validator (`InSource`), grounded decoding
(`response_format(..., source=...)`), the correction's template and the rule checks
(`checks.numbers_supported`, `checks.values_supported`) all read a text this way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from .._core.numbers import (
    Number,
    WrittenNumber,
    number_value,
    read_numbers,
    read_word_numbers,
)

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
"""The most characters of a source that are read for spans and suggestions (strings only:
numbers are read over the whole text)."""

_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
_LEADING = "\"'([{<#*\u201c\u2018\u00ab"  # and the opening curly quotes, guillemet
_TRAILING = "\"'.,;:!?)]}>*|\u201d\u2019\u00bb"


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
    """Each number written in digits in `text`: where, and its (value, is a percentage).

    Read by `_core.numbers.read_numbers`, the whole text, each value exact as written.
    """
    return [(Found(n.start, n.end, n.written), (n.value, n.percent)) for n in read_numbers(text)]


def word_numbers(text: str) -> list[Number]:
    """The numbers `text` writes as words, zero to twenty, the tens, hundred and thousand."""
    return [(n.value, n.percent) for n in read_word_numbers(text)]


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
        value: The number, exact (`number_value`).
        text: The text.
        percent: Only a percentage (True), only a plain number (False), or either (None).
    """
    return _first(read_numbers(text), value, percent)


def locate_word_number(value: Decimal, text: str, *, percent: bool | None = None) -> Found | None:
    """Where a number of `value` is first written as a word in `text` ("two", "twenty %").

    The words are those of `word_numbers`: zero to twenty, the tens, hundred and thousand.

    Args:
        value: The number, exact (`number_value`).
        text: The text.
        percent: Only a percentage (True), only a plain number (False), or either (None).
    """
    return _first(read_word_numbers(text), value, percent)


def _first(read: Iterable[WrittenNumber], value: Decimal, percent: bool | None) -> Found | None:
    for n in read:
        if n.value == value and (percent is None or percent == n.percent):
            return Found(n.start, n.end, n.written)
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
    for n in read_numbers(text):
        if not integers or n.value == n.value.to_integral_value():
            seen.setdefault(n.value, None)
    return list(seen)
