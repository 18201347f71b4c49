"""`refinekit eval` end to end, in process: golden files, targets and judges written into
tmp_path, model traffic over real HTTP to the scripted server.

The target and judge modules read the server's address from $RK_BASE_URL when called; every
module has a name of its own (helpers.Workspace), so nothing leaks between tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import (
    ASKING,
    CRITERIA_JUDGE,
    SYNC_ANSWER,
    Cli,
    Workspace,
    answers,
    asked,
    judge_replies,
    table,
    yes_no,
)

from refinekit import JudgeUnavailable
from refinekit.eval._ratelimit import RateLimiter
from refinekit.eval._stats import mcnemar_exact, wilson_interval
from refinekit.eval._store._sqlite import CaseRecord, RunInfo, SQLiteStore
from refinekit.eval._summary import compare_runs
from refinekit.testing import Reply, ScriptedOpenAI, set_testing

SECRET = "sk-proj-Zq81vXw2mNe4RtY6uI0oP9aS"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.dG9rZW4"


def db_rows(db: Path, query: str) -> list[sqlite3.Row]:
    with sqlite3.connect(db) as con:
        con.row_factory = sqlite3.Row
        return list(con.execute(query))


ASYNC_REPLY = """
import os
import openai

async def answer(question):
    client = openai.AsyncOpenAI(
        base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0
    )
    async with client:
        return await client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )
"""


# --- column checks, the table, the pass rate and its gate ---------------------------------------


REFUNDS = [
    {"question": "Refund window?", "must_mention": "seven days", "expected_source": "refunds.md"},
    {"question": "Shipping cost?", "must_mention": "free", "expected_source": "shipping.md"},
    {"question": "Who pays returns?", "must_mention": "buyer", "expected_source": "a.md"},
    {"question": "Gift cards?", "must_mention": "", "expected_source": "gifts.md"},
]
REFUND_ANSWERS = {
    "Refund window?": "Within Seven Days of delivery [refunds.md].",  # passes (any case)
    "Shipping cost?": "It is free.",  # the source is not cited
    "Who pays returns?": "The buyer, see data.md.",  # data.md does not cite a.md
    "Gift cards?": "Never refunded (gifts.md).",  # no phrase to mention: only the source
}


def test_column_checks_judge_a_sync_target_and_the_table_says_why(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv("golden.csv", REFUNDS)
    target = ws.module(SYNC_ANSWER)
    server.script("answer", [answers(REFUND_ANSWERS)] * 4)

    result = cli("eval", golden, "--target", f"{target}:answer", "--concurrency", "1")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass", 2: "FAIL", 3: "FAIL", 4: "pass"}
    assert "-> Cite shipping.md." in result.out
    assert "-> Cite a.md." in result.out
    lo, hi = wilson_interval(2, 4)
    assert (
        f"pass rate 0.500 (2/4), 95% Wilson interval {lo:.3f} to {hi:.3f}, over 4 cases "
        "(2 passed, 2 failed, 0 raised: a function that raised counts as failed)" in result.out
    )
    assert "criteria passed: must_mention 3/3, expected_source 2/4" in result.out
    assert "model calls seen: none (column checks only)" in result.out
    assert asked(server) == [r["question"] for r in REFUNDS]  # over HTTP, one call each
    assert result.err == ""  # no progress bar off a terminal

    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:  # the default store
        [run] = store.runs()
        assert (run.kind, run.status, run.target) == ("eval", "complete", f"{target}:answer")
        cases = store.cases(run.id)
    assert [c.answer for c in cases] == list(REFUND_ANSWERS.values())
    assert [c.outcome for c in cases] == ["passed", "failed", "failed", "passed"]
    assert run.summary["passed"] == 2
    assert run.summary["rate"] == 0.5


def test_jsonl_list_values_mean_every_item(ws: Workspace, cli: Cli) -> None:
    golden = ws.jsonl(
        "golden.jsonl",
        [
            {"question": "q1", "must_mention": ["alpha", "beta"], "expected_source": ["x.md"]},
            {"question": "q2", "must_mention": ["alpha", "gamma"]},
        ],
    )
    target = ws.module("def answer(question):\n    return 'alpha and beta, from x.md'\n")

    result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass", 2: "FAIL"}
    assert "-> Mention 'gamma'." in result.out


@pytest.mark.parametrize(
    ("min_pass_rate", "code"), [("0", 0), ("0.150", 0), ("0.151", 1), ("0.9", 1)]
)
def test_min_pass_rate_gates_on_the_wilson_lower_bound(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, min_pass_rate: str, code: int
) -> None:
    golden = ws.csv("golden.csv", REFUNDS)
    target = ws.module(SYNC_ANSWER)
    server.script("answer", [answers(REFUND_ANSWERS)] * 4)
    lower = wilson_interval(2, 4)[0]
    assert 0.150 <= lower < 0.151

    result = cli("eval", golden, "--target", f"{target}:answer", "--min-pass-rate", min_pass_rate)

    assert result.code == code
    verdict = "FAIL" if code else "pass"
    assert f"gate: lower bound {lower:.3f}" in result.out
    assert result.out.rstrip().endswith(verdict)


# --- a judge over HTTP; what is stored: answers, verdicts, model calls, tokens, timings ------


def test_async_target_and_criteria_judge_store_calls_tokens_and_timings(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv(
        "golden.csv",
        [
            {"question": "Refund window?", "context": "Refunds within seven days."},
            {"question": "Shipping cost?", "context": "Shipping is free."},
        ],
    )
    target = ws.module(ASYNC_REPLY)  # a plain function returning the reply as it came
    judge = ws.module(CRITERIA_JUDGE)
    server.script(
        "answer",
        [
            answers({"Refund window?": "Seven days.", "Shipping cost?": "Ten euros."}),
        ]
        * 2,
    )
    server.script("judge", [judge_replies({"Seven days.": 0.93, "Ten euros.": 0.04})] * 2)

    result = cli("eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass", 2: "FAIL"}
    assert "-> Give the right answer." in result.out
    assert "criteria passed: correct 1/2" in result.out
    # the judge saw the row's context; it asked for logprobs
    [refund] = [r for r in server.requests_for("judge") if "Seven days." in str(r.body)]
    assert "Refunds within seven days." in refund.body["messages"][-1]["content"]  # type: ignore[index]
    assert refund.body["logprobs"] is True  # type: ignore[index]

    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        cases = store.cases(run.id)
    for case in cases:
        assert case.answer_usage.model_calls == 1  # the returned reply was counted, once
        assert case.answer_usage.prompt_tokens > 0
        assert case.answer_usage.completion_tokens > 0
        assert case.judge_usage.model_calls == 1
        assert case.judge_usage.total_tokens > 0
        assert case.answer_seconds > 0
        assert case.judge_seconds > 0
        [verdict] = case.verdicts
        assert verdict["criteria"][0]["source"] == "logprobs"
    assert cases[0].probability == pytest.approx(0.93)
    assert cases[1].probability == pytest.approx(0.04)
    assert run.summary["usage"]["answer"]["model_calls"] == 2
    assert run.summary["usage"]["judge"]["model_calls"] == 2
    roles = db_rows(run_db(ws), "SELECT role, SUM(model_calls) AS n FROM calls GROUP BY role")
    assert {r["role"]: r["n"] for r in roles} == {"answer": 2, "judge": 2}
    assert "model calls seen: answer model 2 calls" in result.out
    assert "the run's judge 2 calls" in result.out


def run_db(ws: Workspace) -> Path:
    return ws.path / ".refinekit" / "runs.db"


DECORATED = """
import os
import openai
from refinekit import retry_on_low_quality

def says_right(request):
    return "right" in request.answer

@retry_on_low_quality(evaluator=says_right, max_retries=2)
async def answer(question, feedback=None):
    client = openai.AsyncOpenAI(
        base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0
    )
    async with client:
        return await client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )

@retry_on_low_quality(evaluator=says_right, max_retries=2)
def sync_answer(question, feedback=None):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        return client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )
"""


@pytest.mark.parametrize("function", ["answer", "sync_answer"])
def test_decorated_target_attempts_and_each_reply_counted_once(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, function: str
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1"}, {"question": "q2"}])
    target = ws.module(DECORATED)
    judge = ws.module(CRITERIA_JUDGE)
    server.script("answer", ["wrong", "right", "right"])  # q1 needs a second attempt
    server.script("judge", [yes_no(0.9)] * 2)

    result = cli(
        "eval", golden, "--target", f"{target}:{function}", "--judge", f"{judge}:judge",
        "--concurrency", "1",
    )  # fmt: skip

    assert result.code == 0, result.err
    with SQLiteStore(run_db(ws)) as store:
        cases = store.cases(store.runs()[0].id)
    assert [c.attempts for c in cases] == [2, 1]
    assert [c.answer_usage.model_calls for c in cases] == [2, 1]  # not counted twice
    assert "attempts per answer: mean 1.50, max 2" in result.out


# --- concurrency ----------------------------------------------------------------------------


OVERLAPPING = (
    ASKING
    + """
import asyncio
import contextlib
import io
import json

in_flight = peak = 0
_full = None

async def answer(question):
    global in_flight, peak, _full
    if _full is None:
        _full = asyncio.Event()
    in_flight += 1
    peak = max(peak, in_flight)
    if in_flight >= int(os.environ["RK_EXPECT"]):
        _full.set()
    try:
        await asyncio.wait_for(_full.wait(), 5)  # hold until the expected calls overlap
        return await aask(question)
    finally:
        in_flight -= 1
"""
)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_async_calls_overlap_up_to_concurrency_and_no_further(
    ws: Workspace,
    server: ScriptedOpenAI,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
) -> None:
    questions = [f"q{i}" for i in range(1, 11)]
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in questions])
    target = ws.module(OVERLAPPING)
    monkeypatch.setenv("RK_EXPECT", str(concurrency))
    server.script("answer", [answers({q: f"ok {q}" for q in questions})] * 10)

    result = cli("eval", golden, "--target", f"{target}:answer", "--concurrency", str(concurrency))

    assert result.code == 0, result.err
    assert set(table(result.out).values()) == {"pass"}  # none timed out waiting for company
    module = __import__(target)
    assert module.peak == concurrency
    assert sorted(asked(server)) == sorted(questions)


BARRIER = """
import os
import threading

