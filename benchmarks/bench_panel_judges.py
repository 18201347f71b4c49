"""Panels of refinekit's own pieces on the real local model, against the best single member.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_panel_judges.py
    .venv/bin/python benchmarks/bench_panel_judges.py \\
        --seed 4242 --panel "all(numbers, one claim)"        # the held-out run, once
    .venv/bin/python benchmarks/bench_panel_judges.py --base-url URL --quick   # a smoke run

The labelled answers are `bench_local_quality.py`'s judging set (`_synthetic.judging_items`:
60 answers of a seed, half correct, the others with a wrong number, place, condition or
negation). One `refinekit.eval.calibrate` run judges them with a panel of every candidate
member, each measured on every item (a calibration runs every member):

- `numbers`: `checks.numbers_supported()` (code, no model call);
- `default`: a `criteria` judge on SmolLM2-135M, "Is the answer correct and supported by the
  context?", passing at P(yes) >= 0.5 (at the default 0.8 it passes nothing here:
  docs/local_model.md);
- `one claim`: the same with "Does the context say what the answer says?".

Every candidate panel's verdicts are then computed from those recorded votes by
`refinekit.judges` own decision rule (`outcome`), and its cost in model calls per verdict by
its own early stop (`_settled`, members cheapest first): what the panel would have done and
spent in an eval. For each, Cohen's kappa with people and its 95% interval (Fleiss, Cohen and
Everitt). The panel to report on the held-out seed is chosen on the tuning seed (2024):
`--panel NAME` names it, so that the held-out run reports that one, beside the rest.

A report, not a gate: it exits 0 unless the calibration did not finish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
from _machine import loadavg, machine
from _synthetic import judging_items

import refinekit.eval
from refinekit import checks, judges
from refinekit.eval._stats import cohen_kappa, kappa_interval
from refinekit.judges._panel import PanelRule, _settled, default_quorum, outcome

MODEL_MEMBERS = {
    "default": "Is the answer correct and supported by the context?",
    "one claim": "Does the context say what the answer says?",
}
CALLS = {"numbers": 0, "default": 1, "one claim": 1}
CANDIDATES: dict[str, tuple[PanelRule, tuple[str, ...]]] = {
    "numbers": ("majority", ("numbers",)),
    "default": ("majority", ("default",)),
    "one claim": ("majority", ("one claim",)),
    "all(numbers, default)": ("all", ("numbers", "default")),
    "all(numbers, one claim)": ("all", ("numbers", "one claim")),
    "all(numbers, default, one claim)": ("all", ("numbers", "default", "one claim")),
    "majority(numbers, default, one claim)": ("majority", ("numbers", "default", "one claim")),
    "mean(numbers, default, one claim)": ("mean", ("numbers", "default", "one claim")),
}
SINGLES = ("numbers", "default", "one claim")


def the_panel(base_url: str, model: str) -> judges.Panel:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=300)
    members: list[Any] = [("numbers", checks.numbers_supported())]
    for name, question in MODEL_MEMBERS.items():
        criterion = judges.Criterion(name.replace(" ", "_"), question, pass_at=0.5, fail_at=0.5)
        members.append((name, judges.criteria(judges.JudgeModel(client, model), [criterion])))
    return judges.panel(members, "majority")


def _score(member: dict[str, Any], rule: PanelRule) -> float | None:
    vote = member.get("vote")
    if vote not in ("pass", "fail"):
        return None
    score = member.get("score")
    if rule == "mean" and isinstance(score, (int, float)) and not isinstance(score, bool):
        return float(score)
    return 1.0 if vote == "pass" else 0.0


def decide(
    votes: dict[str, dict[str, Any]], rule: PanelRule, names: Sequence[str]
) -> tuple[bool | None, int]:
    """A candidate panel's verdict on one item (None: no verdict) and its model calls."""
    running = sorted(names, key=lambda n: CALLS[n])  # cheapest first, as panel() runs them
    quorum = default_quorum(rule, len(names))
    scores: list[float | None] = []
    calls = 0
    for i, name in enumerate(running):
        if _settled(rule, scores, len(running) - i, quorum, 0.5):
            break
        scores.append(_score(votes[name], rule))
        calls += CALLS[name]
    decision = outcome(rule, scores, quorum=quorum, threshold=0.5)
    if decision == "below_quorum":
        return None, calls
    return decision == "pass", calls  # a majority's tie fails (on_tie="fail")


