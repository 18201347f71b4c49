"""Instance templates: the expected shape of a reply as JSON to fill in, never as a schema.

A small model shown a JSON schema tends to answer with the schema itself. Shown an *instance*
with placeholders where values go (``{"number": "<string>", "total": <number>}``), it fills the
placeholders in. `Template` builds that text from a type's JSON schema (names, types, enums,
nesting, aliases as the validator expects them) and can keep the values of a failed reply that
nothing implicates, so a correction asks only for what is missing or in doubt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticUserError

from .._core.schema import require_type
from .repair import dumps_raw

__all__ = ["Template", "schema_prompt"]

Path = tuple[str | int, ...]

_MAX_DEPTH = 4
_MAX_CHARS = 1500
_MAX_ENUM = 8
_MAX_KEPT_ITEMS = 10

_STRING_FORMATS = {
    "date": "date YYYY-MM-DD",
    "date-time": "date and time, ISO 8601",
    "time": "time HH:MM:SS",
    "email": "email address",
    "uri": "URL",
    "uuid": "UUID",
    "duration": "duration, ISO 8601",
}


class Template:
    """The JSON instance template of a type, built once from its JSON schema.

    Args:
        schema: The JSON schema (validation mode, so keys are the aliases the validator reads).
    """

    __slots__ = ("_defs", "_root", "placeholders")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._defs: Mapping[str, Any] = schema.get("$defs", {})
        self._root = schema
        self.placeholders: set[str] = set()
        """Every string placeholder the template can show ("<string>", ...): a reply that
        copies one of these did not fill it in."""
        self.render()  # fills `placeholders`

    @classmethod
    def of(cls, schema_type: Any) -> Template | None:
        """The template of a type pydantic validates, or None when it has no JSON schema."""
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(schema_type)
            return cls(adapter.json_schema())
        except (PydanticInvalidForJsonSchema, PydanticUserError, TypeError, ValueError):
            return None

    @property
    def is_object(self) -> bool:
        """Whether the top level is a JSON object (a model, a dataclass, a TypedDict)."""
        return _type_of(self._resolve(self._root)) == "object"

    def field_names(self) -> list[str]:
        """The top-level keys of an object template, in schema order ([] otherwise)."""
        root = self._resolve(self._root)
        return list(root.get("properties", {})) if _type_of(root) == "object" else []

    def required(self) -> set[str]:
        """The top-level keys the schema requires."""
        root = self._resolve(self._root)
        return set(root.get("required", ()))

    def field_schema(self, key: str) -> Mapping[str, Any] | None:
        """The schema of a top-level key, resolved, or None."""
        root = self._resolve(self._root)
        sub = root.get("properties", {}).get(key)
        return None if sub is None else self._resolve(sub)

    def describe(self, key: str) -> str:
        """A top-level field's expected kind in plain words ("a number", "one of ...")."""
        sub = self.field_schema(key)
        return "a value" if sub is None else _kind_words(self, sub)

    def render(
        self,
        kept: Any = None,
        bad: Sequence[Path] = (),
        suggested: Mapping[Path, Any] | None = None,
    ) -> str:
        """The template as text, keeping the values of `kept` that are not under a `bad` path.

        Args:
            kept: A failed reply's value (a dict for an object schema), or None.
            bad: The paths of `kept` that failed validation: their placeholders are shown.
            suggested: Values to show at some of those paths instead of the placeholder.
        """
        shown = suggested or {}
        text = self._render(self._root, kept, (), tuple(bad), 0, shown, keep=kept is not None)
        if len(text) > _MAX_CHARS:  # a very large schema: nested objects collapsed
            text = self._render(self._root, kept, (), tuple(bad), _MAX_DEPTH - 1, {}, keep=False)
        return text

    # --- walking the schema --------------------------------------------------------------

    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while "$ref" in node and seen < 32:
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            node = self._defs.get(name, {})
            seen += 1
        return node

    def _string(self, text: str) -> str:
        self.placeholders.add(text)
        return json.dumps(text)

    def _render(
        self,
        node: Mapping[str, Any],
        value: Any,
        path: Path,
        bad: tuple[Path, ...],
        depth: int,
        suggested: Mapping[Path, Any],
        *,
        keep: bool,
    ) -> str:
        node = self._resolve(node)
        if path in suggested:
            return json.dumps(suggested[path], ensure_ascii=False)
        if keep and not any(b[: len(path)] == path for b in bad):
            return dumps_raw(value)
        kind = _type_of(node)
        if (
            kind == "array"
            and keep
            and isinstance(value, list)
            and 0 < len(value) <= _MAX_KEPT_ITEMS
            and isinstance(node.get("items"), Mapping)
            and depth < _MAX_DEPTH
        ):
            items = [
                self._render(node["items"], item, (*path, i), bad, depth + 1, suggested, keep=True)
                for i, item in enumerate(value)
            ]
            return "[" + ", ".join(items) + "]"
        if kind == "object" and "properties" in node:
            if depth >= _MAX_DEPTH:
                return "{...}"
            parts = []
            obj = value if keep and isinstance(value, Mapping) else None
            for key, sub in node["properties"].items():
                inner_keep = obj is not None and key in obj
                shown = self._render(
                    sub,
                    obj[key] if inner_keep and obj is not None else None,
                    (*path, key),
                    bad,
                    depth + 1,
                    suggested,
                    keep=inner_keep,
                )
                parts.append(f"{json.dumps(key, ensure_ascii=False)}: {shown}")
            return "{" + ", ".join(parts) + "}"
        return self._placeholder(node, depth)

    def _placeholder(self, node: Mapping[str, Any], depth: int) -> str:
        node = self._resolve(node)
        if "const" in node:
            return json.dumps(node["const"], ensure_ascii=False)
        if "enum" in node:
            return self._string("<" + _choices(node["enum"]) + ">")
        alternatives = node.get("anyOf") or node.get("oneOf")
        if alternatives:
            options = [self._resolve(a) for a in alternatives]
            nullable = any(_type_of(o) == "null" for o in options)
            options = _lax_numbers([o for o in options if _type_of(o) != "null"])
            if len(options) == 1:
                inner = self._placeholder(options[0], depth)
                if not nullable:
                    return inner
                return _or_null(self, inner)
            words = " or ".join(_kind_words(self, o, article=False) for o in options)
            return f"<{words}{' or null' if nullable else ''}>"
        kind = _type_of(node)
        if kind == "object":
            if "properties" in node:
                return self._render(node, None, (), (), depth + 1, {}, keep=False)
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping) and depth < _MAX_DEPTH:
                key = self._string("<key>")
                return "{" + f"{key}: {self._placeholder(extra, depth + 1)}, ..." + "}"
            return "{...}"
        if kind == "array":
            items = node.get("items") or node.get("prefixItems")
            if isinstance(items, Sequence) and not isinstance(items, (str, Mapping)):
                inner = ", ".join(self._placeholder(i, depth + 1) for i in items)
                return f"[{inner}]"
            if isinstance(items, Mapping) and depth < _MAX_DEPTH:
                return f"[{self._placeholder(items, depth + 1)}, ...]"
            return "[...]"
        if kind == "string":
            return self._string(f"<{_string_words(node)}>")
        return {
            "integer": "<integer>",
            "number": "<number>",
            "boolean": "<true or false>",
            "null": "null",
        }.get(kind or "", "<value>")


