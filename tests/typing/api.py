"""Checked by mypy (strict) in CI: what type checkers see of refinekit's decorators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from typing_extensions import assert_type

import refinekit
from refinekit import checks, retry_on_low_quality, self_correct


class Invoice(BaseModel):
    number: str
    total_cents: int


@dataclass
class Item:
    name: str


@self_correct(schema=Invoice)
def extract(messages: list[dict[str, Any]], *, model: str = "m") -> str:
    return "{}"


@self_correct(schema=Invoice, max_corrections=1)
async def aextract(messages: list[dict[str, Any]]) -> str:
    return "{}"


@self_correct(schema=list[Item])
def items(messages: list[dict[str, Any]]) -> str:
    return "[]"


@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=2)
def answer(question: str, feedback: str | None = None) -> str:
    return question


@retry_on_low_quality(evaluator=lambda request: bool(request.answer))
async def aanswer(question: str) -> str:
    return question


async def use() -> None:
    assert_type(extract([{"role": "user", "content": "x"}]), Invoice)
    assert_type(extract([], model="other"), Invoice)
    assert_type(await aextract([]), Invoice)
    assert_type(items([]), list[Item])
    assert_type(answer("q"), str)
    assert_type(answer("q", feedback="f"), str)
    assert_type(await aanswer("q"), str)
    attempt = refinekit.current_attempt()
    if attempt is not None:
        assert_type(attempt.number, int)
    with refinekit.job() as job:
        assert_type(job.corrections_used, int)
    try:
        answer("q")
    except refinekit.LowQualityAnswer as e:
        assert_type(e.attempts, tuple[refinekit.Attempt, ...])
    except refinekit.CorrectionExhausted as e:
        assert_type(e.raw_reply, str)
    verdict = refinekit.Verdict(passed=True, score=1.0)
    assert_type(verdict.passed, bool)


extract(42)  # type: ignore[arg-type]
answer(1)  # type: ignore[arg-type]


# A function whose reply is not a model reply is refused by the type checker.
@self_correct(schema=Invoice)  # type: ignore[arg-type]
def not_a_reply(messages: list[dict[str, Any]]) -> int:
    return 1


def judges_are_evaluators() -> None:
    from openai import AsyncOpenAI, OpenAI

    from refinekit import judges

    jm = judges.JudgeModel(OpenAI(api_key="x"), "judge", temperature=0.0, seed=None)
    ajm = judges.JudgeModel(AsyncOpenAI(api_key="x"), "judge", timeout=5.0)
    grounded = judges.criteria(
        jm,
        [
            judges.Criterion("cites", lambda request: "[1]" in request.answer),
            judges.Criterion("grounded", "Is every claim supported?", when_false="Stick to it."),
        ],
        uncertain="pass",
    )

    @retry_on_low_quality(evaluator=refinekit.all_of(checks.not_empty(), grounded))
    def answer(question: str) -> str:
        return question

    assert_type(answer("q"), str)
    assert_type(judges.pairwise(ajm).compare("q", "a", "b"), judges.Winner)
    request = refinekit.EvaluationRequest(answer="a")
    assert_type(judges.relevancy(jm, strict=True).evaluate(request), refinekit.Verdict)


def guarded_reviewed_and_tools() -> None:
    from openai import OpenAI

    from refinekit import guarded, reviewed, tool

    @tool
    def lookup(order_id: str) -> dict[str, str]:
        return {"order": order_id}

    @tool(name="refund", return_direct=True)
    async def refund(order_id: str) -> str:
        return order_id

    assert_type(lookup("A1"), dict[str, str])

    @guarded(screen=checks.max_length(100), refusal="no")
    def safe(question: str) -> str:
        return question

    assert_type(safe("q"), str)

    @reviewed(judge=checks.not_empty(), client=OpenAI(api_key="x"), model="m")
    def final(question: str) -> str:
        return question

    assert_type(final("q"), str)


def retry_prompts() -> None:
    from refinekit import retry_prompt

    assert_type(retry_prompt("q"), str)
    assert_type(retry_prompt("q", rejected="a", feedback="f"), str)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    assert_type(retry_prompt(messages), list[dict[str, Any]])
    assert_type(checks.numbers_supported(), checks.Check)
    assert_type(checks.values_supported(), checks.Check)


async def outcomes_and_variants() -> None:
    outcome = answer.outcome("q")
    assert_type(outcome, refinekit.Outcome[str])
    assert_type(outcome.value, str)
    assert_type(outcome.attempt_count, int)
    assert_type(outcome.attempts, tuple[refinekit.Attempt, ...])
    assert_type(outcome.usage, refinekit.Usage)
    assert_type(outcome.job_id, str)
    assert_type((await aanswer.outcome("q")).value, str)
    assert_type(extract.outcome([]).value, Invoice)
    assert_type((await aextract.outcome([])).value, Invoice)
    assert_type(answer.retry_with(max_retries=0)("q"), str)
    assert_type(await aanswer.retry_with(max_retries=0)("q"), str)
    answer.outcome(1)  # type: ignore[arg-type]


def tenacity_options() -> None:
    import logging

    import tenacity

    @retry_on_low_quality(
        stop=tenacity.stop_after_delay(10) | tenacity.stop_after_attempt(2),
        before_sleep=tenacity.before_sleep_log(logging.getLogger("app"), logging.INFO),
        after=tenacity.after_log(logging.getLogger("app"), logging.INFO),
    )
    def answer(question: str) -> str:
        return question

    assert_type(answer("q"), str)


class Service:
    """Decorated methods: a bound method is typed loosely (Any), the class's functions exactly."""

    @retry_on_low_quality()
    def answer(self, question: str) -> str:
        return question

    @self_correct(schema=Invoice)
    async def extract(self, messages: list[dict[str, Any]]) -> str:
        return "{}"


