"""Per-call overhead of refinekit's decorators against the undecorated function.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_overhead.py           # the figures in docs/performance.md
    .venv/bin/python benchmarks/bench_overhead.py --quick   # a smoke run, a few hundred calls

Every "model" here is a deterministic stand-in that returns a fixed reply, so what is timed is
refinekit's own work, not a network. Each case pairs a decorated call with a baseline that does
the same useful work without refinekit (the undecorated function; for `@self_correct`, the
undecorated function plus `TypeAdapter(Invoice).validate_json` on its reply). Both are timed in
the same run, in interleaved rounds (baseline and decorated alternate, their order flipping each
round), with `time.perf_counter_ns`, timeit-style loops and the garbage collector off while a
loop runs. The machine may be shared and noisy, so the table gives the minimum and the median
over the rounds: "added" is decorated minus baseline, once from the best rounds (timeit's
convention) and once as the median of the per-round differences, and each target is judged on
both ("PASS at min, not at median" says the two disagree).

This is a report, not a gate: the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from _machine import loadavg, machine
from pydantic import BaseModel, TypeAdapter, ValidationError

import refinekit
import refinekit.testing
from refinekit import (
    ContextDocument,
    Verdict,
    checks,
    record_context,
    retry_on_low_quality,
    self_correct,
)
from refinekit._engine import events as _hooks
from refinekit._structure.parse import Parser

RETRY_TARGET_US = 50.0
"""The target: under 50 us added per attempt for `retry_on_low_quality` + a rule check."""

PARSE_ALLOWANCE_US = 0.5
PARSE_ALLOWANCE_SHARE = 0.03
"""What "parsing no slower than validate_json" allows: see `meets`."""

# ---------------------------------------------------------------------------------------------
# Stand-in "model" functions and data
# ---------------------------------------------------------------------------------------------

QUESTION = "How long do refunds take?"
SOURCE = "docs/policies/refunds.md"
DOCUMENT = ContextDocument(
    text="Refunds are issued to the original payment method within 14 days of the return.",
    source=SOURCE,
)
CITED = f"Refunds are issued within 14 days of the return (source: {SOURCE})."
UNCITED = "Refunds are issued within 14 days of the return."
FEEDBACK = f"Cite the source as [{SOURCE}]."


def answer(question: str, feedback: str | None = None) -> str:
    record_context(DOCUMENT)
    return CITED


async def answer_async(question: str, feedback: str | None = None) -> str:
    record_context(DOCUMENT)
    return CITED


def answer_cites_on_feedback(question: str, feedback: str | None = None) -> str:
    """Forgets the citation on the first attempt, adds it once told to."""
    record_context(DOCUMENT)
    return UNCITED if feedback is None else CITED


class LineItem(BaseModel):
    description: str
    quantity: int
    unit_cents: int


class Invoice(BaseModel):
    number: str
    customer: str
    currency: str
    total_cents: int
    lines: list[LineItem] = []


def _invoice_json(n_lines: int) -> str:
    lines = [
        LineItem(description=f"Item {i}: consulting, week {i % 52 + 1}", quantity=i % 7 + 1,
                 unit_cents=1250 + 37 * i)
        for i in range(n_lines)
    ]  # fmt: skip
    total = sum(line.quantity * line.unit_cents for line in lines)
    invoice = Invoice(
        number="INV-2026-0042", customer="ACME GmbH", currency="EUR", total_cents=total, lines=lines
    )
    return invoice.model_dump_json()


SMALL_REPLY = _invoice_json(2)
LARGE_REPLY = _invoice_json(50)
BAD_REPLY = SMALL_REPLY[: len(SMALL_REPLY) // 2]  # a reply cut off half way: not JSON
MESSAGES = [{"role": "user", "content": "Extract the invoice as JSON: ..."}]
ADAPTER: TypeAdapter[Invoice] = TypeAdapter(Invoice)
PARSER: Parser[Invoice] = Parser(Invoice)


def extract_small(messages: list[dict[str, Any]]) -> str:
    return SMALL_REPLY


def extract_large(messages: list[dict[str, Any]]) -> str:
    return LARGE_REPLY


async def extract_small_async(messages: list[dict[str, Any]]) -> str:
    return SMALL_REPLY


def extract_once_wrong(messages: list[dict[str, Any]]) -> str:
    """A truncated reply first; the good one once a correction turn is in the conversation."""
    return BAD_REPLY if len(messages) == 1 else SMALL_REPLY


def traced(fn: Callable[[], Any]) -> Callable[[], Any] | None:
    """`fn` run with OpenTelemetry tracing on, as `refinekit.otel.instrument()` leaves it.

    Spans go to an SDK tracer provider with no span processor: what is timed is refinekit's
    tracing and the SDK's span bookkeeping, not an exporter. Tracing is on only inside the
    call (the tracer and its event-bus hook are swapped in and out), so every other case runs
    with tracing off. None without `opentelemetry-sdk` (the `dev` extra has it).
    """
    try:
        from opentelemetry.sdk.trace import TracerProvider

        from refinekit.otel._tracer import OtelTracing
    except ImportError:
        return None
    tracing = OtelTracing(TracerProvider())
    saved = (_hooks._hooks, _hooks._wants_debug)
    hooks = (*saved[0], tracing._on_event)

    def on() -> Any:
        _hooks.instruments, _hooks._hooks, _hooks._wants_debug = (tracing,), hooks, _hooks._every
        try:
            return fn()
        finally:
            _hooks.instruments = ()
            _hooks._hooks, _hooks._wants_debug = saved

    return on


# ---------------------------------------------------------------------------------------------
# The cases: (decorated, baseline) pairs of zero-argument callables
# ---------------------------------------------------------------------------------------------

Thunk = Callable[[], Any]
AsyncThunk = Callable[[], Awaitable[Any]]


@dataclass
class Case:
    name: str
    decorated: Thunk | AsyncThunk
    baseline: Thunk | AsyncThunk
    baseline_name: str
    attempts: int = 1
    kind: str = "retry"  # "retry" (the 50 us target), "parse" (no slower), "info" (no target)
    is_async: bool = False
    deco_ns: list[float] = field(default_factory=list)
    base_ns: list[float] = field(default_factory=list)


def build_cases() -> list[Case]:
    rule = checks.cites_source()
    fixed_verdict = Verdict(passed=True, score=1.0)
    trivial = checks.Check("trivial", lambda request: fixed_verdict)
    retried = retry_on_low_quality(evaluator=rule)(answer)
    retried_trivial = retry_on_low_quality(evaluator=trivial)(answer)
    retried_unjudged = retry_on_low_quality()(answer)
    retried_async = retry_on_low_quality(evaluator=rule)(answer_async)
    retried_twice = retry_on_low_quality(evaluator=rule, max_retries=2)(answer_cites_on_feedback)
    corrected_small = self_correct(schema=Invoice)(extract_small)
    corrected_large = self_correct(schema=Invoice)(extract_large)
    corrected_async = self_correct(schema=Invoice)(extract_small_async)
    corrected_once = self_correct(schema=Invoice)(extract_once_wrong)
    validate = ADAPTER.validate_json
    parse = PARSER.parse

    def retry_pass() -> Any:
        return retried(QUESTION)

    def plain_answer() -> Any:
        return answer(QUESTION)

    def retry_pass_trivial() -> Any:
        return retried_trivial(QUESTION)

    def retry_pass_unjudged() -> Any:
        return retried_unjudged(QUESTION)

    async def retry_pass_async() -> Any:
        return await retried_async(QUESTION)

    async def plain_answer_async() -> Any:
        return await answer_async(QUESTION)

    def retry_one_rejection() -> Any:
        return retried_twice(QUESTION)

    def plain_two_answers() -> Any:
        answer_cites_on_feedback(QUESTION)
        return answer_cites_on_feedback(QUESTION, feedback=FEEDBACK)

    def correct_pass_small() -> Any:
        return corrected_small(MESSAGES)

    def plain_validate_small() -> Any:
        return validate(extract_small(MESSAGES))

    def correct_pass_large() -> Any:
        return corrected_large(MESSAGES)

    def plain_validate_large() -> Any:
        return validate(extract_large(MESSAGES))

    async def correct_pass_async() -> Any:
        return await corrected_async(MESSAGES)

    async def plain_validate_async() -> Any:
        return validate(await extract_small_async(MESSAGES))

    def correct_once() -> Any:
        return corrected_once(MESSAGES)

    def plain_correct_once() -> Any:
        # The least a hand-written loop does: call, fail to validate, call again, validate.
        reply = extract_once_wrong(MESSAGES)
        try:
            return validate(reply)
        except ValidationError:
            pass
        turns = [
            *MESSAGES,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Reply again with only the corrected JSON."},
        ]
        return validate(extract_once_wrong(turns))

    def parse_small() -> Any:
        return parse(SMALL_REPLY, repair=True)[0]

    def validate_small() -> Any:
        return validate(SMALL_REPLY)

    def parse_large() -> Any:
        return parse(LARGE_REPLY, repair=True)[0]

    def validate_large() -> Any:
        return validate(LARGE_REPLY)

    # Sanity: every pair computes the same thing, and the stand-ins behave as described.
    assert retry_pass() == plain_answer() == retry_pass_trivial() == retry_pass_unjudged() == CITED
    assert retry_one_rejection() == plain_two_answers() == CITED
    assert correct_pass_small() == plain_validate_small() == parse_small() == validate_small()
    assert correct_pass_large() == plain_validate_large() == parse_large() == validate_large()
    assert correct_once() == plain_correct_once()

    retry_pass_traced = traced(retry_pass)
    retry_one_rejection_traced = traced(retry_one_rejection)
    with_otel = []
    if retry_pass_traced is not None and retry_one_rejection_traced is not None:
        assert retry_pass_traced() == retry_one_rejection_traced() == CITED
        with_otel = [
            Case(
                "retry: pass, otel on",
                retry_pass_traced,
                plain_answer,
                "answer()",
                kind="info",
            ),
            Case(
                "retry: 1 rejection, otel on",
                retry_one_rejection_traced,
                plain_two_answers,
                "answer() x2",
                attempts=2,
                kind="info",
            ),
        ]

    return [
        Case("retry: pass, 1st attempt", retry_pass, plain_answer, "answer()"),
        Case(
            "retry: pass, 1st attempt (async)",
            retry_pass_async,
            plain_answer_async,
            "await answer()",
            is_async=True,
        ),
        Case(
            "retry: pass, check returns fixed",
            retry_pass_trivial,
            plain_answer,
            "answer()",
            kind="info",
        ),
        Case(
            "retry: pass, no evaluator", retry_pass_unjudged, plain_answer, "answer()", kind="info"
        ),
        Case(
            "retry: 1 rejection + pass",
            retry_one_rejection,
            plain_two_answers,
            "answer() x2",
            attempts=2,
        ),
        *with_otel,
        Case(
            "self_correct: pass (2 lines)",
            correct_pass_small,
            plain_validate_small,
            "extract()+validate_json",
            kind="info",
        ),
        Case(
            "self_correct: pass (50 lines)",
            correct_pass_large,
            plain_validate_large,
            "extract()+validate_json",
            kind="info",
        ),
        Case(
            "self_correct: pass (async)",
            correct_pass_async,
            plain_validate_async,
            "await extract()+v_json",
            kind="info",
            is_async=True,
        ),
        Case(
            "self_correct: 1 correction",
            correct_once,
            plain_correct_once,
            "hand-written loop",
            attempts=2,
            kind="info",
        ),
        Case("parse only (2 lines)", parse_small, validate_small, "validate_json", kind="parse"),
        Case("parse only (50 lines)", parse_large, validate_large, "validate_json", kind="parse"),
        Case(
            "control: A/A (2 lines)", validate_small, validate_small, "validate_json", kind="info"
        ),
        Case(
            "control: A/A (50 lines)", validate_large, validate_large, "validate_json", kind="info"
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


def _sync_loop(fn: Thunk, n: int) -> int:
    it = itertools.repeat(None, n)
    start = time.perf_counter_ns()
    for _ in it:
        fn()
    return time.perf_counter_ns() - start


async def _async_loop(fn: AsyncThunk, n: int) -> int:
    it = itertools.repeat(None, n)
    start = time.perf_counter_ns()
    for _ in it:
        await fn()
    return time.perf_counter_ns() - start


def time_loop(fn: Any, n: int, is_async: bool) -> float:
    """Nanoseconds per call of `fn` over `n` calls, with the garbage collector off."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        total = LOOP.run_until_complete(_async_loop(fn, n)) if is_async else _sync_loop(fn, n)
    finally:
        if enabled:
            gc.enable()
    return total / n


