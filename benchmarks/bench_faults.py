"""refinekit under seeded faults: run the fault suite's mix and print its figures.

Jobs by decorator and sync/async, the replies served by kind (the faults among them), the
outcomes by type, the `refinekit eval` runs (one killed with SIGKILL and resumed), and every
violation of a promise (see docs/reliability.md). Not a speed benchmark: the figures are
counts. Exit status 1 when a promise was broken.

    python benchmarks/bench_faults.py              # the mix `pytest -m reliability` runs
    python benchmarks/bench_faults.py --seed 7     # another mix
    python benchmarks/bench_faults.py --quick      # a smoke run
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "reliability"))

from _machine import loadavg, machine  # noqa: E402
from conftest import DEFAULT_SEED  # noqa: E402
from evalmix import eval_figures, run_eval_mix  # noqa: E402
from jobs import run_mix  # noqa: E402

import refinekit.testing  # noqa: E402

JOBS = {"self_correct": 120, "retry_on_low_quality": 120, "reviewed": 100}
QUICK = {"self_correct": 10, "retry_on_low_quality": 10, "reviewed": 10}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the mix's seed")
    parser.add_argument("--quick", action="store_true", help="a few jobs of each kind")
    parser.add_argument(
        "--no-interrupt", action="store_true", help="no eval run killed or stopped and resumed"
    )
    args = parser.parse_args(argv)
    logging.getLogger("instructor").addHandler(logging.NullHandler())  # its retries' chatter
    jobs = QUICK if args.quick else JOBS
    eval_runs, eval_cases = (1, 6) if args.quick else (5, 16)

    print(f"refinekit under seeded faults: seed {args.seed}")
    for line in machine(["refinekit", "openai", "httpx2", "instructor", "pydantic"]):
        print(line)
    print(f"load avg   {loadavg()}")
    command = " ".join(["python benchmarks/bench_faults.py", *(argv or sys.argv[1:])])
    print(f"command    {command}\n")

    started = time.monotonic()
    with refinekit.testing.set_testing():
        report = run_mix(args.seed, jobs)
        print(report.figures())
        with tempfile.TemporaryDirectory() as folder:
            evals = run_eval_mix(
                args.seed, eval_runs, eval_cases, Path(folder), interrupt=not args.no_interrupt
            )
    print()
    print(eval_figures(evals))
    eval_violations = [f"{r.name}: {v}" for r in evals for v in r.violations]
    print(f"violations: {len(eval_violations)}")
    violations = report.violations + eval_violations
    jobs_run = len(report.results) + sum(r.cases for r in evals)
    print(f"\nin all: {jobs_run} jobs, {time.monotonic() - started:.1f} s, ", end="")
    print(f"{len(violations)} promise(s) broken")
    for violation in violations:
        print(f"- {violation}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
