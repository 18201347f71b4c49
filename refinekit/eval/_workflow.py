"""The evaluation workflow from Python: `run` and `calibrate`, and their async twins.

Their arguments are the fields of one options object (`EvalOptions`, `CalibrateOptions`:
`refinekit.eval._options`), made once here. Each owns its run from start to finish, as
`refinekit eval` and `refinekit calibrate` do (they are these, with their output printed): its
plan loads the data file, the target and the judge (a usage problem raises before anything
runs), the run store opens, a session starts a run or resumes the newest unfinished one of the
same call and runs the cases concurrently (each stored as it finishes, here or on Ray workers),
and the run is stored complete with its figures.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._engine.bridge import run_blocking
from ._calibration import calibrate as calibration_of
from ._cascade_runs import cascade_calibration
from ._corrected import correct
from ._money import money
from ._options import CalibrateOptions, EvalOptions, signature_of
from ._plans import CalibratePlan, EvalPlan, RunPlan
from ._ray import run_on_ray
from ._results import CalibrationResult, EvalResult, RunEvent
from ._session import Session
from ._store import CaseRecord, RunInfo, StoreURL, open_store
from ._summary import compare_runs, measured, summarise

__all__ = ["acalibrate", "arun", "calibrate", "work"]


async def _eval(options: EvalOptions) -> EvalResult:
    """An eval run of `options`, from start to finish (what `run` and `arun` do)."""
    plan = EvalPlan(options)
    with open_store(plan.db) as store:
        before = plan.prepare(store)
        session = Session(store, plan)
        await session.execute(_elsewhere(plan, session))
        return _eval_result(plan, session, before)


async def _calibrate(options: CalibrateOptions) -> CalibrationResult:
    """A calibration of `options`, from start to finish (`calibrate`, `acalibrate`)."""
    plan = CalibratePlan(options)
    with open_store(plan.db) as store:
        session = Session(store, plan)
        await session.execute(_elsewhere(plan, session))
        return _calibration_result(plan, session)


def _complete(
    session: Session, records: Sequence[CaseRecord], figures: Mapping[str, Any]
) -> tuple[RunInfo, bool]:
    """Store the run complete with its `figures` and what every run keeps besides.

    Returns:
        The run as stored, and whether its setup failed (no case was measured).
    """
    setup_failed = not any(measured(r) for r in records)
    kept: dict[str, Any] = {"retried": session.retried, "setup_failed": setup_failed}
    if session.plan.options.batch:
        kept["batch"] = session.batch_summary(records)
    if session.plan.options.cache:
        hits = sum(r.judge_cache.get("hits", 0) for r in records)
        misses = sum(r.judge_cache.get("misses", 0) for r in records)
        kept["judge_cache"] = {"hits": hits, "misses": misses}
    return session.complete({**figures, **kept}), setup_failed


def _previous(session: Session, run: RunInfo) -> RunInfo | None:
    """The run `compare="previous"` means: the newest earlier one that measured something."""
    before = session.store.previous(run)
    while before is not None and before.summary.get("setup_failed"):
        before = session.store.previous(before)
    return before


def _eval_result(plan: EvalPlan, session: Session, before: RunInfo | None) -> EvalResult:
    """Store the run complete; its figures and, when asked, the comparison."""
    o = plan.options
    records = session.records()
    summary = summarise(records)
    calibration = plan.judge_calibration
    corrected = None if calibration is None else correct(summary, calibration)
    fit = _fit_used(plan)
    run, setup_failed = _complete(
        session,
        records,
        summary.as_dict()
        | {"rate_limit_waits": session.limiter.waits, "cases_in_file": len(plan.cases)}
        | ({"corrected": corrected.as_dict()} if corrected is not None else {})
        | ({"cascade_fit": fit} if fit is not None else {})
        | ({"judge_warning": plan.judge_warning} if plan.judge_warning else {}),
    )
    comparison = None
    if o.compare is not None and not setup_failed:  # a failed setup measured nothing
        if before is None:
            before = _previous(session, run)
        if before is not None:
            comparison = compare_runs(before, session.store.cases(before.id), run, records)
    return EvalResult(
        run=run,
        cases=records,
        summary=summary,
        setup_failed=setup_failed,
        min_pass_rate=o.min_pass_rate,
        comparison=comparison,
        alpha=o.alpha,
        db=session.db,
        cases_in_file=len(plan.cases),
        retried=session.retried,
        rate_limit_waits=session.limiter.waits,
        rate_limit_seconds=session.limiter.waited,
        corrected=corrected,
        judge_warning=plan.judge_warning,
        cascade_fit=fit,
    )


def _fit_used(plan: EvalPlan) -> dict[str, Any] | None:
    """The cascade fit the run judged with (`calibration=`): its run and thresholds."""
    if plan.cascade_fit is None:
        return None
    return {"calibration_run": plan.cascade_fit_run} | plan.cascade_fit.to_dict()


def _calibration_result(plan: CalibratePlan, session: Session) -> CalibrationResult:
    """Store the calibration complete, with its figures."""
    o = plan.options
    records = session.records()
    cascade = cascade_calibration(records, plan.judge, target=o.target, risk=o.risk)
    figures = calibration_of(
        records, target_error=o.target_error, bins=o.bins, judge=plan.judge_name, cascade=cascade
    )
    spent = money(records)
    run, setup_failed = _complete(
        session, records, figures.as_dict() | ({"cost": spent} if spent is not None else {})
    )
    return CalibrationResult(
        run=run,
        cases=records,
        calibration=figures,
        setup_failed=setup_failed,
        min_kappa=o.min_kappa,
        db=session.db,
        retried=session.retried,
    )


# --- on Ray -------------------------------------------------------------------------------------


def _elsewhere(plan: RunPlan, session: Session) -> Callable[[], Awaitable[object]] | None:
    """What runs the cases instead of this process: Ray workers joining the run.

    Each worker gets the run's options as a worker of this run takes them (`_for_worker`) and
    `work` to run them with; None for the local backend.
    """
    backend = plan.backend
    if backend is None:
        return None
    options = _for_worker(plan, session.run.id)
    return lambda: run_on_ray(backend, functools.partial(work, options), plan.dataset)


def _for_worker(plan: RunPlan, run_id: int) -> EvalOptions | CalibrateOptions:
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
        target = plan.target_name if isinstance(options.target, str) else options.target
        assert target is not None
        return dataclasses.replace(
            options,
            target=target,
            min_pass_rate=None,
            compare=None,
            calibration=plan.cascade_fit_run,  # a worker's cascade judges with the same fit
            strict_calibration=False,
            **common,
        )
    assert isinstance(options, CalibrateOptions)
    return dataclasses.replace(options, min_kappa=None, **common)


def work(
    options: EvalOptions | CalibrateOptions,
    data: Path,
    on_event: Callable[[RunEvent], None],
) -> None:
    """A worker's part of a run, as a Ray task does it: cases claimed and stored until done.

    `data` is the task's copy of the run's file; `on_event` is told as it goes.
    """
    plan: RunPlan
    fitted: int | None = None
    if isinstance(options, EvalOptions):
        plan = EvalPlan(dataclasses.replace(options, golden=data, on_event=on_event))
        fitted = None if options.calibration is None else int(options.calibration)
    else:
        plan = CalibratePlan(dataclasses.replace(options, labelled=data, on_event=on_event))
    with open_store(plan.db) as store:
        if isinstance(plan, EvalPlan) and fitted is not None:
            plan.apply_fit(store, fitted)  # the fit of the driver's --calibration
        run_blocking(Session(store, plan).execute)


# --- from Python --------------------------------------------------------------------------------


@signature_of(EvalOptions)
def run(*args: Any, **kwargs: Any) -> EvalResult:
    """Run a golden set through an answer function, judge every answer, store the run.

    What `refinekit eval` does, without printing: the same run, stored in the same store,
    resumed the same way. Each row becomes a call of `target` (its columns are the arguments
    of the same name, or the question is the only argument), each inside a refinekit job of
    its own; up to `concurrency` run at once (a `def` in a worker thread). Each answer is
    judged by the row's `must_mention` and `expected_source` columns and by `judge`, and
    stored as it finishes. From a running event loop (a notebook cell, async code), `await
    arun(...)` instead, or this blocks the loop's thread until the run ends.

    Args:
        *args: The golden file, `.csv` or `.jsonl` (`EvalOptions.golden`).
        **kwargs: The run's options, `EvalOptions`' fields: `target` (required), `judge`,
            `concurrency`, `repeat`, `db`, `resume`, `retry`, `min_pass_rate`, `compare`,
            `alpha`, `on_event`, `run_id`, `backend`, `ray_address`, `workers`, `cache`,
            `prices`, `max_cost`, `batch` (see `EvalOptions` and `RunOptions` for each).

    Returns:
        The complete run: its id, its cases, its figures, its comparison and gates.

    Raises:
        UsageProblem: The file, the target, the judge or an argument cannot be used, or
            `compare` names a run that cannot be compared; nothing was run.
        RunStoreError: The run store cannot be used, or `compare` names no stored run.
        RunAborted: The judge is misconfigured or raised a bug, the answer function raised
            a misconfiguration, a model has no price, or `max_cost` stopped the run; the
            finished cases are stored, and the same call resumes (`CostLimitReached`, a
            `RunAborted`, for `max_cost`: with a higher one).
    """
    return run_blocking(lambda: _eval(EvalOptions(*args, **kwargs)))


@signature_of(EvalOptions)
async def arun(*args: Any, **kwargs: Any) -> EvalResult:
    """`run`, on the running event loop: `await refinekit.eval.arun(...)` in a notebook.

    The arguments, result and errors are `run`'s. A cancelled run is stored incomplete, as an
    interrupted one is, and the same call resumes it.
    """
    return await _eval(EvalOptions(*args, **kwargs))


@signature_of(CalibrateOptions)
def calibrate(*args: Any, **kwargs: Any) -> CalibrationResult:
    """Run a judge over answers people labelled, and measure how far it agrees with them.

    What `refinekit calibrate` does, without printing; the run is stored and resumed as
    `run`'s are. From a running event loop, `await acalibrate(...)`.

    Args:
        *args: The labelled file, `.csv` or `.jsonl` (`CalibrateOptions.labelled`).
        **kwargs: The run's options, `CalibrateOptions`' fields: `judge` (required),
            `concurrency`, `db`, `resume`, `retry`, `target_error`, `bins`, `min_kappa`,
            `target`, `risk` (a cascade judge's fit: see `CalibrateOptions`), `on_event`,
            `run_id`, `backend`, `ray_address`, `workers`, `cache`, `prices`, `batch`.

    Returns:
        The complete run and its figures.

    Raises:
        UsageProblem: The file, its labels, the judge or an argument cannot be used.
        RunStoreError: The run store cannot be used.
        RunAborted: The judge is misconfigured or raised a bug; the finished items are stored.
    """
    return run_blocking(lambda: _calibrate(CalibrateOptions(*args, **kwargs)))


@signature_of(CalibrateOptions)
async def acalibrate(*args: Any, **kwargs: Any) -> CalibrationResult:
    """`calibrate`, on the running event loop; its arguments, result and errors."""
    return await _calibrate(CalibrateOptions(*args, **kwargs))