N = int(os.environ["RK_EXPECT"])
barrier = threading.Barrier(N, timeout=10)
lock = threading.Lock()
in_flight = peak = 0

def answer(question):
    global in_flight, peak
    with lock:
        in_flight += 1
        peak = max(peak, in_flight)
    try:
        barrier.wait()  # returns only once N calls are in flight together
    finally:
        with lock:
            in_flight -= 1
    return "ok " + question
"""


def test_sync_target_calls_overlap_beyond_the_default_thread_pool(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio's default executor has min(32, CPUs + 4) threads: 40 blocking calls at once
    # need a thread each
    n = 40
    golden = ws.csv("golden.csv", [{"question": f"q{i}", "must_mention": "ok"} for i in range(n)])
    target = ws.module(BARRIER)
    monkeypatch.setenv("RK_EXPECT", str(n))

    result = cli("eval", golden, "--target", f"{target}:answer", "--concurrency", str(n))

    assert result.code == 0, result.err
    assert f"pass rate 1.000 ({n}/{n})" in result.out
    assert __import__(target).peak == n


# --- rate limits ------------------------------------------------------------------------------


def test_rate_limited_calls_are_backed_off_not_fatal(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1"}, {"question": "q2"}, {"question": "q3"}])
    target = ws.module(SYNC_ANSWER)
    judge = ws.module(CRITERIA_JUDGE)
    slow_down = Reply.error(429, "Rate limit reached, retry shortly")
    server.script("answer", [slow_down, slow_down, "a1", "a2", *[slow_down] * 6, "never"])
    server.script("judge", [slow_down, yes_no(0.9), yes_no(0.9)])

    result = cli(
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge",
        "--concurrency", "1",
    )  # fmt: skip

    assert result.code == 0, result.err
    # q1 and q2 got through after waits; q3 was rate limited all 6 tries: raised, run went on
    assert table(result.out) == {1: "pass", 2: "pass", 3: "RAISED"}
    assert "RateLimitError" in result.out
    # the scripted server sends `retry-after: 0` with each 429: the answer model's reaches
    # eval on the openai error, the judge's on the JudgeUnavailable
    assert "rate limited: backed off 8 times (0.0 s not slept: testing switch on)" in result.out
    assert asked(server) == ["q1", "q1", "q1", "q2", *["q3"] * 6]
    with SQLiteStore(run_db(ws)) as store:
        [run] = store.runs()
    assert run.summary["rate_limit_waits"] == 8


@pytest.mark.parametrize(
    ("testing", "line"),
    [
        (True, "rate limited: backed off once (0.0 s not slept: testing switch on)"),
        (False, "rate limited: backed off once (0.0 s in all)"),
    ],
)
def test_one_backoff_is_reported_once_and_whether_it_was_slept(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, testing: bool, line: str
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a1"}])
    target = ws.module(SYNC_ANSWER)
    server.script("answer", [Reply.error(429, "slow down"), "a1"])

    with set_testing(testing):  # off: the server's `retry-after: 0` is a wait of nothing
        result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert line in result.out.splitlines()


@pytest.fixture
def rate_limited(scripted_openai: ScriptedOpenAI) -> Callable[[dict[str, str]], Exception]:
    """A real `openai.RateLimitError` from the scripted server, with the given headers."""

    def make(headers: dict[str, str]) -> Exception:
        scripted_openai.script("limited", Reply.error(429, "slow down"))
        with scripted_openai.client() as client, pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(model="limited", messages=[])
        del e.value.response.headers["retry-after"]  # the server's own: retry-after: 0
        for name, value in headers.items():
            e.value.response.headers[name] = value
        return e.value

    return make


async def test_rate_limit_backoff_is_shared_by_every_case(
    monkeypatch: pytest.MonkeyPatch, rate_limited: Callable[[dict[str, str]], Exception]
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # what would be slept, without sleeping
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    limiter = RateLimiter()
    tries = 0

    async def limited_once() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise rate_limited({"retry-after": "7"})
        return "ok"

    async def fine() -> str:
        return "fine"

    with set_testing(False):
        assert await limiter.call(limited_once) == "ok"
        assert (limiter.waits, limiter.waited, tries) == (1, 7.0, 2)
        assert slept == [pytest.approx(7.0, abs=0.5)]
        slept.clear()
        # another case, never rate limited itself, holds off until the wait is over
        assert await limiter.call(fine) == "fine"
        assert slept == [pytest.approx(7.0, abs=0.5)]
    slept.clear()
    with set_testing():  # the testing switch: the wait is computed, never slept
        assert await limiter.call(fine) == "fine"
    assert slept == []


@pytest.mark.parametrize(
    ("headers", "waited"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "3600"}, None),  # beyond a minute: jittered instead
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),  # a judge's JudgeUnavailable with status 429
    ],
)
async def test_rate_limit_wait_from_retry_after_else_jittered(
    rate_limited: Callable[[dict[str, str]], Exception],
    headers: dict[str, str] | None,
    waited: float | None,
) -> None:
    limiter = RateLimiter()
    error = (
        JudgeUnavailable("HTTP 429", model="judge", status_code=429)
        if headers is None
        else rate_limited(headers)
    )
    tries = 0

    async def limited_once() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise error
        return "ok"

    assert await limiter.call(limited_once) == "ok"
    assert limiter.waits == 1
    if waited is not None:
        assert limiter.waited == waited
    else:
        assert 0 <= limiter.waited <= 2.0  # full jitter under 2 ** attempt


@pytest.mark.parametrize(("told", "waited"), [(3.0, 3.0), (0.0, 0.0), (3600.0, None)])
async def test_a_judge_rate_limit_waits_the_retry_after_it_carries(
    told: float, waited: float | None
) -> None:
    error = JudgeUnavailable("HTTP 429", model="judge", status_code=429)
    error.retry_after = told  # what the judge read from the server's Retry-After header
    limiter = RateLimiter()
    tries = 0

    async def limited_once() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise error
        return "ok"

    assert await limiter.call(limited_once) == "ok"
    assert limiter.waits == 1
    if waited is not None:
        assert limiter.waited == waited
    else:  # beyond a minute: jittered instead
        assert 0 <= limiter.waited <= 2.0


async def test_a_call_rate_limited_every_time_is_tried_six_times_then_raises() -> None:
    limiter = RateLimiter()
    tries = 0

    async def always_limited() -> str:
        nonlocal tries
        tries += 1
        raise JudgeUnavailable("HTTP 429", model="judge", status_code=429)

    with pytest.raises(JudgeUnavailable):
        await limiter.call(always_limited)
    assert tries == 6
    # a backoff between tries, none after the last: no case holds off for a call given up
    assert limiter.waits == 5
    assert 0 <= limiter.waited <= 2 + 4 + 8 + 16 + 32


async def test_other_errors_are_not_retried() -> None:
    limiter = RateLimiter()
    tries = 0

    async def broken() -> str:
        nonlocal tries
        tries += 1
        raise JudgeUnavailable("HTTP 503", model="judge", status_code=503)

    with pytest.raises(JudgeUnavailable):
        await limiter.call(broken)
    assert (tries, limiter.waits) == (1, 0)


# --- nothing dropped silently: raised, unavailable, inconclusive --------------------------------


OUTCOMES_TARGET = f"""
import os
import openai

def answer(question):
    if question == "Broken?":
        raise RuntimeError(
            "upstream refused api_key={SECRET} with Authorization: {BEARER}"
        )
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        reply = client.chat.completions.create(
            model="answer", messages=[{{"role": "user", "content": question}}]
        )
    return reply.choices[0].message.content
"""

OUTCOMES_JUDGE = (
    CRITERIA_JUDGE
    + """
from refinekit import Verdict

forgiving = judges.criteria(  # an outage is an unjudged verdict, whose reason quotes it
    JudgeModel(client, "judge"), [Criterion("correct", "Right?")], judge_error_policy="fail_open"
)

class Careful:
    \"\"\"The criteria judge, except that it will not judge a question it is unsure of.\"\"\"

    async def aevaluate(self, request):
        if request.question == "Unsure?":
            return Verdict.inconclusive("NOT_ENOUGH_EVIDENCE")
        if request.question == "Down?":
            return await forgiving.aevaluate(request)
        return await judge.aevaluate(request)

