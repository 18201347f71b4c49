"""Judges over Anthropic natively: a `JudgeModel` with an `anthropic` client, over real HTTP.

The scripted server answers `POST /v1/messages` as Anthropic's Messages API does: text and
`tool_use` blocks, `usage`, errors as `{"type": "error", "error": {...}}`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import refinekit
from refinekit import (
    ContextDocument,
    EvaluationRequest,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    Usage,
    Verdict,
)
from refinekit._core.errors import TimedOut
from refinekit._engine.flow import Evaluate, Timed
from refinekit.judges import Criterion, JudgeModel, criteria, pairwise, rating, relevancy
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

anthropic = pytest.importorskip("anthropic")

JUDGE = "claude-judge"
KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
REQUEST = EvaluationRequest(
    question="How long is the refund window?",
    answer="30 days.",
    context=(ContextDocument(text="Refunds are accepted within 30 days."),),
)


@pytest.fixture
async def judge_model(kind: str, server: ScriptedOpenAI) -> AsyncIterator[JudgeModel]:
    """A JudgeModel on the kind's Anthropic client (`Anthropic` or `AsyncAnthropic`)."""
    if kind == "sync":
        client: Any = server.anthropic_client(api_key=KEY)
    else:
        client = server.async_anthropic_client(api_key=KEY)
    judge_model = JudgeModel(client, JUDGE)
    try:
        yield judge_model
    finally:
        await judge_model.aclose()
        if kind == "sync":
            client.close()
        else:
            await client.close()


async def evaluate(kind: str, judge: Any, request: EvaluationRequest = REQUEST) -> Verdict:
    if kind == "sync":
        return await asyncio.to_thread(judge.evaluate, request)
    verdict: Verdict = await judge.aevaluate(request)
    return verdict


def sent(server: ScriptedOpenAI) -> list[dict[str, Any]]:
    bodies = [r.body for r in server.requests]
    assert all(r.path == "/v1/messages" for r in server.requests)
    assert all(body is not None for body in bodies)
    return [body for body in bodies if body is not None]


def content_of(request: RecordedRequest) -> str:
    body = request.body or {}
    return str(body["messages"][-1]["content"])


def by_question(replies: dict[str, str]) -> Callable[[RecordedRequest], str]:
    """A reply chosen by what the request asks (concurrent requests arrive in any order)."""
    return lambda request: next(r for q, r in replies.items() if q in content_of(request))


def prefers(answer: str) -> Callable[[RecordedRequest], str]:
    """A pairwise judge's vote for `answer`, whichever position it is shown in."""
    return lambda request: "A" if f"<answer_a>\n{answer}\n" in content_of(request) else "B"


# --- requests and replies ------------------------------------------------------------------------


async def test_a_judge_sends_a_messages_api_request_and_reads_the_text_reply(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel
) -> None:
    server.script(JUDGE, Reply.text("Yes", prompt_tokens=120, completion_tokens=1))
    async with refinekit.job() as job:
        verdict = await evaluate(kind, relevancy(judge_model))
    assert verdict.passed
    assert judge_model.provider == "anthropic"
    (body,) = sent(server)
    assert body["model"] == JUDGE
    assert body["max_tokens"] == 8  # required by the Messages API: always sent
    assert body["system"].startswith("You are an impartial evaluator")  # as system=
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert "30 days" in body["messages"][0]["content"]
    assert body["temperature"] == 0.0
    assert "seed" not in body  # Anthropic has none
    assert job.judge_usage == Usage(model_calls=1, prompt_tokens=120, completion_tokens=1)
    assert job.usage == Usage()


async def test_temperature_none_sends_none(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, "Yes")
    async with server.async_anthropic_client() as client:
        judge_model = JudgeModel(client, JUDGE, temperature=None, max_tokens=50)
        assert (await relevancy(judge_model).aevaluate(REQUEST)).passed
    (body,) = sent(server)
    assert "temperature" not in body
    assert body["max_tokens"] == 50


