"""The clients a `JudgeModel` makes, and judge requests under a time limit.

- The counterparts refinekit makes (an async copy per event loop of a sync client, a sync copy
  of an async client) are closed: with their loop, or by `close()` / `aclose()`; the caller's
  own client never is.
- A judge request under `Timed` (the `@reviewed` limits) ends by the deadline, on the sync
  path too where the caller stopped waiting for its worker thread.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from refinekit import AnswerRejected, EvaluationRequest, JudgeUnavailable, reviewed
from refinekit._core.deadline import current_deadline
from refinekit._core.errors import TimedOut
from refinekit._engine.flow import Evaluate, Timed
from refinekit.judges import JudgeModel, rating, relevancy
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

JUDGE = "judge"
REQUEST = EvaluationRequest(question="How long is the refund window?", answer="30 days")


# --- the clients a JudgeModel makes ----------------------------------------------------------


def _judge_on_two_loops(client: openai.OpenAI) -> list[openai.AsyncOpenAI]:
    """Judge from two `asyncio.run` loops; the async copies the judge used, in order."""
    judge_model = JudgeModel(client, JUDGE)
    judge = relevancy(judge_model)
    copies: list[openai.AsyncOpenAI] = []

    async def judge_once() -> bool:
        verdict = await judge.aevaluate(REQUEST)
        copies.append(judge_model.async_client())
        return verdict.passed

    assert asyncio.run(judge_once())  # a loop of its own each time: a copy each time
    assert asyncio.run(judge_once())
    assert not judge_model._async_per_loop  # forgotten with their loops: no loop is kept
    return copies


def test_the_async_copy_of_a_sync_client_is_closed_with_its_loop(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, ["Yes", "Yes"])
    gc.collect()  # earlier tests' garbage is collected now, not inside the recording below
    with server.client() as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # recorded, so a warning from a finalizer is seen
        copies = _judge_on_two_loops(client)
        assert len({id(c) for c in copies}) == 2
        assert all(copy.is_closed() for copy in copies)  # closed when their loops shut down
        del copies
        gc.collect()  # an unclosed connection would warn here, from its finalizer
        assert not client.is_closed()  # the caller's client is the caller's to close
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_close_closes_the_copies_on_loops_that_are_not_running(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, ["Yes", "Yes"])
    with server.client() as client:
        judge_model = JudgeModel(client, JUDGE)
        loop = asyncio.new_event_loop()  # a loop closed without shutdown_asyncgens()
        try:

            async def judge_once() -> openai.AsyncOpenAI:
                assert (await relevancy(judge_model).aevaluate(REQUEST)).passed
                return judge_model.async_client()

            copy = loop.run_until_complete(judge_once())
            assert not copy.is_closed()
            judge_model.close()
            assert copy.is_closed()
            # still usable: a new copy is made
            again = loop.run_until_complete(judge_once())
            assert again is not copy
            judge_model.close()
            assert again.is_closed()
        finally:
            loop.close()
        assert not client.is_closed()


async def test_async_with_closes_this_loops_copy_and_not_the_callers_client(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, ["Yes"])
    with server.client() as client:
        async with JudgeModel(client, JUDGE) as judge_model:
            assert (await relevancy(judge_model).aevaluate(REQUEST)).passed
            copy = judge_model.async_client()
        assert copy.is_closed()
        assert not judge_model._async_per_loop
        assert not client.is_closed()


async def test_with_closes_the_sync_copy_of_an_async_client(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, ["Yes"])
    async with server.async_client() as client:
        with JudgeModel(client, JUDGE) as judge_model:
            assert relevancy(judge_model).evaluate(REQUEST).passed  # the sync path
            copy = judge_model.sync_client()
            assert copy is not client
        assert copy.is_closed()
        assert not client.is_closed()
        await judge_model.aclose()  # closing twice is harmless


async def test_the_sync_copy_is_closed_when_an_unclosed_judge_model_is_collected(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, ["Yes"])
    gc.collect()  # earlier tests' garbage is collected now, not inside the recording below
    async with server.async_client() as client:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # recorded, so a warning from a finalizer is seen
            judge_model = JudgeModel(client, JUDGE)
            assert relevancy(judge_model).evaluate(REQUEST).passed  # a pooled connection
            copy = judge_model.sync_client()
            judge_model.itself = judge_model  # type: ignore[attr-defined]  # a reference cycle
            del judge_model
            gc.collect()  # the cycle's turn: the copy is closed, its connection in order
            assert copy.is_closed()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
        assert not client.is_closed()


def test_closing_a_judge_on_the_callers_own_clients_closes_nothing(
    server: ScriptedOpenAI,
) -> None:
    with server.client() as client:
        judge_model = JudgeModel(client, JUDGE)
        judge_model.close()
        assert judge_model.sync_client() is client
        assert not client.is_closed()


# --- a judge request under a time limit ------------------------------------------------------


class _Hang:
    """A scripted reply that never comes: it waits until the test's teardown releases it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, request: RecordedRequest) -> str:
        self.calls += 1
        self.release.wait(60)
        return "Yes"


@pytest.fixture
def hang(server: ScriptedOpenAI) -> Iterator[_Hang]:
    reply = _Hang()
    try:
        yield reply
    finally:
        reply.release.set()  # before the server stops: it waits for its connections


