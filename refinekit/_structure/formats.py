"""Constrained decoding: the request options that make a server emit JSON of a schema.

With a source text, the grounded fields (`InSource`) are constrained to the values the text
holds (grounded decoding): a string field to an `enum` of the text's spans, a number field to
an `enum` of its numbers (each the JSON number that states it exactly), within the caps
below; a field past a cap, or a number field with a number no JSON number states exactly, is
left as the schema says, and the validator checks it afterwards.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticUserError

from .._core.numbers import shown_written
from .._core.schema import require_type
from .grounding import ALIASES, MARK, grounded_json_schema, node_kind, source_texts, stated
from .spans import MAX_SOURCE_CHARS, candidate_numbers, candidate_spans

__all__ = [
    "MAX_CANDIDATES",
    "MAX_SPAN_CHARS",
    "MAX_SPAN_WORDS",
    "OPENAI_MAX_ENUM_VALUES",
    "Dialect",
    "LeftFree",
    "constrained_format",
]

Dialect = Literal["openai", "llama.cpp", "ollama", "vllm"]
"""Which server's way of asking for JSON of a schema (see `response_format`)."""

_DIALECTS = ("openai", "llama.cpp", "ollama", "vllm")
_NAME = re.compile(r"[^A-Za-z0-9_-]")

MAX_SPAN_WORDS = 6
"""The default longest span a grounded string may take, in words."""

MAX_SPAN_CHARS = 200
"""The longest span offered, in characters (longer spans are left out of the enum)."""

MAX_CANDIDATES = 250
"""The default most values one grounded field's enum may have (OpenAI limits an enum of more
than 250 values to 15,000 characters in all)."""

OPENAI_MAX_ENUM_VALUES = 500
"""The most enum values, the schema's own included, sent in one OpenAI strict schema. OpenAI
documents 1,000 across a schema; requests with more than 500 have been refused with "Expected
at most 500 enum values in total", so the smaller figure is kept."""

OPENAI_MAX_ENUM_CHARS = 100_000
"""The most characters of enum values sent in one OpenAI strict schema (OpenAI documents
120,000 for property names, definition names, enum and const values together)."""


_MAX_JSON_DIGITS = 4300
"""The most digits of a whole number stated in a schema: Python's `json` writes no more by
default, and pydantic's JSON parser reads no more."""


@dataclass(frozen=True)
class LeftFree:
    """A grounded field that grounded decoding left unconstrained, and why.

    Attributes:
        path: The field (`vendor`; `Line.sku` for a field of a nested model).
        reason: Why (no source text under its key, no candidate, over a cap).
    """

    path: str
    reason: str


def _name(schema: Any, json_schema: Mapping[str, Any]) -> str:
    title = json_schema.get("title") or getattr(schema, "__name__", "") or "reply"
    return _NAME.sub("_", str(title))[:64] or "reply"


def _strict(node: Any) -> Any:
    """OpenAI's strict mode: every object closed and every key required (optional = nullable)."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "default"}
    if out.get("type") == "object" and "properties" in out:
        required = set(out.get("required", ()))
        properties = out["properties"]
        for key, sub in list(properties.items()):
            if key not in required and not _nullable(sub):
                properties[key] = {"anyOf": [sub, {"type": "null"}]}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _nullable(node: Mapping[str, Any]) -> bool:
    if node.get("type") == "null":
        return True
    return any(isinstance(a, Mapping) and a.get("type") == "null" for a in node.get("anyOf", ()))


def _marked(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The grounded nodes of a schema, each with a readable path (`vendor`, `Line.sku`)."""
    if isinstance(node, list):
        for item in node:
            yield from _marked(item, path)
        return
    if not isinstance(node, dict):
        return
    if MARK in node:
        yield path or "the reply", node
        return
    for key, value in node.items():
        if key == "$defs" and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _marked(sub, str(name))
        elif key == "properties" and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _marked(sub, f"{path}.{name}" if path else str(name))
        elif key in ("items", "prefixItems", "additionalProperties"):
            yield from _marked(value, f"{path}[]" if path else "[]")
        elif key in ("anyOf", "oneOf", "allOf"):
            yield from _marked(value, path)


