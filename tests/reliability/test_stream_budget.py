"""Streams and first calls under a job's budget, counted at the scripted server.

A stream's request is sent when the function returns its stream: from then on it holds its
reservation, and however its reading ends (read to its end, aborted by a check, closed by the
consumer of `fn.stream(...)`, its task cancelled, stopped by the budget) it counts, its usage
as the server reported it or estimated (characters / 4) and marked so
(`Usage.estimated_calls`). So the requests the server receives are the calls the job counts,
never more than `max_calls`, and `job.usage` / `BudgetExceeded.usage` hold what was streamed.

First calls started at once under `max_tokens` / `max_cost` ramp up: one until one has been
measured, then at the measured usage, so a gather of 12 under a budget worth about 3 calls
does not send all 12 (docs/budgets.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import BaseModel

import refinekit
from refinekit import (
    Budget,
    BudgetExceeded,
    Event,
    Partial,
    Prices,
    checks,
    retry_on_low_quality,
    self_correct,
)
from refinekit.testing import Reply, ScriptedOpenAI

pytestmark = pytest.mark.reliability

TEXT = " ".join(f"word{i:03d}" for i in range(400))
"""A long answer: 400 word chunks of 2 estimated tokens each (8 characters)."""

STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


class Invoice(BaseModel):
    number: str
    total_cents: int
    note: str


INVOICE_JSON = '{"number": "A-1", "total_cents": 1250, "note": "' + "paid in full " * 40 + '"}'
USER = [{"role": "user", "content": "Extract the invoice: A-1, EUR 12.50"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI() as scripted:
        yield scripted


@pytest.fixture(autouse=True)
def fresh(server: ScriptedOpenAI) -> None:
    server.reset()


def stream_events() -> tuple[list[Event], Any]:
    seen: list[Event] = []
    return seen, refinekit.subscribe(seen.append).close


def provisional(client: Any) -> Any:
    """A provisional `@retry_on_low_quality` over `client`'s stream of model "m"."""

    @retry_on_low_quality(evaluator=checks.excludes("never"), stream_mode="provisional")
    def answer(question: str) -> Any:
        messages = [{"role": "user", "content": question}]
        return client.chat.completions.create(model="m", messages=messages, **STREAMED)

    return answer


def aprovisional(client: Any) -> Any:
    """`provisional` over an async client."""

    @retry_on_low_quality(evaluator=checks.excludes("never"), stream_mode="provisional")
    async def answer(question: str) -> Any:
        messages = [{"role": "user", "content": question}]
        return await client.chat.completions.create(model="m", messages=messages, **STREAMED)

    return answer


def assert_counted_as_sent(server: ScriptedOpenAI, job: refinekit.Job, limit: int) -> int:
    """The requests the server received are the calls the job counts, at most `limit`."""
    server.streamed(wait=5)  # every stream closed by the client (none left running)
    sent = len(server.requests_for("m"))
    assert job.usage.model_calls == sent, (job.usage, sent)
    assert sent <= limit
    return sent


def test_provisional_streams_closed_after_one_item_count_under_max_calls(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=3, then=Reply.text(TEXT)), times=None)
    stopped = 0
    refused: list[tuple[str, float | None]] = []
    with server.client(max_retries=0, timeout=5) as client:
        answer = provisional(client)

        with refinekit.job(budget=Budget(max_calls=3)) as job:
            for _ in range(10):
                items = answer.stream("q")
                try:
                    first = next(items)
                except BudgetExceeded as e:
                    stopped += 1
                    refused.append((e.limit, e.needed))
                else:
                    assert first == "word000"
                items.close()
    assert assert_counted_as_sent(server, job, 3) == 3
    assert stopped == 7
    assert refused == [("max_calls", 1)] * 7
    # the server sent no usage before the close: estimated, and said so
    assert job.usage.estimated_calls == 3
    assert job.usage.prompt_tokens == 3  # "q": 1 character, 1 token
    assert job.usage.completion_tokens == 3 * 2  # "word000": 7 characters, 2 tokens


def test_self_correct_streams_stopped_at_the_first_partial_count_under_max_calls(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=8, then=Reply.text(INVOICE_JSON, chunks=6)), times=None)
    stopped = 0
    with server.client(max_retries=0, timeout=5) as client:

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="m", messages=messages, **STREAMED)

        with refinekit.job(budget=Budget(max_calls=3)) as job:
            for _ in range(10):
                with extract.stream(USER) as items:
                    try:
                        for item in items:
                            if isinstance(item, Partial):
                                break
                        else:
                            raise AssertionError("no Partial")
                    except BudgetExceeded:
                        stopped += 1
    assert assert_counted_as_sent(server, job, 3) == 3
    assert stopped == 7
    assert job.usage.estimated_calls == 3


