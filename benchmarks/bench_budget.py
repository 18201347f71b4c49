"""The runaway scenario: an always-failing judge with `max_retries=10`, with and without a budget.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_budget.py          # the figures in docs
    .venv/bin/python benchmarks/bench_budget.py --quick  # the same (it takes a second)

Over HTTP to the scripted OpenAI-compatible server (`refinekit.testing.ScriptedOpenAI`), with
the real `openai` client: a function asks the answering model, `@retry_on_low_quality` judges
each answer with a relevancy judge that always says "No.", and `max_retries=10` allows 11
attempts. Calls and tokens are counted on the wire (every POST to `/chat/completions` and the
`usage` of its response, `_http_count.py`), not from refinekit's own counters. Token counts are
the server's stand-ins (words of the messages plus one per message), so every figure is exact
and the same on every machine; nothing is timed.

Rows: no budget; `Budget(max_calls=5)`; `Budget(max_tokens=...)`; `Budget(max_cost=...)` with
prices. Each budgeted row says where it stopped: before a call (the call not made) or after a
call that went over.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import openai
from _http_count import Counter, http_client
from _machine import machine

import refinekit
from refinekit import Budget, BudgetExceeded, Prices, judges
from refinekit.testing import Reply, ScriptedOpenAI

MAX_RETRIES = 10
PRICES = Prices({"answer-model": (0.40, 1.60), "judge-model": (0.15, 0.60)})
QUESTION = "How long does a refund take for an unused order bought online last month?"
ANSWER = (
    "Refunds for unused orders are paid back to the original payment method within 14 days "
    "of the return reaching the warehouse."
)


def run(server: ScriptedOpenAI, budget: Budget | None) -> tuple[str, int, int, int, int, str]:
    """One decorated call; (label, answer calls, judge calls, prompt, completion, how it ended)."""
    server.reset()
    server.script("answer-model", Reply.text(ANSWER), times=None)
    server.script("judge-model", Reply.text("No."), times=None)
    counter = Counter()
    with openai.OpenAI(
        base_url=server.base_url,
        api_key="bench",
        max_retries=0,
        http_client=http_client(counter, timeout=10),
    ) as client:
        relevancy = judges.relevancy(judges.JudgeModel(client, "judge-model"))

        def answer(question: str, feedback: str | None = None) -> Any:
            prompt = question if feedback is None else f"{question}\n\nFix this: {feedback}"
            return client.chat.completions.create(
                model="answer-model", messages=[{"role": "user", "content": prompt}]
            )

        fn = refinekit.retry_on_low_quality(
            evaluator=relevancy, max_retries=MAX_RETRIES, budget=budget
        )(answer)
        try:
            fn(QUESTION)
        except BudgetExceeded as stopped:
            when = (
                f"after a call went over ({stopped.limit})"
                if stopped.needed is None
                else f"before {stopped.planned} ({stopped.limit})"
            )
            ended = f"BudgetExceeded {when}"
        except refinekit.LowQualityAnswer as exhausted:
            ended = f"LowQualityAnswer after {len(exhausted.attempts)} attempts"
    tally = counter.snapshot()
    answers = len(server.requests_for("answer-model"))
    judge_calls = len(server.requests_for("judge-model"))
    assert answers + judge_calls == tally.calls
    label = "no budget" if budget is None else _label(budget)
    return label, answers, judge_calls, tally.prompt_tokens, tally.completion_tokens, ended


def _label(budget: Budget) -> str:
    parts = []
    if budget.max_calls is not None:
        parts.append(f"max_calls={budget.max_calls}")
    if budget.max_tokens is not None:
        parts.append(f"max_tokens={budget.max_tokens}")
    if budget.max_cost is not None:
        parts.append(f"max_cost={budget.max_cost:g}")
    return "Budget(" + ", ".join(parts) + ")"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same run (it takes a second)")
    parser.parse_args(argv)
    refinekit.testing.set_testing(True)  # the backoff between attempts is computed, not slept
    print("runaway scenario: an always-failing judge, max_retries=10 (11 attempts allowed)")
    for line in machine(["refinekit", "openai"]):
        print(line)
    budgets: list[Budget | None] = [
        None,
        Budget(max_calls=5),
        Budget(max_tokens=1000),
        Budget(max_cost=0.0001, prices=PRICES),
    ]
    rows = []
    with ScriptedOpenAI() as server:
        for budget in budgets:
            rows.append(run(server, budget))
    baseline = rows[0]
    header = f"{'budget':<34} {'answer':>6} {'judge':>5} {'calls':>5} {'tokens':>7} {'vs none':>7}"
    print(header)
    print("-" * len(header))
    for label, answers, judged, prompt, completion, _ in rows:
        tokens = prompt + completion
        ratio = tokens / (baseline[3] + baseline[4])
        print(
            f"{label:<34} {answers:>6} {judged:>5} {answers + judged:>5} {tokens:>7} {ratio:>7.2f}"
        )
    print()
    for label, *_, ended in rows:
        print(f"{label}: {ended}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
