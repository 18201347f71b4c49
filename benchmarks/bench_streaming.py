"""CPU per streamed reply: refinekit's partial validation against the bare `openai` stream and
against instructor's `Partial` streaming, on the same chunks.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_streaming.py           # the figures in docs/streaming.md
    .venv/bin/python benchmarks/bench_streaming.py --quick   # a smoke run (1 and 10 KB, 1 round)

Each reply is an extraction's JSON at about 1, 10 and 100 KB, streamed in pieces of 4
characters (about a token each, as llama.cpp and the hosted APIs stream) as OpenAI's
`chat.completion.chunk` server-sent events. The real `openai` client reads them from an
in-memory HTTP transport (`httpx.MockTransport`: the SDK's whole path, its SSE decoder and
chunk models, without a socket), so what is timed is the client's and the readers' CPU. Four
readers of the same bytes:

- bare: `for chunk in client.chat.completions.create(stream=True)`, each delta's text
  appended (no validation at all: the floor);
- refinekit reader: the same stream through refinekit's stream reader (`streams.read`), each
  delta fed to a `PartialReader` (each top-level member validated once it closes), then the
  whole text parsed by `Parser` (the final value), the parts `@self_correct` reads a stream
  with;
- refinekit fn.stream: a `@self_correct(schema=...)` function that returns the same stream,
  consumed with `fn.stream(...)` to its `Final` (what a user pays: the decorator's flow, its
  usage counting and `stream` event, a `Partial` per completed field of a model);
- instructor: the same stream's delta texts through `Partial[Invoice].model_from_chunks`
  (instructor's partial streaming: a partial object per chunk, the final one validated).

The parser and the decorated function are made once per reply shape, before the timed rounds,
as a program makes them once at import. The readers' final values are checked equal before
timing.

Two shapes: an invoice object (a few fields and a `lines` list that makes up its size: four
readers) and a bare `list[Line]` (thousands of top-level members, each validated as it
closes; instructor's `Partial` takes a model only, so three readers). CPU is
`time.process_time` per reply (the process's CPU, so a busy machine's other work is not
counted), rounds interleaved (each reader in turn, the order reversed every other round), the
garbage collector on. On a shared machine another process on the same core slows every reader
while it runs (its caches, its share of the core), by up to a third in a round, so the median
of a few rounds moves by more than the differences measured. The table gives, per reader, the
fastest round (the one least disturbed: the others only add to it), the median beside it, and
the ratio of the fastest rounds to bare's in the same run.
Instructor re-reads the whole text at each chunk (its cost grows with the square of the
reply), so at 100 KB it is timed on one reply only (said in the table).

This is a report, not a gate: the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from datetime import date
from decimal import Decimal
from typing import Any, Literal

import httpx
import openai
from _machine import loadavg, machine
from pydantic import BaseModel

from refinekit import Final, self_correct
from refinekit._providers import sdk_streams as streams
from refinekit._structure.parse import Parser
from refinekit._structure.partial_validation import PartialReader

PIECE = 4
"""Characters per streamed chunk (about one token)."""


class Line(BaseModel):
    sku: str
    description: str
    quantity: int
    unit_price: Decimal


class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    issued: date
    total: Decimal
    lines: list[Line]


def line(i: int) -> dict[str, Any]:
    return {
        "sku": f"SKU-{i:05d}",
        "description": f'Paper, A4, 80 g/m2, box of {i % 7 + 1} reams, "office" grade',
        "quantity": i % 13 + 1,
        "unit_price": round(3.5 + i % 17 * 1.25, 2),
    }


def reply(shape: str, kilobytes: int) -> str:
    """A valid reply of about `kilobytes` KB (compact JSON, as models write it)."""
    size = kilobytes * 1000
    lines: list[dict[str, Any]] = []
    while len(json.dumps(lines)) < size - 150:
        lines.append(line(len(lines)))
    if shape == "list":
        return json.dumps(lines)
    head = {"number": "FA-32135", "vendor": "Baltic Paper", "currency": "EUR"}
    head |= {"issued": "2026-11-30", "total": 1234.5, "lines": lines}
    return json.dumps(head)


def sse(text: str) -> bytes:
    """The reply as OpenAI's chunk events: a role chunk, 4-character pieces, the finish."""

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk)}\n\n"

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": text[i : i + PIECE]}) for i in range(0, len(text), PIECE)]
    events += [event({}, "stop"), "data: [DONE]\n\n"]
    return "".join(events).encode()


