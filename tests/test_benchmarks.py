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


def test_bench_judges_quick_run_prints_the_table() -> None:
    script = SCRIPT.with_name("bench_judges.py")
    done = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for heading in (
        "refinekit judges over HTTP",
        "openai",
        "load avg",
        "figure (ms)",
        "floor (ms)",
        "floor is",
        "ratio",
        "target",
        "result",
        "criteria, 4 model criteria (sync)",
        "criteria, 4 model criteria (async)",
        "one bare call (sync)",
        "one bare call (async)",
        "4 bare calls in turn (sync)",
        "4 bare calls in turn (async)",
        "judged jobs (answer + judge)",
        "bare asyncio, same calls",
        "client CPU time of those rounds",
        "requests   identical on both sides",
        "targets:",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"
