"""Cases: the rows of a golden or labelled file, with their questions, context and labels."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.errors import DataFileError, UsageProblem
from .._core.types import ContextDocument
from ._golden import column_for, numbered_rows, row_key

__all__ = ["LABELS", "Case", "as_text", "context_of", "labels_of", "load_cases", "merged"]


@dataclass(frozen=True)
class Case:
    """One row of a golden or labelled file."""

    key: str
    position: int
    question: str
    row: dict[str, Any]


def load_cases(path: Path) -> list[Case]:
    """The rows of a data file as cases; the same row twice is two cases.

    Raises:
        UsageProblem: The file is unusable or has no rows, a well-known field has a value of
            the wrong type (`_check_types`), or a context value is not a document.
    """
    try:
        rows = numbered_rows(path)
    except DataFileError as e:
        raise UsageProblem(str(e)) from None
    if not rows:
        raise UsageProblem(f"{path} has no rows")
    seen: dict[str, int] = {}
    cases = []
    for position, (line, row) in enumerate(rows, 1):
        _check_types(path, line, row)
        key = row_key(row)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}-{seen[key]}"
        column = column_for("question", list(row), loose=True)
        first = next(iter(row.values()), "")
        question = row[column] if column is not None else first
        cases.append(Case(key, position, as_text(question), row))
    for case in cases:  # a bad context is a usage error before anything runs, not midway
        context_of(case)
    return cases


_TEXT_FIELDS = ("question",)
_PHRASE_FIELDS = ("must_mention", "expected_source")


def _check_types(path: Path, line: int, row: dict[str, Any]) -> None:
    """The well-known fields hold text: a JSONL number, object or list is not stringified.

    A `question` is a string; a `must_mention` or `expected_source` is a string, a list of
    strings, or null (nothing to check). Other columns are the target's arguments, any type.

    Raises:
        UsageProblem: Naming the file, the line and the field.
    """
    columns = list(row)
    for name in (*_TEXT_FIELDS, *_PHRASE_FIELDS):
        column = column_for(name, columns, loose=True)
        if column is None:
            continue
        value = row[column]
        if isinstance(value, str):
            continue
        if name in _PHRASE_FIELDS and (
            value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            continue
        wanted = "a string" if name in _TEXT_FIELDS else "a string or a list of strings"
        shown = json.dumps(value, ensure_ascii=True)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise UsageProblem(
            f"{path}, line {line}: field {column!r} is {_json_kind(value)} ({shown}); it must "
            f"be {wanted}" + (f' (in quotes: "{value}")' if _is_number(value) else "")
        )


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, list):
        return "a list" if all(isinstance(v, str) for v in value) else "a list holding non-strings"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"  # pragma: no cover - JSON has no other kinds


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_text(value: Any) -> str:
    """A row value as text: a string as it is, nothing as "", anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def context_of(case: Case) -> tuple[ContextDocument, ...]:
    """The documents of the row's `context` column (none without one).

    Raises:
        UsageProblem: A value is not a document.
    """
    column = column_for("context", list(case.row), loose=True)
    if column is None:
        return ()
    value = case.row[column]
    items = value if isinstance(value, list) else [value]
    docs = []
    for item in items:
        if item is None or (isinstance(item, str) and not item.strip()):
            continue
        try:
            docs.append(
                ContextDocument.coerce(item if isinstance(item, (str, Mapping)) else str(item))
            )
        except TypeError as e:
            raise UsageProblem(f"row {case.position}: column {column!r}: {e}") from None
    return tuple(docs)


def merged(*groups: Sequence[ContextDocument]) -> tuple[ContextDocument, ...]:
    """The documents of all groups, in order, each (text, source) once."""
    seen: set[tuple[str, str | None]] = set()
    out = []
    for doc in (d for group in groups for d in group):
        if (doc.text, doc.source) not in seen:
            seen.add((doc.text, doc.source))
            out.append(doc)
    return tuple(out)


LABELS = {
    "pass": "pass",
    "passed": "pass",
    "true": "pass",
    "yes": "pass",
    "1": "pass",
    "good": "pass",
    "fail": "fail",
    "failed": "fail",
    "false": "fail",
    "no": "fail",
    "0": "fail",
    "bad": "fail",
}


def labels_of(cases: Sequence[Case]) -> dict[str, str]:
    """Each labelled case's human label, `pass` or `fail`.

    Raises:
        UsageProblem: No label or answer column, or a label that is neither pass nor fail.
    """
    columns = list(cases[0].row)
    for case in cases:  # every row: a JSONL row may lack what the first one has
        if column_for("answer", list(case.row), loose=True) is None:
            where = "" if case.position == 1 else f" (row {case.position} has none)"
            raise UsageProblem(
                f"the labelled file needs an 'answer' column{where}; columns: {list(case.row)}"
            )
    column = next(
        (
            c
            for name in ("label", "human_label", "human", "expected")
            if (c := column_for(name, columns, loose=True)) is not None
        ),
        None,
    )
    if column is None:
        raise UsageProblem(
            f"the labelled file needs a 'label' column (pass or fail); columns: {columns}"
        )
    labels = {}
    for case in cases:
        raw = case.row.get(column)
        value = (
            LABELS.get(str(raw).strip().lower())
            if not isinstance(raw, bool)
            else ("pass" if raw else "fail")
        )
        if value is None:
            raise UsageProblem(
                f"row {case.position}: label {raw!r} is neither pass nor fail (accepted: "
                "pass/fail, true/false, yes/no, 1/0, good/bad)"
            )
        labels[case.key] = value
    return labels
