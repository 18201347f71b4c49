"""Early abort that resumes from the validated prefix, over real HTTP streams.

Both SDKs' clients (OpenAI's chat completions, Anthropic's messages) to the scripted server,
sync and async. The scripted server is an OpenAI-compatible server at 127.0.0.1, so
`early_abort="resume"` resumes by prefill there, as it does over Anthropic's API: the next
request ends with the reply's text, cut before the failed field's value, as the assistant's
reply, and the server's reply is only what continues it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel
from streaming_helpers import GOOD, INVOICE, USER, Invoice
from test_streaming_http import clients, collect, outcome, sdk, streaming, streams

import refinekit
from refinekit import (
    BudgetExceeded,
    CorrectionRequest,
    Final,
    Partial,
    Reset,
    ResponseValidationError,
    response_format,
    self_correct,
)
from refinekit._decorators.correct_partials import StreamedReply, _openai_host, resume_point
from refinekit._engine.stream_commands import StreamRead
from refinekit._structure.parse import Parser
from refinekit.testing import Reply, ScriptedOpenAI

__all__ = ["clients", "sdk"]  # fixtures

BAD = ['{"number": "A-1", ', '"currency": "GBP", ', '"total_cents": 1250}']
PREFIX = '{"number": "A-1", "currency":'
REST = ' "EUR", "total_cents": 1250}'


def aborted_at_currency() -> Reply:
    """A stream held after the currency failed: refinekit must close it there."""
    return Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD))


def messages_of(server: ScriptedOpenAI, n: int) -> list[dict[str, Any]]:
    body = server.requests[n].body
    assert body is not None
    return list(body["messages"])


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content)  # Anthropic's blocks


async def test_resume_by_prefill_sends_the_kept_prefix_and_joins_the_continuation(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", [aborted_at_currency(), Reply.text(REST, chunks=3)])
    extract = self_correct(schema=Invoice, early_abort="resume")(streaming(sdk, kind, clients))
    seen: list[refinekit.Event] = []
    with refinekit.subscribe(seen.append):
        items = await collect(kind, extract, USER)
    first = streams(server)[0]
    assert first.client_closed
    assert not first.finished
    # the continuation request: the conversation, the correction, the kept prefix last
    sent = messages_of(server, 1)
    assert sent[0] == USER[0]
    assert sent[1]["role"] == "user"
    assert '"currency": got "GBP"' in text_of(sent[1])
    assert 'keep them exactly as they are: "number": "A-1"' in text_of(sent[1])
    assert sent[2] == {"role": "assistant", "content": PREFIX}
    assert len(sent) == 3
    # no reset: the kept number stands; the partials go on from it
    assert not [i for i in items if isinstance(i, Reset)]
    assert items[0] == Partial({"number": "A-1"}, 1)
    assert Partial({"number": "A-1", "currency": "EUR"}, 2) in items
    assert items[-1] == Final(INVOICE, 2)
    (stream_event,) = [e for e in seen if e.kind == "stream" and e.resumed]
    assert (stream_event.attempt, stream_event.kept) == (2, 1)
    (correction,) = [e for e in seen if e.kind == "correction"]
    assert (correction.resumed, correction.kept) == (True, 1)


async def test_a_resume_costs_a_correction_and_its_usage_counts(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    server.script(
        "m",
        [aborted_at_currency(), Reply.text(REST, chunks=3, prompt_tokens=50, completion_tokens=9)],
    )
    extract = self_correct(schema=Invoice, early_abort="resume")(streaming("openai", kind, clients))
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert done.usage.model_calls == 2
    assert done.corrections_used == 1
    assert done.usage.completion_tokens >= 9


async def test_restate_asks_for_the_whole_object_with_the_kept_fields_fixed(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", [aborted_at_currency(), Reply.text(GOOD, chunks=4)])
    extract = self_correct(schema=Invoice, early_abort="restate")(streaming(sdk, kind, clients))
    items = await collect(kind, extract, USER)
    sent = messages_of(server, 1)
    assert [m["role"] for m in sent] == ["user", "user"]  # no prefill
    turn = text_of(sent[1])
    assert 'keep them exactly as they are: "number": "A-1"' in turn
    assert '"number": "A-1"' in turn.split("filled in:")[1]  # the template keeps it
    assert not [i for i in items if isinstance(i, Reset)]  # all it showed was kept
    assert items[-1] == Final(INVOICE, 2)


async def test_a_resumed_reply_that_changes_a_kept_field_is_refused(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    changed = ['{"number": "A-9", ', '"currency": "EUR", ', '"total_cents": 1250}']
    server.script(
        "m",
        [
            aborted_at_currency(),
            Reply.hang(after=1, then=Reply.text("".join(changed), chunks=changed)),
            Reply.text(GOOD, chunks=4),
        ],
    )
    extract = self_correct(schema=Invoice, early_abort="restate")(streaming(sdk, kind, clients))
    items = await collect(kind, extract, USER)
    second, third = streams(server)[1:]
    assert second.client_closed  # closed at the changed number
    assert not second.finished
    turn = text_of(messages_of(server, 2)[-1])
    assert 'already right as "A-1" and must stay so' in turn
    assert items[-1] == Final(INVOICE, 3)
    assert third.finished


async def test_a_server_that_starts_the_object_again_is_read_as_a_whole_reply(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    # an endpoint that ignores the prefill writes the whole object again: taken as it is
    server.script("m", [aborted_at_currency(), Reply.text(GOOD, chunks=4)])
    extract = self_correct(schema=Invoice, early_abort="prefill")(
        streaming("openai", kind, clients)
    )
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert messages_of(server, 1)[-1] == {"role": "assistant", "content": PREFIX}


async def test_a_new_start_that_changes_a_kept_field_is_refused(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    again = '{"number": "B-2", "currency": "EUR", "total_cents": 1250}'
    rest = ' "A-1", "currency": "EUR", "total_cents": 1250}'
    server.script("m", [aborted_at_currency(), Reply.text(again, chunks=4), Reply.text(rest)])
    extract = self_correct(schema=Invoice, early_abort="prefill")(
        streaming("openai", kind, clients)
    )
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert done.usage.model_calls == 3
    assert 'already right as "A-1"' in text_of(messages_of(server, 2)[-2])
    assert messages_of(server, 2)[-1] == {"role": "assistant", "content": '{"number":'}


async def test_a_resume_that_fails_again_spends_the_budget_of_two(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    wrong = [' "GBP", ', '"total_cents": 1250}']
    server.script(
        "m",
        [
            aborted_at_currency(),
            Reply.hang(after=1, then=Reply.text("".join(wrong), chunks=wrong)),
            Reply.hang(after=1, then=Reply.text("".join(wrong), chunks=wrong)),
        ],
    )
    extract = self_correct(schema=Invoice, early_abort="resume")(streaming(sdk, kind, clients))
    with pytest.raises(ResponseValidationError) as raised:
        await collect(kind, extract, USER)
    assert raised.value.corrections_used == 2
    assert len(server.requests) == 3
    # each resume keeps the same prefix; the error's reply is the whole text, prefix first
    assert messages_of(server, 2)[-1] == {"role": "assistant", "content": PREFIX}
    assert raised.value.raw_reply.startswith(PREFIX + ' "GBP"')


async def test_a_resume_cut_off_resumes_after_what_it_completed(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    parts = [' "EUR", ', '"total_cents": 1250}']
    server.script(
        "m",
        [
            aborted_at_currency(),
            Reply.disconnect(after=1, then=Reply.text("".join(parts), chunks=parts)),
            Reply.text(' "total_cents": 1250}', chunks=2),
        ],
    )
    extract = self_correct(schema=Invoice, early_abort="resume")(streaming("openai", kind, clients))
    seen: list[refinekit.Event] = []
    with refinekit.subscribe(seen.append):
        items = await collect(kind, extract, USER)
    assert items[-1] == Final(INVOICE, 3)
    cut = [e for e in seen if e.kind == "correction"][1]
    assert cut.failure == "cut_off"
    assert (cut.resumed, cut.kept) == (True, 2)  # the number, and the currency it completed
    prefix = messages_of(server, 2)[-1]
    assert prefix == {"role": "assistant", "content": PREFIX + ' "EUR",'}
    assert not [i for i in items if isinstance(i, Reset)]  # all it showed stands


async def test_a_budget_stops_the_resumed_stream(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    long = ' "EUR", "total_cents": 1250, "note": "' + "w" * 8000
    server.script(
        "m", [aborted_at_currency(), Reply.hang(after=40, then=Reply.text(long, chunks=100))]
    )
    extract = self_correct(
        schema=Invoice, early_abort="resume", budget=refinekit.Budget(max_tokens=600)
    )(streaming("openai", kind, clients))
    with pytest.raises(BudgetExceeded) as raised:
        await collect(kind, extract, USER)
    second = streams(server)[1]
    assert (second.client_closed, second.finished) == (True, False)
    assert raised.value.usage.model_calls == 2


async def test_cancelling_during_the_resume_closes_its_stream(
    server: ScriptedOpenAI, clients: dict[str, Any]
) -> None:
    server.script(
        "m",
        [
            aborted_at_currency(),
            Reply.hang(after=1, then=Reply.text(REST, chunks=[' "EUR", ', '"total_cents": 1250}'])),
        ],
    )
    extract = self_correct(schema=Invoice, early_abort="resume")(
        streaming("openai", "async", clients)
    )
    shown: list[Any] = []

    reading = asyncio.Event()  # the resumed stream is being read: its currency shown

    async def consume() -> None:
        async for item in extract.stream(USER):
            shown.append(item)
            if isinstance(item, Partial) and item.attempt == 2:
                reading.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(reading.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    resumed = streams(server)[1]
    assert resumed.client_closed
    assert not resumed.finished
    assert shown[-1] == Partial({"number": "A-1", "currency": "EUR"}, 2)


class Aliased(BaseModel):
    number: str
    currency: str

    model_config = {"populate_by_name": True}


def test_a_builder_sees_what_the_resume_keeps() -> None:
    requests: list[CorrectionRequest] = []

    def builder(request: CorrectionRequest) -> str:
        requests.append(request)
        return request.default()

    replies = iter([BAD, [' "EUR", "total_cents": 1250}']])

    def model(messages: list[dict[str, Any]]) -> Any:
        return iter(next(replies))

    extract = self_correct(schema=Invoice, early_abort="prefill", correction=builder)(model)
    assert extract(USER) == INVOICE
    (request,) = requests
    assert (request.resume, dict(request.kept), request.prefix) == (
        "prefill",
        {"number": "A-1"},
        PREFIX,
    )


def test_early_abort_true_still_starts_again() -> None:
    sent: list[list[dict[str, Any]]] = []
    replies = iter([BAD, [GOOD]])

    def model(messages: list[dict[str, Any]]) -> Any:
        sent.append(messages)
        return iter(next(replies))

    assert self_correct(schema=Invoice, early_abort=True)(model)(USER) == INVOICE
    assert [m["role"] for m in sent[1]] == ["user", "user"]
    assert "keep them exactly" not in sent[1][-1]["content"]


async def test_a_restated_request_pins_the_kept_fields_in_a_strict_schema(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    server.script("m", [aborted_at_currency(), Reply.text(GOOD, chunks=4)])
    client = clients[f"openai-{kind}"]

    def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": "m", "messages": messages, "stream": True, **response_format(Invoice)}

    if kind == "sync":

        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(**request(messages))

    else:

        async def extract(messages: list[dict[str, Any]]) -> Any:  # type: ignore[misc]
            return await client.chat.completions.create(**request(messages))

    decorated = self_correct(schema=Invoice, early_abort="restate")(extract)
    items = await collect(kind, decorated, USER)
    assert items[-1] == Final(INVOICE, 2)
    schemas = [r.body["response_format"]["json_schema"]["schema"] for r in server.requests]
    assert schemas[0]["properties"]["number"] == {"title": "Number", "type": "string"}
    assert schemas[1]["properties"]["number"] == {"type": "string", "enum": ["A-1"]}
    assert schemas[1]["properties"]["currency"] == schemas[0]["properties"]["currency"]
    # outside the resumed request nothing is pinned
    assert (
        "enum"
        not in response_format(Invoice)["response_format"]["json_schema"]["schema"]["properties"][
            "number"
        ]
    )


async def test_a_tool_call_is_resumed_by_restating(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    # a tool call's arguments are no assistant text a server could continue
    bad = Reply.tool_call("invoice", "".join(BAD), chunks=BAD)
    server.script("m", [Reply.hang(after=2, then=bad), Reply.tool_call("invoice", GOOD, chunks=4)])
    extract = self_correct(schema=Invoice, early_abort="resume")(streaming("openai", kind, clients))
    items = await collect(kind, extract, USER)
    assert items[-1] == Final(INVOICE, 2)
    sent = messages_of(server, 1)
    assert [m["role"] for m in sent] == ["user", "user"]
    assert 'keep them exactly as they are: "number": "A-1"' in text_of(sent[1])


@pytest.mark.parametrize(
    ("wire", "way"),
    [
        ("anthropic", "prefill"),
        ("compatible", "prefill"),
        ("openai", "restate"),
        ("other", "restate"),
    ],
)
def test_resume_prefills_where_the_endpoint_continues_an_assistant_message(
    wire: str, way: str
) -> None:
    reply = StreamedReply(
        StreamRead(),
        '{"number": "A-1", "currency": "GBP"',
        None,
        validated={"number": "A-1"},
        wire=wire,
    )
    parser = Parser(Invoice)
    made = resume_point(reply, "resume", parser)
    assert made is not None
    assert (made.way, made.prefix, dict(made.kept)) == (way, PREFIX, {"number": "A-1"})
    forced = resume_point(reply, "prefill", parser)
    assert forced is not None
    assert forced.way == "prefill"
    assert resume_point(reply, "restart", parser) is None


def test_the_openai_wire_is_told_by_the_client_s_host() -> None:
    for host, wire in [
        ("https://api.openai.com/v1", "openai"),
        ("https://x.openai.azure.com/openai", "openai"),
        ("http://127.0.0.1:8080/v1", "compatible"),
    ]:
        client = openai.OpenAI(api_key="k", base_url=host)
        response = httpx.Response(200, request=httpx.Request("POST", f"{host}/chat/completions"))
        stream = openai.Stream(cast_to=object, response=response, client=client)
        assert _openai_host(stream) == wire
        client.close()
