"""benchmarks/bench_faults.py keeps printing the figures docs/reliability.md records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_faults.py"


@pytest.mark.reliability
def test_bench_faults_quick_run_prints_the_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-interrupt", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for heading in (
        "refinekit under seeded faults: seed 3",
        "command    python benchmarks/bench_faults.py --quick --no-interrupt --seed 3",
        "jobs              sync   async",
        "replies served, by kind (faults marked *)",
        "outcomes, by decorator",
        "refinekit eval: 1 runs, 6 cases",
        "case outcomes",
        "in all: 36 jobs",
        "0 promise(s) broken",
    ):
        assert heading in done.stdout, f"{heading!r} missing:\n{done.stdout}"