def calibrate(fn: Any, is_async: bool, seconds: float) -> int:
    """Calls per loop so that one loop takes about `seconds` (timeit's autorange, scaled)."""
    n = 1
    while True:
        per_call = time_loop(fn, n, is_async)
        if per_call * n >= 5e6 or n >= 1_000_000:  # 5 ms: long enough to extrapolate from
            return max(1, min(1_000_000, int(seconds * 1e9 / per_call)))
        n *= 10 if per_call * n < 5e5 else 2


def measure(cases: list[Case], rounds: int, seconds: float, quick_n: int | None) -> None:
    sizes: dict[int, tuple[int, int]] = {}
    for case in cases:
        if quick_n is not None:
            sizes[id(case)] = (quick_n, quick_n)
        else:
            sizes[id(case)] = (
                calibrate(case.decorated, case.is_async, seconds),
                calibrate(case.baseline, case.is_async, seconds),
            )
    for r in range(rounds):
        order = cases if r % 2 == 0 else cases[::-1]
        for case in order:
            n_deco, n_base = sizes[id(case)]
            deco_first = (r + len(case.name)) % 2 == 0
            if deco_first:
                case.deco_ns.append(time_loop(case.decorated, n_deco, case.is_async))
                case.base_ns.append(time_loop(case.baseline, n_base, case.is_async))
            else:
                case.base_ns.append(time_loop(case.baseline, n_base, case.is_async))
                case.deco_ns.append(time_loop(case.decorated, n_deco, case.is_async))


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


