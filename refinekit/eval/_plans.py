"""A run's arguments, loaded and checked, and its result once its cases ran.

Every usage problem (a file, a target, a judge, an option) raises here, before a run exists.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from .._core.errors import UsageProblem
from .._core.numbers import is_number, is_real, shown
from .._engine.bridge import run_blocking
from .._engine.evaluators import EvaluatorLike
from ._calibration import calibrate as calibration_of
from ._cases import Case, labels_of, load_cases
from ._column_checks import has_column_checks
from ._corrected import JudgeCalibration, correct, load_calibration, uncalibrated
from ._money import check_max_cost, load_prices, money
from ._options import CalibrateOptions, EvalOptions
from ._ray import check_backend, run_on_ray
from ._results import CalibrationResult, EvalResult, RunEvent
from ._resume import RETRYABLE, RunPlan
from ._session import Session
from ._summary import compare_runs, measured, summarise
from ._target import Target, check_judge, load_judge, name_of
from .store import CaseRecord, RunInfo, RunStore, StoreURL, open_store, store_location

__all__ = ["CalibratePlan", "EvalPlan", "elsewhere", "for_worker", "work"]


# --- checking the arguments ---------------------------------------------------------------------


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


def _judge(judge: EvaluatorLike | str | None) -> tuple[Any | None, str | None]:
    """The judge object and the name the run stores for it."""
    if judge is None:
        return None, None
    if isinstance(judge, str):
        return load_judge(judge), judge
    name = name_of(judge, evaluator=True)
    return check_judge(judge, name), name


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


def _previous(store: RunStore, run: RunInfo) -> RunInfo | None:
    """The run `compare="previous"` means: the newest earlier one that measured something."""
    before = store.previous(run)
    while before is not None and before.summary.get("setup_failed"):
        before = store.previous(before)
    return before


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise UsageProblem(f"{name} must be True or False, not {value!r}")
    return value


def cache_counts(records: Iterable[CaseRecord]) -> dict[str, int]:
    """The run judge's judge cache hits and misses over a run's cases."""
    hits = sum(r.judge_cache.get("hits", 0) for r in records)
    misses = sum(r.judge_cache.get("misses", 0) for r in records)
    return {"hits": hits, "misses": misses}


def _run_id(value: object) -> int | None:
    """A `run_id=` argument: None, or a run's number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageProblem(f"run_id must be a stored run's number (1 or more), not {value!r}")
    return value


def elsewhere(
    plan: EvalPlan | CalibratePlan, session: Session
) -> Callable[[], Awaitable[object]] | None:
    """What runs the cases instead of this process: Ray workers joining the run.

    Each worker gets the run's options as a worker of this run takes them (`for_worker`) and
    `work` to run them with; None for the local backend.
    """
    backend = plan.backend
    if backend is None:
        return None
    options = for_worker(plan, session.run.id)
    return lambda: run_on_ray(backend, functools.partial(work, options), plan.dataset)


def for_worker(plan: EvalPlan | CalibratePlan, run_id: int) -> EvalOptions | CalibrateOptions:
    """The run's options as a Ray worker of run `run_id` takes them.

    It joins that run in the same store (the SQLite file's absolute path, or the URL with its
    credentials: it travels inside the cluster, as the tasks' other arguments do), answers
    cases only (the driver has the gates, the comparison and the Ray tasks), and sends a
    `module:name` target as its name, to be imported there.
    """
    db = plan.db._url if isinstance(plan.db, StoreURL) else str(plan.db.resolve())
    common: dict[str, Any] = {
        "db": db,
        "resume": True,
        "retry": (),
        "on_event": None,
        "run_id": run_id,
        "backend": "local",
        "ray_address": None,
        "workers": None,
    }
    options = plan.options
    if isinstance(options, EvalOptions):
        assert isinstance(plan, EvalPlan)
        # a `module:name` (or `path.py:name`) as the module it names, from any folder
        target = plan.target.spec if isinstance(options.target, str) else options.target
        return dataclasses.replace(
            options,
            target=target,
            min_pass_rate=None,
            compare=None,
            calibration=None,
            strict_calibration=False,
            **common,
        )
    return dataclasses.replace(options, min_kappa=None, **common)


