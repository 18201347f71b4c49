"""The overhead benchmark keeps working. Not a timed test: nothing here asserts a speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_overhead.py"


def test_bench_overhead_quick_run_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for heading in (
        "refinekit decorator overhead",
        "pydantic",
        "tenacity",
        "decorated",
        "baseline",
        "added/attempt",
        "ratio",
        "result",
        "retry: pass, 1st attempt",
        "retry: pass, 1st attempt (async)",
        "retry: 1 rejection + pass",
        "self_correct: pass (2 lines)",
        "self_correct: 1 correction",
        "parse only (2 lines)",
        "parse only (50 lines)",
        "targets:",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"
