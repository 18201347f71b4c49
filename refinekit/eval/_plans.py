"""A run's plan: its options, with what they name loaded, read by the session and the runner.

The options (`_options`) are checked when they are made; a plan loads what they name (the
data file, the answer function, the judge, the prices, the store's location, Ray) and checks
what only that shows. Every usage problem raises there or here, before a run exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from .._core.errors import UsageProblem
from .._engine.evaluators import EvaluatorLike
from .._engine.prices import Prices
from ._batch_calls import batch_judges
from ._cascade_fit import CascadeFit
from ._cascade_runs import cascade_of, stored_fit
from ._cases import Case, labels_of, load_cases
from ._column_checks import has_column_checks
from ._corrected import JudgeCalibration, load_calibration, uncalibrated
from ._money import load_prices, price_note
from ._options import CalibrateOptions, EvalOptions, PathLike, RunOptions
from ._ray import RayBackend, check_backend
from ._store import RunInfo, RunStore, StoreURL, store_location
from ._target import Target, check_judge, load_judge, name_of

__all__ = ["CalibratePlan", "EvalPlan", "RunPlan"]


class RunPlan:
    """A run's options, with what they name loaded: one object the run is made of.

    `EvalPlan` and `CalibratePlan` are its two kinds; the session, `start` and the runner take
    one whole.

    Attributes:
        options: The run's options, checked when they were made.
        kind: `"eval"` or `"calibrate"`.
        dataset: The data file.
        cases: Its rows, as cases.
        db: The run store's location.
        prices: The prices the cases are priced with, or None.
        retry: The outcomes whose stored cases a resumed run runs again.
        target: The answer function; None for a calibration (its answers are in the file).
        judge: The judge, or None for an eval judged by its file's columns only.
        judge_name: The name the run stores for the judge.
        labels: A calibration's human labels, by case key.
        backend: The Ray backend, or None to run the cases in this process.
        repeat: Verdicts per answer.
        trials: Runs of the answer function per case.
        max_cost: The most the run may spend, or None.
        cascade_fit: The stored fit a cascade judge judges with (`--calibration`), or None.
    """

    kind: ClassVar[Literal["eval", "calibrate"]]
    target: Target | None = None
    cascade_fit: CascadeFit | None = None
    labels: Mapping[str, str] | None = None
    repeat: int = 1
    trials: int = 1
    max_cost: float | None = None

    def __init__(self, options: RunOptions, dataset: PathLike) -> None:
        self.options = options
        self.dataset = Path(dataset)
        self.retry = frozenset(options.retry)
        self.prices: Prices | None = load_prices(options.prices)
        self.db: Path | StoreURL = store_location(options.db)
        self.cases: list[Case] = load_cases(self.dataset)
        self.judge: Any | None = None
        self.judge_name: str | None = None
        self.backend: RayBackend | None = None

    def _load_judge(self, judge: EvaluatorLike | str | None) -> None:
        """The judge object and the name the run stores for it; then the backend."""
        if isinstance(judge, str):
            self.judge, self.judge_name = load_judge(judge), judge
        elif judge is not None:
            self.judge_name = name_of(judge, evaluator=True)
            self.judge = check_judge(judge, self.judge_name)
        o = self.options
        if o.batch:
            _check_batch(self.judge, self.judge_name, self.trials)
        self.backend = check_backend(o.backend, o.ray_address, o.workers, self.db)

    @property
    def target_name(self) -> str | None:
        """The name the run stores for its answer function (None for a calibration)."""
        return None if self.target is None else self.target.spec

    def priced_options(self) -> dict[str, Any]:
        """The prices and cost limit this session runs with, as the run's options keep them."""
        return {"prices": price_note(self.prices), "max_cost": self.max_cost}


def _check_batch(judge: Any | None, name: str | None, trials: int) -> None:
    """That `--batch` can be used: a judge that asks a model through OpenAI or Anthropic.

    Raises:
        UsageProblem: No judge, a judge that asks no `JudgeModel`, or `--trials` above 1.
    """
    if judge is None:
        raise UsageProblem(
            "--batch sends the judge's requests through its provider's batch API: give "
            "--judge, a judge built on a refinekit.judges.JudgeModel (OpenAI or Anthropic)"
        )
    if not batch_judges(judge):
        raise UsageProblem(
            f"--batch: the judge {name!r} asks no OpenAI or Anthropic model through a "
            "refinekit.judges.JudgeModel, so it has no batch API to use; drop --batch"
        )
    if trials > 1:
        raise UsageProblem("--batch judges each case once it is answered: use --trials 1")