@dataclass
class Figures:
    deco_min: float
    deco_med: float
    base_min: float
    base_med: float
    added_min: float  # min(decorated) - min(baseline), us per call
    added_med: float  # median over rounds of (decorated - baseline), us per call
    ratio_min: float
    ratio_med: float


def figures(case: Case) -> Figures:
    us = 1e-3
    diffs = [d - b for d, b in zip(case.deco_ns, case.base_ns, strict=True)]
    ratios = [d / b for d, b in zip(case.deco_ns, case.base_ns, strict=True)]
    return Figures(
        deco_min=min(case.deco_ns) * us,
        deco_med=statistics.median(case.deco_ns) * us,
        base_min=min(case.base_ns) * us,
        base_med=statistics.median(case.base_ns) * us,
        added_min=(min(case.deco_ns) - min(case.base_ns)) * us,
        added_med=statistics.median(diffs) * us,
        ratio_min=min(case.deco_ns) / min(case.base_ns),
        ratio_med=statistics.median(ratios),
    )


def meets(case: Case, added_per_attempt: float, baseline_us: float) -> bool | None:
    """Whether one estimate of the added time meets the case's target (None: no target).

    - retry: under `RETRY_TARGET_US` added per attempt.
    - parse: "no slower than validate_json". On a reply that validates, `Parser.parse` is one
      Python method call around the very same `validate_json` call, so its only extra is a
      frame and a `try`: a fixed cost well under a microsecond, whatever the reply's size.
      What a measurement can show is that the difference is no larger than that or than the
      timing noise, so a parse passes when it adds at most `PARSE_ALLOWANCE_US` or
      `PARSE_ALLOWANCE_SHARE` of validate_json's own time, whichever is larger. The A/A
      controls (validate_json timed against itself) show how large the noise is in the run.
    """
    if case.kind == "retry":
        return added_per_attempt < RETRY_TARGET_US
    if case.kind == "parse":
        return added_per_attempt <= max(PARSE_ALLOWANCE_US, PARSE_ALLOWANCE_SHARE * baseline_us)
    return None