careful = Careful()
"""
)


def test_raised_unavailable_and_inconclusive_are_counted_apart_and_secrets_redacted(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv(
        "golden.csv",
        [{"question": q} for q in ("Good?", "Bad?", "Broken?", "Outage?", "Unsure?", "Down?")],
    )
    target = ws.module(OUTCOMES_TARGET)
    judge = ws.module(OUTCOMES_JUDGE)
    server.script(
        "answer",
        [
            answers(
                {"Good?": "good", "Bad?": "bad", "Outage?": "late", "Unsure?": "hmm", "Down?": "x"}
            )
        ]
        * 5,
    )
    outage = Reply.error(503, f"overloaded; the key {SECRET} is fine")
    plan = {"good": 0.9, "bad": 0.1, "late": [outage], "x": [outage]}
    server.script("judge", [judge_replies(plan)] * 4)

    result = cli(
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:careful",
        "--min-pass-rate", "0.01",
    )  # fmt: skip

    assert result.code == 0, result.err
    assert table(result.out) == {
        1: "pass",
        2: "FAIL",
        3: "RAISED",
        4: "unavail",
        5: "inconcl",
        6: "unavail",
    }
    assert "-> RuntimeError: upstream refused api_key=[redacted]" in result.out
    assert "-> JudgeUnavailable: judge model 'judge'" in result.out
    assert "HTTP 503" in result.out
    assert "-> NOT_ENOUGH_EVIDENCE" in result.out
    assert (
        "pass rate 0.333 (1/3), 95% Wilson interval "
        f"{wilson_interval(1, 3)[0]:.3f} to {wilson_interval(1, 3)[1]:.3f}, over 3 cases "
        "(1 passed, 1 failed, 1 raised: a function that raised counts as failed)"
    ) in result.out
    assert "not counted: 2 unavailable (the judge could not judge), 1 inconclusive" in result.out

    with SQLiteStore(run_db(ws)) as store:
        [run] = store.runs()
        outcomes = [c.outcome for c in store.cases(run.id)]
    assert outcomes == ["passed", "failed", "raised", "unavailable", "inconclusive", "unavailable"]
    counts = {k: run.summary[k] for k in ("passed", "failed", "raised", "unavailable")}
    assert counts == {"passed": 1, "failed": 1, "raised": 1, "unavailable": 2}
    assert run.summary["inconclusive"] == 1
    # the credentials the errors quoted are nowhere: not printed, not in the database file
    stored = run_db(ws).read_bytes()
    for secret in (SECRET, BEARER.split()[1]):
        assert secret not in result.out + result.err
        assert secret.encode() not in stored


def test_control_characters_in_untrusted_text_are_neutralised(ws: Workspace, cli: Cli) -> None:
    nasty = "\x1b[2J\x1b]0;pwned\x07 \r\u202etxt.exe\x00\x9b"
    golden = ws.jsonl(
        "golden.jsonl",
        [
            {"question": f"Clear the screen? {nasty}", "must_mention": f"phrase {nasty}"},
            {"question": "Raise?", "must_mention": "x"},
        ],
    )
    target = ws.module(
        f"""
        def answer(question):
            if question == "Raise?":
                raise ValueError({nasty!r})
            return "nothing"
        """
    )

    result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "FAIL", 2: "RAISED"}
    printed = result.out + result.err
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", printed)
    assert "Clear the screen? ?[2J?]0;pwned? ?txt.exe??" in result.out
    with SQLiteStore(run_db(ws)) as store:  # stored as given: only the terminal is protected
        assert nasty in store.cases(store.runs()[0].id)[0].question


# --- --repeat: how often the judge's verdict flipped ------------------------------------------


def test_repeat_judges_each_answer_k_times_and_reports_flips(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv("golden.csv", [{"question": f"q{i}"} for i in range(1, 5)])
    target = ws.module("def answer(question):\n    return 'answer ' + question\n")
    judge = ws.module(CRITERIA_JUDGE)
    plans: dict[str, list[float | Reply]] = {
        "answer q1": [0.9, 0.95, 0.9],  # steady pass
        "answer q2": [0.9, 0.1, 0.9],  # flipped, passes by majority
        "answer q3": [0.1, 0.9, 0.05],  # flipped, fails by majority
        "answer q4": [0.9, 0.1, Reply.error(503)],  # 1 of 2 judged: a split, inconclusive
    }
    server.script("judge", [judge_replies(plans)] * 12)

    result = cli(
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge",
        "--repeat", "3",
    )  # fmt: skip

    assert result.code == 0, result.err
    rows = re.findall(r"^ +(\d) +(\S+) +(\d/\d) ", result.out, re.MULTILINE)
    assert rows == [
        ("1", "pass", "3/3"),
        ("2", "pass", "2/3"),
        ("3", "FAIL", "1/3"),
        ("4", "inconcl", "1/2"),
    ]
    assert "-> the judge split 1/2" in result.out
    lo, hi = wilson_interval(3, 4)
    assert (
        "judge consistency: 3 of 4 answers judged more than once got differing verdicts "
        f"(flip rate 0.750, 95% {lo:.3f} to {hi:.3f})"
    ) in result.out
    assert len(server.requests_for("judge")) == 12
    with SQLiteStore(run_db(ws)) as store:
        [run] = store.runs()
        cases = store.cases(run.id)
    assert [(c.passes, c.judgements, c.flipped) for c in cases] == [
        (3, 3, False),
        (2, 3, True),
        (1, 3, True),
        (1, 2, True),
    ]
    assert [len(c.verdicts) for c in cases] == [3, 3, 3, 3]
    assert (run.summary["repeated"], run.summary["flipped"]) == (4, 3)
    assert run.options["repeat"] == 3


# --- --compare ---------------------------------------------------------------------------------


FROM_FILE = """
import json
import pathlib

def answer(question):
    return json.loads(pathlib.Path("answers.json").read_text())[question]
"""


def test_compare_reports_regressions_and_improvements_with_exact_mcnemar(
    ws: Workspace, cli: Cli
) -> None:
    questions = [f"q{i}" for i in range(1, 9)]
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in questions])
    target = ws.module(FROM_FILE)
    run = ("eval", golden, "--target", f"{target}:answer")

    def answering(bad: set[str]) -> None:
        answers = {q: "bad" if q in bad else "ok" for q in questions}
        (ws.path / "answers.json").write_text(json.dumps(answers))

    answering(set())
    first = cli(*run, "--compare", "previous")
    assert first.code == 0
    assert "compare: no earlier complete run of this golden file" in first.out

    answering({"q1", "q2", "q3", "q4", "q5", "q6"})  # 6 regressions, no improvement
    second = cli(*run, "--compare", "previous")
    p = mcnemar_exact(6, 0)
    assert p == 2 / 2**6
    assert second.code == 1  # p < 0.05: a significant regression
    assert (
        "compare with run 1: 8 questions judged in both runs; 6 regressed, 0 improved; exact "
        f"McNemar p = {p:.4f}"
    ) in second.out
    assert "  regressed: #1 q1 -> Mention 'ok'." in second.out
    assert (
        "gate: significant regression (6 regressed > 0 improved, p 0.0312 < --alpha 0.05): FAIL"
    ) in second.out
    assert "improved:" not in second.out

    answering({"q1", "q2", "q3", "q4", "q5", "q6"})
    lenient = cli(*run, "--compare", "1", "--alpha", "0.01")  # the same, by id, at 1%
    assert lenient.code == 0
    assert "compare with run 1:" in lenient.out
    assert "6 regressed, 0 improved" in lenient.out
    assert "gate: no significant regression (p 0.0312 >= --alpha 0.01): pass" in lenient.out

    answering({"q8"})  # against run 3: q1..q6 improved, q8 regressed
    third = cli(*run, "--compare", "previous")
    assert third.code == 0  # more improvements than regressions: never a failing gate
    assert "gate: no significant regression (1 regressed <= 6 improved): pass" in third.out
    assert (
        f"compare with run 3: 8 questions judged in both runs; 1 regressed, 6 improved; "
        f"exact McNemar p = {mcnemar_exact(1, 6):.4f}"
    ) in third.out
    assert "  regressed: #8 q8 -> Mention 'ok'." in third.out
    assert [line for line in third.out.splitlines() if "improved: #" in line] == [
        f"  improved: #{i} q{i}" for i in range(1, 7)
    ]


def record(position: int, question: str, outcome: str) -> CaseRecord:
    return CaseRecord(
        key=f"k{position}",
        position=position,
        question=question,
        row={},
        outcome=outcome,  # type: ignore[arg-type]
    )


def test_compare_runs_pairs_questions_and_leaves_out_what_was_not_judged() -> None:
    info = RunInfo(1, "eval", "complete", "/g.csv", "", "m:f", None, {}, "", "", 0.0, None, {})
    before = [
        record(1, "same", "passed"),
        record(2, "same", "passed"),  # the same question twice: paired by occurrence
        record(3, "raises now", "passed"),
        record(4, "fixed", "failed"),
        record(5, "judge down", "passed"),
        record(6, "gone", "passed"),
    ]
    after = [
        record(1, "same", "passed"),
        record(2, "same", "failed"),
        record(3, "raises now", "raised"),  # a raised case counts as a failure
        record(4, "fixed", "passed"),
        record(5, "judge down", "unavailable"),
        record(6, "new", "failed"),
    ]
    comparison = compare_runs(info, before, info, after)
    assert comparison.shared == 4
    assert comparison.not_comparable == 1
    assert [now.position for _, now in comparison.regressed] == [2, 3]
    assert [now.position for _, now in comparison.improved] == [4]
    assert comparison.p_value == mcnemar_exact(2, 1) == 1.0
    assert not comparison.significant_regression(0.05)


# --- where runs are stored; `refinekit runs` ----------------------------------------------------


def test_store_is_db_option_else_env_else_default(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    target = ws.module("def answer(question):\n    return 'ok'\n")
    run = ("eval", golden, "--target", f"{target}:answer")

    nothing = cli("runs")
    assert (nothing.code, nothing.out) == (2, "")
    assert nothing.err.startswith(
        f"refinekit runs: error: no run store at {Path('.refinekit') / 'runs.db'} "
    )
    assert cli(*run).code == 0
    assert (ws.path / ".refinekit" / "runs.db").is_file()

    monkeypatch.setenv("REFINEKIT_DB", str(ws.path / "env.db"))
    assert cli(*run).code == 0
    assert cli(*run, "--db", ws.path / "option.db").code == 0
    for db, runs in ((".refinekit/runs.db", 1), ("env.db", 1), ("option.db", 1)):
        with SQLiteStore(ws.path / db) as store:
            assert len(store.runs()) == runs, db

    listed = cli("runs")  # $REFINEKIT_DB
    assert listed.code == 0
    [header, line] = listed.out.splitlines()
    assert header.split() == ["id", "kind", "status", "started", "figure", "data", "file"]
    assert re.match(r" +1  eval +complete .* pass 1\.000 \(>= 0\.\d{3}\) +.*golden\.csv$", line)
    assert cli("runs", "--kind", "calibrate").out.splitlines() == [header]
    assert cli("runs", "--db", ws.path / "option.db").out.splitlines()[1:] == [line]


# --- a reader that stops early (`| head`): quiet, and the run finishes ---------------------------


def refinekit_env(*, unbuffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return env | ({"PYTHONUNBUFFERED": "1"} if unbuffered else {})


@pytest.mark.parametrize(("gate", "code"), [("0", 0), ("0.9", 1)], ids=["held", "failed"])
def test_eval_piped_into_a_reader_that_closes_early_finishes_quietly(
    ws: Workspace, server: ScriptedOpenAI, gate: str, code: int
) -> None:
    ws.csv("golden.csv", [{"question": q, "must_mention": "a"} for q in ("q1", "q2")])
    target = ws.module(SYNC_ANSWER)
    released = threading.Event()

    def held(request: Any) -> str:  # the answers wait until the reader has gone
        released.wait(timeout=60)
        return "a"

    server.script("answer", [held, held])
    command = [
        sys.executable, "-m", "refinekit", "eval", "golden.csv", "--target", f"{target}:answer",
        "--concurrency", "1", "--min-pass-rate", gate, "--report", "eval.html",
    ]  # fmt: skip
    # unbuffered, each line is written as it is printed: the header, before any case runs
    with subprocess.Popen(
        command,
        cwd=ws.path,
        env=refinekit_env(unbuffered=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()  # as `| head -1` reads, then goes
        proc.stdout.close()
        released.set()
        err = proc.stderr.read()
        proc.wait(timeout=60)

    assert first.startswith(b"refinekit eval: golden.csv (2 cases) -> run 1 in ")
    assert err == b""  # no traceback, no "Exception ignored"
    assert proc.returncode == code  # the gate's verdict, not the pipe's
    assert asked(server) == ["q1", "q2"]
    assert (ws.path / "eval.html").exists()  # the work went on: the report is written
    with SQLiteStore(run_db(ws)) as store:
        [run] = store.runs()
        assert (run.status, len(store.cases(run.id))) == ("complete", 2)


@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
def test_runs_piped_into_a_reader_that_is_gone_exits_0_quietly(
    ws: Workspace, cli: Cli, unbuffered: bool
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a"}])
    target = ws.module("def answer(question):\n    return 'a'\n")
    for _ in range(3):
        assert cli("eval", golden, "--target", f"{target}:answer", "--fresh").code == 0
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line, as with `| true`
    try:
        result = subprocess.run(
            [sys.executable, "-m", "refinekit", "runs"],
            cwd=ws.path,
            env=refinekit_env(unbuffered=unbuffered),
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)

    assert result.stderr == b""
    assert result.returncode == 0


# --- usage errors: exit 2, a message naming the fix, nothing run ---------------------------------


USAGE_TARGET = """
import pathlib