class EvalPlan(RunPlan):
    """An eval run's options, loaded and checked: everything a usage problem can be."""

    kind = "eval"
    options: EvalOptions

    def __init__(self, options: EvalOptions) -> None:
        super().__init__(options, options.golden)
        o = options
        if o.max_cost is not None and self.prices is None:
            raise UsageProblem(
                "--max-cost needs --prices (prices=) to compute what the cases cost: a JSON file "
                '{"model": [input, output]} per million tokens'
            )
        self.max_cost = o.max_cost
        self.repeat, self.trials = o.repeat, o.trials
        columns = sorted({c for case in self.cases for c in case.row})
        if isinstance(o.target, str):
            self.target = Target.load(o.target, columns)
        else:
            self.target = Target.of(o.target, name_of(o.target), columns)
        self.target.check(self.cases)
        self._load_judge(o.judge)
        if self.judge is None and not has_column_checks(columns):
            raise UsageProblem(
                "nothing to judge the answers by: give --judge, or a golden file with a "
                f"must_mention or expected_source column (columns: {columns})"
            )
        if self.judge is None and o.repeat > 1:
            raise UsageProblem(
                "--repeat measures a judge's consistency; without --judge the column checks "
                "always agree with themselves"
            )
        if o.calibration is not None and self.judge is None:
            raise UsageProblem("--calibration corrects for a judge's errors: give --judge too")
        self.judge_warning: str | None = None
        self.judge_calibration: JudgeCalibration | None = None
        self.cascade_fit: CascadeFit | None = None
        self.cascade_fit_run: int | None = None
        if o.calibration is None and self.judge is not None and o.min_pass_rate is not None:
            self._uncalibrated(
                "no calibration of it was given (--calibration RUN, a `refinekit calibrate` "
                "run of this judge), so the pass rate is the judge's, errors included"
            )

    def _uncalibrated(self, why: str) -> None:
        """Warn that the judge is uncalibrated, or with `strict_calibration` refuse to run."""
        text = f"the judge is uncalibrated: {why}"
        if self.options.strict_calibration:
            raise UsageProblem(f"{text} (--strict-calibration)")
        self.judge_warning = text

    def prepare(self, store: RunStore) -> RunInfo | None:
        """Check what the run needs of `store` before it starts.

        The calibration `calibration=` names is loaded (or the judge found uncalibrated).

        Returns:
            The run `compare=ID` names; None for `"previous"` (found once the run is stored)
            or no comparison.
        """
        which = self.options.compare
        before = None if which in (None, "previous") else _before(store, which)
        calibration = self.options.calibration
        if calibration is not None:
            cascade = cascade_of(self.judge) is not None
            found, note = load_calibration(store, calibration, self.judge_name, cascade=cascade)
            if cascade:
                self.apply_fit(store, found.run)
            why = note or uncalibrated(found, self.options.min_judge_kappa)
            if why is not None:
                self._uncalibrated(why)
            else:
                self.judge_calibration = found
        return before

    def apply_fit(self, store: RunStore, run_id: int) -> None:
        """Judge with the cascade fitted by calibrate run `run_id` (`Cascade.with_fit`).

        Raises:
            UsageProblem: The run stored no fit for a cascade of this one's levels.
        """
        cascade = cascade_of(self.judge)
        assert cascade is not None
        self.cascade_fit = stored_fit(store.run(run_id), cascade)
        self.cascade_fit_run = run_id
        self.judge = cascade.with_fit(self.cascade_fit)


def _before(store: RunStore, which: int | str) -> RunInfo:
    """The run `compare=ID` names, checked to be comparable."""
    try:
        number = int(which)
    except (TypeError, ValueError):
        raise UsageProblem(
            f"--compare takes 'previous' or a run id (see `refinekit runs`), not {which!r}"
        ) from None
    run = store.run(number)
    if run.kind != "eval":
        raise UsageProblem(f"--compare {number}: run {number} is a {run.kind} run, not an eval")
    if run.summary.get("setup_failed"):
        raise UsageProblem(
            f"--compare {number}: run {number} measured nothing (no answer was judged: a "
            "failure of the setup); compare with another run"
        )
    return run


class CalibratePlan(RunPlan):
    """A calibrate run's options, loaded and checked."""

    kind = "calibrate"
    options: CalibrateOptions

    def __init__(self, options: CalibrateOptions) -> None:
        super().__init__(options, options.labelled)
        self.labels = labels_of(self.cases)
        self._load_judge(options.judge)
