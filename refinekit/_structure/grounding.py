"""Values that must come from the source text: the validator, the fields it marks, provenance.

`InSource` (`in_source(key)`) is a pydantic validator for an extraction schema's fields: a
string must appear in the source text, a number must be one the text writes. The fields it
marks are what grounded decoding constrains (`response_format(..., source=...)`, which reads
them from `grounded_json_schema`), and `provenance` says where each grounded value of a
validated object is in the text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import AfterValidator, TypeAdapter, ValidationInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from .._core.errtext import error_path
from .._core.numbers import read_numbers, shown_written
from .._core.schema import require_type
from .._core.types import ValueEvidence
from .spans import (
    MAX_SOURCE_CHARS,
    Found,
    locate,
    locate_number,
    normal,
    number_value,
)

__all__ = [
    "ALIASES",
    "MARK",
    "InSource",
    "closest_span",
    "grounded_json_schema",
    "grounded_nodes",
    "grounded_paths",
    "in_source",
    "node_kind",
    "provenance",
    "source_texts",
    "stated",
]

MARK = "x-refinekit-in-source"
"""The key `grounded_json_schema` puts on a grounded node: the context key of its source."""

ALIASES = "x-refinekit-aliases"
"""The key of a grounded node's aliases (`in_source(aliases=...)`), when it has some."""

_WORD = re.compile(r"\S+")
_MIN_RATIO = 0.5
_MAX_LISTED_NUMBERS = 6
_KEY_ATTRIBUTE = "_refinekit_in_source"


def closest_span(value: str, source: str) -> str | None:
    """The span of `source` most like `value` (word-aligned, compared case- and space-blind).

    Returns None when nothing in the source is even half alike.
    """
    offsets = [(m.start(), m.end()) for m in _WORD.finditer(source[:MAX_SOURCE_CHARS])]
    target = normal(value)
    n = max(1, len(target.split()))
    best: tuple[float, str] | None = None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    for size in (n - 1, n, n + 1):
        if size < 1:
            continue
        for i in range(0, max(0, len(offsets) - size) + 1):
            window = offsets[i : i + size]
            if not window:
                continue
            span = source[window[0][0] : window[-1][1]]
            matcher.set_seq1(normal(span))
            ratio = matcher.ratio()
            if best is None or ratio > best[0]:
                best = (ratio, span.strip(" \t\r\n,.;:"))
    if best is None or best[0] < _MIN_RATIO:
        return None
    return best[1]


def _listed(shown: list[str]) -> str:
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def _number_error(number: Decimal, source: str) -> PydanticCustomError:
    written = shown_written(str(number))  # (str of a 5,000-digit int would raise)
    seen: dict[Decimal, str] = {}
    for found_number in read_numbers(source):
        if len(seen) > _MAX_LISTED_NUMBERS:
            break
        seen.setdefault(found_number.value, shown_written(found_number.written))
    found = list(seen.values())
    if found and len(found) <= _MAX_LISTED_NUMBERS:
        return PydanticCustomError(
            "not_in_source",
            "{value} is not a number of the text; it has {numbers}",
            {"value": written, "numbers": _listed(found)},
        )
    return PydanticCustomError(
        "not_in_source", "{value} is not a number of the text", {"value": written}
    )