def work(
    options: EvalOptions | CalibrateOptions,
    data: Path,
    on_event: Callable[[RunEvent], None],
) -> None:
    """A worker's part of a run, as a Ray task does it: cases claimed and stored until done.

    `data` is the task's copy of the run's file; `on_event` is told as it goes.
    """
    if isinstance(options, EvalOptions):
        eval_plan = EvalPlan(dataclasses.replace(options, golden=data, on_event=on_event))
        with open_store(eval_plan.db) as store:
            session, _ = eval_plan.session(store)
            run_blocking(session.execute)
        return
    plan = CalibratePlan(dataclasses.replace(options, labelled=data, on_event=on_event))
    with open_store(plan.db) as store:
        run_blocking(plan.session(store).execute)


# --- eval ---------------------------------------------------------------------------------------


class EvalPlan:
    """An eval run's arguments, loaded and checked: everything a usage problem can be."""

    def __init__(self, options: EvalOptions) -> None:
        o = options
        self.options = options
        self.dataset = Path(o.golden)
        self.cache = _flag("cache", o.cache)
        self.prices = load_prices(o.prices)
        self.max_cost = check_max_cost(o.max_cost, self.prices)
        self.run_id = _run_id(o.run_id)
        self.concurrency = _whole("concurrency", o.concurrency, 1, 256)
        self.repeat = _whole("repeat", o.repeat, 1, 50)
        self.trials = _whole("trials", o.trials, 1, 50)
        self.min_pass_rate = _fraction("min_pass_rate", o.min_pass_rate, 0.0, 1.0)
        min_judge_kappa = _fraction("min_judge_kappa", o.min_judge_kappa, -1.0, 1.0)
        assert min_judge_kappa is not None
        self.min_judge_kappa = min_judge_kappa
        self.strict_calibration = _flag("strict_calibration", o.strict_calibration)
        self.calibration_of = _calibration_option(o.calibration)
        if self.calibration_of is not None and (self.repeat > 1 or self.trials > 1):
            raise UsageProblem(
                "--calibration corrects one verdict per answer, as the judge was calibrated: "
                "it cannot be combined with --repeat or --trials above 1"
            )
        alpha = _fraction("alpha", o.alpha, 0.0, 1.0, open_low=True)
        assert alpha is not None
        self.alpha = alpha
        self.retry = _outcomes(o.retry)
        self.resume = _flag("resume", o.resume)
        self.compare = o.compare
        self.db = store_location(o.db)
        self.on_event = o.on_event
        self.cases = load_cases(self.dataset)
        columns = sorted({c for case in self.cases for c in case.row})
        if isinstance(o.target, str):
            self.target = Target.load(o.target, columns)
        else:
            self.target = Target.of(o.target, name_of(o.target), columns)
        self.target.check(self.cases)
        self.judge, self.judge_name = _judge(o.judge)
        self.backend = check_backend(o.backend, o.ray_address, o.workers, self.db)
        if self.judge is None and not has_column_checks(columns):
            raise UsageProblem(
                "nothing to judge the answers by: give --judge, or a golden file with a "
                f"must_mention or expected_source column (columns: {columns})"
            )
        if self.judge is None and self.repeat > 1:
            raise UsageProblem(
                "--repeat measures a judge's consistency; without --judge the column checks "
                "always agree with themselves"
            )
        if self.calibration_of is not None and self.judge is None:
            raise UsageProblem("--calibration corrects for a judge's errors: give --judge too")
        self.judge_warning: str | None = None
        self.judge_calibration: JudgeCalibration | None = None
        if (
            self.calibration_of is None
            and self.judge is not None
            and self.min_pass_rate is not None
        ):
            self._uncalibrated(
                "no calibration of it was given (--calibration RUN, a `refinekit calibrate` "
                "run of this judge), so the pass rate is the judge's, errors included"
            )

    def _uncalibrated(self, why: str) -> None:
        """Warn that the judge is uncalibrated, or with `strict_calibration` refuse to run."""
        text = f"the judge is uncalibrated: {why}"
        if self.strict_calibration:
            raise UsageProblem(f"{text} (--strict-calibration)")
        self.judge_warning = text

    def _calibrate(self, store: RunStore) -> None:
        """The stored calibration `--calibration` names, checked before the run starts."""
        if self.calibration_of is None:
            return
        found, note = load_calibration(store, self.calibration_of, self.judge_name)
        why = note or uncalibrated(found, self.min_judge_kappa)
        if why is not None:
            self._uncalibrated(why)
            return
        self.judge_calibration = found

    def session(self, store: RunStore) -> tuple[Session, RunInfo | None]:
        """The run started (or resumed) in `store`, and the run `compare=ID` names."""
        before = _before(store, self.compare) if self.compare not in (None, "previous") else None
        self._calibrate(store)
        plan = RunPlan(
            dataset=self.dataset,
            target=self.target.spec,
            judge=self.judge_name,
            concurrency=self.concurrency,
            repeat=self.repeat,
            trials=self.trials,
            retry=self.retry,
            cache=self.cache,
            prices=self.prices,
            max_cost=self.max_cost,
        )
        session = Session(
            store,
            plan,
            self.cases,
            db=self.db,
            fresh=not self.resume,
            target=self.target,
            judge=self.judge,
            on_event=self.on_event,
            run_id=self.run_id,
        )
        return session, before

    def result(self, session: Session, before: RunInfo | None) -> EvalResult:
        """Store the run complete; its figures and, when asked, the comparison."""
        store = session.store
        records = session.records()
        summary = summarise(records)
        setup_failed = not any(measured(r) for r in records)
        corrected = (
            None if self.judge_calibration is None else correct(summary, self.judge_calibration)
        )
        run = session.complete(
            summary.as_dict()
            | {
                "rate_limit_waits": session.limiter.waits,
                "cases_in_file": len(self.cases),
                "retried": session.retried,
                "setup_failed": setup_failed,
            }
            | ({"judge_cache": cache_counts(records)} if self.cache else {})
            | ({"corrected": corrected.as_dict()} if corrected is not None else {})
            | ({"judge_warning": self.judge_warning} if self.judge_warning else {})
        )
        comparison = None
        if self.compare is not None and not setup_failed:  # a failed setup measured nothing
            if before is None:
                before = _previous(store, run)
            if before is not None:
                comparison = compare_runs(before, store.cases(before.id), run, records)
        return EvalResult(
            run=run,
            cases=records,
            summary=summary,
            setup_failed=setup_failed,
            min_pass_rate=self.min_pass_rate,
            comparison=comparison,
            alpha=self.alpha,
            db=session.db,
            cases_in_file=len(self.cases),
            retried=session.retried,
            rate_limit_waits=session.limiter.waits,
            rate_limit_seconds=session.limiter.waited,
            corrected=corrected,
            judge_warning=self.judge_warning,
        )


