"""What a run gives back: its result, and the events it reports while it goes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._calibration import Calibration
from ._corrected import CorrectedRate
from ._store import CaseRecord, RunInfo, StoreURL
from ._summary import Comparison, Summary

__all__ = [
    "BatchProgress",
    "CalibrationResult",
    "CaseFinished",
    "EvalResult",
    "PROGRESS_SECONDS",
    "RunEvent",
    "RunProgress",
    "RunStarted",
    "RunStopped",
]


@dataclass(frozen=True)
class RunStarted:
    """A run is about to run its cases: a new run, or an unfinished one resumed.

    Attributes:
        run: The stored run.
        db: The run store: its file, or its PostgreSQL URL (shown without credentials).
        dataset: The data file, as it was given.
        cases: The cases of the data file.
        resuming: Whether `run` is an unfinished run resumed (else a new one).
        resumed: Stored cases kept as they are, not run again.
        joined: Whether `run` was running on other workers (processes, machines) and this
            one joined them: the cases are shared out, each answered once.
        retried: Stored cases to run again (`retry=`), by their stored outcome.
        dropped: Stored cases no longer in the file, removed from the run.
        retry: The outcomes `retry=` asked to run again.
    """

    run: RunInfo
    db: Path | StoreURL
    dataset: Path
    cases: int
    resuming: bool
    resumed: int
    retried: Mapping[str, int]
    dropped: int
    retry: frozenset[str]
    joined: bool = False


@dataclass(frozen=True)
class CaseFinished:
    """A case finished and was stored.

    Attributes:
        record: The case as stored.
        done: The run's cases stored so far, by every worker (other processes, Ray tasks),
            those resumed included: the cases of the data file no longer to answer.
        total: The cases of the data file.
        counts: The outcomes of this session's finished cases, by outcome.
        cost: With prices, what the run's stored cases cost so far, every worker's; None
            without prices.
    """

    record: CaseRecord
    done: int
    total: int
    counts: Mapping[str, int]
    cost: float | None = None


PROGRESS_SECONDS = 2.0
"""How often a run looks in its store for cases other workers stored (`RunProgress`)."""


@dataclass(frozen=True)
class RunProgress:
    """The run went on elsewhere: other workers (processes, Ray tasks) stored cases.

    Told every `PROGRESS_SECONDS` while the run goes, when its count or cost changed since
    the last `CaseFinished` or `RunProgress` (so a run this process answers alone tells
    none).

    Attributes:
        done: The run's cases stored so far, by every worker, those resumed included.
        total: The cases of the data file.
        cost: With prices, what the run's stored cases cost so far; None without prices.
    """

    done: int
    total: int
    cost: float | None = None


@dataclass(frozen=True)
class RunStopped:
    """The run stopped before its end and is stored `incomplete`; it is resumable.

    Told before the error that stopped it is raised.

    Attributes:
        run: The stored run.
        stored: The cases the run has stored.
        cases: The cases of the data file.
        error: What stopped it: a `RunAborted`, a `KeyboardInterrupt`, a cancellation...
    """

    run: RunInfo
    stored: int
    cases: int
    error: BaseException


@dataclass(frozen=True)
class BatchProgress:
    """A batched run's (`--batch`) progress: its answers first, then its judge's batches.

    Told as each case is answered (`state` `"answering"`: `done` answers of the `total`
    cases; the judging follows), then after each poll of the run's open batches (`state` the
    batch's: `validating`, `in_progress`, `finalizing`, `ended`, `failed`, `expired`,
    `cancelling` or `cancelled`; `done` judge requests finished of the `total` in them).

    Attributes:
        state: `"answering"`, or the state of the batch polled last.
        done: Answers so far; or the judge requests those batches finished so far.
        total: The cases; or the judge requests in those batches.
        batches: The run's open batches this worker polls (0 while answering).
    """

    state: str
    done: int
    total: int
    batches: int


RunEvent = RunStarted | CaseFinished | RunProgress | RunStopped | BatchProgress
"""What `on_event` is told while a run goes."""


@dataclass(frozen=True)
class EvalResult:
    """A complete `refinekit.eval.run`: the stored run, its cases, its figures, its gates.

    Attributes:
        run: The run as stored (`run.id` is its id; `run.summary` its stored figures).
        cases: Every case of the run, in file order, resumed ones included.
        summary: The run's figures: the pass rate and its 95% Wilson interval, the outcomes,
            attempts, corrections, model calls and tokens.
        setup_failed: Whether no answer was judged at all (every case raised an error that is
            not a refused answer, or found the judge unavailable): the run measured the
            setup, not the answers, so no gate applies and no comparison is made.
        min_pass_rate: The pass-rate gate asked for, or None.
        comparison: The comparison with an earlier run (`compare=`), when one was made.
        alpha: The significance level of the comparison's gate.
        db: The run store: its file, or its PostgreSQL URL (shown without credentials).
        cases_in_file: The rows of the data file.
        retried: Stored cases run again (`retry=`) over the run's life.
        rate_limit_waits: How often a rate-limited model call was backed off.
        rate_limit_seconds: The seconds those backoffs took, in all (computed, and not slept
            under the testing switch).
        corrected: With `calibration=`, the pass rate corrected for the judge's errors and
            its interval (what `min_pass_rate` holds then); None without, or when the
            calibration could not correct it (`judge_warning` says why).
        judge_warning: Why the judge is uncalibrated (no calibration given with a gate, a
            calibration of another judge, or a kappa whose lower bound is under
            `min_judge_kappa`); None when it is calibrated, or no gate asked.
        cascade_fit: With a cascade judge and `calibration=`, the fit it judged with: the
            `calibration_run` that stored it, and the fit's `thresholds`, `target`, `risk`
            (`CascadeFit.to_dict()`); None otherwise.
    """

    run: RunInfo
    cases: list[CaseRecord]
    summary: Summary
    setup_failed: bool
    min_pass_rate: float | None
    comparison: Comparison | None
    alpha: float
    db: Path | StoreURL
    cases_in_file: int
    retried: int
    rate_limit_waits: int
    rate_limit_seconds: float
    corrected: CorrectedRate | None = None
    judge_warning: str | None = None
    cascade_fit: dict[str, Any] | None = None

    @property
    def judge_cache(self) -> dict[str, int] | None:
        """The judge cache's `hits` and `misses` over the whole run; None without `cache=True`.

        Hits are the run judge's requests answered from the store, misses those sent to the
        model.
        """
        counts = self.run.summary.get("judge_cache")
        return dict(counts) if isinstance(counts, dict) else None

    @property
    def run_id(self) -> int:
        """The run's id in its store."""
        return self.run.id

    @property
    def measured(self) -> bool:
        """Whether some case passed or failed (or raised), so the pass rate means something."""
        return not self.setup_failed and self.summary.rate is not None

    @property
    def gate_lower(self) -> float:
        """The lower bound `min_pass_rate` is held against: the corrected one, else Wilson's."""
        return self.corrected.lower if self.corrected is not None else self.summary.lower

    @property
    def pass_rate_held(self) -> bool | None:
        """Whether the pass rate's 95% lower bound is at least `min_pass_rate`.

        The bound of the rate corrected for the judge's errors with `calibration=`, else the
        Wilson bound. None when no `min_pass_rate` was given; False when the run measured
        nothing.
        """
        if self.min_pass_rate is None:
            return None
        return self.measured and self.gate_lower >= self.min_pass_rate

    @property
    def regressed(self) -> bool:
        """Whether the comparison found a significant regression (at level `alpha`)."""
        return self.comparison is not None and self.comparison.significant_regression(self.alpha)

    @property
    def passed(self) -> bool:
        """Whether every gate held.

        The run measured something, `min_pass_rate` (when given) held, and the comparison
        (when made) found no significant regression.
        """
        return self.measured and self.pass_rate_held is not False and not self.regressed


