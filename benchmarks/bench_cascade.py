"""Judge cascades by simulation: does the fitted cascade keep its guaranteed agreement?

Run it from the repository root::

    .venv/bin/python benchmarks/bench_cascade.py            # the table in docs/panels.md
    .venv/bin/python benchmarks/bench_cascade.py --smoke    # a smoke run, a few seconds

Each simulated run knows the truth. Items are labelled by people (a share `HUMAN_PASS` pass).
Each level of a cascade gives every item a verdict and a confidence from 0.5 to 1; how often
the verdict agrees with people, given its confidence, is the level's quality:

- `rule check`: fails a share `CHECK_CATCHES` of the answers people fail, at confidence 1
  (right but for `CHECK_WRONG` of them); passes everything else, which says nothing
  (confidence unknown);
- `cheap` (cost 1): confidence spread over 0.5 to 1, right as often as it says;
- `cheap, overconfident` (cost 1): the same confidences, right less often than it says;
- `cheap x5 samples` (cost 5): the cheap judge asked 5 times, the majority kept, its
  confidence the majority's share (0.6, 0.8 or 1.0);
- `strong` (cost 10): most confidences near 1, right as often as it says.

Per setting (a cascade and its target), over `--runs` runs: `refinekit.eval.fit_cascade`
fits the thresholds on `--calibration` labelled items (each level's verdict and confidence
on each, as a calibration run records them; `costs=` the levels' costs), then the cascade
judges `--test` new items.
The table gives the share of runs whose agreement with people on the test items fell below
the target (the guarantee: at most `risk` of them), the mean observed agreement, the share
of items each level decided and the cascade abstained on, and the cost against the strong
judge alone on every item (10 per item and per verdict): per item judged (an abstention
costs the levels asked) and per verdict given. `naive` is the same cascade with the lowest
threshold whose agreement on the calibration items reaches the target, without the test:
what the guarantee protects against.

The script exits 1 when a setting's share of runs below the target exceeds its risk (0
otherwise).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _machine import machine

from refinekit.eval import fit_cascade
from refinekit.eval._cascade_fit import GRID, grid_counts

HUMAN_PASS = 0.6
CHECK_CATCHES = 0.3
CHECK_WRONG = 0.01
STRONG_COST = 10.0

Level = Callable[[random.Random, bool], "tuple[bool | None, float | None]"]
"""A simulated level: (rng, people's label) -> (its verdict, its confidence)."""


def _answer(rng: random.Random, label: bool, right: float) -> bool:
    return label if rng.random() < right else not label


def rule_check(rng: random.Random, label: bool) -> tuple[bool | None, float | None]:
    """Fails some answers people fail, surely; passing is no evidence (confidence unknown)."""
    if not label and rng.random() < CHECK_CATCHES:
        return (rng.random() < CHECK_WRONG), 1.0
    if label and rng.random() < CHECK_CATCHES * CHECK_WRONG:
        return False, 1.0  # a rare false alarm on a good answer
    return True, None


def cheap(rng: random.Random, label: bool) -> tuple[bool | None, float | None]:
    """Confidences spread over 0.5 to 1; right as often as it says."""
    sure = 0.5 + 0.5 * rng.random() ** 0.7
    return _answer(rng, label, sure), sure


def overconfident(rng: random.Random, label: bool) -> tuple[bool | None, float | None]:
    """The cheap judge's confidences; right only 0.5 + 0.8 * (confidence - 0.5) of the time."""
    sure = 0.5 + 0.5 * rng.random() ** 0.7
    return _answer(rng, label, 0.5 + 0.8 * (sure - 0.5)), sure


def sampled(rng: random.Random, label: bool) -> tuple[bool | None, float | None]:
    """Five samples of a judge right with an item's own chance; the majority and its share."""
    right = 0.5 + 0.5 * rng.random() ** 0.7
    votes = sum(rng.random() < right for _ in range(5))  # samples agreeing with people
    passes = votes if label else 5 - votes
    majority = passes >= 3
    return majority, max(passes, 5 - passes) / 5


def strong(rng: random.Random, label: bool) -> tuple[bool | None, float | None]:
    """Most confidences near 1; right as often as it says."""
    sure = 0.5 + 0.5 * rng.random() ** 0.25
    return _answer(rng, label, sure), sure


@dataclass(frozen=True)
class Setting:
    name: str
    levels: Sequence[tuple[str, Level, float]]  # (name, level, cost)
    target: float
    risk: float


SETTINGS = [
    Setting("strong alone", [("strong", strong, STRONG_COST)], 0.9, 0.1),
    Setting("cheap, strong", [("cheap", cheap, 1.0), ("strong", strong, STRONG_COST)], 0.9, 0.1),
    Setting(
        "check, cheap, strong",
        [("check", rule_check, 0.0), ("cheap", cheap, 1.0), ("strong", strong, STRONG_COST)],
        0.9,
        0.1,
    ),
    Setting(
        "cheap x5 samples, strong",
        [("cheap x5", sampled, 5.0), ("strong", strong, STRONG_COST)],
        0.9,
        0.1,
    ),
    Setting(
        "overconfident cheap, strong",
        [("cheap", overconfident, 1.0), ("strong", strong, STRONG_COST)],
        0.9,
        0.1,
    ),
    Setting(
        "cheap, strong (target 0.95, risk 0.05)",
        [("cheap", cheap, 1.0), ("strong", strong, STRONG_COST)],
        0.95,
        0.05,
    ),
]


def draw(
    rng: random.Random, setting: Setting, n: int
) -> tuple[list[list[bool | None]], list[list[float | None]], list[bool]]:
    """n labelled items, each with every level's verdict and confidence."""
    passed: list[list[bool | None]] = []
    confidence: list[list[float | None]] = []
    labels: list[bool] = []
    for _ in range(n):
        label = rng.random() < HUMAN_PASS
        row = [level(rng, label) for _, level, _ in setting.levels]
        passed.append([v for v, _ in row])
        confidence.append([c for _, c in row])
        labels.append(label)
    return passed, confidence, labels


@dataclass
class Judged:
    """What a cascade with given thresholds did on items."""

    kept: int
    agreed: int
    shares: list[float]  # per level, then abstained
    cost: float  # per item

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.kept if self.kept else None


def judge(
    setting: Setting,
    thresholds: Sequence[float | None],
    passed: list[list[bool | None]],
    confidence: list[list[float | None]],
    labels: list[bool],
) -> Judged:
    """The cascade on the items: the first level sure enough decides; each asked level costs
    (a level whose threshold is None cannot decide, and is not asked)."""
    k_levels = len(setting.levels)
    counts = [0] * (k_levels + 1)
    agreed = 0
    cost = 0.0
    for verdicts, sureness, label in zip(passed, confidence, labels, strict=True):
        decided = None
        for k in range(k_levels):
            t, v, c = thresholds[k], verdicts[k], sureness[k]
            if t is None:
                continue  # a level that cannot decide is not asked
            cost += setting.levels[k][2]
            if t is not None and v is not None and c is not None and c >= t:
                decided = (k, v)
                break
        if decided is None:
            counts[k_levels] += 1
        else:
            counts[decided[0]] += 1
            agreed += decided[1] == label
    n = len(labels)
    kept = n - counts[k_levels]
    return Judged(kept, agreed, [c / n for c in counts], cost / n)


def naive(
    setting: Setting,
    passed: list[list[bool | None]],
    confidence: list[list[float | None]],
    labels: list[bool],
) -> tuple[float | None, ...]:
    """The lowest common threshold whose calibration agreement reaches the target, untested."""
    rows = [
        [None if v is None or c is None else (v, max(0.5, c)) for v, c in zip(vs, cs, strict=True)]
        for vs, cs in zip(passed, confidence, strict=True)
    ]
    best: tuple[float | None, ...] = (None,) * len(setting.levels)
    for t, kept, wrong in zip(GRID, *grid_counts(rows, labels), strict=True):
        if kept and (kept - wrong) / kept >= setting.target:
            best = (t,) * len(setting.levels)
    return best


@dataclass
class Row:
    below: int = 0
    naive_below: int = 0
    certified: int = 0
    observed: float = 0.0
    naive_observed: float = 0.0
    shares: list[float] | None = None
    cost: float = 0.0
    verdict_cost: float = 0.0  # summed over the runs that gave a verdict


def run_setting(rng: random.Random, setting: Setting, runs: int, m: int, n: int) -> Row:
    row = Row(shares=[0.0] * (len(setting.levels) + 1))
    assert row.shares is not None
    for _ in range(runs):
        calibration = draw(rng, setting, m)
        costs = [cost for _, _, cost in setting.levels]
        fit = fit_cascade(*calibration, target=setting.target, risk=setting.risk, costs=costs)
        test = draw(rng, setting, n)
        judged = judge(setting, fit.thresholds, *test)
        if judged.agreement is not None:
            row.certified += 1
            row.observed += judged.agreement
            row.below += judged.agreement < setting.target
        row.shares = [a + b for a, b in zip(row.shares, judged.shares, strict=True)]
        row.cost += judged.cost
        if judged.kept:
            row.verdict_cost += judged.cost * n / judged.kept
        loose = judge(setting, naive(setting, *calibration), *test)
        if loose.agreement is not None:
            row.naive_observed += loose.agreement
            row.naive_below += loose.agreement < setting.target
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", "--quick", action="store_true", help="a smoke run: 60 runs")
    parser.add_argument("--runs", type=int, default=None, help="runs per setting (default 500)")
    parser.add_argument("--calibration", type=int, default=500, help="labelled items per fit")
    parser.add_argument("--test", type=int, default=None, help="test items (default 10000)")
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    runs = args.runs or (60 if args.smoke else 500)
    test = args.test or (2000 if args.smoke else 10000)
    rng = random.Random(args.seed)
    print("refinekit judge cascades: the guaranteed agreement by simulation")
    for line in machine(["refinekit"]):
        print(line)
    print(
        f"people pass {HUMAN_PASS} of the items; {args.calibration} labelled items per fit, "
        f"{test} test items, {runs} runs a setting, seed {args.seed}; costs: check 0, "
        f"cheap 1, strong {STRONG_COST:g} per item asked"
    )
    print()
    print(
        "| setting | target, risk | runs below target | naive: runs below | certified runs "
        "| mean agreement | naive: mean | decided per level | abstained | cost per item "
        "| cost per verdict |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    started = time.perf_counter()
    worst: dict[str, float] = {}
    met = True
    for setting in SETTINGS:
        row = run_setting(rng, setting, runs, args.calibration, test)
        assert row.shares is not None
        below = row.below / runs
        worst[setting.name] = below
        met = met and below <= setting.risk
        shares = ", ".join(
            f"{name} {s / runs:.2f}"
            for (name, _, _), s in zip(setting.levels, row.shares, strict=False)
        )
        mean = f"{row.observed / row.certified:.3f}" if row.certified else "-"
        per_verdict = (
            f"{row.verdict_cost / row.certified / STRONG_COST:.2f}" if row.certified else "-"
        )
        naive_mean = f"{row.naive_observed / runs:.3f}"
        print(
            f"| {setting.name} | {setting.target}, {setting.risk} | {below:.3f} "
            f"| {row.naive_below / runs:.3f} | {row.certified}/{runs} | {mean} | {naive_mean} "
            f"| {shares} | {row.shares[-1] / runs:.2f} | {row.cost / runs / STRONG_COST:.2f} "
            f"| {per_verdict} |"
        )
    print()
    print(f"simulated in {time.perf_counter() - started:.1f} s")
    print(
        "targets: the share of runs below the target <= risk in every setting: "
        f"{'met' if met else 'NOT met'}"
    )
    print(json.dumps({"below_target": worst}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
