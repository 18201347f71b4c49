"""The judge cache over real HTTP: ScriptedOpenAI, the real openai client, sync and async.

A judgement asked again with a cache on the judge model is answered from the cache: the
server receives no request for it, and no judge usage is counted. Everything that changes the
request sent (the answer, the judge's prompt, the model, a sampling parameter, a salt) misses;
failures are never stored; a sampled judge is not cached unless asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import close_clients

import refinekit
from refinekit import (
    ContextDocument,
    EvaluationRequest,
    Event,
    JudgeMisconfigured,
    JudgeReplyError,
    Usage,
    judges,
)
from refinekit.judges import (
    Criterion,
    JudgeCache,
    JudgeModel,
    MemoryCache,
    SQLiteCache,
    cache_salt,
)
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

JUDGE = "judge"
REQUEST = EvaluationRequest(
    question="Can I get a refund for my order?",
    answer="Yes, if the order is unused and you ask within seven days.",
    context=(ContextDocument(text="An unused order may be refunded within seven days."),),
)
ANSWERS = Criterion("answers", "Does the answer answer the question?", "Answer it.")
KEEPS = Criterion("keeps", "Does the answer keep the seven-day limit?", "Keep the limit.")
RATING = '{"rating": 4, "feedback": "Correct and complete."}'
YES = Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, prompt_tokens=100, completion_tokens=1)
KINDS = ["relevancy", "fact_check", "rating", "criteria", "pairwise"]

MakeJudgeModel = Callable[..., JudgeModel]


@pytest.fixture
async def make_jm(kind: str, server: ScriptedOpenAI) -> AsyncIterator[MakeJudgeModel]:
    """`JudgeModel`s on the kind's client (sync or async), with a `MemoryCache` by default."""
    clients: list[Any] = []

    def make(model: str = JUDGE, **settings: Any) -> JudgeModel:
        client = settings.pop("client", None)
        if client is None:
            if not clients:
                clients.append(server.client() if kind == "sync" else server.async_client())
            client = clients[0]
        settings.setdefault("cache", MemoryCache())
        return JudgeModel(client, model, **settings)

    yield make
    await close_clients(clients)


def script_forever(server: ScriptedOpenAI, model: str = JUDGE) -> None:
    """Every judge request gets a reply each kind can read: a miss is a request that works."""

    def reply(request: RecordedRequest) -> str | Reply:
        body = request.body or {}
        if body.get("response_format") is not None:
            return RATING
        if "answer_a" in str(body["messages"][-1]["content"]):
            return "A"
        return YES

    server.script(model, reply, times=None)


def make_judge(name: str, jm: JudgeModel) -> Any:
    return {
        "relevancy": lambda: judges.relevancy(jm),
        "fact_check": lambda: judges.fact_check(jm),
        "rating": lambda: judges.rating(jm),
        "criteria": lambda: judges.criteria(jm, [ANSWERS, KEEPS]),
        "pairwise": lambda: judges.pairwise(jm),
    }[name]()


async def judge(kind: str, judge: Any, request: EvaluationRequest = REQUEST) -> Any:
    """A verdict (or a pairwise winner) by the kind's path: `evaluate` or `aevaluate`."""
    if isinstance(judge, judges.Pairwise):
        args = (request.question, request.answer, "No refunds.", request.context)
        if kind == "sync":
            return await asyncio.to_thread(judge.compare, *args)
        return await judge.acompare(*args)
    if kind == "sync":
        return await asyncio.to_thread(judge.evaluate, request)
    return await judge.aevaluate(request)


# --- a second identical judgement makes no request ----------------------------------------------


