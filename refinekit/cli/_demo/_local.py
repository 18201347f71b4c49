"""`refinekit demo --local`: a small batch on the real tiny model, bare and decorated.

Ten invoices and ten questions with a source, from the benchmark's generator
(`_synthetic`, seed `SEED`), each run bare and decorated with the benchmark's own code
(`_batch`): the figures printed are the ones `benchmarks/bench_local_quality.py` measures
(valid and exact replies, passing answers, calls and tokens counted on the wire, time), for
this run's items, all of them. A line per item rescued by a correction shows the correction
that did it; a line per answer fixed by a retry shows the feedback that did it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...local import LocalModel
from ._batch import (
    REQUEST_SEED,
    TIMEOUT_S,
    CitationResult,
    ItemResult,
    first_example,
    make_extract,
    retry_quote,
    run_citation_item,
    run_item,
)
from ._count import Counter, Tally, http_client
from ._output import Output
from ._synthetic import CitationItem, InvoiceItem, citation_items, invoices

__all__ = ["EXTRACTION", "ITEMS", "MAX_TOKENS", "SEED", "run_batch"]

SEED = 2024
"""The data's seed: the benchmark's default (its tuning seed)."""
ITEMS = 10
"""Invoices, and questions, in the batch: the first ten of the seed."""
MAX_TOKENS = 128
"""`max_tokens` of every call, as in the benchmark."""


@dataclass(frozen=True)
class _Way:
    """One way of running the extraction: a row of the figures."""

    name: str
    constraint: str
    checked: bool
    corrections: int


EXTRACTION = (
    _Way("bare (1 call)", "none", False, 0),
    _Way("@self_correct, checked schema", "none", True, 2),
    _Way("grounded decoding + @self_correct", "grounded", True, 2),
)
"""The extraction rows: the benchmark's `bare`, `refinekit_checked` and `grounded_checked`."""


def _tokens(tally: Tally) -> str:
    return f"{tally.prompt_tokens}+{tally.completion_tokens}"