def _strip(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip(n) for n in node]
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in (MARK, ALIASES)}
    return node


def _json_number(value: Decimal, *, float_field: bool) -> int | float | str:
    """The JSON number that states `value` exactly, or why none does.

    The number is as Python's `json` writes it in the schema (an int for a whole number, else
    a float's shortest form) and as the field reads it back (a float field: through a
    float). It states `value` when that reading equals `value` exactly; when it does not
    (`1.000000000000000001` as a float is 1.0; a whole number of more than 4,300 digits,
    which `json` does not write and pydantic does not read), the reason is returned instead.
    """
    if value == value.to_integral_value():
        digits = value.adjusted() + 1
        limit = getattr(sys, "get_int_max_str_digits", lambda: 0)() or _MAX_JSON_DIGITS
        if digits > min(limit, _MAX_JSON_DIGITS):
            return f"it has {digits} digits, more than a JSON number of the schema may have"
        if not float_field:
            return int(value)
    as_float = float(value)  # (inf for a number past a float's range: never equal)
    if math.isfinite(as_float) and Decimal(repr(as_float)) == value:
        return int(value) if value == value.to_integral_value() else as_float
    return f"as a float it would be {as_float!r}"


def _enum_count(node: Any) -> tuple[int, int]:
    """The enum values and their characters in a schema."""
    if isinstance(node, list):
        counts = [_enum_count(n) for n in node]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
    if not isinstance(node, dict):
        return 0, 0
    values, chars = 0, 0
    enum = node.get("enum")
    if isinstance(enum, list) and MARK not in node:
        values += len(enum)
        chars += sum(len(json.dumps(v)) for v in enum)
    for key, sub in node.items():
        if key != "enum":
            more = _enum_count(sub)
            values, chars = values + more[0], chars + more[1]
    return values, chars


def _ground(
    schema: dict[str, Any],
    texts: Mapping[str, str],
    dialect: Dialect,
    max_span_words: int,
    max_candidates: int,
) -> tuple[LeftFree, ...]:
    """Replace each grounded node of `schema` (in place) by the enum of its source's values."""
    free: list[LeftFree] = []
    values, chars = _enum_count(schema)
    for path, node in list(_marked(schema, "")):
        key = str(node[MARK])
        text = texts.get(key)
        kind = node_kind(node)
        if text is None:
            free.append(LeftFree(path, f"no source text under {key!r}"))
            continue
        if kind in ("string", "choice") and len(text) > MAX_SOURCE_CHARS:
            free.append(
                LeftFree(path, f"the source has {len(text)} characters, over {MAX_SOURCE_CHARS}")
            )
            continue
        aliases = node.get(ALIASES) or {}
        enum: list[Any]
        if kind == "choice":
            enum = [c for c in node["enum"] if stated(c, text, aliases) is not None]
        elif kind == "string":
            enum = candidate_spans(text, max_words=max_span_words, max_chars=MAX_SPAN_CHARS)
            enum += [v for v in aliases if v not in enum and stated(v, text, aliases)]
        else:
            float_field = node.get("type") == "number"  # (a Decimal is a number or a string)
            stated_numbers = [
                (v, _json_number(v, float_field=float_field))
                for v in candidate_numbers(text, integers=kind == "integer")
            ]
            inexact = [(v, why) for v, why in stated_numbers if isinstance(why, str)]
            if inexact:  # an enum without it would rule the right value out
                number, why = inexact[0]
                free.append(
                    LeftFree(
                        path,
                        f"the source's number {shown_written(str(number))} has no exact JSON "
                        f"number ({why})",
                    )
                )
                continue
            enum = [n for _, n in stated_numbers]
        what = {"choice": "choice", "string": "span"}.get(kind, "number")
        if not enum:
            said = "states no choice" if kind == "choice" else f"has no {what}"
            free.append(LeftFree(path, f"the source {said}"))
            continue
        if len(enum) > max_candidates:
            free.append(
                LeftFree(path, f"{len(enum)} candidate {what}s, over the cap of {max_candidates}")
            )
            continue
        size = sum(len(json.dumps(v)) for v in enum)
        if dialect == "openai" and (
            values + len(enum) > OPENAI_MAX_ENUM_VALUES
            or chars + size > OPENAI_MAX_ENUM_CHARS
            or (len(enum) > 250 and size > 15_000)
        ):
            free.append(
                LeftFree(
                    path,
                    f"{len(enum)} more enum values would take the schema over OpenAI's limits "
                    f"({OPENAI_MAX_ENUM_VALUES} values, {OPENAI_MAX_ENUM_CHARS} characters)",
                )
            )
            continue
        values, chars = values + len(enum), chars + size
        kept: dict[str, Any] = {k: node[k] for k in ("title", "description") if k in node}
        node.clear()
        node.update(kept)
        node["type"] = "string" if kind == "choice" else kind
        node["enum"] = enum
    return tuple(free)


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (type(None), "null"),
)


