"""The evaluation workflow from Python: `run` and `calibrate`, and their async twins.

Their arguments are the fields of one options object (`EvalOptions`, `CalibrateOptions`:
`refinekit.eval._options`), made once here or by the command line. Each owns its run from
start to finish, as `refinekit eval` and `refinekit calibrate` do
(they are these, with their output printed): it loads the data file, the target and the judge
(a usage problem raises before anything runs), opens the run store, starts a run or resumes
the newest unfinished one of the same call, runs the cases concurrently (each stored as it
finishes), and stores the run complete with its figures.
"""

from __future__ import annotations

from typing import Any

from .._engine.bridge import run_blocking
from ._options import CalibrateOptions, EvalOptions, signature_of
from ._plans import CalibratePlan, EvalPlan, elsewhere
from ._results import CalibrationResult, EvalResult
from .store import open_store

__all__ = [
    "acalibrate",
    "arun",
    "calibrate",
    "execute_calibrate",
    "execute_eval",
]

# --- running them -------------------------------------------------------------------------------


async def execute_eval(options: EvalOptions) -> EvalResult:
    """An eval run of `options`, from start to finish (what `arun` and `refinekit eval` do)."""
    plan = EvalPlan(options)
    with open_store(plan.db) as store:
        session, before = plan.session(store)
        await session.execute(elsewhere(plan, session))
        return plan.result(session, before)


async def execute_calibrate(options: CalibrateOptions) -> CalibrationResult:
    """A calibration of `options`, from start to finish (`acalibrate`, `refinekit calibrate`)."""
    plan = CalibratePlan(options)
    with open_store(plan.db) as store:
        session = plan.session(store)
        await session.execute(elsewhere(plan, session))
        return plan.result(session)


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
            `prices`, `max_cost` (see `EvalOptions` and `RunOptions` for each).

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
    return run_blocking(lambda: execute_eval(EvalOptions(*args, **kwargs)))


@signature_of(EvalOptions)
async def arun(*args: Any, **kwargs: Any) -> EvalResult:
    """`run`, on the running event loop: `await refinekit.eval.arun(...)` in a notebook.

    The arguments, result and errors are `run`'s. A cancelled run is stored incomplete, as an
    interrupted one is, and the same call resumes it.
    """
    return await execute_eval(EvalOptions(*args, **kwargs))


@signature_of(CalibrateOptions)
def calibrate(*args: Any, **kwargs: Any) -> CalibrationResult:
    """Run a judge over answers people labelled, and measure how far it agrees with them.

    What `refinekit calibrate` does, without printing; the run is stored and resumed as
    `run`'s are. From a running event loop, `await acalibrate(...)`.

    Args:
        *args: The labelled file, `.csv` or `.jsonl` (`CalibrateOptions.labelled`).
        **kwargs: The run's options, `CalibrateOptions`' fields: `judge` (required),
            `concurrency`, `db`, `resume`, `retry`, `target_error`, `bins`, `min_kappa`,
            `on_event`, `run_id`, `backend`, `ray_address`, `workers`, `cache`, `prices`.

    Returns:
        The complete run and its figures.

    Raises:
        UsageProblem: The file, its labels, the judge or an argument cannot be used.
        RunStoreError: The run store cannot be used.
        RunAborted: The judge is misconfigured or raised a bug; the finished items are stored.
    """
    return run_blocking(lambda: execute_calibrate(CalibrateOptions(*args, **kwargs)))


@signature_of(CalibrateOptions)
async def acalibrate(*args: Any, **kwargs: Any) -> CalibrationResult:
    """`calibrate`, on the running event loop; its arguments, result and errors."""
    return await execute_calibrate(CalibrateOptions(*args, **kwargs))
