"""Escalation ladders (`escalate=`) on `@self_correct` and `@retry_on_low_quality`.

The scripted server plays both tiers over real HTTP: a cheap model that fails in scripted ways
and a strong one. A model tier reaches the wire as the request's `model`; each test runs with
the `openai` client of its kind (`OpenAI` for a `def` function, `AsyncOpenAI` for an
`async def` one).
"""

from __future__ import annotations

import inspect
import logging
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
import openai
import pytest
import tenacity
from escalation_helpers import BAD, GOOD, INVOICE, RIGHT, USER, judged, models
from helpers import Invoice, acall
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

import refinekit
from refinekit import (
    Escalation,
    Event,
    LowQualityAnswer,
    ModelRefused,
    ResponseValidationError,
    Tier,
    TierReport,
    Verdict,
    retry_on_low_quality,
    self_correct,
)
from refinekit._decorators.correct import CHECK_MARKER
from refinekit.testing import Reply, ScriptedOpenAI

REFUSAL = {
    "id": "chatcmpl-refused",
    "object": "chat.completion",
    "created": 0,
    "model": "cheap",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
}
"""An OpenAI completion whose model declined: `message.refusal` set, no content."""


def extractor(kind: str, client: Any, **options: Any) -> Any:
    """`@self_correct(schema=Invoice, **options)` on a function of the kind sending `model`."""
    decorate = self_correct(schema=Invoice, **options)
    if kind == "sync":

        def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> ChatCompletion:
            return client.chat.completions.create(model=model, messages=messages)  # type: ignore[no-any-return]

        return decorate(extract)

    async def aextract(messages: list[dict[str, Any]], *, model: str = "unset") -> ChatCompletion:
        return await client.chat.completions.create(model=model, messages=messages)  # type: ignore[no-any-return]

    return decorate(aextract)


def answerer(kind: str, client: Any, **options: Any) -> Any:
    """`@retry_on_low_quality(returns="text", **options)` on a function sending `model` and the
    feedback as a second user turn (evaluator `judged` unless given)."""
    options.setdefault("evaluator", judged)
    decorate = retry_on_low_quality(returns="text", **options)

    def messages(question: str, feedback: str | None) -> list[dict[str, Any]]:
        turns = [{"role": "user", "content": question}]
        return turns + ([{"role": "user", "content": feedback}] if feedback else [])

    if kind == "sync":

        def answer(question: str, feedback: str | None = None, *, model: str = "unset") -> Any:
            return client.chat.completions.create(
                model=model, messages=messages(question, feedback)
            )

        return decorate(answer)

    async def aanswer(question: str, feedback: str | None = None, *, model: str = "unset") -> Any:
        return await client.chat.completions.create(
            model=model, messages=messages(question, feedback)
        )

    return decorate(aanswer)


async def outcome(fn: Any, *args: Any, **kwargs: Any) -> refinekit.Outcome[Any]:
    made = fn.outcome(*args, **kwargs)
    return await made if inspect.isawaitable(made) else made  # type: ignore[no-any-return]


def contents(server: ScriptedOpenAI, i: int) -> list[str]:
    """The contents of the messages of the server's `i`-th request."""
    return [str(m["content"]) for m in (server.requests[i].body or {})["messages"]]


def ends(tiers: tuple[TierReport, ...]) -> list[tuple[str, int, str, bool]]:
    return [(t.name, t.calls, t.ended, t.answered) for t in tiers]


# --- model tiers on the wire ----------------------------------------------------------------


