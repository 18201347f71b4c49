"""`refinekit eval --cache`: the run judge's verdicts kept in the run store, not paid for twice.

Real `refinekit eval` runs (in this process) against the scripted server: a criteria judge on
a `JudgeModel` with no cache of its own. The first run with `--cache` sends every judge
request and stores the replies; the same run again sends none; what changes misses; each
`--repeat` is keyed apart; the answer function's own calls are never cached.
"""

from __future__ import annotations

import importlib
import json
import sqlite3

import pytest
from helpers import (
    CRITERIA_JUDGE,
    SYNC_ANSWER,
    Cli,
    Workspace,
    answers,
    judge_replies,
)

import refinekit.eval
from refinekit import EvaluationRequest, judges
from refinekit.eval import EvalResult
from refinekit.eval._store._postgres import PostgresStore
from refinekit.judges import JudgeCache, PostgresCache, SQLiteCache
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
        *extra,
    )


def judged(server: ScriptedOpenAI) -> int:
    return len(server.requests_for("judge"))


def test_the_same_eval_again_with_cache_makes_no_judge_call(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    first = cli(*command(ws, "--cache"))
    assert first.code == 0, first.err
    assert "judge cache: 0 of 3 judge requests answered from the store (3 sent to the model)" in (
        first.out
    )
    assert judged(server) == 3
    again = cli(*command(ws, "--cache", "--fresh"))
    assert again.code == 0, again.err
    assert "judge cache: 3 of 3 judge requests answered from the store (0 sent to the model)" in (
        again.out
    )
    assert judged(server) == 3  # none sent the second time
    assert len(server.requests_for("answer")) == 6  # the answers are not cached: asked again
    results = refinekit.eval.runs()
    assert [r.summary["judge_cache"] for r in results] == [
        {"hits": 0, "misses": 3},
        {"hits": 3, "misses": 0},
    ]
    # the same verdicts: the cached replies are read as the fresh ones were
    assert [r.summary["passed"] for r in results] == [2, 2]
    assert results[1].summary["usage"]["judge"]["model_calls"] == 0  # a hit costs nothing


def test_a_stored_reply_the_judge_cannot_read_costs_one_call_not_one_a_run(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    assert cli(*command(ws, "--cache")).code == 0
    store = sqlite3.connect(ws.path / ".refinekit" / "runs.db")
    with store:
        key, value = store.execute("SELECT key, value FROM refinekit_judge_cache").fetchone()
        stored = json.loads(value)
        stored["value"]["choices"][0]["message"]["content"] = "Maybe"  # no verdict in it
        stored["value"]["choices"][0]["logprobs"] = None
        store.execute(
            "UPDATE refinekit_judge_cache SET value = ? WHERE key = ?", (json.dumps(stored), key)
        )
    store.close()

    again = cli(*command(ws, "--cache", "--fresh"))
    third = cli(*command(ws, "--cache", "--fresh"))

    assert again.code == 0, again.err
    assert "0 unavailable" in again.out  # the case was judged, from the model
    assert "judge cache: 2 of 3 judge requests answered from the store (1 sent to the model)" in (
        again.out
    )
    assert "judge cache: 3 of 3 judge requests answered from the store (0 sent to the model)" in (
        third.out
    )
    assert judged(server) == 3 + 1
    results = refinekit.eval.runs()
    assert [r.summary["judge_cache"] for r in results] == [
        {"hits": 0, "misses": 3},
        {"hits": 2, "misses": 1},
        {"hits": 3, "misses": 0},
    ]
    assert [r.summary["passed"] for r in results] == [2, 2, 2]


def test_without_cache_every_judgement_is_paid_for_and_nothing_is_said(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    cli(*command(ws, "--cache"))
    plain = cli(*command(ws, "--fresh"))
    assert plain.code == 0, plain.err
    assert "judge cache" not in plain.out
    assert judged(server) == 6


def test_a_changed_answer_misses_and_the_rest_hit(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    cli(*command(ws, "--cache"))
    server.reset()
    server.script("answer", answers(REPLIES | {"Refund window?": "Ten days."}), times=None)
    server.script("judge", judge_replies(VERDICTS), times=None)
    changed = cli(*command(ws, "--cache", "--fresh"))
    assert changed.code == 0, changed.err
    assert "judge cache: 2 of 3 judge requests answered from the store (1 sent to the model)" in (
        changed.out
    )
    [asked] = server.requests_for("judge")
    assert "Ten days." in str(asked.body)


def test_each_repeat_is_keyed_apart_and_the_first_is_the_plain_runs(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    plain = cli(*command(ws, "--cache"))
    assert plain.code == 0, plain.err
    repeated = cli(*command(ws, "--cache", "--repeat", "3"))
    assert repeated.code == 0, repeated.err
    # repeat 1 is the plain run's judgement; repeats 2 and 3 are judged anew
    assert "judge cache: 3 of 9 judge requests answered from the store (6 sent to the model)" in (
        repeated.out
    )
    assert judged(server) == 3 + 6
    again = cli(*command(ws, "--cache", "--repeat", "3", "--fresh"))
    assert "judge cache: 9 of 9 judge requests answered from the store (0 sent" in again.out
    assert judged(server) == 9


def test_a_postgresql_store_keeps_the_cache_for_every_machine(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, postgres_url: str
) -> None:
    first = cli(*command(ws, "--cache", "--db", postgres_url))
    assert first.code == 0, first.err
    again = cli(*command(ws, "--cache", "--fresh", "--db", postgres_url))
    assert again.code == 0, again.err
    assert "judge cache: 3 of 3 judge requests answered from the store (0 sent" in again.out
    assert judged(server) == 3
    with PostgresStore(postgres_url) as store:
        [row] = store._all("SELECT count(*) AS n FROM refinekit_judge_cache")
        assert row["n"] == 3
        for value in store._all("SELECT value FROM refinekit_judge_cache"):
            assert "sk-test" not in value["value"]  # a stored reply holds no key


def test_calibrate_with_cache_judges_the_labelled_answers_once(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    command(ws)
    _, judge = ws.modules
    ws.csv(
        "labels.csv",
        [
            {"question": "Refund window?", "answer": "Seven days.", "label": "pass"},
            {"question": "Gift cards?", "answer": "No.", "label": "fail"},
        ],
    )
    first = refinekit.eval.calibrate("labels.csv", judge=f"{judge}:judge", cache=True)
    second = refinekit.eval.calibrate(
        "labels.csv", judge=f"{judge}:judge", cache=True, resume=False
    )
    assert judged(server) == 2
    assert second.run.summary["judge_cache"] == {"hits": 2, "misses": 0}
    assert second.calibration.kappa == first.calibration.kappa == 1.0


def test_the_report_says_what_the_cache_saved(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    cli(*command(ws, "--cache"))
    again = cli(*command(ws, "--cache", "--fresh", "--report", "report.html"))
    assert again.code == 0, again.err
    report = (ws.path / "report.html").read_text(encoding="utf-8")
    assert "<b>3</b> of 3 judge requests answered from the run store, 0 sent to the model" in report
    plain = cli(*command(ws, "--fresh", "--report", "plain.html"))
    assert plain.code == 0, plain.err
    assert "Judge cache" not in (ws.path / "plain.html").read_text(encoding="utf-8")


def test_a_verdict_from_the_cache_costs_nothing(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    (ws.path / "prices.json").write_text('{"answer": [1.0, 2.0], "judge": [3.0, 4.0]}')
    first = cli(*command(ws, "--cache", "--prices", "prices.json"))
    again = cli(*command(ws, "--cache", "--fresh", "--prices", "prices.json"))
    assert first.code == again.code == 0, again.err
    paid, cached = (r.summary["cost"] for r in refinekit.eval.runs())
    assert paid["judge"] > 0
    assert cached["judge"] == 0.0  # every verdict came from the store
    assert cached["answer"] == paid["answer"]  # the answers are asked again, as before


# --- one database for an app's judge cache and its evals' run store ------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_db(request: pytest.FixtureRequest, ws: Workspace) -> str:
    """A database an app's judge cache and `refinekit eval --db` both name (a new one)."""
    if request.param == "sqlite":
        return str(ws.path / "shared.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def open_cache(db: str) -> SQLiteCache | PostgresCache:
    """The app's judge cache on `db`, as it would open it."""
    return PostgresCache(db) if db.startswith("postgresql://") else SQLiteCache(db)


def judge_in_the_app(ws: Workspace, cache: JudgeCache) -> None:
    """The app's own judgements of the eval's answers, through `cache` (the eval's judge)."""
    judge = importlib.import_module(ws.modules[1]).judge
    with judges.use_cache(cache):
        for question, answer in REPLIES.items():
            judge.evaluate(EvaluationRequest(question=question, answer=answer))


def run_in_python(ws: Workspace, db: str) -> EvalResult:
    """The run `command` makes, with --cache, through the Python API (a new run, not resumed)."""
    return refinekit.eval.run(
        "golden.csv",
        target=f"{ws.modules[0]}:answer",
        judge=f"{ws.modules[1]}:judge",
        db=db,
        cache=True,
        resume=False,
    )


def runs_listed(cli: Cli, db: str) -> list[str]:
    listed = cli("runs", "--db", db)
    assert listed.code == 0, listed.err
    return [line.split()[1] for line in listed.out.splitlines()[1:]]


def test_an_eval_stores_its_runs_in_a_database_an_apps_judge_cache_made(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, shared_db: str
) -> None:
    command(ws)
    with open_cache(shared_db) as cache:  # the app first: the database holds only its cache
        cache.set("0" * 64, '{"kept": true}')  # an entry of the app's own
        judge_in_the_app(ws, cache)
        assert (len(cache), judged(server)) == (4, 3)

    first = cli(*command(ws, "--cache", "--db", shared_db))
    assert first.code == 0, first.err
    assert "run 1 in" in first.out
    # the app's judgements serve the eval's: one cache
    assert "judge cache: 3 of 3 judge requests answered from the store (0 sent" in first.out
    assert judged(server) == 3
    second = run_in_python(ws, shared_db)  # the Python API on the same database
    assert (second.run.id, second.run.summary["judge_cache"]) == (2, {"hits": 3, "misses": 0})
    assert runs_listed(cli, shared_db) == ["eval", "eval"]

    with open_cache(shared_db) as cache:  # nothing of the app's cache was lost
        assert len(cache) == 4
        assert cache.get("0" * 64) == '{"kept": true}'
        judge_in_the_app(ws, cache)
        assert (cache.hits, cache.misses) == (4, 0)
    assert judged(server) == 3


def test_an_apps_judge_cache_shares_a_database_that_holds_runs(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, shared_db: str
) -> None:
    first = cli(*command(ws, "--cache", "--db", shared_db))  # the evals first
    assert first.code == 0, first.err
    assert judged(server) == 3

    with open_cache(shared_db) as cache:
        assert len(cache) == 3  # the eval's verdicts
        judge_in_the_app(ws, cache)
        assert (cache.hits, cache.misses) == (3, 0)
        cache.set("0" * 64, '{"kept": true}')
    assert judged(server) == 3

    second = cli(*command(ws, "--cache", "--fresh", "--db", shared_db))
    assert second.code == 0, second.err
    assert "judge cache: 3 of 3 judge requests answered from the store (0 sent" in second.out
    third = run_in_python(ws, shared_db)
    assert third.run.summary["judge_cache"] == {"hits": 3, "misses": 0}
    assert runs_listed(cli, shared_db) == ["eval", "eval", "eval"]
    with open_cache(shared_db) as cache:
        assert (len(cache), cache.get("0" * 64)) == (4, '{"kept": true}')
    assert judged(server) == 3
