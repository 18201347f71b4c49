"""The values an answer states, read from its JSON or its prose, and where a text states one.

A JSON answer states each of its strings and numbers (a number exactly as written); a prose
answer the numbers it writes in digits and the names it quotes. A value is looked up in a text
as grounding compares: a string case- and space-blind, a number by value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .._core.errtext import error_path
from .._core.jsonload import TooDeep, loads
from .spans import Found, locate, locate_number, locate_word_number, numbers

__all__ = ["Stated", "json_values", "prose_values", "where"]

_QUOTED = re.compile(
    r'"([^"\n]{1,120})"'  # "Acme Ltd"
    r"|(?<!\w)'([^'\n]{1,120})'(?!\w)"  # 'Acme Ltd', not the apostrophe of "don't"
    r"|\u201c([^\u201d\n]{1,120})\u201d"  # curly double quotes
    r"|\u2018([^\u2019\n]{1,120})\u2019"  # curly single quotes
    r"|\u00ab\s?([^\u00bb\n]{1,120}?)\s?\u00bb"  # guillemets
)
_MAX_JSON_VALUES = 500
"""The most values of a JSON answer that are read (the rest are not stated values)."""


@dataclass(frozen=True)
class Stated:
    """A value an answer states: its field path ("" in prose), as written, and its number."""

    path: str
    written: str
    number: Decimal | None
    percent: bool | None


class _JsonNumber:
    """A JSON answer's number as the answer writes it: read neither as a float nor as an int."""

    __slots__ = ("written",)

    def __init__(self, written: str) -> None:
        self.written = written


def json_values(answer: str) -> list[Stated] | None:
    """Each string and number of a JSON answer (an object or an array), or None for prose.

    A number is its exact `Decimal`, as written (`1e400` is not a float's infinity, a
    5,000-digit one is no int past Python's conversion limit). The answer is read to
    `MAX_DEPTH` (200) levels and walked without recursion.

    Raises:
        TooDeep: The answer is JSON nested more than 200 levels deep.
    """
    text = answer.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        # NaN and the infinities (JSON's extension) are stated as written: text to find too
        data = loads(text, parse_float=_JsonNumber, parse_int=_JsonNumber, parse_constant=str)
    except TooDeep:
        raise
    except ValueError:
        return None
    found: list[Stated] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack and len(found) < _MAX_JSON_VALUES:
        item, path = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, (*path, str(k))) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, str):
            if item.strip():
                found.append(Stated(error_path(path), item, None, None))
        elif isinstance(item, _JsonNumber):
            found.append(Stated(error_path(path), item.written, Decimal(item.written), None))
    return found


def prose_values(answer: str) -> list[Stated]:
    """The numbers a prose answer writes in digits and the names it quotes, first seen first."""
    found: list[tuple[int, Stated]] = []
    for place, (value, percent) in numbers(answer):
        found.append((place.start, Stated("", place.text, value, percent)))
    for match in _QUOTED.finditer(answer):
        quoted = next(g for g in match.groups() if g is not None).strip()
        if any(c.isalnum() for c in quoted):
            found.append((match.start(), Stated("", quoted, None, None)))
    found.sort(key=lambda pair: pair[0])
    seen: set[tuple[Decimal | None, bool | None, str]] = set()
    unique = []
    for _, stated in found:
        key: tuple[Decimal | None, bool | None, str]
        if stated.number is not None:
            key = (stated.number, stated.percent, "")
        else:
            key = (None, None, " ".join(stated.written.split()).casefold())
        if key not in seen:
            seen.add(key)
            unique.append(stated)
    return unique


def where(stated: Stated, text: str, words: bool) -> Found | None:
    """Where a text states a value; `words`: a number written as a word counts too."""
    if stated.number is None:
        return locate(stated.written, text)
    place = locate_number(stated.number, text, percent=stated.percent)
    if place is None and words:
        place = locate_word_number(stated.number, text, percent=stated.percent)
    return place