def answer(question):
    pathlib.Path("called").write_text("the target ran")
    return "ok"

def needs(question, customer_id):
    pathlib.Path("called").write_text("the target ran")
    return "ok"

not_a_function = 42
not_a_judge = 42
"""


@pytest.fixture
def usage_ws(ws: Workspace) -> Workspace:
    ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    ws.csv("unchecked.csv", [{"question": "q", "context": "c"}])
    (ws.path / "header.csv").write_text("question,must_mention\n")
    (ws.path / "blank.jsonl").write_text("\n\n")
    (ws.path / "broken.jsonl").write_text('{"question": "q"}\n{"question": \n')
    # an integer past Python's 4300-digit limit: json.loads raises a bare ValueError
    (ws.path / "huge.jsonl").write_text('{"question": "q", "n": ' + "9" * 5000 + "}\n")
    (ws.path / "list.jsonl").write_text('["q", "ok"]\n')
    (ws.path / "latin1.csv").write_bytes(b"question,must_mention\ncaf\xe9,ok\n")
    (ws.path / "notes.txt").write_text("question\nq\n")
    (ws.path / "comma.csv").write_text("question,must_mention\nPen, or pencil?,x\n")
    (ws.path / "short.csv").write_text("question,must_mention\nq,ok\nonly a question\n")
    (ws.path / "open.csv").write_text('question,must_mention\nq1,"ok\nq2,ok\nq3,ok\n')
    (ws.path / "after.csv").write_text('question,must_mention\n"two\nlines",ok\nq,ok,x\n')
    (ws.path / "stray.csv").write_text('question,must_mention\nq,"ok"k\n')
    (ws.path / "twice.csv").write_text("question,must_mention,question\nq,ok,q\n")
    (ws.path / "unnamed.csv").write_text("question,,must_mention\nq,,ok\nq2,note,ok\n")
    ws.jsonl("badcontext.jsonl", [{"question": "q", "must_mention": "ok", "context": {"t": 1}}])
    (ws.path / "types.jsonl").write_text(
        '{"question": "q", "must_mention": "ok"}\n\n'
        '{"question": 42, "must_mention": {"a": 1}, "expected_source": 7}\n'
    )
    ws.jsonl("mention.jsonl", [{"question": "q", "Must mention": {"a": 1}}])
    ws.jsonl("source.jsonl", [{"question": "q", "expected_source": ["a.md", 7]}])
    ws.jsonl("listq.jsonl", [{"question": ["q1", "q2"], "must_mention": "ok"}])
    (ws.path / "adir.csv").mkdir()
    ws.module(USAGE_TARGET, stem="usage")
    ws.module(f"raise RuntimeError('bad\x1b[2J config: api_key={SECRET}')\n", stem="config")
    return ws


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["golden.csv", "--target", "{m}"], "--target must look like package.module:name"),
        (["golden.csv", "--target", ":answer"], "--target must look like package.module:name"),
        (["golden.csv", "--target", "nowhere_xyz:answer"], "no module named 'nowhere_xyz'"),
        (["golden.csv", "--target", "{m}:missing"], "has no 'missing'"),
        (["golden.csv", "--target", "{m}:not_a_function"], "is a int, not a function"),
        (["golden.csv", "--target", "{m}:needs"], "needs 'customer_id', and the file has no"),
        (["golden.csv", "--target", "{m}:answer", "--judge", "{m}:not_a_judge"], "not an evalua"),
        (["golden.csv", "--target", "{m}:answer", "--judge", "{m}"], "--judge must look like"),
        (["unchecked.csv", "--target", "{m}:answer"], "give --judge, or a golden file with a"),
        (["golden.csv", "--target", "{m}:answer", "--repeat", "3"], "without --judge"),
        (["missing.csv", "--target", "{m}:answer"], "file not found: missing.csv"),
        (["header.csv", "--target", "{m}:answer"], "header.csv has no rows"),
        (["blank.jsonl", "--target", "{m}:answer"], "blank.jsonl has no rows"),
        (["broken.jsonl", "--target", "{m}:answer"], "broken.jsonl, line 2: not JSON"),
        (["huge.jsonl", "--target", "{m}:answer"], "huge.jsonl, line 1: not JSON (Exceeds"),
        (["list.jsonl", "--target", "{m}:answer"], "list.jsonl, line 1: not a JSON object"),
        (["latin1.csv", "--target", "{m}:answer"], "latin1.csv: not a UTF-8 CSV file"),
        (
            ["comma.csv", "--target", "{m}:answer"],
            "comma.csv, line 2: 3 values, but the header has 2 columns (question, must_mention)"
            '; a value with a comma, a quote or a line break goes in double quotes ("Pen, or',
        ),
        (
            ["short.csv", "--target", "{m}:answer"],
            "short.csv, line 3: 1 value, but the header has 2 columns",
        ),
        (["open.csv", "--target", "{m}:answer"], "open.csv, line 2: a quote opened in this row"),
        (["after.csv", "--target", "{m}:answer"], "after.csv, line 4: 3 values"),
        (["stray.csv", "--target", "{m}:answer"], "stray.csv, line 2: not valid CSV"),
        (["twice.csv", "--target", "{m}:answer"], "line 1: the header names column 'question'"),
        (["unnamed.csv", "--target", "{m}:answer"], "line 3: value 'note' is in column 2, which"),
        (["notes.txt", "--target", "{m}:answer"], "use a .csv or .jsonl file, not '.txt'"),
        (["badcontext.jsonl", "--target", "{m}:answer"], "row 1: column 'context'"),
        (
            ["types.jsonl", "--target", "{m}:answer"],
            "types.jsonl, line 3: field 'question' is a number (42); it must be a string (in "
            'quotes: "42")',
        ),
        (
            ["mention.jsonl", "--target", "{m}:answer"],
            "mention.jsonl, line 1: field 'Must mention' is an object ({\"a\": 1}); it must be "
            "a string or a list of strings",
        ),
        (
            ["source.jsonl", "--target", "{m}:answer"],
            "source.jsonl, line 1: field 'expected_source' is a list holding non-strings "
            '(["a.md", 7]); it must be a string or a list of strings',
        ),
        (
            ["listq.jsonl", "--target", "{m}:answer"],
            'listq.jsonl, line 1: field \'question\' is a list (["q1", "q2"]); it must be a string',
        ),
        (["adir.csv", "--target", "{m}:answer"], "adir.csv is a folder, not a .csv or .jsonl file"),
        (
            ["golden.csv", "--target", "{m}:answer", "--db", "adir.csv"],
            f"the run store adir.csv is a folder; give a SQLite file's path (e.g. "
            f"{Path('adir.csv/runs.db')})",
        ),
        (
            ["golden.csv", "--target", "{m}:answer", "--prices", "adir.csv"],
            "--prices adir.csv: is a folder; give a JSON file of prices",
        ),
        (["golden.csv", "--target", "{m}:answer", "--concurrency", "0"], "from 1 to 256"),
        (["golden.csv", "--target", "{m}:answer", "--concurrency", "2.5"], "from 1 to 256"),
        (["golden.csv", "--target", "{m}:answer", "--concurrency", "257"], "from 1 to 256"),
        (["golden.csv", "--target", "{m}:answer", "--min-pass-rate", "1.2"], "from 0 to 1"),
        (["golden.csv", "--target", "{m}:answer", "--min-pass-rate", "-0.1"], "from 0 to 1"),
        (["golden.csv", "--target", "{m}:answer", "--min-pass-rate", "nan"], "from 0 to 1"),
        (["golden.csv", "--target", "{m}:answer", "--min-pass-rate", "high"], "from 0 to 1"),
        (["golden.csv", "--target", "{m}:answer", "--repeat", "0"], "from 1 to 50"),
        (["golden.csv", "--target", "{m}:answer", "--alpha", "0"], "between 0 and 1"),
        (["golden.csv", "--target", "{m}:answer", "--compare", "7"], "no run 7 in"),
        (["golden.csv", "--target", "{m}:answer", "--compare", "last"], "'previous' or a run id"),
        (["golden.csv"], "the following arguments are required: --target"),
        (
            ["golden.csv", "--target", "{c}:answer"],
            "importing '{c}' raised RuntimeError: bad?[2J config: api_key=[redacted]",
        ),
    ],
)
def test_usage_errors_exit_2_with_the_fix_and_run_nothing(
    usage_ws: Workspace, cli: Cli, args: list[str], message: str
) -> None:
    module, config = usage_ws.modules
    result = cli("eval", *(a.replace("{m}", module).replace("{c}", config) for a in args))

    assert result.code == 2
    assert message.replace("{c}", config) in result.err
    assert "Traceback" not in result.err
    assert SECRET not in result.err
    assert "\x1b" not in result.err
    assert result.out == ""
    assert not (usage_ws.path / "called").exists()
    db = run_db(usage_ws)
    if db.exists():
        with SQLiteStore(db) as store:
            assert store.runs() == []


def test_a_csv_value_may_span_lines_in_quotes_and_empty_lines_are_skipped(
    ws: Workspace, cli: Cli
) -> None:
    # a spreadsheet's export: CRLF, a quoted comma, quotes and a line break inside quotes, an
    # unnamed trailing column left empty, a blank line between rows and at the end
    (ws.path / "golden.csv").write_bytes(
        b'question,must_mention,\r\n"Pen, or pencil?",pen,\r\n\r\n"Say ""hi""\r\ntwice",hi,\r\n\r\n'
    )
    target = ws.module("def answer(question):\n    return 'a pen; say hi'\n")

    result = cli("eval", "golden.csv", "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass", 2: "pass"}
    with SQLiteStore(run_db(ws)) as store:
        rows = [c.row for c in store.cases(store.runs()[0].id)]
    assert rows == [
        {"question": "Pen, or pencil?", "must_mention": "pen"},
        {"question": 'Say "hi"\r\ntwice', "must_mention": "hi"},
    ]


@pytest.mark.parametrize("name", ["golden.csv", "golden.jsonl"])
def test_an_unreadable_golden_file_is_a_usage_error(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    golden = ws.path / name
    golden.write_text("question,must_mention\nq,ok\n")
    target = ws.module("def answer(question):\n    return 'ok'\n")
    opened = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:  # as chmod 000 would, for root
        if self.name == name:
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)

    result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 2
    assert f"{name}: cannot read it (Permission denied)" in result.err


def test_a_store_that_is_not_one_is_a_usage_error(ws: Workspace, cli: Cli) -> None:
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    target = ws.module("def answer(question):\n    return 'ok'\n")
    (ws.path / "notes.db").write_text("these are my notes, not a database\n" * 100)

    result = cli("eval", golden, "--target", f"{target}:answer", "--db", "notes.db")

    assert result.code == 2
    assert "notes.db is not a refinekit run store" in result.err
    assert "use another --db" in result.err
    assert cli("runs", "--db", "notes.db").code == 2


# --- a misconfigured judge stops the run; the fixed judge resumes it ------------------------------


def test_misconfigured_judge_stops_with_exit_3_and_the_fixed_judge_resumes(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = ws.csv("golden.csv", [{"question": f"q{i}"} for i in (1, 2, 3)])
    target = ws.module(SYNC_ANSWER)
    judge = ws.module(CRITERIA_JUDGE)
    run = (
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge",
        "--concurrency", "1",
    )  # fmt: skip
    server.script("answer", [answers({"q1": "a1", "q2": "a2", "q3": "a3"})] * 4)
    revoked = Reply.error(401, f"Incorrect API key provided: {SECRET}.")
    server.script("judge-old-key", [yes_no(0.9), revoked])
    monkeypatch.setenv("RK_JUDGE_MODEL", "judge-old-key")

    stopped = cli(*run)

    assert stopped.code == 3
    assert "refinekit eval: error: the judge is misconfigured: judge model 'judge-old-key'" in (
        stopped.err
    )
    assert "HTTP 401" in stopped.err
    assert "(check the API key)" in stopped.err
    assert SECRET not in stopped.err + stopped.out
    assert "run 1 is incomplete: 1 of 3 cases stored" in stopped.out
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
        assert info.status == "incomplete"
        assert [c.question for c in store.cases(info.id)] == ["q1"]
    assert cli("runs").out.splitlines()[1].split()[:3] == ["1", "eval", "incomplete"]

    # the key is fixed (here: the judge module reads its model again) and the run resumes
    monkeypatch.setenv("RK_JUDGE_MODEL", "judge")
    monkeypatch.delitem(sys.modules, judge)
    server.script("judge", [yes_no(0.9), yes_no(0.2)])

    resumed = cli(*run)

    assert resumed.code == 0, resumed.err
    assert "resuming run 1: 1 of 3 cases already stored (not run again" in resumed.out
    assert table(resumed.out) == {1: "pass", 2: "pass", 3: "FAIL"}
    assert asked(server) == ["q1", "q2", "q2", "q3"]  # q1 was not paid for again
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
        assert info.status == "complete"
        assert len(store.cases(info.id)) == 3


def test_a_judge_that_raises_a_bug_stops_the_run(ws: Workspace, cli: Cli) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1"}, {"question": "q2"}])
    target = ws.module("def answer(question):\n    return 'ok'\n")
    judge = ws.module(
        f"""
        def judge(request):
            raise RuntimeError("no such field\x1b[2J; token={SECRET}")
        """
    )

    result = cli("eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge")

    assert result.code == 3
    assert "the judge raised RuntimeError: no such field?[2J; token=[redacted]" in result.err
    assert "(a bug in the judge?)" in result.err
    assert SECRET not in result.err
    assert "\x1b" not in result.err
    with SQLiteStore(run_db(ws)) as store:
        assert store.runs()[0].status == "incomplete"


# --- progress: a live bar on a terminal, a plain line now and then elsewhere; never on stdout -----


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("term", ["xterm-256color", "dumb"])
def test_progress_is_live_on_a_terminal_only_and_never_on_stdout(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch, term: str
) -> None:
    monkeypatch.setenv("TERM", term)
    golden = ws.csv("golden.csv", [{"question": f"q{i}", "must_mention": "ok"} for i in range(3)])
    target = ws.module("def answer(question):\n    return 'ok'\n")
    terminal = Terminal()

    with contextlib.redirect_stderr(terminal):
        result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 0
    shown = terminal.getvalue()
    if term == "dumb":  # no terminal to redraw: plain lines, and none in a run this short
        assert shown == ""
    else:
        drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
        assert re.search(r"eval ━+ +3/3 0:00:\d\d .*passed 3", drawn), drawn
        assert shown.endswith("\x1b[2K")  # the bar's line erased before the summary
    assert "\r" not in result.out
    assert "\x1b" not in result.out
    assert result.out.startswith(f"refinekit eval: {golden} (3 cases) -> run 1 in ")


# --- how a row becomes the target's arguments ------------------------------------------------


def test_row_columns_become_arguments_or_the_question_the_only_one(ws: Workspace, cli: Cli) -> None:
    golden = ws.jsonl(
        "golden.jsonl",
        [
            {"Question": "q1", "Customer-Tier": "gold", "mustMention": "q1"},
            {"Question": "q2", "Customer-Tier": "free", "mustMention": "q2"},
        ],
    )
    module = ws.module(
        """
        seen = []

        def only(text):  # one parameter, named after no column: it gets the question
            seen.append(text)
            return text

        async def named(question, *, customer_tier, region="eu", feedback=None):
            seen.append((question, customer_tier, region, feedback))
            return question
        """
    )

    assert cli("eval", golden, "--target", f"{module}:only").code == 0
    assert cli("eval", golden, "--target", f"{module}:named").code == 0

    assert __import__(module).seen == [
        "q1",
        "q2",
        ("q1", "gold", "eu", None),
        ("q2", "free", "eu", None),
    ]


NOT_JUDGING = """
from refinekit import Verdict

