"""Jobs: one correction budget per job, shared by outer retries, isolated across tasks/threads."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import call
from pydantic import BaseModel

import refinekit
from refinekit import (
    Event,
    JsonParseError,
    LowQualityAnswer,
    current_job,
    retry_on_low_quality,
    self_correct,
)
from refinekit._decorators.correct import CHECK_MARKER


class Invoice(BaseModel):
    number: str
    total_cents: int


GARBAGE = "Sorry, I cannot help with that."


def conversation(number: str = "A-1") -> list[dict[str, Any]]:
    return [{"role": "user", "content": number}]


def corrected(messages: list[dict[str, Any]]) -> bool:
    """Whether the conversation ends with a correction turn."""
    return str(messages[-1]["content"]).startswith(CHECK_MARKER)


def answer(messages: list[dict[str, Any]]) -> str:
    """Garbage on a fresh conversation; the invoice named in it right after a correction."""
    if not corrected(messages):
        return GARBAGE
    return json.dumps({"number": messages[0]["content"], "total_cents": 1})


class Model:
    """A stand-in model answering like `answer`, recording the job of every call."""

    def __init__(self, garbage_first: int = 0) -> None:
        self.garbage_first = garbage_first  # calls answered with garbage whatever they hold
        self.jobs: list[refinekit.Job | None] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.jobs.append(current_job())
        return GARBAGE if len(self.jobs) <= self.garbage_first else answer(messages)

    @property
    def calls(self) -> int:
        return len(self.jobs)


def extractor(kind: str, model: Callable[..., str], **options: Any) -> Callable[..., Any]:
    """`model` behind `@self_correct(schema=Invoice, **options)`, as a def or an async def."""
    if kind == "sync":

        def extract(messages: list[dict[str, Any]]) -> str:
            return model(messages)

    else:

        async def extract(messages: list[dict[str, Any]]) -> str:
            await asyncio.sleep(0)
            return model(messages)

    return self_correct(schema=Invoice, **options)(extract)


def test_outer_retries_share_one_correction_budget(kind: str, events: list[Event]) -> None:
    model = Model()
    extract = retry_on_low_quality(evaluator=lambda request: False, max_retries=3)(
        extractor(kind, model)
    )
    with pytest.raises(JsonParseError) as info:  # not LowQualityAnswer: it propagates at once
        call(extract, conversation())
    assert not isinstance(info.value, LowQualityAnswer)
    # attempt 1: garbage, corrected, rejected; attempt 2: the same; attempt 3: garbage and no
    # correction left, so it raises after one call. Attempt 4 never runs.
    assert model.calls == 5
    assert info.value.corrections_used == 2
    job = model.jobs[0]
    assert job is not None
    assert all(j is job for j in model.jobs)
    assert job.corrections_used == 2
    assert [e.kind for e in events].count("correction") == 2
    assert [e.attempt for e in events if e.kind == "retry"] == [1, 2]
    assert [e.decorator for e in events if e.kind == "exhausted"] == ["self_correct"]


def test_a_job_block_scopes_one_budget_across_separate_calls() -> None:
    model = Model()
    extract = extractor("sync", model)
    with refinekit.job() as job:  # e.g. a worker re-running one queue message
        assert current_job() is job
        assert extract(conversation()).number == "A-1"  # correction 1
        assert extract(conversation()).number == "A-1"  # correction 2
        with pytest.raises(JsonParseError):
            extract(conversation())  # no correction left: raises after one call
        assert model.calls == 5
        assert job.corrections_used == 2
        assert all(j is job for j in model.jobs)
    assert current_job() is None
    with refinekit.job() as fresh:
        assert fresh is not job
        assert extract(conversation()).number == "A-1"
        assert fresh.corrections_used == 1


async def test_an_async_job_block_scopes_one_budget_across_separate_calls() -> None:
    model = Model()
    extract = extractor("async", model)
    async with refinekit.job() as job:
        assert current_job() is job
        assert (await extract(conversation())).number == "A-1"
        assert (await extract(conversation())).number == "A-1"
        with pytest.raises(JsonParseError):
            await extract(conversation())
        assert model.calls == 5
        assert job.corrections_used == 2
        assert all(j is job for j in model.jobs)
    assert current_job() is None
    async with refinekit.job() as fresh:
        assert (await extract(conversation())).number == "A-1"
        assert fresh.corrections_used == 1


def test_a_job_block_inside_another_is_a_fresh_job() -> None:
    with refinekit.job() as outer:
        with refinekit.job() as inner:
            assert current_job() is inner
            assert inner is not outer
        assert current_job() is outer


def test_an_exhausted_job_does_not_affect_the_next_top_level_call(kind: str) -> None:
    model = Model(garbage_first=5)
    extract = extractor(kind, model)
    with pytest.raises(JsonParseError):
        call(extract, conversation())
    assert current_job() is None  # nothing leaks out of the failed call
    # the next call has a whole budget of its own: two more garbage replies are corrected
    assert call(extract, conversation()).number == "A-1"
    first, second = model.jobs[0], model.jobs[3]
    assert first is not None
    assert second is not None
    assert first is not second
    assert (first.corrections_used, second.corrections_used) == (2, 2)


async def test_100_concurrent_asyncio_jobs_keep_their_own_budgets() -> None:
    jobs: dict[str, list[refinekit.Job | None]] = {}
    was_corrected: list[bool] = []

    @self_correct(schema=Invoice, max_corrections=1)
    async def extract(messages: list[dict[str, Any]]) -> str:
        jobs.setdefault(messages[0]["content"], []).append(current_job())
        was_corrected.append(corrected(messages))
        await asyncio.sleep(0)  # let the other tasks run in between
        return answer(messages)

    names = [f"N{i}" for i in range(100)]
    results = await asyncio.gather(*(extract(conversation(n)) for n in names))
    assert [r.number for r in results] == names
    assert was_corrected[:100] == [False] * 100  # every job was open before any finished
    for seen in jobs.values():
        assert len(seen) == 2
        assert seen[0] is seen[1]
        assert seen[0] is not None
        assert seen[0].corrections_used == 1
    assert len({id(seen[0]) for seen in jobs.values()}) == 100
    assert current_job() is None


def test_8_threads_keep_their_own_budgets() -> None:
    barrier = threading.Barrier(8, timeout=10)
    jobs: dict[str, list[refinekit.Job | None]] = {}

    @self_correct(schema=Invoice, max_corrections=1)
    def extract(messages: list[dict[str, Any]]) -> str:
        jobs.setdefault(messages[0]["content"], []).append(current_job())
        if not corrected(messages):
            barrier.wait()  # all 8 jobs are open at the same time
        return answer(messages)

    names = [f"N{i}" for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(extract, [conversation(n) for n in names]))
    assert [r.number for r in results] == names
    for seen in jobs.values():
        assert len(seen) == 2
        assert seen[0] is seen[1]
        assert seen[0] is not None
        assert seen[0].corrections_used == 1
    assert len({id(seen[0]) for seen in jobs.values()}) == 8
