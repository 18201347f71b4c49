"""Self-contained HTML reports of stored runs (placeholder until the report lands)."""

from __future__ import annotations

from ._calibration import Calibration
from ._evaluation import Comparison
from ._runstore import RunStore


def eval_report(store: RunStore, run_id: int, comparison: Comparison | None = None) -> str:
    raise NotImplementedError


def calibration_report(store: RunStore, run_id: int, calibration: Calibration) -> str:
    raise NotImplementedError