async def test_self_correct_climbs_to_the_strong_model_when_the_cheap_ones_corrections_run_out(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"], max_corrections=1)
    result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert models(server) == ["cheap", "cheap", "strong"]
    assert result.tier == "strong"
    assert ends(result.tiers) == [("cheap", 2, "exhausted", False), ("strong", 1, "answered", True)]
    assert [(a.number, a.tier, a.verdict.passed) for a in result.attempts] == [
        (1, "cheap", False),
        (2, "cheap", False),
        (3, "strong", True),
    ]
    assert result.tiers[0].usage.model_calls == 2
    assert result.tiers[1].usage.model_calls == 1


async def test_retry_climbs_to_the_strong_model_when_the_cheap_ones_retries_run_out(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["Refunds take a year.", "Refunds take a month."])
    server.script("strong", [RIGHT])
    answer = answerer(kind, client, escalate=["cheap", "strong"], max_retries=1)
    result = await outcome(answer, "How long do refunds take?")
    assert result.value == RIGHT
    assert models(server) == ["cheap", "cheap", "strong"]
    assert result.tier == "strong"
    assert ends(result.tiers) == [("cheap", 2, "exhausted", False), ("strong", 1, "answered", True)]
    assert [(a.number, a.tier) for a in result.attempts] == [
        (1, "cheap"),
        (2, "cheap"),
        (3, "strong"),
    ]
    assert [t.usage.model_calls for t in result.tiers] == [2, 1]


async def test_a_first_tier_that_answers_is_the_only_one_called(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"])
    result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert models(server) == ["cheap"]
    assert result.tier == "cheap"
    assert ends(result.tiers) == [("cheap", 1, "answered", True)]


async def test_the_function_reads_its_tier_and_model_from_current_attempt(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    seen: list[tuple[int, str | None, str | None]] = []
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", [RIGHT])

    def note() -> None:
        info = refinekit.current_attempt()
        assert info is not None
        seen.append((info.number, info.tier, info.model))

    escalate = [Tier("cheap", max_retries=0), Tier("strong", name="big")]
    if kind == "sync":

        @retry_on_low_quality(evaluator=judged, escalate=escalate, returns="text")
        def answer(question: str, *, model: str = "unset") -> Any:
            note()
            return client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": question}]
            )

    else:

        @retry_on_low_quality(evaluator=judged, escalate=escalate, returns="text")
        async def answer(question: str, *, model: str = "unset") -> Any:
            note()
            return await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": question}]
            )

    assert await acall(answer, "q") == RIGHT
    assert seen == [(1, "cheap", "cheap"), (2, "big", "strong")]
    assert models(server) == ["cheap", "strong"]


async def test_self_corrects_attempt_says_the_tier_and_numbers_calls_across_tiers(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    seen: list[tuple[int, str | None, str | None]] = []
    server.script("cheap", [BAD])
    server.script("strong", [BAD, GOOD])

    def note() -> None:
        info = refinekit.current_attempt()
        assert info is not None
        seen.append((info.number, info.tier, info.model))

    escalate = [Tier("cheap", max_corrections=0), "strong"]
    if kind == "sync":

        @self_correct(schema=Invoice, escalate=escalate)
        def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            note()
            return client.chat.completions.create(model=model, messages=messages)

    else:

        @self_correct(schema=Invoice, escalate=escalate)
        async def extract(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            note()
            return await client.chat.completions.create(model=model, messages=messages)

    result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert [a.number for a in result.attempts] == [1, 2, 3]
    # current_attempt() numbers the calls as the outcome does, across the tiers
    assert seen == [(1, "cheap", "cheap"), (2, "strong", "strong"), (3, "strong", "strong")]


async def test_a_custom_keyword_carries_the_model_name(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [GOOD])
    escalation = Escalation([Tier("cheap", max_corrections=0), "strong"], keyword="engine")
    if kind == "sync":

        @self_correct(schema=Invoice, escalate=escalation)
        def extract(messages: list[dict[str, Any]], engine: str = "unset") -> Any:
            return client.chat.completions.create(model=engine, messages=messages)

    else:

        @self_correct(schema=Invoice, escalate=escalation)
        async def extract(messages: list[dict[str, Any]], engine: str = "unset") -> Any:
            return await client.chat.completions.create(model=engine, messages=messages)

    assert await acall(extract, USER) == INVOICE
    assert models(server) == ["cheap", "strong"]


async def test_a_model_given_positionally_is_replaced_by_the_tiers(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [GOOD])
    escalate = [Tier("cheap", max_corrections=0), "strong"]
    if kind == "sync":

        @self_correct(schema=Invoice, escalate=escalate)
        def extract(messages: list[dict[str, Any]], model: str, temperature: float) -> Any:
            return client.chat.completions.create(
                model=model, messages=messages, temperature=temperature
            )

    else:

        @self_correct(schema=Invoice, escalate=escalate)
        async def extract(messages: list[dict[str, Any]], model: str, temperature: float) -> Any:
            return await client.chat.completions.create(
                model=model, messages=messages, temperature=temperature
            )

    assert await acall(extract, USER, "callers-model", 0.5) == INVOICE
    assert models(server) == ["cheap", "strong"]
    # the other positional arguments reach every tier as given
    assert [(r.body or {})["temperature"] for r in server.requests] == [0.5, 0.5]


async def test_retry_replaces_a_positional_model_beside_a_positional_feedback(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", [RIGHT])
    escalate = Escalation([Tier("cheap", max_retries=0), "strong"], carry=True)

    def messages(question: str, feedback: str | None) -> list[dict[str, Any]]:
        return [{"role": "user", "content": question + (f"\n{feedback}" if feedback else "")}]

    if kind == "sync":

        @retry_on_low_quality(evaluator=judged, escalate=escalate, returns="text")
        def answer(question: str, feedback: str | None, model: str) -> Any:
            return client.chat.completions.create(
                model=model, messages=messages(question, feedback)
            )

    else:

        @retry_on_low_quality(evaluator=judged, escalate=escalate, returns="text")
        async def answer(question: str, feedback: str | None, model: str) -> Any:
            return await client.chat.completions.create(
                model=model, messages=messages(question, feedback)
            )

    assert await acall(answer, "q", None, "callers-model") == RIGHT
    assert models(server) == ["cheap", "strong"]
    assert contents(server, 1) == ["q\nwrong: Refunds take a year."]


# --- callable tiers -------------------------------------------------------------------------


async def test_callable_tiers_are_called_with_the_functions_arguments(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("grounded", [GOOD])
    called: list[str] = []

    if kind == "sync":

        def with_example(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            called.append(model)
            shown = [{"role": "system", "content": f"Example: {GOOD}"}, *messages]
            return client.chat.completions.create(model="grounded", messages=shown)

    else:

        async def with_example(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            called.append(model)
            shown = [{"role": "system", "content": f"Example: {GOOD}"}, *messages]
            return await client.chat.completions.create(model="grounded", messages=shown)

    escalate = [Tier("cheap", max_corrections=0), with_example]
    extract = extractor(kind, client, escalate=Escalation(escalate, carry=False))
    result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert models(server) == ["cheap", "grounded"]
    assert called == ["unset"]  # a callable tier gets the caller's arguments: no model is given
    assert contents(server, 1) == [f"Example: {GOOD}", USER[0]["content"]]
    assert result.tier == with_example.__qualname__
    assert [t.model for t in result.tiers] == ["cheap", None]


async def test_a_sync_callable_tier_serves_an_async_function(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("other-provider", [GOOD])
    with server.client() as sync_client:

        def other_provider(messages: list[dict[str, Any]], **_: Any) -> Any:
            return sync_client.chat.completions.create(model="other-provider", messages=messages)

        escalate = [Tier("cheap", max_corrections=0), Tier(call=other_provider, name="other")]
        extract = extractor(kind, client, escalate=escalate)
        result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert result.tier == "other"
    assert models(server) == ["cheap", "other-provider"]


def test_an_async_tier_on_a_sync_function_is_refused_when_decorating() -> None:
    async def strong(messages: list[dict[str, Any]]) -> str:
        return GOOD

    def extract(messages: list[dict[str, Any]], *, model: str = "m") -> str:
        return GOOD

    with pytest.raises(TypeError, match=r"tier 'test_.*strong' is async, and .*extract is not"):
        self_correct(schema=Invoice, escalate=["cheap", strong])(extract)
    with pytest.raises(TypeError, match="sync function's tiers must be sync callables"):
        retry_on_low_quality(escalate=["cheap", strong])(extract)


# --- checked when decorating ------------------------------------------------------------------


def _extract(messages: list[dict[str, Any]], *, model: str = "m") -> str:
    return GOOD


def _answer(question: str, *, model: str = "m") -> str:
    return question


@pytest.mark.parametrize(
    ("escalate", "error", "message"),
    [
        (["only"], ValueError, r"from 2 to 10 tiers .*got 1"),
        ([], ValueError, r"from 2 to 10 tiers .*got 0"),
        ([f"m{i}" for i in range(11)], ValueError, r"from 2 to 10 tiers .*got 11"),
        (["cheap", "cheap"], ValueError, r"two tiers are named 'cheap'.*give one a name="),
        ([Tier("m"), Tier("other", name="m")], ValueError, r"two tiers are named 'm'"),
        ("cheap", TypeError, r"escalate= takes a list of tiers.*got str"),
        (["cheap", 3], TypeError, r"tier 2 must be a model name, a callable or a refinekit.Tier"),
        (["cheap", Tier], TypeError, r"tier 2 must be"),
    ],
)
@pytest.mark.parametrize("decorator", ["self_correct", "retry_on_low_quality"])
def test_a_ladder_that_is_no_ladder_is_refused_when_decorating(
    decorator: str, escalate: Any, error: type[Exception], message: str
) -> None:
    fn, decorate = (
        (_extract, lambda: self_correct(schema=Invoice, escalate=escalate))
        if decorator == "self_correct"
        else (_answer, lambda: retry_on_low_quality(escalate=escalate))
    )
    with pytest.raises(error, match=message):
        decorate()(fn)


@pytest.mark.parametrize("decorator", ["self_correct", "retry_on_low_quality"])
def test_a_model_tier_needs_the_keyword_parameter(decorator: str) -> None:
    def extract(messages: list[dict[str, Any]]) -> str:
        return GOOD

    def positional_only(messages: list[dict[str, Any]], model: str, /) -> str:
        return GOOD

    def make(fn: Callable[..., Any], escalate: Any) -> Any:
        if decorator == "self_correct":
            return self_correct(schema=Invoice, escalate=escalate)(fn)
        return retry_on_low_quality(escalate=escalate)(fn)

    with pytest.raises(TypeError, match=r"must declare a keyword parameter 'model'.*model: str"):
        make(extract, ["cheap", "strong"])
    with pytest.raises(TypeError, match=r"keyword parameter 'engine'"):
        make(_extract, Escalation(["cheap", "strong"], keyword="engine"))
    with pytest.raises(TypeError, match=r"keyword parameter 'model'"):
        make(positional_only, ["cheap", "strong"])

    def takes_any(messages: list[dict[str, Any]], **options: Any) -> str:
        return GOOD

    make(takes_any, ["cheap", "strong"])  # **kwargs takes the model
    make(extract, [_extract, _answer])  # callable tiers only: no keyword needed


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Tier(), TypeError, r"give the model's name .* or a callable"),
        (lambda: Tier(""), TypeError, r"model must be a non-empty str"),
        (lambda: Tier(3), TypeError, r"model must be a non-empty str, got 3"),
        (lambda: Tier(call="f"), TypeError, r"call must be callable, got str"),
        (lambda: Tier("m", name=5), TypeError, r"name must be a str, got int"),
        (lambda: Tier("m", max_corrections=-1), ValueError, r"max_corrections must be from 0"),
        (lambda: Tier("m", max_retries=101), ValueError, r"max_retries must be from 0 to 100"),
        (lambda: Tier("m", max_retries=True), TypeError, r"max_retries must be an int or None"),
        (lambda: Tier("m", max_corrections=1.5), TypeError, r"max_corrections must be an int"),
        (lambda: Escalation(["a", "b"], keyword="not a name"), TypeError, r"keyword must be"),
        (lambda: Escalation(["a", "b"], carry="yes"), TypeError, r"carry must be True or False"),
        (lambda: Escalation(["a", "b"], on_errors=(int,)), TypeError, r"on_errors must be"),
        (lambda: Escalation(["a", "b"], on_errors=("x",)), TypeError, r"on_errors must be"),
        (lambda: Escalation(["a", "b"], start="last"), ValueError, r"start must be 'first'"),
    ],
)
def test_bad_tiers_and_ladders_say_what_to_fix(
    make: Callable[[], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make()


def test_a_tiers_budget_is_held_to_the_decorators_limit() -> None:
    with pytest.raises(ValueError, match=r"max_corrections of tier 'cheap'.*0 to 10"):
        self_correct(schema=Invoice, escalate=[Tier("cheap", max_corrections=11), "strong"])
    with pytest.raises(ValueError, match=r"max_corrections of tier 'strong'"):
        self_correct(schema=Invoice, escalate=["cheap", Tier("strong", max_corrections=50)])
    # each decorator reads its own budget; the other's is allowed (and ignored)
    self_correct(schema=Invoice, escalate=[Tier("cheap", max_retries=50), "strong"])
    retry_on_low_quality(escalate=[Tier("cheap", max_retries=100), "strong"])


def test_a_ladder_keeps_the_functions_signature_and_name() -> None:
    extract = self_correct(schema=Invoice, escalate=["cheap", "strong"])(_extract)
    answer = retry_on_low_quality(escalate=["cheap", "strong"])(_answer)
    assert inspect.signature(extract) == inspect.signature(_extract)
    assert inspect.signature(answer) == inspect.signature(_answer)
    assert extract.__name__ == "_extract"


# --- each tier's own budget, and the bound on calls --------------------------------------------


async def test_a_tier_without_corrections_moves_up_at_its_first_failure(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [BAD, GOOD])
    escalate = [Tier("cheap", max_corrections=0), "strong"]
    result = await outcome(extractor(kind, client, escalate=escalate, max_corrections=2), USER)
    assert result.value == INVOICE
    assert models(server) == ["cheap", "strong", "strong"]
    assert ends(result.tiers) == [("cheap", 1, "exhausted", False), ("strong", 2, "answered", True)]


async def test_a_tier_without_retries_moves_up_at_its_first_rejection(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", [RIGHT])
    answer = answerer(kind, client, escalate=[Tier("cheap", max_retries=0), "strong"])
    result = await outcome(answer, "q")
    assert result.value == RIGHT
    assert models(server) == ["cheap", "strong"]
    assert ends(result.tiers) == [("cheap", 1, "exhausted", False), ("strong", 1, "answered", True)]


async def test_self_correct_makes_at_most_every_tiers_budget_plus_one_calls_then_raises(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", BAD, times=None)
    server.script("mid", BAD, times=None)
    server.script("strong", "not json", times=None)
    escalate = [Tier("cheap", max_corrections=0), Tier("mid", max_corrections=1), "strong"]
    extract = extractor(kind, client, escalate=escalate, max_corrections=2)
    with pytest.raises(refinekit.CorrectionExhausted) as raised:
        await acall(extract, USER)
    # ends as without a ladder: the last tier's failure, its type and all
    assert type(raised.value) is refinekit.JsonParseError
    assert models(server) == ["cheap", "mid", "mid", "strong", "strong", "strong"]
    error = raised.value
    assert ends(error.tiers) == [
        ("cheap", 1, "exhausted", False),
        ("mid", 2, "exhausted", False),
        ("strong", 3, "exhausted", False),
    ]
    assert error.replies == [BAD, BAD, BAD, "not json", "not json", "not json"]
    assert error.raw_reply == "not json"


async def test_retry_makes_at_most_every_tiers_budget_plus_one_calls_then_raises(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", "Refunds take a year.", times=None)
    server.script("strong", "Refunds take a week.", times=None)
    answer = answerer(
        kind, client, escalate=[Tier("cheap", max_retries=0), "strong"], max_retries=1
    )
    with pytest.raises(LowQualityAnswer) as raised:
        await acall(answer, "q")
    assert models(server) == ["cheap", "strong", "strong"]
    error = raised.value
    assert ends(error.tiers) == [
        ("cheap", 1, "exhausted", False),
        ("strong", 2, "exhausted", False),
    ]
    assert [(a.number, a.tier, a.answer) for a in error.attempts] == [
        (1, "cheap", "Refunds take a year."),
        (2, "strong", "Refunds take a week."),
        (3, "strong", "Refunds take a week."),
    ]
    assert error.feedback == "wrong: Refunds take a week."


async def test_return_best_returns_the_best_attempt_of_any_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["almost right"])
    server.script("strong", ["wrong", "wrong again"])

    def scored(request: refinekit.EvaluationRequest) -> Verdict:
        good = 2 if request.answer == "almost right" else 0
        criteria = [
            refinekit.CriterionResult(name=f"c{i}", outcome="pass" if i < good else "fail")
            for i in range(3)
        ]
        return Verdict(passed=False, feedback="not yet", criteria=criteria)

    escalate = [Tier("cheap", max_retries=0), "strong"]
    answer = answerer(
        kind, client, evaluator=scored, escalate=escalate, max_retries=1, on_exhausted="return_best"
    )
    result = await outcome(answer, "q")
    assert result.value == "almost right"
    assert models(server) == ["cheap", "strong", "strong"]
    assert result.tier == "cheap"
    assert [(t.name, t.answered) for t in result.tiers] == [("cheap", True), ("strong", False)]


# --- what the next tier is told ------------------------------------------------------------


async def test_carry_sends_the_failed_replys_correction_to_the_next_tier(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [GOOD])
    escalate = Escalation([Tier("cheap", max_corrections=0), "strong"], carry=True)
    assert await acall(extractor(kind, client, escalate=escalate), USER) == INVOICE
    sent = contents(server, 1)
    assert sent[0] == USER[0]["content"]
    assert len(sent) == 2
    assert CHECK_MARKER in sent[1]
    assert "total_cents" in sent[1]
    assert server.requests[1].body["messages"][1]["role"] == "user"  # type: ignore[index]


async def test_without_carry_the_next_tier_starts_from_the_callers_messages(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [GOOD])
    escalate = Escalation([Tier("cheap", max_corrections=1), "strong"], carry=False)
    assert await acall(extractor(kind, client, escalate=escalate), USER) == INVOICE
    assert len(contents(server, 1)) == 2  # the cheap tier's own correction
    assert contents(server, 2) == [USER[0]["content"]]


@pytest.mark.parametrize("carry", [True, False])
async def test_retry_tells_the_next_tier_the_feedback_and_answer_only_with_carry(
    server: ScriptedOpenAI, client: Any, kind: str, carry: bool
) -> None:
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", [RIGHT])
    seen: list[tuple[str | None, Any]] = []

    def note(feedback: str | None) -> list[dict[str, str]]:
        info = refinekit.current_attempt()
        assert info is not None
        assert info.feedback == feedback
        seen.append((info.feedback, info.previous_answer))
        return [{"role": "user", "content": "q"}] + (
            [{"role": "user", "content": feedback}] if feedback else []
        )

    escalate = Escalation([Tier("cheap", max_retries=0), "strong"], carry=carry)
    decorate = retry_on_low_quality(evaluator=judged, escalate=escalate, returns="text")
    if kind == "sync":

        @decorate
        def answer(question: str, feedback: str | None = None, *, model: str = "unset") -> Any:
            return client.chat.completions.create(model=model, messages=note(feedback))

    else:

        @decorate
        async def answer(
            question: str, feedback: str | None = None, *, model: str = "unset"
        ) -> Any:
            return await client.chat.completions.create(model=model, messages=note(feedback))

    assert await acall(answer, "q") == RIGHT
    assert seen[0] == (None, None)
    if carry:
        assert contents(server, 1) == ["q", "wrong: Refunds take a year."]
        assert seen[1] == ("wrong: Refunds take a year.", "Refunds take a year.")
    else:
        assert contents(server, 1) == ["q"]
        assert seen[1] == (None, None)


# --- refusals move up at once ------------------------------------------------------------------


async def test_a_refusal_in_the_reply_moves_up_without_spending_a_correction(
    server: ScriptedOpenAI, client: Any, kind: str, events: list[Event]
) -> None:
    server.script("cheap", [Reply.raw(REFUSAL)])
    server.script("strong", [GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"], max_corrections=2)
    result = await outcome(extract, USER)
    assert result.value == INVOICE
    assert models(server) == ["cheap", "strong"]  # no correction sent to the refusing model
    assert ends(result.tiers) == [("cheap", 1, "refused", False), ("strong", 1, "answered", True)]
    assert contents(server, 1) == [USER[0]["content"]]  # a refusal carries nothing up
    assert result.corrections_used == 0
    escalation = [e for e in events if e.kind == "escalation"]
    assert [(e.tier, e.failure) for e in escalation] == [("strong", "refused")]
    assert "I can't help with that." in (escalation[0].error or "")


async def test_a_refusal_in_the_reply_moves_a_retry_up_without_spending_a_retry(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [Reply.raw(REFUSAL)])
    server.script("strong", [RIGHT])
    answer = answerer(kind, client, escalate=["cheap", "strong"], max_retries=2)
    result = await outcome(answer, "q")
    assert result.value == RIGHT
    assert models(server) == ["cheap", "strong"]
    assert ends(result.tiers) == [("cheap", 1, "refused", False), ("strong", 1, "answered", True)]


@pytest.mark.parametrize("decorator", ["self_correct", "retry_on_low_quality"])
async def test_model_refused_raised_by_the_function_moves_up_at_once(
    server: ScriptedOpenAI, client: Any, kind: str, decorator: str
) -> None:
    server.script("strong", [GOOD])
    tries: list[str] = []

    def tier(model: str) -> None:
        tries.append(model)
        if model == "cheap":
            raise ModelRefused("policy")

    if kind == "sync":

        def call(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            tier(model)
            return client.chat.completions.create(model=model, messages=messages)

    else:

        async def call(messages: list[dict[str, Any]], *, model: str = "unset") -> Any:
            tier(model)
            return await client.chat.completions.create(model=model, messages=messages)

    if decorator == "self_correct":
        fn = self_correct(schema=Invoice, escalate=["cheap", "strong"], max_corrections=2)(call)
    else:
        fn = retry_on_low_quality(
            evaluator=lambda r: True, escalate=["cheap", "strong"], max_retries=2
        )(call)
    result = await outcome(fn, USER)
    assert tries == ["cheap", "strong"]
    assert models(server) == ["strong"]
    assert ends(result.tiers) == [("cheap", 1, "refused", False), ("strong", 1, "answered", True)]
    assert result.tiers[0].usage.model_calls == 0


async def test_a_refusal_on_the_last_tier_raises_model_refused_with_the_tiers(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [Reply.raw({**REFUSAL, "model": "strong"})])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"])
    with pytest.raises(ModelRefused) as raised:
        await acall(extract, USER)
    assert raised.value.refusal == "I can't help with that."
    assert ends(raised.value.tiers) == [
        ("cheap", 1, "exhausted", False),
        ("strong", 1, "refused", False),
    ]


def test_without_a_ladder_model_refused_propagates() -> None:
    def refuse(question: str) -> str:
        raise ModelRefused("no")

    answer = retry_on_low_quality(evaluator=judged, max_retries=3)(refuse)
    with pytest.raises(ModelRefused, match="the model refused: no") as raised:
        answer("q")
    assert raised.value.tiers == ()


# --- transport errors (on_errors) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Reply.error(500), openai.InternalServerError),
        (Reply.disconnect(), openai.APIConnectionError),
    ],
)
@pytest.mark.parametrize("decorator", ["self_correct", "retry_on_low_quality"])
async def test_an_error_in_on_errors_moves_up(
    server: ScriptedOpenAI,
    client: Any,
    kind: str,
    decorator: str,
    fault: Reply,
    error: type[Exception],
) -> None:
    server.script("cheap", [fault])
    escalate = Escalation(["cheap", "strong"], on_errors=(error,))
    expected: Any
    if decorator == "self_correct":
        server.script("strong", [GOOD])
        fn = extractor(kind, client, escalate=escalate)
        args: tuple[Any, ...] = (USER,)
        expected = INVOICE
    else:
        server.script("strong", [RIGHT])
        fn = answerer(kind, client, escalate=escalate)
        args = ("q",)
        expected = RIGHT
    result = await outcome(fn, *args)
    assert result.value == expected
    assert models(server) == ["cheap", "strong"]
    assert ends(result.tiers) == [("cheap", 1, "error", False), ("strong", 1, "answered", True)]


@pytest.mark.parametrize("decorator", ["self_correct", "retry_on_low_quality"])
async def test_an_error_not_in_on_errors_propagates_from_the_first_tier(
    server: ScriptedOpenAI, client: Any, kind: str, decorator: str
) -> None:
    server.script("cheap", [Reply.error(500)])
    server.script("strong", [GOOD])
    escalate = Escalation(["cheap", "strong"], on_errors=(openai.APIConnectionError,))
    if decorator == "self_correct":
        fn = extractor(kind, client, escalate=escalate)
        args: tuple[Any, ...] = (USER,)
    else:
        fn = answerer(kind, client, escalate=escalate)
        args = ("q",)
    with pytest.raises(openai.InternalServerError):
        await acall(fn, *args)
    assert models(server) == ["cheap"]


async def test_an_error_in_on_errors_on_the_last_tier_propagates(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [Reply.error(503)])
    server.script("strong", [Reply.error(500)])
    escalate = Escalation(["cheap", "strong"], on_errors=(openai.APIStatusError,))
    with pytest.raises(openai.InternalServerError):
        await acall(extractor(kind, client, escalate=escalate), USER)
    assert models(server) == ["cheap", "strong"]


# --- events and logs ---------------------------------------------------------------------------


async def test_an_escalation_event_and_log_line_say_where_and_why(
    server: ScriptedOpenAI,
    client: Any,
    kind: str,
    events: list[Event],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [GOOD])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"])
    with caplog.at_level(logging.INFO, logger="refinekit"):
        assert await acall(extract, USER) == INVOICE
    escalation = [e for e in events if e.kind == "escalation"]
    assert len(escalation) == 1
    event = escalation[0]
    assert (event.decorator, event.tier, event.failure) == ("self_correct", "strong", "exhausted")
    assert (event.attempt, event.max_attempts) == (2, 2)
    assert "total_cents" in (event.error or "")
    assert event.function.endswith("extract")
    lines = [r.getMessage() for r in caplog.records if "escalating" in r.getMessage()]
    assert len(lines) == 1
    assert "escalating to tier 2/2 'strong' (exhausted)" in lines[0]
    assert [r.levelno for r in caplog.records if "escalating" in r.getMessage()] == [logging.INFO]


async def test_retry_events_number_attempts_within_the_ladders_bound(
    server: ScriptedOpenAI, client: Any, kind: str, events: list[Event]
) -> None:
    server.script("cheap", ["a", "b"])
    server.script("strong", ["c", RIGHT])
    answer = answerer(kind, client, escalate=["cheap", "strong"], max_retries=1)
    assert await acall(answer, "q") == RIGHT
    mine = [e for e in events if e.decorator == "retry_on_low_quality" and e.kind != "escalation"]
    assert {e.max_attempts for e in mine} == {4}  # the most calls the ladder can make
    assert [e.attempt for e in mine if e.kind == "retry"] == [1, 3]
    assert all(e.attempt <= e.max_attempts for e in mine)


async def test_self_correct_events_number_calls_and_corrections_per_tier(
    server: ScriptedOpenAI, client: Any, kind: str, events: list[Event]
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [BAD, GOOD])
    extract = extractor(kind, client, escalate=["cheap", "strong"], max_corrections=1)
    assert await acall(extract, USER) == INVOICE
    attempts = [(e.attempt, e.max_attempts) for e in events if e.kind == "attempt"]
    assert [a for a, _ in attempts] == [1, 2, 3, 4]
    assert all(a <= most <= 4 for a, most in attempts)
    # each tier's corrections are counted against its own budget: "1 of 1" at each tier
    corrections = [(e.attempt, e.max_attempts) for e in events if e.kind == "correction"]
    assert corrections == [(1, 1), (1, 1)]


# --- what each tier cost -------------------------------------------------------------------


async def test_outcome_prices_each_tier_as_its_model(
    server: ScriptedOpenAI, client: Any, kind: str, events: list[Event]
) -> None:
    server.script("cheap", [Reply.text(BAD, prompt_tokens=100, completion_tokens=10)])
    server.script("strong", [Reply.text(GOOD, prompt_tokens=300, completion_tokens=20)])
    prices = refinekit.Prices({"cheap": (1.0, 2.0), "strong": (10.0, 30.0)})
    extract = extractor(
        kind,
        client,
        escalate=[Tier("cheap", max_corrections=0), "strong"],
        budget=refinekit.Budget(prices=prices),
    )
    result = await outcome(extract, USER)
    cheap, strong = result.tiers
    assert cheap.usage == refinekit.Usage(1, 100, 10)
    assert strong.usage == refinekit.Usage(1, 300, 20)
    assert cheap.cost is not None
    assert strong.cost is not None
    assert cheap.cost.answer == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
    assert strong.cost.answer == pytest.approx((300 * 10.0 + 20 * 30.0) / 1e6)
    assert result.cost is not None
    assert result.cost.total == pytest.approx(cheap.cost.total + strong.cost.total)
    assert result.usage == refinekit.Usage(2, 400, 30)
    # the escalation event says what the job had spent when it left the cheap tier
    (moved,) = [e for e in events if e.kind == "escalation"]
    assert moved.usage == cheap.usage
    assert moved.cost is not None
    assert moved.cost.total == pytest.approx(cheap.cost.total)


async def test_without_prices_a_tiers_cost_is_none(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD])
    server.script("strong", [GOOD])
    extract = extractor(kind, client, escalate=[Tier("cheap", max_corrections=0), "strong"])
    result = await outcome(extract, USER)
    assert [t.cost for t in result.tiers] == [None, None]


# --- values: pickled, changed --------------------------------------------------------------------


def test_tiers_ladders_reports_and_errors_pickle() -> None:
    tier = Tier("cheap", max_corrections=0, name="small")
    assert pickle.loads(pickle.dumps(tier)) == tier
    called = Tier(call=_extract, max_retries=1)
    back = pickle.loads(pickle.dumps(called))
    assert (back.call, back.name, back.max_retries) == (_extract, called.name, 1)
    ladder = Escalation([tier, "strong"], carry=False, on_errors=(openai.APIConnectionError,))
    assert pickle.loads(pickle.dumps(ladder)) == ladder
    report = TierReport("cheap", "cheap", 2, False, "exhausted", refinekit.Usage(2, 10, 5))
    assert pickle.loads(pickle.dumps(report)) == report
    refused = ModelRefused("policy")
    refused.tiers = (report,)
    again = pickle.loads(pickle.dumps(refused))
    assert (again.refusal, again.tiers, str(again)) == ("policy", (report,), str(refused))
    unaffordable = refinekit.EscalationUnaffordable(
        "too dear", tier="strong", failure=refused, limit="max_cost", maximum=0.01, spent=0.0
    )
    unaffordable.tiers = (report,)
    copy = pickle.loads(pickle.dumps(unaffordable))
    assert (copy.tier, copy.tiers, copy.limit, str(copy)) == (
        "strong",
        (report,),
        "max_cost",
        str(unaffordable),
    )
    assert isinstance(copy.failure, ModelRefused)


@self_correct(schema=Invoice, escalate=[Tier("cheap", max_corrections=0), "strong"])
def tiered(messages: list[dict[str, Any]], *, model: str = "unset") -> str:
    return GOOD if model == "strong" else BAD


def test_an_escalating_function_pickles_by_name_and_by_value() -> None:
    assert pickle.loads(pickle.dumps(tiered)) is tiered

    def grounded(messages: list[dict[str, Any]], **_: Any) -> str:
        return GOOD

    @self_correct(schema=Invoice, escalate=[Tier("cheap", max_corrections=0), grounded])
    def local(messages: list[dict[str, Any]], *, model: str = "unset") -> str:
        return BAD

    copy = cloudpickle.loads(cloudpickle.dumps(local))
    assert copy is not local
    result = copy.outcome(USER)
    assert result.value == INVOICE
    assert [(t.name.rsplit(".", 1)[-1], t.ended) for t in result.tiers] == [
        ("cheap", "exhausted"),
        ("grounded", "answered"),
    ]


async def test_retry_with_adds_changes_and_drops_a_ladder(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", [BAD, BAD])
    server.script("strong", [GOOD])
    plain = extractor(kind, client, max_corrections=0)
    climbing = plain.retry_with(escalate=[Tier("cheap", max_corrections=0), "strong"])
    assert await acall(climbing, USER, model="cheap") == INVOICE
    assert models(server) == ["cheap", "strong"]
    with pytest.raises(ResponseValidationError):
        await acall(climbing.retry_with(escalate=None), USER, model="cheap")
    assert models(server)[-1] == "cheap"
    with pytest.raises(ValueError, match="from 2 to 10 tiers"):
        plain.retry_with(escalate=["cheap"])


async def test_stop_ends_the_current_tiers_retries_and_the_ladder_moves_up(
    server: ScriptedOpenAI, client: Any, kind: str
) -> None:
    server.script("cheap", ["Refunds take a year."])
    server.script("strong", ["Refunds take a week."])
    answer = answerer(
        kind,
        client,
        escalate=["cheap", "strong"],
        max_retries=2,
        stop=tenacity.stop_after_attempt(1),
    )
    with pytest.raises(LowQualityAnswer) as raised:
        await acall(answer, "q")
    assert models(server) == ["cheap", "strong"]
    assert ends(raised.value.tiers) == [
        ("cheap", 1, "exhausted", False),
        ("strong", 1, "exhausted", False),
    ]


def test_a_correction_builder_is_told_the_tiers_own_count_and_budget() -> None:
    seen: list[tuple[int, int]] = []

    def builder(request: refinekit.CorrectionRequest) -> str:
        seen.append((request.number, request.max_corrections))
        return "Fix it."

    replies = {"cheap": ['{"x": "a"}', '{"x": "b"}'], "strong": ['{"x": "c"}', '{"x": 4}']}

    @refinekit.self_correct(
        schema=_X,
        correction=builder,
        escalate=[Tier("cheap", max_corrections=1), Tier("strong", max_corrections=3)],
    )
    def extract(messages: list[dict[str, Any]], *, model: str = "cheap") -> str:
        return replies[model].pop(0)

    assert extract([{"role": "user", "content": "x?"}]) == _X(x=4)
    # the cheap tier's one correction (1 of 1), the turn carried up (its count: 1 of 1), then
    # the strong tier's first correction (1 of 3)
    assert seen == [(1, 1), (1, 1), (1, 3)]


class _X(BaseModel):
    x: int


def test_the_next_tier_starts_fresh_by_default() -> None:
    # the default measured better on the local model (docs/escalation.md)
    assert Escalation(["cheap", "strong"]).carry is False
