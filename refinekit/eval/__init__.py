"""The evaluation workflow: golden sets run and judged, judges calibrated, runs stored.

`run` puts a golden file through an answer function and judges every answer; `calibrate`
measures a judge against answers people labelled; both store their run (in
`.refinekit/runs.db` by default), resume an interrupted one, and return its figures.
`compare` pairs two stored runs, `html_report` writes a run's HTML report, `runs` lists the
store. The `refinekit eval`, `refinekit calibrate` and `refinekit runs` commands are these
functions with their results printed (docs/workflow.md, "From Python").

    import refinekit.eval

    result = refinekit.eval.run(
        "tests/golden.csv",
        target=answer,
        judge=grounded,
        min_pass_rate=0.8,
        compare="previous",
    )
    print(result.summary.rate, result.summary.lower, result.passed)
    refinekit.eval.html_report(result, "eval.html")

In a notebook or other async code, `await refinekit.eval.arun(...)` (and `acalibrate`).
"""

import warnings
from typing import TYPE_CHECKING, Any

from .._core.errors import CostLimitReached, DataFileError, RunAborted, RunStoreError, UsageProblem
from .._core.package import rehome
from ._agreement import (
    LengthBand,
    MemberAgreement,
    PairAgreement,
    PanelAgreement,
    PositionConsistency,
)
from ._calibration import Calibration, Thresholds
from ._cascade_fit import CascadeFit, fit_cascade
from ._corrected import CorrectedRate, JudgeCalibration
from ._golden import case_slug, column_for, read_golden
from ._options import CalibrateOptions, EvalOptions, RunOptions
from ._results import (
    BatchProgress,
    CalibrationResult,
    CaseFinished,
    EvalResult,
    RunEvent,
    RunProgress,
    RunStarted,
    RunStopped,
)
from ._stats import ReliabilityBin, wilson_interval
from ._store import CaseOutcome, CaseRecord, RunInfo, StoreURL, store_location, store_path
from ._stored import compare, html_report, runs
from ._summary import Comparison, Summary
from ._workflow import acalibrate, arun, calibrate, run

__all__ = [
    "BatchProgress",
    "CalibrateOptions",
    "Calibration",
    "CalibrationResult",
    "CaseFinished",
    "CascadeFit",
    "CaseOutcome",
    "CaseRecord",
    "Comparison",
    "CorrectedRate",
    "CostLimitReached",
    "DataFileError",
    "EvalOptions",
    "EvalResult",
    "JudgeCalibration",
    "LengthBand",
    "MemberAgreement",
    "PairAgreement",
    "PanelAgreement",
    "PositionConsistency",
    "ReliabilityBin",
    "RunAborted",
    "RunEvent",
    "RunInfo",
    "RunOptions",
    "RunProgress",
    "RunStarted",
    "RunStopped",
    "RunStoreError",
    "StoreURL",
    "Summary",
    "Thresholds",
    "UsageProblem",
    "acalibrate",
    "arun",
    "calibrate",
    "case_slug",
    "column_for",
    "compare",
    "fit_cascade",
    "html_report",
    "read_golden",
    "run",
    "runs",
    "store_location",
    "store_path",
    "wilson_interval",
]

rehome(globals(), __all__, __name__)  # shown as `refinekit.eval.<name>`
del rehome

if TYPE_CHECKING:
    Outcome = CaseOutcome
    """Deprecated: `CaseOutcome` (`refinekit.Outcome` is what a decorated call did)."""


def __getattr__(name: str) -> Any:
    """`refinekit.eval.Outcome`: `CaseOutcome`'s old name, kept for one release."""
    if name == "Outcome":
        warnings.warn(
            "refinekit.eval.Outcome is deprecated: it is refinekit.eval.CaseOutcome (the "
            "outcome of a case), not refinekit.Outcome (what a decorated call did); the old "
            "name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return CaseOutcome
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