async def test_the_criteria_judge_reads_the_answer_with_no_token_probabilities(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel
) -> None:
    # asked concurrently: each reply by its question
    server.script(JUDGE, [by_question({"every claim": "YES", "how to ask": "No."})] * 2)
    judge = criteria(
        judge_model,
        [
            Criterion("cites", lambda request: "30" in request.answer),
            Criterion("grounded", "Is every claim supported?"),
            Criterion("complete", "Does it say how to ask?", when_false="Say how to ask."),
        ],
    )
    verdict = await evaluate(kind, judge)
    assert [(c.name, c.outcome, c.source) for c in verdict.criteria] == [
        ("cites", "pass", "code"),
        ("grounded", "pass", "answer"),
        ("complete", "fail", "answer"),
    ]
    assert verdict.feedback == "Say how to ask."
    for body in sent(server):
        assert "logprobs" not in body
        assert "top_logprobs" not in body


def test_the_criteria_judge_refuses_to_require_token_probabilities(
    server: ScriptedOpenAI,
) -> None:
    with (
        server.anthropic_client() as client,
        pytest.raises(JudgeMisconfigured, match="no token probabilities"),
    ):
        criteria(JudgeModel(client, JUDGE), [Criterion("c", "Q?")], probabilities="logprobs")


async def test_the_pairwise_judge_over_anthropic(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel
) -> None:
    # asked in both orders, concurrently: the judge prefers "complete" wherever it stands
    server.script(JUDGE, [prefers("complete")] * 2)
    judge = pairwise(judge_model)
    if kind == "sync":
        winner = await asyncio.to_thread(judge.compare, "q", "short", "complete")
    else:
        winner = await judge.acompare("q", "short", "complete")
    assert winner == "b"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("mode", "reply"),
    [
        ("JSON", Reply.text('{"rating": 2, "feedback": "It misses the 30-day limit."}')),
        ("TOOLS", Reply.tool_call("Rating", {"rating": 2, "feedback": "It misses the limit."})),
    ],
)
async def test_the_rating_judge_reads_anthropic_replies_with_instructor(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel, mode: str, reply: Reply
) -> None:
    server.script(JUDGE, reply)
    async with refinekit.job() as job:
        verdict = await evaluate(kind, rating(judge_model, mode=mode))
    assert not verdict.passed
    assert verdict.metadata["rating"] == 2
    assert verdict.feedback.startswith("It misses")
    assert job.judge_usage.model_calls == 1
    (body,) = sent(server)
    assert body["max_tokens"] == 200
    if mode == "TOOLS":
        assert body["tools"][0]["name"] == "Rating"


async def test_a_rating_that_does_not_validate_is_a_judge_reply_error(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel
) -> None:
    server.script(JUDGE, ['{"rating": 9, "feedback": "x"}', '{"rating": "high"}'])
    with pytest.raises(JudgeReplyError, match="no valid Rating after 2 tries"):
        await evaluate(kind, rating(judge_model, max_retries=1))
    assert len(server.requests) == 2


def test_the_rating_judge_refuses_json_schema_mode_over_anthropic(server: ScriptedOpenAI) -> None:
    with (
        server.anthropic_client() as client,
        pytest.raises(JudgeMisconfigured, match="mode='JSON'"),
    ):
        rating(JudgeModel(client, JUDGE), mode="JSON_SCHEMA")


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error", "status", "says"),
    [
        (Reply.error(401, f"bad x-api-key {KEY}"), JudgeMisconfigured, 401, "check the API key"),
        (Reply.error(404, "model: claude-judge"), JudgeMisconfigured, 404, "check the model name"),
        (Reply.error(400, "max_tokens: too large"), JudgeMisconfigured, 400, "too large"),
        (Reply.error(429, "rate limited"), JudgeUnavailable, 429, "rate limited"),
        (Reply.error(529, "Overloaded"), JudgeUnavailable, 529, "Overloaded"),
        (Reply.error(500, "internal"), JudgeUnavailable, 500, "internal"),
    ],
)
async def test_anthropic_errors_map_like_openais_with_the_key_redacted(
    kind: str,
    server: ScriptedOpenAI,
    judge_model: JudgeModel,
    reply: Reply,
    error: type[Exception],
    status: int,
    says: str,
) -> None:
    server.script(JUDGE, reply)
    with pytest.raises(error) as exc_info:
        await evaluate(kind, relevancy(judge_model))
    raised = exc_info.value
    assert getattr(raised, "status_code", None) == status
    assert f"HTTP {status}" in str(raised)
    assert says in str(raised)
    assert KEY not in str(raised)
    assert KEY[:20] not in repr(raised.__dict__)