def _calibration_option(value: object) -> int | str | None:
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


# --- calibrate ----------------------------------------------------------------------------------


class CalibratePlan:
    """A calibrate run's arguments, loaded and checked."""

    def __init__(self, options: CalibrateOptions) -> None:
        o = options
        self.options = options
        self.dataset = Path(o.labelled)
        self.cache = _flag("cache", o.cache)
        self.prices = load_prices(o.prices)
        self.run_id = _run_id(o.run_id)
        self.concurrency = _whole("concurrency", o.concurrency, 1, 256)
        self.bins = _whole("bins", o.bins, 1, 100)
        target_error = _fraction("target_error", o.target_error, 0.0, 0.99)
        assert target_error is not None
        self.target_error = target_error
        self.min_kappa = _fraction("min_kappa", o.min_kappa, -1.0, 1.0)
        self.retry = _outcomes(o.retry)
        self.resume = _flag("resume", o.resume)
        self.db = store_location(o.db)
        self.on_event = o.on_event
        self.cases: list[Case] = load_cases(self.dataset)
        self.labels = labels_of(self.cases)
        self.judge, self.judge_name = _judge(o.judge)
        self.backend = check_backend(o.backend, o.ray_address, o.workers, self.db)

    def session(self, store: RunStore) -> Session:
        plan = RunPlan(
            dataset=self.dataset,
            target=None,
            judge=self.judge_name,
            concurrency=self.concurrency,
            kind="calibrate",
            retry=self.retry,
            cache=self.cache,
            prices=self.prices,
        )
        return Session(
            store,
            plan,
            self.cases,
            db=self.db,
            fresh=not self.resume,
            target=None,
            judge=self.judge,
            labels=self.labels,
            on_event=self.on_event,
            run_id=self.run_id,
        )

    def result(self, session: Session) -> CalibrationResult:
        records = session.records()
        figures = calibration_of(
            records, target_error=self.target_error, bins=self.bins, judge=self.judge_name
        )
        setup_failed = not any(measured(r) for r in records)
        spent = money(records)
        run = session.complete(
            figures.as_dict()
            | {"retried": session.retried, "setup_failed": setup_failed}
            | ({"judge_cache": cache_counts(records)} if self.cache else {})
            | ({"cost": spent} if spent is not None else {})
        )
        return CalibrationResult(
            run=run,
            cases=records,
            calibration=figures,
            setup_failed=setup_failed,
            min_kappa=self.min_kappa,
            db=session.db,
            retried=session.retried,
        )
