"""Async callables that are not `async def` functions take the async path everywhere.

An object whose `__call__` is `async def`, a `functools.partial` of an `async def`, and such
a callable already decorated by refinekit: each decorator must await it (and judge what it
returned, not the text of a coroutine), and an evaluator given as one must be awaited too.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import refinekit
from refinekit import (
    EvaluationRequest,
    Verdict,
    checks,
    guarded,
    retry_on_low_quality,
    reviewed,
    self_correct,
)


class Answerer:
    """An answer function as an object with an `async def __call__`."""

    def __init__(self, *answers: str) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str | None]] = []

    async def __call__(self, question: str, feedback: str | None = None) -> str:
        self.asked.append((question, feedback))
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


class Extractor:
    """A `@self_correct` function as an object with an `async def __call__`."""

    async def __call__(self, messages: list[dict[str, Any]]) -> str:
        return json.dumps({"total": 42})


async def extract(messages: list[dict[str, Any]], total: int) -> str:
    return json.dumps({"total": total})


class Invoice(BaseModel):
    total: int


async def answer_to(prefix: str, question: str, feedback: str | None = None) -> str:
    return f"{prefix}: {question}"


class Seen:
    """A rule check recording the answers it judged."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    def __call__(self, request: EvaluationRequest) -> bool:
        self.answers.append(request.answer)
        return True


ASYNC_CALLABLES: dict[str, Callable[[], Callable[..., Any]]] = {
    "async __call__": lambda: Answerer("the answer"),
    "partial": lambda: functools.partial(answer_to, "partial"),
    "decorated async __call__": lambda: guarded(screen=checks.not_empty())(Answerer("the answer")),
}


def expected(kind: str) -> str:
    return "partial: q" if kind == "partial" else "the answer"


@pytest.mark.parametrize("kind", ASYNC_CALLABLES)
async def test_retry_on_low_quality_awaits_an_async_callable(kind: str) -> None:
    seen = Seen()
    fn = retry_on_low_quality(evaluator=seen)(ASYNC_CALLABLES[kind]())
    assert inspect.iscoroutinefunction(fn)
    assert await fn("q") == expected(kind)
    assert seen.answers == [expected(kind)]  # the answer was judged, not a coroutine's repr


async def test_retry_on_low_quality_retries_an_async_callable_with_its_feedback() -> None:
    answerer = Answerer("no source", "see a.md")

    def cites_a(request: EvaluationRequest) -> Verdict:
        return Verdict(passed="a.md" in request.answer, feedback="Cite a.md.")

    fn = retry_on_low_quality(evaluator=cites_a, max_retries=1)(answerer)
    assert await fn("q") == "see a.md"
    assert answerer.asked == [("q", None), ("q", "Cite a.md.")]


@pytest.mark.parametrize("kind", ["async __call__", "partial"])
async def test_self_correct_awaits_an_async_callable(kind: str) -> None:
    model = Extractor() if kind == "async __call__" else functools.partial(extract, total=42)
    fn = self_correct(schema=Invoice)(model)
    assert inspect.iscoroutinefunction(fn)
    invoice = await fn([{"role": "user", "content": "the invoice"}])
    assert invoice.total == 42


@pytest.mark.parametrize("kind", ASYNC_CALLABLES)
@pytest.mark.parametrize("mode", ["off", "shadow", "enforce"])
async def test_reviewed_awaits_an_async_callable(kind: str, mode: Any) -> None:
    seen = Seen()
    fn = reviewed(judge=seen, mode=mode, max_revisions=0)(ASYNC_CALLABLES[kind]())
    assert inspect.iscoroutinefunction(fn)
    assert await fn("q") == expected(kind)
    assert seen.answers == ([] if mode == "off" else [expected(kind)])


@pytest.mark.parametrize("kind", ASYNC_CALLABLES)
async def test_guarded_awaits_an_async_callable(kind: str) -> None:
    seen = Seen()
    fn = guarded(screen=seen)(ASYNC_CALLABLES[kind]())
    assert inspect.iscoroutinefunction(fn)
    assert await fn("q") == expected(kind)
    assert expected(kind) in seen.answers


async def test_tool_awaits_an_async_callable() -> None:
    class Lookup:
        async def __call__(self, order: str) -> str:
            return f"order {order}: shipped"

    lookup = refinekit.tool(name="lookup")(Lookup())
    assert inspect.iscoroutinefunction(lookup)
    calls: list[Any] = []

    async def answer(question: str) -> str:
        return await lookup("A-1")

    def judge(request: EvaluationRequest) -> bool:
        calls.extend(request.tool_calls)
        return True

    assert await retry_on_low_quality(evaluator=judge)(answer)("q") == "order A-1: shipped"
    assert [(c.name, c.result) for c in calls] == [("lookup", "order A-1: shipped")]


# --- evaluators given as async callables --------------------------------------------------------


class AsyncEvaluate:
    """An evaluator whose `evaluate` is `async def` (and which has no `aevaluate`)."""

    name = "async_evaluate"

    def __init__(self) -> None:
        self.answers: list[str] = []

    async def evaluate(self, request: EvaluationRequest) -> Verdict:
        self.answers.append(request.answer)
        return Verdict(passed="a.md" in request.answer, feedback="Cite a.md.")


class AsyncCall:
    """An evaluator that is an object with an `async def __call__`."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    async def __call__(self, request: EvaluationRequest) -> bool:
        self.answers.append(request.answer)
        return "a.md" in request.answer


async def cites(source: str, request: EvaluationRequest) -> bool:
    return source in request.answer


EVALUATORS: dict[str, Callable[[], Any]] = {
    "async evaluate": AsyncEvaluate,
    "async __call__": AsyncCall,
    "partial": lambda: functools.partial(cites, "a.md"),
}


@pytest.mark.parametrize("kind", EVALUATORS)
@pytest.mark.parametrize("side", ["sync", "async"])
async def test_an_async_evaluator_is_awaited_on_either_side(kind: str, side: str) -> None:
    evaluator = EVALUATORS[kind]()
    answers = iter(["no source", "see a.md"])

    def answer(question: str) -> str:
        return next(answers)

    async def aanswer(question: str) -> str:
        return next(answers)

    fn = retry_on_low_quality(evaluator=evaluator, max_retries=1)(
        answer if side == "sync" else aanswer
    )
    result = fn("q")
    if side == "async":
        result = await result
    assert result == "see a.md"  # the first answer was rejected: the verdict was read
    if hasattr(evaluator, "answers"):
        assert evaluator.answers == ["no source", "see a.md"]


@pytest.mark.parametrize("kind", EVALUATORS)
async def test_an_async_evaluator_works_in_every_decorator_and_composite(kind: str) -> None:
    request = EvaluationRequest(question="q", answer="no source")
    evaluator = EVALUATORS[kind]()
    assert not refinekit.all_of(evaluator).evaluate(request).passed
    assert not (await refinekit.all_of(evaluator).aevaluate(request)).passed
    blocked = guarded(screen=EVALUATORS[kind](), refusal="refused")(Answerer("no source"))
    assert await blocked("q") == "refused"


def test_a_sync_function_returning_a_coroutine_is_refused_clearly() -> None:
    async def answer(question: str) -> str:
        return "the answer"

    def sync_looking(question: str) -> Any:  # an async call refinekit cannot see as such
        return answer(question)

    seen = Seen()
    fn = retry_on_low_quality(evaluator=seen)(sync_looking)
    with pytest.raises(TypeError, match=r"sync_looking returned a coroutine .* `async def`"):
        fn("q")
    assert seen.answers == []  # nothing was judged
