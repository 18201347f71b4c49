"""Budgets per job (`refinekit.Budget`), prices (`refinekit.Prices`) and `BudgetExceeded`.

Model traffic goes over HTTP to the scripted server; every test that takes `kind` runs on the
sync and on the async side.
"""

from __future__ import annotations

import asyncio
import contextvars
import pickle
import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from helpers import acall

import refinekit
from refinekit import Budget, BudgetExceeded, Cost, MissingPrice, Prices, Usage
from refinekit.judges import JudgeModel, relevancy
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

SECRET = "sk-budget-secret-0123456789"


def answer_reply(prompt: int = 20, completion: int = 10) -> Reply:
    return Reply.text("Paris is in France.", prompt_tokens=prompt, completion_tokens=completion)


def judge_no() -> Reply:
    return Reply.text("No.", prompt_tokens=50, completion_tokens=1)


class Setup:
    """A client of the kind's side, a function asking the `answer` model, a `judge` judge."""

    def __init__(self, kind: str, client: Any) -> None:
        self.kind = kind
        self.client = client
        self.judge_model = JudgeModel(client, "judge")

    def asker(self, model: str = "answer") -> Any:
        client = self.client
        if self.kind == "sync":

            def ask(question: str, feedback: str | None = None) -> Any:
                content = question if feedback is None else f"{question}\n{feedback}"
                return client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": content}]
                )

            return ask

        async def ask_async(question: str, feedback: str | None = None) -> Any:
            content = question if feedback is None else f"{question}\n{feedback}"
            return await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": content}]
            )

        return ask_async


@pytest.fixture
async def setup(kind: str, server: ScriptedOpenAI) -> AsyncIterator[Setup]:
    client: Any = (
        server.client(api_key=SECRET) if kind == "sync" else server.async_client(api_key=SECRET)
    )
    yield Setup(kind, client)
    if isinstance(client, openai.AsyncOpenAI):
        await client.close()
    else:
        client.close()


def too_short(request: refinekit.EvaluationRequest) -> refinekit.Verdict:
    return refinekit.Verdict(passed=False, feedback="too short")


# --- the runaway scenario ------------------------------------------------------------------------


