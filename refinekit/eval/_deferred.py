"""A batched run's answers, kept to be judged later (`--batch`).

A case answered (or a labelled item read) becomes a `Deferred`: the judge's request and the
record so far; the batch phase (`_batch_phase`) judges it and makes its record whole.
"""

from __future__ import annotations

from typing import Any

from .._core.types import EvaluationRequest
from ._cases import Case, as_text, context_of
from ._golden import column_for
from ._judging import Deferred
from ._store import CaseRecord

__all__ = ["answered", "calibration_request", "labelled", "record_fields"]


def calibration_request(case: Case) -> EvaluationRequest:
    """What the judge sees of a labelled item: its question, answer and context."""
    answer_column = column_for("answer", list(case.row), loose=True)
    assert answer_column is not None
    return EvaluationRequest(
        question=case.question,
        answer=as_text(case.row[answer_column]),
        context=context_of(case),
        metadata={"row": dict(case.row)},
    )


def _waiting(case: Case, request: EvaluationRequest, **fields: Any) -> Deferred:
    """`case` waiting for its verdict: the judge's request, and its record so far."""
    record = CaseRecord(
        key=case.key,
        position=case.position,
        question=case.question,
        row=case.row,
        outcome="inconclusive",  # decided once judged
        answer=request.answer,
        **fields,
    )
    return Deferred(request, record)


def answered(
    case: Case,
    request: EvaluationRequest,
    attempts: int,
    cost: dict[str, float],
    models: dict[str, list[str]],
    fields: dict[str, Any],
) -> Deferred:
    """An answered case to judge later: its request, and its record so far.

    `fields` are the answer's own (`corrections`, `answer_usage`, `answer_judge_usage`,
    `answer_seconds`, `tier`, `tiers`); `cost` and `models` its answer calls'.
    """
    return _waiting(case, request, attempts=attempts, cost=cost, models=models, **fields)


def labelled(case: Case, label: str, cost: dict[str, float]) -> Deferred:
    """A labelled item to judge later: its request, its label, and its cost so far."""
    return _waiting(case, calibration_request(case), label=label, cost=cost)


def record_fields(record: CaseRecord) -> dict[str, Any]:
    """What a deferred case's record keeps of its answer, for the record once judged."""
    names = ("attempts", "corrections", "answer_usage", "answer_judge_usage", "answer_seconds")
    return {n: getattr(record, n) for n in (*names, "tier", "tiers")}
