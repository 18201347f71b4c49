"""The judge-corrected gate by simulation: how often its interval covers the true pass rate.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_corrected_gate.py           # the table in docs/panels.md
    .venv/bin/python benchmarks/bench_corrected_gate.py --quick   # a smoke run, a few seconds

Each simulated run knows the truth. A golden set of `n` answers of which a true share
`TRUE_RATE` pass is judged by a judge with sensitivity Se (it passes a truly passing answer
with that probability) and specificity Sp (it fails a truly failing one so); the same judge
was calibrated on `m` labelled items (people pass a share `CALIBRATION_PASS` of them), which
gives the estimates of Se and Sp that `refinekit eval --calibration` reads from the stored
calibrate run. Per cell (a judge, a golden-set size, a calibration size), over `--runs` runs:

- corrected: `refinekit.eval._stats.corrected_interval` (what the gate of `eval
  --calibration` holds: the Rogan-Gladen rate, its interval over the Wilson intervals of the
  observed rate, of Se and of Sp) covers the true rate;
- lower ok: its lower bound is at or under the true rate (the one side a gate relies on);
- Wilson: the uncorrected 95% Wilson interval of the judge's pass rate covers the true rate
  (what the gate held before: the judge's verdicts taken as the truth);
- width: the corrected interval's mean width.

The target: the corrected interval covers the true rate in at least 95% of the runs in every
cell. The script exits 1 when a cell misses it (0 otherwise), and with `--quick` runs fewer
runs per cell (the coverage is then known to about +-3 points).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from _machine import machine

from refinekit.eval._stats import corrected_interval, wilson_interval

TRUE_RATE = 0.7
"""The true pass rate of the simulated golden set."""

CALIBRATION_PASS = 0.5
"""The share of the calibration's labelled items people pass."""

JUDGES = [  # (name, sensitivity, specificity)
    ("near-perfect", 0.98, 0.98),
    ("good", 0.90, 0.90),
    ("lenient", 0.95, 0.70),
    ("harsh", 0.75, 0.95),
    ("weak", 0.75, 0.70),
]
SIZES = [50, 200, 1000]  # golden-set answers
CALIBRATIONS = [60, 200]  # labelled items in the calibration
TARGET = 0.95


def binomial(rng: random.Random, n: int, p: float) -> int:
    """A Binomial(n, p) draw (Python 3.10 has no `random.binomialvariate`)."""
    return sum(rng.random() < p for _ in range(n))


def cell(
    rng: random.Random, se: float, sp: float, n: int, m: int, runs: int
) -> tuple[float, float, float, float]:
    """(corrected coverage, lower-bound coverage, Wilson coverage, mean width) of one cell."""
    covered = lower_ok = wilson = 0
    width = 0.0
    for _ in range(runs):
        positives = binomial(rng, m, CALIBRATION_PASS)
        negatives = m - positives
        true_passes = binomial(rng, positives, se)
        true_fails = binomial(rng, negatives, sp)
        good = binomial(rng, n, TRUE_RATE)
        passed = binomial(rng, good, se) + binomial(rng, n - good, 1 - sp)
        _, low, high = corrected_interval(passed, n, true_passes, positives, true_fails, negatives)
        covered += low <= TRUE_RATE <= high
        lower_ok += low <= TRUE_RATE
        width += high - low
        w_low, w_high = wilson_interval(passed, n)
        wilson += w_low <= TRUE_RATE <= w_high
    return covered / runs, lower_ok / runs, wilson / runs, width / runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 runs a cell")
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (default 2000)")
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    runs = args.runs or (300 if args.quick else 2000)
    rng = random.Random(args.seed)
    print("refinekit corrected gate: coverage of the true pass rate by simulation")
    for line in machine(["refinekit"]):
        print(line)
    print(
        f"true pass rate {TRUE_RATE}, people pass {CALIBRATION_PASS} of the calibration's "
        f"items, {runs} runs a cell, seed {args.seed}"
    )
    print()
    print(
        "| judge (Se, Sp) | answers n | labelled m | corrected covers | lower bound <= true "
        "| Wilson covers | corrected width |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    started = time.perf_counter()
    worst = 1.0
    for name, se, sp in JUDGES:
        for n in SIZES:
            for m in CALIBRATIONS:
                cov, low_ok, wil, width = cell(rng, se, sp, n, m, runs)
                worst = min(worst, cov)
                print(
                    f"| {name} ({se:.2f}, {sp:.2f}) | {n} | {m} | {cov:.3f} | {low_ok:.3f} "
                    f"| {wil:.3f} | {width:.3f} |"
                )
    print()
    print(f"simulated in {time.perf_counter() - started:.1f} s")
    met = worst >= TARGET
    print(
        f"targets: corrected coverage >= {TARGET:.2f} in every cell: "
        f"{'met' if met else 'NOT met'} (lowest {worst:.3f})"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
