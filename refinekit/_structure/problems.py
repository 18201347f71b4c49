"""A failed reply's validation errors, in words a small model can act on.

Each pydantic error becomes a problem of its field: a missing key matched to the misnamed key
the reply probably meant ("use "total", not "amount_paid""), a wrong value quoted with what it
should be, a validator's message with the values of the fields it names. `implicated_fields` says
which fields a validator's message names beyond its own place, so that their values are not
kept either.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic_core.core_schema import ErrorType

from .._core.errtext import error_path, short_value
from .template import Template

__all__ = ["ReplyProblem", "clip", "implicated_fields", "validation_problems"]

_MAX_PROBLEM_CHARS = 240
_SIMILAR = 0.6
_ROOT_TYPE_ERRORS = frozenset(
    {
        "model_type",
        "model_attributes_type",
        "dataclass_type",
        "dict_type",
        "list_type",
        "tuple_type",
        "set_type",
        "frozen_set_type",
    }
)
_BUILTIN_ERRORS = frozenset(get_args(ErrorType)) - {"value_error", "assertion_error"}
"""pydantic's own error types, whose messages never name a field; the others (a validator's
`ValueError` or assertion, a `PydanticCustomError` of its own) may."""
_OWN_ERRORS = frozenset({"not_in_source", "placeholder"})
"""refinekit's own error types: their messages quote values, never name fields."""


@dataclass(frozen=True)
class ReplyProblem:
    """One problem of a failed reply, in plain words.

    Attributes:
        path: Where: a field path such as `total` or `items[0].price`; "" for the whole reply.
        message: What is wrong and what to do, e.g. `use "total", not "amount_paid"`.
        suggestion: A value for the field the source suggests (the closest span of the text,
            for a value `InSource` refused), shown in the template in the field's place; None
            for most problems.
    """

    path: str
    message: str
    suggestion: str | None = None


def said(error: Mapping[str, Any]) -> str:
    """A pydantic error message as an instruction: "it should be ...", without "Value error"."""
    msg = str(error.get("msg", "")).strip()
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    if msg.startswith("Input should"):
        return "it should" + msg[len("Input should") :]
    return msg[:1].lower() + msg[1:]


def clip(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 3] + "..."


def _pairs(
    template: Template, missing: list[str], extra: list[str], value: Mapping[str, Any]
) -> dict[str, str]:
    """Missing keys matched to the extra keys the reply probably meant (`total` <- `amount`).

    A pair is made on a similar name (`customer` / `customer_name`), or, for a field that is
    not a string, when exactly one extra key holds a value that validates as that field.
    """
    pairs: dict[str, str] = {}
    free = list(extra)
    for key in missing:
        similar = [
            x
            for x in free
            if key.lower() in x.lower()
            or x.lower() in key.lower()
            or difflib.SequenceMatcher(None, x.lower(), key.lower()).ratio() >= _SIMILAR
        ]
        chosen = similar[0] if similar else None
        if chosen is None:
            node = template.field_schema(key)
            if node is not None and node.get("type") != "string" and "enum" not in node:
                fits = [x for x in free if _fits(node, value.get(x))]
                if len(fits) == 1:
                    chosen = fits[0]
        if chosen is not None:
            pairs[key] = chosen
            free.remove(chosen)
    return pairs


def _fits(node: Mapping[str, Any], value: Any) -> bool:
    kinds = {node.get("type")} | {
        a.get("type") for a in node.get("anyOf", ()) if isinstance(a, Mapping)
    }
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int):
        return bool(kinds & {"integer", "number"})
    if isinstance(value, float):
        return "number" in kinds
    if isinstance(value, Mapping):
        return "object" in kinds or "$ref" in node
    if isinstance(value, list):
        return "array" in kinds
    return False


