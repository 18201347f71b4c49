"""ScriptedOpenAI's streams over real HTTP: OpenAI's and Anthropic's server-sent events.

Read by the real `openai` and `anthropic` clients (sync and async), unchanged: scripted
chunking, the usage chunk, each reply streamed, the mid-stream faults, and the server's count
of what it sent before the client left.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anthropic
import httpx2
import instructor
import openai
import pytest
from helpers import close_clients
from pydantic import BaseModel

from refinekit.testing import RecordedStream, Reply, ScriptedOpenAI

USER = [{"role": "user", "content": "the invoice"}]
INVOICE = '{"number": "A-1", "total_cents": 1250}'

Consume = Callable[..., Awaitable[list[Any]]]
"""Create a streamed completion and read it to its end: the chunks (or events), in order."""


def consumer(create: Callable[..., Any]) -> Consume:
    """`create(**kwargs)`'s stream (a sync one, or an awaited async one) read to its end."""

    async def consume(**kwargs: Any) -> list[Any]:
        stream = create(**kwargs)
        if inspect.isawaitable(stream):
            async with await stream as astream:
                return [item async for item in astream]
        with stream:
            return list(stream)

    return consume


@pytest.fixture(params=["sync", "async"])
async def openai_stream(
    request: pytest.FixtureRequest, server: ScriptedOpenAI
) -> AsyncIterator[Consume]:
    """`chat.completions.create(stream=True)` read to its end, by the sync or async client."""
    sync = request.param == "sync"
    client = server.client(timeout=2) if sync else server.async_client(timeout=2)
    yield consumer(lambda **kwargs: client.chat.completions.create(stream=True, **kwargs))
    await close_clients([client])


@pytest.fixture(params=["sync", "async"])
async def anthropic_stream(
    request: pytest.FixtureRequest, server: ScriptedOpenAI
) -> AsyncIterator[Consume]:
    """`messages.create(stream=True)` read to its end, by the sync or async Anthropic client."""
    sync = request.param == "sync"
    made = server.anthropic_client if sync else server.async_anthropic_client
    client = made(timeout=2)
    yield consumer(lambda **kwargs: client.messages.create(stream=True, max_tokens=100, **kwargs))
    await close_clients([client])


def content_of(chunks: list[Any]) -> list[str]:
    """The content pieces of OpenAI chunks (the role chunk's "" left out)."""
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def only(streams: list[RecordedStream]) -> RecordedStream:
    assert len(streams) == 1, streams
    return streams[0]


# --- OpenAI's format ------------------------------------------------------------------------------


async def test_a_text_reply_streams_as_scripted_chunks(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script(
        "m", Reply.text(INVOICE, chunks=['{"number": "A', '-1", "total_', 'cents": 1250}'])
    )
    chunks = await openai_stream(model="m", messages=USER)
    assert content_of(chunks) == ['{"number": "A', '-1", "total_', 'cents": 1250}']
    first = chunks[0]
    assert first.object == "chat.completion.chunk"
    assert first.id.startswith("chatcmpl-scripted-")
    assert first.model == "m"
    assert first.choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {first.id}
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, None, "stop"]
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked
    record = only(server.streamed("m"))
    assert (record.chunks, record.sent, record.finished, record.client_closed) == (
        3,
        3,
        True,
        False,
    )
    assert record.fault is None
    assert record.request.body is not None
    assert record.request.body["stream"] is True


async def test_the_usage_chunk_comes_last_when_the_request_asks_for_it(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.text("a b c", prompt_tokens=11, completion_tokens=3))
    chunks = await openai_stream(model="m", messages=USER, stream_options={"include_usage": True})
    *others, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (11, 3)
    assert last.usage.total_tokens == 14
    assert all(c.usage is None for c in others)