def _pin(json_schema: dict[str, Any], pinned: Mapping[str, Any]) -> dict[str, Any]:
    """`json_schema` with each pinned top-level property one value (a primitive one only)."""
    properties = json_schema.get("properties")
    if not isinstance(properties, Mapping):
        return json_schema
    properties = dict(properties)
    for key, value in pinned.items():
        kind = next((name for t, name in _JSON_TYPES if type(value) is t), None)
        if key in properties and kind is not None:
            properties[key] = {"type": kind, "enum": [value]}
    return {**json_schema, "properties": properties}


def constrained_format(
    schema: Any,
    *,
    dialect: Dialect = "openai",
    source: str | Mapping[str, Any] | None = None,
    max_span_words: int = MAX_SPAN_WORDS,
    max_candidates: int = MAX_CANDIDATES,
    pinned: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], tuple[LeftFree, ...]]:
    """`response_format`'s keyword arguments, and the grounded fields it left unconstrained.

    See `refinekit.response_format` for the arguments and errors. `pinned`: top-level
    fields (by JSON key) held to one JSON value each (a single-value `enum`).
    """
    if dialect not in _DIALECTS:
        choices = ", ".join(map(repr, _DIALECTS))
        raise ValueError(f"dialect must be one of {choices}; got {dialect!r}")
    for name, number in (("max_span_words", max_span_words), ("max_candidates", max_candidates)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"response_format({name}=...) takes a positive int, got {number!r}")
    require_type(schema, "response_format(schema=...)")
    texts = source_texts(source)
    try:
        if source is None:
            json_schema = TypeAdapter(schema).json_schema()
        else:
            json_schema = grounded_json_schema(schema)
    except (PydanticInvalidForJsonSchema, PydanticUserError) as e:
        raise TypeError(f"response_format: pydantic cannot describe {schema!r} ({e})") from e
    free: tuple[LeftFree, ...] = ()
    if source is not None:
        json_schema = copy.deepcopy(json_schema)
        free = _ground(json_schema, texts, dialect, max_span_words, max_candidates)
        json_schema = _strip(json_schema)
    if pinned:
        json_schema = _pin(json_schema, pinned)
    if dialect == "openai":
        if json_schema.get("type") != "object":
            raise ValueError(
                "response_format(dialect='openai'): OpenAI's strict mode needs a JSON object "
                f"at the top, and {schema!r} is not one; wrap it in a model"
            )
        made = {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": _name(schema, json_schema),
                    "schema": _strict(copy.deepcopy(json_schema)),
                    "strict": True,
                },
            }
        }
    elif dialect == "llama.cpp":
        made = {"response_format": {"type": "json_object", "schema": json_schema}}
    elif dialect == "ollama":
        made = {"format": json_schema}
    else:
        made = {"extra_body": {"guided_json": json_schema}}
    return made, free
