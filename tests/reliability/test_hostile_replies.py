"""Hypothesis-fuzzed hostile replies over real HTTP: whatever the model or the judge sends,
`@self_correct` gives an Invoice or a `CorrectionExhausted`, a model judge gives a verdict or
a `JudgeError`, and `@reviewed` publishes a judged answer or raises `AnswerRejected`."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from faultmix import Invoice
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from strategies import (
    any_completion_body,
    completion_bodies,
    hostile_text,
    invoice_replies,
    self_correct_bodies,
    verdict_replies,
)

import refinekit
from refinekit import (
    AnswerRejected,
    ContextDocument,
    CorrectionExhausted,
    EvaluationRequest,
    JsonParseError,
    JudgeError,
    ResponseValidationError,
    Verdict,
    judges,
    reviewed,
    self_correct,
)
from refinekit.testing import Reply, ScriptedOpenAI, set_testing

# No shrinking: each example is a few HTTP round trips, and shrinking a failure costs hundreds
# of them; the failing example is reported as drawn, and replays from its seed.
fuzz = settings(
    max_examples=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
quick = settings(fuzz, max_examples=12)
names = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI() as server, set_testing():
        yield server


def model_name(role: str) -> str:
    return f"{role}-{next(names)}"


# --- @self_correct ---------------------------------------------------------------------------


def correct(server: ScriptedOpenAI, replies: list[Reply | str], mode: str) -> tuple[Any, int]:
    model = model_name("extract")
    server.script(model, replies)
    user = [{"role": "user", "content": "Extract the invoice."}]
    if mode == "sync":
        with server.client() as client:

            @self_correct(schema=Invoice, max_corrections=2)
            def extract(messages: list[dict[str, Any]]) -> Any:
                return client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]

            try:
                value: Any = extract(user)
            except CorrectionExhausted as e:
                value = e
    else:

        async def run() -> Any:
            async with server.async_client() as client:

                @self_correct(schema=Invoice, max_corrections=2)
                async def extract(messages: list[dict[str, Any]]) -> Any:
                    return await client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]

                try:
                    return await extract(user)
                except CorrectionExhausted as e:
                    return e

        value = asyncio.run(run())
    return value, len(server.requests_for(model))


def check_corrected(value: Any, calls: int) -> None:
    if isinstance(value, CorrectionExhausted):
        assert type(value) in (JsonParseError, ResponseValidationError)
        assert calls == 3
    else:
        assert isinstance(value, Invoice)
        assert calls <= 3


as_reply = st.one_of(
    invoice_replies.map(Reply.text),
    invoice_replies.map(lambda text: Reply.tool_call("Invoice", text)),
    self_correct_bodies.map(Reply.raw),
)


@pytest.mark.reliability
@pytest.mark.parametrize("mode", ["sync", "async"])
@fuzz
@given(replies=st.lists(as_reply, min_size=3, max_size=3))
def test_self_correct_over_http_whatever_the_model_replies(
    server: ScriptedOpenAI, mode: str, replies: list[Reply]
) -> None:
    check_corrected(*correct(server, replies, mode))


@quick
@given(replies=st.lists(as_reply, min_size=3, max_size=3))
def test_self_correct_over_http_quick(server: ScriptedOpenAI, replies: list[Reply]) -> None:
    check_corrected(*correct(server, replies, "sync"))


# --- model judges ----------------------------------------------------------------------------


def judge_of(kind: str, judge_model: judges.JudgeModel) -> Any:
    if kind == "relevancy":
        return judges.relevancy(judge_model)
    if kind == "fact_check":
        return judges.fact_check(judge_model)
    if kind == "rating":
        return judges.rating(judge_model, max_retries=0)
    return judges.criteria(judge_model, [judges.Criterion("grounded", "Is it supported?")])


def judge_once(server: ScriptedOpenAI, kind: str, reply: Reply, answer: str, mode: str) -> Any:
    model = model_name(kind)
    server.script(model, [reply])
    request = EvaluationRequest(
        question="Can I get a refund?",
        answer=answer,
        context=(ContextDocument(text="Unused orders, within 30 days.", source="refunds.md"),),
    )
    try:
        if mode == "sync":
            with server.client() as client:
                return judge_of(kind, judges.JudgeModel(client, model)).evaluate(request)

        async def run() -> Verdict:
            async with server.async_client() as client:
                return await judge_of(kind, judges.JudgeModel(client, model)).aevaluate(request)

        return asyncio.run(run())
    except JudgeError as e:
        return e


judge_replies = st.one_of(verdict_replies.map(Reply.text), completion_bodies.map(Reply.raw))
answers = st.one_of(st.just("Yes, unused orders within 30 days."), hostile_text)


def check_judged(result: Any) -> None:
    assert isinstance(result, (Verdict, JudgeError)), f"{type(result).__name__}: {result}"
    if isinstance(result, Verdict):
        assert result.status == "judged"


@pytest.mark.reliability
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", ["relevancy", "fact_check", "rating", "criteria"])
@fuzz
@given(reply=judge_replies, answer=answers)
def test_a_judge_gives_a_verdict_or_a_judge_error_whatever_it_is_sent(
    server: ScriptedOpenAI, mode: str, kind: str, reply: Reply, answer: str
) -> None:
    check_judged(judge_once(server, kind, reply, answer, mode))


@quick
@given(
    kind=st.sampled_from(["relevancy", "rating", "criteria"]), reply=judge_replies, answer=answers
)
def test_a_judge_gives_a_verdict_or_a_judge_error_quick(
    server: ScriptedOpenAI, kind: str, reply: Reply, answer: str
) -> None:
    check_judged(judge_once(server, kind, reply, answer, "sync"))


# --- @reviewed -------------------------------------------------------------------------------


@pytest.mark.reliability
@fuzz
@given(
    answer=answers,
    verdicts=st.lists(verdict_replies, min_size=2, max_size=2),
    revision=st.one_of(hostile_text.map(Reply.text), any_completion_body.map(Reply.raw)),
)
def test_reviewed_publishes_a_judged_answer_or_raises_answer_rejected(
    server: ScriptedOpenAI, answer: str, verdicts: list[str], revision: Reply
) -> None:
    answering, judging, revising = model_name("answer"), model_name("judge"), model_name("reviser")
    server.script(answering, [answer])
    server.script(judging, verdicts)
    server.script(revising, [revision])
    events: list[Any] = []
    with server.client() as client:
        judge = judges.relevancy(judges.JudgeModel(client, judging))

        @reviewed(judge=judge, client=client, model=revising, max_revisions=1)
        def respond(question: str) -> Any:
            return client.chat.completions.create(
                model=answering, messages=[{"role": "user", "content": question}]
            )

        with refinekit.subscribe(events.append):
            try:
                published: Any = respond("Can I get a refund?")
            except AnswerRejected as e:
                published = e
    assert len(server.requests_for(answering)) == 1
    assert len(server.requests_for(judging)) <= 2
    assert len(server.requests_for(revising)) <= 1
    reviews = [e.verdict for e in events if e.kind == "review"]
    if isinstance(published, str):
        assert reviews[-1].passed
        assert reviews[-1].status == "judged"
    else:
        assert published.reason in ("rejected", "judge_error", "reviser_error"), published
        assert all(not v.passed for v in published.verdicts)
