"""`refinekit eval --batch`: the run judge's requests through the provider's batch API.

Real runs (in this process) against the scripted server and its batch endpoints, through the
real openai and anthropic clients: the answers first, then the judge's requests in one batch
per round, polled until it ends; only cache misses batched; failed and expired items sent
directly; `--max-cost` reserved at submission; a restarted run polls the same batch.
"""

from __future__ import annotations

import pytest
from helpers import CRITERIA_JUDGE, SYNC_ANSWER, Cli, Workspace, answers, judge_replies

import refinekit.eval
from refinekit.testing import ScriptedOpenAI

REPLIES = {"Refund window?": "Seven days.", "Shipping cost?": "Free.", "Gift cards?": "No."}
VERDICTS = {"Seven days.": 0.9, "Free.": 0.8, "No.": 0.1, "Ten days.": 0.2}


@pytest.fixture
def server(server: ScriptedOpenAI) -> ScriptedOpenAI:
    server.script("answer", answers(REPLIES), times=None)
    server.script("judge", judge_replies(VERDICTS), times=None)
    return server


def command(ws: Workspace, *extra: str) -> tuple[str, ...]:
    if not ws.modules:
        ws.module(SYNC_ANSWER, stem="answer")
        ws.module(CRITERIA_JUDGE, stem="judge")
        ws.csv("golden.csv", [{"question": q} for q in REPLIES])
    target, judge = ws.modules
    return (
        "eval",
        "golden.csv",
        "--target",
        f"{target}:answer",
        "--judge",
        f"{judge}:judge",
        "--batch",
        *extra,
    )


def test_a_batched_eval_judges_every_answer_in_one_batch(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    server.script_batches(polls=3)
    result = cli(*command(ws))
    assert result.code == 0, result.err + result.out
    assert len(server.batches) == 1
    batch = server.batches[0]
    assert len(batch.custom_ids) == 3
    judged = server.requests_for("judge")
    assert len(judged) == 3
    assert all(r.batch_id == batch.id for r in judged)
    run = refinekit.eval.runs()[-1]
    assert run.status == "complete"
    assert run.summary["passed"] == 2
    assert run.summary["failed"] == 1
    print(result.out)
