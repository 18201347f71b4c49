"""One eval run, several workers: processes (or machines) sharing its cases through the store.

Real `refinekit eval` processes against one store (a throwaway PostgreSQL server, and a SQLite
file on one machine), answering through the scripted server. A worker killed mid-case leaves
its claim; the other takes it over; every case ends stored once and asked once.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from helpers import ASKING, Cli, Workspace, answers, asked, refinekit_process

from refinekit.eval._store import open_store
from refinekit.testing import Reply, ScriptedOpenAI

ANSWER = (
    ASKING
    + """
import pathlib
import time

def answer(question):
    if question == os.environ.get("RK_BLOCK_ON"):
        pathlib.Path("started").write_text(question)  # tell the test, then wait for a file
        while not pathlib.Path("never").exists():     # that never appears
            time.sleep(0.01)
    return ask(question)

def other(question):
    return answer(question)
"""
)

QUESTIONS = [f"q{i}" for i in range(1, 13)]


@pytest.fixture
def server(server: ScriptedOpenAI) -> ScriptedOpenAI:
    server.script("answer", [answers(dict.fromkeys(QUESTIONS, "ok"))] * 40)
    return server


def worker(
    ws: Workspace, server: ScriptedOpenAI, db: str, *extra: str, block_on: str | None = None
) -> subprocess.Popen[str]:
    """A `refinekit eval` process on golden.csv; `block_on` a question it never finishes."""
    [target] = ws.modules
    env = {"RK_BASE_URL": server.base_url}
    if block_on is not None:
        env["RK_BLOCK_ON"] = block_on
    command = ["eval", "golden.csv", "--target", f"{target}:answer", "--db", db, *extra]
    return refinekit_process(ws.path, *command, **env)


def wait_for(what: str, done: object, *processes: subprocess.Popen[str]) -> None:
    """Wait (up to a minute) until `done()` holds; fail, with the processes' output, if one
    of them ends first."""
    deadline = time.monotonic() + 60
    while not done():  # type: ignore[operator]
        for p in processes:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"a worker ended before {what} (exit {p.returncode}):\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}")
        time.sleep(0.02)


def stored(db: str) -> int:
    with open_store(db) as store:
        runs = store.runs()
        return len(store.case_keys(runs[0].id)) if runs else 0


def shared_golden(ws: Workspace) -> str:
    """golden.csv of QUESTIONS (each to mention "ok") and the ANSWER module; the module's name."""
    ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in QUESTIONS])
    return ws.module(ANSWER, stem="shared")


@contextlib.contextmanager
def killed_after(
    processes: list[subprocess.Popen[str]],
) -> Iterator[list[subprocess.Popen[str]]]:
    """`processes` (appended to in the block too), each killed at its end if still running."""
    try:
        yield processes
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.communicate()


@contextlib.contextmanager
def holding_q1(
    ws: Workspace, server: ScriptedOpenAI, db: str
) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str]]]:
    """A first worker holding q1 and a second that has answered the 11 other cases (and waits)."""
    with killed_after([]) as started:
        first = worker(ws, server, db, "--concurrency", "1", block_on="q1")
        started.append(first)
        wait_for("the first worker started q1", (ws.path / "started").exists, first)
        second = worker(ws, server, db, "--concurrency", "2")
        started.append(second)
        # the second answers every case but q1, which the first holds; then it waits
        wait_for("the second worker answered the rest", lambda: stored(db) == 11, second)
        yield first, second


def store_of(kind: str, ws: Workspace, request: pytest.FixtureRequest) -> str:
    if kind == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(ws.path / "shared.db")


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_a_second_worker_joins_a_running_run_and_takes_over_a_killed_workers_case(
    kind: str, ws: Workspace, server: ScriptedOpenAI, request: pytest.FixtureRequest
) -> None:
    db = store_of(kind, ws, request)
    shared_golden(ws)
    with holding_q1(ws, server, db) as (first, second):
        assert second.poll() is None  # still there: q1 is claimed by a live worker
        first.kill()  # SIGKILL: no goodbye, its claim on q1 stays in the store
        first.communicate()
        out, err = second.communicate(timeout=60)
    assert first.wait() == -signal.SIGKILL
    assert second.returncode == 0, err
    assert "joining run 1, which other workers are running: 0 of 12 cases already stored" in out
    assert "pass rate 1.000 (12/12)" in out
    assert sorted(asked(server)) == sorted(QUESTIONS)  # each asked once: q1 by the second only
    with open_store(db) as store:
        [run] = store.runs()
        assert run.status == "complete"
        assert sorted(c.question for c in store.cases(run.id)) == sorted(QUESTIONS)
        assert store.pending(run.id) == 0
        assert run.summary["cases"] == 12


