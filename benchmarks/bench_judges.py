"""Model judges over HTTP: wall times against floors measured in the same run.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_judges.py           # the figures in docs/performance.md
    .venv/bin/python benchmarks/bench_judges.py --quick   # a smoke run, a few seconds

Every reply comes from `refinekit.testing.ScriptedOpenAI`, a real HTTP server on 127.0.0.1,
after a 50 ms delay (`Reply.delay(0.05, ...)`): the latency of a fast model. By default the
server runs in a child process (this script with `--serve`), so its threads do not compete
for this process's GIL and the client's CPU time is the client's alone; `--server thread`
runs it in-process instead. Every figure is paired with a floor that makes the same HTTP
requests with the real `openai` client and no refinekit, timed in the same run, in
interleaved rounds (the order of the lines rotates from round to round):

- A. One `judges.criteria(jm, [4 model criteria])` evaluation, sync (`evaluate`: a thread
  per criterion) and async (`aevaluate`: a task per criterion), against one bare
  `client.chat.completions.create` call (one judge latency). For scale, the same four
  requests made bare, one after another (what no concurrency would cost) and all at once
  (threads / `asyncio.gather`: the least four requests can cost).
- B. `--jobs` (200) concurrent judged jobs under `asyncio.gather`. A job is an `async def`
  answer function that makes one HTTP call to an "answer" model and returns its text,
  decorated with `@retry_on_low_quality(evaluator=judges.relevancy(jm))`, which makes one
  more HTTP call to the "judge" model: two requests per job, as in production. The floor is
  a bare asyncio loop making the same two requests per job (the same bodies: the judge
  prompt is built with plain f-strings and checked to be identical) and reading the judge's
  yes/no, at the same concurrency. Each side has ONE `openai.AsyncOpenAI` client, made once
  and reused by every job, with the same settings (client retries off; a connection pool
  that keeps 1000 connections alive, so 200 concurrent requests never wait for a
  connection nor reconnect between rounds).

"min" is the best round, "med" the median over rounds; "ratio" is figure / floor, at min
min(figure) / min(floor) and at med the median of the per-round ratios. B is bound by the
client's CPU (two openai requests per job) and its rounds vary by tens of percent with the
same work, so its median is the figure to read; the notes print every round of B, and
`--profile` adds a cProfile of one refinekit round with refinekit's own share of the time.
This is a report, not a gate: the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from _machine import loadavg, machine

import refinekit
from refinekit import (
    ContextDocument,
    EvaluationRequest,
    judges,
    record_context,
    retry_on_low_quality,
)
from refinekit._engine.prompts import DATA_RULE
from refinekit.judges._yesno import RELEVANCY_TASK
from refinekit.testing import Reply, ScriptedOpenAI

try:  # the HTTP library the openai client is built on: httpx2 in newer releases, else httpx
    import httpx2 as httpx

    HTTPX = "httpx2"
except ImportError:  # pragma: no cover - depends on the openai release
    import httpx  # type: ignore[no-redef]

    HTTPX = "httpx"

LATENCY_S = 0.05
"""The latency measured against: every scripted reply is served after 50 ms."""

JUDGE_TARGET = 1.5
"""A: "about one judge latency, not four": at most 1.5x one bare call (four in turn: ~4x)."""

JOBS_TARGET = 1.2
"""B: "within 1.2x of that floor"."""

JUDGE = "judge"
ANSWER = "answer"
API_KEY = "scripted-key"
LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
TIMEOUT_S = 60.0

QUESTION = "Can I get a refund for the headphones I ordered last week?"
DOCUMENT = ContextDocument(
    text="An unused order may be refunded within seven days of delivery. Opened items are "
    "exchanged, not refunded.",
    source="docs/policies/refunds.md",
)
ANSWER_TEXT = "Yes: an unused order may be refunded within seven days of delivery."
ANSWER_SYSTEM = "Answer the customer's question from the policy excerpt only."
CRITERIA = [
    judges.Criterion(
        "keeps_conditions",
        "Does the answer keep every condition the context puts on the refund?",
        when_false="Keep every condition on the refund.",
    ),
    judges.Criterion(
        "grounded",
        "Is every claim in the answer supported by the context?",
        when_false="Say only what the policy says.",
    ),
    judges.Criterion(
        "answers",
        "Does the answer address the question asked?",
        when_false="Answer the question asked.",
    ),
    judges.Criterion(
        "polite",
        "Is the answer polite and free of blame?",
        when_false="Be polite; blame no one.",
    ),
]
REQUEST = EvaluationRequest(question=QUESTION, answer=ANSWER_TEXT, context=(DOCUMENT,))


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------


def script(server: ScriptedOpenAI, latency: float, length: int) -> None:
    """`length` replies per model, each after `latency` seconds."""
    judge_reply = Reply.delay(latency, Reply.text("Yes", top_logprobs={"Yes": 0.95, "No": 0.05}))
    server.script(JUDGE, [judge_reply] * length)
    server.script(ANSWER, [Reply.delay(latency, ANSWER_TEXT)] * length)


def script_length(judge_rounds: int, job_rounds: int, jobs: int) -> int:
    """Replies per model that the run needs, with room to spare."""
    per_judge_round = 2 * (4 + 4 + 4) + 6  # criteria, in turn, at once (sync, async); floors
    per_job_round = 2 * jobs  # one judge (or answer) request per job, on both sides
    return (judge_rounds + 2) * per_judge_round + (job_rounds + 5) * per_job_round + 100


def serve_forever(latency: float, length: int) -> int:
    """The child process (`--serve`): print the base URL, serve until stdin closes."""
    with ScriptedOpenAI() as server:
        script(server, latency, length)
        print(server.base_url, flush=True)
        sys.stdin.read()
    return 0


class ScriptedServer:
    """A scripted server for the timed part: in a child process (default), or in-process.

    The child starts (imports, binds) while this process does other work; `base_url`
    waits for it.
    """

    def __init__(self, mode: str, latency: float, length: int) -> None:
        self.mode = mode
        self.latency = latency
        self.length = length
        self._child: subprocess.Popen[str] | None = None
        self._server: ScriptedOpenAI | None = None
        self._base_url: str | None = None

    def __enter__(self) -> ScriptedServer:
        if self.mode == "thread":
            self._server = ScriptedOpenAI().__enter__()
            script(self._server, self.latency, self.length)
            self._base_url = self._server.base_url
        else:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve"]
            command += ["--latency", str(self.latency), "--script-length", str(self.length)]
            self._child = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        return self

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            assert self._child is not None
            assert self._child.stdout is not None
            line = self._child.stdout.readline().strip()
            if not line.startswith("http://"):
                raise RuntimeError("the scripted server process did not start")
            self._base_url = line
        return self._base_url

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.__exit__(None, None, None)
        if self._child is not None:
            assert self._child.stdin is not None
            self._child.stdin.close()  # the child's signal to stop
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
            if self._child.stdout is not None:
                self._child.stdout.close()


# ---------------------------------------------------------------------------------------------
# Clients and the requests the floors make (no refinekit)
# ---------------------------------------------------------------------------------------------


def sync_client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url,
        api_key=API_KEY,
        max_retries=0,
        timeout=TIMEOUT_S,
        http_client=openai.DefaultHttpxClient(limits=LIMITS),
    )


def async_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key=API_KEY,
        max_retries=0,
        timeout=TIMEOUT_S,
        http_client=openai.DefaultAsyncHttpxClient(limits=LIMITS),
    )


def context_block(doc: ContextDocument) -> str:
    return f"<context>\n[1] (source: {doc.source})\n{doc.text}\n</context>"


def criterion_kwargs(question: str, answer: str, criterion: str) -> dict[str, Any]:
    """One criterion's request, written by hand: what a user without refinekit would send."""
    content = (
        f"Answer this yes/no question about the data below: {criterion}\n\n"
        f"<question>\n{question}\n</question>\n\n{context_block(DOCUMENT)}\n\n"
        f"<answer>\n{answer}\n</answer>\n\nReply with one word: YES or NO."
    )
    return {
        "model": JUDGE,
        "messages": [
            {"role": "system", "content": DATA_RULE},
            {"role": "user", "content": content},
        ],
        "temperature": 0.0,
        "max_tokens": 4,
        "seed": 42,
        "logprobs": True,
        "top_logprobs": 5,
    }