def answer(question):
    return "an answer about " + question

def down(request):
    return Verdict.unjudged("the judge model is down")

def unsure(request):
    return Verdict.inconclusive("NOT_ENOUGH_EVIDENCE")

def agree(request):
    return True

def half_down(request):
    return down(request) if request.question == "q1" else unsure(request)
"""


@pytest.mark.parametrize("gate", [[], ["--min-pass-rate", "0.5"]], ids=["no-gate", "gate"])
@pytest.mark.parametrize(
    ("judge", "counts"),
    [("unsure", "0 unavailable (the judge could not judge), 2 inconclusive"),
     ("half_down", "1 unavailable (the judge could not judge), 1 inconclusive")],
)  # fmt: skip
def test_a_run_with_no_pass_or_fail_outcome_fails_even_without_a_gate(
    ws: Workspace, cli: Cli, gate: list[str], judge: str, counts: str
) -> None:
    # the judge answered (inconclusive), so the setup worked; it measured nothing all the same
    golden = ws.csv("golden.csv", [{"question": "q1"}, {"question": "q2"}])
    module = ws.module(NOT_JUDGING)

    result = cli(
        "eval", golden, "--target", f"{module}:answer", "--judge", f"{module}:{judge}", *gate
    )  # fmt: skip

    assert result.code == 1
    assert "pass rate: n/a (none of the 2 cases was judged)" in result.out
    assert f"not counted: {counts}" in result.out
    assert result.out.endswith(
        "gate: no case has a pass or fail outcome, so the run measured nothing: FAIL\n"
    )
    assert "lower bound" not in result.out
    with SQLiteStore(run_db(ws)) as store:
        [run] = store.runs()
    assert (run.status, run.summary["rate"]) == ("complete", None)


# --- no answer judged: a failure of the setup, exit 4 --------------------------------------------


@pytest.fixture
def dead_endpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    """An endpoint that never answers: a 127.0.0.1 port nothing listens on (refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("RK_BASE_URL", url)
    return url


DEAD_ANSWER = SYNC_ANSWER.replace("max_retries=0", "max_retries=0, timeout=2.0")
SETUP = "a failure of the setup (an endpoint, a key, the function), not a measurement"


@pytest.mark.parametrize("gate", [[], ["--min-pass-rate", "0"]], ids=["no-gate", "gate"])
def test_an_answer_endpoint_that_never_answers_is_a_setup_failure_exit_4(
    ws: Workspace, cli: Cli, dead_endpoint: str, gate: list[str]
) -> None:
    questions = [f"q{i}" for i in range(1, 8)]
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "a"} for q in questions])
    target = ws.module(DEAD_ANSWER)
    run = ("eval", golden, "--target", f"{target}:answer", *gate)

    result = cli(*run)

    assert result.code == 4
    assert result.err == (
        "refinekit eval: error: no answer was judged: 7 raised of 7 cases (the "
        f"commonest error, every time: APIConnectionError: Connection error.); {SETUP}: fix "
        "it and run again\n"
    )
    assert table(result.out) == dict.fromkeys(range(1, 8), "RAISED")  # each case says why
    assert "pass rate" not in result.out  # 0/7 would read as a measurement
    assert "gate:" not in result.out
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
    assert (info.status, info.summary["setup_failed"]) == ("complete", True)
    assert "nothing (setup failed)" in cli("runs").out.splitlines()[1]

    # a complete run is never resumed: the same command, the endpoint fixed, runs every case
    again = cli(*run)
    assert "resuming" not in again.out
    assert "-> run 2 in" in again.out