async def test_cancelled_async_stream_consumers_count_under_max_calls(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=2, then=Reply.text(TEXT)), times=None)
    seen, unsubscribe = stream_events()
    stopped = 0
    async with server.async_client(max_retries=0, timeout=5) as client:
        answer = aprovisional(client)

        async def consume(first: asyncio.Event) -> None:
            async for _ in answer.stream("q"):  # stalls after 2 items: only a cancel ends it
                first.set()

        async with refinekit.job(budget=Budget(max_calls=3)) as job:
            for _ in range(10):
                first = asyncio.Event()
                task = asyncio.ensure_future(consume(first))
                started = asyncio.ensure_future(first.wait())
                await asyncio.wait({task, started}, timeout=5, return_when="FIRST_COMPLETED")
                started.cancel()
                if task.done():
                    assert isinstance(task.exception(), BudgetExceeded)
                    stopped += 1
                    continue
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
    unsubscribe()
    assert assert_counted_as_sent(server, job, 3) == 3
    assert stopped == 7
    assert job.usage.estimated_calls == 3
    closed = [e for e in seen if e.kind == "stream"]
    assert [(e.aborted, e.estimated) for e in closed] == [("closed", True)] * 3


async def test_async_stream_consumers_cancelled_between_items_count_at_once(
    server: ScriptedOpenAI,
) -> None:
    """A consumer cancelled in its own code (say, sending an item on), not in `__anext__`."""
    server.script("m", Reply.hang(after=2, then=Reply.text(TEXT)), times=None)
    async with server.async_client(max_retries=0, timeout=5) as client:
        answer = aprovisional(client)

        async def consume(first: asyncio.Event) -> None:
            async for _ in answer.stream("q"):
                first.set()
                await asyncio.Event().wait()  # cancelled here, between two items

        async with refinekit.job(budget=Budget(max_calls=3)) as job:
            first = asyncio.Event()
            task = asyncio.ensure_future(consume(first))
            await asyncio.wait_for(first.wait(), timeout=5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(5):  # the dropped stream's call ends within a few loop turns
                await asyncio.sleep(0)
            assert job.usage.model_calls == 1
    assert assert_counted_as_sent(server, job, 1) == 1


async def test_cancelled_awaited_calls_reading_a_stream_count_under_max_calls(
    server: ScriptedOpenAI,
) -> None:
    """A plain awaited call whose function streams, cancelled while the stream is read."""
    server.script("m", Reply.hang(after=2, then=Reply.text(TEXT)), times=None)
    seen, unsubscribe = stream_events()
    stopped = 0
    reading = asyncio.Event()
    async with server.async_client(max_retries=0, timeout=5) as client:

        @retry_on_low_quality(evaluator=checks.excludes("never"))
        async def answer(question: str) -> Any:
            messages = [{"role": "user", "content": question}]
            stream = await client.chat.completions.create(model="m", messages=messages, **STREAMED)

            async def chunks() -> AsyncIterator[Any]:
                async with stream:  # closing the generator closes the HTTP response
                    async for chunk in stream:
                        yield chunk
                        reading.set()  # refinekit is reading it: the request was sent

            return chunks()

        async with refinekit.job(budget=Budget(max_calls=3)) as job:
            for _ in range(10):
                reading.clear()
                task = asyncio.ensure_future(answer("q"))
                read = asyncio.ensure_future(reading.wait())
                await asyncio.wait({task, read}, timeout=5, return_when="FIRST_COMPLETED")
                read.cancel()
                if task.done():
                    assert isinstance(task.exception(), BudgetExceeded)
                    stopped += 1
                    continue
                task.cancel()  # the stream stalls after 2 chunks: it is being read
                with pytest.raises(asyncio.CancelledError):
                    await task
    unsubscribe()
    assert assert_counted_as_sent(server, job, 3) == 3
    assert stopped == 7
    assert job.usage.estimated_calls == 3
    assert [e.aborted for e in seen if e.kind == "stream"] == ["closed"] * 3


def test_concurrent_streams_closed_early_count_under_max_calls(server: ScriptedOpenAI) -> None:
    server.script("m", Reply.hang(after=2, then=Reply.text(TEXT)), times=None)
    with server.client(max_retries=0, timeout=5) as client:
        answer = provisional(client)

        def one() -> str:
            try:
                with answer.stream("q") as items:
                    return str(next(items))
            except BudgetExceeded:
                return "stopped"

        with refinekit.job(budget=Budget(max_calls=3)) as job, ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(contextvars.copy_context().run, one) for _ in range(12)]
            results = [f.result() for f in futures]
    sent = assert_counted_as_sent(server, job, 3)
    assert results.count("stopped") == 12 - sent