def answer_kwargs(question: str) -> dict[str, Any]:
    return {
        "model": ANSWER,
        "messages": [
            {"role": "system", "content": ANSWER_SYSTEM},
            {"role": "user", "content": f"Policy: {DOCUMENT.text}\n\nQuestion: {question}"},
        ],
        "temperature": 0.0,
    }


def relevancy_kwargs(question: str, answer: str) -> dict[str, Any]:
    content = (
        f"{RELEVANCY_TASK}\n\n<question>\n{question}\n</question>\n\n"
        f"{context_block(DOCUMENT)}\n\n<answer>\n{answer}\n</answer>"
    )
    return {
        "model": JUDGE,
        "messages": [
            {"role": "system", "content": DATA_RULE},
            {"role": "user", "content": content},
        ],
        "temperature": 0.0,
        "max_tokens": 8,
        "seed": 42,
    }


def questions(n: int) -> list[str]:
    return [f"{QUESTION} (order {i})" for i in range(n)]


def make_bare_job(client: openai.AsyncOpenAI) -> Callable[[str], Awaitable[str | None]]:
    """A judged job without refinekit: answer, ask the judge, read its yes/no."""

    async def bare_job(question: str) -> str | None:
        reply = await client.chat.completions.create(**answer_kwargs(question))
        text = reply.choices[0].message.content or ""
        verdict = await client.chat.completions.create(**relevancy_kwargs(question, text))
        said = (verdict.choices[0].message.content or "").strip().lower()
        return text if said.startswith("yes") else None

    return bare_job