async def test_the_error_body_is_anthropics_shape(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, Reply.error(429, "slow down"))
    async with server.async_anthropic_client() as client:
        with pytest.raises(anthropic.RateLimitError) as exc_info:
            await client.messages.create(model=JUDGE, max_tokens=5, messages=[])
    assert exc_info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


async def test_a_model_refusing_a_temperature_says_to_pass_none(
    kind: str, server: ScriptedOpenAI, judge_model: JudgeModel
) -> None:
    server.script(JUDGE, Reply.error(400, "temperature is deprecated for this model."))
    with pytest.raises(JudgeMisconfigured, match="pass temperature=None"):
        await evaluate(kind, relevancy(judge_model))


async def test_an_unreachable_anthropic_endpoint_is_unavailable(kind: str) -> None:
    with ScriptedOpenAI() as gone:
        base_url = gone.base_url.removesuffix("/v1")
    client: Any
    if kind == "sync":
        client = anthropic.Anthropic(base_url=base_url, api_key=KEY, max_retries=0)
    else:
        client = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, max_retries=0)
    judge_model = JudgeModel(client, JUDGE)
    with pytest.raises(JudgeUnavailable, match="could not connect"):
        await evaluate(kind, relevancy(judge_model))
    await judge_model.aclose()


# --- clients -------------------------------------------------------------------------------------


def test_a_sync_client_judges_from_async_code_through_its_counterpart(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, ["Yes", "Yes"])
    with server.anthropic_client(api_key=KEY) as client:
        judge_model = JudgeModel(client, JUDGE)
        judge = relevancy(judge_model)
        copies: list[Any] = []

        async def judge_once() -> bool:
            verdict = await judge.aevaluate(REQUEST)
            copies.append(judge_model.async_client())
            return verdict.passed

        assert asyncio.run(judge_once())
        assert judge.evaluate(REQUEST).passed  # and from sync code, on the caller's client
        assert isinstance(copies[0], anthropic.AsyncAnthropic)
        assert copies[0].api_key == KEY
        assert copies[0].is_closed()  # closed with its loop
        assert not client.is_closed()  # the caller's own client never is
    assert [r.headers.get("x-api-key") or r.headers.get("authorization") for r in server.requests]


async def test_an_async_client_judges_from_sync_code_through_its_counterpart(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, "Yes")
    async with server.async_anthropic_client() as client:
        judge_model = JudgeModel(client, JUDGE)
        verdict = await asyncio.to_thread(relevancy(judge_model).evaluate, REQUEST)
        assert verdict.passed
        copy = judge_model.sync_client()
        assert isinstance(copy, anthropic.Anthropic)
        await judge_model.aclose()
        assert copy.is_closed()
        assert not client.is_closed()


def test_a_judge_model_refuses_other_clients() -> None:
    with pytest.raises(TypeError, match=r"anthropic\.Anthropic"):
        JudgeModel(object(), JUDGE)  # type: ignore[arg-type]


def test_a_timed_out_anthropic_judge_request_ends_in_its_worker_thread(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, ["Yes", Reply.hang()])
    with server.anthropic_client(max_retries=2, timeout=60.0) as client:
        judge = relevancy(JudgeModel(client, JUDGE))
        assert judge.evaluate(REQUEST).passed  # warm: the timed request is sent at once
        done = threading.Event()
        command = _Noting(Evaluate(judge, REQUEST), done.set)
        with pytest.raises(TimedOut):
            Timed(command, 0.5).run_sync()
        # the request is cut to the deadline, so its worker ends though the server never answers
        assert done.wait(timeout=10)
    assert len(server.requests) == 2  # no retry was sent after the deadline


class _Noting:
    """A flow command that runs another and calls `then` when it has ended."""

    def __init__(self, inner: Any, then: Callable[[], None]) -> None:
        self.inner = inner
        self.then = then

    def run_sync(self) -> Any:
        try:
            return self.inner.run_sync()
        finally:
            self.then()

    async def run_async(self) -> Any:  # pragma: no cover - the sync path is the one tested
        return await self.inner.run_async()