@dataclass(frozen=True)
class CalibrationResult:
    """A complete `refinekit.eval.calibrate`: the stored run, its items and its figures.

    Attributes:
        run: The run as stored (`run.id` is its id).
        cases: Every labelled item of the run, with the judge's verdicts, in file order.
        calibration: How far the judge agrees with the labels: the confusion table,
            accuracy, precision and recall on failures, Cohen's kappa, and (when every
            verdict carried a probability) the reliability table, the expected calibration
            error and the recommended thresholds.
        setup_failed: Whether the judge gave no verdict on any item (all unavailable): no
            figure means anything, and no gate applies.
        min_kappa: The kappa gate asked for, or None.
        db: The run store: its file, or its PostgreSQL URL (shown without credentials).
        retried: Stored items run again (`retry=`) over the run's life.
    """

    run: RunInfo
    cases: list[CaseRecord]
    calibration: Calibration
    setup_failed: bool
    min_kappa: float | None
    db: Path | StoreURL
    retried: int

    @property
    def run_id(self) -> int:
        """The run's id in its store."""
        return self.run.id

    @property
    def kappa_held(self) -> bool | None:
        """Whether Cohen's kappa is at least `min_kappa`; None when no `min_kappa` was given.

        False when there is no kappa (no item was judged).
        """
        if self.min_kappa is None:
            return None
        kappa = self.calibration.kappa
        return not self.setup_failed and kappa is not None and kappa >= self.min_kappa

    @property
    def passed(self) -> bool:
        """Whether the judge gave verdicts and `min_kappa`, when given, held."""
        return not self.setup_failed and self.kappa_held is not False
