"""The run store (SQLite): what it keeps, redaction, run status by pid, resuming; and the
database surviving a real interrupted `python -m refinekit eval` (SIGKILL, SIGINT)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import ASKING, SYNC_ANSWER, Cli, Workspace, answers, asked, refinekit_process, table
from pg import PostgresServer
from pg import _free_port as free_port

import refinekit.eval
from refinekit import Usage
from refinekit._core.redact import safe_url
from refinekit.eval import UsageProblem
from refinekit.eval._store import _postgres as pgstore
from refinekit.eval._store import _sqlite as runstore
from refinekit.eval._store import open_store
from refinekit.eval._store._claims import HOST, LEASE_SECONDS
from refinekit.eval._store._postgres import PostgresStore
from refinekit.eval._store._sql import SQLStore
from refinekit.eval._store._sqlite import CaseRecord, RunInfo, RunStoreError, SQLiteStore, redact
from refinekit.judges import PostgresCache, SQLiteCache
from refinekit.testing import ScriptedOpenAI


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLStore]:
    """Each store test runs against both stores: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        with SQLiteStore(tmp_path / "sub" / "runs.db") as s:  # the folder is made
            yield s
    else:
        with PostgresStore(request.getfixturevalue("postgres_url")) as s:
            yield s


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "sub" / "runs.db") as s:
        yield s


def start(
    store: SQLStore,
    fingerprint: str = "fp",
    dataset: str = "golden.csv",
    judge: str | None = None,
    worker: str = "this-worker",
) -> RunInfo:
    """A new run, with `worker` (this process) at it."""
    run = store.start_run(
        kind="eval",
        dataset=Path(dataset),
        dataset_sha256="abc",
        target="app:answer",
        judge=judge,
        options={"concurrency": 4, "repeat": 1},
        fingerprint=fingerprint,
        version="0.0.test",
    )
    store.join(run.id, worker)
    return store.run(run.id)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def set_pid(store: SQLStore, run_id: int, pid: int | None) -> None:
    store._exec("UPDATE runs SET pid = ? WHERE id = ?", (pid, run_id))


# --- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Incorrect API key provided: sk-proj-Zq81vXw2mNe4RtY6uI0oP9aS.", "Zq81vXw2mNe4Rt"),
        ("key sk-Zq81vXw2mNe4RtY6uI0o rejected", "Zq81vXw2mNe4Rt"),
        ("groq gsk_Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("hub hf_Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("anthropic sk-ant-api03-Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("grok xai-Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("perplexity pplx-Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("replicate r8_Zq81vXw2mNe4RtY6uI0o", "Zq81vXw2mNe4Rt"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2ln", "eyJhbGciOiJIUzI1NiJ9"),
        ("proxy said Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy"),
        ("https://host/v1?api_key=Zq81vXw2mNe4&x=1", "Zq81vXw2mNe4"),
        ("x-api-key: Zq81vXw2mNe4", "Zq81vXw2mNe4"),
        ("{'api_key': 'Zq81vXw2mNe4', 'model': 'm'}", "Zq81vXw2mNe4"),  # a dict's repr
        ('{"password": "hunter2hunter2"}', "hunter2hunter2"),  # JSON
        ("access_token=Zq81vXw2mNe4; path=/", "Zq81vXw2mNe4"),
        ("secret: Zq81vXw2mNe4", "Zq81vXw2mNe4"),
    ],
)
def test_redact_removes_credentials(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert "[redacted" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens: 4096 exceeded",
        "the context has 1200 tokens",
        "the answer is short (skill-based ranking)",
        "HTTP 503: overloaded",
        "RuntimeError: no such file: refunds.md",
        "rk_config_1234567890abcdef and pk_orders_customer_idx are identifiers",
    ],
)
def test_redact_leaves_ordinary_text(text: str) -> None:
    assert redact(text) == text


