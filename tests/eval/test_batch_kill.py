"""A batched `refinekit eval` killed while it waits for its batch, then run again.

A real `python -m refinekit eval ... --batch --db FILE` process against the scripted server:
it answers every case, submits one batch of judge requests and polls it; it is killed
(SIGKILL: nothing of it runs after). The same command again resumes the run: no case is
answered again, the same batch is polled (never a second one), and every case is stored
once with its verdict.
"""

from __future__ import annotations

import signal
import sqlite3
import time

import pytest
from helpers import (
    CRITERIA_JUDGE,
    SYNC_ANSWER,
    Workspace,
    answers,
    asked,
    judge_replies,
    refinekit_process,
    table,
)

from refinekit.testing import ScriptedOpenAI

REPLIES = {f"q{i}": f"answer {i}" for i in range(1, 6)}
VERDICTS = {f"answer {i}": 0.9 if i % 2 else 0.2 for i in range(1, 6)}


def wait_until(what: str, done: object, process: object = None) -> None:
    deadline = time.monotonic() + 60
    while not done():  # type: ignore[operator]
        if process is not None and process.poll() is not None:  # type: ignore[attr-defined]
            out, err = process.communicate()  # type: ignore[attr-defined]
            pytest.fail(f"the run ended before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("killed", ["polling", "submitting"])
def test_a_killed_batched_run_resumes_polling_the_same_batch(
    killed: str, ws: Workspace, server: ScriptedOpenAI
) -> None:
    """`submitting`: as if it was killed between the provider's answer and storing the
    batch's id (the store has the submission and its items, not the id): the batch is found
    at the provider by its submission token."""
    server.script("answer", answers(REPLIES), times=None)
    server.script("judge", judge_replies(VERDICTS), times=None)
    server.script_batches(polls=1000)
    target = ws.module(SYNC_ANSWER, stem="answer")
    judge = ws.module(CRITERIA_JUDGE, stem="judge")
    ws.csv("golden.csv", [{"question": q} for q in REPLIES])
    command = (
        "eval",
        "golden.csv",
        "--target",
        f"{target}:answer",
        "--judge",
        f"{judge}:judge",
        "--batch",
        "--db",
        "runs.db",
    )
    env = {"RK_BASE_URL": server.base_url}

    first = refinekit_process(ws.path, *command, **env)
    try:
        wait_until(
            "its batch was submitted and polled",
            lambda: bool(server.batches) and server.batches[0].polls >= 1,
            first,
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert sorted(asked(server)) == sorted(REPLIES)  # every case answered, once
    assert len(server.batches) == 1
    with sqlite3.connect(ws.path / "runs.db") as db:
        assert db.execute("SELECT count(*) FROM cases").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM answered").fetchone() == (5,)
        if killed == "submitting":
            db.execute("UPDATE batch_submissions SET batch_id = NULL, state = 'submitting'")
    db.close()

    server.end_batches()
    again = refinekit_process(ws.path, *command, **env)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err + out

    assert "resuming run 1" in out
    assert len(server.batches) == 1  # the same batch, polled again; none submitted twice
    assert sorted(asked(server)) == sorted(REPLIES)  # no case answered again
    items = server.batches[0].custom_ids
    assert len(items) == len(set(items)) == 5
    judged = server.requests_for("judge")
    assert len(judged) == 5  # no judge request asked twice
    assert all(r.batch_id == server.batches[0].id for r in judged)
    assert table(out) == {1: "pass", 2: "FAIL", 3: "pass", 4: "FAIL", 5: "pass"}
    with sqlite3.connect(ws.path / "runs.db") as db:
        assert db.execute("SELECT count(*), count(DISTINCT key) FROM cases").fetchone() == (5, 5)
        assert db.execute("SELECT count(*) FROM answered").fetchone() == (0,)
    db.close()