async def test_the_default_chunks_are_words_and_a_size_cuts_by_characters(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", ["The sky is blue.", Reply.text("abcdefg", chunks=3)])
    assert content_of(await openai_stream(model="m", messages=USER)) == [
        "The",
        " sky",
        " is",
        " blue.",
    ]
    assert content_of(await openai_stream(model="m", messages=USER)) == ["abc", "def", "g"]


async def test_a_tool_call_streams_its_arguments(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.tool_call("Invoice", INVOICE, chunks=4))
    chunks = await openai_stream(model="m", messages=USER)
    opening = chunks[0].choices[0].delta.tool_calls[0]
    assert opening.id == "call_1"
    assert opening.function.name == "Invoice"
    assert opening.function.arguments == ""
    pieces = [
        c.choices[0].delta.tool_calls[0].function.arguments
        for c in chunks[1:]
        if c.choices[0].delta.tool_calls
    ]
    assert "".join(pieces) == INVOICE
    assert len(pieces) == 10  # 38 characters, 4 at a time
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_a_cut_off_reply_streams_finish_reason_length(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.text('{"number": "A-', finish_reason="length"))
    chunks = await openai_stream(model="m", messages=USER)
    assert "".join(content_of(chunks)) == '{"number": "A-'
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_an_error_is_sent_before_any_stream(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.error(429, "slow down"))
    with pytest.raises(openai.RateLimitError, match="slow down"):
        await openai_stream(model="m", messages=USER)
    assert server.streamed() == []


async def test_no_choices_and_a_delay_stream_too(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", [Reply.no_choices(), Reply.delay(0.01, "late")])
    chunks = await openai_stream(model="m", messages=USER)
    assert [c.choices for c in chunks] == [[]]
    assert content_of(await openai_stream(model="m", messages=USER)) == ["late"]


async def test_a_disconnect_after_n_chunks_breaks_the_stream_there(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.disconnect(after=2, then=Reply.text(INVOICE, chunks=5)))
    with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
        await openai_stream(model="m", messages=USER)
    record = only(server.streamed())
    assert (record.chunks, record.sent, record.finished) == (8, 2, False)
    assert record.fault == "disconnect"


async def test_a_stall_after_n_chunks_holds_until_the_client_leaves(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=1, then=Reply.text(INVOICE, chunks=10)))
    with server.client(timeout=0.2) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        seen = [next(stream), next(stream)]  # the role chunk, the first chunk
        with pytest.raises(httpx2.ReadTimeout):
            next(stream)
        stream.close()
    assert content_of(seen) == ['{"number":']
    record = only(server.streamed())
    assert (record.sent, record.finished, record.client_closed) == (1, False, True)
    assert record.fault == "hang"


def test_a_client_that_closes_a_stalled_stream_is_counted_and_the_client_goes_on(
    server: ScriptedOpenAI,
) -> None:
    """What an early abort does: read a little, close the response; the server stops there."""
    server.script("m", [Reply.hang(after=2, then=Reply.text(INVOICE, chunks=4)), "next"])
    with server.client(timeout=2) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        next(stream)  # the role chunk
        assert next(stream).choices[0].delta.content == '{"nu'
        assert next(stream).choices[0].delta.content == "mber"  # then the stream stalls
        stream.close()
        reply = client.chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "next"
    record = only(server.streamed())
    assert (record.chunks, record.sent, record.client_closed) == (10, 2, True)


def test_a_stream_still_being_sent_at_a_reset_is_not_recorded_after_it(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=1, then=Reply.text(INVOICE, chunks=4)))
    with server.client(timeout=2) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        next(stream)  # the role chunk
        next(stream)  # the first chunk: then the server holds the stream
        server.reset()  # while it is still being sent
        stream.close()
        server.script("m", "after the reset")
        client.chat.completions.create(model="m", messages=USER)
    assert server.streamed() == []  # what ended after the reset began before it
    assert [r.model for r in server.requests] == ["m"]


async def test_a_malformed_chunk_after_n_good_ones_fails_the_client_there(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script("m", Reply.malformed(after=1, then="a b c"))
    with pytest.raises(json.JSONDecodeError):
        await openai_stream(model="m", messages=USER)
    record = only(server.streamed())
    assert record.fault == "malformed"
    assert record.sent >= 2  # the good chunk and the bad one, and those written before it left


async def test_malformed_truncated_hang_and_disconnect_have_stream_forms_without_after(
    server: ScriptedOpenAI, openai_stream: Consume
) -> None:
    server.script(
        "m",
        [Reply.malformed(), Reply.truncated(Reply.text("a b c d", chunks=1)), Reply.disconnect()],
    )
    with pytest.raises(json.JSONDecodeError):  # its first chunk is not JSON
        await openai_stream(model="m", messages=USER)
    with pytest.raises(httpx2.RemoteProtocolError):  # half its chunks, then the connection drops
        await openai_stream(model="m", messages=USER)
    with pytest.raises(openai.APIConnectionError):  # no response at all
        await openai_stream(model="m", messages=USER)
    cut = server.streamed()[1]
    assert (cut.chunks, cut.sent, cut.fault) == (7, 3, "disconnect")


async def test_a_stream_fault_answering_a_request_that_does_not_stream_is_a_500(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=1, then="a b"))
    with (
        server.client() as client,
        pytest.raises(
            openai.InternalServerError, match=r"Reply.hang\(after=1, ...\) is a fault of a stream"
        ),
    ):
        client.chat.completions.create(model="m", messages=USER)