def test_the_store_writes_ahead_and_syncs_at_checkpoints(sqlite_store: SQLiteStore) -> None:
    # WAL: a commit per stored case survives a killed process without an fsync per case
    store = sqlite_store
    with sqlite3.connect(store.path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


# --- what a run keeps ---------------------------------------------------------------------


def test_a_case_round_trips_with_its_calls_by_role_and_a_redacted_error(
    store: SQLStore,
) -> None:
    run = start(store)
    assert (run.status, run.summary, run.finished_at) == ("running", {}, None)
    assert run.dataset == str(Path("golden.csv").resolve())
    case = CaseRecord(
        key="k1",
        position=1,
        question="Refund?",
        row={"question": "Refund?", "n": 3},
        outcome="raised",
        answer="partial",
        error="RuntimeError: rejected sk-proj-Zq81vXw2mNe4RtY6uI0oP9aS",
        feedback="Cite the policy.",
        score=0.25,
        probability=0.3,
        verdicts=[{"passed": False, "criteria": [{"name": "c", "outcome": "fail"}]}],
        passes=0,
        judgements=1,
        flipped=False,
        attempts=3,
        corrections=2,
        answer_usage=Usage(3, 300, 30),
        answer_judge_usage=Usage(),  # nothing: no row in `calls`
        judge_usage=Usage(1, 50, 1),
        answer_seconds=1.5,
        judge_seconds=0.5,
    )
    store.save_case(run.id, case)

    [back] = store.cases(run.id)
    assert back.error == "RuntimeError: rejected [redacted key]"
    assert back == CaseRecord(**{**case.__dict__, "error": back.error})
    assert back.criteria == [{"name": "c", "outcome": "fail"}]
    calls = store._all("SELECT role, model_calls, prompt_tokens FROM calls ORDER BY role")
    assert [tuple(c.values()) for c in map(dict, calls)] == [("answer", 3, 300), ("judge", 1, 50)]

    # saving a case again replaces it, calls and all
    store.save_case(
        run.id, CaseRecord(key="k1", position=1, question="Refund?", row={}, outcome="passed")
    )
    [again] = store.cases(run.id)
    assert (again.outcome, again.answer_usage) == ("passed", Usage())
    assert store._all("SELECT * FROM calls") == []

    store.finish_run(run.id, "complete", {"rate": 1.0})
    done = store.run(run.id)
    assert (done.status, done.summary) == ("complete", {"rate": 1.0})
    assert done.finished_at is not None


def test_not_a_store_or_a_newer_one_is_refused(tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 200)
    with pytest.raises(RunStoreError, match="is not a refinekit run store"):
        SQLiteStore(notes)
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(RunStoreError, match="written by a newer refinekit"):
        SQLiteStore(newer)
    with SQLiteStore(tmp_path / "ok.db") as store, pytest.raises(RunStoreError, match="no run 5"):
        store.run(5)


def old_store(path: Path) -> None:
    """A store as refinekit 0.1 made it: the tables, `PRAGMA user_version = 1`, no version
    table; with one run and one case in it."""
    with sqlite3.connect(path) as db:
        db.executescript(runstore._MIGRATIONS[0][0] + ";")  # runs
        for statement in runstore._MIGRATIONS[0][1:]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        db.execute(
            "INSERT INTO runs (kind, status, dataset, dataset_sha256, options, fingerprint, "
            "version, started_at, summary) VALUES ('eval', 'complete', '/g.csv', 'abc', '{}', "
            "'fp', '0.1.0', 1.0, '{\"rate\": 1.0}')"
        )
        db.execute(
            "INSERT INTO cases VALUES (1, 'k', 1, 'Q?', '{}', 'passed', 'A', NULL, '', NULL, "
            "NULL, NULL, '[]', 1, 1, 0, 1, 0, 0.5, 0.1, 2.0)"
        )
    db.close()


def versions(path: Path) -> tuple[list[int], int]:
    with sqlite3.connect(path) as db:
        table = [r[0] for r in db.execute("SELECT version FROM schema_version")]
        user_version = db.execute("PRAGMA user_version").fetchone()[0]
    db.close()
    return table, user_version


def test_a_new_store_is_at_the_current_schema_version(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        assert runstore.schema_version(store._db) == len(runstore._MIGRATIONS) == 7
    assert versions(tmp_path / "runs.db") == ([7], 7)


def test_a_store_from_before_the_version_table_is_version_1_and_keeps_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old_store(path)
    with sqlite3.connect(path) as db:
        assert runstore.schema_version(db) == 1
    db.close()
    with SQLiteStore(path) as store:
        [run] = store.runs()
        assert (run.status, run.summary) == ("complete", {"rate": 1.0})
        assert [c.answer for c in store.cases(run.id)] == ["A"]
        assert store.pending(run.id) == 0  # version 2's claims table, empty
        assert store.cases(run.id)[0].cost == {}  # version 3's column, its default
        assert store._all("SELECT reserved FROM claims") == []  # version 4's column
        assert store.cases(run.id)[0].models == {}  # version 5's columns, their defaults
        assert store.cases(run.id)[0].trials == []
        assert store.cases(run.id)[0].tier is None  # version 6's columns, their defaults
        assert store.cases(run.id)[0].tiers == []
    assert versions(path) == ([7], 7)


def test_opening_an_older_store_applies_the_steps_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    old_store(path)
    step_8 = ("ALTER TABLE runs ADD COLUMN host TEXT",)
    step_9 = ("CREATE TABLE notes (run_id INTEGER, note TEXT)", "INSERT INTO notes VALUES (1, 'x')")
    monkeypatch.setattr(runstore, "_MIGRATIONS", (*runstore._MIGRATIONS, step_8, step_9))
    with SQLiteStore(path) as store:
        assert [r.summary for r in store.runs()] == [{"rate": 1.0}]  # kept
    assert versions(path) == ([9], 9)
    with sqlite3.connect(path) as db:
        assert list(db.execute("SELECT host FROM runs")) == [(None,)]
        assert list(db.execute("SELECT * FROM notes")) == [(1, "x")]
    db.close()
    with SQLiteStore(path):  # at version 8: no step runs again (a second notes row, or
        pass  # "duplicate column", if it did)
    with sqlite3.connect(path) as db:
        assert list(db.execute("SELECT count(*) FROM notes")) == [(1,)]
    db.close()


def test_a_failing_step_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    old_store(path)
    steps = ("ALTER TABLE runs ADD COLUMN host TEXT", "ALTER TABLE nowhere ADD COLUMN x TEXT")
    monkeypatch.setattr(runstore, "_MIGRATIONS", (*runstore._MIGRATIONS, steps))
    with pytest.raises(RunStoreError, match="from schema 1 to 8: no such table: nowhere"):
        SQLiteStore(path)
    with sqlite3.connect(path) as db:
        assert runstore.schema_version(db) == 1
        columns = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "host" not in columns
    assert "claims" not in tables  # versions 2 to 7, applied in the same transaction, undone


# --- a database holding a judge cache (`SQLiteCache`, `PostgresCache`) -----------------------


def cache_on(where: str) -> SQLiteCache | PostgresCache:
    return PostgresCache(where) if where.startswith("postgresql://") else SQLiteCache(where)


@pytest.mark.parametrize(
    ("kind", "version"),
    [(kind, version) for kind in ("sqlite", "postgresql") for version in (0, 1, 2)]
    + [("sqlite", -1)],  # -1: a store of refinekit 0.1 (no version table; user_version 1)
)
def test_a_judge_cache_in_the_database_is_kept_when_it_becomes_a_current_run_store(
    kind: str,
    version: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache opened on an empty database, or on a store made before the cache was part of
    it (schema 1 or 2); then the store is opened by this refinekit."""
    module = runstore if kind == "sqlite" else pgstore
    where = (
        str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    )
    if version == -1:
        old_store(Path(where))
        old_run = 1
    elif version:
        monkeypatch.setattr(module, "_MIGRATIONS", module._MIGRATIONS[:version])
        with open_store(where) as old:
            assert isinstance(old, SQLStore)
            old_run = start_run(old)
        monkeypatch.undo()
    with cache_on(where) as cache:
        cache.set("a" * 64, '{"verdict": "yes"}')
        cache.set("b" * 64, '{"verdict": "no"}')
    with open_store(where) as store:
        assert isinstance(store, SQLStore)
        assert [dict(r) for r in store._all("SELECT version FROM schema_version")] == [
            {"version": 7}
        ]
        if version:
            assert [r.id for r in store.runs()] == [old_run]
        run = start(store)
        assert store.save_case(run.id, priced_case("k1", 0.25))
        assert store.spent(run.id) == (1, 0.25)
        shared = store.judge_cache()
        try:  # the store's cache is the one the app filled
            assert len(shared) == 2
            assert shared.get("a" * 64) == '{"verdict": "yes"}'
            shared.set("c" * 64, '{"verdict": "maybe"}')
        finally:
            shared.close()
    with cache_on(where) as cache:
        assert len(cache) == 3
        assert cache.get("b" * 64) == '{"verdict": "no"}'
    with open_store(where) as store:  # opened again: at 5, nothing to do
        assert [r.id for r in store.runs()] == ([old_run] if version else []) + [run.id]


def start_run(store: SQLStore) -> int:
    """A run, as a store of schema 1 takes it (`start_run` reads the workers: schema 2)."""
    return store._insert(
        "INSERT INTO runs (kind, status, dataset, dataset_sha256, options, fingerprint, "
        "version, started_at) VALUES ('eval', 'complete', '/g.csv', 'abc', '{}', 'old', "
        "'0.0.test', 1.0)",
        (),
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_table_of_the_caches_name_that_is_no_judge_cache_is_refused_changing_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = (
        str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    )
    if kind == "sqlite":
        with sqlite3.connect(where) as db:
            db.execute("CREATE TABLE refinekit_judge_cache (id INTEGER, note TEXT)")
        db.close()
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as db:
            db.execute("CREATE TABLE refinekit_judge_cache (id INTEGER, note TEXT)")
    with pytest.raises(RunStoreError, match=r"from schema 0 to 3: .*key.*; nothing was changed"):
        open_store(where)
    if kind == "sqlite":
        with sqlite3.connect(where) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        db.close()
    else:
        with psycopg.connect(where, autocommit=True) as db:
            tables = {
                r[0]
                for r in db.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                )
            }
    assert tables == {"refinekit_judge_cache"}


def at_once(*calls: Callable[[], object]) -> list[BaseException]:
    """Each call in a thread of its own, all started at once; what they raised."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_postgresql_caches_and_stores_opened_at_once_on_a_new_database_make_it_once(
    postgres_url: str,
) -> None:
    def open_one(make: type[PostgresCache] | type[PostgresStore]) -> None:
        make(postgres_url).close()

    errors = at_once(*(partial(open_one, make) for make in (PostgresCache, PostgresStore) * 3))
    assert errors == []
    with PostgresStore(postgres_url) as store:
        assert store._all("SELECT version FROM schema_version") == [{"version": 7}]
        assert store._all("SELECT count(*) AS n FROM refinekit_judge_cache") == [{"n": 0}]


def add_worker(
    store: SQLStore, run_id: int, worker: str, *, host: str, pid: int, expires_in: float
) -> None:
    """A worker of the run as another process or machine enters it (its lease `expires_in`
    seconds from now, in the past when negative)."""
    store._exec(
        "INSERT INTO workers (run_id, worker, host, pid, expires_at) VALUES (?, ?, ?, ?, ?)",
        (run_id, worker, host, pid, store._now() + expires_in),
    )


def test_a_run_is_running_while_a_worker_holds_a_live_lease(store: SQLStore) -> None:
    run = start(store)
    assert run.status == "running"  # this process, its lease just taken
    assert store.leave(run.id, "this-worker") == 0
    assert store.run(run.id).status == "incomplete"  # nobody at it: its workers died
    add_worker(store, run.id, "far", host="elsewhere", pid=1, expires_in=20)
    assert store.run(run.id).status == "running"  # a live lease on another machine
    store._exec("UPDATE workers SET expires_at = ? WHERE worker = 'far'", (store._now() - 1,))
    assert store.run(run.id).status == "incomplete"  # its lease ran out
    add_worker(store, run.id, "here", host=HOST, pid=dead_pid(), expires_in=20)
    assert store.run(run.id).status == "incomplete"  # on this machine, and its process died
    store.finish_run(run.id, "complete", {})
    assert store.run(run.id).status == "complete"


def test_unfinished_is_the_newest_run_of_a_fingerprint_that_did_not_complete(
    store: SQLStore,
) -> None:
    assert store.unfinished("fp") is None
    first = start(store)
    assert store.unfinished("fp") == store.run(first.id)  # running: a new worker joins it
    store.leave(first.id, "this-worker")
    assert store.unfinished("fp") == store.run(first.id)  # incomplete: it is resumed
    assert store.unfinished("other") is None
    store.finish_run(first.id, "complete", {})
    assert store.unfinished("fp") is None


def queued(store: SQLStore, n: int = 6) -> int:
    run = start(store)
    store.queue(run.id, [(f"k{i}", i) for i in range(1, n + 1)])
    return run.id


def test_claims_go_in_file_order_each_case_to_one_worker(store: SQLStore) -> None:
    run_id = queued(store)
    add_worker(store, run_id, "other", host=HOST, pid=os.getpid(), expires_in=20)
    assert store.claim(run_id, "this-worker", 2) == ["k1", "k2"]
    assert store.claim(run_id, "other", 3) == ["k3", "k4", "k5"]
    assert store.claim(run_id, "this-worker", 5) == ["k6"]
    assert store.claim(run_id, "other") == []  # all held, by live workers
    assert store.pending(run_id) == 6
    assert store.pending(run_id, besides="this-worker") == 3
    record = CaseRecord(key="k1", position=1, question="Q?", row={}, outcome="passed")
    assert store.save_case(run_id, record, worker="this-worker")
    assert store.pending(run_id) == 5
    assert store.case_keys(run_id) == {"k1"}
    stolen = CaseRecord(key="k3", position=3, question="Q?", row={}, outcome="passed")
    assert not store.save_case(run_id, stolen, worker="this-worker")  # not its claim
    assert store.case_keys(run_id) == {"k1"}


def test_a_leaving_worker_frees_its_claims_for_the_others(store: SQLStore) -> None:
    run_id = queued(store, 3)
    add_worker(store, run_id, "other", host=HOST, pid=os.getpid(), expires_in=20)
    assert store.claim(run_id, "other", 2) == ["k1", "k2"]
    assert store.leave(run_id, "other") == 1  # this worker is still at it
    assert store.claim(run_id, "this-worker", 5) == ["k1", "k2", "k3"]


@pytest.mark.parametrize(
    ("how", "host", "expires_in", "taken_over"),
    [
        ("lease expired, another machine", "elsewhere", -1.0, True),
        ("lease live, another machine", "elsewhere", 20.0, False),
        ("process died, this machine", HOST, 20.0, True),
    ],
)
def test_a_gone_workers_claims_are_taken_over(
    store: SQLStore, how: str, host: str, expires_in: float, taken_over: bool
) -> None:
    run_id = queued(store, 2)
    add_worker(store, run_id, "maybe-gone", host=host, pid=os.getpid(), expires_in=20)
    assert store.claim(run_id, "maybe-gone", 2) == ["k1", "k2"]
    store._exec(  # then its lease runs on or out; on this machine, its process dies
        "UPDATE workers SET expires_at = ?, pid = ? WHERE worker = 'maybe-gone'",
        (store._now() + expires_in, dead_pid() if host == HOST else 4242),
    )
    assert store.claim(run_id, "this-worker", 5) == (["k1", "k2"] if taken_over else [])
    late = CaseRecord(key="k1", position=1, question="Q?", row={}, outcome="failed")
    # a worker taken for gone that comes back finds its claims taken: its answers are dropped
    assert store.save_case(run_id, late, worker="maybe-gone") is not taken_over


def test_a_heartbeat_renews_the_lease_and_a_worker_taken_for_gone_enters_again(
    store: SQLStore,
) -> None:
    run = start(store)
    store._exec("UPDATE workers SET expires_at = ?", (store._now() + 1,))
    store.heartbeat(run.id, "this-worker")
    [row] = store._all("SELECT expires_at FROM workers WHERE run_id = ?", (run.id,))
    assert row["expires_at"] > store._now() + LEASE_SECONDS - 5
    store._exec("DELETE FROM workers")  # reaped by another worker while this one was stuck
    assert store.run(run.id).status == "incomplete"
    store.heartbeat(run.id, "this-worker")
    assert store.run(run.id).status == "running"


def in_workers(
    store: SQLStore,
    request: pytest.FixtureRequest,
    run_id: int,
    n: int,
    work: Callable[[SQLStore, str], None],
) -> list[BaseException]:
    """`work(own, name)` in `n` threads at once, each a worker (w0, w1, ...) joined to the run
    on a connection of its own, as a process has; what they raised."""
    where = store.where if isinstance(store, PostgresStore) else store.path
    url = request.getfixturevalue("postgres_url") if isinstance(store, PostgresStore) else None

    def worker(name: str) -> None:
        with open_store(url or where) as own:
            own.join(run_id, name)
            work(own, name)

    return at_once(*(partial(worker, f"w{i}") for i in range(n)))


def test_workers_claiming_at_once_never_get_the_same_case(
    store: SQLStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    run_id = queued(store, 200)
    got: dict[str, list[str]] = {}

    def claim_all(own: SQLStore, name: str) -> None:
        mine = got.setdefault(name, [])
        while keys := own.claim(run_id, name, 3):
            mine.extend(keys)

    errors = in_workers(store, request, run_id, 4, claim_all)
    assert errors == []
    claimed = [key for keys in got.values() for key in keys]
    assert sorted(claimed) == sorted(f"k{i}" for i in range(1, 201))  # each once, none lost


def priced_case(key: str, cost: float) -> CaseRecord:
    """A finished case whose model calls cost `cost` in all (its answer's)."""
    position = int("".join(c for c in key if c.isdigit()) or 0)
    spent = {"answer": cost, "answer_judge": 0.0, "judge": 0.0, "extra": 0.0}
    return CaseRecord(
        key=key, position=position, question="Q?", row={}, outcome="passed", cost=spent
    )


def test_a_claim_under_a_cap_reserves_its_case_until_it_is_stored_or_released(
    store: SQLStore,
) -> None:
    run_id = queued(store, 8)
    add_worker(store, run_id, "other", host=HOST, pid=os.getpid(), expires_in=20)
    # nothing priced yet: no estimate, so the first case runs alone
    first = store.claim_within(run_id, "this-worker", 0.055)
    assert (first.keys, first.fits, first.estimate, first.in_flight) == (["k1"], True, None, 0)
    alone = store.claim_within(run_id, "other", 0.055)
    assert (alone.keys, alone.fits, alone.in_flight) == ([], False, 1)
    assert store.save_case(run_id, priced_case("k1", 0.01), worker="this-worker")

    # each case now reserves 0.01, the most a stored case cost; no more cases are in flight
    # than there are priced cases stored
    second = store.claim_within(run_id, "this-worker", 0.055)
    assert (second.keys, second.spent, second.estimate) == (["k2"], 0.01, 0.01)
    assert not store.claim_within(run_id, "other", 0.055).fits  # 1 priced, 1 in flight
    assert store.save_case(run_id, priced_case("k2", 0.01), worker="this-worker")
    third = store.claim_within(run_id, "this-worker", 0.055)
    assert (third.keys, third.reserved, third.in_flight) == (["k3"], 0.0, 0)
    fourth = store.claim_within(run_id, "other", 0.055)  # every worker's reservations count
    assert (fourth.keys, fourth.reserved, fourth.in_flight) == (["k4"], 0.01, 1)
    refused = store.claim_within(run_id, "this-worker", 0.055)  # 0.02 + 0.02 + 0.01 fits,
    assert (refused.keys, refused.fits, refused.in_flight) == ([], False, 2)  # but 2 priced
    assert store.save_case(run_id, priced_case("k3", 0.01), worker="this-worker")
    refused = store.claim_within(run_id, "this-worker", 0.055)  # 0.03 + 0.01 + 0.01 fits
    assert (refused.keys, refused.reserved) == (["k5"], 0.01)
    over = store.claim_within(run_id, "other", 0.055)  # 0.03 + 0.02 + 0.01 > 0.055
    assert (over.keys, over.fits) == ([], False)
    assert (over.spent, over.reserved, over.in_flight) == (pytest.approx(0.03), 0.02, 2)
    assert store.pending(run_id) == 5  # a refused claim takes nothing

    # a worker leaving releases its reservation with its claim
    store.leave(run_id, "other")
    again = store.claim_within(run_id, "this-worker", 0.055)
    assert (again.keys, again.reserved) == (["k4"], 0.01)
    # a case stored settles its reservation: its cost counts instead
    assert store.save_case(run_id, priced_case("k5", 0.005), worker="this-worker")
    settled = store.claim_within(run_id, "this-worker", 0.055)  # 0.035 + 0.01 + 0.01 fits
    assert (settled.keys, settled.spent, settled.reserved) == (["k6"], pytest.approx(0.035), 0.01)
    assert settled.estimate == 0.01  # the largest, not the mean
    rows = store._all("SELECT key, reserved FROM claims WHERE worker IS NOT NULL ORDER BY key")
    assert [(r["key"], r["reserved"]) for r in rows] == [("k4", 0.01), ("k6", 0.01)]


def test_until_a_case_has_cost_something_the_next_case_runs_alone(store: SQLStore) -> None:
    run_id = queued(store, 3)
    assert store.claim_within(run_id, "this-worker", 1.0).keys == ["k1"]
    assert store.save_case(run_id, priced_case("k1", 0.0), worker="this-worker")  # it raised
    free = store.claim_within(run_id, "this-worker", 1.0)
    assert (free.keys, free.priced, free.estimate) == (["k2"], 1, None)
    assert not store.claim_within(run_id, "this-worker", 1.0).fits  # k2 alone
    assert store.save_case(run_id, priced_case("k2", 0.01), worker="this-worker")
    known = store.claim_within(run_id, "this-worker", 1.0)
    assert (known.keys, known.estimate) == (["k3"], 0.01)


def test_a_gone_workers_reservations_are_released_and_unreserved_claims_count(
    store: SQLStore,
) -> None:
    run_id = queued(store, 6)
    assert store.save_case(run_id, priced_case("k0", 0.01))
    add_worker(store, run_id, "far", host="elsewhere", pid=1, expires_in=20)
    assert store.claim_within(run_id, "far", 0.03).keys == ["k1"]
    assert store.claim(run_id, "far", 1) == ["k2"]  # no cap: nothing reserved, counted at 0.01
    full = store.claim_within(run_id, "this-worker", 0.03)
    assert (full.fits, full.reserved, full.in_flight) == (False, 0.02, 2)
    store._exec("UPDATE workers SET expires_at = ? WHERE worker = 'far'", (store._now() - 1,))
    taken = store.claim_within(run_id, "this-worker", 0.03)  # its lease ran out
    assert (taken.keys, taken.reserved, taken.in_flight) == (["k1"], 0.0, 0)


def test_workers_claiming_under_a_cap_at_once_never_reserve_past_it(
    store: SQLStore, request: pytest.FixtureRequest
) -> None:
    run_id = queued(store, 120)
    for i in range(60):  # 0.6 spent; each case reserves 0.01
        assert store.save_case(run_id, priced_case(f"s{i}", 0.01))
    got: dict[str, list[str]] = {}

    def claim_within_cap(own: SQLStore, name: str) -> None:
        mine = got.setdefault(name, [])
        while (claimed := own.claim_within(run_id, name, 1.1)).fits:
            mine.extend(claimed.keys)

    errors = in_workers(store, request, run_id, 4, claim_within_cap)
    assert errors == []
    claimed = [key for keys in got.values() for key in keys]
    # 0.6 spent and 50 cases reserving 0.01 each: 1.1, and no more; none claimed twice
    assert len(claimed) == len(set(claimed)) == 50
    [row] = store._all("SELECT sum(reserved) AS r FROM claims WHERE worker IS NOT NULL")
    assert row["r"] == pytest.approx(0.5)


def test_workers_claiming_and_storing_under_a_cap_at_once_never_spend_past_it(
    store: SQLStore, request: pytest.FixtureRequest
) -> None:
    # each claim reads the stored spend and the reservations as of one moment: a case stored
    # between the two (its reservation gone, its cost not yet seen) would be counted nowhere
    run_id = queued(store, 200)
    for i in range(20):  # 0.2 spent; each case costs 0.01 and reserves it
        assert store.save_case(run_id, priced_case(f"s{i}", 0.01))

    def claim_and_store(own: SQLStore, name: str) -> None:
        while True:
            got = own.claim_within(run_id, name, 0.8)
            if not got.fits:
                if got.in_flight == 0:
                    return
                continue
            if got.keys:
                own.save_case(run_id, priced_case(got.keys[0], 0.01), worker=name)

    errors = in_workers(store, request, run_id, 6, claim_and_store)
    assert errors == []
    assert store.spent(run_id) == (80, pytest.approx(0.8))  # 60 more cases, not one over


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_at_schema_3_gets_reservations_and_keeps_its_claims(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = runstore if kind == "sqlite" else pgstore
    where = (
        str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    )
    monkeypatch.setattr(module, "_MIGRATIONS", module._MIGRATIONS[:3])  # as refinekit made it
    with open_store(where) as old:
        assert isinstance(old, SQLStore)
        run_id = queued(old, 3)
        # k1 claimed as refinekit did then (this one's claim writes the new column)
        old._exec("UPDATE claims SET worker = 'this-worker' WHERE key = 'k1'")
        assert [dict(r) for r in old._all("SELECT version FROM schema_version")] == [{"version": 3}]
    monkeypatch.undo()
    with open_store(where) as store:
        assert isinstance(store, SQLStore)
        assert [dict(r) for r in store._all("SELECT version FROM schema_version")] == [
            {"version": 7}
        ]
        rows = store._all("SELECT key, worker, reserved FROM claims ORDER BY key")
        assert [(r["key"], r["worker"], r["reserved"]) for r in rows] == [
            ("k1", "this-worker", None),
            ("k2", None, None),
            ("k3", None, None),
        ]
        assert store.run(run_id).status == "running"
        assert store.claim_within(run_id, "this-worker", 1.0).keys == []  # k1 runs alone
        assert store.save_case(run_id, priced_case("k1", 0.25), worker="this-worker")
        store._exec("UPDATE cases SET total_cost = NULL")  # as a case stored before 4 has it
        assert store.spent(run_id) == (1, 0.25)  # read from its cost
        got = store.claim_within(run_id, "this-worker", 0.5)
        assert (got.keys, got.spent, got.estimate) == (["k2"], 0.25, 0.25)
        assert store.save_case(run_id, priced_case("k2", 0.125), worker="this-worker")
        assert store.spent(run_id) == (2, 0.375)  # old and new rows together


def test_previous_is_the_newest_complete_run_of_the_same_file_before(store: SQLStore) -> None:
    a = start(store)
    b = start(store, dataset="other.csv")
    c = start(store)
    d = start(store)
    for run in (a, b, c):
        store.finish_run(run.id, "complete", {})
    assert store.previous(d) == store.run(c.id)
    assert store.previous(store.run(c.id)) == store.run(a.id)
    assert store.previous(store.run(a.id)) is None
    assert [r.id for r in store.runs(dataset="golden.csv")] == [a.id, c.id, d.id]
    assert store.runs(kind="calibrate") == []


def test_previous_is_of_the_same_judge(store: SQLStore) -> None:
    checks_only = start(store)
    judged = start(store, judge="app:grounded")
    other_judge = start(store, judge="app:strict")
    for run in (checks_only, judged, other_judge):
        store.finish_run(run.id, "complete", {})
    now = start(store, judge="app:grounded")
    assert store.previous(now) == store.run(judged.id)
    assert store.previous(start(store)) == store.run(checks_only.id)  # None matches None
    assert store.previous(start(store, judge="app:new")) is None


def test_text_with_a_lone_surrogate_is_stored_with_a_question_mark(store: SQLStore) -> None:
    run = start(store)
    odd = "half a pair \ud800 here"
    store.save_case(
        run.id,
        CaseRecord(
            key="k",
            position=1,
            question=odd,
            row={"question": odd},
            outcome="failed",
            answer=odd,
            error=odd,
            feedback=odd,
        ),
    )
    [case] = store.cases(run.id)
    assert case.question == case.answer == case.error == case.feedback == "half a pair ? here"
    assert case.row == {"question": "half a pair ? here"}


# --- resuming through the command -----------------------------------------------------------


def test_a_resumed_run_skips_stored_cases_reruns_edited_rows_and_drops_removed_ones(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    target = ws.module(SYNC_ANSWER)
    server.script("answer", [answers({f"q{i}": "ok" for i in range(1, 6)})] * 20)
    rows = [{"question": f"q{i}", "must_mention": "ok"} for i in (1, 2, 3)]
    golden = ws.csv("golden.csv", rows)
    run = ("eval", golden, "--target", f"{target}:answer")
    assert cli(*run).code == 0
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        store.finish_run(1, "incomplete", {})  # as if it had been interrupted
        keys = {c.question: c.key for c in store.cases(1)}

    # q2 edited (a new case), q3 removed, q4 added
    ws.csv(
        "golden.csv",
        [rows[0], {"question": "q2", "must_mention": "OK"}, rows[2] | {"question": "q4"}],
    )
    before = len(server.requests)
    resumed = cli(*run)

    assert resumed.code == 0, resumed.err
    assert "resuming run 1: 1 of 3 cases already stored" in resumed.out
    # the old q2 and q3
    assert "2 stored cases are no longer in the file: dropped from the run" in resumed.out
    assert sorted(asked(server)[before:]) == ["q2", "q4"]  # q1 was not asked again
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [info] = store.runs()
        cases = store.cases(info.id)
    assert info.status == "complete"
    assert [c.question for c in cases] == ["q1", "q2", "q4"]
    assert cases[0].key == keys["q1"]
    assert cases[1].key != keys["q2"]

    fresh = cli(*run, "--fresh")  # a complete run is never resumed; --fresh never resumes
    assert fresh.code == 0
    assert "resuming" not in fresh.out
    assert len(server.requests) == before + 5


def test_eval_runs_compare_report_and_resume_through_a_postgresql_store(
    ws: Workspace,
    server: ScriptedOpenAI,
    cli: Cli,
    postgres_server: PostgresServer,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = ws.module(SYNC_ANSWER)
    server.script("answer", [answers({f"q{i}": "ok" for i in range(1, 4)})] * 20)
    golden = ws.csv("golden.csv", [{"question": f"q{i}", "must_mention": "ok"} for i in (1, 2, 3)])
    run = ("eval", golden, "--target", f"{target}:answer", "--db", postgres_url)
    first = cli(*run)
    assert first.code == 0, first.err
    assert f"run 1 in {safe_url(postgres_url)}" in first.out
    assert not (ws.path / ".refinekit").exists()  # no SQLite file was made

    with PostgresStore(postgres_url) as store:
        [info] = store.runs()
        assert (info.status, len(store.cases(info.id))) == ("complete", 3)
        store.finish_run(info.id, "incomplete", {})  # as if it had been interrupted
        store.drop_cases(info.id, {store.cases(info.id)[2].key})
    before = len(server.requests)
    monkeypatch.setenv("REFINEKIT_DB", postgres_url)  # the same store, by the environment
    resumed = cli(*run[:-2])
    assert resumed.code == 0, resumed.err
    assert "resuming run 1: 2 of 3 cases already stored" in resumed.out
    assert asked(server)[before:] == ["q3"]

    second = cli(*run, "--fresh", "--compare", "previous", "--report", "html")
    assert second.code == 0, second.err
    assert "run 2" in second.out
    assert "compare with run 1: 3 questions judged in both runs" in second.out
    listed = cli("runs", "--db", postgres_url)
    assert listed.code == 0, listed.err
    assert len([line for line in listed.out.splitlines() if " eval " in line]) == 2
    report = (ws.path / "report-run-2.html").read_text(encoding="utf-8")
    for text in (first.out, first.err, resumed.out, second.out, second.err, listed.out, report):
        assert postgres_server.password not in text
    with PostgresStore(postgres_url) as store:
        for row in store._all("SELECT * FROM runs"):
            assert postgres_server.password not in repr(row)


# --- a real interrupted process: SIGKILL and SIGINT --------------------------------------------


BLOCKING = (
    ASKING
    + """
import asyncio
import pathlib
import time

def blocks(question):
    if question != os.environ.get("RK_BLOCK_ON"):
        return False
    pathlib.Path("started").write_text(question)  # tell the test, then wait for a file
    return True                                    # that never appears

def answer(question):
    if blocks(question):
        while not pathlib.Path("never").exists():
            time.sleep(0.01)
    return ask(question)

async def aanswer(question):
    if blocks(question):
        while not pathlib.Path("never").exists():
            await asyncio.sleep(0.01)
    return await aask(question)
"""
)

QUESTIONS = [f"q{i}" for i in range(1, 6)]


def interrupted_eval(
    ws: Workspace, server: ScriptedOpenAI, function: str, sig: int
) -> tuple[int, str, str]:
    """`python -m refinekit eval` blocked on q3 (q1 and q2 done), then sent `sig`."""
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in QUESTIONS])
    target = ws.module(BLOCKING, stem="blocking")
    command = ["eval", golden.name, "--target", f"{target}:{function}", "--concurrency", "1"]
    child = refinekit_process(ws.path, *command, RK_BASE_URL=server.base_url, RK_BLOCK_ON="q3")
    try:
        deadline = time.monotonic() + 60
        while not (ws.path / "started").exists():
            if child.poll() is not None or time.monotonic() > deadline:
                out, err = child.communicate()
                pytest.fail(f"the eval never reached q3 (exit {child.returncode}):\n{out}\n{err}")
            time.sleep(0.02)
        child.send_signal(sig)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, out, err


def resume_in_process(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the same command again here (q3 no longer blocks): only q3 to q5 are asked."""
    monkeypatch.delenv("RK_BLOCK_ON", raising=False)
    [target] = ws.modules
    resumed = cli("eval", "golden.csv", "--target", f"{target}:{function}", "--concurrency", "1")

    assert resumed.code == 0, resumed.err
    assert "resuming run 1: 2 of 5 cases already stored" in resumed.out
    assert table(resumed.out) == dict.fromkeys(range(1, 6), "pass")
    assert asked(server) == QUESTIONS  # q1 and q2 were asked once, by the killed process
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        assert run.status == "complete"
        assert len(store.cases(run.id)) == 5


def test_sigkill_keeps_finished_cases_shows_the_run_incomplete_and_it_resumes(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script("answer", [answers(dict.fromkeys(QUESTIONS, "ok"))] * 5)

    code, out, _ = interrupted_eval(ws, server, "aanswer", signal.SIGKILL)

    assert code == -signal.SIGKILL
    assert "-> run 1 in .refinekit/runs.db" in out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        cases = store.cases(run.id)
    assert run.status == "incomplete"  # it says "running", but its process is gone
    assert run.finished_at is None
    assert [(c.question, c.outcome, c.answer) for c in cases] == [
        ("q1", "passed", "ok"),
        ("q2", "passed", "ok"),
    ]
    listed = cli("runs")
    assert listed.out.splitlines()[1].split()[:3] == ["1", "eval", "incomplete"]
    assert asked(server) == ["q1", "q2"]

    resume_in_process(ws, server, cli, "aanswer", monkeypatch)


@pytest.mark.parametrize("function", ["answer", "aanswer"])
def test_sigint_exits_130_marks_the_run_incomplete_and_it_resumes(
    ws: Workspace,
    server: ScriptedOpenAI,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
) -> None:
    # "answer" is a def blocked in its worker thread: Ctrl-C must not wait for it
    server.script("answer", [answers(dict.fromkeys(QUESTIONS, "ok"))] * 5)

    code, out, err = interrupted_eval(ws, server, function, signal.SIGINT)

    assert code == 130, err
    assert err.strip() == "refinekit eval: error: interrupted"
    assert (
        "run 1 is incomplete: 2 of 5 cases stored. Run the same command again to finish it "
        "without paying again for those." in out
    )
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        assert [c.question for c in store.cases(run.id)] == ["q1", "q2"]
    assert run.status == "incomplete"
    assert run.finished_at is not None  # said so itself
    assert run.summary == {"stored": 2, "cases": 5, "retried": 0}

    resume_in_process(ws, server, cli, function, monkeypatch)


# --- the PostgreSQL store's own --------------------------------------------------------------


def test_a_postgresql_url_opens_a_postgresql_store(postgres_url: str, tmp_path: Path) -> None:
    with open_store(postgres_url) as store:
        assert isinstance(store, PostgresStore)
        assert store.where == safe_url(postgres_url)
    with open_store(tmp_path / "runs.db") as store:
        assert isinstance(store, SQLiteStore)


def test_a_nul_in_text_is_kept_by_sqlite_and_a_replacement_character_in_postgresql(
    store: SQLStore,
) -> None:
    run = start(store)
    store.save_case(
        run.id, CaseRecord(key="k", position=1, question="a\x00b", row={}, outcome="failed")
    )
    [case] = store.cases(run.id)
    assert case.question == ("a\ufffdb" if isinstance(store, PostgresStore) else "a\x00b")


def test_postgresql_credentials_never_reach_an_error(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    password = postgres_server.password
    wrong = postgres_url.replace(password, "Wr0ngPassw0rd-xyz")
    with pytest.raises(RunStoreError) as refused:
        PostgresStore(wrong)
    message = str(refused.value)
    assert "password authentication failed" in message
    assert "Wr0ngPassw0rd-xyz" not in message
    assert password not in message
    assert f"127.0.0.1:{postgres_server.port}" in message  # what to fix: which server

    closed = f"postgresql://u:Hunter2-secret@127.0.0.1:{free_port()}/db?connect_timeout=5"
    with pytest.raises(RunStoreError, match="cannot open the run store") as unreachable:
        PostgresStore(closed)
    assert "Hunter2-secret" not in str(unreachable.value)

    # libpq would quote a password it cannot decode: refused before, the reason kept
    garbled = f"postgresql://u:Hunter2%zzsecret@127.0.0.1:{free_port()}/db"
    with pytest.raises(RunStoreError, match="a '%' that is not followed by two hex") as bad:
        PostgresStore(garbled)
    assert "Hunter2" not in str(bad.value)
    assert "zzsecret" not in str(bad.value)


def test_a_postgresql_store_of_a_newer_refinekit_is_refused(postgres_url: str) -> None:
    with PostgresStore(postgres_url) as store:
        store._exec("UPDATE schema_version SET version = 99")
    with pytest.raises(RunStoreError, match=r"newer refinekit \(schema 99, this one reads 7\)"):
        PostgresStore(postgres_url)


def test_a_postgresql_store_applies_the_steps_it_lacks_all_or_none(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore(postgres_url) as store:
        run = start(store)
        assert store._all("SELECT version FROM schema_version") == [{"version": 7}]
    bad = ("ALTER TABLE runs ADD COLUMN host TEXT", "ALTER TABLE nowhere ADD COLUMN x TEXT")
    monkeypatch.setattr(pgstore, "_MIGRATIONS", (*pgstore._MIGRATIONS, bad))
    with pytest.raises(RunStoreError, match=r"from schema 7 to 8: .*nowhere"):
        PostgresStore(postgres_url)
    good = ("ALTER TABLE runs ADD COLUMN host TEXT",)
    monkeypatch.setattr(pgstore, "_MIGRATIONS", (*pgstore._MIGRATIONS[:7], good))
    with PostgresStore(postgres_url) as store:  # the failed step left nothing: host is new
        assert store.run(run.id).id == run.id
        assert store._all("SELECT host FROM runs") == [{"host": None}]
        assert store._all("SELECT version FROM schema_version") == [{"version": 8}]


def test_postgresql_stores_opened_at_once_on_a_new_database_make_it_once(
    postgres_url: str,
) -> None:
    def open_one() -> None:
        PostgresStore(postgres_url).close()

    errors = at_once(*[open_one] * 4)
    assert errors == []
    with PostgresStore(postgres_url) as store:
        assert store._all("SELECT version FROM schema_version") == [{"version": 7}]


def test_store_location_names_a_file_or_a_url_shown_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REFINEKIT_DB", raising=False)
    assert refinekit.eval.store_location(None) == Path(".refinekit/runs.db")
    assert refinekit.eval.store_path("runs/x.db") == Path("runs/x.db")
    url = "postgresql://ci:s3cret-pass@db.internal:5432/evals"
    monkeypatch.setenv("REFINEKIT_DB", url)
    where = refinekit.eval.store_location(None)
    assert isinstance(where, refinekit.eval.StoreURL)
    assert str(where) == safe_url(url) == "postgresql://db.internal:5432/evals"
    assert "s3cret" not in f"{where} {where!r}"
    with pytest.raises(UsageProblem, match="is a PostgreSQL database, not a file") as info:
        refinekit.eval.store_path(None)
    assert "s3cret" not in str(info.value)


def test_a_postgresql_connection_lost_mid_run_is_a_store_error_without_the_password(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with PostgresStore(postgres_url) as store:
        run_id = queued(store, 3)
        [row] = store._all("SELECT pg_backend_pid() AS pid")
        with PostgresStore(postgres_url) as admin:  # the server ends the first one's session
            admin._exec("SELECT pg_terminate_backend(?)", (row["pid"],))
        with pytest.raises(RunStoreError, match=r"the run store postgresql://.* failed") as info:
            store.claim(run_id, "this-worker")
    assert postgres_server.password not in str(info.value)
    assert info.value.__suppress_context__  # psycopg's error (and the URL in it) not chained


def test_a_cases_cost_round_trips(store: SQLStore) -> None:
    run = start(store)
    cost = {"answer": 0.0125, "answer_judge": 0.0, "judge": 0.002, "extra": 0.005}
    store.save_case(
        run.id, CaseRecord(key="k", position=1, question="Q?", row={}, outcome="passed", cost=cost)
    )
    assert store.cases(run.id)[0].cost == cost


def test_cases_of_some_outcomes_only_with_their_calls(store: SQLStore) -> None:
    run = start(store)
    for key, outcome in (("a", "passed"), ("b", "raised"), ("c", "unavailable")):
        store.save_case(
            run.id,
            CaseRecord(
                key=key,
                position=ord(key),
                question=key,
                row={},
                outcome=outcome,  # type: ignore[arg-type]
                answer_usage=Usage(1, 10, 2),
            ),
        )
    some = store.cases(run.id, outcomes=("raised", "unavailable"))
    assert [(c.key, c.answer_usage) for c in some] == [
        ("b", Usage(1, 10, 2)),
        ("c", Usage(1, 10, 2)),
    ]
    assert store.cases(run.id, outcomes=()) == []
    assert [c.key for c in store.cases(run.id)] == ["a", "b", "c"]


# --- what a `db` argument may be: a path, a sound PostgreSQL URL; nothing else ----------------

MARKS_A_RUN = (
    "import pathlib\n\ndef answer(question):\n    pathlib.Path('called').touch()\n    return 'ok'\n"
)

# a password holding what a URL reserves, not percent-encoded; "Hunter" is the part that a
# URL parser reads as a port, a path or a fragment, and must never be shown
MALFORMED_URLS = [
    ("postgresql://u:Hunter#2pw@127.0.0.1:5432/x", "it holds a '#'"),
    ("postgresql://u:Hunter/2pw@127.0.0.1:5432/x", "it holds an '@' after its host part"),
    ("postgresql://u:Hunter?2pw@127.0.0.1:5432/x", "it holds an '@' after its host part"),
    ("postgresql://u:Hunter@2pw@127.0.0.1:5432/x", "its user info holds an '@'"),
    ("postgres://u:Hunter%zz@127.0.0.1:5432/x", "a '%' that is not followed by two hex digits"),
    ("postgresql://u:Hunter2pw@[::1/x", "an IPv6 address's '[' is never closed"),
    ("postgresql://u:Hunter2pw@127.0.0.1:99999/x", "the port of host '127.0.0.1' is not a number"),
    ("postgresql://u:Hunter2pw@127.0.0.1:5432x/x", "the port of host '127.0.0.1' is not a number"),
]


@pytest.mark.parametrize("command", ["eval", "runs"])
@pytest.mark.parametrize(("url", "said"), MALFORMED_URLS)
def test_a_malformed_postgresql_url_is_a_usage_error_that_shows_no_user_info(
    ws: Workspace, cli: Cli, command: str, url: str, said: str
) -> None:
    target = ws.module(MARKS_A_RUN)
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    args = ("eval", golden, "--target", f"{target}:answer") if command == "eval" else ("runs",)

    result = cli(*args, "--db", url)

    assert result.code == 2
    assert result.out == ""
    [line] = result.err.splitlines()
    assert line.startswith(f"refinekit {command}: error: the run store postgres")
    assert "is not a valid PostgreSQL URL (user info not shown): " in line
    assert said in line
    assert "Hunter" not in line
    assert not (ws.path / "called").exists()
    assert not (ws.path / ".refinekit").exists()


@pytest.mark.parametrize(("url", "said"), MALFORMED_URLS)
def test_a_malformed_postgresql_url_raises_usage_problem_from_the_api_without_user_info(
    ws: Workspace, url: str, said: str
) -> None:
    target = ws.module(MARKS_A_RUN)
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    calls = (
        lambda: refinekit.eval.run(golden, target=f"{target}:answer", db=url),
        lambda: refinekit.eval.runs(db=url),
        lambda: refinekit.eval.store_location(url),
    )
    for call in calls:
        with pytest.raises(UsageProblem, match=re.escape(said)) as info:
            call()
        assert "Hunter" not in str(info.value)
    with pytest.raises(ValueError, match=re.escape(said)) as cache_error:
        PostgresCache(url)
    assert "Hunter" not in str(cache_error.value)
    assert not (ws.path / "called").exists()


@pytest.mark.parametrize("command", ["eval", "runs"])
@pytest.mark.parametrize(
    "url", ["mysql://x/y", "sqlite:///runs.db", "http://example.com/runs.db", "POSTGRESQL://h/db"]
)
def test_a_url_of_a_scheme_refinekit_does_not_store_in_is_a_usage_error(
    ws: Workspace, cli: Cli, command: str, url: str
) -> None:
    target = ws.module(MARKS_A_RUN)
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    args = ("eval", golden, "--target", f"{target}:answer") if command == "eval" else ("runs",)
    before = sorted(ws.path.iterdir())

    result = cli(*args, "--db", url)

    assert result.code == 2
    scheme = url.partition("://")[0]
    sqlite = " (a SQLite store is named by its file's path, not a sqlite:// URL)"
    assert result.err == (
        f"refinekit {command}: error: the run store {url}: refinekit keeps runs in SQLite files "
        f"and PostgreSQL databases, not in {scheme}:// ones"
        + (sqlite if scheme == "sqlite" else "")
        + "; give a SQLite file's path (runs.db, /data/evals/runs.db) or a PostgreSQL URL "
        "(postgresql://host:5432/database, or postgres://, with user:password@ before the host)\n"
    )
    assert sorted(ws.path.iterdir()) == before  # no file, no folder made of the URL
    with pytest.raises(UsageProblem, match=f"not in {scheme}:// ones"):
        refinekit.eval.run(golden, target=f"{target}:answer", db=url)


def test_paths_that_look_a_little_like_urls_are_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFINEKIT_DB", "mysql://x/y")
    with pytest.raises(UsageProblem, match=r"the run store mysql://x/y \(\$REFINEKIT_DB\): "):
        refinekit.eval.store_location(None)
    for path in ("C://evals/runs.db", "C:\\evals\\runs.db", "C:/evals/runs.db", "runs:1.db"):
        assert refinekit.eval.store_location(path) == Path(path)
    url = "postgresql://u:p%23ss%2Fw0rd%3F%40@db.internal:5432/evals"
    where = refinekit.eval.store_location(url)
    assert isinstance(where, refinekit.eval.StoreURL)
    assert (str(where), where._url) == ("postgresql://db.internal:5432/evals", url)
    several = "postgresql://h1:5432,h2:5433/evals?target_session_attrs=read-write"  # libpq's
    assert str(refinekit.eval.store_location(several)) == "postgresql://h1:5432,h2:5433/evals"


def test_runs_of_a_store_that_does_not_exist_is_a_usage_error(ws: Workspace, cli: Cli) -> None:
    missing = ws.path / "nonexistent" / "x.db"

    result = cli("runs", "--db", missing)

    assert result.code == 2
    assert result.out == ""
    assert result.err == (
        f"refinekit runs: error: no run store at {missing} (refinekit eval and calibrate make "
        "one; give --db the store they used)\n"
    )
    assert not (ws.path / "nonexistent").exists()  # reading makes nothing
    assert refinekit.eval.runs(db=missing) == []  # the API: no store, no runs


def test_a_password_with_url_characters_works_percent_encoded_and_is_shown_nowhere(
    ws: Workspace, cli: Cli, postgres_server: PostgresServer
) -> None:
    import psycopg
    from psycopg import sql

    password = "Hunter#2pw/x?y@z%:"
    name = f"r{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(password)
            )
        )
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(name)
            )
        )
    encoded = quote(password, safe="")
    url = f"postgresql://{name}:{encoded}@127.0.0.1:{postgres_server.port}/{name}"
    target = ws.module("def answer(question):\n    return 'ok'\n")
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])

    ran = cli("eval", golden, "--target", f"{target}:answer", "--db", url, "--cache")
    listed = cli("runs", "--db", url)
    unencoded = cli("runs", "--db", url.replace(encoded, password))

    assert ran.code == 0, ran.err
    assert f"run 1 in postgresql://127.0.0.1:{postgres_server.port}/{name}" in ran.out
    assert listed.code == 0, listed.err
    assert len([line for line in listed.out.splitlines() if " eval " in line]) == 1
    assert unencoded.code == 2
    with PostgresCache(url) as cache:
        cache.set("k" * 64, '{"v": 1}')
        assert cache.get("k" * 64) == '{"v": 1}'
        assert password not in repr(cache)
    for text in (ran.out, ran.err, listed.out, listed.err, unencoded.out, unencoded.err):
        assert "Hunter" not in text
        assert encoded not in text
