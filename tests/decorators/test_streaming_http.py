"""The decorators over real HTTP streams: the openai and anthropic clients, sync and async.

The scripted server streams server-sent events and counts what it sent before the client hung
up. An early abort is checked with a stream that stalls after its failing part
(`Reply.hang(after=N, then=...)`): refinekit must close the response there and send the
correction; a reader that waited for more would time out instead (the clients' timeout is 2 s).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import refinekit
from refinekit import (
    BudgetExceeded,
    EvaluationRequest,
    Final,
    Partial,
    checks,
    guarded,
    retry_on_low_quality,
    reviewed,
    self_correct,
)
from refinekit.testing import RecordedStream, Reply, ScriptedOpenAI

KINDS = ["sync", "async"]
USER = [{"role": "user", "content": "Extract the invoice: A-1, EUR 12.50"}]


class Invoice(BaseModel):
    number: str
    currency: Literal["EUR", "USD"]
    total_cents: int


GOOD = '{"number": "A-1", "currency": "EUR", "total_cents": 1250}'
INVOICE = Invoice(number="A-1", currency="EUR", total_cents=1250)
BAD = ['{"number": "A-1", ', '"currency": "GBP", ', '"total_cents": 1250, ', '"note": "more"}']


@pytest.fixture
async def clients(server: ScriptedOpenAI) -> AsyncIterator[dict[str, Any]]:
    """Both SDKs' clients of the scripted server, sync and async (2 s timeout, no retries).

    Made in the test's event loop, which runs the async calls too.
    """
    made = {
        "openai-sync": server.client(timeout=2, max_retries=0),
        "openai-async": server.async_client(timeout=2, max_retries=0),
        "anthropic-sync": server.anthropic_client(timeout=2, max_retries=0),
        "anthropic-async": server.async_anthropic_client(timeout=2, max_retries=0),
    }
    yield made
    made["openai-sync"].close()
    made["anthropic-sync"].close()
    await made["openai-async"].close()
    await made["anthropic-async"].close()


def streaming(sdk: str, kind: str, clients: dict[str, Any], first: str = "messages") -> Any:
    """A function streaming from model "m" with `sdk`'s client; its first argument is `first`."""
    client = clients[f"{sdk}-{kind}"]

    def request(arg: Any) -> dict[str, Any]:
        messages = arg if first == "messages" else [{"role": "user", "content": arg}]
        if sdk == "openai":
            return {
                "model": "m",
                "messages": messages,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        return {"model": "m", "messages": messages, "stream": True, "max_tokens": 200}

    def create(arg: Any) -> Any:
        api = client.chat.completions if sdk == "openai" else client.messages
        return api.create(**request(arg))

    async def acreate(arg: Any) -> Any:
        api = client.chat.completions if sdk == "openai" else client.messages
        return await api.create(**request(arg))

    return create if kind == "sync" else acreate


async def collect(kind: str, decorated: Any, *args: Any) -> list[Any]:
    """Every item of `decorated.stream(*args)` (a sync one iterated blocking)."""
    if kind == "sync":
        return list(decorated.stream(*args))
    return [item async for item in decorated.stream(*args)]


async def outcome(kind: str, decorated: Any, *args: Any) -> refinekit.Outcome[Any]:
    if kind == "sync":
        return decorated.outcome(*args)  # type: ignore[no-any-return]
    return await decorated.outcome(*args)  # type: ignore[no-any-return]


def streams(server: ScriptedOpenAI) -> list[RecordedStream]:
    return server.streamed("m")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_self_correct_closes_the_http_stream_at_a_failed_field_and_corrects(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD)),
            Reply.text(GOOD, chunks=8, prompt_tokens=40, completion_tokens=17),
        ],
    )
    extract = self_correct(schema=Invoice)(streaming(sdk, kind, clients))
    items = await collect(kind, extract, USER)
    first, second = streams(server)
    assert first.client_closed  # the HTTP response was closed: the server stopped there
    assert (first.sent, first.finished) == (2, False)
    assert second.finished
    assert [type(i).__name__ for i in items[:2]] == ["Partial", "Reset"]
    assert items[0] == Partial({"number": "A-1"}, 1)
    assert items[1].cause == "correction"
    assert items[1].aborted
    assert items[-1] == Final(INVOICE, 2)
    # the correction names the failed field
    (_, correction) = server.requests
    assert correction.body is not None
    assert '"currency": got "GBP"' in correction.body["messages"][-1]["content"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_streamed_usage_is_what_the_server_reported_and_an_aborted_stream_is_estimated(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD)),
            Reply.text(GOOD, chunks=8, prompt_tokens=40, completion_tokens=17),
        ],
    )
    extract = self_correct(schema=Invoice)(streaming(sdk, kind, clients))
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert done.usage.model_calls == 2
    # the complete stream: what the server reported; the aborted one: at least its text / 4
    aborted_completion = done.usage.completion_tokens - 17
    assert aborted_completion >= -(-len(BAD[0] + BAD[1]) // 4)
    assert done.usage.prompt_tokens > 40


@pytest.mark.parametrize("kind", KINDS)
async def test_a_disconnected_stream_is_cut_off_and_corrected(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    server.script(
        "m", [Reply.disconnect(after=3, then=Reply.text(GOOD, chunks=6)), Reply.text(GOOD)]
    )
    seen: list[refinekit.Event] = []
    extract = self_correct(schema=Invoice)(streaming("openai", kind, clients))
    with refinekit.subscribe(seen.append):
        assert (await collect(kind, extract, USER))[-1] == Final(INVOICE, 2)
    assert next(e for e in seen if e.kind == "correction").failure == "cut_off"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_budget_closes_the_http_stream_midway(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    long = '{"number": "A-1", "currency": "EUR", "total_cents": 1250, "note": "' + "w" * 2000
    server.script("m", Reply.hang(after=40, then=Reply.text(long, chunks=10)))
    extract = self_correct(schema=Invoice, budget=refinekit.Budget(max_tokens=80))(
        streaming("openai", kind, clients)
    )
    seen: list[refinekit.Event] = []
    with refinekit.subscribe(seen.append), pytest.raises(BudgetExceeded) as raised:
        await collect(kind, extract, USER)
    (record,) = streams(server)
    # the server held the stream after 40 chunks: had the client waited for more it would have
    # timed out (StreamInterrupted); it hung up instead, having read fewer than were written
    assert (record.client_closed, record.finished, record.sent) == (True, False, 40)
    (event,) = [e for e in seen if e.kind == "stream"]
    assert event.aborted == "budget"
    assert event.chunks is not None
    assert event.chunks < 40
    assert event.estimated  # the server never got to its usage chunk: characters / 4
    # the tokens of the stream so far are spent
    assert raised.value.usage.total_tokens > 80
    assert raised.value.usage == event.usage


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_retry_stops_a_stream_at_a_forbidden_phrase_and_retries(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    poor = "Refunds are guaranteed, always, whatever happens to the order."
    good = "Refunds within 30 days."
    server.script(
        "m", [Reply.hang(after=3, then=Reply.text(poor)), Reply.text(good, completion_tokens=5)]
    )
    answer = retry_on_low_quality(evaluator=checks.excludes("guaranteed"), max_retries=1)(
        streaming(sdk, kind, clients, first="question")
    )
    items = await collect(kind, answer, "Can I get a refund?")
    assert items == ["Refunds", " within", " 30", " days."]
    first, second = streams(server)
    assert first.client_closed
    assert second.finished


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_reviewed_enforce_publishes_the_approved_stream_and_shadow_passes_it_through(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    text = "Refunds within 30 days [policies/refunds.md]."
    judged: list[str] = []

    def judge(request: EvaluationRequest) -> bool:
        judged.append(request.answer)
        return "[policies/refunds.md]" in request.answer

    server.script("m", [Reply.text(text), Reply.text("No idea.")])
    function = streaming(sdk, kind, clients, first="question")
    enforce = reviewed(judge=judge, max_revisions=0)(function)
    assert "".join(await collect(kind, enforce, "q")) == text
    shadow = reviewed(judge=judge, mode="shadow")(function)
    assert await collect(kind, shadow, "q") == ["No", " idea."]  # passed through, though it failed
    assert judged == [text, "No idea."]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_guarded_closes_an_unsafe_stream_and_publishes_the_refusal(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    # the fifth chunk is " secret"; the server holds the stream after it
    server.script("m", Reply.hang(after=5, then=Reply.text("Call me at the secret number now")))
    safe = guarded(screen=checks.excludes("secret"), refusal="Sorry.")(
        streaming(sdk, kind, clients, first="question")
    )
    assert await collect(kind, safe, "q") == ["Sorry."]
    (record,) = streams(server)
    assert record.client_closed