def test_streamed_waits_for_streams_being_sent_and_says_when_one_is_left_open(
    server: ScriptedOpenAI,
) -> None:
    server.script("m", Reply.hang(after=0, then="a b"))
    with server.client(timeout=2) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        with pytest.raises(TimeoutError, match=r"still being sent after 0\.05 s"):
            server.streamed(wait=0.05)
        stream.close()
    assert only(server.streamed()).client_closed
    server.reset()
    assert server.streamed() == []


def test_scripted_chunks_are_checked() -> None:
    with pytest.raises(ValueError, match="do not join to the text"):
        Reply.text("abc", chunks=["a", "c"])
    with pytest.raises(ValueError, match="at least 1 character"):
        Reply.text("abc", chunks=0)
    with pytest.raises(TypeError, match="a list of str or a size"):
        Reply.text("abc", chunks="abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a reply of more chunks: it has 2"):
        Reply.hang(after=3, then="a b")
    with pytest.raises(ValueError, match="needs a reply of more chunks"):
        Reply.malformed(after=2, then="a b")  # the bad chunk must be one of its chunks
    with pytest.raises(ValueError, match="give both"):
        Reply.disconnect(after=1)
    with pytest.raises(ValueError, match="streams a text or a tool call"):
        Reply.disconnect(after=0, then=Reply.error(500))
    assert Reply.text("a b", chunks=["a b"]) != Reply.text("a b")


def test_instructor_reads_the_stream_as_partial_objects(server: ScriptedOpenAI) -> None:
    class Invoice(BaseModel):
        number: str
        total_cents: int

    server.script("m", Reply.text(INVOICE, chunks=3))
    with server.client() as client:
        patched = instructor.from_openai(client, mode=instructor.Mode.JSON)
        partials = list(patched.create_partial(model="m", response_model=Invoice, messages=USER))
    assert partials[-1].number == "A-1"
    assert partials[-1].total_cents == 1250
    assert len(partials) > 3


# --- Anthropic's format ---------------------------------------------------------------------------


async def test_a_text_reply_streams_as_the_messages_apis_events(
    server: ScriptedOpenAI, anthropic_stream: Consume
) -> None:
    server.script(
        "c", Reply.text("Hello there", finish_reason="length", prompt_tokens=9, completion_tokens=2)
    )
    events = await anthropic_stream(model="c", messages=USER)
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # and a ping, which the client drops
    assert events[0].message.model == "c"
    assert events[0].message.usage.input_tokens == 9
    assert [e.delta.text for e in events if e.type == "content_block_delta"] == ["Hello", " there"]
    assert events[-2].delta.stop_reason == "max_tokens"
    assert events[-2].usage.output_tokens == 2
    record = only(server.streamed("c"))
    assert (record.chunks, record.sent, record.finished) == (2, 2, True)
    assert record.request.path == "/v1/messages"


async def test_a_tool_call_streams_as_input_json_deltas(
    server: ScriptedOpenAI, anthropic_stream: Consume
) -> None:
    server.script("c", [Reply.tool_call("Invoice", INVOICE, chunks=7), Reply.tool_call("T", "[1]")])
    events = await anthropic_stream(model="c", messages=USER)
    block = events[1].content_block
    assert (block.type, block.name, block.input) == ("tool_use", "Invoice", {})
    assert block.id.startswith("toolu_scripted_")
    parts = [e.delta.partial_json for e in events if e.type == "content_block_delta"]
    assert "".join(parts) == INVOICE
    assert events[-2].delta.stop_reason == "tool_use"
    with pytest.raises(anthropic.InternalServerError, match="input is a JSON object"):
        await anthropic_stream(model="c", messages=USER)


async def test_anthropic_streams_fail_as_scripted(
    server: ScriptedOpenAI, anthropic_stream: Consume
) -> None:
    server.script(
        "c",
        [
            Reply.error(529, "busy"),
            Reply.disconnect(after=1, then="a b c"),
            Reply.malformed(after=0, then="a b c"),
        ],
    )
    with pytest.raises(anthropic.APIStatusError, match="busy"):
        await anthropic_stream(model="c", messages=USER)
    with pytest.raises(httpx2.RemoteProtocolError):
        await anthropic_stream(model="c", messages=USER)
    with pytest.raises(json.JSONDecodeError):
        await anthropic_stream(model="c", messages=USER)
    cut, spoilt = server.streamed()
    assert (cut.sent, cut.fault) == (1, "disconnect")
    assert spoilt.fault == "malformed"
    assert spoilt.sent >= 1  # the bad chunk, and those written before the client left


def test_the_anthropic_stream_helper_builds_its_message(server: ScriptedOpenAI) -> None:
    server.script("c", Reply.text(INVOICE, chunks=6))
    with (
        server.anthropic_client() as client,
        client.messages.stream(model="c", max_tokens=100, messages=USER) as stream,
    ):
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    assert "".join(texts) == INVOICE
    assert message.content[0].text == INVOICE  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
