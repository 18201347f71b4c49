"""Escalation ladders under a budget, nested, streamed, traced, on methods and with the fakes.

A job's `Budget` spans every tier: a ladder stops before a tier whose first call it cannot
afford (`EscalationUnaffordable`), priced as that tier's model. The scripted server plays the
tiers over real HTTP, with the `openai` client of the test's kind.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from escalation_helpers import BAD, GOOD, INVOICE, RIGHT, USER, judged, models
from helpers import Invoice, acall
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import refinekit
import refinekit.otel
from refinekit import (
    Budget,
    Escalation,
    EscalationUnaffordable,
    Final,
    ModelRefused,
    Partial,
    Prices,
    Reset,
    ResponseValidationError,
    Tier,
    checks,
    retry_on_low_quality,
    self_correct,
)
from refinekit._core import otel_names as names
from refinekit._engine import ladder
from refinekit.testing import FakeJudge, Reply, ScriptedOpenAI

PRICES = Prices({"cheap": (1.0, 1.0), "mid": (1.0, 1.0), "strong": (1000.0, 1000.0)})
"""Per million tokens: the strong model costs a thousand times the cheap one."""


def billed(text: str) -> Reply:
    """A reply billed 100 prompt and 10 completion tokens (0.00011 on cheap, 0.11 on strong)."""
    return Reply.text(text, prompt_tokens=100, completion_tokens=10)


def extractor(kind: str, client: Any, *, stream: bool = False, **options: Any) -> Any:
    """`@self_correct(schema=Invoice, **options)` on a function of the kind sending `model`.

    A tier named "mid" refuses without calling the model (`ModelRefused`).
    """
    decorate = self_correct(schema=Invoice, **options)
    extra: dict[str, Any] = (
        {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    )
    if kind == "sync":

        def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            if model == "mid":
                raise ModelRefused("not my kind of question")
            return client.chat.completions.create(model=model, messages=messages, **extra)

        return decorate(extract)

    async def aextract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
        if model == "mid":
            raise ModelRefused("not my kind of question")
        return await client.chat.completions.create(model=model, messages=messages, **extra)

    return decorate(aextract)


def answerer(kind: str, client: Any, *, stream: bool = False, **options: Any) -> Any:
    """`@retry_on_low_quality(**options)` on a function of the kind sending `model`; it returns
    the completion (`returns="text"`), or a stream of it."""
    decorate = retry_on_low_quality(**options, **({} if stream else {"returns": "text"}))

    def messages(question: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": question}]

    if kind == "sync":

        def answer(question: str, *, model: str = "unset") -> Any:
            return client.chat.completions.create(
                model=model, messages=messages(question), stream=stream
            )

        return decorate(answer)

    async def aanswer(question: str, *, model: str = "unset") -> Any:
        return await client.chat.completions.create(
            model=model, messages=messages(question), stream=stream
        )

    return decorate(aanswer)


async def collect(kind: str, fn: Any, *args: Any) -> list[Any]:
    if kind == "sync":
        return list(fn.stream(*args))
    return [item async for item in fn.stream(*args)]


# --- a budget that stops a ladder ---------------------------------------------------------------


async def test_max_cost_stops_the_ladder_before_a_tier_it_cannot_afford(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)])
    server.script("strong", [billed(GOOD)])
    budget = Budget(max_cost=0.05, prices=PRICES)
    extract = extractor(
        kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"], budget=budget
    )
    with pytest.raises(EscalationUnaffordable) as raised:
        await acall(extract, USER)
    assert models(server) == ["cheap"]  # the strong model is never asked
    error = raised.value
    assert isinstance(error, refinekit.BudgetExceeded)
    assert error.tier == "strong"
    assert error.limit == "max_cost"
    assert isinstance(error.failure, ResponseValidationError)
    assert error.__cause__ is error.failure
    assert error.needed is not None
    assert error.needed > 0.05 - error.spent  # priced as the strong model: about 0.1
    assert "first call of tier 'strong' (model 'strong')" in str(error)
    assert "escalating from tier 'cheap'" in str(error)
    assert [(t.name, t.calls, t.ended) for t in error.tiers] == [
        ("cheap", 1, "exhausted"),
        ("strong", 0, "unaffordable"),
    ]
    assert error.tiers[0].cost is not None
    assert error.tiers[0].cost.answer == pytest.approx(110 / 1e6)


async def test_the_same_ladder_climbs_when_the_budget_covers_the_strong_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)])
    server.script("strong", [billed(GOOD)])
    budget = Budget(max_cost=1.0, prices=PRICES)
    extract = extractor(
        kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"], budget=budget
    )
    result = await extract.outcome(USER) if kind == "async" else extract.outcome(USER)
    assert result.value == INVOICE
    assert [t.cost.answer for t in result.tiers] == pytest.approx([110 / 1e6, 0.11])


async def test_max_cost_stops_a_retry_ladder_before_the_strong_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed("Refunds take a year.")])
    server.script("strong", [billed(RIGHT)])
    answer = answerer(
        kind,
        client,
        evaluator=judged,
        escalate=[Tier("cheap", max_retries=0), "strong"],
        budget=Budget(max_cost=0.05, prices=PRICES),
    )
    with pytest.raises(EscalationUnaffordable) as raised:
        await acall(answer, "q")
    assert models(server) == ["cheap"]
    error = raised.value
    assert error.tier == "strong"
    assert isinstance(error.failure, refinekit.LowQualityAnswer)
    assert error.failure.feedback == "wrong: Refunds take a year."
    assert [a.tier for a in error.attempts] == ["cheap"]  # the attempts made, as any stop has


async def test_max_calls_stops_the_ladder_when_the_cheap_tier_spent_them(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [GOOD])
    extract = extractor(
        kind,
        client,
        escalate=[Tier("cheap", max_corrections=1), "strong"],
        budget=Budget(max_calls=2),
    )
    with pytest.raises(EscalationUnaffordable) as raised:
        await acall(extract, USER)
    assert models(server) == ["cheap", "cheap"]
    assert raised.value.limit == "max_calls"
    assert raised.value.tier == "strong"


async def test_a_tier_that_refused_without_a_call_does_not_make_the_next_one_look_free(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)])
    server.script("strong", [billed(GOOD)])
    escalate = [Tier("cheap", max_corrections=0), "mid", "strong"]
    budget = Budget(max_cost=0.05, prices=PRICES)
    extract = extractor(kind, client, escalate=escalate, budget=budget)
    with pytest.raises(EscalationUnaffordable) as raised:
        await acall(extract, USER)
    # "mid" made no model call: the strong tier is estimated from the cheap one's tokens
    assert models(server) == ["cheap"]
    assert raised.value.tier == "strong"
    assert isinstance(raised.value.failure, ModelRefused)
    assert [(t.name, t.ended) for t in raised.value.tiers] == [
        ("cheap", "exhausted"),
        ("mid", "refused"),
        ("strong", "unaffordable"),
    ]


async def test_one_budget_spans_the_tiers_of_an_escalating_call(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)] * 3)
    server.script("strong", [billed(BAD), billed(BAD)])
    extract = extractor(
        kind,
        client,
        # told the correction: what it adds to the prompt counts in the estimate
        escalate=Escalation([Tier("cheap", max_corrections=2), "strong"], carry=True),
        budget=Budget(max_tokens=500),
    )
    with pytest.raises(refinekit.BudgetExceeded) as raised:
        await acall(extract, USER)
    # 3 cheap calls (330 tokens) leave too little for the strong tier's first call
    assert models(server) == ["cheap"] * 3
    assert isinstance(raised.value, EscalationUnaffordable)
    assert raised.value.limit == "max_tokens"


# --- nested: an escalating @self_correct inside @retry_on_low_quality --------------------------


async def test_per_tier_corrections_are_counted_per_job_across_outer_retries(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD, BAD])
    server.script("strong", [GOOD, '{"number": "A-2", "total_cents": 1250}'])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=1), "strong"])
    outer = FakeJudge("fail: the number is wrong", "pass")

    if kind == "sync":

        @retry_on_low_quality(evaluator=outer, max_retries=1)
        def number(question: str) -> str:
            return extract([{"role": "user", "content": question}]).number  # type: ignore[no-any-return]

    else:

        @retry_on_low_quality(evaluator=outer, max_retries=1)
        async def number(question: str) -> str:
            return (await extract([{"role": "user", "content": question}])).number  # type: ignore[no-any-return]

    assert await acall(number, "Which invoice?") == "A-2"
    # the outer retry re-runs the ladder: the cheap tier's one correction is spent already, so
    # its second run moves up at the first failure
    assert models(server) == ["cheap", "cheap", "strong", "cheap", "strong"]
    assert [r.answer for r in outer.requests] == ["A-1", "A-2"]


# --- the pytest plugin's fakes ----------------------------------------------------------------


async def test_a_fake_judge_drives_an_escalating_retry(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["Refunds take a year.", "Refunds take a month."])
    server.script("strong", [RIGHT])
    judge = FakeJudge("fail: cite the policy", "fail: still no policy", "pass")
    answer = answerer(kind, client, evaluator=judge, escalate=["cheap", "strong"], max_retries=1)
    result = await answer.outcome("q") if kind == "async" else answer.outcome("q")
    assert result.value == RIGHT
    assert judge.remaining == 0
    assert [r.answer for r in judge.requests] == [
        "Refunds take a year.",
        "Refunds take a month.",
        RIGHT,
    ]
    assert [(a.tier, a.verdict.passed) for a in result.attempts] == [
        ("cheap", False),
        ("cheap", False),
        ("strong", True),
    ]


def test_the_plugins_fake_judge_fixture_judges_each_tier(fake_judge: Any) -> None:
    judge = fake_judge("fail: too vague", "pass")
    asked: list[str] = []

    @retry_on_low_quality(evaluator=judge, escalate=[Tier("cheap", max_retries=0), "strong"])
    def answer(question: str, *, model: str = "unset") -> str:
        asked.append(model)
        return f"{model} says 30 days"

    outcome = answer.outcome("q")
    assert outcome.value == "strong says 30 days"
    assert asked == ["cheap", "strong"]
    assert outcome.tier == "strong"
    assert [r.answer for r in judge.requests] == ["cheap says 30 days", "strong says 30 days"]


# --- streams across a tier change ----------------------------------------------------------------


async def test_self_correct_stream_resets_when_it_moves_up_a_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [Reply.text(BAD, chunks=8)])
    server.script("strong", [Reply.text(GOOD, chunks=8)])
    extract = extractor(
        kind, client, stream=True, escalate=[Tier("cheap", max_corrections=0), "strong"]
    )
    items = await collect(kind, extract, USER)
    resets = [i for i in items if isinstance(i, Reset)]
    assert len(resets) == 1
    reset = resets[0]
    assert (reset.cause, reset.attempt) == ("correction", 1)
    assert "total_cents" in reset.reason
    before = items[: items.index(reset)]
    after = items[items.index(reset) + 1 :]
    assert before
    assert all(isinstance(i, Partial) and i.attempt == 1 for i in before)
    assert all(isinstance(i, Partial) and i.attempt == 2 for i in after[:-1])
    assert after[-1] == Final(INVOICE, 2)
    assert models(server) == ["cheap", "strong"]
    assert all((r.body or {}).get("stream") for r in server.requests)


async def test_a_provisional_retry_stream_resets_when_it_moves_up_a_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [Reply.text("Refunds are guaranteed.")])
    server.script("strong", [Reply.text("Within 30 days.")])
    answer = answerer(
        kind,
        client,
        stream=True,
        evaluator=checks.excludes("guaranteed"),
        escalate=[Tier("cheap", max_retries=0), "strong"],
        stream_mode="provisional",
    )
    items = await collect(kind, answer, "q")
    assert items[:3] == ["Refunds", " are", " guaranteed."]
    reset = items[3]
    assert isinstance(reset, Reset)
    assert (reset.cause, reset.attempt) == ("retry", 1)
    assert items[4:] == ["Within", " 30", " days."]
    assert models(server) == ["cheap", "strong"]


# --- OpenTelemetry: the tier on the spans -------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into an in-memory exporter; off again after the test."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    refinekit.otel.instrument(tracer_provider=provider)
    try:
        yield exported
    finally:
        refinekit.otel.uninstrument()
        provider.shutdown()


async def test_spans_say_each_attempts_tier_and_the_tier_that_answered(
    server: ScriptedOpenAI, client: Any, kind: str, exporter: InMemorySpanExporter
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"], max_corrections=1)
    assert await acall(extract, USER) == INVOICE
    spans = exporter.get_finished_spans()
    attempts = sorted(
        (s for s in spans if s.name == names.ATTEMPT_SPAN), key=lambda s: s.start_time or 0
    )
    assert [(s.attributes or {}).get(names.TIER) for s in attempts] == ["cheap", "cheap", "strong"]
    (call,) = [s for s in spans if s.name.startswith("refinekit.self_correct")]
    assert (call.attributes or {})[names.TIER] == "strong"
    moved = [dict(e.attributes or {}) for s in spans for e in s.events if "escalation" in e.name]
    assert [(e[names.TIER], e[names.FAILURE]) for e in moved] == [("strong", "exhausted")]
    # on the call's span, with what the tier left took: its two calls and their tokens
    assert [e.name for e in call.events if "escalation" in e.name] == ["refinekit.escalation"]
    (left,) = moved
    assert left[names.TIER_INDEX] == 2
    assert names.ATTEMPT_NUMBER not in left
    assert (left[names.TIER_LEFT], left[names.TIER_LEFT_CALLS]) == ("cheap", 2)
    assert left[names.TIER_LEFT_INPUT_TOKENS] > 0
    assert left[names.TIER_LEFT_OUTPUT_TOKENS] > 0


async def test_a_retry_ladders_spans_carry_the_tier(
    server: ScriptedOpenAI, client: Any, kind: str, exporter: InMemorySpanExporter
) -> None:
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", [RIGHT])
    answer = answerer(
        kind, client, evaluator=judged, escalate=[Tier("cheap", max_retries=0), "strong"]
    )
    assert await acall(answer, "q") == RIGHT
    spans = exporter.get_finished_spans()
    attempts = sorted(
        (s for s in spans if s.name == names.ATTEMPT_SPAN), key=lambda s: s.start_time or 0
    )
    assert [(s.attributes or {}).get(names.TIER) for s in attempts] == ["cheap", "strong"]
    (call,) = [s for s in spans if s.name.startswith("refinekit.retry_on_low_quality")]
    assert (call.attributes or {})[names.TIER] == "strong"


# --- methods ------------------------------------------------------------------------------------


async def test_an_async_method_takes_an_async_callable_tier() -> None:
    async def strong(messages: list[dict[str, Any]], **_: Any) -> str:
        await asyncio.sleep(0)
        return GOOD

    class Extractor:
        def __init__(self) -> None:
            self.models: list[str] = []

        @self_correct(
            schema=Invoice,
            escalate=[Tier("cheap", max_corrections=0), Tier(call=strong, name="strong")],
        )
        async def extract(self, messages: list[dict[str, Any]], *, model: str = "unset") -> str:
            self.models.append(model)
            return BAD

    extractor = Extractor()
    result = await extractor.extract.outcome(USER)
    assert result.value == INVOICE
    assert extractor.models == ["cheap"]
    assert result.tier == "strong"


def test_a_methods_model_is_passed_positionally_or_by_keyword() -> None:
    class Extractor:
        def __init__(self) -> None:
            self.models: list[str] = []

        @self_correct(schema=Invoice, escalate=[Tier("cheap", max_corrections=0), "strong"])
        def extract(self, messages: list[dict[str, Any]], model: str = "unset") -> str:
            self.models.append(model)
            return GOOD if model == "strong" else BAD

    extractor = Extractor()
    assert extractor.extract(USER, "given") == INVOICE
    assert extractor.extract(USER) == INVOICE
    assert extractor.models == ["cheap", "strong", "cheap", "strong"]
    assert not inspect.iscoroutinefunction(Extractor.extract)


async def test_a_budget_that_stops_the_last_tier_midway_raises_with_every_tiers_calls(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [BAD, GOOD])
    extract = extractor(
        kind,
        client,
        escalate=[Tier("cheap", max_corrections=0), "strong"],
        budget=Budget(max_calls=2),
    )
    with pytest.raises(refinekit.BudgetExceeded) as raised:
        await acall(extract, USER)
    assert models(server) == ["cheap", "strong"]
    error = raised.value
    assert not isinstance(error, EscalationUnaffordable)  # the strong tier was afforded
    assert error.limit == "max_calls"
    # the correction the budget refused was not made: the strong tier made one call
    assert [(t.name, t.calls, t.ended) for t in error.tiers] == [
        ("cheap", 1, "exhausted"),
        ("strong", 1, "unaffordable"),
    ]


async def test_an_error_the_last_tier_raises_propagates_as_it_is(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [Reply.error(400, "bad request")])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"])
    with pytest.raises(openai.BadRequestError, match="bad request"):
        await acall(extract, USER)
    assert models(server) == ["cheap", "strong"]


# --- the learned start ---------------------------------------------------------------------------


@pytest.fixture
def learner() -> Iterator[list[tuple[str, refinekit.Escalation]]]:
    """A learned start that skips to the second tier; it records what it was asked."""
    asked: list[tuple[str, refinekit.Escalation]] = []
    installed = list(ladder._LEARNER)

    def learn(function: str, escalation: refinekit.Escalation) -> int:
        asked.append((function, escalation))
        return 1

    ladder.set_learner(learn)
    try:
        yield asked
    finally:
        ladder._LEARNER[:] = installed


async def test_a_learned_start_skips_the_tiers_below_it(
    server: ScriptedOpenAI,
    client: Any,
    kind: str,
    learner: list[tuple[str, refinekit.Escalation]],
) -> None:
    server.script("strong", [GOOD])
    escalation = refinekit.Escalation(["cheap", "strong"], start="learned")
    extract = extractor(kind, client, escalate=escalation)
    result = await extract.outcome(USER) if kind == "async" else extract.outcome(USER)
    assert result.value == INVOICE
    assert models(server) == ["strong"]
    assert [(t.name, t.calls, t.ended, t.answered) for t in result.tiers] == [
        ("cheap", 0, "skipped", False),
        ("strong", 1, "answered", True),
    ]
    assert [(name.rsplit(".", 1)[-1], esc) for name, esc in learner] == [
        (extract.__name__, escalation)
    ]


async def test_the_first_start_never_asks_the_learner(
    server: ScriptedOpenAI,
    client: Any,
    kind: str,
    learner: list[tuple[str, refinekit.Escalation]],
) -> None:
    server.script("cheap", [GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"])
    assert await acall(extract, USER) == INVOICE
    assert models(server) == ["cheap"]
    assert learner == []


# --- more ways up, and what each tier cost ------------------------------------------------------


async def test_an_anthropic_refusal_moves_up_without_a_correction(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("cheap", [Reply.text("I can't help with that.", finish_reason="refusal")])
    server.script("strong", [GOOD])
    anthropic_client: Any = (
        server.anthropic_client() if kind == "sync" else server.async_anthropic_client()
    )
    decorate = self_correct(schema=Invoice, escalate=["cheap", "strong"], max_corrections=2)
    if kind == "sync":

        @decorate
        def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            return anthropic_client.messages.create(model=model, messages=messages, max_tokens=100)

    else:

        @decorate
        async def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            return await anthropic_client.messages.create(
                model=model, messages=messages, max_tokens=100
            )

    try:
        result = await extract.outcome(USER) if kind == "async" else extract.outcome(USER)
    finally:
        closed = anthropic_client.close()
        if inspect.isawaitable(closed):
            await closed
    assert result.value == INVOICE
    assert models(server) == ["cheap", "strong"]
    assert [(t.name, t.ended) for t in result.tiers] == [
        ("cheap", "refused"),
        ("strong", "answered"),
    ]


async def test_a_callable_tiers_model_prices_its_first_call(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)])
    server.script("strong", [billed(GOOD)])
    called: list[str] = []

    def grounded(messages: list[dict[str, Any]], **_: Any) -> str:
        called.append("grounded")
        return GOOD

    escalate = [Tier("cheap", max_corrections=0), Tier(call=grounded, model="strong")]
    budget = Budget(max_cost=0.05, prices=PRICES)
    if kind == "async":

        async def agrounded(messages: list[dict[str, Any]], **_: Any) -> str:
            return grounded(messages)

        escalate[1] = Tier(call=agrounded, model="strong", name="grounded")
    extract = extractor(kind, client, escalate=escalate, budget=budget)
    with pytest.raises(EscalationUnaffordable) as raised:
        await acall(extract, USER)
    assert called == []
    assert "(model 'strong')" in str(raised.value)
    # without the model, its first call is priced as the tier below's: affordable
    escalate[1] = Tier(call=escalate[1].call, name="grounded")
    extract = extractor(kind, client, escalate=escalate, budget=budget)
    server.script("cheap", [billed(BAD)])
    assert await acall(extract, USER) == INVOICE
    assert called == ["grounded"]


async def test_each_tiers_judge_usage_and_cost_are_its_own(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    from refinekit.judges import Criterion, JudgeModel, criteria

    server.script("cheap", [billed("Refunds take a year.")])
    server.script("strong", [billed(RIGHT)])
    server.script(
        "judge",
        [
            Reply.text("No", {"No": 0.9, "Yes": 0.1}, prompt_tokens=50, completion_tokens=1),
            Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, prompt_tokens=70, completion_tokens=1),
        ],
    )
    judge = criteria(
        JudgeModel(client, "judge"),
        [Criterion("correct", "Is the answer right?", when_false="Give the right window.")],
    )
    prices = Prices({"cheap": (1.0, 1.0), "strong": (10.0, 10.0), "judge": (2.0, 2.0)})
    answer = answerer(
        kind,
        client,
        evaluator=judge,
        escalate=[Tier("cheap", max_retries=0), "strong"],
        budget=Budget(prices=prices),
    )
    result = await answer.outcome("q") if kind == "async" else answer.outcome("q")
    assert result.value == RIGHT
    cheap, strong = result.tiers
    assert (cheap.judge_usage.model_calls, strong.judge_usage.model_calls) == (1, 1)
    assert cheap.judge_usage.prompt_tokens + strong.judge_usage.prompt_tokens == 120
    assert cheap.cost is not None
    assert strong.cost is not None
    assert cheap.cost.answer == pytest.approx(110 * 1.0 / 1e6)
    assert strong.cost.answer == pytest.approx(110 * 10.0 / 1e6)
    assert cheap.cost.judge + strong.cost.judge == pytest.approx(122 * 2.0 / 1e6)
    assert cheap.cost.judge == pytest.approx(
        (cheap.judge_usage.prompt_tokens + cheap.judge_usage.completion_tokens) * 2.0 / 1e6
    )


def test_the_plugins_fake_streams_play_both_tiers(fake_stream: Any) -> None:
    streams = iter(
        [fake_stream(BAD, chunks=6), fake_stream(GOOD, chunks=6)],
    )
    asked: list[str] = []

    @self_correct(schema=Invoice, escalate=[Tier("cheap", max_corrections=0), "strong"])
    def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
        asked.append(model)
        return next(streams)

    items = list(extract.stream(USER))
    assert asked == ["cheap", "strong"]
    resets = [i for i in items if isinstance(i, Reset)]
    assert [(r.cause, r.attempt, r.aborted) for r in resets] == [("correction", 1, True)]
    assert items[-1] == Final(INVOICE, 2)
    cheap, strong = fake_stream.made
    assert cheap.client_closed  # the failed field closed the cheap stream early
    assert strong.finished


async def test_a_streamed_anthropic_refusal_moves_up_without_a_correction(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("cheap", [Reply.text("I can't help with that.", finish_reason="refusal")])
    server.script("strong", [Reply.text(GOOD)])
    anthropic_client: Any = (
        server.anthropic_client() if kind == "sync" else server.async_anthropic_client()
    )
    decorate = self_correct(schema=Invoice, escalate=["cheap", "strong"], max_corrections=2)
    if kind == "sync":

        @decorate
        def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            return anthropic_client.messages.create(
                model=model, messages=messages, max_tokens=100, stream=True
            )

    else:

        @decorate
        async def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            return await anthropic_client.messages.create(
                model=model, messages=messages, max_tokens=100, stream=True
            )

    try:
        result = await extract.outcome(USER) if kind == "async" else extract.outcome(USER)
    finally:
        closed = anthropic_client.close()
        if inspect.isawaitable(closed):
            await closed
    assert result.value == INVOICE
    assert models(server) == ["cheap", "strong"]  # no correction sent to the refusing model
    assert [(t.name, t.ended) for t in result.tiers] == [
        ("cheap", "refused"),
        ("strong", "answered"),
    ]


def refusal_stream(model: str) -> Reply:
    """An OpenAI chat completion stream whose model declines: `delta.refusal` chunks."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0}
        return "data: " + json.dumps({**event, "model": model, "choices": [choice]}) + "\n\n"

    events = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I can't"}),
        chunk({"refusal": " help with that."}),
        chunk({}, "stop"),
    ]
    body = "".join(events) + "data: [DONE]\n\n"
    return Reply.raw(body, headers={"Content-Type": "text/event-stream"})