@pytest.mark.parametrize("name", KINDS)
async def test_a_second_identical_judgement_makes_no_request(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, name: str
) -> None:
    script_forever(server)
    cache = MemoryCache()
    jm = make_jm(cache=cache)
    async with refinekit.job() as first_job:
        first = await judge(kind, make_judge(name, jm))
    asked = len(server.requests)
    assert asked >= 1
    assert first_job.judge_usage.model_calls == asked
    async with refinekit.job() as second_job:
        second = await judge(kind, make_judge(name, jm))  # a new judge: the model's cache
    assert len(server.requests) == asked  # no request
    assert second == first
    assert second_job.judge_usage == Usage()  # a hit costs nothing
    assert (cache.hits, cache.misses) == (asked, asked)
    assert len(cache) == asked


async def test_a_hit_gives_the_verdict_a_call_would_have(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    # logprobs, metadata, the criterion results: everything read from the reply is the same
    script_forever(server)
    jm = make_jm()
    fresh = await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
    again = await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
    assert len(server.requests) == 2
    assert again == fresh
    assert [c.source for c in again.criteria] == ["logprobs", "logprobs"]
    assert again.criteria[0].probability == pytest.approx(0.9)


async def test_the_verdict_is_read_again_from_the_stored_reply_with_the_judges_thresholds(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    # The reply is what is stored, not the verdict: a stricter threshold needs no new call
    # and gives the verdict a fresh reply would have given it.
    script_forever(server)
    jm = make_jm()
    lenient = await judge(kind, judges.criteria(jm, [ANSWERS]))
    strict = await judge(
        kind, judges.criteria(jm, [Criterion(**{**vars(ANSWERS), "pass_at": 0.95})])
    )
    assert len(server.requests) == 1
    assert lenient.passed
    assert not strict.passed
    assert strict.criteria[0].outcome == "uncertain"


# --- what misses --------------------------------------------------------------------------------


CHANGES: dict[str, Callable[[MakeJudgeModel, JudgeCache], tuple[Any, EvaluationRequest]]] = {
    "the answer": lambda make, cache: (
        judges.relevancy(make(cache=cache)),
        REQUEST.model_copy(update={"answer": "Yes, within thirty days."}),
    ),
    "the context": lambda make, cache: (
        judges.relevancy(make(cache=cache)),
        REQUEST.model_copy(update={"context": (ContextDocument(text="No refunds."),)}),
    ),
    "the judge prompt": lambda make, cache: (judges.fact_check(make(cache=cache)), REQUEST),
    "the judge's prompt option": lambda make, cache: (
        judges.fact_check(make(cache=cache), prompt="minicheck"),
        REQUEST,
    ),
    "the model": lambda make, cache: (judges.relevancy(make("judge-2", cache=cache)), REQUEST),
    "the seed": lambda make, cache: (judges.relevancy(make(cache=cache, seed=7)), REQUEST),
    "max_tokens": lambda make, cache: (judges.relevancy(make(cache=cache, max_tokens=3)), REQUEST),
    "the temperature": lambda make, cache: (
        judges.relevancy(make(cache=cache, temperature=0.5, cache_sampled=True)),
        REQUEST,
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_each_change_to_the_request_misses(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, change: str
) -> None:
    script_forever(server)
    script_forever(server, "judge-2")
    cache = MemoryCache()
    await judge(kind, judges.relevancy(make_jm(cache=cache)))
    await judge(kind, judges.relevancy(make_jm(cache=cache)))
    assert len(server.requests) == 1  # the same request: a hit
    changed, request = CHANGES[change](make_jm, cache)
    await judge(kind, changed, request)
    assert len(server.requests) == 2
    assert (cache.hits, cache.misses) == (1, 2)


async def test_a_criterion_question_changed_misses_only_that_criterion(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    script_forever(server)
    jm = make_jm()
    await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
    reworded = Criterion("keeps", "Does the answer keep the 7-day limit?", "Keep the limit.")
    await judge(kind, judges.criteria(jm, [ANSWERS, reworded]))
    assert len(server.requests) == 3
    assert "7-day" in str((server.requests[2].body or {})["messages"])


async def test_an_option_that_only_reads_the_reply_hits(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    # relevancy(strict=True) sends the same request and reads the stored reply its own way
    server.script(JUDGE, "Yes, it is.")
    jm = make_jm()
    assert (await judge(kind, judges.relevancy(jm))).passed
    assert not (await judge(kind, judges.relevancy(jm, strict=True))).passed
    assert len(server.requests) == 1


async def test_the_time_limit_and_the_api_key_are_not_in_the_key(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    script_forever(server)
    cache = MemoryCache()
    await judge(kind, judges.relevancy(make_jm(cache=cache)))
    other_key = (
        server.client(api_key="sk-other-secret-0123456789abcdef")
        if kind == "sync"
        else server.async_client(api_key="sk-other-secret-0123456789abcdef")
    )
    try:
        jm = make_jm(client=other_key, cache=cache, timeout=5.0)
        await judge(kind, judges.relevancy(jm))
    finally:
        closed = other_key.close()
        if asyncio.iscoroutine(closed):
            await closed
    assert len(server.requests) == 1
    assert cache.hits == 1


# --- temperature --------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.7, None])
async def test_a_sampled_judge_is_not_cached_unless_asked(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, temperature: float | None
) -> None:
    script_forever(server)
    cache = MemoryCache()
    jm = make_jm(cache=cache, temperature=temperature)
    await judge(kind, judges.relevancy(jm))
    await judge(kind, judges.relevancy(jm))
    assert len(server.requests) == 2
    assert (cache.hits, cache.misses, len(cache)) == (0, 0, 0)  # never looked at
    asked = make_jm(cache=cache, temperature=temperature, cache_sampled=True)
    await judge(kind, judges.relevancy(asked))
    await judge(kind, judges.relevancy(asked))
    assert len(server.requests) == 3
    assert cache.hits == 1


# --- failures are never stored ------------------------------------------------------------------


async def test_a_failed_request_is_not_stored(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    server.script(JUDGE, [Reply.error(503), "Yes", "No"])
    jm = make_jm()
    unjudged = await judge(kind, judges.relevancy(jm, judge_error_policy="fail_open"))
    assert not unjudged.judged
    assert (await judge(kind, judges.relevancy(jm))).passed  # asked again: the 503 was not kept
    assert (await judge(kind, judges.relevancy(jm))).passed  # and this one was
    assert len(server.requests) == 2


async def test_an_unreadable_reply_is_not_stored(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    server.script(JUDGE, ["Maybe.", "Yes"])
    cache = MemoryCache()
    jm = make_jm(cache=cache)
    with pytest.raises(JudgeReplyError, match="did not answer yes or no"):
        await judge(kind, judges.relevancy(jm))
    assert len(cache) == 0
    assert (await judge(kind, judges.relevancy(jm))).passed
    assert len(server.requests) == 2


async def test_a_rating_that_never_validated_is_not_stored(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    server.script(JUDGE, ['{"rating": 9}', '{"rating": "high"}', RATING])
    cache = MemoryCache()
    jm = make_jm(cache=cache)
    with pytest.raises(JudgeReplyError, match="no valid Rating"):
        await judge(kind, judges.rating(jm, max_retries=1))
    assert len(cache) == 0
    assert (await judge(kind, judges.rating(jm, max_retries=1))).passed
    assert len(server.requests) == 3


async def test_an_unreadable_criterion_is_not_stored_and_the_readable_one_is(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    answers = {ANSWERS.question: [YES, YES], KEEPS.question: [Reply.text("Perhaps"), YES]}

    def reply(request: RecordedRequest) -> Reply:
        text = str((request.body or {})["messages"][-1]["content"])
        (question,) = [q for q in answers if q in text]
        return answers[question].pop(0)

    server.script(JUDGE, reply, times=None)
    cache = MemoryCache()
    jm = make_jm(cache=cache)
    with pytest.raises(JudgeReplyError, match="criterion 'keeps'"):
        await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS], probabilities="answer"))
    assert len(cache) == 1
    verdict = await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS], probabilities="answer"))
    assert verdict.passed
    assert len(server.requests) == 3  # "answers" came from the cache the second time


async def test_a_reply_without_required_logprobs_is_not_stored(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    server.script(JUDGE, [Reply.text("Yes", logprobs=False), YES])
    cache = MemoryCache()
    jm = make_jm(cache=cache)
    with pytest.raises(JudgeMisconfigured, match="no yes/no token probabilities"):
        await judge(kind, judges.criteria(jm, [ANSWERS], probabilities="logprobs"))
    assert len(cache) == 0


# --- the salt -----------------------------------------------------------------------------------


async def test_a_salt_keys_the_same_request_apart(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    script_forever(server)
    jm = make_jm()
    for repeat in (1, 2, 1, 2):
        with cache_salt(f"repeat={repeat}"):
            await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
    assert len(server.requests) == 4  # two repeats apart, each asked once
    await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))  # no salt: apart from both
    assert len(server.requests) == 6
    with cache_salt("repeat=1"), cache_salt("nested"):  # salts nest
        await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
    assert len(server.requests) == 8


def test_a_salt_is_text() -> None:
    salt: Any = 1
    with pytest.raises(TypeError, match="cache_salt takes a str"), cache_salt(salt):
        pass


# --- the SQLite backend -------------------------------------------------------------------------


async def test_two_sqlite_caches_on_one_file_share_their_entries(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, tmp_path: Path
) -> None:
    script_forever(server)
    path = tmp_path / "judge-cache.sqlite"
    with SQLiteCache(path) as writer, SQLiteCache(path) as reader:
        first = await judge(kind, judges.criteria(make_jm(cache=writer), [ANSWERS, KEEPS]))
        again = await judge(kind, judges.criteria(make_jm(cache=reader), [ANSWERS, KEEPS]))
        assert again == first
        assert len(server.requests) == 2
        assert (reader.hits, reader.misses) == (2, 0)
        assert len(reader) == 2
        reader.clear()
        assert len(writer) == 0
    with SQLiteCache(path) as reopened:
        await judge(kind, judges.criteria(make_jm(cache=reopened), [ANSWERS, KEEPS]))
    assert len(server.requests) == 4  # cleared: asked again


CHILD = """
import sys
import openai
from refinekit import ContextDocument, EvaluationRequest, judges

with judges.SQLiteCache(sys.argv[2]) as cache, openai.OpenAI(
    base_url=sys.argv[1], api_key="another-key", max_retries=0
) as client:
    verdict = judges.relevancy(judges.JudgeModel(client, "judge", cache=cache)).evaluate(
        EvaluationRequest(
            question=sys.argv[3], answer=sys.argv[4], context=(ContextDocument(text=sys.argv[5]),)
        )
    )
    print(verdict.passed, cache.hits, cache.misses)
"""


async def test_an_sqlite_cache_is_shared_with_another_process(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, tmp_path: Path
) -> None:
    script_forever(server)
    path = tmp_path / "judge-cache.sqlite"
    with SQLiteCache(path) as cache:
        await judge(kind, judges.relevancy(make_jm(cache=cache)))
    child = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-c",
            CHILD,
            server.base_url,
            str(path),
            REQUEST.question,
            REQUEST.answer,
            REQUEST.context[0].text,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["True", "1", "0"]
    assert len(server.requests) == 1


def test_sqlite_cache_says_what_to_fix_for_a_path_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="in a folder that exists"):
        SQLiteCache(tmp_path / "missing" / "cache.sqlite")
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("these are not an SQLite database " * 100)
    with pytest.raises(ValueError, match="as an SQLite database"):
        SQLiteCache(not_sqlite)


def test_sqlite_cache_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    import sqlite3

    with SQLiteCache(tmp_path / "c.sqlite", timeout=2.5) as cache:
        assert cache._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert cache._db.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    db.close()
    assert tables == ["refinekit_judge_cache"]


# --- the memory backend -------------------------------------------------------------------------


def test_memory_cache_drops_the_least_recently_used() -> None:
    cache = MemoryCache(max_entries=2)
    cache.set("a", "1")
    cache.set("b", "2")
    assert cache.get("a") == "1"  # a is now the most recently used
    cache.set("c", "3")
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == ("1", "3")
    assert (cache.hits, cache.misses, len(cache)) == (3, 1, 2)
    cache.clear()
    assert len(cache) == 0


def test_memory_cache_is_thread_safe() -> None:
    cache = MemoryCache(max_entries=50)

    def work(n: int) -> None:
        for i in range(500):
            cache.set(f"{n}-{i}", str(i))
            cache.get(f"{n}-{i - 1}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 50
    assert cache.hits + cache.misses == 8 * 500


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_memory_cache_needs_a_positive_size(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_entries must be a positive int"):
        MemoryCache(max_entries=bad)


def test_judge_model_refuses_what_is_not_a_cache(server: ScriptedOpenAI) -> None:
    with server.client() as client:
        with pytest.raises(TypeError, match="cache must be a judge cache"):
            JudgeModel(client, JUDGE, cache={})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="cache_sampled must be a bool"):
            JudgeModel(client, JUDGE, cache=MemoryCache(), cache_sampled=1)  # type: ignore[arg-type]


# --- a backend of your own ----------------------------------------------------------------------


class DictCache:
    """A backend of the user's own: only `get` and `set`."""

    def __init__(self) -> None:
        self.entries: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.entries.get(key)

    def set(self, key: str, value: str) -> None:
        self.entries[key] = value


async def test_any_object_with_get_and_set_is_a_backend_and_holds_json_with_no_secret(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    script_forever(server)
    backend = DictCache()
    assert isinstance(backend, JudgeCache)
    secret = "sk-very-secret-0123456789abcdefghij"
    client = (
        server.client(api_key=secret, default_headers={"X-Api-Key": secret})
        if kind == "sync"
        else server.async_client(api_key=secret, default_headers={"X-Api-Key": secret})
    )
    try:
        for name in KINDS:
            jm = make_jm(client=client, cache=backend)
            await judge(kind, make_judge(name, jm))
            await judge(kind, make_judge(name, jm))
    finally:
        closed = client.close()
        if asyncio.iscoroutine(closed):
            await closed
    assert len(backend.entries) == len(server.requests) == 7
    for key, value in backend.entries.items():
        assert len(key) == 64
        int(key, 16)
        assert json.loads(value)["value"]
        assert secret not in value
        assert "scripted-key" not in value


class BrokenCache:
    def get(self, key: str) -> str | None:
        raise OSError(f"disk gone, password=hunter2 for {key[:4]}")

    def set(self, key: str, value: str) -> None:
        raise OSError("disk gone")


async def test_a_failing_backend_does_not_fail_the_judgement(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, caplog: pytest.LogCaptureFixture
) -> None:
    script_forever(server)
    jm = make_jm(cache=BrokenCache())
    with caplog.at_level(logging.WARNING, logger="refinekit"):
        assert (await judge(kind, judges.relevancy(jm))).passed
        assert (await judge(kind, judges.relevancy(jm))).passed
    assert len(server.requests) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any("judge cache BrokenCache: get failed" in m for m in messages)
    assert any("judge cache BrokenCache: set failed" in m for m in messages)
    assert not any("hunter2" in m for m in messages)


async def test_a_stored_value_that_cannot_be_read_is_asked_again(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    script_forever(server)
    backend = DictCache()
    jm = make_jm(cache=backend)
    await judge(kind, judges.relevancy(jm))
    (key,) = backend.entries
    backend.entries[key] = "not json"
    assert (await judge(kind, judges.relevancy(jm))).passed
    assert len(server.requests) == 2
    assert json.loads(backend.entries[key])["value"]  # replaced by the fresh reply


async def test_a_value_that_cannot_be_read_counts_as_a_miss(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, tmp_path: Path
) -> None:
    script_forever(server)
    with SQLiteCache(tmp_path / "c.sqlite") as cache:
        jm = make_jm(cache=cache)
        await judge(kind, judges.relevancy(jm))
        cache._db.execute("UPDATE refinekit_judge_cache SET value = '{}'")
        await judge(kind, judges.relevancy(jm))
        await judge(kind, judges.relevancy(jm))
        assert (cache.hits, cache.misses) == (1, 2)
    assert len(server.requests) == 2


def says_maybe(value: str) -> str:
    """A stored completion made to say "Maybe" (as another version, or a hand, may store it)."""
    stored = json.loads(value)
    message = stored["value"]["choices"][0]
    message["message"]["content"] = "Maybe"
    message["logprobs"] = None
    return json.dumps(stored)


@pytest.mark.parametrize("name", ["relevancy", "criteria"])
async def test_a_stored_reply_the_judge_cannot_read_is_a_miss_replaced_by_the_fresh_one(
    kind: str,
    server: ScriptedOpenAI,
    make_jm: MakeJudgeModel,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    script_forever(server)
    with SQLiteCache(tmp_path / "c.sqlite") as cache:
        jm = make_jm(cache=cache)
        fresh = await judge(kind, make_judge(name, jm))
        asked = len(server.requests)
        table = "refinekit_judge_cache"
        for key, value in cache._db.execute(f"SELECT key, value FROM {table}").fetchall():
            cache._db.execute(
                f"UPDATE {table} SET value = ? WHERE key = ?", (says_maybe(value), key)
            )
        with caplog.at_level(logging.WARNING, logger="refinekit"):
            again = await judge(kind, make_judge(name, jm))  # not a JudgeReplyError
        assert again == fresh
        assert len(server.requests) == 2 * asked  # each bad entry cost one call
        assert (cache.hits, cache.misses) == (0, 2 * asked)
        third = await judge(kind, make_judge(name, jm))  # the fresh replies replaced them
        assert third == fresh
        assert len(server.requests) == 2 * asked
        assert (cache.hits, cache.misses) == (asked, 2 * asked)
    warned = [r.getMessage() for r in caplog.records]
    assert any("the stored reply gives no verdict; asking the model" in m for m in warned)


# --- events -------------------------------------------------------------------------------------


async def test_hits_and_misses_are_events(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, events: list[Event]
) -> None:
    script_forever(server)
    jm = make_jm()
    async with refinekit.job() as first:
        await judge(kind, judges.relevancy(jm))
    async with refinekit.job() as second:
        await judge(kind, judges.relevancy(jm))
    cache_events = [e for e in events if e.kind == "judge_cache"]
    assert [(e.cache, e.job_id, e.function, e.decorator) for e in cache_events] == [
        ("miss", first.id, "relevancy", "judge"),
        ("hit", second.id, "relevancy", "judge"),
    ]
    assert cache_events[0].detail == cache_events[1].detail  # the key
    assert len(cache_events[0].detail or "") == 64


async def test_the_events_under_a_decorator_carry_its_job(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel, events: list[Event]
) -> None:
    script_forever(server)
    jm = make_jm()
    relevant = judges.relevancy(jm)

    @refinekit.retry_on_low_quality(evaluator=relevant, max_retries=1)
    def answer(question: str) -> str:
        return REQUEST.answer

    @refinekit.retry_on_low_quality(evaluator=relevant, max_retries=1)
    async def aanswer(question: str) -> str:
        return REQUEST.answer

    for _ in range(2):
        if kind == "sync":
            await asyncio.to_thread(answer, REQUEST.question)
        else:
            await aanswer(REQUEST.question)
    verdicts = [e for e in events if e.kind == "verdict"]
    cache_events = [e for e in events if e.kind == "judge_cache"]
    assert [(e.cache, e.job_id) for e in cache_events] == [
        ("miss", verdicts[0].job_id),
        ("hit", verdicts[1].job_id),
    ]
    assert verdicts[0].job_id != verdicts[1].job_id
    assert len(server.requests) == 1


# --- Anthropic ----------------------------------------------------------------------------------


async def test_an_anthropic_judge_hits_too(kind: str, server: ScriptedOpenAI) -> None:
    pytest.importorskip("anthropic")
    server.script("claude", ["Yes", RATING], times=None)
    client: Any = server.anthropic_client() if kind == "sync" else server.async_anthropic_client()
    jm = JudgeModel(client, "claude", cache=MemoryCache())
    try:
        first = [await judge(kind, judges.relevancy(jm)), await judge(kind, judges.rating(jm))]
        again = [await judge(kind, judges.relevancy(jm)), await judge(kind, judges.rating(jm))]
    finally:
        await jm.aclose()
        closed = client.close()
        if asyncio.iscoroutine(closed):
            await closed
    assert again == first
    assert len(server.requests) == 2


# --- tracing ------------------------------------------------------------------------------------


async def test_only_a_miss_gets_a_request_span(
    kind: str, server: ScriptedOpenAI, make_jm: MakeJudgeModel
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import refinekit.otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    refinekit.otel.instrument(tracer_provider=provider)
    try:
        script_forever(server)
        jm = make_jm()
        counts = []
        for _ in range(2):
            await judge(kind, judges.criteria(jm, [ANSWERS, KEEPS]))
            spans = exporter.get_finished_spans()
            counts.append(sum(1 for s in spans if s.name == "chat judge"))
    finally:
        refinekit.otel.uninstrument()
        provider.shutdown()
    assert counts == [2, 2]  # the second judgement added no request span
    assert len(server.requests) == 2


def test_use_cache_lends_a_cache_to_judge_models_without_one(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, YES, times=None)
    lent = MemoryCache()
    own = MemoryCache()
    with server.client() as client:
        bare = judges.relevancy(JudgeModel(client, JUDGE))
        keeps = judges.relevancy(JudgeModel(client, JUDGE, cache=own))
        with judges.use_cache(lent):
            bare.evaluate(REQUEST)
            bare.evaluate(REQUEST)  # answered from the lent cache
            keeps.evaluate(REQUEST)  # its own cache, not the lent one
        bare.evaluate(REQUEST)  # outside the block: no cache at all
    assert (lent.hits, lent.misses, len(lent)) == (1, 1, 1)
    assert (own.hits, own.misses) == (0, 1)
    assert len(server.requests_for(JUDGE)) == 3
    with pytest.raises(TypeError, match="use_cache takes a judge cache"), judges.use_cache({}):  # type: ignore[arg-type]
        pass


def test_a_postgresql_cache_is_shared_by_its_connections(
    server: ScriptedOpenAI, postgres_url: str, postgres_server: Any
) -> None:
    server.script(JUDGE, YES, times=None)
    with judges.PostgresCache(postgres_url) as first, server.client() as client:
        judges.relevancy(JudgeModel(client, JUDGE, cache=first)).evaluate(REQUEST)
        with judges.PostgresCache(postgres_url) as second:  # another process, another machine
            judges.relevancy(JudgeModel(client, JUDGE, cache=second)).evaluate(REQUEST)
            assert (second.hits, second.misses, len(second)) == (1, 0, 1)
        first.clear()
        assert len(first) == 0
    assert len(server.requests_for(JUDGE)) == 1
    assert postgres_server.password not in repr(first)
    wrong = postgres_url.replace(postgres_server.password, "not-the-password")
    with pytest.raises(ValueError, match="PostgresCache cannot use postgresql://") as info:
        judges.PostgresCache(wrong)
    assert "not-the-password" not in str(info.value)
