"""Cascades: a cheap judge's verdict kept when it is sure enough, else the next level judges.

A cascade asks its levels in order, cheapest first. Each level's verdict gets a confidence
(`confidence_of`, or the caller's function); the first level whose confidence clears its
threshold decides. Thresholds fitted on labelled items (`refinekit.eval.fit_cascade`) make
the cascade's agreement with people at least a target with a chosen probability; see
docs/panels.md, "Cascades".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .._core.numbers import is_number, is_real, shown
from .._core.types import EvaluationRequest, Verdict
from .._engine.evaluators import Adapted, EvaluatorLike, FlowEvaluator
from .._engine.flow import Evaluate, Flow
from ._confidence import ConfidenceFn, confidence_of
from ._panel import _EVERY_MEMBER, _abstention, named_evaluators

__all__ = ["Cascade", "CascadeFitLike", "cascade"]


class CascadeFitLike(Protocol):
    """What `Cascade.with_fit` reads of a fit (`refinekit.eval.CascadeFit` is one)."""

    @property
    def thresholds(self) -> tuple[float | None, ...]: ...

    @property
    def target(self) -> float: ...

    @property
    def risk(self) -> float: ...


def _levels(levels: Sequence[Any]) -> list[tuple[str, Adapted, float]]:
    """Each level's name, evaluator and expected model calls."""
    return named_evaluators(levels, "cascade level")


def _check_thresholds(given: object, levels: int) -> tuple[float | None, ...] | None:
    if given is None:
        return None
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise TypeError(
            f"thresholds must be a list of {levels} numbers (or None for a level that never "
            f"decides), got {type(given).__name__}"
        )
    if len(given) != levels:
        raise ValueError(f"thresholds must have one entry per level ({levels}), got {len(given)}")
    made: list[float | None] = []
    for k, value in enumerate(given):
        if value is None:
            made.append(None)
            continue
        if isinstance(value, bool) or not is_number(value) or not is_real(value):
            raise TypeError(f"threshold {k} must be a number from 0.5 to 1, got {shown(value)}")
        number = float(value)
        if not 0.5 <= number <= 1.0:
            raise ValueError(f"threshold {k} must be from 0.5 to 1, got {shown(value)}")
        made.append(number)
    return tuple(made)


def _check_confidence(
    given: ConfidenceFn | Sequence[ConfidenceFn | None] | None, levels: int
) -> tuple[ConfidenceFn, ...]:
    if given is None:
        return (confidence_of,) * levels
    if callable(given):
        return (given,) * levels
    shape: object = given
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(
            "confidence must be a function (verdict) -> float | None, or a list of one per "
            f"level, got {type(given).__name__}"
        )
    if len(given) != levels:
        raise ValueError(f"confidence must have one entry per level ({levels}), got {len(given)}")
    made: list[ConfidenceFn] = []
    for k, fn in enumerate(given):
        if fn is not None and not callable(fn):
            raise TypeError(f"confidence {k} must be a function or None, got {fn!r}")
        made.append(fn or confidence_of)
    return tuple(made)