def test_workers_started_at_once_share_the_cases_each_answered_once(
    ws: Workspace, server: ScriptedOpenAI, postgres_url: str
) -> None:
    shared_golden(ws)
    # each reply takes a moment, so that all workers are at it before any is done
    reply = answers(dict.fromkeys(QUESTIONS, "ok"))
    server.reset()
    server.script("answer", lambda r: Reply.delay(0.2, reply(r)), times=None)
    workers = [worker(ws, server, postgres_url, "--concurrency", "2") for _ in range(3)]
    results = [p.communicate(timeout=120) for p in workers]
    for p, (out, err) in zip(workers, results, strict=True):
        assert p.returncode == 0, err
        assert "pass rate 1.000 (12/12)" in out
    assert sum("joining run 1" in out for out, _ in results) == 2  # one started it
    assert sorted(asked(server)) == sorted(QUESTIONS)  # none asked twice, none lost
    with open_store(postgres_url) as store:
        [run] = store.runs()
        assert run.status == "complete"
        assert len(store.cases(run.id)) == 12


def test_a_run_named_by_id_is_joined_from_a_file_at_another_path(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, postgres_url: str
) -> None:
    target = shared_golden(ws)
    first = worker(ws, server, postgres_url, "--concurrency", "1", block_on="q1")
    try:
        wait_for("the first worker started q1", (ws.path / "started").exists, first)
        # "another machine": the same file at another path; the fingerprint differs, so it
        # names the run
        (ws.path / "elsewhere").mkdir()
        copy = ws.path / "elsewhere" / "golden.csv"
        copy.write_bytes((ws.path / "golden.csv").read_bytes())
        edited = ws.path / "elsewhere" / "edited.csv"
        edited.write_text("question,must_mention\nq1,ok\n", encoding="utf-8")
        wrong = cli(
            "eval", str(edited), "--target", f"{target}:answer", "--db", postgres_url, "--run", "1"
        )
        assert wrong.code == 2
        assert "run 1 is running over another version of" in wrong.err
        other = cli(
            "eval", str(copy), "--target", f"{target}:other", "--db", postgres_url, "--run", "1"
        )
        assert other.code == 2
        assert "run 1 was made with another target" in other.err
        first.kill()
        first.communicate()
        joined = cli(
            "eval", str(copy), "--target", f"{target}:answer", "--db", postgres_url, "--run", "1"
        )
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert joined.code == 0, joined.err
    assert "resuming run 1" in joined.out  # the first worker is gone: nobody runs it
    assert "pass rate 1.000 (12/12)" in joined.out
    done = cli(
        "eval", str(copy), "--target", f"{target}:answer", "--db", postgres_url, "--run", "1"
    )
    assert done.code == 2
    assert "run 1 is complete" in done.err