def _aliases(aliases: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    if aliases is None:
        return {}
    if not isinstance(aliases, Mapping):
        raise TypeError(
            "in_source(aliases=...) takes a dict of each value's other written forms, e.g. "
            f"{{'EUR': ['€', 'euro']}}, got {type(aliases).__name__}"
        )
    made: dict[str, tuple[str, ...]] = {}
    for value, forms in aliases.items():
        listed = (forms,) if isinstance(forms, str) else tuple(forms)
        if not isinstance(value, str) or not all(isinstance(f, str) and f.strip() for f in listed):
            raise TypeError(
                "in_source(aliases=...): each key and each written form must be a non-empty "
                f"str, got {value!r}: {forms!r}"
            )
        made[value] = listed
    return made


def stated(value: str, source: str, aliases: Mapping[str, Sequence[str]]) -> Found | None:
    """Where the text states a string value: the value itself, or one of its written forms."""
    for form in (value, *aliases.get(value, ())):
        place = locate(form, source)
        if place is not None:
            return place
    return None


def in_source(
    key: str = "source", *, aliases: Mapping[str, Sequence[str]] | None = None
) -> AfterValidator:
    """A validator: the value must appear in the validation context's text under `key`.

    Use it in an `Annotated` field of an extraction schema, and give `@self_correct` the
    source text as its `validation_context`::

        class Invoice(BaseModel):
            vendor: Annotated[str, in_source()]  # or Annotated[str, InSource]
            total: Annotated[Decimal, InSource]  # a number the text writes
            currency: Annotated[
                Literal["EUR", "USD"], in_source(aliases={"EUR": ["€"], "USD": ["$"]})
            ]


        @self_correct(schema=Invoice, validation_context=lambda args: {"source": args["text"]})
        def extract(messages, text): ...

    A string must appear in the text, case and runs of spaces ignored; with `aliases`, one of
    the value's other written forms may appear instead (`"EUR"` is stated by `"12 euros"`
    with `aliases={"EUR": ["euro"]}`). A number (an `int`, `float` or `Decimal` field) must
    be one the text writes in digits, anywhere in it, compared by its exact value
    (`1,020.50` in the text is 1020.5; a 29-digit number is not its neighbour).
    A value that does not appear fails validation (error type `not_in_source`) with a
    message naming the closest span of the text ("'Balt Paper' does not appear in the text;
    it has 'Baltic Paper'") or the text's numbers ("518 is not a number of the text; it has
    2020 or 518.50"), which `@self_correct` turns into a correction: its template shows that
    span in the field's place, for the model to confirm or replace (the reply is validated
    again either way). Without that key in the context (validating elsewhere, say loading
    stored data), the value is not checked.

    The fields it marks are the grounded fields: `response_format(Model, source=text)`
    constrains them to the text's spans, numbers and stated choices (grounded decoding), and
    `refinekit.provenance(value, source=text)` says where each one is in the text.

    Args:
        key: The context key holding the source text.
        aliases: For a value, the other ways the text may write it (a currency's symbol and
            name, a country's name for its code): `{"EUR": ["€", "euro"]}`.

    Returns:
        A pydantic `AfterValidator`.

    Raises:
        TypeError: `key` is not a non-empty str, or `aliases` is not a dict of strings to
            strings or lists of strings.
    """
    if not isinstance(key, str) or not key:
        raise TypeError(f"in_source(key=...) takes a non-empty str, got {key!r}")
    forms = _aliases(aliases)

    def check(value: Any, info: ValidationInfo) -> Any:
        context = info.context
        if not isinstance(context, Mapping):
            return value
        source = context.get(key)
        if not isinstance(source, str):
            return value
        number = number_value(value)
        if number is not None:
            if locate_number(number, source) is None:
                raise _number_error(number, source)
            return value
        if isinstance(value, (float, Decimal)):
            # NaN or an infinity (`1e400` read as a float): no text states it in digits
            raise PydanticCustomError(
                "not_in_source", "'{value}' is not a number the text states", {"value": str(value)}
            )
        if not isinstance(value, str):
            return value
        if normal(value) in normal(source) or (
            value in forms and stated(value, source, forms) is not None
        ):
            return value
        shown = value if len(value) <= 80 else value[:77] + "..."
        if value in forms:
            written = ", ".join(repr(f) for f in forms[value])
            raise PydanticCustomError(
                "not_in_source",
                "'{value}' is not what the text states (neither it nor {forms} appears in it)",
                {"value": shown, "forms": written},
            )
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

    setattr(check, _KEY_ATTRIBUTE, (key, forms))
    return AfterValidator(check)


InSource = in_source()
"""`in_source()` with the default key: `Annotated[str, InSource]`, `Annotated[int, InSource]`."""


# --- the grounded fields, read from the schema ----------------------------------------------


class _Grounded(GenerateJsonSchema):
    """pydantic's JSON schema, with `MARK` on each node an `in_source` validator checks.

    A node with aliases carries them too, under `ALIASES`.
    """

    def function_after_schema(self, schema: core_schema.AfterValidatorFunctionSchema) -> Any:
        made = super().function_after_schema(schema)
        marked = getattr(schema["function"]["function"], _KEY_ATTRIBUTE, None)
        if marked is None or not isinstance(made, dict) or _kind(made) is None:
            return made
        key, forms = marked
        made = {**made, MARK: key}
        if forms:
            made[ALIASES] = {value: list(written) for value, written in forms.items()}
        return made


def _kind(node: Mapping[str, Any]) -> str | None:
    """The kind of value a grounded node holds, or None for a node grounding cannot take.

    "string", "number" or "integer"; "choice" for an enum of strings (a `Literal`, an `Enum`
    of strings). pydantic describes a `Decimal` as a number or a string: a number.
    """
    kind = node.get("type")
    enum = node.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "choice"
    if kind in ("string", "number", "integer") and "enum" not in node and "const" not in node:
        return str(kind)
    options = [o.get("type") for o in node.get("anyOf", ()) if isinstance(o, Mapping)]
    if options and set(options) <= {"number", "string"} and "number" in options:
        return "number"
    return None


def grounded_json_schema(schema: Any) -> JsonSchemaValue:
    """`schema`'s JSON schema with `MARK` (the context key) on every grounded node.

    Raises:
        TypeError: `schema` is not a type pydantic can describe (pydantic's own errors).
    """
    require_type(schema, "grounded_json_schema(schema=...)")
    return TypeAdapter(schema).json_schema(schema_generator=_Grounded)


def grounded_nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every node of a JSON schema (`$defs` included) that carries `MARK`."""
    if isinstance(node, list):
        for item in node:
            yield from grounded_nodes(item)
    elif isinstance(node, dict):
        if MARK in node:
            yield node
        for value in node.values():
            yield from grounded_nodes(value)


def node_kind(node: Mapping[str, Any]) -> str:
    """The kind of a grounded node: "string", "number" or "integer"."""
    return _kind(node) or "string"


def source_texts(source: str | Mapping[str, Any] | None) -> dict[str, str]:
    """The source texts by context key: a str is the text of the default key, "source"."""
    if source is None:
        return {}
    if isinstance(source, str):
        return {"source": source}
    if isinstance(source, Mapping):
        return {str(k): v for k, v in source.items() if isinstance(v, str)}
    raise TypeError(
        "source= takes the source text (a str) or the validation context (a dict of texts by "
        f"key), got {type(source).__name__}"
    )


# --- provenance -------------------------------------------------------------------------------


def provenance(value: Any, *, source: str | Mapping[str, Any]) -> tuple[ValueEvidence, ...]:
    """Where each grounded value of a validated object is in its source text.

    A grounded value is one of a field marked `InSource` (or `in_source(key)`), at any depth
    (nested models, lists). For each, the first span of the source that states it, as the
    validator compares (case and runs of spaces ignored for a string, by value for a
    number): `ValueEvidence(path="vendor", value="Acme Ltd", text="ACME  Ltd", start=17,
    end=26, source="source")`. A value no span states (an object validated without the
    source in its context) has `text` None. A grounded field left None is skipped.

    Args:
        value: A validated object: a pydantic model instance (or a dataclass or TypedDict
            pydantic validated, with its type given by `type(value)`).
        source: The source text (for the default key, "source"), or the validation context
            (a dict of texts by key), as given to `validation_context=`.

    Returns:
        One `ValueEvidence` per grounded value, in the order of the fields.

    Raises:
        TypeError: `source` is neither a str nor a mapping, or pydantic cannot describe the
            value's type.
    """
    texts = source_texts(source)
    kind = type(value)
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    schema = grounded_json_schema(kind)
    dumped = adapter.dump_python(value, by_alias=True)
    return tuple(
        _evidence(item, path, node, texts) for path, node, item in _grounded(schema, dumped)
    )


def grounded_paths(schema: Mapping[str, Any], value: Any) -> list[tuple[str | int, ...]]:
    """The places of a value (a reply's JSON, say) that a marked schema's grounded nodes hold.

    Args:
        schema: A schema from `grounded_json_schema`.
        value: A value of that schema's shape (JSON as Python reads it, or a dump).
    """
    return [path for path, _, _ in _grounded(schema, value)]


def _grounded(
    schema: Mapping[str, Any], value: Any
) -> list[tuple[tuple[str | int, ...], Mapping[str, Any], Any]]:
    found: list[tuple[tuple[str | int, ...], Mapping[str, Any], Any]] = []
    _walk(schema.get("$defs", {}), schema, value, (), found)
    return found


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in node and seen < 32:
        node = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
        seen += 1
    return node


def _walk(
    defs: Mapping[str, Any],
    node: Mapping[str, Any],
    value: Any,
    path: tuple[str | int, ...],
    found: list[tuple[tuple[str | int, ...], Mapping[str, Any], Any]],
    depth: int = 0,
) -> None:
    if depth > 64 or value is None:
        return
    node = _resolve(node, defs)
    if MARK in node:
        found.append((path, node, value))
        return
    for option in node.get("anyOf", ()) or node.get("oneOf", ()):
        if isinstance(option, Mapping) and _fits(_resolve(option, defs), value):
            _walk(defs, option, value, path, found, depth + 1)
            return
    if isinstance(value, Mapping):
        properties = node.get("properties", {})
        for key, sub in properties.items():
            if key in value:
                _walk(defs, sub, value[key], (*path, key), found, depth + 1)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, item in value.items():
                if key not in properties:
                    _walk(defs, extra, item, (*path, key), found, depth + 1)
    elif isinstance(value, list):
        items = node.get("items")
        prefix = node.get("prefixItems")
        for i, item in enumerate(value):
            sub = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
            if isinstance(sub, Mapping):
                _walk(defs, sub, item, (*path, i), found, depth + 1)


def _fits(node: Mapping[str, Any], value: Any) -> bool:
    """Whether a JSON value is of an `anyOf` option's kind (to follow the right one)."""
    if MARK in node:
        return True
    kind = node.get("type")
    if kind == "null":
        return value is None
    if kind == "object" or "properties" in node:
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    return kind is None or not isinstance(value, (Mapping, list))


def _evidence(
    value: Any, path: tuple[str | int, ...], node: Mapping[str, Any], texts: Mapping[str, str]
) -> ValueEvidence:
    where = error_path(path)
    key = str(node[MARK])
    text = texts.get(key)
    number = number_value(value)
    if isinstance(value, int) and number is not None:
        shown = str(number)  # (str of an int past 4,300 digits raises; a Decimal's does not)
    else:
        shown = str(getattr(value, "value", value))  # an Enum member: its value
    if number is not None:
        place = None if text is None else locate_number(number, text)
    else:
        place = None if text is None else stated(shown, text, node.get(ALIASES) or {})
    if place is None:
        return ValueEvidence(path=where, value=shown)
    return ValueEvidence(
        path=where, value=shown, text=place.text, start=place.start, end=place.end, source=key
    )