async def methods() -> None:
    service = Service()
    text: str = service.answer("q")
    invoice: Invoice = await service.extract([])
    assert text
    assert invoice


def scripted_server_replies() -> None:
    from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

    def echo(request: RecordedRequest) -> str:
        return request.path

    with ScriptedOpenAI() as server:
        assert_type(server.script("m", "once"), None)
        assert_type(server.script("m", ["a", Reply.text("b")], times=3), None)
        assert_type(server.script("n", echo, times=None), None)
        assert_type(server.reset(), None)


def tracing() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    import refinekit.otel

    assert_type(refinekit.otel.instrument(), None)
    assert_type(refinekit.otel.instrument(tracer_provider=TracerProvider()), None)
    assert_type(refinekit.otel.is_instrumented(), bool)
    assert_type(refinekit.otel.uninstrument(), None)


def sdk_replies() -> None:
    import anthropic
    from langchain_core.messages import AIMessage

    from refinekit import judges

    @self_correct(schema=Invoice)
    def from_langchain(messages: list[dict[str, Any]]) -> AIMessage:
        return AIMessage(content="{}")

    @self_correct(schema=Invoice)
    def from_anthropic(messages: list[dict[str, Any]]) -> anthropic.types.Message:
        raise NotImplementedError

    assert_type(from_langchain([]), Invoice)
    assert_type(from_anthropic([]), Invoice)
    assert_type(refinekit.record_usage(input_tokens=120, output_tokens=30), None)
    refinekit.record_usage(1, 2, calls=1, judge=True)
    jm = judges.JudgeModel(anthropic.Anthropic(api_key="x"), "claude", temperature=None)
    ajm = judges.JudgeModel(anthropic.AsyncAnthropic(api_key="x"), "claude", max_tokens=64)
    assert_type(jm.provider, Literal["openai", "anthropic"])
    request = refinekit.EvaluationRequest(answer="a")
    assert_type(judges.relevancy(ajm).evaluate(request).passed, bool)


# Budgets: a `Budget` on any decorator and on a job; the error's and the job's cost.
PRICES = refinekit.Prices({"gpt-4.1-mini": (0.40, 1.60)}, default=(1.0, 4.0))
PRICED = refinekit.Prices(lambda model, prompt, completion: (prompt + completion) / 1e6)
BUDGET = refinekit.Budget(max_calls=5, max_cost=0.05, prices=PRICES)


@retry_on_low_quality(evaluator=checks.not_empty(), budget=BUDGET)
def budgeted(question: str) -> str:
    return question


@self_correct(schema=Invoice, budget=refinekit.Budget(max_tokens=1000))
def budgeted_extract(messages: list[dict[str, Any]]) -> str:
    return "{}"


def spend() -> None:
    with refinekit.job(budget=BUDGET) as job:
        try:
            assert_type(budgeted("q"), str)
        except refinekit.BudgetExceeded as stopped:
            assert_type(stopped.cost, refinekit.Cost | None)
            assert_type(stopped.best, refinekit.Attempt | None)
            assert_type(stopped.limit, str)
        assert_type(job.cost, refinekit.Cost | None)
        assert_type(PRICED.cost("m", 1, 2), float)


