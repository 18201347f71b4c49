"""The judge cache: a golden set judged again costs no judge call.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_judge_cache.py           # the figures in docs/judge_cache.md
    .venv/bin/python benchmarks/bench_judge_cache.py --quick   # a smoke run, a few seconds

A golden-set-like loop: `--cases` (40) synthetic labelled answers (`_synthetic.judging_items`),
each judged by a `criteria` judge with two model criteria and a `rating` judge: three judge
requests per case. Every reply comes from `refinekit.testing.ScriptedOpenAI`, a real HTTP
server on 127.0.0.1, after a `--latency` (20 ms) delay; its usage counts the prompt's tokens
the way the server does (about four characters a token). Calls and tokens are counted on the
wire (`_http_count`: every POST to /chat/completions and the usage of its response body),
not from what refinekit reports.

The passes, each with its own `SQLiteCache` object on one file (as separate runs would be):

1. the first run: every request a miss;
2. the same run again: every request a hit, the same verdicts;
3. the run with one answer in ten changed: only those cases' requests miss;
4. a second opinion under `cache_salt("repeat=2")` (what an eval's repeats do): every request
   misses again, so a cache never hides the judge's variability.

"ratio" is the pass's calls (or tokens) over the first pass's. This is a report, not a gate:
the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from _http_count import Counter, Tally, http_client
from _machine import machine
from _synthetic import JudgingItem, judging_items

import refinekit
from refinekit import ContextDocument, EvaluationRequest, Verdict, judges
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

JUDGE = "judge"
CRITERIA = [
    judges.Criterion("supported", "Is every claim of the answer supported by the context?"),
    judges.Criterion("answers", "Does the answer answer the question?"),
]


@dataclass
class Pass:
    name: str
    judgements: int
    wire: Tally
    hits: int
    misses: int
    seconds: float
    verdicts: list[Verdict]


def reply_for(latency: float, labels: dict[str, str]) -> object:
    """The scripted judge: passes the answers labelled "pass", after `latency` seconds."""

    def reply(request: RecordedRequest) -> Reply:
        body = request.body or {}
        text = str(body["messages"][-1]["content"])
        answer = text.split("<answer>\n", 1)[1].split("\n</answer>", 1)[0]
        good = labels.get(answer, "fail") == "pass"
        if body.get("response_format") is not None:  # the rating judge (instructor JSON)
            rating, why = (4, "Correct and supported.") if good else (2, "It changes a fact.")
            return Reply.delay(latency, f'{{"rating": {rating}, "feedback": "{why}"}}')
        p = 0.93 if good else 0.08
        word = "Yes" if good else "No"
        return Reply.delay(latency, Reply.text(word, {"Yes": p, "No": round(1 - p, 6)}))

    return reply


def request_of(item: JudgingItem, answer: str | None = None) -> EvaluationRequest:
    return EvaluationRequest(
        question=item.question,
        answer=item.answer if answer is None else answer,
        context=(ContextDocument(text=item.context),),
    )


@contextlib.contextmanager
def judge_model(server: ScriptedOpenAI, counter: Counter, path: Path) -> Iterator[Any]:
    with (
        openai.OpenAI(
            base_url=server.base_url,
            api_key="bench",
            max_retries=0,
            http_client=http_client(counter, timeout=30),
        ) as client,
        judges.SQLiteCache(path) as cache,
    ):
        yield judges.JudgeModel(client, JUDGE, cache=cache), cache


def run_pass(
    name: str,
    server: ScriptedOpenAI,
    path: Path,
    requests: list[EvaluationRequest],
    salt: str | None = None,
) -> Pass:
    counter = Counter()
    with judge_model(server, counter, path) as (jm, cache):
        grade = [judges.criteria(jm, CRITERIA), judges.rating(jm)]
        started = time.perf_counter()
        verdicts: list[Verdict] = []
        with contextlib.ExitStack() as stack:
            if salt is not None:
                stack.enter_context(judges.cache_salt(salt))
            for request in requests:
                with refinekit.job():
                    verdicts.extend(judge.evaluate(request) for judge in grade)
        seconds = time.perf_counter() - started
        return Pass(
            name, len(verdicts), counter.snapshot(), cache.hits, cache.misses, seconds, verdicts
        )


def ratio(value: int, first: int) -> str:
    return f"{value / first:.2f}" if first else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per judge reply")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 6 cases, no delay")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.latency = 6, 0.0

    items = judging_items(args.cases, seed=15)
    changed = {i: f"{item.answer} (edited)" for i, item in enumerate(items) if i % 10 == 3}
    labels = {item.answer: item.label for item in items}
    labels.update({answer: "fail" for answer in changed.values()})
    original = [request_of(item) for item in items]
    edited = [request_of(item, changed.get(i)) for i, item in enumerate(items)]

    print("refinekit judge cache: a golden set judged again")
    for line in machine(["refinekit", "openai", "instructor", "pydantic"]):
        print(line)
    print(
        f"cases      {args.cases} (criteria: 2 model criteria, and rating: 3 judge requests "
        f"per case); judge latency {args.latency * 1000:.0f} ms; SQLiteCache on one file"
    )
    print()

    with ScriptedOpenAI() as server, tempfile.TemporaryDirectory() as folder:
        server.script(JUDGE, reply_for(args.latency, labels), times=None)
        path = Path(folder) / "judge-cache.sqlite"
        passes = [
            run_pass("1. first run", server, path, original),
            run_pass("2. same run again", server, path, original),
            run_pass(f"3. {len(changed)} of {len(items)} answers changed", server, path, edited),
            run_pass("4. repeat 2 (cache_salt)", server, path, original, salt="repeat=2"),
        ]

    first = passes[0]
    header = (
        f"{'pass':<30} {'verdicts':>8} {'calls':>6} {'ratio':>6} {'prompt tok':>10} "
        f"{'compl tok':>9} {'ratio':>6} {'hits':>5} {'misses':>6} {'wall s':>7}"
    )
    print(header)
    print("-" * len(header))
    for p in passes:
        tokens = p.wire.prompt_tokens + p.wire.completion_tokens
        first_tokens = first.wire.prompt_tokens + first.wire.completion_tokens
        calls_ratio = ratio(p.wire.calls, first.wire.calls)
        print(
            f"{p.name:<30} {p.judgements:>8} {p.wire.calls:>6} {calls_ratio:>6} "
            f"{p.wire.prompt_tokens:>10} {p.wire.completion_tokens:>9} "
            f"{ratio(tokens, first_tokens):>6} {p.hits:>5} {p.misses:>6} {p.seconds:>7.2f}"
        )
    print()
    print(f"pass 2 verdicts identical to pass 1: {passes[1].verdicts == first.verdicts}")
    print(f"pass 4 verdicts identical to pass 1: {passes[3].verdicts == first.verdicts}")
    print("errors on the wire:", sum(p.wire.errors for p in passes))


if __name__ == "__main__":
    main()
