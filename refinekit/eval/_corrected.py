"""A pass rate corrected for the judge's own errors, from a stored calibration of the judge.

A judge with sensitivity Se (it passes that share of the answers people pass) and
specificity Sp (it fails that share of the answers people fail) reports a biased pass rate:
a lenient judge inflates it, a harsh one deflates it. Given a `refinekit calibrate` run of
the judge, `refinekit eval --calibration RUN` corrects the rate (Rogan-Gladen) and gates on
the lower bound of an interval that includes the uncertainty of Se and Sp, not only of the
observed rate (`_stats.corrected_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._core.errors import RunStoreError, UsageProblem
from ._stats import corrected_interval, kappa_interval, wilson_interval
from ._store import RunInfo, RunStore
from ._summary import CONFIDENCE, Summary

__all__ = ["CorrectedRate", "JudgeCalibration", "correct", "load_calibration"]


@dataclass(frozen=True)
class JudgeCalibration:
    """A judge's agreement with people, as a stored calibrate run measured it.

    Attributes:
        run: The calibrate run's id.
        judge: The judge it calibrated (its stored name).
        true_passes: Items people passed that the judge passed.
        positives: Items people passed.
        true_fails: Items people failed that the judge failed.
        negatives: Items people failed.
        kappa: The judge's Cohen's kappa with people.
        kappa_lower: Its 95% lower bound.
    """

    run: int
    judge: str | None
    true_passes: int
    positives: int
    true_fails: int
    negatives: int
    kappa: float | None
    kappa_lower: float | None

    @property
    def sensitivity(self) -> float | None:
        """The share of the answers people passed that the judge passed."""
        return self.true_passes / self.positives if self.positives else None

    @property
    def specificity(self) -> float | None:
        """The share of the answers people failed that the judge failed."""
        return self.true_fails / self.negatives if self.negatives else None


@dataclass(frozen=True)
class CorrectedRate:
    """The pass rate corrected for the judge's errors, and the interval the gate holds.

    The judged cases' pass rate is corrected (Rogan-Gladen: `(observed + Sp - 1) / (Se + Sp -
    1)`, clipped to [0, 1]); raised cases are failures whatever the judge, so the rate over
    the counted cases is the corrected one scaled by the judged share, and so are its bounds.

    Attributes:
        calibration: The calibration the correction comes from.
        rate: The corrected pass rate; None when the judge's sensitivity and specificity
            add up to 1 or less (no better than chance).
        lower: The 95% lower bound, with the judge's uncertainty in it: what the gate holds.
        upper: The upper bound.
        observed: The uncorrected pass rate (`Summary.rate`).
        sensitivity_interval: The 95% Wilson interval of the judge's sensitivity.
        specificity_interval: That of its specificity.
    """

    calibration: JudgeCalibration
    rate: float | None
    lower: float
    upper: float
    observed: float | None
    sensitivity_interval: tuple[float, float]
    specificity_interval: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures, as the run store keeps them."""
        c = self.calibration
        return {
            "calibration_run": c.run,
            "judge": c.judge,
            "sensitivity": c.sensitivity,
            "specificity": c.specificity,
            "sensitivity_interval": list(self.sensitivity_interval),
            "specificity_interval": list(self.specificity_interval),
            "kappa": c.kappa,
            "kappa_lower": c.kappa_lower,
            "rate": self.rate,
            "lower": self.lower,
            "upper": self.upper,
            "observed": self.observed,
        }


def _count(summary: dict[str, Any], name: str, run: RunInfo) -> int:
    value = summary.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageProblem(
            f"--calibration {run.id}: run {run.id} keeps no {name} count; calibrate the judge "
            "again with this version of refinekit"
        )
    return value


def _latest(store: RunStore, judge: str | None) -> RunInfo:
    found = [
        r
        for r in store.runs(kind="calibrate")
        if r.status == "complete" and r.judge == judge and not r.summary.get("setup_failed")
    ]
    if not found:
        raise UsageProblem(
            f"--calibration latest: no complete calibrate run of the judge {judge!r} in "
            f"{store.where}; run `refinekit calibrate LABELLED --judge {judge}` first"
        )
    return max(found, key=lambda r: r.id)


def load_calibration(
    store: RunStore, which: int | str, judge: str | None, *, cascade: bool = False
) -> tuple[JudgeCalibration, str | None]:
    """The stored calibration `which` names (a run id, or `"latest"` of this judge).

    With `cascade` (the run's judge is a cascade, which judges with the calibration's fit),
    the figures are the fitted cascade's on the items it decided, when the run stored a fit.

    Returns:
        The calibration, and a note when it is of a judge of another name (None when not).

    Raises:
        UsageProblem: `which` is not a run id, names a run that is not a complete calibrate
            run that judged something, or `latest` finds none.
    """
    if which == "latest":
        run = _latest(store, judge)
    else:
        try:
            number = int(which)
        except (TypeError, ValueError):
            raise UsageProblem(
                f"--calibration takes a calibrate run's id (see `refinekit runs --kind "
                f"calibrate`) or 'latest', not {which!r}"
            ) from None
        try:
            run = store.run(number)
        except RunStoreError:
            raise UsageProblem(f"--calibration {number}: the store has no run {number}") from None
        if run.kind != "calibrate":
            raise UsageProblem(
                f"--calibration {number}: run {number} is an {run.kind} run, not a calibrate run"
            )
        if run.status != "complete" or run.summary.get("setup_failed"):
            raise UsageProblem(
                f"--calibration {number}: run {number} is not a complete calibration that "
                "judged its items; calibrate the judge again"
            )
    s = run.summary
    fitted = s.get("cascade")
    if cascade and isinstance(fitted, dict):
        s = fitted  # the fitted cascade's confusion table and kappa
    both_pass = _count(s, "both_pass", run)
    judge_fail_only = _count(s, "judge_fail_only", run)
    human_fail_only = _count(s, "human_fail_only", run)
    both_fail = _count(s, "both_fail", run)
    bounds = kappa_interval(both_pass, human_fail_only, judge_fail_only, both_fail)
    kappa = s.get("kappa")
    calibration = JudgeCalibration(
        run=run.id,
        judge=run.judge,
        true_passes=both_pass,
        positives=both_pass + judge_fail_only,
        true_fails=both_fail,
        negatives=both_fail + human_fail_only,
        kappa=float(kappa) if isinstance(kappa, (int, float)) else None,
        kappa_lower=None if bounds is None else bounds[0],
    )
    note = None
    if run.judge != judge:
        note = (
            f"calibration run {run.id} calibrated the judge {run.judge!r}, and this run's judge "
            f"is {judge!r}"
        )
    return calibration, note


