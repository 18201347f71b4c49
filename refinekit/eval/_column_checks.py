"""A golden row's own checks: `must_mention` and `expected_source`, as criteria."""

from __future__ import annotations

from typing import Any

from .._core.types import CriterionResult
from ..checks import _cited
from ._cases import Case
from ._golden import column_for

__all__ = ["column_checks", "has_column_checks"]


def _phrases(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(v) for v in items if v is not None and str(v).strip()]


def column_checks(case: Case, answer: str) -> list[CriterionResult]:
    """The row's own checks, as criteria.

    `must_mention`: each phrase appears in the answer (case-insensitive); `expected_source`:
    each source is cited, as a whole token (`a.md` is not cited by `data.md`). A JSONL list
    value means every item.
    """
    results = []
    columns = list(case.row)
    mention = column_for("must_mention", columns, loose=True)
    if mention is not None and _phrases(case.row[mention]):
        folded = answer.casefold()
        absent = [p for p in _phrases(case.row[mention]) if p.casefold() not in folded]
        results.append(
            CriterionResult(
                name="must_mention",
                outcome="fail" if absent else "pass",
                probability=0.0 if absent else 1.0,
                source="code",
                feedback=f"Mention {', '.join(repr(p) for p in absent)}." if absent else "",
            )
        )
    source = column_for("expected_source", columns, loose=True)
    if source is not None and _phrases(case.row[source]):
        uncited = [s for s in _phrases(case.row[source]) if not _cited(s, answer)]
        results.append(
            CriterionResult(
                name="expected_source",
                outcome="fail" if uncited else "pass",
                probability=0.0 if uncited else 1.0,
                source="code",
                feedback=f"Cite {', '.join(uncited)}." if uncited else "",
            )
        )
    return results


def has_column_checks(columns: list[str]) -> bool:
    """Whether a file with these columns checks its answers itself."""
    return any(column_for(c, columns, loose=True) for c in ("must_mention", "expected_source"))
