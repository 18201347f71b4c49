"""Lossless repairs of a reply's JSON, made before a correction is spent.

Each repair changes how the reply is written, never what it says: a value the model did not
write is never made up. What is repaired (the names appear in events and errors):

- `code_fence`: the JSON inside a ``` fenced block;
- `prose`: the JSON inside text around it;
- `comment`: `//` and `/* */` comments outside strings, removed;
- `trailing_comma`: a comma before `}` or `]`, removed;
- `python_literal`: `True`, `False`, `None` as `true`, `false`, `null`; a Python dict or list
  literal (single quotes) as the same JSON;
- `wrapper`: one object around the expected value (`{"invoice": {...}}`), unwrapped;
- `number_to_string`: a number where a string is expected, as the string of its digits exactly
  as written (`7731` -> `"7731"`, `12.50` -> `"12.50"`).

Anything else (a misnamed key, a value with words after it, a missing field) goes to the model.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["REPAIRS", "Raw", "dumps_raw", "loads_raw", "syntax_fixes", "value_fixes"]

REPAIRS = (
    "code_fence",
    "prose",
    "comment",
    "trailing_comma",
    "python_literal",
    "wrapper",
    "number_to_string",
)
"""The names of the repairs, in the order they are tried."""

_MAX_LITERAL_CHARS = 100_000
_WORDS = {"True": "true", "False": "false", "None": "null"}


class Raw(str):
    """A JSON number as written in the reply (`12.50` stays `12.50`)."""

    __slots__ = ()


def loads_raw(text: str) -> Any:
    """JSON with every number kept as its written text (a `Raw`)."""
    return json.loads(text, parse_int=Raw, parse_float=Raw, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def dumps_raw(value: Any) -> str:
    """Write a `loads_raw` value back as JSON, numbers exactly as they were written."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        pairs = (f"{dumps_raw(str(k))}: {dumps_raw(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dumps_raw(v) for v in value) + "]"
    return json.dumps(value)


def _scan(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, in_string) spans of `text`: string literals apart from the rest."""
    i = 0
    n = len(text)
    start = 0
    while i < n:
        if text[i] == '"':
            if start < i:
                yield start, i, False
            j = i + 1
            while j < n:
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] == '"':
                    j += 1
                    break
                j += 1
            yield i, min(j, n), True
            i = start = min(j, n)
            continue
        i += 1
    if start < n:
        yield start, n, False


def _outside_strings(text: str, fix: Callable[[str, int], str]) -> str:
    """`text` with `fix(chunk, start)` applied to each span outside its string literals."""
    return "".join(
        text[start:end] if in_string else fix(text[start:end], start)
        for start, end, in_string in _scan(text)
    )


def balanced_end(text: str, start: int) -> int | None:
    """The index just past the bracket that closes the one at `text[start]`, strings skipped.

    None when it is never closed (a reply cut off) or the brackets do not match.
    """
    pairs = {"{": "}", "[": "]"}
    stack: list[str] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in pairs:
            stack.append(pairs[c])
        elif c in "}]":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def _strip_comments(code: str, fixes: list[str]) -> str:
    out = []
    i = 0
    n = len(code)
    while i < n:
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
            _add(fixes, "comment")
            continue
        if code.startswith("/*", i):
            j = code.find("*/", i + 2)
            i = n if j < 0 else j + 2
            _add(fixes, "comment")
            continue
        out.append(code[i])
        i += 1
    return "".join(out)


def _add(fixes: list[str], name: str) -> None:
    if name not in fixes:
        fixes.append(name)


def _words(code: str, fixes: list[str]) -> str:
    out = []
    i = 0
    n = len(code)
    while i < n:
        c = code[i]
        if c.isalpha() or c == "_":
            j = i
            while j < n and (code[j].isalnum() or code[j] == "_"):
                j += 1
            word = code[i:j]
            if word in _WORDS:
                out.append(_WORDS[word])
                _add(fixes, "python_literal")
            else:
                out.append(word)
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def syntax_fixes(text: str) -> tuple[str, list[str]]:
    """`text` with comments, trailing commas and Python literals fixed, and the fixes made.

    Strings are left alone. A Python dict or list literal (single quotes) is read with
    `ast.literal_eval` (which evaluates nothing) and written as JSON.
    """
    fixes: list[str] = []
    code = _outside_strings(text, lambda chunk, _: _words(_strip_comments(chunk, fixes), fixes))
    fixed = _trailing_commas(code, fixes)
    if fixes and _is_json(fixed):
        return fixed, fixes
    literal = _python_literal(text)  # single quotes: Python's own reader, which runs nothing
    if literal is not None:
        return literal, ["python_literal"]
    return (fixed, fixes) if fixes else (text, [])


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _trailing_commas(text: str, fixes: list[str]) -> str:
    def fix(chunk: str, start: int) -> str:
        chars = list(chunk)
        for k, c in enumerate(chars):
            if c != ",":
                continue
            rest = chunk[k + 1 :].lstrip()
            following = rest[:1]
            if not following:
                # the closing bracket may be in a later non-string chunk: look ahead
                following = _next_code_char(text, start + k + 1)
            if following in ("}", "]"):
                chars[k] = ""
                _add(fixes, "trailing_comma")
        return "".join(chars)

    return _outside_strings(text, fix)


def _next_code_char(text: str, i: int) -> str:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return text[i : i + 1]


def _python_literal(text: str) -> str | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[" or len(stripped) > _MAX_LITERAL_CHARS:
        return None
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not _plain(value):
        return None
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return None


def _plain(value: Any, depth: int = 0) -> bool:
    """Only what JSON can say: dicts with str keys, lists, str, int, finite float, bool, None."""
    if depth > 64:
        return False
    if value is None or isinstance(value, (bool, str, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def value_fixes(
    value: Any, error: ValidationError, validate: Callable[[str], Any]
) -> tuple[Any, list[str]] | None:
    """A validated value after unwrapping one wrapper and/or writing numbers as strings.

    Args:
        value: The reply's JSON, read with `loads_raw` (numbers as written).
        error: Its validation error.
        validate: The schema's `validate_json`.

    Returns:
        The validated value and the repairs made, or None when neither helps.
    """
    tries: list[tuple[Any, list[str], ValidationError | None]] = [(value, [], error)]
    if isinstance(value, Mapping) and len(value) == 1:
        inner = next(iter(value.values()))
        if isinstance(inner, (Mapping, list)):
            tries.append((inner, ["wrapper"], None))
    for candidate, fixes, failed in tries:
        if failed is None:
            try:
                return validate(dumps_raw(candidate)), fixes
            except ValidationError as e:
                failed = e
        numbers = _numbers_as_strings(candidate, failed)
        if numbers is not None:
            try:
                return validate(dumps_raw(numbers)), [*fixes, "number_to_string"]
            except ValidationError:
                pass
    return None


def _numbers_as_strings(value: Any, error: ValidationError) -> Any | None:
    """`value` with each number that failed as a string (`string_type`) written as one."""
    paths = [
        tuple(e["loc"])
        for e in error.errors(include_url=False, include_context=False)
        if e.get("type") == "string_type" and isinstance(_at(value, tuple(e["loc"])), Raw)
    ]
    if not paths:
        return None
    if () in paths:  # the whole value is the number (a `str` schema): no place to set it in
        return str(value)
    copied = _copy(value)
    for path in paths:
        _set(copied, path, str(_at(value, path)))
    return copied


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        if (isinstance(value, Mapping) and part in value) or (
            isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)
        ):
            value = value[part]
        else:
            return None
    return value


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for part in path[:-1]:
        value = value[part]
    value[path[-1]] = new