def test_a_judge_down_for_every_case_is_a_setup_failure_exit_4(ws: Workspace, cli: Cli) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1"}, {"question": "q2"}])
    module = ws.module(NOT_JUDGING)

    result = cli(
        "eval", golden, "--target", f"{module}:answer", "--judge", f"{module}:down",
        "--min-pass-rate", "0.5",
    )  # fmt: skip

    assert result.code == 4
    assert result.err.startswith(
        "refinekit eval: error: no answer was judged: 2 unavailable of 2 cases "
        "(the commonest error, every time: the judge model is down); "
    )
    assert table(result.out) == {1: "unavail", 2: "unavail"}


def test_raised_and_unavailable_together_are_a_setup_failure_too(ws: Workspace, cli: Cli) -> None:
    golden = ws.csv("golden.csv", [{"question": q} for q in ("q1", "q2", "q3")])
    module = ws.module(
        NOT_JUDGING
        + """
def flaky(question):
    if question == "q1":
        raise TimeoutError("the model timed out")
    return "an answer"
"""
    )

    result = cli("eval", golden, "--target", f"{module}:flaky", "--judge", f"{module}:down")

    assert result.code == 4
    assert (
        "no answer was judged: 1 raised and 2 unavailable of 3 cases (the "
        "commonest error, 2 times: the judge model is down)"
    ) in result.err


REFUSING = """
from refinekit import LowQualityAnswer, retry_on_low_quality

def never_good_enough(request):
    raise LowQualityAnswer("Cite the policy.")

@retry_on_low_quality(evaluator=never_good_enough, max_retries=1)
def answer(question):
    return "an answer without a source"

def broken(question):
    raise KeyError("customer_id")

def fine(question):
    if question == "q1":
        raise ConnectionError("the endpoint is down")
    return "an answer"
"""


@pytest.mark.parametrize(
    ("target", "code", "rate"),
    [
        ("answer", 0, "pass rate 0.000 (0/2)"),  # the model answered; no answer was good enough
        ("broken", 4, None),  # a bug in the function on every case: no answer at all
        ("fine", 0, "pass rate 0.500 (1/2)"),  # some cases answered: a measurement
    ],
)
def test_only_a_run_with_no_answer_at_all_is_a_setup_failure(
    ws: Workspace, cli: Cli, target: str, code: int, rate: str | None
) -> None:
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "answer"} for q in ("q1", "q2")])
    module = ws.module(REFUSING)

    result = cli("eval", golden, "--target", f"{module}:{target}")

    assert result.code == code, result.err
    assert table(result.out)[1] == "RAISED"
    if rate is None:
        assert "(the commonest error, every time: KeyError: 'customer_id')" in result.err
    else:
        assert rate in result.out
        assert result.err == ""


def test_compare_skips_runs_that_measured_nothing(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "a"} for q in ("q1", "q2")])
    module = ws.module(
        """
        import os

        def answer(question):
            if os.environ.get("RK_DOWN"):
                raise ConnectionError("the endpoint is down")
            return "a"
        """
    )
    run = ("eval", golden, "--target", f"{module}:answer")
    assert cli(*run).code == 0  # run 1: measured
    monkeypatch.setenv("RK_DOWN", "1")
    assert cli(*run).code == 4  # run 2: the setup failed
    monkeypatch.delenv("RK_DOWN")

    result = cli(*run, "--compare", "previous")

    assert result.code == 0, result.err
    assert "compare with run 1: 2 questions judged in both runs" in result.out
    named = cli(*run, "--compare", "2")
    assert named.code == 2
    assert "--compare 2: run 2 measured nothing (no answer was judged: a failure of the setup)" in (
        named.err
    )


@pytest.mark.parametrize(
    ("judge", "mark", "outcome", "note"),
    [
        ("down", "unavail", "unavailable", "the judge model is down"),
        ("unsure", "inconcl", "inconclusive", "NOT_ENOUGH_EVIDENCE"),
    ],
)
def test_a_failing_row_check_fails_the_case_whatever_the_judge_could_not_say(
    ws: Workspace, cli: Cli, judge: str, mark: str, outcome: str, note: str
) -> None:
    golden = ws.csv(
        "golden.csv",
        [{"question": "q1", "must_mention": "q1"}, {"question": "q2", "must_mention": "zebra"}],
    )
    module = ws.module(NOT_JUDGING)

    result = cli(
        "eval", golden, "--target", f"{module}:answer", "--judge", f"{module}:{judge}",
        "--concurrency", "1",
    )  # fmt: skip

    # q1 passes its check, and the judge could not say: not counted; q2 fails its check
    assert table(result.out) == {1: mark, 2: "FAIL"}
    assert f"-> {note}" in result.out
    assert "-> Mention 'zebra'." in result.out
    assert "pass rate 0.000 (0/1)" in result.out
    assert result.code == 0
    with SQLiteStore(run_db(ws)) as store:
        cases = store.cases(store.runs()[0].id)
    assert [c.outcome for c in cases] == [outcome, "failed"]
    assert cases[1].feedback == "Mention 'zebra'."  # the check's, not the judge's (none)
    assert cases[1].error is None


def test_without_a_judge_a_row_with_empty_check_columns_is_inconclusive(
    ws: Workspace, cli: Cli
) -> None:
    checked = {"question": "q1", "must_mention": "answer", "expected_source": ""}
    unchecked = {"question": "q2", "must_mention": "", "expected_source": ""}
    module = ws.module(NOT_JUDGING)
    target = ("--target", f"{module}:answer")

    result = cli("eval", ws.csv("golden.csv", [checked, unchecked]), *target)

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass", 2: "inconcl"}
    assert "-> nothing to check: the row's check columns are empty" in result.out
    assert "pass rate 1.000 (1/1)" in result.out
    assert "not counted: 0 unavailable (the judge could not judge), 1 inconclusive" in result.out
    # with a judge, the row is judged
    judged = cli("eval", "golden.csv", *target, "--judge", f"{module}:agree")
    assert table(judged.out) == {1: "pass", 2: "pass"}
    # a file of rows with nothing to check measures nothing: the run fails
    empty = cli("eval", ws.csv("empty.csv", [unchecked, unchecked | {"question": "q3"}]), *target)
    assert empty.code == 1
    assert table(empty.out) == {1: "inconcl", 2: "inconcl"}
    assert "gate: no case has a pass or fail outcome, so the run measured nothing: FAIL" in (
        empty.out
    )


def test_a_jsonl_row_without_a_field_gets_the_parameters_default_or_is_a_usage_error(
    ws: Workspace, cli: Cli
) -> None:
    rows: list[dict[str, Any]] = [{"question": "q1", "tier": "gold", "must_mention": "q1"}]
    rows += [{"question": f"q{i}", "must_mention": f"q{i}"} for i in range(2, 14)]
    golden = ws.jsonl("golden.jsonl", rows)
    module = ws.module(
        """
        import pathlib

        seen = []

        def answer(question, tier="standard"):
            seen.append((question, tier))
            return question

        def needs(question, tier):
            pathlib.Path("called").write_text("the target ran")
            return question
        """
    )

    result = cli("eval", golden, "--target", f"{module}:answer", "--concurrency", "1")

    assert result.code == 0, result.err
    defaults = [(f"q{i}", "standard") for i in range(2, 14)]
    assert __import__(module).seen == [("q1", "gold"), *defaults]

    needs = cli("eval", golden, "--target", f"{module}:needs")

    assert needs.code == 2
    assert (
        f"refinekit eval: error: --target '{module}:needs' needs 'tier', and rows 2, 3, 4, 5, 6, "
        "7, 8, 9, 10, 11 ... have no 'tier'; give every row that field, or the parameter a default"
    ) in needs.err
    assert needs.out == ""
    assert not (ws.path / "called").exists()
    with SQLiteStore(run_db(ws)) as store:
        assert len(store.runs()) == 1  # the first run only

    one = cli("eval", ws.jsonl("one.jsonl", rows[:2]), "--target", f"{module}:needs")
    assert one.code == 2
    assert "needs 'tier', and row 2 has no 'tier'" in one.err


# --- what the run's judge sees: the documents the function recorded, then the row's context ------