def make_refinekit_job(client: openai.AsyncOpenAI) -> Callable[[str], Awaitable[str]]:
    """The same job with refinekit: the answer function, judged by `judges.relevancy`."""
    judge = judges.relevancy(judges.JudgeModel(client, JUDGE))

    @retry_on_low_quality(evaluator=judge)
    async def answer(question: str, feedback: str | None = None) -> str:
        record_context(DOCUMENT)
        reply = await client.chat.completions.create(**answer_kwargs(question))
        return reply.choices[0].message.content or ""

    return answer


def same_requests() -> str:
    """Check, on an in-process server without delay, that both sides send the same bodies."""
    with ScriptedOpenAI() as server:
        script(server, 0.0, 100)
        seen: dict[str, list[Any]] = {}

        async def one_each() -> None:
            client = async_client(server.base_url)
            n = len(server.requests)
            assert await make_refinekit_job(client)(QUESTION) == ANSWER_TEXT
            seen["refinekit job"] = [r.body for r in server.requests[n:]]
            n = len(server.requests)
            assert await make_bare_job(client)(QUESTION) == ANSWER_TEXT
            seen["bare job"] = [r.body for r in server.requests[n:]]
            n = len(server.requests)
            jm = judges.JudgeModel(client, JUDGE)
            verdict = await judges.criteria(jm, CRITERIA).aevaluate(REQUEST)
            assert verdict.passed
            assert all(c.source == "logprobs" for c in verdict.criteria)
            seen["criteria"] = sorted(
                (r.body for r in server.requests[n:]),
                key=str,
            )
            n = len(server.requests)
            for c in CRITERIA:
                assert isinstance(c.question, str)
                await client.chat.completions.create(
                    **criterion_kwargs(QUESTION, ANSWER_TEXT, c.question)
                )
            seen["bare criteria"] = sorted(
                (r.body for r in server.requests[n:]),
                key=str,
            )
            await client.close()

        asyncio.run(one_each())
    differ = [
        name
        for name, (a, b) in {
            "judged job": (seen["refinekit job"], seen["bare job"]),
            "criteria": (seen["criteria"], seen["bare criteria"]),
        }.items()
        if a != b
    ]
    if differ:
        return "DIFFER for " + ", ".join(differ) + ": the floors are not the same calls"
    return "identical on both sides (checked on an in-process server before timing)"


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


@dataclass
class Line:
    name: str
    floor_name: str
    figure: list[float] = field(default_factory=list)  # seconds, one per round
    floor: list[float] = field(default_factory=list)
    target: float | None = None  # the most figure / floor may be; None: no target
    cpu_figure: list[float] = field(default_factory=list)
    cpu_floor: list[float] = field(default_factory=list)


