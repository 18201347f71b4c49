"""Decorated functions in Ray: `ray.remote` tasks and Ray Data's `map_batches` (refinekit[ray]).

A local Ray instance (2 CPUs) is started once for the session. The decorated functions are
defined inside the tests, so they travel to the workers by value (as a driver script's do);
the workers reach the scripted server, started in the driver, by its URL over real HTTP.

Budgets are per row: each call of a decorated function on a row opens its own job (nothing
of a job is pickled, and a worker reusing its process for several rows or batches starts
each call afresh), so one row's corrections never spend another's, even in one batch.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Workspace, answers, asked, cli_runner
from pydantic import BaseModel

import refinekit
import refinekit.eval
from refinekit import self_correct
from refinekit.eval._store import open_store
from refinekit.eval._store._postgres import PostgresStore
from refinekit.testing import RecordedRequest, ScriptedOpenAI

pytest.importorskip("ray.data", reason="refinekit[ray] is not installed")
import ray
import ray.data

HERE = Path(__file__).resolve().parent  # this module, which the tasks unpickle by name
TESTS = HERE.parent  # helpers.py

# Ray Data's DataContext warns about its own deprecated fields when it copies itself (2.60)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


class Invoice(BaseModel):
    number: int
    total: int


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray instance for the session; its workers import this directory's modules."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={
            "env_vars": {"PYTHONPATH": os.pathsep.join([str(HERE), str(TESTS), str(TESTS.parent)])}
        },
    )
    yield
    ray.shutdown()


def document(number: int) -> str:
    return f"Invoice {number}: total {number * 10} EUR."


def extractor(request: RecordedRequest) -> str:
    """The model: odd invoices' first reply is not JSON (each costs a correction)."""
    messages = (request.body or {})["messages"]
    number = int(re.findall(r"Invoice (\d+)", str(messages[0]["content"]))[0])
    if number % 2 and len(messages) == 1:
        return f"The total is {number * 10} euros."
    return f'{{"number": {number}, "total": {number * 10}}}'


@pytest.fixture
def model(server: ScriptedOpenAI) -> ScriptedOpenAI:
    server.script("extractor", extractor, times=None)
    return server


def extraction(base_url: str, *, asynchronous: bool = False) -> Any:
    """A decorated extraction (defined here: it pickles by value), one correction at most."""
    import openai

    if asynchronous:

        @self_correct(schema=Invoice, max_corrections=1)
        async def extract_async(messages: list[dict[str, Any]]) -> Any:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
            async with client:
                return await client.chat.completions.create(model="extractor", messages=messages)

        return extract_async

    @self_correct(schema=Invoice, max_corrections=1)
    def extract(messages: list[dict[str, Any]]) -> Any:
        with openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0) as client:
            return client.chat.completions.create(model="extractor", messages=messages)

    return extract


def conversation(number: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": document(number)}]


@pytest.mark.usefixtures("ray_session")
def test_in_remote_tasks_sync_and_async(model: ScriptedOpenAI) -> None:
    extract = extraction(model.base_url)
    extract_async = extraction(model.base_url, asynchronous=True)

    @ray.remote
    def task(number: int) -> tuple[Invoice, Invoice, int, str, str]:
        first = extract.outcome(conversation(number))
        second = asyncio.run(extract_async.outcome(conversation(number)))
        assert refinekit.current_job() is None  # nothing left open in the worker
        return first.value, second.value, first.corrections_used, first.job_id, second.job_id

    results = ray.get([task.remote(n) for n in range(1, 5)])
    assert [r[0] for r in results] == [Invoice(number=n, total=n * 10) for n in range(1, 5)]
    assert [r[1] for r in results] == [r[0] for r in results]
    assert [r[2] for r in results] == [1, 0, 1, 0]  # odd invoices took their one correction
    jobs = [r[3] for r in results] + [r[4] for r in results]
    assert len(set(jobs)) == 8  # every call its own job
    assert len(model.requests_for("extractor")) == 2 * (4 + 2)


@pytest.mark.usefixtures("ray_session")
def test_in_map_batches_each_row_has_its_own_job_and_budget(model: ScriptedOpenAI) -> None:
    extract = extraction(model.base_url)

    def extract_batch(batch: dict[str, Any]) -> dict[str, list[Any]]:
        outcomes = [extract.outcome(conversation(int(n))) for n in batch["number"]]
        return {
            "number": [int(n) for n in batch["number"]],
            "total": [o.value.total for o in outcomes],
            "corrections": [o.corrections_used for o in outcomes],
            "model_calls": [o.usage.model_calls for o in outcomes],
            "tokens": [o.usage.total_tokens for o in outcomes],
            "job_id": [o.job_id for o in outcomes],
        }

    # batches of 4 rows with 2 odd invoices each: a budget shared by a batch's rows would
    # run out (max_corrections=1) and the batch would fail
    rows = (
        ray.data.from_items([{"number": n} for n in range(1, 13)])
        .map_batches(extract_batch, batch_size=4)
        .take_all()
    )
    rows.sort(key=lambda r: r["number"])
    assert [r["total"] for r in rows] == [n * 10 for n in range(1, 13)]
    assert [r["corrections"] for r in rows] == [n % 2 for n in range(1, 13)]
    assert [r["model_calls"] for r in rows] == [1 + n % 2 for n in range(1, 13)]
    assert len({r["job_id"] for r in rows}) == 12

    # the usage collected per row is the usage the server counted for that row's requests
    served: dict[int, int] = {}
    for request in model.requests_for("extractor"):
        body = request.body or {}
        number = int(re.findall(r"Invoice (\d+)", body["messages"][0]["content"])[0])
        served[number] = served.get(number, 0) + 1
    assert served == {n: 1 + n % 2 for n in range(1, 13)}
    assert all(r["tokens"] > 0 for r in rows)
    odd_tokens = {r["number"]: r["tokens"] for r in rows}
    assert odd_tokens[3] > odd_tokens[4]  # a correction's tokens count in its row only


# --- refinekit eval --backend ray ---------------------------------------------------------------

RAY_ANSWER = """
import openai

def answer(question):
    client = openai.OpenAI(base_url={base_url!r}, api_key="sk-test", max_retries=0)
    with client:
        reply = client.chat.completions.create(
            model="answer", messages=[{{"role": "user", "content": question}}]
        )
    return reply.choices[0].message.content
"""

RAY_QUESTIONS = [f"q{i}" for i in range(1, 25)]


def ray_golden(ws: Workspace, server: ScriptedOpenAI) -> str:
    """The golden set and its answer function (which reaches the scripted server by URL: a
    Ray worker's environment is the one Ray was started with)."""
    server.script("answer", answers(dict.fromkeys(RAY_QUESTIONS, "ok")), times=None)
    ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in RAY_QUESTIONS])
    return ws.module(RAY_ANSWER.format(base_url=server.base_url), stem="rayeval")