async def test_a_streamed_openai_refusal_moves_up_without_a_correction(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [refusal_stream("cheap")])
    server.script("strong", [Reply.text(GOOD, chunks=8)])
    extract = extractor(kind, client, stream=True, escalate=["cheap", "strong"])
    items = await collect(kind, extract, USER)
    assert items[-1] == Final(INVOICE, 2)
    assert models(server) == ["cheap", "strong"]  # no correction sent to the refusing model
    # nothing of the refusal was shown as the answer: no partial value of attempt 1
    assert not [i for i in items if isinstance(i, Partial) and i.attempt == 1]


async def test_a_streamed_openai_refusal_on_the_last_tier_raises_model_refused(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [Reply.text(BAD)])
    server.script("strong", [refusal_stream("strong")])
    escalate = [Tier("cheap", max_corrections=0), "strong"]
    extract = extractor(kind, client, stream=True, escalate=escalate)
    with pytest.raises(ModelRefused) as raised:
        await acall(extract, USER)
    assert raised.value.refusal == "I can't help with that."
    assert [(t.name, t.ended) for t in raised.value.tiers] == [
        ("cheap", "exhausted"),
        ("strong", "refused"),
    ]


@pytest.mark.parametrize("mode", ["buffered", "provisional"])
async def test_a_streamed_refusal_moves_a_retry_up_and_a_provisional_stream_resets(
    server: ScriptedOpenAI, client: Any, kind: str, mode: str
) -> None:
    server.script("cheap", [refusal_stream("cheap")])
    server.script("strong", [Reply.text(RIGHT)])
    answer = answerer(
        kind,
        client,
        stream=True,
        evaluator=judged,
        escalate=["cheap", "strong"],
        max_retries=2,
        stream_mode=mode,
    )
    items = await collect(kind, answer, "q")
    assert models(server) == ["cheap", "strong"]  # no retry sent to the refusing model
    if mode == "buffered":
        assert "".join(items) == RIGHT  # only the answer returned is shown
    else:
        assert items[:2] == ["I can't", " help with that."]
        reset = items[2]
        assert isinstance(reset, Reset)
        assert (reset.cause, reset.attempt) == ("retry", 1)
        assert "refused" in reset.reason
        assert "".join(items[3:]) == RIGHT


