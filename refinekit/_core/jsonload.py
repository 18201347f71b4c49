"""JSON refinekit did not write (a golden file, a price file, a stored row), read with a depth cap.

Python's `json` reads nesting by recursion: past the interpreter's recursion limit (about
1,000 levels, fewer the deeper the caller's stack) it raises `RecursionError`, and a value
just under it loads but crashes whatever walks it next (a hash, a copy, a report). `loads`
refuses a value nested more than `MAX_DEPTH` levels with `TooDeep`, a `ValueError`, so each
reader turns it into its own typed error as it does any text that is not JSON. 200 is also
where pydantic's JSON parser stops (a reply validated by a schema), so refinekit reads the
same depth of JSON everywhere.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "TooDeep", "loads"]

MAX_DEPTH = 200
"""The deepest nesting read: `[[1]]` is 2 levels; a scalar is 0."""


class TooDeep(ValueError):
    """JSON nested more than `MAX_DEPTH` levels deep."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested more than {MAX_DEPTH} levels deep")


def loads(text: str | bytes, **options: Any) -> Any:
    """`json.loads(text, **options)`, refusing a value nested more than `MAX_DEPTH` levels.

    Raises:
        TooDeep: The value is nested deeper than that.
        ValueError: Whatever else `json.loads` raises for text that is not JSON
            (`json.JSONDecodeError`, an integer of more digits than Python converts).
    """
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise TooDeep() from None
    if isinstance(text, bytes):
        opened = text.count(b"[") + text.count(b"{")
    else:
        opened = text.count("[") + text.count("{")
    if opened > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):  # (fewer brackets: not so deep)
        raise TooDeep()
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and dicts more than `limit` levels (walked without recursion)."""
    if not isinstance(value, (list, dict)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))
    return False
