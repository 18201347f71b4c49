"""The commands' words: text made safe for a terminal, figures, and `--report`'s own word."""

from __future__ import annotations

import re

__all__ = ["REPORT_BESIDE_STORE", "cases", "clean", "counted", "items", "pct"]

REPORT_BESIDE_STORE = "html"
"""What `--report` alone (or `--report html`) means: the report goes next to the run store,
named after the run (`report-run-ID.html`)."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def clean(text: str, width: int | None = None) -> str:
    """Model or user text made safe for a terminal: one line, no control characters."""
    text = _CONTROL.sub("?", " ".join(str(text).split()))
    if width is not None and len(text) > width:
        text = text[: max(1, width - 1)] + "\u2026"
    return text


def pct(value: float | None, digits: int = 3) -> str:
    """A figure to `digits` decimals, or n/a."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` things in words: "1 case", "2 cases" (`many` when the plural is not `one` + s)."""
    return f"{n} {one}" if n == 1 else f"{n} {many or one + 's'}"


def cases(n: int) -> str:
    """`n` cases, in words."""
    return counted(n, "case")


def items(n: int) -> str:
    """`n` items (of a labelled file), in words."""
    return counted(n, "item")
