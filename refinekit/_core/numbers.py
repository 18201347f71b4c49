"""Numbers: options checked without converting them, and numbers read from text as written.

An `int` can be larger than any float (`10**400`): `math.isfinite`, `math.isnan` and `float()`
then raise `OverflowError` instead of the option's documented `ValueError`. The checks here
compare exactly (Python compares an int with a float without converting it), and `shown`
writes such an int as its size, since `repr` of an int with more than 4,300 digits raises.

`read_numbers` is the one reader of the numbers a text writes in digits: grounding
(`InSource`, grounded decoding's enums, provenance) and the rule checks
(`checks.numbers_supported`, `checks.values_supported`) all read a text with it. Each number
is a `Decimal` exactly as written (never through a float, never rounded to a context's
precision, never through `int`, so 5,000 digits are read as 5,000 digits), over the whole
text, in time linear in its length. `number_value` reads a value (a field's, a JSON
answer's) the same way, so the two compare exactly: `12.50` is 12.5, and `1e400` is not 1.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import NamedTuple, TypeGuard

__all__ = [
    "FLOAT_MAX",
    "Number",
    "WrittenNumber",
    "is_number",
    "is_real",
    "number_value",
    "read_numbers",
    "read_word_numbers",
    "shown",
    "shown_written",
    "usd",
]

FLOAT_MAX = sys.float_info.max
"""The largest finite float (about 1.8e308): a number option may be at most this."""


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether `value` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_real(value: int | float) -> bool:
    """Whether a number is finite and a float can hold it (`10**400` cannot; NaN is not)."""
    if isinstance(value, int):
        return -FLOAT_MAX <= value <= FLOAT_MAX
    return math.isfinite(value)


def shown(value: object) -> str:
    """`repr(value)`, except an int too large for a float: "an int of 401 digits"."""
    if isinstance(value, int) and not isinstance(value, bool) and not is_real(value):
        digits = math.floor(math.log10(abs(value))) + 1  # log10 takes big ints exactly
        return f"an int of {digits} digits"
    return repr(value)


# --- numbers read from a text ----------------------------------------------------------------

# A number as written: 4, 4.0, 1,020.50 (thousands in groups of three), 15% or 15 percent. Not
# part of a word or a code (`FA00731`, `v2`), nor the head of a longer one (`12ab3`). The
# `(?!\d)` after the whole part and after the fraction only cut short the backtracking (a
# number followed by a digit is refused by the last lookahead anyway): with them the costly
# lookahead runs a bounded number of times per word, so reading stays linear in the text.
_NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?!\d)(\.\d+(?!\d))?(?!\w*\d)"
    r"(?:\s?(%|per\s?cent\b|percent\b))?",
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
"""A number's value (exact: `Decimal("12.50") == Decimal("12.5")`) and whether it is a
percentage."""


class WrittenNumber(NamedTuple):
    """A number a text writes: `text[start:end]` is `written`."""

    start: int
    end: int
    written: str
    value: Decimal
    percent: bool


def read_numbers(text: str) -> Iterator[WrittenNumber]:
    """Each number `text` writes in digits, first to last, with its exact value.

    The value is the `Decimal` of the digits as written, commas dropped (`1,020.50` is
    1020.50, equal to 1020.5): never rounded, whatever its length.
    """
    for match in _NUMBER.finditer(text):
        whole, fraction, percent = match.groups()
        written = match.group(0).rstrip()
        yield WrittenNumber(
            match.start(),
            match.start() + len(written),
            written,
            Decimal(whole.replace(",", "") + (fraction or "")),
            percent is not None,
        )


def read_word_numbers(text: str) -> Iterator[WrittenNumber]:
    """Each number `text` writes as a word: zero to twenty, the tens, hundred and thousand."""
    for match in _WORD_NUMBER.finditer(text):
        yield WrittenNumber(
            match.start(),
            match.end(),
            match.group(0),
            Decimal(_WORDS[match.group(1).lower()]),
            match.group(2) is not None,
        )


def number_value(value: object) -> Decimal | None:
    """A number as grounding compares it: an exact `Decimal`, None for anything else.

    An int or a `Decimal` is taken exactly (a 29-digit int keeps its 29 digits); a float as
    it is written (`repr`: 0.1 is 0.1, not its binary expansion). Bools, NaN and the
    infinities are None.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return None
    try:
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError):  # pragma: no cover - every int, float, Decimal is one
        return None
    return number if number.is_finite() else None


_SHOWN_CHARS = 64


def shown_written(written: str) -> str:
    """A number as written, for a message: one of more than 64 characters cut, its length said."""
    if len(written) <= _SHOWN_CHARS:
        return written
    return f"{written[:24]}...{written[-8:]} ({len(written)} characters)"


def usd(value: float) -> str:
    """A cost as the reports show it: 6 significant figures, in the currency of the prices."""
    return f"{value:.6g}"
