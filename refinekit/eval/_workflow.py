"""The evaluation workflow from Python: `run`, `calibrate`, `compare`, `html_report`, `runs`.

Each of `run` and `calibrate` owns its run from start to finish, as `refinekit eval` and
`refinekit calibrate` do (they are these functions, with their output printed): it loads the
data file, the target and the judge (a usage problem raises before anything runs), opens the
run store, starts a run or resumes the newest unfinished one of the same call, runs the cases
concurrently (each stored as it finishes), and stores the run complete with its figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from .._core.errors import RunStoreError, UsageProblem
from .._engine.bridge import run_blocking
from .._engine.evaluators import EvaluatorLike
from .._engine.prices import Prices
from ._plans import CalibratePlan, EvalPlan, PathLike, elsewhere
from ._results import CalibrationResult, EvalResult, RunEvent
from ._session import store_location
from ._summary import Comparison, compare_runs
from .store._records import RunInfo, StoreURL, open_store

__all__ = [
    "acalibrate",
    "arun",
    "calibrate",
    "compare",
    "html_report",
    "run",
    "runs",
]


def run(
    golden: PathLike,
    *,
    target: Callable[..., Any] | str,
    judge: EvaluatorLike | str | None = None,
    concurrency: int = 4,
    repeat: int = 1,
    db: PathLike | None = None,
    resume: bool = True,
    retry: Iterable[Literal["raised", "unavailable"]] | str = (),
    min_pass_rate: float | None = None,
    compare: int | Literal["previous"] | str | None = None,
    alpha: float = 0.05,
    on_event: Callable[[RunEvent], None] | None = None,
    run_id: int | None = None,
    backend: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    cache: bool = False,
    prices: Prices | Mapping[str, Any] | PathLike | None = None,
    max_cost: float | None = None,
) -> EvalResult:
    """Run a golden set through an answer function, judge every answer, store the run.

    What `refinekit eval` does, without printing: the same run, stored in the same store,
    resumed the same way. Each row becomes a call of `target` (its columns are the arguments
    of the same name, or the question is the only argument), each inside a refinekit job of
    its own; up to `concurrency` run at once (a `def` in a worker thread). Each answer is
    judged by the row's `must_mention` and `expected_source` columns and by `judge`, and
    stored as it finishes. From a running event loop (a notebook cell, async code), `await
    arun(...)` instead, or this blocks the loop's thread until the run ends.

    Args:
        golden: The golden file, `.csv` or `.jsonl`.
        target: The answer function (decorated or plain, `def` or `async def`), or its
            `module:function` name (imported from the current folder; a file path,
            `app/answers.py:answer`, is taken as the module it is).
        judge: An evaluator (a refinekit judge, a check, a function) or its `module:name`;
            None to judge by the file's columns only.
        concurrency: Cases in flight at once, from 1 to 256.
        repeat: Judge each answer this many times (1 to 50) and count how often the
            verdicts flip; the outcome is the majority, an even split inconclusive.
        db: The run store; None for `$REFINEKIT_DB`, else `.refinekit/runs.db`.
        resume: Join the run of the same file, target, judge and `repeat` that other workers
            (processes, machines on a shared PostgreSQL store) are running, sharing its cases
            out, or resume the newest unfinished one (its stored cases are not run again);
            False always starts a new run.
        retry: Outcomes (`"raised"`, `"unavailable"`) whose stored cases a resumed run runs
            again; the new outcome replaces the stored one.
        min_pass_rate: A gate: `EvalResult.passed` is False when the pass rate's 95% Wilson
            lower bound is under it.
        compare: Compare with `"previous"` (the newest earlier complete run of this file with
            the same judge that measured something) or a run id, on the questions both share.
        alpha: The comparison's gate: a regression with exact McNemar p under `alpha`, with
            more regressions than improvements, fails `EvalResult.passed`.
        on_event: Told `RunStarted`, then `CaseFinished` for each case (on the thread that
            runs the cases), and `RunStopped` if the run stops early.
        run_id: Join or resume this stored run (one of the same target, judge and `repeat`
            over the same file), as from another machine where the file's path differs.
            Without it, a run of this call that other workers are running is joined, else the
            newest unfinished one resumed (see `resume`).
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
            what the model answers (`refinekit eval --cache`): re-running an unchanged eval
            then makes no judge call. Only the run's judge, at temperature 0 (or a
            `JudgeModel(cache_sampled=True)`); each `repeat` is keyed apart. See
            docs/judge_cache.md.
        prices: Price each case's model calls: a `refinekit.Prices`, a mapping
            `{model: (input, output)}` per million tokens (with an optional `"default"`), a
            JSON file of that mapping, or `module:name` of a `Prices`. Each case's `cost` and
            the summary's `cost` are filled in; a model without a price stops the run
            (`RunAborted`). Not part of what a resume must match.
        max_cost: Start a case only if the run's spend (its stored cases, every session
            and worker), what every worker's cases in flight reserved and its own estimate
            (the largest cost of a stored case) fit under it; once none fits and none is in
            flight, the run stops incomplete (`CostLimitReached`), resumable with a higher
            `max_cost`. Needs `prices`. The bound: docs/budgets.md, "In refinekit eval".

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
    return run_blocking(
        lambda: arun(
            golden,
            target=target,
            judge=judge,
            concurrency=concurrency,
            repeat=repeat,
            db=db,
            resume=resume,
            retry=retry,
            min_pass_rate=min_pass_rate,
            compare=compare,
            alpha=alpha,
            on_event=on_event,
            run_id=run_id,
            backend=backend,
            ray_address=ray_address,
            workers=workers,
            cache=cache,
            prices=prices,
            max_cost=max_cost,
        )
    )