def report(cases: list[Case], rounds: int, quick: bool, load: tuple[str, str]) -> bool:
    print("refinekit decorator overhead")
    print("=" * 28)
    for line in machine(["refinekit", "pydantic", "pydantic-core", "tenacity"]):
        print(line)
    mode = "quick smoke run (few calls: figures not meaningful)" if quick else "full run"
    print(f"run        {mode}; {rounds} interleaved rounds; times in microseconds (us) per call")
    print(f"load avg   {load[0]} before, {load[1]} after (1/5/15 min)")
    print()

    by_name = {case.name: figures(case) for case in cases}

    header = (
        f"{'case':33} {'att':>3} | {'decorated':^15} | {'baseline':^15} | {'baseline is':23} | "
        f"{'added/attempt':^15} | {'ratio':^11} | result"
    )
    sub = (
        f"{'':33} {'':>3} | {'min':>7} {'med':>7} | {'min':>7} {'med':>7} | {'':23} | "
        f"{'min':>7} {'med':>7} | {'min':>5} {'med':>5} |"
    )
    print(header)
    print(sub)
    print("-" * len(header))
    pass_min = pass_med = True
    for case in cases:
        f = by_name[case.name]
        at_min = meets(case, f.added_min / case.attempts, f.base_min)
        at_med = meets(case, f.added_med / case.attempts, f.base_med)
        if at_min is None:
            result = "-"
        elif at_min and at_med:
            result = "PASS"
        elif at_min:
            result = "PASS at min, not at median"
        else:
            result = "FAIL"
        pass_min = pass_min and at_min is not False
        pass_med = pass_med and at_med is not False
        print(
            f"{case.name:33} {case.attempts:>3} | {f.deco_min:>7.2f} {f.deco_med:>7.2f} | "
            f"{f.base_min:>7.2f} {f.base_med:>7.2f} | {case.baseline_name:23} | "
            f"{f.added_min / case.attempts:>7.2f} {f.added_med / case.attempts:>7.2f} | "
            f"{f.ratio_min:>5.2f} {f.ratio_med:>5.2f} | {result}"
        )
    print()
    print("Notes")
    print("  min: best round (timeit's convention: the least disturbed); med: median over rounds.")
    print("  added/attempt: (decorated - baseline) / attempts; min = min(dec) - min(base),")
    print("    med = median over rounds of the paired difference. ratio = decorated / baseline.")
    print(f"  targets: retry lines < {RETRY_TARGET_US:.0f} us added per attempt (rule check:")
    print("    checks.cites_source()); parse lines 'no slower than validate_json' = at most")
    allowance = f"max({PARSE_ALLOWANCE_US} us, {PARSE_ALLOWANCE_SHARE:.0%} of validate_json)"
    print(f"    {allowance} extra: the frame around the same validate_json call,")
    print("    or timing noise (the A/A lines show how much noise there is).")
    print("  '-' lines have no target of their own; they show where the time goes:")
    print("    'check returns fixed' judges with a check that returns a prebuilt Verdict,")
    print("    'no evaluator' judges nothing (the decorator's own machinery only);")
    print("    'otel on' lines trace the call (refinekit.otel.instrument(): spans for the call,")
    print("    each attempt and each evaluation, into an SDK provider with no exporter); every")
    print("    other line runs with tracing off, the default.")
    print()
    print(
        f"targets: at min {'all met' if pass_min else 'NOT all met'}; "
        f"at median {'all met' if pass_med else 'NOT all met'}"
    )
    return pass_min and pass_med


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="a fast smoke run: a few hundred calls per case"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 25)")
    parser.add_argument(
        "--seconds", type=float, default=0.01, help="target duration of one timed loop"
    )
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 25)
    before = loadavg()
    with refinekit.testing.set_testing():  # the retry case's backoff is computed, never slept
        cases = build_cases()
        measure(cases, rounds, args.seconds, 200 if args.quick else None)
    report(cases, rounds, args.quick, (before, loadavg()))
    LOOP.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
