"""`refinekit eval --batch`: the same eval judged directly and through a provider's batch API.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_batch.py           # the figures in docs/batch.md
    .venv/bin/python benchmarks/bench_batch.py --quick   # a smoke run, a few seconds

`--cases` (60) questions, answered by a plain function and judged by a `criteria` judge with
two criteria (two judge requests per case), through `refinekit.eval.run(...)` into one SQLite
run store, priced at list prices (`PRICES`, per million tokens). Every reply comes from
`refinekit.testing.ScriptedOpenAI` (a real HTTP server on 127.0.0.1), which also speaks
OpenAI's Files and Batches API and Anthropic's Message Batches API; the judge's replies carry
usage of about four characters a token of the prompt they answer, the same whichever way the
request travels. For each provider (an `openai.OpenAI` judge client, then an
`anthropic.Anthropic` one) the same eval runs twice, a new run each time:

1. direct: every judge request a chat completion (a Messages API call) of its own;
2. `batch=True`: the judge's requests of all cases in one batch, polled until it ends
   (the scripted batch ends at its third poll), its results handed back to the judge.

Printed: the judge's cost at list prices (the run summary's `cost["judge"]`, each batched
call at the provider's batch price), its ratio batched / direct (the target is 0.5), the
judge's tokens (equal both ways: the same requests), and the HTTP requests the server answered
for the whole run (answers included), with the judge's part of them.

This is a report, not a gate: the script exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _machine import machine

import refinekit
import refinekit.eval
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

PRICES = {
    "answer": (0.15, 0.60),  # gpt-4o-mini's list prices, per million input and output tokens
    "gpt-judge": (2.50, 10.00),  # gpt-4o's
    "claude-judge": (3.00, 15.00),  # Claude Sonnet's
}
"""List prices in dollars per million tokens (input, output), as the providers publish them."""

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
import anthropic
import openai
from refinekit import judges
from refinekit.judges import Criterion, JudgeModel

CRITERIA = [
    Criterion("supported", "Is every claim of the answer supported by the context?"),
    Criterion("answers", "Does the answer answer the question?"),
]
url = os.environ["RK_BASE_URL"]
gpt = openai.OpenAI(base_url=url, api_key="sk-bench", max_retries=0)
claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="sk-bench", max_retries=0)
openai_judge = judges.criteria(JudgeModel(gpt, "gpt-judge"), CRITERIA)
anthropic_judge = judges.criteria(JudgeModel(claude, "claude-judge", temperature=None), CRITERIA)
"""


def judge_reply(request: RecordedRequest) -> Reply:
    """A "Yes" with usage of about a token per four characters of the prompt."""
    body = request.body or {}
    text = str(body.get("system", "")) + "".join(
        str(m.get("content", "")) for m in body.get("messages", [])
    )
    return Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, prompt_tokens=max(1, len(text) // 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="10 cases: a smoke run")
    args = parser.parse_args()
    cases = 10 if args.quick else args.cases
    questions = [f"What does policy {i} say about refunds?" for i in range(1, cases + 1)]
    print(f"refinekit eval, direct and --batch: {cases} cases, a criteria judge of 2 criteria")
    for line in machine(["refinekit", "openai", "anthropic"]):
        print(line)
    rows: list[tuple[str, str, float, int, int, int, float]] = []
    with (
        tempfile.TemporaryDirectory() as folder,
        refinekit.testing.set_testing(),  # the batch's polls wait nothing
        ScriptedOpenAI() as server,
    ):
        work = Path(folder)
        (work / "bench_answer.py").write_text(textwrap.dedent(ANSWER), encoding="utf-8")
        (work / "bench_judge.py").write_text(textwrap.dedent(JUDGE), encoding="utf-8")
        golden = work / "golden.csv"
        golden.write_text("question\n" + "".join(f'"{q}"\n' for q in questions), encoding="utf-8")
        server.script("answer", "Within 30 days of delivery, unused.", times=None)
        server.script("gpt-judge", judge_reply, times=None)
        server.script("claude-judge", judge_reply, times=None)
        server.script_batches(polls=3)
        os.environ["RK_BASE_URL"] = server.base_url
        sys.path.insert(0, str(work))
        db = work / "runs.db"

        for provider in ("openai", "anthropic"):
            for how in ("direct", "batch"):
                model = "gpt-judge" if provider == "openai" else "claude-judge"
                before = server.http_requests
                judged_before = len(server.requests_for(model))
                started = time.perf_counter()
                result = refinekit.eval.run(
                    golden,
                    target="bench_answer:answer",
                    judge=f"bench_judge:{provider}_judge",
                    db=db,
                    resume=False,
                    prices=PRICES,
                    batch=how == "batch",
                )
                seconds = time.perf_counter() - started
                summary = result.summary
                assert summary.cost is not None
                judge_requests = server.http_requests - before - cases  # less the answers
                judged = summary.usage["judge"]
                tokens = judged["prompt_tokens"] + judged["completion_tokens"]
                items = len(server.requests_for(model)) - judged_before
                rows.append(
                    (
                        provider,
                        how,
                        summary.cost["judge"],
                        tokens,
                        server.http_requests - before,
                        judge_requests,
                        seconds,
                    )
                )
                assert items == 2 * cases, (provider, how, items)
    print()
    print(
        f"{'judge':<10} {'run':<7} {'judge cost':>11} {'ratio':>6} {'judge tokens':>12} "
        f"{'HTTP requests':>13} {'of them judging':>15}"
    )
    direct: dict[str, float] = {}
    for provider, how, cost, tokens, requests, judging, seconds in rows:
        if how == "direct":
            direct[provider] = cost
        ratio = cost / direct[provider] if direct.get(provider) else float("nan")
        print(
            f"{provider:<10} {how:<7} {'$' + format(cost, '.6f'):>11} {ratio:>6.2f} "
            f"{tokens:>12} {requests:>13} {judging:>15}   ({seconds:.1f} s)"
        )


if __name__ == "__main__":
    main()
