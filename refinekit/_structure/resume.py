"""Resuming a reply from its validated prefix: where to cut it, and whether a reply continued.

When a streamed reply's completed field fails, the fields before it have passed their own
validation. The next request keeps them: by *prefill* (the reply's own text, cut just after
the failed field's key and colon, is sent as the start of the assistant's reply, and the
server writes only the rest) or by *restating* them (the correction says they are fixed and
asks for the whole object again). Either way the final value is validated whole, and a reply
that changes a kept field fails.

This module holds the text work: `cut(text, keys)` finds where the first member not kept
starts, and `continues(head, point)` tells a continuation from a server that started the
object again (one that ignored the prefill).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic_core

__all__ = ["Cut", "ResumePoint", "ResumeWay", "continues", "cut"]

ResumeWay = Literal["prefill", "restate"]
"""How a resumed request keeps the validated fields (docs/streaming.md)."""

_TOKENS = re.compile(r'[{}\[\]",:]')  # what changes the scan's state outside a string
_IN_STRING = re.compile(r'["\\]')


@dataclass(frozen=True)
class Cut:
    """Where a reply's text is cut: before the value of its first member not kept.

    Attributes:
        prefix: The text up to and including that member's key and colon
            (`{"number": "A-1", "vendor":`), or, when the text stops after a kept member's
            comma, up to that comma.
        keys: The keys of the members before it, in the reply's order.
        key: That member's key; None when the text stops before the next key.
    """

    prefix: str
    keys: tuple[str, ...]
    key: str | None


def cut(text: str, kept: frozenset[str]) -> Cut | None:
    """Cut `text` (a reply that starts as a JSON object) before its first member not in `kept`.

    A text that stops after a kept member's `,` (a reply cut off there) is cut after it.
    Returns None when the text is not an object's start, a member before the cut is
    repeated, or no member is kept and none outside `kept` has begun.
    """
    start = len(text) - len(text.lstrip())
    if not text.startswith("{", start):
        return None
    depth = 0
    i = start
    keys: list[str] = []
    expecting_key = False
    key: str | None = None
    n = len(text)
    after_comma = 0  # where the text after the last top-level comma starts
    while i < n:
        found = _TOKENS.search(text, i)
        if found is None:
            break
        ch = found.group()
        i = found.end()
        if ch == '"':
            end = _string_end(text, i)
            if end is None:
                return None
            if depth == 1 and expecting_key:
                try:
                    key = pydantic_core.from_json(text[i - 1 : end])
                except ValueError:
                    return None
                expecting_key = False
            i = end
        elif ch in "{[":
            depth += 1
            if depth == 1:
                expecting_key = True
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return None
        elif ch == "," and depth == 1:
            expecting_key = True
            after_comma = i
        elif ch == ":" and depth == 1 and key is not None:
            if key in keys:  # a repeated key: which value stands is not for the prefix to say
                return None
            if key not in kept:
                return Cut(text[:i], tuple(keys), key)
            keys.append(key)
            key = None
    if depth == 1 and expecting_key and keys and key is None and after_comma:
        return Cut(text[:after_comma], tuple(keys), None)
    return None


def _string_end(text: str, i: int) -> int | None:
    """The index after the string that starts before `i` (its opening quote at `i - 1`)."""
    while True:
        found = _IN_STRING.search(text, i)
        if found is None:
            return None
        if found.group() == "\\":
            i = found.end() + 1
            continue
        return found.end()


@dataclass(frozen=True)
class ResumePoint:
    """What a resumed request keeps of a reply whose field failed.

    Attributes:
        way: "prefill" or "restate".
        prefix: The reply's text up to the failed member's key and colon (sent as the start of
            the assistant's reply, under prefill).
        kept: The kept fields by name, in the reply's order: each as validated (its field's
            type).
        shown: The kept fields by name, each in its JSON form (what a correction states).
        keys: The kept fields' keys as the reply wrote them (the name or an alias), by name.
        key: The key of the member the request resumes at (the first not kept); None when
            the reply stopped after a kept member's comma.
    """

    way: ResumeWay
    prefix: str
    kept: Mapping[str, Any] = field(repr=False)
    shown: Mapping[str, Any]
    keys: Mapping[str, str]
    key: str | None

    def restated(self) -> dict[str, Any] | None:
        """The kept fields by key in their JSON form, for a restated request (else None)."""
        if self.way != "restate" or not self.kept:
            return None
        return {self.keys[name]: value for name, value in self.shown.items()}


def continues(head: str, point: ResumePoint) -> bool | None:
    """Whether a prefilled reply's start `head` continues the prefix (None: cannot tell yet).

    A server that does not continue an assistant message writes a new one: the object again,
    from its first key (`{"number": ...`). A continuation starts with the resumed member's
    value; only a value that is itself an object whose first key is the reply's first key
    would look the same, and that is taken as a new start.
    """
    text = head.lstrip()
    if not text:
        return None
    if text[0] != "{":
        return True
    first = next(iter(point.keys.values()), point.key or "")
    restart = "{" + _json_key(first)
    body = "{" + text[1:].lstrip()
    if len(body) < len(restart):
        return None if restart.startswith(body) else True
    return not body.startswith(restart)


def _json_key(key: str) -> str:
    return pydantic_core.to_json(key).decode()