async def arun(
    golden: PathLike,
    *,
    target: Callable[..., Any] | str,
    judge: EvaluatorLike | str | None = None,
    concurrency: int = 4,
    repeat: int = 1,
    db: PathLike | None = None,
    resume: bool = True,
    retry: Iterable[Literal["raised", "unavailable"]] | str = (),
    min_pass_rate: float | None = None,
    compare: int | Literal["previous"] | str | None = None,
    alpha: float = 0.05,
    on_event: Callable[[RunEvent], None] | None = None,
    run_id: int | None = None,
    backend: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    cache: bool = False,
    prices: Prices | Mapping[str, Any] | PathLike | None = None,
    max_cost: float | None = None,
) -> EvalResult:
    """`run`, on the running event loop: `await refinekit.eval.arun(...)` in a notebook.

    The arguments, result and errors are `run`'s. A cancelled run is stored incomplete, as an
    interrupted one is, and the same call resumes it.
    """
    plan = EvalPlan(
        golden,
        target=target,
        judge=judge,
        concurrency=concurrency,
        repeat=repeat,
        db=db,
        resume=resume,
        retry=retry,
        min_pass_rate=min_pass_rate,
        compare=compare,
        alpha=alpha,
        on_event=on_event,
        run_id=run_id,
        backend=backend,
        ray_address=ray_address,
        workers=workers,
        cache=cache,
        prices=prices,
        max_cost=max_cost,
    )
    with open_store(plan.db) as store:
        session, before = plan.session(store)
        await session.execute(elsewhere(plan, session))
        return plan.result(session, before)


def calibrate(
    labelled: PathLike,
    *,
    judge: EvaluatorLike | str,
    concurrency: int = 4,
    db: PathLike | None = None,
    resume: bool = True,
    retry: Iterable[Literal["raised", "unavailable"]] | str = (),
    target_error: float = 0.1,
    bins: int = 10,
    min_kappa: float | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    run_id: int | None = None,
    backend: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    cache: bool = False,
    prices: Prices | Mapping[str, Any] | PathLike | None = None,
) -> CalibrationResult:
    """Run a judge over answers people labelled, and measure how far it agrees with them.

    What `refinekit calibrate` does, without printing; the run is stored and resumed as
    `run`'s are. From a running event loop, `await acalibrate(...)`.

    Args:
        labelled: The labelled file, `.csv` or `.jsonl`, with `question`, `answer`, `label`
            (pass or fail) and optionally `context` columns.
        judge: The judge: an evaluator, or its `module:name`.
        concurrency: Items judged at once, from 1 to 256.
        db: The run store; None for `$REFINEKIT_DB`, else `.refinekit/runs.db`.
        resume: Resume the newest unfinished run of the same file and judge.
        retry: Outcomes whose stored items a resumed run judges again.
        target_error: The most wrong decisions allowed on each side of the recommended
            thresholds, from 0 to 0.99.
        bins: Bins of the reliability table, from 1 to 100.
        min_kappa: A gate: `CalibrationResult.passed` is False when Cohen's kappa is under it
            (or there is none).
        on_event: Told `RunStarted`, `CaseFinished` for each item, and `RunStopped`.
        run_id: Join or resume this stored run, as `run`'s `run_id`.
        backend: `"local"`, or `"ray"`: as `run`'s.
        ray_address: As `run`'s.
        workers: As `run`'s.
        cache: As `run`'s.
        prices: As `run`'s: each item's `cost` is the judge's calls.

    Returns:
        The complete run and its figures.

    Raises:
        UsageProblem: The file, its labels, the judge or an argument cannot be used.
        RunStoreError: The run store cannot be used.
        RunAborted: The judge is misconfigured or raised a bug; the finished items are stored.
    """
    return run_blocking(
        lambda: acalibrate(
            labelled,
            judge=judge,
            concurrency=concurrency,
            db=db,
            resume=resume,
            retry=retry,
            target_error=target_error,
            bins=bins,
            min_kappa=min_kappa,
            on_event=on_event,
            run_id=run_id,
            backend=backend,
            ray_address=ray_address,
            workers=workers,
            cache=cache,
            prices=prices,
        )
    )


