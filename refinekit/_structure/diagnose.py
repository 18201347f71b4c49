"""What was wrong with an unusable reply, in words a small model can act on.

`diagnose` names the kind of failure (cut off, the schema echoed back, no JSON, JSON that does
not validate, a placeholder copied from the template, ...), lists the problems field by field
("use "total", not "amount_paid"", ""currency": got "Euro"; it should be ..."), and says which
of the reply's values nothing implicates, so the correction's template keeps those and no
other: a value is implicated by an error at its place, by a validator's message that names
its field ("total must equal subtotal + tax" implicates all three), or, when a source text is
known, by not appearing in it. A reply-level error that names no field implicates every value.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import TypeAdapter, ValidationError
from pydantic_core.core_schema import ErrorType

from .._core.errtext import error_path, short_value
from .grounding import MARK, grounded_nodes, grounded_paths
from .spans import locate, locate_number, number_value
from .template import Template

__all__ = ["Diagnosis", "FailureKind", "ReplyProblem", "diagnose", "recover_object"]

FailureKind = Literal[
    "empty",
    "cut_off",
    "schema_echo",
    "not_json",
    "invalid",
    "placeholder",
    "tool_calls",
]
"""Why a reply could not be used:

- `empty`: the reply had no text;
- `cut_off`: the reply stopped at the token limit (`finish_reason == "length"`) before its JSON
  was complete or valid;