@pytest.mark.usefixtures("ray_session")
def test_eval_on_ray_workers_shares_the_cases_through_a_postgresql_store(
    ws: Workspace, server: ScriptedOpenAI, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ray_golden(ws, server)
    cli = cli_runner(capsys)
    ran = cli(
        "eval", "golden.csv", "--target", f"{target}:answer", "--db", postgres_url,
        "--backend", "ray", "--workers", "3", "--concurrency", "2", "--report", "html",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert "pass rate 1.000 (24/24)" in ran.out
    assert sorted(asked(server)) == sorted(RAY_QUESTIONS)  # each once, by one of the workers
    with PostgresStore(postgres_url) as store:
        [run] = store.runs()
        assert run.status == "complete"
        assert len(store.cases(run.id)) == 24
        assert store.pending(run.id) == 0
        assert store._all("SELECT * FROM workers") == []  # every worker left
    report = (ws.path / "report-run-1.html").read_text(encoding="utf-8")
    assert "All cases (24)" in report
    assert postgres_url.split("@")[0].split(":")[-1] not in ran.out + ran.err + report  # password


@pytest.mark.usefixtures("ray_session")
def test_eval_on_a_local_ray_with_a_sqlite_store_is_the_same_run_as_a_local_one(
    ws: Workspace, server: ScriptedOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ray_golden(ws, server)
    monkeypatch.setattr(refinekit.eval._results, "PROGRESS_SECONDS", 0.05)  # the driver looks
    events: list[object] = []
    on_ray = refinekit.eval.run(
        "golden.csv",
        target=f"{target}:answer",
        backend="ray",
        workers=2,
        db="runs.db",
        on_event=events.append,
    )
    # the driver answers nothing: its progress is the tasks' cases, seen in the store
    told = [e.done for e in events if isinstance(e, refinekit.eval.RunProgress)]
    assert told, events
    assert told == sorted(set(told))
    assert 0 < told[-1] <= 24
    assert not any(isinstance(e, refinekit.eval.CaseFinished) for e in events)
    here = refinekit.eval.run("golden.csv", target=f"{target}:answer", db="runs.db", resume=False)
    assert on_ray.run.status == here.run.status == "complete"
    assert on_ray.summary.rate == here.summary.rate == 1.0
    assert [c.question for c in on_ray.cases] == [c.question for c in here.cases]
    assert sorted(asked(server)) == sorted(RAY_QUESTIONS * 2)


def test_the_ray_backend_refuses_what_it_cannot_run(ws: Workspace, server: ScriptedOpenAI) -> None:
    target = ray_golden(ws, server)
    with pytest.raises(refinekit.eval.UsageProblem, match="need a store they all reach"):
        refinekit.eval.run(
            "golden.csv", target=f"{target}:answer", backend="ray", ray_address="auto"
        )
    with pytest.raises(refinekit.eval.UsageProblem, match="workers must be a whole number"):
        refinekit.eval.run("golden.csv", target=f"{target}:answer", backend="ray", workers=0)
    with pytest.raises(refinekit.eval.UsageProblem, match="are for backend='ray'"):
        refinekit.eval.run("golden.csv", target=f"{target}:answer", workers=2)
    with pytest.raises(refinekit.eval.UsageProblem, match="backend must be 'local' or 'ray'"):
        refinekit.eval.run("golden.csv", target=f"{target}:answer", backend="spark")  # type: ignore[arg-type]
    assert server.requests == []  # nothing ran


JUDGE = """
from refinekit import Verdict

def judge(request):
    passed = "ok" in request.answer
    return Verdict(passed=passed, feedback="says ok" if passed else "no ok")
"""


@pytest.mark.usefixtures("ray_session")
def test_calibrate_on_ray_workers(ws: Workspace) -> None:
    judge = ws.module(JUDGE, stem="rayjudge")
    rows = [
        {
            "question": f"q{i}",
            "answer": "ok" if i % 3 else "nope",
            "label": "pass" if i % 3 else "fail",
        }
        for i in range(1, 13)
    ]
    ws.csv("labels.csv", rows)
    result = refinekit.eval.calibrate(
        "labels.csv", judge=f"{judge}:judge", backend="ray", workers=2, db="runs.db"
    )
    assert result.run.status == "complete"
    assert len(result.cases) == 12
    assert result.calibration.kappa == 1.0  # the judge agrees with every label


BROKEN_JUDGE = """
def judge(request):
    return 1 / 0
"""


@pytest.mark.usefixtures("ray_session")
def test_a_ray_worker_stopped_by_a_broken_judge_stops_the_run_incomplete(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    target = ray_golden(ws, server)
    judge = ws.module(BROKEN_JUDGE, stem="broken")
    with pytest.raises(refinekit.eval.RunAborted, match="ZeroDivisionError") as info:
        refinekit.eval.run(
            "golden.csv",
            target=f"{target}:answer",
            judge=f"{judge}:judge",
            backend="ray",
            workers=2,
            db="runs.db",
        )
    [run] = refinekit.eval.runs(db="runs.db")
    assert run.status == "incomplete"  # every worker left; the same call resumes it
    assert info.value.run_id == run.id


@pytest.mark.usefixtures("ray_session")
def test_eval_on_ray_prices_every_case_and_keeps_to_max_cost(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    ray_golden(ws, server)
    whole = ws.module(
        RAY_ANSWER.format(base_url=server.base_url).replace(
            "return reply.choices[0].message.content", "return reply"
        ),
        stem="rayreply",
    )
    prices = {"answer": (1000.0, 1000.0)}  # dear: a case's tokens cost dollars
    priced = refinekit.eval.run(
        "golden.csv", target=f"{whole}:answer", backend="ray", workers=2, db="runs.db",
        prices=prices,
    )  # fmt: skip
    assert priced.summary.cost is not None
    assert all(case.cost.get("answer", 0) > 0 for case in priced.cases)
    per_case = priced.summary.cost["per_case"]
    with pytest.raises(refinekit.eval.RunAborted, match="max-cost"):
        refinekit.eval.run(
            "golden.csv", target=f"{whole}:answer", backend="ray", workers=2, db="runs.db",
            prices=prices, max_cost=per_case * 5.5, resume=False,
        )  # fmt: skip
    stopped = refinekit.eval.runs(db="runs.db")[-1]
    assert stopped.status == "incomplete"
    # every case costs the same, and every claim reserved it in the store, whichever Ray
    # worker made it: the 2 workers x 4 slots together started 5 cases, spending no more
    with open_store("runs.db") as store:
        assert len(store.case_keys(stopped.id)) == 5
        assert store.spent(stopped.id) == (5, pytest.approx(5 * per_case))
        assert store.spent(stopped.id)[1] <= per_case * 5.5
    assert len(server.requests_for("answer")) == 24 + 5


BATCH_JUDGE = """
import openai
from refinekit import judges

client = openai.OpenAI(base_url="{base_url}", api_key="test-key", max_retries=0)
judge = judges.relevancy(judges.JudgeModel(client, "judge"))
"""


@pytest.mark.usefixtures("ray_session")
def test_a_batched_eval_on_ray_workers_submits_each_judge_request_once(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    target = ray_golden(ws, server)
    judge = ws.module(BATCH_JUDGE.format(base_url=server.base_url), stem="raybatchjudge")
    server.script("judge", "Yes", times=None)
    server.script_batches(polls=1)  # each batch has ended when first polled

    result = refinekit.eval.run(
        "golden.csv",
        target=f"{target}:answer",
        judge=f"{judge}:judge",
        backend="ray",
        workers=2,
        db="runs.db",
        batch=True,
    )

    assert result.run.status == "complete"
    assert (result.summary.passed, result.summary.cases) == (24, 24)
    assert sorted(asked(server)) == sorted(RAY_QUESTIONS)  # each answered once
    submitted = [key for batch in server.batches for key in batch.custom_ids]
    assert len(submitted) == len(set(submitted)) == 24  # each judge request in one batch
    judged = server.requests_for("judge")
    assert len(judged) == 24
    assert all(r.batch_id is not None for r in judged)  # none sent directly
    assert result.run.summary["batch"]["items"] == 24