CONTEXT_APP = """
import asyncio
from refinekit import current_attempt, record_context, retry_on_low_quality

seen = {}

def judge(request):
    seen[request.question] = [(d.text, d.source) for d in request.context]
    return True

def plain(question):
    record_context({"text": f"doc for {question}", "source": f"{question}.md"})
    return "an answer"

async def async_plain(question):
    await asyncio.sleep(0)
    record_context({"text": f"doc for {question}", "source": f"{question}.md"})
    return "an answer"

@retry_on_low_quality(evaluator=lambda request: request.metadata["attempt"] >= 2, max_retries=1)
def retried(question, feedback=None):
    number = current_attempt().number
    record_context({"text": f"doc for {question}", "source": f"attempt {number}.md"})
    return "an answer"
"""


@pytest.mark.parametrize(
    ("function", "source"),
    [("plain", "{q}.md"), ("async_plain", "{q}.md"), ("retried", "attempt 2.md")],
)
def test_documents_the_function_recorded_reach_the_judge_then_the_rows_context_each_once(
    ws: Workspace, cli: Cli, function: str, source: str
) -> None:
    golden = ws.jsonl(
        "golden.jsonl",
        [
            # the same document as the one recorded: shown once
            {"question": "q1", "context": {"text": "doc for q1", "source": "q1.md"}},
            {"question": "q2", "context": "the row's own context"},
            {"question": "q3"},
        ],
    )
    module = ws.module(CONTEXT_APP)

    result = cli("eval", golden, "--target", f"{module}:{function}", "--judge", f"{module}:judge")

    assert result.code == 0, result.err
    recorded = {q: ("doc for " + q, source.format(q=q)) for q in ("q1", "q2", "q3")}
    seen = __import__(module).seen
    if function == "retried":  # the accepted attempt's document, not the rejected one's
        assert seen["q1"] == [recorded["q1"], ("doc for q1", "q1.md")]
    else:
        assert seen["q1"] == [recorded["q1"]]
    assert seen["q2"] == [recorded["q2"], ("the row's own context", None)]
    assert seen["q3"] == [recorded["q3"]]


def test_a_rate_limited_try_leaves_no_recorded_documents_behind(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1"}])
    module = ws.module(
        """
        import os
        import openai
        from refinekit import record_context

        seen = []
        tries = 0

        def judge(request):
            seen.append([d.text for d in request.context])
            return True

        def answer(question):
            global tries
            tries += 1
            record_context(f"retrieved on try {tries}")
            client = openai.OpenAI(
                base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0
            )
            with client:
                reply = client.chat.completions.create(
                    model="answer", messages=[{"role": "user", "content": question}]
                )
            return reply.choices[0].message.content
        """
    )
    server.script("answer", [Reply.error(429, "slow down"), "a1"])

    result = cli("eval", golden, "--target", f"{module}:answer", "--judge", f"{module}:judge")

    assert result.code == 0, result.err
    assert __import__(module).seen == [["retrieved on try 2"]]


NO_CONTEXT_APP = """
from refinekit import checks, record_context, retry_on_low_quality

judge = checks.cites_source()

def unwired(question):
    return f"See {question}.md."

def wired(question):
    record_context({"text": "the policy", "source": f"{question}.md"})
    return f"See {question}.md."

@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=0)
def checked_inside(question):
    return f"See {question}.md."
"""


@pytest.mark.parametrize("function", ["unwired", "checked_inside"])
def test_a_check_without_context_says_so_once_with_the_two_ways_out(
    ws: Workspace, cli: Cli, function: str
) -> None:
    rows = [{"question": q, "expected_source": f"{q}.md"} for q in ("q1", "q2", "q3")]
    golden = ws.csv("golden.csv", rows)
    module = ws.module(NO_CONTEXT_APP)

    result = cli("eval", golden, "--target", f"{module}:{function}", "--judge", f"{module}:judge")

    # the cases did fail the check: they count as failed (inside the target: it raised), and
    # the gate sees a rate of 0
    mark = "FAIL" if function == "unwired" else "RAISED"
    assert table(result.out) == {1: mark, 2: mark, 3: mark}
    assert "pass rate 0.000 (0/3)" in result.out
    notes = [line for line in result.out.splitlines() if line.startswith("context: ")]
    assert len(notes) == 1, result.out  # once, not once per case
    assert notes[0].startswith(
        "context: every case failed cites_source because no context document with a source "
        "reached it: the target recorded none and the golden file gave none."
    )
    assert "refinekit.record_context(docs) in the target" in notes[0]
    assert "the golden file's context column" in notes[0]
    # and on stderr, as soon as the first such case finished: once
    assert result.err.count("failed cites_source with no context document to cite") == 1
    # it comes before the figure it explains
    assert result.out.index("context: ") < result.out.index("pass rate 0.000")


def test_context_from_the_target_or_the_file_reaches_the_check_and_no_note(
    ws: Workspace, cli: Cli
) -> None:
    module = ws.module(NO_CONTEXT_APP)
    rows = [{"question": q, "expected_source": f"{q}.md"} for q in ("q1", "q2")]
    wired = cli(
        "eval", ws.csv("g.csv", rows), "--target", f"{module}:wired", "--judge", f"{module}:judge"
    )
    assert wired.code == 0, wired.err
    assert table(wired.out) == {1: "pass", 2: "pass"}
    assert "context: " not in wired.out

    given = [r | {"context": {"text": "the policy", "source": r["expected_source"]}} for r in rows]
    from_file = cli(
        "eval",
        ws.jsonl("g.jsonl", given),
        "--target",
        f"{module}:unwired",
        "--judge",
        f"{module}:judge",
    )
    assert from_file.code == 0, from_file.err
    assert table(from_file.out) == {1: "pass", 2: "pass"}
    assert "context: " not in from_file.out

    # one case of two without context: said once, with the count
    partial = [given[0], rows[1]]
    some = cli(
        "eval",
        ws.jsonl("p.jsonl", partial),
        "--target",
        f"{module}:unwired",
        "--judge",
        f"{module}:judge",
    )
    assert table(some.out) == {1: "pass", 2: "FAIL"}
    assert some.out.count("context: 1 of 2 cases failed cites_source") == 1


# --- a misconfigured answer function stops the run; the fixed one resumes it ---------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, "AuthenticationError"), (403, "PermissionDeniedError"), (404, "NotFoundError")],
)
def test_an_answer_function_refused_by_its_endpoint_stops_the_run_and_resumes(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, status: int, error: str
) -> None:
    golden = ws.csv("golden.csv", [{"question": f"q{i}", "must_mention": "a"} for i in (1, 2, 3)])
    target = ws.module(SYNC_ANSWER)
    run = ("eval", golden, "--target", f"{target}:answer", "--concurrency", "1")
    server.script("answer", ["a1", Reply.error(status, f"refused: the key {SECRET}")])

    stopped = cli(*run)

    assert stopped.code == 3
    assert f"refinekit eval: error: the answer function raised {error}: " in stopped.err
    assert "a misconfiguration fails every case, so the run stops here" in stopped.err
    assert SECRET not in stopped.err + stopped.out
    assert "run 1 is incomplete: 1 of 3 cases stored" in stopped.out
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
        assert info.status == "incomplete"
        assert [c.question for c in store.cases(info.id)] == ["q1"]  # q2 is not stored

    server.script("answer", ["a2", "a3"])
    resumed = cli(*run)

    assert resumed.code == 0, resumed.err
    assert "resuming run 1: 1 of 3 cases already stored" in resumed.out
    assert asked(server) == ["q1", "q2", "q2", "q3"]
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
        assert info.status == "complete"
        assert [c.outcome for c in store.cases(info.id)] == ["passed"] * 3


# --- --retry: a resumed run runs again the stored cases that reached no verdict ----------------


RETRY_ANSWERS = {"q1": "a1", "q2": "a2", "q3": "a3", "q4": "a4"}


@pytest.mark.parametrize(
    ("retry", "again"),
    [
        ([], ["q4"]),  # without --retry, as before: only the case never stored
        (["--retry", "raised"], ["q1", "q4"]),
        (["--retry", "unavailable"], ["q2", "q4"]),
        (["--retry", "raised,unavailable"], ["q1", "q2", "q4"]),
    ],
)
def test_retry_runs_again_the_stored_cases_that_raised_or_were_unavailable(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, retry: list[str], again: list[str]
) -> None:
    golden = ws.csv("golden.csv", [{"question": q} for q in RETRY_ANSWERS])
    target = ws.module(ASYNC_REPLY)  # returns the reply as it came: its usage is counted
    judge = ws.module(CRITERIA_JUDGE)
    run = (
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge",
        "--concurrency", "1",
    )  # fmt: skip
    # q1: the answer endpoint fails (raised); q2: the judge is down (unavailable); q3 passes;
    # q4: the key is refused, which stops the run (exit 3) with q1-q3 stored
    server.script("answer", [Reply.error(500, "overloaded"), "a2", "a3", Reply.error(401)])
    plan = {"a1": 0.9, "a2": [Reply.error(503, "overloaded"), 0.9], "a3": 0.9, "a4": 0.9}
    server.script("judge", [judge_replies(plan)] * 6)
    stopped = cli(*run)
    assert stopped.code == 3, stopped.err
    with SQLiteStore(run_db(ws)) as store:
        first = {c.question: c for c in store.cases(store.runs()[0].id)}
    assert {q: c.outcome for q, c in first.items()} == {
        "q1": "raised",
        "q2": "unavailable",
        "q3": "passed",
    }
    server.script("answer", [answers(RETRY_ANSWERS)] * len(again))
    before = len(server.requests_for("answer"))

    resumed = cli(*run, *retry)

    assert resumed.code == 0, resumed.err
    assert asked(server)[before:] == again  # q3 (passed) is never paid for again
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()  # the same run, finished
        cases = {c.question: c for c in store.cases(info.id)}
    assert info.status == "complete"
    assert len(cases) == 4
    expected = {"q1": "raised", "q2": "unavailable", "q3": "passed", "q4": "passed"}
    expected.update(dict.fromkeys(again, "passed"))  # the new outcome replaces the stored one
    assert {q: c.outcome for q, c in cases.items()} == expected
    assert cases["q3"] == first["q3"]  # untouched
    retried = [q for q in again if q != "q4"]
    assert info.summary["retried"] == len(retried)
    # what the earlier try paid for stays counted: q2's answer was bought twice
    assert cases["q2"].answer_usage.model_calls == (2 if "q2" in retried else 1)
    assert cases["q1"].answer_usage.model_calls == (1 if "q1" in retried else 0)
    if retried:
        outcomes = ", ".join(f"1 {first[q].outcome}" for q in retried)
        assert (
            f"resuming run 1: 3 of 4 cases already stored ({3 - len(retried)} not run again; "
            "--fresh starts over)\n"
            f"  running again {_n_cases(len(retried))} that ended {outcomes} (--retry); the new "
            "outcome replaces the stored one\n"
        ) in resumed.out
    else:
        assert "resuming run 1: 3 of 4 cases already stored (not run again" in resumed.out
    counted = [o for o in expected.values() if o != "unavailable"]  # raised counts as failed
    passed = counted.count("passed")
    assert f"pass rate {passed / len(counted):.3f} ({passed}/{len(counted)})" in resumed.out


