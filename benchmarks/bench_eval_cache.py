"""`refinekit eval --cache`: a golden set evaluated twice, and what the second run sends.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_eval_cache.py           # the figures in docs/judge_cache.md
    .venv/bin/python benchmarks/bench_eval_cache.py --quick   # a smoke run, a few seconds

`--cases` (60) questions, answered by a plain function and judged by a `criteria` judge with
two criteria (two judge requests per case), through `refinekit.eval.run(..., cache=True)` into
one SQLite run store. Every reply comes from `refinekit.testing.ScriptedOpenAI` (a real HTTP
server on 127.0.0.1); the judge's replies carry usage of about four characters a token of the
prompt they answer. Calls and tokens are counted on the server's side: the requests it
received and the usage it sent back.

The runs:

1. the first `--cache` run: every judge request sent;
2. the same eval again (`resume=False`: a new run): no judge request sent;
3. the same eval with one answer in ten changed: only those cases' requests sent;
4. `--repeat 2`: the first judgement of each answer is the plain run's (cached); the second
   is keyed apart and sent, so a cache never hides the judge's variability;
5. without `--cache`: every request sent, as before the cache existed.

This is a report, not a gate: the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from _machine import machine

import refinekit.eval
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

ANSWER = """
import os
import openai

client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-bench", max_retries=0)

def answer(question):
    reply = client.chat.completions.create(
        model="answer", messages=[{"role": "user", "content": question}]
    )
    return reply.choices[0].message.content
"""

JUDGE = """
import os
import openai
from refinekit import judges
from refinekit.judges import Criterion, JudgeModel

client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-bench", max_retries=0)
judge = judges.criteria(
    JudgeModel(client, "judge"),
    [
        Criterion("supported", "Is every claim of the answer supported by the context?"),
        Criterion("answers", "Does the answer answer the question?"),
    ],
)
"""


class Wire:
    """What the judge model was sent and sent back: requests and tokens."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.tokens = 0

    def reply(self, request: RecordedRequest) -> Reply:
        prompt = sum(len(str(m.get("content", ""))) for m in (request.body or {})["messages"])
        tokens = max(1, prompt // 4)
        with self.lock:
            self.calls += 1
            self.tokens += tokens + 1
        return Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, prompt_tokens=tokens, completion_tokens=1)

    def take(self) -> tuple[int, int]:
        with self.lock:
            taken = (self.calls, self.tokens)
            self.calls = self.tokens = 0
        return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="10 cases: a smoke run")
    args = parser.parse_args()
    cases = 10 if args.quick else args.cases
    questions = [f"What does policy {i} say about refunds?" for i in range(1, cases + 1)]
    changed = set(questions[::10])
    wire = Wire()
    print(f"refinekit eval --cache: {cases} cases, a criteria judge of 2 criteria")
    for line in machine(["refinekit", "openai"]):
        print(line)
    with tempfile.TemporaryDirectory() as folder, ScriptedOpenAI() as server:
        work = Path(folder)
        (work / "bench_answer.py").write_text(textwrap.dedent(ANSWER), encoding="utf-8")
        (work / "bench_judge.py").write_text(textwrap.dedent(JUDGE), encoding="utf-8")
        golden = work / "golden.csv"
        golden.write_text("question\n" + "".join(f'"{q}"\n' for q in questions), encoding="utf-8")
        answers = dict.fromkeys(questions, "Within 30 days of delivery, unused.")
        server.script(
            "answer",
            lambda r: answers[str((r.body or {})["messages"][-1]["content"])],
            times=None,
        )
        server.script("judge", wire.reply, times=None)
        os.environ["RK_BASE_URL"] = server.base_url
        sys.path.insert(0, str(work))
        db = work / "runs.db"

        def run(name: str, **options: object) -> tuple[str, int, int, dict[str, int] | None, float]:
            started = time.perf_counter()
            result = refinekit.eval.run(
                golden,
                target="bench_answer:answer",
                judge="bench_judge:judge",
                db=db,
                resume=False,
                **options,  # type: ignore[arg-type]
            )
            calls, tokens = wire.take()
            return name, calls, tokens, result.judge_cache, time.perf_counter() - started

        rows = [run("1. first run, --cache", cache=True)]
        rows.append(run("2. same eval again, --cache", cache=True))
        answers.update(dict.fromkeys(changed, "Within 14 days, receipt needed."))
        rows.append(run(f"3. {len(changed)} answers changed, --cache", cache=True))
        rows.append(run("4. --repeat 2, --cache", cache=True, repeat=2))
        rows.append(run("5. same eval, no --cache"))
    first_calls, first_tokens = rows[0][1], rows[0][2]
    print()
    print(f"{'run':<34} {'judge calls':>11} {'ratio':>6} {'judge tokens':>12} {'ratio':>6}  cache")
    for name, calls, tokens, cached, seconds in rows:
        hits = "-" if cached is None else f"{cached['hits']} hits, {cached['misses']} misses"
        print(
            f"{name:<34} {calls:>11} {calls / first_calls:>6.2f} {tokens:>12} "
            f"{tokens / first_tokens:>6.2f}  {hits} ({seconds:.1f} s)"
        )


if __name__ == "__main__":
    main()