async def test_concurrent_calls_climb_their_own_ladders(server: ScriptedOpenAI) -> None:
    server.script("cheap", BAD, times=None)
    server.script("strong", GOOD, times=None)
    async with server.async_client() as aclient:
        extract = extractor("async", aclient, escalate=[Tier("cheap", max_corrections=1), "strong"])
        results = await asyncio.gather(*(extract.outcome(USER) for _ in range(4)))
    for result in results:
        assert result.value == INVOICE
        # each call's job counts its own corrections per tier: none borrows another's
        assert [(t.name, t.calls, t.ended) for t in result.tiers] == [
            ("cheap", 2, "exhausted"),
            ("strong", 1, "answered"),
        ]
    assert len({r.job_id for r in results}) == 4
    assert models(server).count("cheap") == 8
    assert models(server).count("strong") == 4


async def test_calls_in_one_job_share_each_tiers_corrections(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD, BAD])
    server.script("strong", [GOOD, GOOD])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=1), "strong"])
    with refinekit.job() as job:
        assert await acall(extract, USER) == INVOICE
        assert await acall(extract, USER) == INVOICE
    # the second call finds the cheap tier's one correction spent in the job: up at once
    assert models(server) == ["cheap", "cheap", "strong", "cheap", "strong"]
    assert job.corrections_used == 1


async def test_a_tier_whose_model_has_no_price_is_not_taken_as_free(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [billed(BAD)])
    server.script("strong", [billed(GOOD)])
    budget = Budget(max_cost=1.0, prices=Prices({"cheap": (1.0, 1.0)}))
    extract = extractor(
        kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"], budget=budget
    )
    with pytest.raises(refinekit.MissingPrice, match="strong"):
        await acall(extract, USER)
    assert models(server) == ["cheap"]  # priced before it is called