# `returns="text"`: the function returns the model's reply (its usage counts), the caller a str.
async def text_answers() -> None:
    import anthropic
    from openai import AsyncOpenAI, OpenAI
    from openai.types.chat import ChatCompletion

    from refinekit import guarded

    client = OpenAI(api_key="x")
    aclient = AsyncOpenAI(api_key="x")

    @retry_on_low_quality(evaluator=checks.cites_source(), returns="text")
    def answer(question: str) -> ChatCompletion:
        return client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}]
        )

    @retry_on_low_quality(evaluator=checks.not_empty(), max_retries=1, returns="text")
    async def aanswer(question: str) -> ChatCompletion:
        return await aclient.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}]
        )

    @retry_on_low_quality(returns="text")
    def from_anthropic(question: str) -> anthropic.types.Message:
        raise NotImplementedError

    @retry_on_low_quality(evaluator=checks.not_empty(), returns="value")
    def the_reply(question: str) -> ChatCompletion:
        raise NotImplementedError

    @guarded(screen=checks.max_length(100), returns="text")
    def safe(question: str) -> ChatCompletion:
        raise NotImplementedError

    @guarded(screen=checks.max_length(100))
    def safe_reply(question: str) -> ChatCompletion:
        raise NotImplementedError

    assert_type(answer("q"), str)
    assert_type(answer.outcome("q").value, str)
    assert_type(await aanswer("q"), str)
    assert_type((await aanswer.outcome("q")).value, str)
    assert_type(from_anthropic("q"), str)
    assert_type(the_reply("q"), ChatCompletion)
    assert_type(safe("q"), str)
    assert_type(safe_reply("q"), ChatCompletion | str)
    answer(1)  # type: ignore[arg-type]


# Under returns="text", a function whose value is no model reply is refused.
@retry_on_low_quality(returns="text")  # type: ignore[arg-type]
def not_text(question: str) -> int:
    return 1


async def streamed_replies() -> None:
    """`fn.stream(...)` of a `@self_correct` function: partial values, resets, the final value."""
    from collections.abc import AsyncIterator, Iterator

    from openai import AsyncOpenAI, AsyncStream, OpenAI, Stream
    from openai.types.chat import ChatCompletionChunk

    client = OpenAI(api_key="x")
    aclient = AsyncOpenAI(api_key="x")

    @self_correct(schema=Invoice)
    def extract_streamed(messages: list[dict[str, Any]]) -> Stream[ChatCompletionChunk]:
        return client.chat.completions.create(model="m", messages=[], stream=True)

    @self_correct(schema=Invoice)
    async def aextract_streamed(
        messages: list[dict[str, Any]],
    ) -> AsyncStream[ChatCompletionChunk]:
        return await aclient.chat.completions.create(model="m", messages=[], stream=True)

    @self_correct(schema=Invoice)
    def from_text(messages: list[dict[str, Any]]) -> Iterator[str]:
        yield "{}"

    @self_correct(schema=Invoice)
    async def from_async_text(messages: list[dict[str, Any]]) -> AsyncIterator[str]:
        yield "{}"

    assert_type(extract_streamed([]), Invoice)
    assert_type(await aextract_streamed([]), Invoice)
    assert_type(from_text([]), Invoice)
    assert_type(await from_async_text([]), Invoice)
    for item in extract_streamed.stream([]):
        assert_type(item, refinekit.Partial[Any] | refinekit.Final[Invoice] | refinekit.Reset)
        if isinstance(item, refinekit.Final):
            assert_type(item.value, Invoice)
        elif isinstance(item, refinekit.Reset):
            assert_type(item.cause, refinekit.ResetCause)
    async for aitem in aextract_streamed.stream([]):
        if aitem.final:
            assert_type(aitem.value, Invoice)
    async for titem in from_async_text.stream([]):
        assert_type(titem, refinekit.Partial[Any] | refinekit.Final[Invoice] | refinekit.Reset)
    with extract.stream([]) as items:  # a whole reply streams too: its Final value
        for each in items:
            assert_type(each.final, bool)
    await aextract_streamed.stream([]).aclose()
    extract_streamed.stream(42)  # type: ignore[arg-type]


async def streamed_text_answers() -> None:
    """`fn.stream(...)` of the text decorators over a stream: text pieces, resets, tool parts."""
    from collections.abc import AsyncIterator, Iterator

    from openai import OpenAI, Stream
    from openai.types.chat import ChatCompletionChunk

    from refinekit import guarded, reviewed

    client = OpenAI(api_key="x")

    @retry_on_low_quality(evaluator=checks.excludes("guaranteed"), stream_mode="provisional")
    def answer(question: str) -> Stream[ChatCompletionChunk]:
        return client.chat.completions.create(model="m", messages=[], stream=True)

    @retry_on_low_quality(evaluator=checks.excludes("guaranteed"))
    async def aanswer(question: str) -> AsyncIterator[str]:
        yield "text"

    @reviewed(judge=lambda request: True, max_revisions=0)
    def review(question: str) -> Iterator[str]:
        yield "text"

    @guarded(screen=checks.excludes("secret"))
    def screened(question: str) -> Iterator[str]:
        yield "text"

    assert_type(answer("q"), str)
    assert_type(await aanswer("q"), str)
    assert_type(review("q"), str)
    for piece in answer.stream("q"):
        assert_type(piece, str | refinekit.Reset)
    async for apiece in aanswer.stream("q"):
        assert_type(apiece, str | refinekit.Reset)
    for part in review.stream("q"):
        assert_type(part, str | refinekit.ToolCallChunk)
    for text in screened.stream("q"):
        assert_type(text, str)
    answer.stream(42)  # type: ignore[arg-type]