class _InWhichThread:
    """A flow command that runs another, notes the thread and deadline it runs with, and when
    it has ended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.thread: threading.Thread | None = None
        self.deadline: float | None = None
        self.ended = threading.Event()

    def run_sync(self) -> Any:
        self.thread = threading.current_thread()
        self.deadline = current_deadline()
        try:
            return self.inner.run_sync()
        finally:
            self.ended.set()

    async def run_async(self) -> Any:
        self.deadline = current_deadline()
        return await self.inner.run_async()


# each judge kind and a reply it passes: a plain completion, and instructor's structured one
KINDS = {
    "relevancy": (relevancy, "Yes"),
    "rating": (rating, '{"rating": 4, "feedback": "Complete."}'),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_timed_out_judge_request_ends_in_its_worker_thread(
    server: ScriptedOpenAI, hang: _Hang, kind: str
) -> None:
    make, passing = KINDS[kind]
    server.script(JUDGE, [passing, hang])
    # the client would wait 60 s and retry twice: the deadline must win over both
    with server.client(max_retries=2, timeout=60.0) as client:
        judge = make(JudgeModel(client, JUDGE))
        assert judge.evaluate(REQUEST).passed  # warm: the timed request is sent at once
        command = _InWhichThread(Evaluate(judge, REQUEST))
        with pytest.raises(TimedOut):
            Timed(command, 0.5).run_sync()
        assert command.thread is not None
        assert command.thread is not threading.current_thread()  # it ran in a worker
        assert command.ended.wait(timeout=10)  # the request ended in its worker thread...
        assert not hang.release.is_set()  # ...though the server has still not answered
    assert hang.calls == 1  # sent, and no retry was sent after the deadline
    assert len(server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_within_a_time_limit_the_clients_retries_still_happen(
    server: ScriptedOpenAI, kind: str
) -> None:
    make, passing = KINDS[kind]
    server.script(JUDGE, [Reply.error(503), Reply.disconnect(), passing])
    with server.client(max_retries=2) as client:
        judge = make(JudgeModel(client, JUDGE, timeout=30.0))
        verdict = Timed(Evaluate(judge, REQUEST), 30.0).run_sync()
    assert verdict.passed
    assert len(server.requests) == 3


def test_within_a_time_limit_a_retry_that_cannot_end_in_time_is_not_made(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, [Reply.error(503), Reply.error(503), "Yes"])
    with server.client(max_retries=2) as client:
        judge = relevancy(JudgeModel(client, JUDGE))
        # the backoff is 0.5 s, then 1 s (computed, not slept, in tests): the first retry
        # fits in the 0.9 s limit, the second would end past it, so it is not made
        with pytest.raises(JudgeUnavailable, match="HTTP 503"):
            Timed(Evaluate(judge, REQUEST), 0.9).run_sync()
    assert len(server.requests) == 2


async def test_the_deadline_reaches_the_command_on_both_paths() -> None:
    class _Done:
        def run_sync(self) -> str:
            return "done"

        async def run_async(self) -> str:
            return "done"

    for seconds in (5.0, 0.5):
        command = _InWhichThread(_Done())
        before = time.monotonic()
        assert Timed(command, seconds).run_sync() == "done"
        assert command.deadline is not None
        assert before + seconds - 1 < command.deadline <= time.monotonic() + seconds
        command = _InWhichThread(_Done())
        assert await Timed(command, seconds).run_async() == "done"
        assert command.deadline is not None
    assert current_deadline() is None  # set for the command only
    # nested limits: the earlier deadline holds
    outer = _InWhichThread(Timed(_InWhichThread(_Done()), 30.0))
    assert Timed(outer, 1.0).run_sync() == "done"
    inner = outer.inner.command
    assert inner.deadline == outer.deadline


def test_an_outcome_after_the_deadline_is_dropped() -> None:
    class _Late:
        def __init__(self, outcome: Any) -> None:
            self.outcome = outcome

        def run_sync(self) -> Any:
            deadline = current_deadline()
            assert deadline is not None
            while time.monotonic() < deadline:  # finishes just after its deadline
                threading.Event().wait(deadline - time.monotonic())
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

        async def run_async(self) -> Any:
            return self.run_sync()

    with pytest.raises(TimedOut):
        Timed(_Late("late"), 0.05).run_sync()
    with pytest.raises(TimedOut):
        Timed(_Late(ValueError("late")), 0.05).run_sync()


def test_reviewed_reports_a_judge_cut_off_by_judge_timeout_as_such(
    server: ScriptedOpenAI, hang: _Hang
) -> None:
    server.script(JUDGE, ["Yes", hang])
    with server.client(max_retries=2, timeout=60.0) as client:
        judge = relevancy(JudgeModel(client, JUDGE))
        assert judge.evaluate(REQUEST).passed  # warm: the timed request is sent at once

        @reviewed(judge=judge, judge_timeout=0.5, max_revisions=0)
        def answer(question: str) -> str:
            return "30 days"

        with pytest.raises(AnswerRejected) as caught:
            answer("How long is the refund window?")
    assert caught.value.reason == "judge_timeout"
    assert hang.calls == 1