async def test_runaway_judge_is_stopped_at_the_promised_call(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    """An always-failing judge with max_retries=10, max_calls=5: 3 answers, 2 judge calls."""
    server.script("answer", answer_reply(), times=None)
    server.script("judge", judge_no(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=relevancy(setup.judge_model),
        max_retries=10,
        budget=Budget(max_calls=5),
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    error = raised.value
    # answer 1, judge 1, answer 2, judge 2, answer 3: the third judge call would be the 6th
    assert len(server.requests_for("answer")) == 3
    assert len(server.requests_for("judge")) == 2
    assert error.limit == "max_calls"
    assert error.maximum == 5
    assert error.spent == 5
    assert error.needed == 1
    assert error.planned == "judge call to model 'judge'"
    assert error.usage == Usage(model_calls=3, prompt_tokens=60, completion_tokens=30)
    assert error.judge_usage == Usage(model_calls=2, prompt_tokens=100, completion_tokens=2)
    assert error.cost is None
    assert [a.number for a in error.attempts] == [1, 2]
    assert all(not a.verdict.passed for a in error.attempts)
    assert error.best is error.attempts[1]
    assert error.best.answer.choices[0].message.content == "Paris is in France."
    assert isinstance(error, refinekit.RefinekitError)
    assert "judge call to model 'judge' was not made" in str(error)


async def test_without_a_budget_the_runaway_makes_every_call(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    server.script("judge", judge_no(), times=None)
    fn = refinekit.retry_on_low_quality(evaluator=relevancy(setup.judge_model), max_retries=10)(
        setup.asker()
    )
    with pytest.raises(refinekit.LowQualityAnswer):
        await acall(fn, "Where is Paris?")
    assert len(server.requests) == 22


# --- each limit ----------------------------------------------------------------------------------


async def test_max_tokens_stops_before_an_attempt_that_does_not_fit(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    # each attempt costs 30 tokens; the next is estimated at 30 + "too short" (9 chars: 3)
    server.script("answer", answer_reply(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=too_short, max_retries=5, budget=Budget(max_tokens=70)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    assert len(server.requests_for("answer")) == 2  # 60 spent; 60 + 33 > 70
    error = raised.value
    assert (error.limit, error.spent, error.needed) == ("max_tokens", 60, 33)
    assert error.planned == "attempt 3 of " + fn.__qualname__
    assert len(error.attempts) == 2


async def test_a_call_that_goes_over_stops_the_next_step(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    # the second answer is far longer than the first: it takes the job over, and the
    # evaluator is never asked about it
    server.script("answer", [answer_reply(), answer_reply(prompt=90, completion=10)])
    judged: list[str] = []

    def judge(request: refinekit.EvaluationRequest) -> refinekit.Verdict:
        judged.append(request.answer)
        return too_short(request)

    fn = refinekit.retry_on_low_quality(
        evaluator=judge, max_retries=5, budget=Budget(max_tokens=70)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    error = raised.value
    assert (error.limit, error.spent, error.needed, error.planned) == (
        "max_tokens",
        130,
        None,
        None,
    )
    assert len(judged) == 1
    assert len(server.requests_for("answer")) == 2
    assert [a.number for a in error.attempts] == [1]
    assert "tokens 130 > max_tokens=70" in str(error)


async def test_max_cost_with_prices(setup: Setup, server: ScriptedOpenAI) -> None:
    # 20 in, 10 out at (1000, 2000) per million: 0.04 an attempt
    server.script("answer", answer_reply(), times=None)
    prices = Prices({"answer": (1000.0, 2000.0)})
    fn = refinekit.retry_on_low_quality(
        evaluator=too_short, max_retries=5, budget=Budget(max_cost=0.1, prices=prices)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    error = raised.value
    assert len(server.requests_for("answer")) == 2  # 0.08 spent; 0.08 + 0.044 > 0.1
    assert error.limit == "max_cost"
    assert error.spent == pytest.approx(0.08)
    assert error.needed == pytest.approx(0.044)
    assert error.cost is not None
    assert error.cost.answer == pytest.approx(0.08)
    assert error.cost.judge == 0


async def test_judge_calls_count_and_a_judge_call_that_does_not_fit_is_not_sent(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    server.script("judge", judge_no(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=relevancy(setup.judge_model), max_retries=3, budget=Budget(max_tokens=40)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    assert server.requests_for("judge") == []  # its prompt alone is more than 10 tokens
    assert len(server.requests_for("answer")) == 1
    assert raised.value.planned == "judge call to model 'judge'"
    assert raised.value.attempts == ()
    assert raised.value.best is None


async def test_judge_usage_counts_against_the_budget(setup: Setup, server: ScriptedOpenAI) -> None:
    # the judge's reply says it used 5000 prompt tokens: the job is over, no second attempt
    server.script("answer", answer_reply(), times=None)
    server.script("judge", Reply.text("No.", prompt_tokens=5000, completion_tokens=1))
    fn = refinekit.retry_on_low_quality(
        evaluator=relevancy(setup.judge_model), max_retries=3, budget=Budget(max_tokens=1000)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    assert len(server.requests_for("answer")) == 1
    assert raised.value.spent == 30 + 5001
    assert raised.value.judge_usage.prompt_tokens == 5000


async def test_a_job_within_its_budget_returns_the_answer(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    server.script("judge", Reply.text("Yes."))
    fn = refinekit.retry_on_low_quality(
        evaluator=relevancy(setup.judge_model),
        budget=Budget(max_calls=2, prices=Prices({"answer": (1000.0, 2000.0)}, default=(0, 0))),
    )(setup.asker())
    outcome = await acall(fn.outcome, "Where is Paris?")
    assert outcome.value.choices[0].message.content == "Paris is in France."
    assert outcome.cost == Cost(answer=pytest.approx(0.04), judge=0.0)


# --- nested decorators and jobs ------------------------------------------------------------------


async def test_nested_decorators_share_the_outer_budget(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    """An inner decorator's own, looser budget cannot give the job more calls."""
    server.script("answer", answer_reply(), times=None)
    inner = refinekit.retry_on_low_quality(
        evaluator=too_short, max_retries=1, budget=Budget(max_calls=100)
    )(setup.asker())
    if setup.kind == "sync":

        def outer_fn(question: str) -> Any:
            return inner(question)

    else:

        async def outer_fn(question: str) -> Any:  # type: ignore[misc]
            return await inner(question)

    outer = refinekit.retry_on_low_quality(
        evaluator=too_short, max_retries=5, budget=Budget(max_calls=3)
    )(outer_fn)
    with pytest.raises(BudgetExceeded) as raised:
        await acall(outer, "Where is Paris?")
    # outer attempt 1 = inner's 2 calls; outer attempt 2 would need 2 more: 4 > 3
    assert len(server.requests_for("answer")) == 2
    assert raised.value.planned == "attempt 2 of " + outer_fn.__qualname__
    assert [a.number for a in raised.value.attempts] == [1]  # the outer function's attempts


async def test_an_inner_budget_tightens_the_job(setup: Setup, server: ScriptedOpenAI) -> None:
    server.script("answer", answer_reply(), times=None)
    inner = refinekit.retry_on_low_quality(
        evaluator=too_short, max_retries=5, budget=Budget(max_calls=2)
    )(setup.asker())
    with refinekit.job(budget=Budget(max_calls=10)) as job:
        with pytest.raises(BudgetExceeded) as raised:
            await acall(inner, "Where is Paris?")
        assert len(server.requests_for("answer")) == 2
        assert raised.value.maximum == 2
        assert job.budget == Budget(max_calls=10)  # the job's own budget is unchanged
        # outside the inner call the job's budget holds again: 8 calls are left
        again = refinekit.retry_on_low_quality(evaluator=too_short, max_retries=20)(setup.asker())
        with pytest.raises(BudgetExceeded) as raised:
            await acall(again, "Where is Paris?")
        assert raised.value.maximum == 10
        assert len(server.requests_for("answer")) == 10


async def test_a_job_budget_counts_every_call_in_the_job(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    server.script("judge", Reply.text("Yes."), times=None)
    fn = refinekit.retry_on_low_quality(evaluator=relevancy(setup.judge_model))(setup.asker())
    prices = Prices({"answer": (1000.0, 2000.0), "judge": (100.0, 100.0)})
    async with refinekit.job(budget=Budget(max_calls=5, prices=prices)) as job:
        await acall(fn, "Where is Paris?")
        await acall(fn, "Where is Paris?")
        with pytest.raises(BudgetExceeded) as raised:
            await acall(fn, "Where is Paris?")
        cost = job.cost
    # 2 answers and 2 judge calls, then a third answer: over before its judge call
    assert len(server.requests_for("answer")) == 3
    assert len(server.requests_for("judge")) == 2
    assert raised.value.planned == "judge call to model 'judge'"
    assert cost is not None
    assert cost.answer == pytest.approx(0.12)
    assert cost.judge > 0
    assert raised.value.cost == cost


# --- the other decorators ------------------------------------------------------------------------


async def test_self_correct_stops_before_a_correction_that_does_not_fit(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", Reply.text("not json", prompt_tokens=20, completion_tokens=10))
    client = setup.client
    if setup.kind == "sync":

        def ask(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="answer", messages=messages)

    else:

        async def ask(messages: list[dict[str, Any]]) -> Any:  # type: ignore[misc]
            return await client.chat.completions.create(model="answer", messages=messages)

    fn = refinekit.self_correct(schema=dict, budget=Budget(max_calls=1))(ask)
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, [{"role": "user", "content": "JSON please"}])
    assert len(server.requests) == 1
    assert raised.value.planned == "correction 1 of " + ask.__qualname__
    assert raised.value.attempts == ()


async def test_reviewed_never_sends_a_revision_that_does_not_fit(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply())
    fn = refinekit.reviewed(
        judge=too_short,
        client=setup.client,
        model="reviser",
        budget=Budget(max_calls=1),
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    assert server.requests_for("reviser") == []
    assert raised.value.planned == "revision 1 of " + setup.asker().__qualname__
    assert raised.value.best is None  # a rejected draft is never handed out


async def test_guarded_never_publishes_an_unscreened_answer(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply())
    fn = refinekit.guarded(screen=relevancy(setup.judge_model), budget=Budget(max_calls=1))(
        setup.asker()
    )
    with pytest.raises(BudgetExceeded):
        await acall(fn, "Where is Paris?")
    assert server.requests_for("judge") == []


# --- what the error carries ----------------------------------------------------------------------


async def test_budget_exceeded_holds_no_secret_and_pickles(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    server.script("judge", judge_no(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=relevancy(setup.judge_model), max_retries=10, budget=Budget(max_calls=3)
    )(setup.asker())
    with pytest.raises(BudgetExceeded) as raised:
        await acall(fn, "Where is Paris?")
    error = raised.value
    assert SECRET not in str(error)
    assert SECRET not in repr(error)
    assert SECRET not in repr(vars(error))
    copy = pickle.loads(pickle.dumps(error, protocol=5))
    assert str(copy) == str(error)
    assert (copy.limit, copy.spent, copy.usage) == (error.limit, error.spent, error.usage)


async def test_events_carry_cost(
    setup: Setup, server: ScriptedOpenAI, events: list[refinekit.Event]
) -> None:
    server.script("answer", answer_reply(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=too_short,
        max_retries=1,
        budget=Budget(prices=Prices({"answer": (1000.0, 2000.0)})),
    )(setup.asker())
    with pytest.raises(refinekit.LowQualityAnswer):
        await acall(fn, "Where is Paris?")
    retry = next(e for e in events if e.kind == "retry")
    assert retry.cost == Cost(answer=pytest.approx(0.04), judge=0.0)
    exhausted = next(e for e in events if e.kind == "exhausted")
    assert exhausted.cost == Cost(answer=pytest.approx(0.08), judge=0.0)


async def test_a_model_without_a_price_stops_the_job(setup: Setup, server: ScriptedOpenAI) -> None:
    server.script("answer", answer_reply(), times=None)
    fn = refinekit.retry_on_low_quality(
        evaluator=too_short,
        max_retries=3,
        budget=Budget(max_cost=1.0, prices=Prices({"gpt-4.1-mini": (0.4, 1.6)})),
    )(setup.asker())
    with pytest.raises(MissingPrice, match=r"no price for model 'answer': add it") as raised:
        await acall(fn, "Where is Paris?")
    assert raised.value.model == "answer"
    assert len(server.requests) == 1


# --- outside the decorators ----------------------------------------------------------------------


def test_record_usage_prices_by_model() -> None:
    prices = Prices({"m": (1_000_000.0, 2_000_000.0)})
    with refinekit.job(budget=Budget(prices=prices)) as job:
        refinekit.record_usage(3, 4, model="m")
        refinekit.record_usage(1, 1, model="m", judge=True)
        assert job.cost == Cost(answer=11.0, judge=3.0)
        refinekit.record_usage(1, 1)
        with pytest.raises(MissingPrice, match=r"pass model= to refinekit\.record_usage"):
            _ = job.cost
    with pytest.raises(TypeError, match="model is a str"):
        refinekit.record_usage(1, 1, model=3)  # type: ignore[arg-type]


def test_a_job_without_prices_has_no_cost() -> None:
    with refinekit.job() as job:
        refinekit.record_usage(3, 4, model="m")
        assert job.cost is None
        assert job.budget is None


def test_prices() -> None:
    prices = Prices({"gpt-4.1-mini": (0.40, 1.60)})
    assert prices.cost("gpt-4.1-mini", 1_000_000, 1_000_000) == pytest.approx(2.0)
    # a dated snapshot is priced as its model; another model is not
    assert prices.cost("gpt-4.1-mini-2025-04-14", 1_000_000, 0) == pytest.approx(0.4)
    with pytest.raises(MissingPrice, match=re.escape("'gpt-4.1'")):
        prices.cost("gpt-4.1", 1, 1)
    with pytest.raises(MissingPrice, match=re.escape("'gpt-4.1-mini-high'")):
        prices.cost("gpt-4.1-mini-high", 1, 1)
    with_default = Prices({"a": (1.0, 1.0)}, default=(2.0, 2.0))
    assert with_default.cost("other", 1_000_000, 0) == 2.0
    assert with_default.cost(None, 0, 1_000_000) == 2.0
    assert Prices(lambda model, p, c: (p + c) / 10).cost("x", 5, 5) == 1.0
    mine = {"a": (1.0, 1.0)}
    copied = Prices(mine)
    mine["a"] = (9.0, 9.0)
    assert copied.cost("a", 1_000_000, 0) == 1.0


@pytest.mark.parametrize(
    ("prices", "kwargs", "error", "match"),
    [
        ({"m": (-0.1, 1.0)}, {}, ValueError, "input price of 'm' must be a finite number >= 0"),
        ({"m": (0.1, float("nan"))}, {}, ValueError, "output price of 'm'"),
        ({"m": 0.4}, {}, TypeError, r"price of 'm' must be a pair \(input, output\)"),
        ({"m": (0.4,)}, {}, TypeError, "must be a pair"),
        ({"m": ("0.4", 1.0)}, {}, TypeError, "must be a number"),
        ({"m": (True, 1.0)}, {}, TypeError, "must be a number"),
        ({"": (0.4, 1.0)}, {}, TypeError, "model name must be a non-empty str"),
        ({3: (0.4, 1.0)}, {}, TypeError, "model name must be a non-empty str"),
        ({"m": (0.4, 1.0)}, {"default": (-1, 0)}, ValueError, "input price of 'default'"),
        (lambda m, p, c: 0.0, {"default": (1, 1)}, TypeError, "default= is for a mapping"),
        ("gpt-4.1-mini", {}, TypeError, "Prices takes a mapping"),
    ],
)
def test_bad_prices(prices: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Prices(prices, **kwargs)


def test_a_price_callable_must_return_a_cost() -> None:
    with pytest.raises(TypeError, match="returned str for model 'x'"):
        Prices(lambda m, p, c: "1").cost("x", 1, 1)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="returned -1"):
        Prices(lambda m, p, c: -1).cost("x", 1, 1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "give at least one of max_tokens"),
        ({"max_cost": 1.0}, ValueError, "max_cost needs prices"),
        ({"max_tokens": 0}, ValueError, "max_tokens must be above 0"),
        ({"max_calls": -1}, ValueError, "max_calls must be above 0"),
        ({"max_calls": 1.5}, TypeError, "max_calls must be an int"),
        ({"max_tokens": True}, TypeError, "max_tokens must be an int"),
        ({"max_cost": float("inf"), "prices": Prices({})}, ValueError, "max_cost must be above 0"),
        ({"max_calls": 1, "prices": {"m": (1, 1)}}, TypeError, "prices must be a refinekit.Prices"),
    ],
)
def test_bad_budgets(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Budget(**kwargs)


def test_budgets_compare_hash_and_pickle_by_value() -> None:
    budget = Budget(max_cost=1.0, prices=Prices({"m": (1, 2)}, default=(3, 4)))
    same = Budget(max_cost=1.0, prices=Prices({"m": (1.0, 2.0)}, default=(3.0, 4.0)))
    assert budget == same
    assert hash(budget) == hash(same)
    assert budget != Budget(max_cost=1.0, prices=Prices({"m": (1, 2)}))
    copy = pickle.loads(pickle.dumps(budget))
    assert copy == budget
    assert copy.prices is not None
    assert copy.prices.cost("other", 1_000_000, 0) == 3.0


def test_budget_is_frozen_and_budget_options_are_checked_when_decorating() -> None:
    budget = Budget(max_calls=3)
    with pytest.raises(AttributeError):
        budget.max_calls = 4  # type: ignore[misc]
    for decorate in (
        lambda: refinekit.retry_on_low_quality(budget={"max_calls": 3}),  # type: ignore[arg-type]
        lambda: refinekit.self_correct(schema=dict, budget=3),  # type: ignore[arg-type]
        lambda: refinekit.guarded(screen=too_short, budget="1"),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"budget= must be a refinekit.Budget"):
            decorate()
    with pytest.raises(TypeError, match=r"budget= must be a refinekit.Budget"):
        refinekit.job(budget=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"number of seconds or a refinekit\.Budget, got dict"):
        refinekit.reviewed(judge=too_short, budget={"max_calls": 1})  # type: ignore[arg-type]


def test_model_of_every_reply_kind() -> None:
    from refinekit._providers.replies import model_of

    anthropic = {"type": "message", "role": "assistant", "content": [], "model": "claude-x"}
    langchain = {"type": "ai", "content": "hi", "response_metadata": {"model_name": "gpt-y"}}
    completion = {"choices": [], "model": "gpt-z"}
    assert model_of(anthropic) == "claude-x"
    assert model_of(langchain) == "gpt-y"
    assert model_of(completion) == "gpt-z"
    assert model_of({"type": "ai", "content": "hi"}) is None
    assert model_of("text") is None


async def test_a_stop_is_one_budget_event_and_a_warning(
    setup: Setup,
    server: ScriptedOpenAI,
    events: list[refinekit.Event],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script("answer", answer_reply(), times=None)
    inner = refinekit.retry_on_low_quality(evaluator=too_short, max_retries=5)(setup.asker())
    outer = refinekit.retry_on_low_quality(budget=Budget(max_calls=2))(inner)
    with caplog.at_level("WARNING", logger="refinekit"), pytest.raises(BudgetExceeded) as raised:
        await acall(outer, "Where is Paris?")
    stops = [e for e in events if e.kind == "budget"]
    assert len(stops) == 1
    assert stops[0].function == setup.asker().__qualname__  # the innermost call it left
    assert stops[0].error == str(raised.value)
    assert stops[0].usage.model_calls == 2
    assert [r.getMessage() for r in caplog.records if "budget exceeded" in r.getMessage()] == [
        f"{stops[0].function}: {raised.value}"
    ]


async def test_a_job_with_a_limit_spent_in_full_makes_no_further_call(
    setup: Setup, server: ScriptedOpenAI
) -> None:
    server.script("answer", answer_reply(), times=None)
    plain = refinekit.retry_on_low_quality()(setup.asker())
    screened = refinekit.guarded(screen=lambda request: True)(setup.asker())
    async with refinekit.job(budget=Budget(max_calls=2)):
        await acall(plain, "Where is Paris?")
        await acall(screened, "Where is Paris?")
        for fn in (plain, screened):
            with pytest.raises(BudgetExceeded) as raised:
                await acall(fn, "Where is Paris?")
            # a first call reserves one model call (it used to be estimated at none, which let
            # concurrent first calls pass max_calls)
            assert raised.value.needed == 1
            assert (raised.value.spent, raised.value.maximum) == (2, 2)
    assert len(server.requests) == 2
    assert raised.value.planned == "call of " + setup.asker().__qualname__


def test_a_budget_stop_beside_a_judge_outage_is_not_let_through_by_fail_open(
    server: ScriptedOpenAI,
) -> None:
    # two criteria asked at once: the short one is sent and the server is down (503); the long
    # one does not fit the budget. fail_open lets an outage through unjudged, never a stop.
    from refinekit.judges import Criterion, criteria

    server.script("judge", Reply.error(503), times=None)
    short = Criterion("short", "Right?")
    long = Criterion("long", "Is every one of these points covered? " + "point " * 700)
    with server.client() as client:
        judge = criteria(JudgeModel(client, "judge"), [short, long], judge_error_policy="fail_open")
        request = refinekit.EvaluationRequest(question="Where is Paris?", answer="France.")
        with refinekit.job(budget=Budget(max_tokens=600)), pytest.raises(BudgetExceeded) as stop:
            judge.evaluate(request)
    assert stop.value.limit == "max_tokens"
    assert len(server.requests_for("judge")) == 1  # the short one only; the long never sent


# --- concurrent calls sharing one budget: every call reserves its share before it is sent ---------


class Gate:
    """A scripted reply that holds each request until every caller has asked.

    Each of `expected` callers either sends its request (it arrives here) or is refused
    (`refused()`); no reply leaves before all of them have done one or the other, so no
    reply is counted before the last caller was let through or stopped. With `quiet`, the
    gate also opens when nothing arrives for that long (for callers whose refusals the test
    cannot see, as a judge's concurrent requests).
    """

    def __init__(self, expected: int, reply: Any, quiet: float | None = None) -> None:
        self.expected = expected
        self.reply = reply
        self.quiet = quiet
        self.arrived = 0
        self.refusals = 0
        self._cond = threading.Condition()

    def refused(self) -> None:
        with self._cond:
            self.refusals += 1
            self._cond.notify_all()

    def _open(self) -> bool:
        return self.arrived + self.refusals >= self.expected

    def __call__(self, request: RecordedRequest) -> Any:
        with self._cond:
            self.arrived += 1
            self._cond.notify_all()
            while not self._open():
                # 10 s only so that a broken test fails instead of hanging
                if not self._cond.wait(timeout=self.quiet or 10.0):
                    break
        return self.reply(request) if callable(self.reply) else self.reply


REQUEST = refinekit.EvaluationRequest(question="Where is Paris?", answer="In France.")


async def evaluate(kind: str, judge: Any, *args: Any) -> Any:
    """`judge.evaluate` on the sync side (`compare` for pairwise), awaited on the async one."""
    if hasattr(judge, "compare"):
        return judge.compare(*args) if kind == "sync" else await judge.acompare(*args)
    return judge.evaluate(*args) if kind == "sync" else await judge.aevaluate(*args)


async def test_12_asyncio_tasks_in_one_job_send_no_more_judge_requests_than_max_calls(
    server: ScriptedOpenAI,
) -> None:
    gate = Gate(12, Reply.text("Yes.", prompt_tokens=50, completion_tokens=1))
    server.script("judge", gate, times=None)

    async def one(judge: Any) -> Any:
        try:
            return await judge.aevaluate(REQUEST)
        except BudgetExceeded as stopped:
            gate.refused()
            return stopped

    async with server.async_client() as client:
        judge = relevancy(JudgeModel(client, "judge"))
        async with refinekit.job(budget=Budget(max_calls=3)) as job:
            results = await asyncio.gather(*(one(judge) for _ in range(12)))
    assert len(server.requests_for("judge")) == 3
    assert [r.passed for r in results if isinstance(r, refinekit.Verdict)] == [True] * 3
    stops = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(stops) == 9
    for stop in stops:
        assert (stop.limit, stop.planned, stop.needed) == (
            "max_calls",
            "judge call to model 'judge'",
            1,
        )
        assert stop.spent + stop.reserved == 3  # counted, or held by the requests in flight
    assert "held by calls in flight" in str(stops[0])
    assert job.judge_usage.model_calls == 3


def test_12_threads_sharing_one_jobs_context_send_no_more_than_max_calls(
    server: ScriptedOpenAI,
) -> None:
    gate = Gate(12, Reply.text("Yes.", prompt_tokens=50, completion_tokens=1))
    server.script("judge", gate, times=None)
    with server.client() as client:
        judge = relevancy(JudgeModel(client, "judge"))

        def one() -> Any:
            try:
                return judge.evaluate(REQUEST)
            except BudgetExceeded as stopped:
                gate.refused()
                return stopped

        with refinekit.job(budget=Budget(max_calls=3)) as job, ThreadPoolExecutor(12) as pool:
            # each thread runs in a copy of the job's context: one job, shared by 12 threads
            futures = [pool.submit(contextvars.copy_context().run, one) for _ in range(12)]
            results = [f.result() for f in futures]
    assert len(server.requests_for("judge")) == 3
    assert sum(isinstance(r, refinekit.Verdict) for r in results) == 3
    assert sum(isinstance(r, BudgetExceeded) for r in results) == 9
    assert job.judge_usage.model_calls == 3


def judge_at_its_estimate(request: RecordedRequest) -> Reply:
    """A judge reply whose prompt tokens are what refinekit estimates: characters / 4."""
    chars = sum(len(m["content"]) for m in (request.body or {})["messages"])
    return Reply.text("No.", prompt_tokens=-(-chars // 4), completion_tokens=1)


async def test_a_gather_of_decorated_calls_in_one_job_keeps_to_max_cost(
    server: ScriptedOpenAI,
) -> None:
    """12 decorated calls at once under max_cost=0.2: never over it.

    Each answer costs 0.001 (20 in, 10 out at 25 / 50 per million); a judge call costs its
    prompt at 200 per million (about 0.03), and its prompt is exactly what refinekit
    estimates. The judge never passes, so each call would spend about 0.13 unbounded. The
    first answers ramp up (one until one is measured, then at the measured cost), and every
    later call is reserved at its estimate before it is sent, so none may take the job over.
    """
    server.script("answer", answer_reply(), times=None)
    server.script("judge", judge_at_its_estimate, times=None)
    prices = Prices({"answer": (25.0, 50.0), "judge": (200.0, 0.0)})
    async with server.async_client() as client:
        setup = Setup("async", client)
        fn = refinekit.retry_on_low_quality(evaluator=relevancy(setup.judge_model), max_retries=3)(
            setup.asker()
        )
        async with refinekit.job(budget=Budget(max_cost=0.2, prices=prices)) as job:
            results = await asyncio.gather(
                *(fn("Where is Paris?") for _ in range(12)), return_exceptions=True
            )
    cost = job.cost
    assert cost is not None
    # a call that ran alone may finish its attempts (LowQualityAnswer); the rest are stopped
    assert all(isinstance(r, (BudgetExceeded, refinekit.LowQualityAnswer)) for r in results), (
        results
    )
    assert any(isinstance(r, BudgetExceeded) for r in results)
    assert cost.total <= 0.2 + 1e-9
    assert cost.total > 0.2 - 0.04  # and the budget was used, not refused early
    answers, judged = len(server.requests_for("answer")), len(server.requests_for("judge"))
    assert (answers, judged) == (job.usage.model_calls, job.judge_usage.model_calls)
    assert answers >= 12


async def test_a_criteria_judge_sends_no_more_requests_than_max_calls(
    kind: str, server: ScriptedOpenAI
) -> None:
    """8 criteria asked at once under max_calls=2: 2 are reserved and sent, 6 are not."""
    from refinekit.judges import Criterion, criteria

    # held until all 8 arrived (so none is counted before the others were asked), or 0.3 s
    # without a new one: the requests refinekit did not send never arrive
    server.script(
        "judge", Gate(8, Reply.text("Yes", {"Yes": 0.9, "No": 0.1}), quiet=0.3), times=None
    )
    client: Any = server.client() if kind == "sync" else server.async_client()
    judge = criteria(
        JudgeModel(client, "judge"), [Criterion(f"c{i}", f"Is {i} right?") for i in range(8)]
    )
    async with refinekit.job(budget=Budget(max_calls=2)) as job:
        with pytest.raises(BudgetExceeded) as stop:
            await evaluate(kind, judge, REQUEST)
    assert len(server.requests_for("judge")) == 2
    assert job.judge_usage.model_calls == 2
    assert stop.value.limit == "max_calls"
    assert stop.value.planned == "judge call to model 'judge'"
    # the two sent were the first two criteria: reserved together, in order
    sent = [str(r.body["messages"][-1]["content"]) for r in server.requests_for("judge")]  # type: ignore[index]
    assert sorted("Is 0 right?" in t or "Is 1 right?" in t for t in sent) == [True, True]
    if kind == "sync":
        client.close()
    else:
        await client.close()


async def test_a_pairwise_judge_sends_neither_order_it_cannot_afford(
    kind: str, server: ScriptedOpenAI
) -> None:
    from refinekit.judges import pairwise

    server.script("judge", Gate(2, "A", quiet=0.3), times=None)
    client: Any = server.client() if kind == "sync" else server.async_client()
    judge = pairwise(JudgeModel(client, "judge"))
    async with refinekit.job(budget=Budget(max_calls=1)):
        with pytest.raises(BudgetExceeded):
            await evaluate(kind, judge, "Where is Paris?", "France", "Spain")
    assert len(server.requests_for("judge")) == 1
    if kind == "sync":
        client.close()
    else:
        await client.close()


async def test_a_rating_judges_retries_reserve_a_call_each(
    kind: str, server: ScriptedOpenAI
) -> None:
    """instructor's retries after an invalid reply are calls: one that does not fit is not sent."""
    from refinekit.judges import rating

    server.script("judge", "not a rating", times=None)
    client: Any = server.client() if kind == "sync" else server.async_client()
    judge = rating(JudgeModel(client, "judge"), max_retries=3)
    async with refinekit.job(budget=Budget(max_calls=2)) as job:
        with pytest.raises(BudgetExceeded) as stop:
            await evaluate(kind, judge, REQUEST)
    assert len(server.requests_for("judge")) == 2  # the first and one retry; the 2nd retry not
    assert job.judge_usage.model_calls == 2
    assert stop.value.planned == "judge call to model 'judge'"
    if kind == "sync":
        client.close()
    else:
        await client.close()


async def test_a_failed_or_cancelled_call_gives_its_share_back(server: ScriptedOpenAI) -> None:
    arrived = threading.Event()

    def hang(request: RecordedRequest) -> Reply:
        arrived.set()
        return Reply.hang()

    server.script("judge", [Reply.error(503), hang, "Yes.", "Yes."])
    async with server.async_client() as client:
        judge = relevancy(JudgeModel(client, "judge"), judge_error_policy="fail_open")
        async with refinekit.job(budget=Budget(max_calls=1)) as job:
            assert (await judge.aevaluate(REQUEST)).status == "unjudged"  # 503: not a call
            task = asyncio.ensure_future(judge.aevaluate(REQUEST))
            assert await asyncio.to_thread(arrived.wait, 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # neither the outage nor the cancelled request holds the one call any more
            assert (await judge.aevaluate(REQUEST)).passed
            with pytest.raises(BudgetExceeded):
                await judge.aevaluate(REQUEST)
    assert job.judge_usage.model_calls == 1
    assert len(server.requests_for("judge")) == 3


async def test_calls_inside_an_attempt_take_their_share_from_the_attempt(
    kind: str, server: ScriptedOpenAI
) -> None:
    """An attempt's reservation covers the calls made inside it: they are not reserved twice."""
    server.script("answer", answer_reply(), times=None)
    server.script("judge", Reply.text("Yes.", prompt_tokens=5, completion_tokens=1), times=None)
    client: Any = server.client() if kind == "sync" else server.async_client()
    setup = Setup(kind, client)
    inner = refinekit.retry_on_low_quality(evaluator=relevancy(setup.judge_model))(setup.asker())
    outer = refinekit.retry_on_low_quality(evaluator=too_short, max_retries=3)(inner)
    async with refinekit.job(budget=Budget(max_calls=4)):
        with pytest.raises(BudgetExceeded) as stop:
            await acall(outer, "Where is Paris?")
    # outer attempt 1 holds one call; inner's answer takes it, its judge call one more: 2.
    # outer attempt 2 is estimated at 2 calls: 2 + 2 fit; attempt 3 does not.
    assert len(server.requests_for("answer")) == 2
    assert len(server.requests_for("judge")) == 2
    assert stop.value.planned == "attempt 3 of " + setup.asker().__qualname__
    if kind == "sync":
        client.close()
    else:
        await client.close()


async def test_first_calls_of_functions_whose_replies_carry_no_usage_all_run() -> None:
    """The ramp waits for first calls to be measured; a `str` reply measures nothing, and
    the calls go on at once (1, 2, 4, ... at a time), none of them refused."""
    running = 0
    most = 0

    @refinekit.retry_on_low_quality(evaluator=refinekit.checks.excludes("never"))
    async def answer(question: str) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return "Paris."

    async with refinekit.job(budget=Budget(max_tokens=100)) as job:
        results = await asyncio.gather(*(answer("q") for _ in range(12)))
    assert results == ["Paris."] * 12
    assert 1 < most < 12  # ramped up, not one at a time for ever
    assert job.usage == Usage()


def test_the_next_first_call_is_estimated_at_the_measured_one(server: ScriptedOpenAI) -> None:
    """Once a first call of a function has ended, the next is reserved at its usage: one that
    would not fit is not sent."""
    server.script("answer", answer_reply(20, 10), times=None)
    with server.client() as client:
        fn = refinekit.retry_on_low_quality(evaluator=refinekit.checks.excludes("never"))(
            Setup("sync", client).asker()
        )
        with refinekit.job(budget=Budget(max_tokens=50)) as job:
            fn("Where is Paris?")
            with pytest.raises(BudgetExceeded) as stopped:
                fn("Where is Paris?")
    assert len(server.requests_for("answer")) == 1
    assert job.usage.total_tokens == 30
    assert stopped.value.needed == 30
    assert stopped.value.planned is not None
    assert stopped.value.planned.startswith("attempt 1 of")