def _sum(tallies: Sequence[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        total.calls += t.calls
        total.prompt_tokens += t.prompt_tokens
        total.completion_tokens += t.completion_tokens
        total.errors += t.errors
    return total


def _problems(correction: str) -> list[str]:
    """The problem lines of a correction turn: between its marker and the template's lead."""
    lines = correction.splitlines()[1:]
    shown = []
    for line in lines:
        if line.startswith("Reply with only"):
            break
        shown.append(line)
    return shown or lines[:1]


def _extraction(
    say: Output, local: LocalModel, items: Sequence[InvoiceItem], check: Callable[[], None]
) -> tuple[list[list[ItemResult]], int]:
    say(
        say.head(
            f"1. Extraction: {len(items)} invoices into Invoice(number, vendor, currency, total)"
        )
    )
    say("   exact = all four fields equal the invoice's; tokens = prompt+completion on the wire")
    say()
    say(f"   {'':<36}{'valid':>7}{'exact':>7}{'calls':>7}{'tokens':>13}{'time':>9}")
    every: list[list[ItemResult]] = []
    errors = 0
    for way in EXTRACTION:
        counter = Counter()
        with local.client(http_client=http_client(counter, TIMEOUT_S), timeout=TIMEOUT_S) as c:
            extract = make_extract(
                c,
                local.model,
                MAX_TOKENS,
                constraint=way.constraint,
                checked=way.checked,
                corrections=way.corrections,
            )
            started = time.perf_counter()
            results = []
            for item in items:
                result = run_item(extract, counter, item)
                if result.error is not None:
                    check()  # a dead server is the run's end, said as such
                    errors += 1
                results.append(result)
            seconds = time.perf_counter() - started
        every.append(results)
        total = _sum([r.tally for r in results])
        say(
            f"   {way.name:<36}{sum(r.valid for r in results):>4}/{len(items)}"
            f"{sum(r.exact for r in results):>4}/{len(items)}{total.calls:>7}"
            f"{_tokens(total):>13}{seconds:>8.1f}s"
        )
    say()
    bare = every[0]
    for way, results in zip(EXTRACTION[1:], every[1:], strict=True):
        rescued = [
            (item, r) for item, r in zip(items, results, strict=True) if r.valid and r.corrections
        ]
        say(f"   {way.name}: {len(rescued)} item(s) rescued by a correction")
        for item, r in rescued:
            was = "valid" if bare[item.index].valid else "invalid"
            got = "exact" if r.exact else "valid, not exact"
            say(
                f"     item {item.index} (bare: {was}) -> {got} after "
                f"{len(r.corrections)} correction(s); the last said:"
            )
            for line in _problems(r.corrections[-1]):
                say.wrapped("       | ", line, 9)
        refused = sum(not r.valid and r.error is None for r in results)
        if refused:
            say(
                f"     {refused} item(s) ended in a typed refusal (CorrectionExhausted): "
                "no value with a hole in it"
            )
    say()
    return every, errors


def _citations(
    say: Output, local: LocalModel, items: Sequence[CitationItem], check: Callable[[], None]
) -> tuple[list[list[CitationResult]], int]:
    say(say.head(f"2. Answers with citations: {len(items)} questions, each with one document"))
    say("   passes = all_of(cites_source(), contains(the fact)); the first prompt is the same")
    say()
    say(f"   {'':<36}{'passes':>7}{'calls':>14}{'tokens':>13}{'time':>9}")
    ways: list[tuple[str, Any]] = [
        ("bare (attempt 1 only)", None),
        ("@retry_on_low_quality + retry_prompt", retry_quote),
    ]
    every: list[list[CitationResult]] = []
    errors = 0
    settings: dict[str, Any] = {
        "model": local.model,
        "temperature": 0.0,
        "seed": REQUEST_SEED,
        "max_tokens": MAX_TOKENS,
    }
    for name, retry in ways:
        counter = Counter()
        with local.client(http_client=http_client(counter, TIMEOUT_S), timeout=TIMEOUT_S) as c:
            started = time.perf_counter()
            results = []
            for item in items:
                result = run_citation_item(item, retry, first_example, c, counter, settings)
                if result.error is not None:
                    check()
                    errors += 1
                results.append(result)
            seconds = time.perf_counter() - started
        every.append(results)
        total = _sum([r.tally for r in results])
        say(
            f"   {name:<36}{sum(r.clean for r in results):>4}/{len(items)}{total.calls:>14}"
            f"{_tokens(total):>13}{seconds:>8.1f}s"
        )
    say()
    fixed = [(item, r) for item, r in zip(items, every[1], strict=True) if r.clean and r.feedback]
    say(f"   {ways[1][0]}: {len(fixed)} answer(s) fixed by a retry")
    for item, r in fixed:
        say(f"     question {item.index} -> passed at attempt {r.passed_at}; the feedback was:")
        say.wrapped("       | ", r.feedback[-1], 9)
        say.wrapped("       answer: ", r.answers[-1].replace("\n", " "), 15)
    echoes = sum(r.passed_at is not None and r.echoed for r in every[1])
    if echoes:
        say(f"     {echoes} pass(es) not counted: the answer repeated the retry instruction")
    say()
    return every, errors


def run_batch(say: Output, local: LocalModel, check: Callable[[], None]) -> bool:
    """Run the batch on `local`, writing its figures; True when no item crashed.

    Args:
        say: Where to write.
        local: The running local model.
        check: Called after an item's error: raises `LocalModelError` when the server died.
    """
    began = time.perf_counter()
    say(
        f"   {ITEMS} invoices and {ITEMS} questions from the benchmark's generator (seed {SEED}), "
        "every one counted;"
    )
    say(
        f"   temperature 0, request seed {REQUEST_SEED}, max_tokens {MAX_TOKENS}: the code and "
        "settings of the benchmark"
    )
    say("   (benchmarks/bench_local_quality.py)")
    say()
    extraction, crashed = _extraction(say, local, invoices(ITEMS, SEED), check)
    answers, failed = _citations(say, local, citation_items(ITEMS, SEED), check)
    bare, *_, grounded = extraction
    say(say.head("What the decorators changed on this batch"))
    say(
        f"   extraction: valid {sum(r.valid for r in bare)} -> {sum(r.valid for r in grounded)}, "
        f"exact {sum(r.exact for r in bare)} -> {sum(r.exact for r in grounded)} of {ITEMS} "
        f"(bare -> {EXTRACTION[-1].name})"
    )
    say(
        f"   citations: passes {sum(r.clean for r in answers[0])} -> "
        f"{sum(r.clean for r in answers[1])} of {ITEMS} (bare -> retries with feedback)"
    )
    say(
        f"   {time.perf_counter() - began:.0f} s for the batch; items that crashed: "
        f"{crashed + failed}"
    )
    say("   Ten items are a demonstration, not a measurement: the benchmark's tables, with")
    say("   confidence intervals on 100 items per seed, are in docs/local_model.md.")
    return crashed + failed == 0