def test_a_worker_interrupted_leaves_its_case_to_the_others_at_once(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    db = str(ws.path / "shared.db")
    shared_golden(ws)
    with holding_q1(ws, server, db) as (first, second):
        first.send_signal(signal.SIGINT)  # Ctrl-C: it leaves the run, freeing q1 at once
        first_out, first_err = first.communicate(timeout=30)
        out, err = second.communicate(timeout=60)
    assert first.returncode == 130, first_err
    assert (
        "this worker left run 1; other workers are still running it (11 of 12 cases stored "
        "so far)." in first_out
    )
    assert second.returncode == 0, err
    assert "pass rate 1.000 (12/12)" in out
    assert sorted(asked(server)) == sorted(QUESTIONS)
    with open_store(db) as store:
        [run] = store.runs()
        assert run.status == "complete"


# --- --max-cost over several workers ------------------------------------------------------------

PRICED_ANSWER = """
import os
import pathlib
import time
import openai

def answer(question):
    if question == os.environ.get("RK_BLOCK_ON"):
        pathlib.Path("started").write_text(question)  # tell the test, then wait for a file
        while not pathlib.Path("never").exists():     # that never appears
            time.sleep(0.01)
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:  # the reply itself: the run counts its usage, and prices it
        return client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )
"""

PRICED = [f"p{i}" for i in range(1, 25)]


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_workers_under_max_cost_together_never_start_more_than_the_cap_allows(
    kind: str, ws: Workspace, server: ScriptedOpenAI, request: pytest.FixtureRequest
) -> None:
    db = store_of(kind, ws, request)
    ws.module(PRICED_ANSWER, stem="priced")
    ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in PRICED])
    (ws.path / "prices.json").write_text('{"answer": [10.0, 0.0]}', encoding="utf-8")
    # every case costs 1000 prompt tokens at 10 per million: 0.01; each reply takes a moment,
    # so that the workers' cases overlap
    server.reset()
    reply = Reply.text("ok", prompt_tokens=1000, completion_tokens=1)
    server.script("answer", Reply.delay(0.1, reply), times=None)
    capped = ("--prices", "prices.json", "--max-cost", "0.1", "--concurrency", "3")
    with killed_after([worker(ws, server, db, *capped) for _ in range(3)]) as workers:
        results = [p.communicate(timeout=120) for p in workers]

    # every case costs the same: the estimate is never too low, and the run spends at most
    # the cap (the documented bound's excess is 0): 10 cases, not 16
    for p, (_, err) in zip(workers, results, strict=True):
        assert p.returncode == 3, err
        assert "--max-cost 0.1: the run has spent 0.1 on 10 stored cases" in err
        assert "higher --max-cost" in err
    assert len(asked(server)) == len(set(asked(server))) == 10
    with open_store(db) as store:
        [run] = store.runs()
        assert run.status == "incomplete"
        priced, spent = store.spent(run.id)
        assert priced == 10
        assert spent == pytest.approx(0.1)
        assert spent <= 0.1 + 1e-12
        assert store.pending(run.id) == 14
        assert store._all("SELECT * FROM workers") == []  # every worker left
        assert store._all("SELECT * FROM claims WHERE reserved IS NOT NULL") == []

    # the cases not started are resumable: a higher --max-cost answers them, once each
    more = worker(ws, server, db, "--prices", "prices.json", "--max-cost", "1")
    out, err = more.communicate(timeout=120)
    assert more.returncode == 0, err
    assert "resuming run 1: 10 of 24 cases already stored" in out
    assert "pass rate 1.000 (24/24)" in out
    assert sorted(asked(server)) == sorted(PRICED)  # the 10 stored were not asked again
    with open_store(db) as store:
        [run] = store.runs()
        assert run.status == "complete"
        assert store.spent(run.id) == (24, pytest.approx(0.24))


def test_a_killed_workers_reservation_is_released_and_its_case_taken_over_under_max_cost(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    db = str(ws.path / "shared.db")
    ws.module(PRICED_ANSWER, stem="priced")
    ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in PRICED[:12]])
    (ws.path / "prices.json").write_text('{"answer": [10.0, 0.0]}', encoding="utf-8")
    server.reset()
    server.script("answer", Reply.text("ok", prompt_tokens=1000, completion_tokens=1), times=None)
    capped = ("--prices", "prices.json", "--max-cost", "0.1")
    with killed_after([]) as started:
        first = worker(ws, server, db, *capped, "--concurrency", "1", block_on="p1")
        started.append(first)
        wait_for("the first worker started p1", (ws.path / "started").exists, first)
        second = worker(ws, server, db, *capped, "--concurrency", "3")
        started.append(second)

        def joined() -> bool:
            with open_store(db) as store:
                return len(store._all("SELECT * FROM workers")) == 2  # type: ignore[attr-defined]

        wait_for("the second worker joined", joined, second)
        # p1 is the run's first case, in flight with no cost known yet: nothing else starts
        assert second.poll() is None
        assert stored(db) == 0
        first.kill()  # SIGKILL: its claim on p1 stays in the store, until the second sees it
        first.communicate()
        _, err = second.communicate(timeout=60)
    assert second.returncode == 3, err
    assert "--max-cost 0.1: the run has spent 0.1 on 10 stored cases" in err
    assert sorted(asked(server)) == sorted(PRICED[:10])  # p1 by the second worker, once
    with open_store(db) as store:
        [run] = store.runs()
        assert store.spent(run.id) == (10, pytest.approx(0.1))
        assert store._all("SELECT * FROM claims WHERE worker IS NOT NULL") == []