def test_threads_streaming_under_max_tokens_count_what_they_streamed(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.text(TEXT), times=None)
    texts: dict[int, str] = {}
    errors: dict[int, BudgetExceeded] = {}
    with server.client(max_retries=0, timeout=5) as client:
        answer = provisional(client)

        # all four streams are under way before any reads on (a thread started late under load
        # would otherwise find the budget spent and send nothing)
        under_way = threading.Barrier(4, timeout=10)

        def work(i: int) -> None:
            got: list[str] = []
            try:
                for n, item in enumerate(answer.stream("q")):
                    if isinstance(item, str):
                        got.append(item)
                    if n == 0:
                        under_way.wait()
            except BudgetExceeded as e:
                errors[i] = e
            texts[i] = "".join(got)

        with refinekit.job(budget=Budget(max_tokens=300)) as job:
            threads = [
                threading.Thread(target=contextvars.copy_context().run, args=(work, i))
                for i in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert assert_counted_as_sent(server, job, 4) == 4
    assert len(errors) == 4  # every stream stopped by the budget, none returned cut short
    # what was streamed, estimated (the server sent no usage before the close), and said so
    assert job.usage.estimated_calls == 4
    assert job.usage.prompt_tokens == 4
    assert job.usage.completion_tokens == sum(-(-len(t) // 4) for t in texts.values())
    # the streams stop together: the job passes 300 by at most a chunk per stream
    assert 300 < job.usage.total_tokens <= 300 + 4 * 3
    # the last stop says what the job spent, every stream counted
    last = max(errors.values(), key=lambda e: e.usage.total_tokens)
    assert last.usage == job.usage
    assert last.usage.estimated_calls == 4
    assert last.spent == job.usage.total_tokens


PRICES = Prices({"m": (100.0, 200.0)})
"""A call of 20 prompt and 10 completion tokens costs 0.004."""


async def test_a_gather_of_first_calls_ramps_up_under_max_cost(server: ScriptedOpenAI) -> None:
    server.script("m", Reply.text("Paris.", prompt_tokens=20, completion_tokens=10), times=None)
    async with server.async_client(max_retries=0, timeout=5) as client:

        @retry_on_low_quality(evaluator=checks.excludes("never"))
        async def answer(question: str) -> Any:
            messages = [{"role": "user", "content": question}]
            return await client.chat.completions.create(model="m", messages=messages)

        budget = Budget(max_cost=0.014, prices=PRICES)  # worth 3.5 calls
        async with refinekit.job(budget=budget) as job:
            results = await asyncio.gather(
                *(answer("q") for _ in range(12)), return_exceptions=True
            )
    sent = len(server.requests_for("m"))
    assert sent == job.usage.model_calls == 3
    assert sum(isinstance(r, BudgetExceeded) for r in results) == 9
    assert job.cost is not None
    assert job.cost.total <= 0.014


def test_threads_of_first_calls_ramp_up_under_max_tokens(server: ScriptedOpenAI) -> None:
    server.script("m", Reply.text("Paris.", prompt_tokens=20, completion_tokens=10), times=None)
    with server.client(max_retries=0, timeout=5) as client:

        @retry_on_low_quality(evaluator=checks.excludes("never"))
        def answer(question: str) -> Any:
            messages = [{"role": "user", "content": question}]
            return client.chat.completions.create(model="m", messages=messages)

        def one() -> Any:
            try:
                return answer("q")
            except BudgetExceeded as e:
                return e

        with refinekit.job(budget=Budget(max_tokens=100)) as job, ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(contextvars.copy_context().run, one) for _ in range(12)]
            results = [f.result() for f in futures]
    sent = len(server.requests_for("m"))
    assert sent == job.usage.model_calls == 3
    assert job.usage.total_tokens <= 100
    assert sum(isinstance(r, BudgetExceeded) for r in results) == 9