async def acalibrate(
    labelled: PathLike,
    *,
    judge: EvaluatorLike | str,
    concurrency: int = 4,
    db: PathLike | None = None,
    resume: bool = True,
    retry: Iterable[Literal["raised", "unavailable"]] | str = (),
    target_error: float = 0.1,
    bins: int = 10,
    min_kappa: float | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    run_id: int | None = None,
    backend: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    cache: bool = False,
    prices: Prices | Mapping[str, Any] | PathLike | None = None,
) -> CalibrationResult:
    """`calibrate`, on the running event loop; its arguments, result and errors."""
    plan = CalibratePlan(
        labelled,
        judge=judge,
        concurrency=concurrency,
        db=db,
        resume=resume,
        retry=retry,
        target_error=target_error,
        bins=bins,
        min_kappa=min_kappa,
        on_event=on_event,
        run_id=run_id,
        backend=backend,
        ray_address=ray_address,
        workers=workers,
        cache=cache,
        prices=prices,
    )
    with open_store(plan.db) as store:
        session = plan.session(store)
        await session.execute(elsewhere(plan, session))
        return plan.result(session)


# --- the store: compare, report, runs -----------------------------------------------------------


def _run_id(run: int | EvalResult | CalibrationResult) -> int:
    return run if isinstance(run, int) else run.run.id


def compare(
    before: int | EvalResult,
    after: int | EvalResult,
    *,
    db: PathLike | None = None,
) -> Comparison:
    """Two stored eval runs on the questions they share: what regressed, what improved.

    Cases are paired by question (the n-th asking of a question with the n-th); a raised case
    counts as failed, and a question unavailable or inconclusive in either run is left out.

    Args:
        before: The earlier run, or its id.
        after: The later run, or its id.
        db: The run store; None for the store of `after` when it is a result, else
            `$REFINEKIT_DB`, else `.refinekit/runs.db`.

    Returns:
        The comparison, with its exact McNemar p-value
        (`comparison.significant_regression(alpha)` is the gate `run` applies).

    Raises:
        RunStoreError: The store cannot be used, or has no such run.
        UsageProblem: A run is not an eval run.
    """
    if db is None:
        db = next((r.db for r in (after, before) if isinstance(r, EvalResult)), None)
    with open_store(_existing(store_location(db))) as store:
        runs = []
        for run_id in (_run_id(before), _run_id(after)):
            info = store.run(run_id)
            if info.kind != "eval":
                raise UsageProblem(f"run {run_id} is a {info.kind} run, not an eval run")
            runs.append((info, store.cases(run_id)))
    (old, old_cases), (new, new_cases) = runs
    return compare_runs(old, old_cases, new, new_cases)


def html_report(result: EvalResult | CalibrationResult, path: PathLike | None = None) -> str:
    """The self-contained HTML report of a run, written to `path` when given.

    One HTML5 file that loads nothing (inline styles and SVG charts, no script). An eval
    report has the gates (`min_pass_rate`, the comparison's `alpha`) and whether each held,
    the pass rate and its interval, the pass rate over the stored runs of the same file,
    judge consistency, per-criterion rates, attempts, cost, the comparison when the run made
    one, and every case; a calibration report has its `min_kappa` gate, the agreement table,
    the reliability diagram, the thresholds, kappa over the stored runs and the
    disagreements.

    Args:
        result: What `run` or `calibrate` returned (its store holds the run's history).
        path: Where to write the report (UTF-8), or None to only return it.

    Returns:
        The HTML document.

    Raises:
        OSError: `path` cannot be written.
        RunStoreError: The run's store cannot be used.
    """
    from .report import calibration_report, eval_report

    with open_store(_existing(result.db)) as store:
        if isinstance(result, EvalResult):
            document = eval_report(
                store,
                result.run.id,
                result.comparison,
                min_pass_rate=result.min_pass_rate,
                alpha=result.alpha,
            )
        else:
            document = calibration_report(
                store, result.run.id, result.calibration, min_kappa=result.min_kappa
            )
    if path is not None:
        Path(path).write_text(document, encoding="utf-8")
    return document


def runs(
    *, db: PathLike | None = None, kind: Literal["eval", "calibrate"] | None = None
) -> list[RunInfo]:
    """The stored runs, oldest first.

    Args:
        db: The run store; None for `$REFINEKIT_DB`, else `.refinekit/runs.db`.
        kind: Only `"eval"` or only `"calibrate"` runs; None for both.

    Returns:
        The runs (none when there is no store yet: none is made).

    Raises:
        RunStoreError: The file is not a refinekit run store.
    """
    where = store_location(db)
    if isinstance(where, Path) and not where.exists():
        return []
    with open_store(where) as store:
        return store.runs(kind=kind)


def _existing(path: Path | StoreURL) -> Path | StoreURL:
    """A store that must already exist (reading one must not make an empty file)."""
    if isinstance(path, Path) and not path.exists():
        raise RunStoreError(f"no run store at {path}")
    return path