def timed_sync(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def timed_async(fn: Callable[[], Awaitable[Any]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def measure_criteria(
    loop: asyncio.AbstractEventLoop, base_url: str, rounds: int, warmups: int
) -> list[Line]:
    sync = sync_client(base_url)
    aio = async_client(base_url)
    judge_sync = judges.criteria(judges.JudgeModel(sync, JUDGE), CRITERIA)
    judge_async = judges.criteria(judges.JudgeModel(aio, JUDGE), CRITERIA)
    kwargs = [
        criterion_kwargs(QUESTION, ANSWER_TEXT, c.question)
        for c in CRITERIA
        if isinstance(c.question, str)
    ]

    def criteria_sync() -> None:
        verdict = judge_sync.evaluate(REQUEST)
        assert verdict.passed, verdict

    async def criteria_async() -> None:
        verdict = await judge_async.aevaluate(REQUEST)
        assert verdict.passed, verdict

    def one_sync() -> None:
        sync.chat.completions.create(**kwargs[0])

    async def one_async() -> None:
        await aio.chat.completions.create(**kwargs[0])

    def four_in_turn_sync() -> None:
        for k in kwargs:
            sync.chat.completions.create(**k)

    async def four_in_turn_async() -> None:
        for k in kwargs:
            await aio.chat.completions.create(**k)

    def four_at_once_sync() -> None:
        with ThreadPoolExecutor(len(kwargs)) as pool:
            list(pool.map(lambda k: sync.chat.completions.create(**k), kwargs))

    async def four_at_once_async() -> None:
        await asyncio.gather(*(aio.chat.completions.create(**k) for k in kwargs))

    one_s, one_a = "one bare call (sync)", "one bare call (async)"
    lines = [
        (Line("criteria, 4 model criteria (sync)", one_s, target=JUDGE_TARGET), criteria_sync),
        (Line("criteria, 4 model criteria (async)", one_a, target=JUDGE_TARGET), criteria_async),
        (Line("  4 bare calls in turn (sync)", one_s), four_in_turn_sync),
        (Line("  4 bare calls in turn (async)", one_a), four_in_turn_async),
        (Line("  4 bare calls at once (threads)", one_s), four_at_once_sync),
        (Line("  4 bare calls at once (gather)", one_a), four_at_once_async),
    ]
    floors: dict[str, Callable[[], Any]] = {one_s: one_sync, one_a: one_async}
    is_async = {criteria_async, one_async, four_in_turn_async, four_at_once_async}

    def run(fn: Callable[[], Any]) -> float:
        if fn in is_async:
            return loop.run_until_complete(timed_async(fn))
        return timed_sync(fn)

    for _ in range(warmups):  # warm-up: connections open, code paths warm
        for _line, fn in lines:
            run(fn)
        for fn in floors.values():
            run(fn)
    gc.collect()
    gc.freeze()  # what exists now is never scanned again: gc.collect() goes from ~85 ms to ~0
    for r in range(rounds):
        shift = r % len(lines)
        for line, fn in lines[shift:] + lines[:shift]:
            floor_fn = floors[line.floor_name]
            if r % 2 == 0:
                line.figure.append(run(fn))
                line.floor.append(run(floor_fn))
            else:
                line.floor.append(run(floor_fn))
                line.figure.append(run(fn))
    sync.close()
    loop.run_until_complete(aio.close())
    return [line for line, _ in lines]


async def measure_jobs(
    base_url: str, jobs: int, rounds: int, profile: bool
) -> tuple[Line, cProfile.Profile | None]:
    refinekit_client = async_client(base_url)  # one client per side, made once, reused
    bare_client = async_client(base_url)
    sides: dict[str, Callable[[str], Awaitable[Any]]] = {
        "refinekit": make_refinekit_job(refinekit_client),
        "bare": make_bare_job(bare_client),
    }
    qs = questions(jobs)

    async def round_of(side: str) -> tuple[float, float]:
        job = sides[side]
        gc.collect()
        cpu = time.process_time()
        start = time.perf_counter()
        answers = await asyncio.gather(*(job(q) for q in qs))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        assert answers == [ANSWER_TEXT] * jobs, "a job did not return the judged answer"
        return wall, cpu

    for side in ("refinekit", "bare", "refinekit", "bare"):  # warm-up: every connection open
        await round_of(side)
    gc.collect()
    gc.freeze()
    line = Line(
        f"{jobs} judged jobs (answer + judge)",
        "bare asyncio, same calls",
        target=JOBS_TARGET,
    )
    for r in range(rounds):
        order = ("refinekit", "bare") if r % 2 == 0 else ("bare", "refinekit")
        for side in order:
            wall, cpu = await round_of(side)
            if side == "refinekit":
                line.figure.append(wall)
                line.cpu_figure.append(cpu)
            else:
                line.floor.append(wall)
                line.cpu_floor.append(cpu)
    profiler = None
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await round_of("refinekit")
        profiler.disable()
    await refinekit_client.close()
    await bare_client.close()
    return line, profiler


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def ratios(line: Line) -> tuple[float, float]:
    at_min = min(line.figure) / min(line.floor)
    at_med = statistics.median(f / b for f, b in zip(line.figure, line.floor, strict=True))
    return at_min, at_med


def result(line: Line, at_min: float, at_med: float) -> str:
    if line.target is None:
        return "-"
    if at_min <= line.target and at_med <= line.target:
        return "PASS"
    if at_min <= line.target:
        return "PASS at min, not at median"
    if at_med <= line.target:
        return "PASS at median, not at min"
    return "FAIL"


def report(lines: list[Line], jobs_line: Line | None, header: list[str]) -> bool:
    for text in header:
        print(text)
    print()
    head = (
        f"{'line':36} | {'figure (ms)':^15} | {'floor (ms)':^15} | {'floor is':25} | "
        f"{'ratio':^11} | {'target':7} | result"
    )
    sub = (
        f"{'':36} | {'min':>7} {'med':>7} | {'min':>7} {'med':>7} | {'':25} | "
        f"{'min':>5} {'med':>5} | {'':7} |"
    )
    print(head)
    print(sub)
    print("-" * len(head))
    met_min = met_med = True
    rows = [*lines, *([jobs_line] if jobs_line is not None else [])]
    for line in rows:
        at_min, at_med = ratios(line)
        outcome = result(line, at_min, at_med)
        if line.target is not None:
            met_min = met_min and at_min <= line.target
            met_med = met_med and at_med <= line.target
        target = f"<= {line.target:.1f}x" if line.target is not None else "-"
        ms = 1e3
        print(
            f"{line.name:36} | {min(line.figure) * ms:>7.1f} "
            f"{statistics.median(line.figure) * ms:>7.1f} | {min(line.floor) * ms:>7.1f} "
            f"{statistics.median(line.floor) * ms:>7.1f} | {line.floor_name:25} | "
            f"{at_min:>5.2f} {at_med:>5.2f} | {target:7} | {outcome}"
        )
        if line.cpu_figure:
            cpu = Line(line.name, line.floor_name, line.cpu_figure, line.cpu_floor)
            c_min, c_med = ratios(cpu)
            print(
                f"{'  client CPU time of those rounds':36} | {min(cpu.figure) * ms:>7.1f} "
                f"{statistics.median(cpu.figure) * ms:>7.1f} | {min(cpu.floor) * ms:>7.1f} "
                f"{statistics.median(cpu.floor) * ms:>7.1f} | {'CPU time of the floor':25} | "
                f"{c_min:>5.2f} {c_med:>5.2f} | {'-':7} | -"
            )
    print()
    print("Notes")
    print("  min: best round; med: median over rounds. ratio = figure / floor: at min")
    print("    min(figure) / min(floor), at med the median of the per-round ratios.")
    print(f"  targets: criteria <= {JUDGE_TARGET}x one bare call ('about one judge latency,")
    print(f"    not four'); judged jobs <= {JOBS_TARGET}x the bare asyncio loop.")
    print("  indented lines have no target: the four requests made bare, in turn (what no")
    print("    concurrency costs) and at once (the least four requests can cost), and the")
    print("    client process's CPU time (time.process_time) in the job rounds.")
    by_name = {line.name: line for line in lines}
    for kind, at_once in (("sync", "threads"), ("async", "gather")):
        crit = by_name.get(f"criteria, 4 model criteria ({kind})")
        bare = by_name.get(f"  4 bare calls at once ({at_once})")
        if crit is not None and bare is not None:
            added = statistics.median(crit.figure) - statistics.median(bare.figure)
            print(
                f"  criteria ({kind}) minus 4 bare calls at once ({at_once}): "
                f"{added * 1e3:+.1f} ms (medians)"
            )
    if jobs_line is not None:
        n = int(jobs_line.name.split()[0])
        per_job = (
            statistics.median(jobs_line.cpu_figure) - statistics.median(jobs_line.cpu_floor)
        ) / n
        print(
            f"  client CPU per judged job: refinekit "
            f"{statistics.median(jobs_line.cpu_figure) / n * 1e3:.2f} ms, bare "
            f"{statistics.median(jobs_line.cpu_floor) / n * 1e3:.2f} ms "
            f"({per_job * 1e3:+.2f} ms, medians)"
        )
        paired = sorted(f / b for f, b in zip(jobs_line.figure, jobs_line.floor, strict=True))
        quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
        totals = sum(jobs_line.figure) / sum(jobs_line.floor)
        print(
            f"  B per-round ratios: quartiles {quartiles[0]:.2f} / {quartiles[1]:.2f} / "
            f"{quartiles[2]:.2f}, range {paired[0]:.2f} to {paired[-1]:.2f}; "
            f"ratio of the totals {totals:.2f}"
        )
        print("  B rounds in run order, wall ms refinekit/bare (ratio):")
        pairs = [
            f"{f * 1e3:.0f}/{b * 1e3:.0f} ({f / b:.2f})"
            for f, b in zip(jobs_line.figure, jobs_line.floor, strict=True)
        ]
        for i in range(0, len(pairs), 5):
            print("    " + "  ".join(pairs[i : i + 5]))
    print()
    print(
        f"targets: at min {'all met' if met_min else 'NOT all met'}; "
        f"at median {'all met' if met_med else 'NOT all met'}"
    )
    return met_min and met_med


def print_profile(profiler: cProfile.Profile, jobs: int) -> None:
    """Where one profiled refinekit round of B spends its time, and refinekit's own share."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    package = str(Path(refinekit.__file__).resolve().parent)
    own = total = 0.0
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, tottime, _, _) in table.items():
        total += tottime
        if filename.startswith(package):
            own += tottime
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(package, 20)
    print()
    print(f"Profile of one refinekit round of B ({jobs} jobs; cProfile, which inflates every")
    print("function call, so read shares, not times)")
    print(
        f"  refinekit's own functions: {own:.3f} s of {total:.3f} s profiled "
        f"({own / total:.1%}), {own / jobs * 1e3:.2f} ms per job; the rest is the openai "
        f"client, {HTTPX}, httpcore and asyncio"
    )
    print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run in a few seconds: figures not meaningful"
    )
    parser.add_argument("--judge-rounds", type=int, default=None, help="A rounds (default 30)")
    parser.add_argument("--job-rounds", type=int, default=None, help="B rounds (default 20)")
    parser.add_argument("--jobs", type=int, default=None, help="concurrent jobs (default 200)")
    parser.add_argument(
        "--latency", type=float, default=LATENCY_S, help="seconds before every reply (0.05)"
    )
    parser.add_argument(
        "--server",
        choices=("process", "thread"),
        default="process",
        help="run the scripted server in a child process (default) or in this process",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile one refinekit round of B"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--script-length", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve_forever(args.latency, args.script_length)
    judge_rounds = args.judge_rounds or (1 if args.quick else 30)
    job_rounds = args.job_rounds or (1 if args.quick else 20)
    jobs = args.jobs or (10 if args.quick else 200)

    load_before = loadavg()
    started = time.perf_counter()
    length = script_length(judge_rounds, job_rounds, jobs)
    loop = asyncio.new_event_loop()
    try:
        with ScriptedServer(args.server, args.latency, length) as server:
            same = same_requests()  # meanwhile, the server process starts
            lines = measure_criteria(loop, server.base_url, judge_rounds, 1 if args.quick else 2)
            jobs_line, profiler = loop.run_until_complete(
                measure_jobs(server.base_url, jobs, job_rounds, args.profile)
            )
    finally:
        loop.close()
    elapsed = time.perf_counter() - started

    mode = "quick smoke run (figures not meaningful)" if args.quick else "full run"
    where = "a child process" if args.server == "process" else "this process (threads)"
    header = [
        "refinekit judges over HTTP",
        "==========================",
        *machine(["refinekit", "openai", HTTPX, "pydantic", "instructor"]),
        f"run        {mode}; {judge_rounds} rounds of A, {job_rounds} rounds of B, "
        f"{elapsed:.0f} s in all",
        f"server     ScriptedOpenAI in {where}, every reply after {args.latency * 1e3:.0f} ms",
        f"clients    openai, max_retries=0, {HTTPX}.Limits(max_connections=1000, "
        "max_keepalive_connections=1000); B: one AsyncOpenAI per side",
        f"B jobs     {jobs} at once (asyncio.gather); a job = 1 answer call + 1 judge call",
        f"requests   {same}",
        f"load avg   {load_before} before, {loadavg()} after (1/5/15 min)",
    ]
    report(lines, jobs_line, header)
    if profiler is not None:
        print_profile(profiler, jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