# --- the scripted server's Messages API ----------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "error", "status", "kind", "says"),
    [
        (lambda s: None, "NotFoundError", 404, "not_found_error", "no script for model"),
        (lambda s: s.script(JUDGE, []), "InternalServerError", 500, "api_error", "no reply left"),
        (
            lambda s: s.script(JUDGE, Reply.error(529, "busy")),
            "InternalServerError",
            529,
            "overloaded_error",
            "busy",
        ),
        (
            lambda s: s.script(JUDGE, Reply.error(400, "odd", type="my_type")),
            "BadRequestError",
            400,
            "my_type",
            "odd",
        ),
        (
            lambda s: s.script(JUDGE, Reply.tool_call("T", "[1, 2]")),
            "InternalServerError",
            500,
            "api_error",
            "input is a JSON object",
        ),
    ],
)
def test_the_servers_errors_on_the_messages_api_are_in_anthropics_shape(
    server: ScriptedOpenAI,
    setup: Callable[[ScriptedOpenAI], None],
    error: str,
    status: int,
    kind: str,
    says: str,
) -> None:
    setup(server)
    with server.anthropic_client() as client, pytest.raises(getattr(anthropic, error)) as info:
        client.messages.create(model=JUDGE, max_tokens=5, messages=[])
    assert info.value.status_code == status
    body = info.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == kind
    assert says in body["error"]["message"]


def test_a_reply_renders_by_the_api_it_was_asked_on(server: ScriptedOpenAI) -> None:
    server.script(
        JUDGE,
        [
            Reply.text("cut", finish_reason="length", prompt_tokens=7, completion_tokens=3),
            Reply.text("cut", finish_reason="length", prompt_tokens=7, completion_tokens=3),
            Reply.no_choices(),
            Reply.delay(0.01, Reply.tool_call("Rating", {"rating": 3})),
            Reply.raw({"error": {"message": "sent as given"}}, status=418),
        ],
    )
    with server.client() as openai_client, server.anthropic_client() as client:
        completion = openai_client.chat.completions.create(model=JUDGE, messages=[])
        assert completion.choices[0].finish_reason == "length"
        message = client.messages.create(model=JUDGE, max_tokens=5, messages=[])
        assert (message.stop_reason, message.content[0].text) == ("max_tokens", "cut")
        assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 3)
        assert client.messages.create(model=JUDGE, max_tokens=5, messages=[]).content == []
        message = client.messages.create(model=JUDGE, max_tokens=5, messages=[])
        assert message.stop_reason == "tool_use"
        assert (message.content[0].name, message.content[0].input) == ("Rating", {"rating": 3})
        with pytest.raises(anthropic.APIStatusError) as info:
            client.messages.create(model=JUDGE, max_tokens=5, messages=[])
    assert info.value.status_code == 418
    assert info.value.body == {"error": {"message": "sent as given"}}  # raw: never rewritten


def test_a_truncated_messages_reply_drops_the_connection(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, Reply.truncated("Yes"))
    with server.anthropic_client() as client, pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=JUDGE, max_tokens=5, messages=[])


def test_the_system_prompt_counts_in_the_input_tokens(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, ["Yes", "Yes"])
    user = [{"role": "user", "content": "one two three"}]
    with server.anthropic_client() as client:
        bare = client.messages.create(model=JUDGE, max_tokens=5, messages=user)
        with_system = client.messages.create(
            model=JUDGE, max_tokens=5, system="four five", messages=user
        )
    assert with_system.usage.input_tokens == bare.usage.input_tokens + 3  # 2 words + 1 message


def test_within_a_time_limit_the_anthropic_clients_retries_still_happen(
    server: ScriptedOpenAI,
) -> None:
    server.script(JUDGE, [Reply.error(529), Reply.disconnect(), "Yes"])
    with server.anthropic_client(max_retries=2) as client:
        judge = relevancy(JudgeModel(client, JUDGE, timeout=30.0))
        verdict = Timed(Evaluate(judge, REQUEST), 30.0).run_sync()
    assert verdict.passed
    assert len(server.requests) == 3


def test_within_a_time_limit_a_refused_request_is_not_retried(server: ScriptedOpenAI) -> None:
    server.script(JUDGE, [Reply.error(401), "Yes"])
    with server.anthropic_client(max_retries=2) as client:
        judge = relevancy(JudgeModel(client, JUDGE))
        with pytest.raises(JudgeMisconfigured, match="HTTP 401"):
            Timed(Evaluate(judge, REQUEST), 30.0).run_sync()
    assert len(server.requests) == 1
