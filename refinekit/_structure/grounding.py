"""Extracted strings that must appear in the source text: a validator for extraction schemas."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import AfterValidator, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = ["InSource", "closest_span", "in_source"]

_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
_MAX_SOURCE_CHARS = 20_000
_MIN_RATIO = 0.5


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def closest_span(value: str, source: str) -> str | None:
    """The span of `source` most like `value` (word-aligned, compared case- and space-blind).

    Returns None when nothing in the source is even half alike.
    """
    words = [(m.start(), m.end()) for m in _WORD.finditer(source[:_MAX_SOURCE_CHARS])]
    target = _normal(value)
    n = max(1, len(target.split()))
    best: tuple[float, str] | None = None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    for size in (n - 1, n, n + 1):
        if size < 1:
            continue
        for i in range(0, max(0, len(words) - size) + 1):
            window = words[i : i + size]
            if not window:
                continue
            span = source[window[0][0] : window[-1][1]]
            matcher.set_seq1(_normal(span))
            ratio = matcher.ratio()
            if best is None or ratio > best[0]:
                best = (ratio, span.strip(" \t\r\n,.;:"))
    if best is None or best[0] < _MIN_RATIO:
        return None
    return best[1]


def in_source(key: str = "source") -> AfterValidator:
    """A validator: the string must appear in the validation context's text under `key`.

    Use it in an `Annotated` field of an extraction schema, and give `@self_correct` the
    source text as its `validation_context`::

        class Invoice(BaseModel):
            vendor: Annotated[str, in_source()]  # or Annotated[str, InSource]


        @self_correct(schema=Invoice, validation_context=lambda args: {"source": args["text"]})
        def extract(messages, text): ...

    Case and runs of spaces are ignored in the comparison. A value that does not appear fails
    validation (error type `not_in_source`) with a message naming the closest span of the text
    ("'Balt Paper' does not appear in the text; it has 'Baltic Paper'"), which `@self_correct`
    turns into a correction: its template shows that span in the field's place, for the model
    to confirm or replace (the reply is validated again either way).
    Without that key in the context (validating elsewhere, say loading stored data), the value
    is not checked.

    Args:
        key: The context key holding the source text.

    Returns:
        A pydantic `AfterValidator`.
    """
    if not isinstance(key, str) or not key:
        raise TypeError(f"in_source(key=...) takes a non-empty str, got {key!r}")

    def check(value: Any, info: ValidationInfo) -> Any:
        context = info.context
        if not isinstance(value, str) or not isinstance(context, Mapping):
            return value
        source = context.get(key)
        if not isinstance(source, str):
            return value
        if _normal(value) in _normal(source):
            return value
        shown = value if len(value) <= 80 else value[:77] + "..."
        closest = closest_span(value, source) if value.strip() else None
        if closest:
            raise PydanticCustomError(
                "not_in_source",
                "'{value}' does not appear in the text; it has '{closest}'",
                {"value": shown, "closest": closest},
            )
        raise PydanticCustomError(
            "not_in_source", "'{value}' does not appear in the text", {"value": shown}
        )

    return AfterValidator(check)


InSource = in_source()
"""`in_source()` with the default key: `Annotated[str, InSource]`."""
