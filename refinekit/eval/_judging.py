"""Judging one answer: the run's judge, `repeat` times, with the row's own checks.

The case's outcome is decided from the verdicts: the majority of those judged, unless a row
check failed the case.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._core.errors import JudgeError, JudgeMisconfigured, RunAborted
from .._core.redact import redact
from .._core.types import CriterionResult, EvaluationRequest, Usage, Verdict
from .._engine.evaluators import as_evaluator
from .._engine.events import Event
from .._engine.job import job
from .._engine.ledger import per_model
from ..judges._cache import cache_salt, use_cache
from ..judges._cache_backends import JudgeCache
from ..judges._panel import every_member
from ._cases import Case
from ._column_checks import column_checks
from ._ratelimit import RateLimiter
from ._store import CaseOutcome, CaseRecord

__all__ = [
    "CacheCounts",
    "Deferred",
    "Judgement",
    "Judging",
    "decide",
    "error_text",
    "probability_of",
    "verdict_dump",
]

Judgement = tuple[
    list[CriterionResult],
    list[Verdict],
    Usage,
    float,
    dict[str, int],
    dict[tuple[bool, str | None], Usage],
]
"""The row's checks, the verdicts, the judge's usage and seconds, its judge cache hits and
misses (empty without a cache), and the judging job's usage per (judge?, model), to price it
by."""


@dataclass(frozen=True)
class Deferred:
    """An answer whose judging waits for the run's batch phase (`--batch`).

    Attributes:
        request: What the judge is to see.
        record: The case's record so far: its answer, its answer's calls, tokens and cost
            (its outcome is decided once it is judged).
    """

    request: EvaluationRequest
    record: CaseRecord


class CacheCounts:
    """The `judge_cache` events of each judging job: hits and misses by job id."""

    def __init__(self) -> None:
        self.by_job: dict[str, dict[str, int]] = {}

    def __call__(self, event: Event) -> None:
        if event.kind == "judge_cache" and event.cache is not None:
            counts = self.by_job.setdefault(event.job_id, {"hits": 0, "misses": 0})
            counts["hits" if event.cache == "hit" else "misses"] += 1


def verdict_dump(verdict: Verdict) -> dict[str, Any]:
    """A verdict as stored: JSON-ready, with what may quote an error redacted."""
    dump = verdict.model_dump(mode="json", exclude={"metadata"}) | {
        "metadata": json.loads(json.dumps(verdict.metadata, default=str))
    }
    # an unjudged verdict's reason quotes an error; feedback may quote one too (a
    # LowQualityAnswer's text, a judge reading an answer back)
    for part in (dump, *(dump.get("criteria") or ())):
        for name in ("reason", "feedback"):
            if isinstance(part.get(name), str):
                part[name] = redact(part[name])
    return dump


def error_text(exc: BaseException) -> str:
    """An error's type and message, on one line, with credentials redacted."""
    text = redact(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


def probability_of(verdict: Verdict) -> float | None:
    """The judge's probability that the answer passes, when it gives one.

    A criteria judge's weakest criterion (all must hold), when at least one criterion's
    probability came from the model's token probabilities, and 0 when a code criterion failed
    so the model was not asked; else a `probability` the verdict carries in its metadata;
    else None.
    """
    if any(c.source == "logprobs" for c in verdict.criteria):
        known = [c.probability for c in verdict.criteria if c.probability is not None]
        return min(known) if known else None
    if any(c.source == "code" and c.outcome == "fail" for c in verdict.criteria) and any(
        c.outcome == "skipped" for c in verdict.criteria
    ):  # a code check failed, so the model criteria were not asked: a certain fail
        return 0.0
    value = verdict.metadata.get("probability")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return None


class Judging:
    """The run's judge, called `repeat` times per answer, with the row's column checks."""

    def __init__(
        self,
        judge: Any | None,
        name: str | None,
        repeat: int,
        limiter: RateLimiter,
        cache: JudgeCache | None = None,
        *,
        every_member: bool = False,
    ):
        self.evaluator = None if judge is None else as_evaluator(judge)
        self.every_member = every_member  # a calibration measures every panel member
        self.name = name or (self.evaluator.name if self.evaluator is not None else "checks")
        self.repeat = repeat
        self.limiter = limiter
        self.cache = cache
        self.counts = CacheCounts()

    async def judge_once(self, request: EvaluationRequest) -> Verdict:
        """One verdict; a judge that could not judge gives an unjudged one.

        Raises:
            RunAborted: The judge is misconfigured, or raised something that is not a
                `JudgeError` (a bug in the judge).
        """
        evaluator = self.evaluator
        assert evaluator is not None
        try:  # a sync-only judge runs in a worker thread (the adapter's async side)
            verdict: Verdict = await self.limiter.call(lambda: evaluator.aevaluate(request))
            return verdict
        except JudgeMisconfigured as e:
            raise RunAborted(f"the judge is misconfigured: {redact(str(e))}") from e
        except JudgeError as e:
            # The judge could not judge: the case is unavailable, never counted as passed.
            # Not `_policy.judge_failure(e, "fail_open")`: that raises a failure a judge's own
            # "fail_closed" policy marked (so that no answer goes through unjudged), and here
            # no answer goes through; the run records the case and goes on. A panel below
            # its quorum says how its members voted: kept, for the calibration of each.
            votes = getattr(e, "panel", None)
            return Verdict.unjudged(error_text(e), **({"panel": votes} if votes else {}))
        except Exception as e:
            raise RunAborted(f"the judge raised {error_text(e)} (a bug in the judge?)") from e

    async def judge(self, case: Case, request: EvaluationRequest) -> Judgement:
        """The row's checks and the judge's verdicts on one answer, with what they cost."""
        checks = column_checks(case, request.answer)
        started = time.perf_counter()
        verdicts: list[Verdict] = []
        async with job() as judging_job:
            if self.evaluator is None:
                verdicts.append(combine(checks, None, self.name))
            else:
                for number in range(1, self.repeat + 1):
                    with contextlib.ExitStack() as scope:
                        if self.every_member:
                            scope.enter_context(every_member())
                        if self.cache is not None:
                            scope.enter_context(use_cache(self.cache))
                            if number > 1:  # each repeat its own verdict, never the first's
                                scope.enter_context(cache_salt(f"repeat={number}"))
                        verdict = await self.judge_once(request)
                    verdicts.append(combine(checks, verdict, self.name))
        cached = self.counts.by_job.pop(judging_job.id, {}) if self.cache is not None else {}
        return (
            checks,
            verdicts,
            judging_job.judge_usage,
            time.perf_counter() - started,
            cached,
            per_model(judging_job),
        )


def combine(checks: list[CriterionResult], verdict: Verdict | None, name: str) -> Verdict:
    """The row's checks and the judge's verdict as one verdict."""
    failed = [c for c in checks if c.outcome == "fail"]
    if verdict is None:
        return Verdict(
            passed=not failed,
            score=1.0 if not failed else 0.0,
            feedback=" ".join(c.feedback for c in failed),
            criteria=tuple(checks),
        )
    if not verdict.judged:
        update: dict[str, Any] = {"criteria": (*checks, *verdict.criteria)}
        if failed:  # the row's checks fail the case anyway: their feedback says why
            update["feedback"] = " ".join(c.feedback for c in failed)
        return verdict.model_copy(update=update)
    own = verdict.criteria or (
        CriterionResult(
            name=name,
            outcome="pass" if verdict.passed else "fail",
            probability=probability_of(verdict),
            source="logprobs" if probability_of(verdict) is not None else None,
            feedback=verdict.feedback,
        ),
    )
    notes = [c.feedback for c in failed] + ([verdict.feedback] if not verdict.passed else [])
    return verdict.model_copy(
        update={
            "passed": verdict.passed and not failed,
            "criteria": (*checks, *own),
            "feedback": " ".join(notes).strip(),
        }
    )


def decide(
    verdicts: Sequence[Verdict],
    checks: Sequence[CriterionResult] = (),
    judged_by_model: bool = True,
) -> tuple[CaseOutcome, int, int, bool, str | None]:
    """A case's outcome: the majority of the judged verdicts, unless the row's checks decide.

    A row check that failed fails the case whatever the judge said (or could not say); a row
    with nothing to check and no judge is inconclusive.

    Returns:
        The outcome, the passing verdicts, the judged verdicts, whether they disagreed, and
        the reason when the outcome is not a judgement.
    """
    judged = [v for v in verdicts if v.judged]
    passes = sum(v.passed for v in judged)
    flipped = 0 < passes < len(judged)
    if any(c.outcome == "fail" for c in checks):
        return "failed", passes, len(judged), flipped, None
    if not judged_by_model and not checks:
        return "inconclusive", 0, 0, False, "nothing to check: the row's check columns are empty"
    if not judged:
        if any(v.status == "inconclusive" for v in verdicts):
            reasons = [v.reason for v in verdicts if v.status == "inconclusive"]
            return "inconclusive", 0, 0, False, reasons[0]
        return "unavailable", 0, 0, False, verdicts[0].reason if verdicts else None
    if passes * 2 > len(judged):
        return "passed", passes, len(judged), flipped, None
    if passes * 2 < len(judged):
        return "failed", passes, len(judged), flipped, None
    return "inconclusive", passes, len(judged), flipped, f"the judge split {passes}/{len(judged)}"