def client_for(body: bytes) -> openai.OpenAI:
    """An `openai` client whose every request gets `body` back as a stream (no socket)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return openai.OpenAI(api_key="bench", base_url="http://bench.invalid/v1", http_client=http)


MESSAGES = [{"role": "user", "content": "Extract the invoice."}]


def open_stream(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(model="bench", messages=MESSAGES, stream=True)  # type: ignore[arg-type]


def bare(client: openai.OpenAI, schema: Any) -> Any:
    parts = []
    for chunk in open_stream(client):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


_parsers: dict[Any, Parser[Any]] = {}


def refinekit_reader(client: openai.OpenAI, schema: Any) -> Any:
    parser = _parsers.get(schema)
    if parser is None:  # made once, as `@self_correct` makes its parser when it decorates
        parser = _parsers[schema] = Parser(schema)
    partial: PartialReader[Any] = PartialReader(parser.adapter)
    parts = []
    shown = 0
    with streams.read(open_stream(client)) as deltas:
        for delta in deltas:
            if delta.text:
                parts.append(delta.text)
                progress = partial.feed(delta.text)
                if progress.failures:
                    raise AssertionError(progress.failures)
                shown += progress.changed
    parsed = parser.parse("".join(parts), repair=True)
    if not isinstance(parsed, tuple):
        raise AssertionError(parsed.summary)
    return parsed[0]


_decorated: dict[tuple[int, Any], Any] = {}


def fn_stream_reader(client: openai.OpenAI, schema: Any) -> Any:
    extract = _decorated.get((id(client), schema))
    if extract is None:  # decorated once, as at a program's import

        @self_correct(schema=schema)
        def extract(messages: list[dict[str, str]]) -> Any:
            return open_stream(client)

        _decorated[(id(client), schema)] = extract
    last = None
    for item in extract.stream(MESSAGES):
        last = item
    if not isinstance(last, Final):
        raise AssertionError(f"fn.stream ended with {last!r}, not a Final")
    return last.value


def instructor_reader(client: openai.OpenAI, schema: Any) -> Any:
    from instructor import Partial

    def texts() -> Iterator[str]:
        for chunk in open_stream(client):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    partials = Partial[schema].model_from_chunks(texts())  # type: ignore[index]
    return deque(partials, maxlen=1).pop()  # the last partial: the final, validated one


Reader = Callable[[openai.OpenAI, Any], Any]
READERS: dict[str, Reader] = {
    "bare": bare,
    "refinekit": refinekit_reader,
    "fn_stream": fn_stream_reader,
    "instructor": instructor_reader,
}
LABELS = {
    "bare": "bare openai stream",
    "refinekit": "refinekit reader",
    "fn_stream": "refinekit fn.stream",
    "instructor": "instructor Partial",
}


def cpu(reader: Reader, client: openai.OpenAI, schema: Any) -> float:
    """CPU seconds of one reply read."""
    gc.collect()
    start = time.process_time()
    reader(client, schema)
    return time.process_time() - start


def measure(shape: str, kilobytes: int, rounds: int, instructor_rounds: int) -> dict[str, Any]:
    text = reply(shape, kilobytes)
    body = sse(text)
    schema: Any = Invoice if shape == "invoice" else list[Line]
    names = ["bare", "refinekit", "fn_stream"] + (["instructor"] if shape == "invoice" else [])
    client = client_for(body)
    finals = {}
    for name in names:  # warm up: imports, schema building, caches (not timed)
        if name != "instructor" or kilobytes <= 10:
            finals[name] = READERS[name](client, schema)
    if finals["bare"] != text or finals["refinekit"] != finals["fn_stream"]:
        raise AssertionError("the readers did not read the same reply")
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            if name == "instructor" and r >= instructor_rounds:
                continue
            times[name].append(cpu(READERS[name], client, schema))
    client.close()
    _decorated.clear()  # the next reply's client is another one
    median = {name: statistics.median(t) for name, t in times.items() if t}
    fastest = {name: min(t) for name, t in times.items() if t}
    return {
        "shape": shape,
        "kilobytes": kilobytes,
        "chars": len(text),
        "chunks": body.count(b"\n\ndata: ") + 1,
        "median_s": median,
        "fastest_s": fastest,
        "runs": {name: len(t) for name, t in times.items()},
        "ratio": {name: fastest[name] / fastest["bare"] for name in fastest},
    }


def table(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| reply | size | chunks | reader | CPU per reply | median | reader / bare "
        "| added per chunk |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for res in results:
        med, best, ratio, runs = res["median_s"], res["fastest_s"], res["ratio"], res["runs"]
        shape = "invoice object" if res["shape"] == "invoice" else "list[Line]"
        for name in READERS:
            if name not in med:
                continue
            once = " (1 reply)" if runs[name] == 1 < max(runs.values()) else ""
            added = "-"
            if name != "bare":
                added = f"{(best[name] - best['bare']) / res['chunks'] * 1e6:.1f} us"
            rows.append(
                f"| {shape} | {res['kilobytes']} KB | {res['chunks']} | {LABELS[name]} "
                f"| {best[name] * 1000:.1f} ms{once} | {med[name] * 1000:.1f} ms "
                f"| {ratio[name]:.2f}x | {added} |"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 10 KB, one round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    sizes = [1, 10] if args.quick else [1, 10, 100]
    rounds = 1 if args.quick else args.rounds
    warnings.simplefilter("ignore")  # instructor's deprecation notices are not the figures
    print("## Streaming: CPU per reply\n")
    for line_ in machine(["openai", "instructor", "pydantic", "pydantic-core", "httpx"]):
        print(f"    {line_}")
    print(f"    load       {loadavg()} (1/5/15 min)")
    print(
        f"    rounds     {rounds} per reply, the fastest shown (and the median); pieces of "
        f"{PIECE} characters\n"
    )
    results = []
    for shape in ("invoice", "list"):
        for kb in sizes:
            results.append(measure(shape, kb, rounds, 1 if kb >= 100 else rounds))
    print("\n".join(table(results)))
    print(
        "\n`added per chunk`: the reader's CPU above the bare stream's, per chunk: flat across "
        "sizes when its cost per chunk does not grow with the reply's length."
    )
    summary = {
        f"{r['shape']}_{r['kilobytes']}kb": {k: round(v, 3) for k, v in r["ratio"].items()}
        for r in results
    }
    print(json.dumps({"ratios": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
