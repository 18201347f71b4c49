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

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from .._core.errtext import error_path
from .grounding import MARK, grounded_nodes, grounded_paths
from .problems import ReplyProblem, clip, implicated_fields, validation_problems
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
_SCHEMA_WORDS = frozenset({"properties", "$defs", "$schema", "required", "additionalProperties"})


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


def _broken_problem(key: str, raw: str) -> ReplyProblem:
    """A value that is not JSON: `470.30 EUR` -> the JSON part alone, without the words."""
    if not raw:
        return ReplyProblem(key, f'"{key}" has no value')
    try:
        _, end = _DECODER.raw_decode(raw)
    except (ValueError, RecursionError):
        return ReplyProblem(key, f'the value of "{key}" is not JSON: {clip(raw)}')
    head, tail = raw[:end], raw[end:].strip()
    return ReplyProblem(
        key, f'the value of "{key}" must be JSON alone: {head}, without "{clip(tail)}" after it'
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
        return _schema_echo()
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
        implicated = implicated_fields(template, value, errors)
        problems.extend(validation_problems(template, value, errors))
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
            return _schema_echo()
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
                implicated = implicated_fields(template, recovered, found)
                problems.extend(
                    p
                    for p in validation_problems(template, recovered, found)
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
                said = f" ({clip(detail)})" if detail else ""
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


def _schema_echo() -> Diagnosis:
    return Diagnosis(
        "schema_echo",
        (
            ReplyProblem(
                "", "the reply described the fields (a JSON schema) instead of giving their values"
            ),
        ),
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
