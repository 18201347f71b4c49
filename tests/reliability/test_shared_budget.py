"""Concurrent calls sharing one budget (threads and asyncio tasks), counted at the scripted
server: `max_calls` is never exceeded, tokens and cost pass their limit by at most the
estimate error of the calls in flight (docs/budgets.md, "Concurrent calls")."""

from __future__ import annotations

import pytest
from oracle import explain_violations
from shared_budget import KINDS, LIMITS, MODES, SharedReport, run_shared

JOBS = 80
"""Jobs in the seeded run: 2 to 12 workers each, threads or tasks."""


def explain(report: SharedReport) -> str:
    selection = "tests/reliability/test_shared_budget.py"
    return explain_violations(
        report.violations, "shared-budget runs", report.seed, selection, report.figures()
    )


@pytest.mark.reliability
def test_seeded_concurrent_jobs_sharing_one_budget(fault_seed: int) -> None:
    report = run_shared(fault_seed, JOBS)
    print(report.figures())
    if report.violations:
        pytest.fail(explain(report))
    # the mix covers what it claims: both modes, every kind and limit, and real stops
    assert {j.mode for j in report.jobs} == set(MODES)
    assert {w.kind for j in report.jobs for w in j.workers} == set(KINDS)
    assert {j.limit for j in report.jobs} == set(LIMITS)
    outcomes = {o for j in report.jobs for w in j.workers for o in w.outcomes}
    assert {"value", "BudgetExceeded"} <= outcomes, outcomes
    # and the budgets bite: most jobs are stopped by theirs
    stopped = [j for j in report.jobs if any("BudgetExceeded" in w.outcomes for w in j.workers)]
    assert len(stopped) >= JOBS // 2, report.figures()


def test_shared_budget_fast_slice(fault_seed: int) -> None:
    """A few jobs of the run, in the main suite."""
    report = run_shared(fault_seed + 1, 6)
    if report.violations:
        pytest.fail(explain(report))
    assert len(report.jobs) == 6
