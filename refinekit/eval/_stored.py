"""Stored runs from Python: `compare` two of them, a run's `html_report`, the store's `runs`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from .._core.errors import RunStoreError, UsageProblem
from ._options import PathLike
from ._report import calibration_report, eval_report
from ._results import CalibrationResult, EvalResult
from ._store import RunInfo, StoreURL, open_store, store_location
from ._summary import Comparison, compare_runs

__all__ = ["compare", "html_report", "runs"]


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
        (`comparison.significant_regression(alpha)` is the gate `run` applies) and what
        each run spent on the questions both judged (`cost_ratio`, `token_ratio`): an
        escalating target against its strongest tier alone, for one.

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
