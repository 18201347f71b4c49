"""`@retry_on_low_quality`'s attempts: the best of them, and an answer kept or returned unjudged."""

from __future__ import annotations

import time
from typing import Any

from .._core.types import Attempt, AttemptInfo, Verdict
from .._engine.outcome import Record

__all__ = ["best_of", "kept", "unjudged"]


def best_of(attempts: list[Attempt]) -> Attempt | None:
    """Most criteria passed net of those failed; the later attempt wins a tie."""
    best: Attempt | None = None
    for attempt in attempts:
        if attempt.answer is None:
            continue
        if best is None or attempt.verdict.net_criteria() >= best.verdict.net_criteria():
            best = attempt
    return best


def kept(value: Any, info: AttemptInfo, outer: AttemptInfo | None) -> Any:
    """Return the accepted answer; the documents it was built from go to the enclosing attempt.

    An answer built on an inner answer is built on that answer's context too, so an outer
    evaluator (an outer `@retry_on_low_quality`, `refinekit eval`'s judge) sees it.
    """
    if outer is not None:
        outer._context.extend(info._context)
    return value


def unjudged(
    record: Record | None,
    info: AttemptInfo,
    value: Any,
    why: str,
    started: float,
) -> None:
    """An attempt returned without a verdict, in the outcome: its verdict says why."""
    if record is not None:
        verdict = Verdict.unjudged(why)
        duration = time.perf_counter() - started
        attempt = Attempt(info.number, value, verdict, duration, info.feedback, info.tier)
        record.attempts.append(attempt)
