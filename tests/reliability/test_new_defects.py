"""Defects the fault suite found beyond issue 10's list, fixed, each pinned by the behaviour
the docs promise.

- N1: `@reviewed`'s default reviser lets `json.JSONDecodeError` escape when the reviser
  endpoint answers 200 with a body that is not JSON; the docs promise
  `AnswerRejected(reason="reviser_error")` for a failed reviser call (judges map the same
  failure to `JudgeUnavailable`). Found by the fault mix: seeds 101 and 104 (job 36).
- N2: a model judge (relevancy, fact_check, criteria; rating on a non-text content) raises
  AttributeError or TypeError on a 200 JSON body that is not a chat completion (`choices` a
  string or `[null]`, a `null` message, a content that is not text); the docs promise
  `JudgeUnavailable` for "a body that is not a chat completion", or a `JudgeReplyError`.
- N3: `@self_correct` raises TypeError ("must return the model's reply ... it returned
  ChatCompletion") for a completion the client built from a body without `choices` (`{}`),
  where an empty `choices` is a correction turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faultmix import Invoice
from strategies import NO_CHOICES, ODD_CHOICES

from refinekit import (
    AnswerRejected,
    EvaluationRequest,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    judges,
    reviewed,
    self_correct,
)
from refinekit.testing import Reply, ScriptedOpenAI

REQUEST = EvaluationRequest(question="Can I get a refund?", answer="Yes, within 30 days.")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reviser_body_that_is_not_json_is_a_reviser_error(
    server: ScriptedOpenAI, mode: str
) -> None:
    server.script("answer", ["Refunds: always."])
    server.script("judge", ["No"])
    server.script("reviser", [Reply.malformed()])
    with server.client() as client:
        judge = judges.relevancy(judges.JudgeModel(client, "judge"))

        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="answer", messages=[{"role": "user", "content": question}]
            )

        async def aanswer(question: str) -> Any:
            return answer(question)

        decorate = reviewed(judge=judge, client=client, model="reviser", max_revisions=1)

        def ask() -> str:
            if mode == "sync":
                return decorate(answer)("Can I get a refund?")
            return asyncio.run(decorate(aanswer)("Can I get a refund?"))

        with pytest.raises(AnswerRejected) as caught:
            ask()
    assert caught.value.reason == "reviser_error"


def judge_of(kind: str, judge_model: judges.JudgeModel) -> Any:
    if kind == "criteria":
        return judges.criteria(judge_model, [judges.Criterion("c", "Is it supported?")])
    return {"relevancy": judges.relevancy, "fact_check": judges.fact_check}[kind](judge_model)


@pytest.mark.parametrize("body", ODD_CHOICES)
@pytest.mark.parametrize("kind", ["relevancy", "fact_check", "criteria"])
def test_a_judge_reads_a_body_that_is_not_a_completion_as_a_judge_error(
    server: ScriptedOpenAI, kind: str, body: dict[str, Any]
) -> None:
    server.script("judge", [Reply.raw(body)])
    with server.client() as client, pytest.raises((JudgeUnavailable, JudgeReplyError)):
        judge_of(kind, judges.JudgeModel(client, "judge")).evaluate(REQUEST)


def test_a_rating_judge_reads_non_text_content_as_a_judge_error(server: ScriptedOpenAI) -> None:
    server.script("judge", [Reply.raw(ODD_CHOICES[3])])
    with server.client() as client:
        rating = judges.rating(judges.JudgeModel(client, "judge"), max_retries=0)
        with pytest.raises((JudgeUnavailable, JudgeReplyError)) as caught:
            rating.evaluate(REQUEST)
    assert not isinstance(caught.value, JudgeMisconfigured)


@pytest.mark.parametrize("body", NO_CHOICES)
def test_a_completion_without_choices_is_corrected(
    server: ScriptedOpenAI, body: dict[str, Any]
) -> None:
    server.script("extract", [Reply.raw(body), '{"number": "A-1", "total_cents": 1250}'])
    with server.client() as client:

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="extract", messages=messages)  # type: ignore[arg-type]

        assert extract([{"role": "user", "content": "Extract."}]) == Invoice(
            number="A-1", total_cents=1250
        )
    assert len(server.requests_for("extract")) == 2