- `schema_echo`: the reply was a JSON schema (a description of the fields), not an instance;
- `not_json`: no JSON value could be read from the reply (prose, broken JSON);
- `invalid`: the reply was JSON but failed validation (a key missing or misnamed, a wrong type,
  a validator's error);
- `placeholder`: the reply copied a placeholder of the template (`"<string>"`) instead of a value;
- `tool_calls`: the reply made several tool calls where one was expected.
"""

_MAX_PROBLEMS = 6
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
_SCHEMA_WORDS = frozenset({"properties", "$defs", "$schema", "required", "additionalProperties"})
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


@dataclass(frozen=True)
class Diagnosis:
    """A failed reply, read: its kind, its problems, and the values worth keeping."""

    kind: FailureKind
    problems: tuple[ReplyProblem, ...]
    kept: Any = None
    bad: tuple[tuple[str | int, ...], ...] = ()
    prose: bool = False
    suggested: dict[tuple[str | int, ...], Any] = field(default_factory=dict)


def looks_like_schema(value: Any) -> bool:
    """Whether a JSON value is a JSON schema rather than data (`properties` with `type`...)."""
    if not isinstance(value, Mapping):
        return False
    keys = set(value)
    if "properties" in keys and isinstance(value.get("properties"), Mapping):
        return "type" in keys or "required" in keys or "title" in keys
    return len(keys & _SCHEMA_WORDS) >= 2


_DECODER = json.JSONDecoder()


def _string_end(text: str, start: int) -> int:
    """The index after the closing quote of the JSON string opening at `start`, or -1."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    return -1


def recover_object(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The top-level `"key": value` pairs of a broken JSON object that read cleanly.

    For the correction only (what the model wrote, shown back to it): never a returned value.
    A value counts when it is followed by `,`, `}` or the end of the text (a reply cut off
    mid-object keeps what came before the cut). Returns the values and, for the keys whose
    value did not read, the raw text that followed the key.
    """
    values: dict[str, Any] = {}
    broken: dict[str, str] = {}
    start = text.find("{")
    if start < 0:
        return values, broken
    i = start + 1
    n = len(text)
    depth_guard = 0
    while i < n and depth_guard < 10_000:
        depth_guard += 1
        q = text.find('"', i)
        if q < 0:
            break
        end = _string_end(text, q)
        if end < 0:
            break
        j = end
        while j < n and text[j] in " \t\r\n":
            j += 1
        if j >= n or text[j] != ":":
            i = end
            continue
        try:
            key = json.loads(text[q:end])
        except (ValueError, RecursionError):
            i = end
            continue
        j += 1
        while j < n and text[j] in " \t\r\n":
            j += 1
        try:
            value, after = _DECODER.raw_decode(text, j)
        except (ValueError, RecursionError):
            stop = _next_stop(text, j)
            if isinstance(key, str) and key not in values:
                broken.setdefault(key, text[j:stop].strip())
            i = max(stop, j + 1)
            continue
        rest = text[after:].lstrip()
        if isinstance(key, str) and key not in values and key not in broken:
            if rest[:1] in (",", "}", ""):
                values[key] = value
            else:
                broken[key] = text[j : _next_stop(text, after)].strip()
        i = after
    return values, broken


def _next_stop(text: str, start: int) -> int:
    """The next `,` `}` or newline after `start` (the end of a broken value), or the end."""
    stops = [p for p in (text.find(c, start) for c in ",}\n") if p >= 0]
    return min(stops) if stops else len(text)


def _said(error: Mapping[str, Any]) -> str:
    """A pydantic error message as an instruction: "it should be ...", without "Value error"."""
    msg = str(error.get("msg", "")).strip()
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    if msg.startswith("Input should"):
        return "it should" + msg[len("Input should") :]
    return msg[:1].lower() + msg[1:]


def _clip(text: str) -> str:
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


def _implicated(
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


def _source_conflicts(
    value: Any,
    context: Mapping[str, Any] | None,
    grounded: Mapping[str, Any] | None,
    bad: Sequence[tuple[str | int, ...]],
) -> list[tuple[str | int, ...]]:
    """The places of the reply's values that appear in none of the context's source texts.

    The texts are the context's strings under "source" and under the keys of the schema's
    grounded fields; without one, nothing conflicts. A grounded field's value was checked by
    its validator (with its aliases), and a place already refused is skipped; booleans and
    nulls never conflict.
    """
    if not isinstance(context, Mapping):
        return []
    keys = {"source"} | {str(n[MARK]) for n in grounded_nodes(grounded or {})}
    texts = [t for k in keys if isinstance(t := context.get(k), str)]
    if not texts:
        return []
    checked = set(grounded_paths(grounded, value)) if grounded else set()
    conflicts: list[tuple[str | int, ...]] = []

    def visit(item: Any, path: tuple[str | int, ...], depth: int) -> None:
        if depth > 32 or path in checked or any(b == path[: len(b)] and b for b in bad):
            return
        if isinstance(item, Mapping):
            for k, v in item.items():
                visit(v, (*path, str(k)), depth + 1)
        elif isinstance(item, list):
            for i, v in enumerate(item):
                visit(v, (*path, i), depth + 1)
        elif isinstance(item, str) and path:
            if item.strip() and all(locate(item, t) is None for t in texts):
                conflicts.append(path)
        elif (
            path
            and (number := number_value(item)) is not None
            and all(locate_number(number, t) is None for t in texts)
        ):
            conflicts.append(path)

    visit(value, (), 0)
    return conflicts


def _validation_problems(
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
                _conflict(_said(e), _named(template, e), value)
                if isinstance(e.get("input"), (Mapping, list))
                else (f"the reply: got {short_value(e.get('input'))}; {_said(e)}")
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
            message = f'"{path}": {_said(e)}'
            closest = (e.get("ctx") or {}).get("closest")
            if isinstance(closest, str):
                problems.append(ReplyProblem(path, message, closest))
                continue
        elif _quotes_input(e):
            message = f'"{path}": {_said(e)}'
        elif kind in ("literal_error", "enum") and template is not None:
            message = f'"{path}": got {short_value(e.get("input"))}; use one of the choices shown'
        else:
            message = f'"{path}": got {short_value(e.get("input"))}; {_said(e)}'
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


def _broken_problem(key: str, raw: str) -> ReplyProblem:
    """A value that is not JSON: `470.30 EUR` -> the JSON part alone, without the words."""
    if not raw:
        return ReplyProblem(key, f'"{key}" has no value')
    try:
        _, end = _DECODER.raw_decode(raw)
    except (ValueError, RecursionError):
        return ReplyProblem(key, f'the value of "{key}" is not JSON: {_clip(raw)}')
    head, tail = raw[:end], raw[end:].strip()
    return ReplyProblem(
        key, f'the value of "{key}" must be JSON alone: {head}, without "{_clip(tail)}" after it'
    )


def diagnose(
    text: str,
    *,
    template: Template | None,
    adapter: TypeAdapter[Any],
    value: Any = None,
    parsed: bool = False,
    errors: Sequence[Mapping[str, Any]] = (),
    prose: bool = False,
    finish_reason: str | None = None,
    placeholders: Sequence[str] = (),
    shape_error: str | None = None,
    unrepaired: str | None = None,
    detail: str | None = None,
    context: Mapping[str, Any] | None = None,
    grounded: Mapping[str, Any] | None = None,
) -> Diagnosis:
    """Read a failed reply.

    Args:
        text: The reply's text.
        template: The schema's template (None when the type has no JSON schema).
        adapter: The schema's validator (to find which recovered values are valid).
        value: The JSON value that was validated, when one was read.
        parsed: Whether a JSON value was read at all.
        errors: Its validation errors (pydantic's dicts).
        prose: Whether that value was found inside prose or a code fence.
        finish_reason: The reply's finish reason, when known.
        placeholders: Placeholder strings the reply copied instead of values.
        shape_error: Why a reply holds no single text (several tool calls).
        unrepaired: Why a reply that a repair would have made valid was refused
            (`repair=False`); `value` is then the JSON it held.
        detail: What the JSON parser said of a reply that is not JSON, for when nothing more
            precise can be said.
        context: The validation context, to validate recovered values with; its source
            texts (under "source" and the keys of the schema's grounded fields) are what a
            kept value must appear in.
        grounded: The schema's JSON schema with its grounded fields marked
            (`grounded_json_schema`), or None: their values were checked by the validator.
    """
    problems: list[ReplyProblem] = []
    cut = finish_reason == "length"
    if shape_error is not None:
        return Diagnosis("tool_calls", (ReplyProblem("", shape_error),))
    if not text.strip():
        kind: FailureKind = "cut_off" if cut else "empty"
        message = "the reply was cut off before it began" if cut else "the reply was empty"
        return Diagnosis(kind, (ReplyProblem("", message),))
    if placeholders:
        problems = [
            ReplyProblem(
                "",
                f"{json.dumps(p)} is a placeholder of the template: put the real value there",
            )
            for p in placeholders
        ]
        return Diagnosis("placeholder", tuple(problems[:_MAX_PROBLEMS]), kept=None)
    if parsed and looks_like_schema(value):
        return Diagnosis(
            "schema_echo",
            (
                ReplyProblem(
                    "",
                    "the reply described the fields (a JSON schema) instead of giving their values",
                ),
            ),
        )
    kept: Any = None
    bad: list[tuple[str | int, ...]] = []
    if unrepaired is not None:
        return Diagnosis(
            "not_json",
            (
                ReplyProblem(
                    "",
                    "the reply must be strict JSON alone: no code fence, comments, trailing "
                    "commas or text around it",
                ),
            ),
            kept=value,
            prose=prose,
        )
    if parsed and prose:
        problems.append(
            ReplyProblem("", "reply with the JSON alone, without text or a code fence around it")
        )
    if parsed:
        implicated = _implicated(template, value, errors)
        problems.extend(_validation_problems(template, value, errors))
        kept = value
        bad = [tuple(e.get("loc", ())) for e in errors]
        if implicated is None:
            kept = None  # an error of the whole reply that names no field: keep no value
        else:
            bad.extend(implicated)
            bad.extend(_source_conflicts(value, context, grounded, bad))
    else:
        recovered, broken = recover_object(text)
        if looks_like_schema(recovered):
            return Diagnosis(
                "schema_echo",
                (
                    ReplyProblem(
                        "",
                        "the reply described the fields (a JSON schema) instead of giving "
                        "their values",
                    ),
                ),
            )
        if cut:
            problems.append(
                ReplyProblem(
                    "",
                    "the reply was cut off at the length limit before the JSON was complete: "
                    "keep it short",
                )
            )
        elif not any(c in text for c in '{["') and not text.strip()[:1].isdigit():
            problems.append(ReplyProblem("", "the reply had no JSON in it"))
        names = set(template.field_names()) if template is not None else set()
        for key, raw in broken.items():
            if cut and text.rstrip().endswith(raw):
                continue  # where the reply was cut: said above
            if names and key not in names:
                continue  # not a key of the schema: nothing to fix there
            problems.append(_broken_problem(key, raw))
        if recovered and template is not None and template.is_object:
            kept = recovered
            try:
                adapter.validate_python(recovered, context=context)
            except ValidationError as e:
                found = e.errors(include_url=False)
                bad = [tuple(x["loc"]) for x in found]
                implicated = _implicated(template, recovered, found)
                problems.extend(
                    p
                    for p in _validation_problems(template, recovered, found)
                    if p.path not in broken and not _is_missing_broken(p, broken)
                )
                if implicated is None:
                    kept = None
                else:
                    bad.extend(implicated)
            bad.extend((k,) for k in broken)
            if kept is not None:
                bad.extend(_source_conflicts(recovered, context, grounded, bad))
        if not cut and not broken and not problems:
            if detail and "unicode string" in detail:  # a lone surrogate (pydantic's words)
                problems.append(
                    ReplyProblem(
                        "", "the reply held a broken character (shown as \ufffd): write it again"
                    )
                )
            else:
                said = f" ({_clip(detail)})" if detail else ""
                problems.append(ReplyProblem("", f"the reply was not valid JSON{said}"))
    if cut and parsed:
        problems.insert(
            0, ReplyProblem("", "the reply was cut off at the length limit: keep it short")
        )
    kind = "cut_off" if cut else ("invalid" if parsed else "not_json")
    unique = list(dict.fromkeys(problems))
    if len(unique) > _MAX_PROBLEMS:
        more = len(unique) - (_MAX_PROBLEMS - 1)
        unique = [*unique[: _MAX_PROBLEMS - 1], ReplyProblem("", f"and {more} more problems")]
    suggested = {_loc(p.path, bad): p.suggestion for p in unique if p.suggestion is not None}
    return Diagnosis(
        kind, tuple(unique), kept=kept, bad=tuple(bad), prose=prose, suggested=suggested
    )


def _loc(path: str, bad: Sequence[tuple[str | int, ...]]) -> tuple[str | int, ...]:
    """The location (as pydantic gives it) of a problem's path."""
    for loc in bad:
        if error_path(loc) == path:
            return loc
    return (path,)


def _is_missing_broken(problem: ReplyProblem, broken: Mapping[str, str]) -> bool:
    """A "missing" problem for a key whose value was there but broken: already said."""
    return problem.path in broken
