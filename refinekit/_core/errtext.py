"""Text refinekit writes for a model: pydantic errors as short lines, and valid UTF-8 only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .redact import redact

_MAX_INPUT_CHARS = 60


def error_path(loc: Sequence[int | str]) -> str:
    """`('items', 0, 'price')` as `items[0].price`; the empty path as `(the whole value)`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(the whole value)"


def utf8_text(text: str) -> str:
    r"""`text` as UTF-8 can carry it: each lone UTF-16 surrogate becomes U+FFFD.

    A model's reply can hold a lone surrogate (a JSON `"\ud83d"` escape decodes to one), and
    so can a caller's text; no HTTP client can send it. Every text refinekit puts into a
    request goes through here. A surrogate pair split in two code points is joined.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def correction_text(text: str) -> str:
    """A correction turn's text as sent: credentials redacted, as UTF-8 can carry it."""
    return utf8_text(redact(text))


def short_value(value: Any) -> str:
    """A value as short JSON for a message (at most 60 characters)."""
    try:
        text = json.dumps(value, default=str)
    except ValueError:  # an int longer than sys.get_int_max_str_digits() cannot be written
        text = "a number too long to show"
    return text if len(text) <= _MAX_INPUT_CHARS else text[: _MAX_INPUT_CHARS - 3] + "..."


def error_lines(errors: Sequence[Any], *, max_items: int, max_chars: int) -> list[str]:
    """One `- path: message (got input)` line per error, capped in count and total length."""
    lines: list[str] = []
    size = 0
    for i, e in enumerate(errors):
        line = f"- {error_path(e['loc'])}: {e['msg']}"
        if e["type"] != "missing":
            line += f" (got {short_value(e.get('input'))})"
        if i >= max_items or size + len(line) > max_chars:
            lines.append(f"- ... and {len(errors) - i} more error(s)")
            break
        lines.append(line)
        size += len(line)
    return lines
