"""Two workers of one batched run on a shared PostgreSQL store: each judge request once.

Two `refinekit.eval.run(..., batch=True)` calls at once (each in a thread of its own, with
its own event loop) share the run's cases through the store, then both judge every answered
case: a request one of them recorded in a submission is never submitted by the other, which
waits for that batch instead.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_replies

import refinekit.eval
from refinekit.eval._store import open_store
from refinekit.eval._store._sql import SQLStore
from refinekit.judges import Criterion, JudgeModel, criteria
from refinekit.testing import ScriptedOpenAI

QUESTIONS = [f"q{i}" for i in range(1, 11)]
both_started = threading.Barrier(2)


def answer(question: str) -> str:
    if question in ("q1", "q2"):  # each worker's first case waits for the other worker's
        both_started.wait(timeout=30)
    return f"answer {question}"


def test_two_workers_submit_each_judge_request_once(
    server: ScriptedOpenAI, postgres_url: str, tmp_path: Path
) -> None:
    server.script("judge", judge_replies({f"answer {q}": 0.9 for q in QUESTIONS}), times=None)
    server.script_batches(polls=3)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps({"question": q}) + "\n" for q in QUESTIONS))
    both_started.reset()
    results: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with server.client() as client:
                judge = criteria(JudgeModel(client, "judge"), [Criterion("ok", "Is it ok?")])
                results.append(
                    refinekit.eval.run(
                        golden,
                        target=answer,
                        judge=judge,
                        batch=True,
                        db=postgres_url,
                        concurrency=1,
                    )
                )
        except BaseException as e:  # the test fails with it below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert len(results) == 2
    assert results[0].run.id == results[1].run.id  # one run, two workers

    submitted = [key for batch in server.batches for key in batch.custom_ids]
    assert len(submitted) == len(set(submitted)) == len(QUESTIONS)  # each request once
    judged = server.requests_for("judge")
    assert len(judged) == len(QUESTIONS)
    assert all(r.batch_id is not None for r in judged)
    with open_store(postgres_url) as store:
        run = store.runs()[-1]
        cases = store.cases(run.id)
        assert sorted(c.key for c in cases) == sorted({c.key for c in cases})
        assert len(cases) == len(QUESTIONS)
        assert all(c.outcome == "passed" for c in cases)
        assert store.answered_keys(run.id) == set()


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_a_request_recorded_in_one_submission_is_never_in_another(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = request.getfixturevalue("postgres_url") if kind == "postgresql" else tmp_path / "r.db"
    with open_store(db) as store:
        assert isinstance(store, SQLStore)
        run = store.start_run(
            kind="eval",
            dataset=tmp_path / "g.csv",
            dataset_sha256="0",
            target="t",
            judge="j",
            options={},
            fingerprint="f",
            version="0",
        )
        body = {"model": "judge", "messages": []}
        first, _ = store.new_submission(
            run.id,
            token="a",
            provider="openai",
            model="judge",
            worker="w1",
            items=[("k1", body), ("k2", body)],
        )
        second, _ = store.new_submission(
            run.id,
            token="b",
            provider="openai",
            model="judge",
            worker="w2",
            items=[("k2", body), ("k3", body)],
        )
        third, _ = store.new_submission(
            run.id,
            token="c",
            provider="openai",
            model="judge",
            worker="w2",
            items=[("k1", body)],
        )
        assert (first, second, third) == (["k1", "k2"], ["k3"], [])
        assert [s.token for s in store.submissions(run.id)] == ["a", "b"]  # c: nothing to send
        assert {k: i.token for k, i in store.items(run.id, ["k1", "k2", "k3"]).items()} == {
            "k1": "a",
            "k2": "a",
            "k3": "b",
        }


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_open_submissions_reserve_their_cost_under_max_cost_until_their_results_are_in(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = request.getfixturevalue("postgres_url") if kind == "postgresql" else tmp_path / "r.db"
    with open_store(db) as store:
        assert isinstance(store, SQLStore)
        run = store.start_run(
            kind="eval",
            dataset=tmp_path / "g.csv",
            dataset_sha256="0",
            target="t",
            judge="j",
            options={},
            fingerprint="f",
            version="0",
        )
        body = {"model": "judge"}

        def submit(token: str, key: str) -> tuple[list[str], tuple[float, float] | None]:
            return store.new_submission(
                run.id,
                token=token,
                provider="openai",
                model="judge",
                worker="w",
                items=[(key, body)],
                reserve=0.4,
                max_cost=1.0,
            )

        assert submit("a", "k1") == (["k1"], None)
        assert submit("b", "k2") == (["k2"], None)
        assert submit("c", "k3") == ([], (0.0, pytest.approx(0.8)))  # 0.8 + 0.4 > 1.0
        store.batch_results("a", "ended", [("k1", "{}", None)])  # a's reservation ends
        assert submit("c", "k3") == (["k3"], None)
