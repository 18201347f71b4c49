"""A run's options, defined once: `EvalOptions` for `run`, `CalibrateOptions` for `calibrate`.

Every option of an evaluation run is a field here (the shared ones `RunOptions`'), and nowhere
else: `run`, `arun`, `calibrate` and `acalibrate` take these fields as their arguments (their
signatures are these classes', `signature_of`), `refinekit eval` and `refinekit calibrate`
build one object from their parsed arguments, and the object travels whole: to the plan that
loads what it names (`_plans`), to the session, and to the Ray workers. Adding an option is a
field here, its check in `__post_init__`, a line in the parser and the code that uses it.

Every value is checked once, when the object is made (a `dataclasses.replace` copy too), and
kept in the form a run reads (`retry` as a frozenset, `calibration` as a run's id, the
fractions as floats): a bad one raises `UsageProblem` before anything is paid for. What the
values name (the files, the modules, the store, Ray) is loaded and checked when the run
starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from .._core.errors import UsageProblem
from .._core.numbers import is_number, is_real, shown
from .._engine.evaluators import EvaluatorLike
from .._engine.options import signature_of
from .._engine.prices import Prices
from ._results import RunEvent

__all__ = [
    "RETRYABLE",
    "CalibrateOptions",
    "EvalOptions",
    "PathLike",
    "RunOptions",
    "signature_of",
]

PathLike = str | os.PathLike[str]
"""A file's path: text or an `os.PathLike`."""

RETRYABLE = ("raised", "unavailable")
"""The outcomes `retry` may run again: each says nothing about the answer, only that no
verdict was reached. A passed, failed or inconclusive case is a measurement, never re-run."""