def figures(cases: Sequence[Any]) -> list[tuple[str, int, int, float, float, float, float]]:
    """Per candidate: (name, items, no verdict, kappa, lower, upper, model calls per item)."""
    rows = []
    for name, (rule, names) in CANDIDATES.items():
        pairs, none, calls = [], 0, 0
        for case in cases:
            record = case.verdicts[0]["metadata"]["panel"]
            votes = {m["name"]: m for m in record["members"]}
            verdict, spent = decide(votes, rule, names)
            calls += spent
            if verdict is None:
                none += 1
            else:
                pairs.append((verdict, case.label == "pass"))
        kappa = cohen_kappa(pairs) if pairs else float("nan")
        table = (
            sum(j and h for j, h in pairs),
            sum(j and not h for j, h in pairs),
            sum(h and not j for j, h in pairs),
            sum(not j and not h for j, h in pairs),
        )
        low, high = kappa_interval(*table) or (float("nan"), float("nan"))
        rows.append((name, len(pairs), none, kappa, low, high, calls / max(1, len(cases))))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2024, help="the data's seed (2024: tuning)")
    parser.add_argument("--items", type=int, default=60, help="labelled answers (default 60)")
    parser.add_argument("--panel", default=None, help="the panel chosen on the tuning seed")
    parser.add_argument("--base-url", default=None, help="a running server (else: LocalModel)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 6 items")
    args = parser.parse_args(argv)
    items = judging_items(6 if args.quick else args.items, args.seed)
    print("refinekit panels on a real model: kappa against people and model calls per verdict")
    for line in machine(["refinekit", "openai"]):
        print(line)
    print(f"data       {len(items)} labelled answers of seed {args.seed}")
    print(f"load avg   {loadavg()} before")
    with tempfile.TemporaryDirectory(prefix="refinekit-panels-") as folder:
        labelled = Path(folder) / "labelled.jsonl"
        labelled.write_text("".join(json.dumps(i.row()) + "\n" for i in items), encoding="utf-8")
        started = time.perf_counter()
        if args.base_url is not None:
            base_url, local = args.base_url, None
        else:
            from refinekit.local import LocalModel

            threads = str(args.threads)
            local = LocalModel(
                server_args=["--n_threads", threads, "--n_threads_batch", threads],
                startup_timeout=300,
            )
            local.start()
            base_url = local.base_url
        try:
            result = refinekit.eval.calibrate(
                labelled,
                judge=the_panel(base_url, args.model),
                db=Path(folder) / "runs.db",
                concurrency=1,
            )
        finally:
            if local is not None:
                local.stop()
        seconds = time.perf_counter() - started
        cases = [c for c in result.cases if c.verdicts and c.label is not None]
        if len(cases) < len(items):
            print(f"calibration judged {len(cases)} of {len(items)} items", file=sys.stderr)
            return 1
        rows = figures(cases)
    print(f"calibrated in {seconds:.0f} s; load avg {loadavg()} after")
    print()
    print("| judge | items | no verdict | kappa | 95% interval | model calls / verdict |")
    print("|---|---:|---:|---:|---|---:|")
    for name, n, none, kappa, low, high, calls in rows:
        mark = " (chosen on the tuning seed)" if name == args.panel else ""
        print(
            f"| {name}{mark} | {n} | {none} | {kappa:+.3f} | {low:+.3f} to {high:+.3f} "
            f"| {calls:.2f} |"
        )
    singles = [r for r in rows if r[0] in SINGLES]
    best_single = max(singles, key=lambda r: r[3])
    panels = [r for r in rows if r[0] not in SINGLES]
    best_panel = max(panels, key=lambda r: r[3])
    print()
    print(f"best single member: {best_single[0]}, kappa {best_single[3]:+.3f}")
    print(f"best panel here: {best_panel[0]}, kappa {best_panel[3]:+.3f}")
    if args.panel is not None:
        chosen = next((r for r in rows if r[0] == args.panel), None)
        if chosen is None:
            print(f"error: no candidate panel named {args.panel!r}", file=sys.stderr)
            return 2
        print(f"chosen panel: {chosen[0]}, kappa {chosen[3]:+.3f}, {chosen[6]:.2f} calls/verdict")
    c = result.calibration
    if c.panel is not None:
        print()
        print("refinekit calibrate's own figures for the full panel (majority of the three):")
        for m in c.panel.members:
            print(
                f"  {m.name}: kappa {m.kappa if m.kappa is not None else float('nan'):+.3f}, "
                f"panel without it {m.kappa_without if m.kappa_without is not None else 0:+.3f}"
                + (", adds nothing" if m.adds_nothing else "")
            )
        for w in c.warnings:
            print(f"  warning: {w}")
    print(f"reproduce  python benchmarks/bench_panel_judges.py {' '.join(sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
