"""`refinekit eval` under seeded faults, in process and as a child killed with SIGKILL and
resumed: every row stored once with a predicted outcome, within its call budget, no outage
counted as a pass, no secret and no unescaped answer markup in any output; and several
workers on one PostgreSQL run under `--max-cost`, within the cap and its documented bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from capmix import cap_figures, run_cap_mix
from evalmix import EvalResult, eval_figures, run_eval_mix
from pg import PostgresServer

from refinekit.testing import ScriptedOpenAI


def explain(results: list[EvalResult], seed: int) -> str:
    lines = [f"- {r.name}: {v}" for r in results for v in r.violations]
    return (
        f"{len(lines)} violation(s) in the eval fault mix of seed {seed}; replay with "
        f"RK_FAULT_SEED={seed} python -m pytest -m reliability tests/reliability -k eval\n"
        + "\n".join(lines[:40])
        + f"\n\n{eval_figures(results)}"
    )


@pytest.mark.reliability
def test_eval_under_a_seeded_fault_mix(tmp_path: Path, fault_seed: int) -> None:
    results = run_eval_mix(fault_seed, runs=5, cases=16, folder=tmp_path, interrupt=False)

    if any(r.violations for r in results):
        pytest.fail(explain(results, fault_seed))
    assert sum(r.cases for r in results) == 80


@pytest.mark.reliability
def test_eval_killed_with_sigkill_or_stopped_by_its_judge_and_resumed(
    tmp_path: Path, fault_seed: int
) -> None:
    results = run_eval_mix(fault_seed, runs=0, cases=16, folder=tmp_path, interrupt=True)

    if any(r.violations for r in results):
        pytest.fail(explain(results, fault_seed))
    killed, stopped = results
    assert killed.exits == [-9, 0]
    assert stopped.exits == [3, 0]


def test_eval_fast_slice(tmp_path: Path, fault_seed: int) -> None:
    """Two small runs, in the main suite."""
    results = run_eval_mix(fault_seed + 1, runs=2, cases=6, folder=tmp_path, interrupt=False)

    if any(r.violations for r in results):
        pytest.fail(explain(results, fault_seed + 1))


@pytest.mark.reliability
def test_eval_workers_under_max_cost_keep_to_the_cap_and_its_bound(
    tmp_path: Path, fault_seed: int, postgres_server: PostgresServer
) -> None:
    with ScriptedOpenAI() as server:
        results = run_cap_mix(fault_seed, 4, tmp_path, server, postgres_server.new_database)

    lines = [f"- {r.name}: {v}" for r in results for v in r.violations]
    if lines:
        pytest.fail(
            f"{len(lines)} violation(s) in the --max-cost mix of seed {fault_seed}; replay with "
            f"RK_FAULT_SEED={fault_seed} python -m pytest -m reliability tests/reliability -k "
            "max_cost\n" + "\n".join(lines[:40]) + f"\n\n{cap_figures(results)}"
        )
    # every case the same cost, or the first the dearest: never a cent over the cap
    for r in results:
        if r.scheme in ("equal", "first_largest"):
            assert r.spent <= r.cap + 1e-9, cap_figures(results)
