"""Numbers given as options: checked without converting them, and shown without 400 digits.

An `int` can be larger than any float (`10**400`): `math.isfinite`, `math.isnan` and `float()`
then raise `OverflowError` instead of the option's documented `ValueError`. The checks here
compare exactly (Python compares an int with a float without converting it), and `shown`
writes such an int as its size, since `repr` of an int with more than 4,300 digits raises.
"""

from __future__ import annotations

import math
import sys
from typing import TypeGuard

__all__ = ["FLOAT_MAX", "is_number", "is_real", "shown"]

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