def _n_cases(n: int) -> str:
    return "1 case" if n == 1 else f"{n} cases"


def test_retry_without_an_unfinished_run_says_every_case_runs(ws: Workspace, cli: Cli) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a"}])
    target = ws.module("def answer(question):\n    return 'a'\n")
    run = ("eval", golden, "--target", f"{target}:answer", "--retry", "raised")
    assert cli(*run).code == 0

    result = cli(*run)  # run 1 is complete: never resumed

    assert result.code == 0
    assert (
        "  --retry: no unfinished run of this command to resume (a complete run is never "
        "resumed): every case runs"
    ) in result.out


def test_retry_on_a_resumed_run_with_nothing_to_retry_says_so(
    ws: Workspace, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a"}])
    target = ws.module(
        """
        import os
        from refinekit import JudgeMisconfigured

        def answer(question):
            if os.environ.get("RK_REFUSED"):
                raise JudgeMisconfigured("HTTP 401: Incorrect API key provided", model="inner")
            return "a"
        """
    )
    run = ("eval", golden, "--target", f"{target}:answer", "--retry", "raised")
    monkeypatch.setenv("RK_REFUSED", "1")
    assert cli(*run).code == 3  # stopped at once: run 1 is unfinished, with nothing stored
    monkeypatch.delenv("RK_REFUSED")

    result = cli(*run)

    assert result.code == 0, result.err
    assert "-> run 1 in" in result.out
    assert "  --retry: no stored case ended raised\n" in result.out


@pytest.mark.parametrize("value", ["failed", "passed,raised", "", "inconclusive"])
def test_retry_takes_raised_or_unavailable_only(ws: Workspace, cli: Cli, value: str) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a"}])
    accepted = cli("eval", golden, "--target", "m:answer", "--retry", "unavailable, raised,")
    assert "no module named 'm'" in accepted.err  # parsed; the target is what is missing

    result = cli("eval", golden, "--target", "m:answer", "--retry", value)

    assert result.code == 2
    assert (
        "argument --retry: raised, unavailable or raised,unavailable (a passed, failed or "
        "inconclusive case is a measurement, never run again)"
    ) in " ".join(result.err.split())


def test_a_misconfigured_judge_inside_the_answer_function_stops_the_run(
    ws: Workspace, cli: Cli
) -> None:
    golden = ws.csv("golden.csv", [{"question": "q1", "must_mention": "a"}])
    target = ws.module(
        """
        from refinekit import JudgeMisconfigured, retry_on_low_quality

        def inner_judge(request):
            raise JudgeMisconfigured("HTTP 401: Incorrect API key provided", model="inner")

        @retry_on_low_quality(evaluator=inner_judge)
        def answer(question):
            return "a"
        """
    )

    result = cli("eval", golden, "--target", f"{target}:answer")

    assert result.code == 3
    assert "the answer function raised JudgeMisconfigured: HTTP 401" in result.err
    with SQLiteStore(run_db(ws)) as store:
        [info] = store.runs()
        assert (info.status, store.cases(info.id)) == ("incomplete", [])


# --- --compare: the same file and judge; another file on the questions both have ---------------


def test_compare_previous_skips_runs_of_another_judge(ws: Workspace, cli: Cli) -> None:
    questions = [f"q{i}" for i in range(1, 5)]
    golden = ws.csv("golden.csv", [{"question": q, "must_mention": "ok"} for q in questions])
    module = ws.module(
        FROM_FILE
        + """
def lenient(request):
    return True

def strict(request):
    return False
"""
    )
    checks_only = ("eval", golden, "--target", f"{module}:answer")
    judged = (*checks_only, "--judge", f"{module}:lenient")
    (ws.path / "answers.json").write_text(json.dumps({q: "ok" for q in questions}))

    assert cli(*checks_only).code == 0  # run 1
    assert cli(*judged).code == 0  # run 2
    third = cli(*checks_only, "--compare", "previous")  # run 3: with run 1, not run 2
    fourth = cli(*judged, "--compare", "previous")  # run 4: with run 2, not run 3
    fifth = cli(*checks_only[:4], "--judge", f"{module}:strict", "--compare", "previous")

    assert "compare with run 1: 4 questions judged in both runs" in third.out
    assert "compare with run 2: 4 questions judged in both runs" in fourth.out
    assert (
        "compare: no earlier complete run of this golden file with the same judge in the "
        "store; nothing to compare with"
    ) in fifth.out
    assert "compare with run" not in fifth.out


def test_compare_with_a_run_of_another_file_pairs_the_questions_both_have(
    ws: Workspace, cli: Cli
) -> None:
    old = ws.csv("old.csv", [{"question": f"q{i}", "must_mention": "ok"} for i in (1, 2, 3, 4)])
    new = ws.csv("new.csv", [{"question": f"q{i}", "must_mention": "ok"} for i in (2, 3, 4, 5)])
    target = ws.module(FROM_FILE)
    (ws.path / "answers.json").write_text(
        json.dumps({"q1": "ok", "q2": "ok", "q3": "ok", "q4": "bad", "q5": "ok"})
    )
    assert cli("eval", old, "--target", f"{target}:answer").code == 0
    (ws.path / "answers.json").write_text(
        json.dumps({"q1": "ok", "q2": "bad", "q3": "ok", "q4": "ok", "q5": "ok"})
    )

    result = cli("eval", new, "--target", f"{target}:answer", "--compare", "1")

    assert result.code == 0, result.err
    assert (
        f"compare: run 1 is of another file ({old.resolve()}); comparing the questions both share"
    ) in result.out
    assert (
        "compare with run 1: 3 questions judged in both runs; 1 regressed, 1 improved"
    ) in result.out
    assert "  regressed: #1 q2 -> Mention 'ok'." in result.out
    assert "  improved: #3 q4" in result.out
    # --compare previous looks at the same file only
    again = cli("eval", new, "--target", f"{target}:answer", "--compare", "previous")
    assert "compare with run 2:" in again.out
    assert "another file" not in again.out


def test_compare_with_a_calibrate_run_is_a_usage_error(ws: Workspace, cli: Cli) -> None:
    labelled = ws.csv("labelled.csv", [{"question": "q", "answer": "a", "label": "pass"}])
    golden = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])
    module = ws.module(
        """
        import pathlib

        def judge(request):
            return True

        def answer(question):
            pathlib.Path("called").write_text("the target ran")
            return "ok"
        """
    )
    assert cli("calibrate", labelled, "--judge", f"{module}:judge").code == 0

    result = cli("eval", golden, "--target", f"{module}:answer", "--compare", "1")

    assert result.code == 2
    assert "refinekit eval: error: --compare 1: run 1 is a calibrate run, not an eval" in result.err
    assert result.out == ""
    assert not (ws.path / "called").exists()
    with SQLiteStore(run_db(ws)) as store:
        assert [r.kind for r in store.runs()] == ["calibrate"]


# --- the data file's text, Ctrl-C, --help (the report's path: test_cli_usage.py) ------------


def test_lone_surrogates_in_a_jsonl_file_become_question_marks(ws: Workspace, cli: Cli) -> None:
    # JSON can escape half of a UTF-16 pair; no file or database can hold the string it makes
    (ws.path / "golden.jsonl").write_text(
        '{"question": "Refund? \\ud800", "must_mention": "refund", '
        '"note": {"k\\udc00": ["x\\ud83d", "paired \\ud83d\\ude00"]}}\n',
        encoding="utf-8",
    )
    target = ws.module("def answer(question, note):\n    return question + ' refund'\n")

    result = cli("eval", "golden.jsonl", "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert table(result.out) == {1: "pass"}
    with SQLiteStore(run_db(ws)) as store:
        [case] = store.cases(store.runs()[0].id)
    assert case.question == "Refund? ?"
    assert case.answer == "Refund? ? refund"
    assert case.row["note"] == {"k?": ["x?", "paired \U0001f600"]}  # a whole pair is kept


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_ctrl_c_while_loading_exits_130_before_a_run_exists(
    ws: Workspace, cli: Cli, command: str
) -> None:
    data = ws.csv("data.csv", [{"question": "q", "answer": "a", "label": "pass"}])
    module = ws.module("raise KeyboardInterrupt  # as Ctrl-C during a slow import\n")
    option = "--target" if command == "eval" else "--judge"

    try:
        result = cli(command, data, option, f"{module}:answer")
    except KeyboardInterrupt:  # not pytest's own: it would stop the session
        pytest.fail("the KeyboardInterrupt got out of refinekit's main()")

    assert result.code == 130
    assert result.err == f"refinekit {command}: interrupted\n"
    assert result.out == ""
    assert not run_db(ws).exists()


def test_repeat_help_recommends_an_odd_k(cli: Cli) -> None:
    result = cli("eval", "--help")

    assert result.code == 0
    assert (
        "the outcome is the majority, and an even split is inconclusive, so prefer an odd K"
        in " ".join(result.out.split())
    )