def _type_of(node: Mapping[str, Any]) -> str | None:
    kind = node.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in node:
        return "object"
    return kind if isinstance(kind, str) else None


def _lax_numbers(options: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`number or string` is how pydantic describes a Decimal (it also reads "1.5"): a number."""
    kinds = [_type_of(o) for o in options]
    if (
        any(k in ("number", "integer") for k in kinds)
        and all(
            k in ("number", "integer")
            or (k == "string" and not ({"enum", "format", "const"} & set(o)))
            for k, o in zip(kinds, options, strict=True)
        )
        and "string" in kinds
    ):
        return [o for o, k in zip(options, kinds, strict=True) if k != "string"]
    return options


def _or_null(template: Template, inner: str) -> str:
    if inner.startswith('"<') and inner.endswith('>"'):
        text = json.loads(inner)[:-1] + " or null>"
        return template._string(text)
    if inner.startswith("<") and inner.endswith(">"):
        return inner[:-1] + " or null>"
    return f"{inner} (or null)"


def _choices(values: Sequence[Any]) -> str:
    shown = [str(v) if isinstance(v, str) else json.dumps(v) for v in values[:_MAX_ENUM]]
    if len(values) > _MAX_ENUM:
        return "one of " + ", ".join(shown) + ", ..."
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " or " + shown[-1]


def _string_words(node: Mapping[str, Any]) -> str:
    fmt = node.get("format")
    return _STRING_FORMATS.get(fmt, "string") if isinstance(fmt, str) else "string"


def _kind_words(template: Template, node: Mapping[str, Any], *, article: bool = True) -> str:
    node = template._resolve(node)
    if "enum" in node:
        return ("one of " if article else "") + _choices(node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    alternatives = node.get("anyOf") or node.get("oneOf")
    if alternatives:
        options = [template._resolve(a) for a in alternatives]
        nullable = any(_type_of(o) == "null" for o in options)
        options = _lax_numbers([o for o in options if _type_of(o) != "null"])
        joined = " or ".join(_kind_words(template, o, article=article) for o in options)
        return joined + (" or null" if nullable else "")
    kind = _type_of(node)
    words: dict[str | None, str] = {
        "string": _string_words(node),
        "integer": "whole number",
        "number": "number",
        "boolean": "true or false",
        "object": "JSON object",
        "array": "list",
        "null": "null",
    }
    text: str = words.get(kind, "value")
    if not article or kind in ("boolean", "null"):
        return text
    return ("an " if text[0] in "aeiou" else "a ") + text


def schema_prompt(schema: Any, *, descriptions: bool = True) -> str:
    r"""A compact instruction for the first request: reply with JSON shaped like a template.

    It shows the expected reply as an instance with placeholders (never the JSON schema,
    which small models tend to copy back) and, when the schema's fields carry descriptions
    (`Field(description=...)`), one line per described field. Put it in the system message or
    at the end of the user message::

        messages = [
            {"role": "system", "content": "You extract invoices.\\n" + schema_prompt(Invoice)},
            {"role": "user", "content": text},
        ]

    Args:
        schema: A pydantic model or any type `pydantic.TypeAdapter` accepts.
        descriptions: Whether to list the fields' descriptions.

    Returns:
        The instruction text.

    Raises:
        TypeError: pydantic cannot build a JSON schema for `schema`.
    """
    require_type(schema, "schema_prompt(schema=...)")
    try:
        json_schema = TypeAdapter(schema).json_schema()
    except (PydanticInvalidForJsonSchema, PydanticUserError) as e:
        raise TypeError(f"schema_prompt: pydantic cannot describe {schema!r} ({e})") from e
    template = Template(json_schema)
    kind = "object" if template.is_object else "value"
    lines = [
        f"Reply with only a JSON {kind} like this one, with the <...> placeholders filled in:",
        template.render(),
    ]
    if descriptions and template.is_object:
        described = _descriptions(template)
        if described:
            lines.append("Where:")
            lines.extend(f'- "{key}": {text}' for key, text in described)
    return "\n".join(lines)


def _descriptions(template: Template) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key in template.field_names():
        sub = template.field_schema(key)
        if sub is None:
            continue
        text = sub.get("description")
        if isinstance(text, str) and text.strip():
            out.append((key, " ".join(text.split())))
    return out