def _named(template: Template | None, error: Mapping[str, Any]) -> list[str]:
    """The top-level fields a validator's own message names (none for pydantic's messages)."""
    if template is None or error.get("type") in _BUILTIN_ERRORS | _OWN_ERRORS:
        return []
    message = str(error.get("msg", ""))
    given = error.get("input")
    if isinstance(given, str) and len(given) >= 3:
        message = message.replace(given, " ")  # a quoted value is no field's name
    named = []
    for key in template.field_names():
        words = {key, key.replace("_", " ")}
        if any(re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", message, re.I) for w in words):
            named.append(key)
    return named


def implicated_fields(
    template: Template | None, value: Any, errors: Sequence[Mapping[str, Any]]
) -> list[tuple[str | int, ...]] | None:
    """The fields the errors' messages name, beyond their own places; None: every field.

    None when an error of the whole reply (no `loc`: a model validator) names no field, so
    nothing in the reply can be told apart from the values it objects to.
    """
    found: list[tuple[str | int, ...]] = []
    for e in errors:
        named = _named(template, e)
        reply_level = not e.get("loc") and e.get("type") not in _BUILTIN_ERRORS
        if reply_level and not named and isinstance(value, Mapping):
            return None
        found.extend((key,) for key in named)
    return found


def _conflict(message: str, names: Sequence[str], value: Any) -> str:
    """A validator's message, with the values of the fields it names when it does not show them."""
    if not isinstance(value, Mapping):
        return message
    shown = [(n, short_value(value[n])) for n in names if n in value]
    if not shown or all(text in message for _, text in shown):
        return message
    listed = [f"{n} {text}" for n, text in shown]
    joined = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    return f"{message} (the reply had {joined})"


def validation_problems(
    template: Template | None, value: Any, errors: Sequence[Mapping[str, Any]]
) -> list[ReplyProblem]:
    problems: list[ReplyProblem] = []
    keys = template.field_names() if template is not None else []
    missing = [
        str(e["loc"][0])
        for e in errors
        if e.get("type") == "missing" and len(e.get("loc", ())) == 1
    ]
    extra = [k for k in value if k not in keys] if isinstance(value, Mapping) and keys else []
    pairs = (
        _pairs(template, missing, extra, value)
        if template is not None and isinstance(value, Mapping)
        else {}
    )
    for e in errors:
        loc = tuple(e.get("loc", ()))
        kind = e.get("type")
        path = error_path(loc)
        if kind == "missing":
            key = str(loc[-1]) if loc else ""
            if len(loc) == 1 and key in pairs:
                message = f'use "{key}", not "{pairs[key]}"'
            else:
                message = f'"{path}" is missing'
        elif kind == "extra_forbidden":
            message = f'leave out "{path}": it is not one of the keys'
        elif not loc and kind in _ROOT_TYPE_ERRORS:
            message = f"the reply should be {_root_words(template)}, not {_json_kind(value)}"
        elif not loc:
            message = (
                _conflict(said(e), _named(template, e), value)
                if isinstance(e.get("input"), (Mapping, list))
                else (f"the reply: got {short_value(e.get('input'))}; {said(e)}")
            )
        elif kind == "string_type" and _short_number(e.get("input")) is not None:
            # what repair would do, were it the only problem: the number as a string
            written = _short_number(e.get("input"))
            problems.append(
                ReplyProblem(
                    path, f'"{path}" must be a string: write "{written}", in quotes', written
                )
            )
            continue
        elif kind == "not_in_source":
            message = f'"{path}": {said(e)}'
            closest = (e.get("ctx") or {}).get("closest")
            if isinstance(closest, str):
                problems.append(ReplyProblem(path, message, closest))
                continue
        elif _quotes_input(e):
            message = f'"{path}": {said(e)}'
        elif kind in ("literal_error", "enum") and template is not None:
            message = f'"{path}": got {short_value(e.get("input"))}; use one of the choices shown'
        else:
            message = f'"{path}": got {short_value(e.get("input"))}; {said(e)}'
        others = [n for n in _named(template, e) if loc and (n,) != loc[:1]]
        if others:
            message = _conflict(message, others, value)
        problems.append(ReplyProblem(path if loc else "", message))
    return problems


def _short_number(value: Any) -> str | None:
    """A number as JSON writes it, when it is short enough to suggest (else None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        written = json.dumps(value)
    except ValueError:  # more digits than Python converts
        return None
    return written if len(written) <= 40 else None


def _quotes_input(error: Mapping[str, Any]) -> bool:
    """Whether a validator's message already quotes the value (`'X' does not appear ...`)."""
    value = error.get("input")
    return isinstance(value, str) and len(value) >= 3 and value in str(error.get("msg", ""))


def _root_words(template: Template | None) -> str:
    if template is None:
        return "the JSON value asked for"
    return "a JSON object like the one below" if template.is_object else "a JSON value"


def _json_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "that"