def _whole(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageProblem(
            f"{name} must be a whole number from {low} to {high}, got {shown(value)}"
        )
    return value


def _fraction(
    name: str, value: float | None, low: float, high: float, *, open_low: bool = False
) -> float | None:
    if value is None:
        return None
    if (
        not is_number(value)
        or not is_real(value)
        or not low <= value <= high
        or (open_low and value == low)
    ):
        side = "above" if open_low else "from"
        raise UsageProblem(
            f"{name} must be a number {side} {low:g} to {high:g}, got {shown(value)}"
        )
    return float(value)


def _open_fraction(name: str, value: object) -> float:
    """A number strictly between 0 and 1 (a cascade's target agreement, its risk)."""
    if not is_number(value) or not is_real(value) or not 0.0 < value < 1.0:
        raise UsageProblem(f"{name} must be a number above 0 and below 1, got {shown(value)}")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise UsageProblem(f"{name} must be True or False, not {value!r}")
    return value


def _outcomes(retry: Iterable[str]) -> frozenset[str]:
    if isinstance(retry, str):  # "raised,unavailable", as the command line takes it
        retry = retry.split(",")
    wanted = frozenset(part.strip() for part in retry if part.strip())
    if not wanted <= set(RETRYABLE):
        raise UsageProblem(
            f"retry takes raised and unavailable (a passed, failed or inconclusive case is a "
            f"measurement, never run again), got {sorted(wanted)}"
        )
    return wanted


def _run_id(value: object) -> int | None:
    """A `run_id=` argument: None, or a run's number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageProblem(f"run_id must be a stored run's number (1 or more), not {value!r}")
    return value


def _calibration(value: object) -> int | str | None:
    """A `calibration=` argument: None, a run's id, or "latest"."""
    if value is None or value == "latest":
        return value
    if isinstance(value, bool):
        raise UsageProblem(f"calibration takes a calibrate run's id or 'latest', not {value!r}")
    if isinstance(value, int) and value >= 1:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
        return int(value)
    raise UsageProblem(
        "--calibration takes a calibrate run's id (see `refinekit runs --kind calibrate`) or "
        f"'latest', not {value!r}"
    )


@dataclass(frozen=True)
class RunOptions:
    """What every stored run takes, an eval run and a calibration alike.

    Attributes:
        concurrency: Cases in flight at once, from 1 to 256.
        db: The run store: a SQLite file or a `postgresql://` URL; None for
            `$REFINEKIT_DB`, else `.refinekit/runs.db`.
        resume: Join the run of the same call that other workers (processes, machines on a
            shared PostgreSQL store) are running, sharing its cases out, or resume the newest
            unfinished one (its stored cases are not run again); False always starts a new
            run.
        retry: Outcomes (`"raised"`, `"unavailable"`) whose stored cases a resumed run runs
            again; the new outcome replaces the stored one.
        on_event: Told `RunStarted`, then `CaseFinished` for each case (on the thread that
            runs the cases), `RunProgress` as other workers store theirs, and `RunStopped`
            if the run stops early.
        run_id: Join or resume this stored run (one of the same call over the same file), as
            from another machine where the file's path differs. Without it, a run of this
            call that other workers are running is joined, else the newest unfinished one
            resumed (see `resume`).
        backend: `"local"` answers the cases in this process; `"ray"` in Ray tasks
            (`refinekit[ray]`), each a worker of the run claiming cases from the store, while
            this process waits and then stores the run complete. The target and judge travel
            as given: a `module:name` is imported on the workers, an object is pickled.
        ray_address: The Ray cluster to use (`ray.init(address=...)`); None starts a local
            Ray (or uses the one this process already initialised). A cluster's workers
            need a store they all reach: `db` must be a PostgreSQL URL.
        workers: Ray tasks to start, each running `concurrency` cases at once; None for one
            per CPU of the cluster.
        cache: Look the judge's requests up in the store's judge cache first, and store
            what the model answers (`--cache`): re-running an unchanged eval then makes no
            judge call. Only the run's judge, at temperature 0 (or a
            `JudgeModel(cache_sampled=True)`); each `repeat` is keyed apart. See
            docs/judge_cache.md.
        prices: Price each case's model calls: a `refinekit.Prices`, a mapping
            `{model: (input, output)}` per million tokens (with an optional `"default"`), a
            JSON file of that mapping, or `module:name` of a `Prices`. Each case's `cost` and
            the summary's `cost` are filled in; a model without a price stops the run
            (`RunAborted`). Not part of what a resume must match.
        batch: Send the run judge's requests through its provider's batch API (`--batch`;
            OpenAI and Anthropic, at their batch price, half the list price): the cases are
            answered first, each kept waiting for its verdict, then judged together, each
            request waiting for its batch (minutes to hours). An interrupted run keeps its
            batches running at the provider, and the same call resumes it, polling the same
            batches. Needs a judge built on a `JudgeModel`; its structured requests
            (parsed by instructor: rating judges) are sent directly, at the list price. See
            docs/batch.md.
    """

    _: KW_ONLY
    concurrency: int = 4
    db: PathLike | None = None
    resume: bool = True
    retry: Iterable[Literal["raised", "unavailable"]] | str = ()
    on_event: Callable[[RunEvent], None] | None = None
    run_id: int | None = None
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    workers: int | None = None
    cache: bool = False
    prices: Prices | Mapping[str, Any] | PathLike | None = None
    batch: bool = False

    def __post_init__(self) -> None:
        """Check the shared options, and keep each in the form a run reads.

        Raises:
            UsageProblem: An option is out of range or of the wrong kind.
        """
        self._set("cache", _flag("cache", self.cache))
        self._set("batch", _flag("batch", self.batch))
        self._set("run_id", _run_id(self.run_id))
        self._set("concurrency", _whole("concurrency", self.concurrency, 1, 256))
        self._set("retry", _outcomes(self.retry))
        self._set("resume", _flag("resume", self.resume))

    def _set(self, name: str, value: object) -> None:
        """A checked value in place of the given one (the object is frozen once made)."""
        object.__setattr__(self, name, value)


@dataclass(frozen=True)
class EvalOptions(RunOptions):
    """An eval run: a golden set through an answer function, every answer judged.

    `refinekit.eval.run(golden, **fields)` makes one and runs it; `refinekit eval` makes one
    from its arguments. The fields of `RunOptions` too.

    Attributes:
        golden: The golden file, `.csv` or `.jsonl`.
        target: The answer function (decorated or plain, `def` or `async def`), or its
            `module:function` name (imported from the current folder; a file path,
            `app/answers.py:answer`, is taken as the module it is).
        judge: An evaluator (a refinekit judge, a check, a function) or its `module:name`;
            None to judge by the file's columns only.
        repeat: Judge each answer this many times (1 to 50) and count how often the
            verdicts flip (the judge's consistency); the outcome is the majority, an even
            split inconclusive.
        trials: Run the answer function this many times per case (1 to 50), each answer
            judged on its own: the system's consistency. A case then passes only when every
            trial passed (pass^k), so the pass rate and `min_pass_rate` are pass^k's; the
            summary's `trials` gives pass@k (passed at least once), pass^k and the rate per
            trial, each with its 95% Wilson interval, and each case's flip rate.
        min_pass_rate: A gate: `EvalResult.passed` is False when the pass rate's 95% lower
            bound is under it: the Wilson bound, or with `calibration` the bound of the rate
            corrected for the judge's errors.
        calibration: The id of a stored `calibrate` run of this judge (or `"latest"`: the
            newest complete one of a judge of the same name): its sensitivity and
            specificity against people's labels correct the pass rate (Rogan-Gladen), and
            the interval includes their uncertainty (`EvalResult.corrected`). Without one,
            or with a judge whose kappa's 95% lower bound is under `min_judge_kappa`, the
            gate says the judge is uncalibrated (`EvalResult.judge_warning`), and gates on
            the Wilson bound. With a cascade judge (`refinekit.judges.cascade`) the cascade
            judges with the fit that calibration stored (`Cascade.with_fit`), and the
            correction uses the fitted cascade's figures; a calibration that stored no fit
            for a cascade of as many levels is a `UsageProblem`. Needs `repeat` and `trials`
            of 1.
        min_judge_kappa: The lowest 95% lower bound of the calibrated judge's kappa that
            lets its calibration correct the rate, from -1 to 1.
        strict_calibration: Make an uncalibrated judge an error (`UsageProblem`, before
            anything runs) instead of a warning, when a judge and `min_pass_rate` are given.
        compare: Compare with `"previous"` (the newest earlier complete run of this file with
            the same judge that measured something) or a run id, on the questions both share.
        alpha: The comparison's gate: a regression with exact McNemar p under `alpha`, with
            more regressions than improvements, fails `EvalResult.passed`.
        max_cost: Start no case that could take the run's spend over it: each case reserves
            its expected cost (the most a stored case cost) in the run store before it
            starts, counted with every worker's cases in flight, and a case that does not fit
            waits for them or, with none in flight, stops the run incomplete
            (`CostLimitReached`), resumable with a higher `max_cost`. Needs `prices`; the
            exact bound is in docs/budgets.md.
    """

    golden: PathLike
    _: KW_ONLY
    target: Callable[..., Any] | str
    judge: EvaluatorLike | str | None = None
    repeat: int = 1
    trials: int = 1
    min_pass_rate: float | None = None
    calibration: int | Literal["latest"] | str | None = None
    min_judge_kappa: float = 0.2
    strict_calibration: bool = False
    compare: int | Literal["previous"] | str | None = None
    alpha: float = 0.05
    max_cost: float | None = None

    def __post_init__(self) -> None:
        """Check every option (`RunOptions`' too); see the class for each one's range.

        Raises:
            UsageProblem: An option is out of range or of the wrong kind, or two cannot be
                combined (`calibration` with `repeat` or `trials` above 1).
        """
        super().__post_init__()
        if self.max_cost is not None:
            max_cost = self.max_cost
            if not is_number(max_cost) or not is_real(max_cost) or max_cost <= 0:
                raise UsageProblem(f"max_cost must be a number above 0, got {shown(max_cost)}")
            self._set("max_cost", float(max_cost))
        self._set("repeat", _whole("repeat", self.repeat, 1, 50))
        self._set("trials", _whole("trials", self.trials, 1, 50))
        self._set("min_pass_rate", _fraction("min_pass_rate", self.min_pass_rate, 0.0, 1.0))
        if (
            self.min_judge_kappa is None
        ):  # a gate always applies: -1.0 is the one that lets any judge through
            raise UsageProblem(
                "min_judge_kappa must be a number from -1 to 1 (-1 lets any calibrated judge "
                "through), got None"
            )
        self._set("min_judge_kappa", _fraction("min_judge_kappa", self.min_judge_kappa, -1.0, 1.0))
        self._set("strict_calibration", _flag("strict_calibration", self.strict_calibration))
        self._set("calibration", _calibration(self.calibration))
        if self.calibration is not None and (self.repeat > 1 or self.trials > 1):
            raise UsageProblem(
                "--calibration corrects one verdict per answer, as the judge was calibrated: "
                "it cannot be combined with --repeat or --trials above 1"
            )
        self._set("alpha", _fraction("alpha", self.alpha, 0.0, 1.0, open_low=True))


@dataclass(frozen=True)
class CalibrateOptions(RunOptions):
    """A calibration: a judge over answers people labelled, its agreement with them measured.

    `refinekit.eval.calibrate(labelled, **fields)` makes one and runs it; `refinekit
    calibrate` makes one from its arguments. The fields of `RunOptions` too (`retry`: outcomes
    whose stored items a resumed run judges again; `prices`: each item's `cost` is the judge's
    calls).

    Attributes:
        labelled: The labelled file, `.csv` or `.jsonl`, with `question`, `answer`, `label`
            (pass or fail) and optionally `context` columns.
        judge: The judge: an evaluator, or its `module:name`.
        target_error: The most wrong decisions allowed on each side of the recommended
            thresholds, from 0 to 0.99.
        bins: Bins of the reliability table, from 1 to 100.
        min_kappa: A gate: `CalibrationResult.passed` is False when Cohen's kappa is under it
            (or there is none).
        target: For a cascade judge (`refinekit.judges.cascade`): the agreement with people
            each level's kept verdicts must reach, above 0 and below 1; the calibration fits
            the levels' thresholds to it (`refinekit.eval.fit_cascade`) and stores the fit,
            which `run(calibration=...)` applies.
        risk: The chance, above 0 and below 1, that a fitted level's agreement is under
            `target` after all: the guarantee holds with probability `1 - risk`.
    """

    labelled: PathLike
    _: KW_ONLY
    judge: EvaluatorLike | str
    target_error: float = 0.1
    bins: int = 10
    min_kappa: float | None = None
    target: float = 0.9
    risk: float = 0.1

    def __post_init__(self) -> None:
        """Check every option (`RunOptions`' too); see the class for each one's range.

        Raises:
            UsageProblem: An option is out of range or of the wrong kind.
        """
        super().__post_init__()
        self._set("target", _open_fraction("target", self.target))
        self._set("risk", _open_fraction("risk", self.risk))
        self._set("bins", _whole("bins", self.bins, 1, 100))
        self._set("target_error", _fraction("target_error", self.target_error, 0.0, 0.99))
        self._set("min_kappa", _fraction("min_kappa", self.min_kappa, -1.0, 1.0))