def uncalibrated(calibration: JudgeCalibration, min_kappa: float) -> str | None:
    """Why `calibration` cannot correct the rate; None when it can."""
    if not calibration.positives or not calibration.negatives:
        side = "passed" if not calibration.positives else "failed"
        return (
            f"calibration run {calibration.run} has no item people {side}, so the judge's "
            f"{'sensitivity' if side == 'passed' else 'specificity'} is unknown"
        )
    if calibration.kappa_lower is None or calibration.kappa_lower < min_kappa:
        shown = "none" if calibration.kappa_lower is None else f"{calibration.kappa_lower:.3f}"
        return (
            f"the judge's kappa in calibration run {calibration.run} has a 95% lower bound of "
            f"{shown}, under --min-judge-kappa {min_kappa:.3f}: its verdicts cannot be "
            "corrected with any confidence"
        )
    return None


def correct(summary: Summary, calibration: JudgeCalibration) -> CorrectedRate:
    """The run's pass rate corrected for the judge's errors (see `CorrectedRate`)."""
    judged = summary.passed + summary.failed
    counted = summary.counted
    rate, lower, upper = corrected_interval(
        summary.passed,
        judged,
        calibration.true_passes,
        calibration.positives,
        calibration.true_fails,
        calibration.negatives,
        CONFIDENCE,
    )
    if not counted:
        rate, lower, upper = None, 0.0, 1.0
    else:  # raised cases fail whatever the judge: the judged share is all that can pass
        share = judged / counted
        if judged:
            rate = None if rate is None else rate * share
            lower, upper = lower * share, upper * share
        else:
            rate, lower, upper = 0.0, 0.0, 0.0
    return CorrectedRate(
        calibration=calibration,
        rate=rate,
        lower=lower,
        upper=upper,
        observed=summary.rate,
        sensitivity_interval=wilson_interval(
            calibration.true_passes, calibration.positives, CONFIDENCE
        ),
        specificity_interval=wilson_interval(
            calibration.true_fails, calibration.negatives, CONFIDENCE
        ),
    )