class Cascade(FlowEvaluator):
    """Levels of evaluators, each asked only when the ones before were not sure enough.

    See `cascade()`.
    """

    def __init__(
        self,
        levels: Sequence[EvaluatorLike | tuple[str, EvaluatorLike]],
        *,
        thresholds: Sequence[float | None] | None,
        confidence: ConfidenceFn | Sequence[ConfidenceFn | None] | None,
        abstain: bool,
        name: str | None,
        fit: CascadeFitLike | None = None,
    ) -> None:
        if not levels:
            raise ValueError("a cascade needs at least one level")
        if not isinstance(abstain, bool):
            raise TypeError(f"abstain must be a bool, got {abstain!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        made = _levels(levels)
        self._calls = tuple(calls for _, _, calls in made)
        self.levels: tuple[Adapted, ...] = tuple(level for _, level, _ in made)
        self.level_names: tuple[str, ...] = tuple(level_name for level_name, _, _ in made)
        self.children = self.levels
        self.confidence: tuple[ConfidenceFn, ...] = _check_confidence(confidence, len(made))
        self.abstain = abstain
        self.target: float | None = None
        self.risk: float | None = None
        if fit is not None:
            if thresholds is not None:
                raise ValueError("give thresholds= or fit=, not both")
            thresholds = getattr(fit, "thresholds", None)
            if thresholds is None:
                raise TypeError(f"fit must be a fitted cascade (a CascadeFit), got {fit!r}")
            self.target = float(fit.target)
            self.risk = float(fit.risk)
        self.thresholds: tuple[float | None, ...] | None = _check_thresholds(thresholds, len(made))
        self.name = name or "cascade(" + ", ".join(self.level_names) + ")"

    @property
    def expected_calls(self) -> float:
        """The most model calls the cascade makes: every level's (a sure level spares the rest)."""
        return sum(self._calls)

    def with_fit(self, fit: CascadeFitLike) -> Cascade:
        """The same cascade with the thresholds of a fit (`refinekit.eval.fit_cascade`).

        Args:
            fit: The fit, with one threshold per level.

        Returns:
            A new cascade; this one is unchanged.

        Raises:
            ValueError: The fit has another number of levels.
        """
        return Cascade(
            tuple(zip(self.level_names, self.levels, strict=True)),
            thresholds=None,
            confidence=self.confidence,
            abstain=self.abstain,
            name=self.name,
            fit=fit,
        )

    def _keeps(self, k: int, confidence: float | None) -> bool:
        """Whether level `k`'s verdict, of this confidence, clears its threshold."""
        last = k == len(self.levels) - 1
        if self.thresholds is None:  # not fitted: only a certain verdict stops early
            return last or confidence == 1.0
        threshold = self.thresholds[k]
        return threshold is not None and confidence is not None and confidence >= threshold

    def _never_decides(self, k: int) -> bool:
        """Whether level `k` cannot decide whatever it says: then it is not asked."""
        if self.thresholds is None or self.thresholds[k] is not None:
            return False
        return k < len(self.levels) - 1 or self.abstain

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        exhaustive = _EVERY_MEMBER.get()
        entries: list[dict[str, Any]] = []
        decided: tuple[int, Verdict, float | None] | None = None
        last_error: Exception | None = None
        last_verdict: Verdict | None = None
        for k, level in enumerate(self.levels):
            if not exhaustive and (decided is not None or self._never_decides(k)):
                entries.append({"name": self.level_names[k], "asked": False})
                continue
            entry: dict[str, Any] = {"name": self.level_names[k], "asked": True}
            entries.append(entry)
            try:
                verdict: Verdict = yield Evaluate(level, request)
            except Exception as exc:
                reason = _abstention(exc)
                if reason is None:
                    raise
                entry["reason"] = reason
                last_error = exc
                continue
            last_error = None
            last_verdict = verdict
            entry["status"] = verdict.status
            if not verdict.judged:
                entry["reason"] = verdict.reason
                continue
            sure = self._confidence(k, verdict)
            entry["passed"] = verdict.passed
            entry["confidence"] = sure
            if decided is None and self._keeps(k, sure):
                decided = (k, verdict, sure)
        if decided is None and last_error is not None:
            raise last_error  # the last level could not judge: the caller's policy decides
        return self._verdict(decided, entries, last_verdict)

    def _confidence(self, k: int, verdict: Verdict) -> float | None:
        value = self.confidence[k](verdict)
        if value is None:
            return None
        if isinstance(value, bool) or not is_number(value) or not is_real(value):
            raise TypeError(
                f"the confidence of level {k} ({self.level_names[k]!r}) must be a number from "
                f"0 to 1 (below 0.5 counts as 0.5) or None, got {shown(value)}"
            )
        number = float(value)
        if not 0.0 <= number <= 1.0:
            raise ValueError(
                f"the confidence of level {k} ({self.level_names[k]!r}) must be from 0 to 1 "
                f"(below 0.5 counts as 0.5), got {shown(value)}"
            )
        return max(0.5, number)

    def _verdict(
        self,
        decided: tuple[int, Verdict, float | None] | None,
        entries: list[dict[str, Any]],
        last: Verdict | None,
    ) -> Verdict:
        levels = [
            {
                "name": e["name"],
                "asked": e["asked"],
                "passed": e.get("passed"),
                "confidence": e.get("confidence"),
                **({"status": e["status"]} if "status" in e else {}),
                **({"reason": e["reason"]} if e.get("reason") else {}),
            }
            for e in entries
        ]
        record: dict[str, Any] = {
            "level": None,
            "confidence": None,
            "levels": levels,
            "thresholds": list(self.thresholds) if self.thresholds is not None else None,
            "abstain": self.abstain,
        }
        if self.target is not None:
            record["target"], record["risk"] = self.target, self.risk
        if decided is not None:
            k, verdict, sure = decided
            record["level"], record["confidence"] = k, sure
            record["guaranteed"] = self.thresholds is not None
            metadata = {**verdict.metadata, "cascade": record}
            return verdict.model_copy(update={"metadata": metadata})
        k = len(self.levels) - 1
        if last is not None and levels[k].get("status") is not None:
            if not last.judged:  # the last level could not judge: its verdict says why
                return last.model_copy(update={"metadata": {**last.metadata, "cascade": record}})
            if not self.abstain:  # it decides below its threshold: outside the guarantee
                record["level"], record["confidence"] = k, levels[k]["confidence"]
                record["guaranteed"] = False
                metadata = {**last.metadata, "cascade": record}
                return last.model_copy(update={"metadata": metadata})
        asked = sum(1 for e in levels if e["asked"])
        return Verdict.inconclusive(
            f"CASCADE_NOT_SURE: no level of {len(levels)} was sure enough ({asked} asked)",
            judge=self.name,
            cascade=record,
        )

    def __repr__(self) -> str:
        return f"<evaluator {self.name}>"


def cascade(
    *levels: EvaluatorLike | tuple[str, EvaluatorLike],
    thresholds: Sequence[float | None] | None = None,
    confidence: ConfidenceFn | Sequence[ConfidenceFn | None] | None = None,
    abstain: bool = True,
    name: str | None = None,
    fit: CascadeFitLike | None = None,
) -> Cascade:
    """A cascade of evaluators: the first level sure enough of its verdict decides.

    Levels are any evaluators, cheapest first: rule checks, model judges, `sampled()`
    judges, panels, other cascades; each may be a `(name, evaluator)` pair. The cascade
    asks level 0; when that verdict's **confidence** (0.5 to 1: how sure it is of its own
    pass or fail) is at or above the level's **threshold**, it is the cascade's verdict and
    no other level is asked; else the next level judges. A level whose confidence is unknown
    (None), whose verdict is unjudged or inconclusive, or that raised `JudgeUnavailable` or
    `JudgeReplyError` passes the answer on. Other errors (a budget's stop, a misconfigured
    judge) are raised.

    **Confidence.** `confidence_of` reads it from what the verdict carries, in its
    documented order: a nested cascade's deciding level; the agreement of `sampled()`
    samples; a failed rule check (1.0; a passing one is no evidence: unknown); token
    log-probabilities; a `probability` in the metadata; a panel's margin; a rating's
    distance from its cut-point. `confidence=` replaces it: a function
    `(verdict) -> float | None` (0 to 1; below 0.5 counts as 0.5) for every level, or a list
    of one per level (None there: `confidence_of`).

    **Thresholds.** One per level, 0.5 to 1 (None: the level never decides, and is not
    asked unless it is the last level and `abstain=False`); fit them on
    labelled items with `refinekit.eval.fit_cascade` and apply the fit with
    `fit=` or `Cascade.with_fit`: then the cascade's verdicts agree with people at least as
    often as the fit's target, with probability at least `1 - risk`. Not fitted
    (`thresholds=None`), only a certain verdict (confidence 1.0: a failed rule check, a
    unanimous panel or set of samples) stops early and the last level decides the rest:
    it saves calls, and guarantees nothing.

    **The last level.** With thresholds and `abstain=True` (the default, the guarantee's
    rule), a last-level verdict below its threshold makes the cascade's verdict inconclusive
    (`CASCADE_NOT_SURE`): no level was sure enough. With `abstain=False` the last level
    decides anyway, and the guarantee covers only the verdicts that cleared a threshold
    (`metadata["cascade"]["guaranteed"]` says which). When the last level raised and no
    level decided, its error is raised, for the caller's policy to decide.

    **The verdict** is the deciding level's, with `metadata["cascade"]`: `level` (the index
    that decided, None when the cascade abstained), `confidence` (the deciding level's),
    `levels` (one entry per level: `name`, `asked`, `passed` and `confidence`, None where
    the level gave no verdict, `status` and `reason`), `thresholds`, `abstain`,
    `guaranteed` (whether the verdict cleared a threshold: what the guarantee covers when
    the thresholds were fitted), and the fit's `target` and `risk` when fitted.

    **Calibration.** Under `every_member()` (what `refinekit calibrate` sets) every level
    runs on every item and `levels` records each one's pass or fail and confidence, so the
    thresholds can be fitted from one run; the verdict is still the cascaded one.

    Args:
        *levels: The evaluators, or `(name, evaluator)` pairs, cheapest first.
        thresholds: One per level, 0.5 to 1 or None; None: not fitted.
        confidence: A function (or one per level) giving a verdict's confidence.
        abstain: Whether a last level below its threshold makes an inconclusive verdict.
        name: The cascade's name (default `cascade(<levels>)`).
        fit: A fit whose thresholds to use (`refinekit.eval.CascadeFit`), instead of
            `thresholds`.

    Returns:
        The cascade, an evaluator (sync `evaluate`, async `aevaluate`).

    Raises:
        TypeError: A level that is not an evaluator, or a bad threshold, confidence or fit.
        ValueError: No level, two levels given the same name, thresholds (or a fit) with
            another number of levels, a threshold out of 0.5 to 1, or both thresholds and
            fit.
    """
    return Cascade(
        levels,
        thresholds=thresholds,
        confidence=confidence,
        abstain=abstain,
        name=name,
        fit=fit,
    )
