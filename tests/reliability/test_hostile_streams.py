"""Hostile streams over real HTTP, with the `openai` client, sync and async.

The scripted server sends each stream's server-sent events as given bytes (`Reply.raw` with
`text/event-stream`), so a stream can carry what no scripted reply writes: an error event
quoting an API key, a surrogate pair split over two chunks, a lone surrogate, an event that
is not UTF-8, a body that ends without a finish reason or `[DONE]`.

- A key in a mid-stream error event is redacted from every text refinekit makes of it: the
  `StreamInterrupted` message, the `stream` event's `aborted`, the `Reset.reason` the
  consumer gets, the `reset` and `correction` events, the log lines and the correction turn.
- Hostile bytes are a correction (or the documented repair), never a crash, streamed or not;
  a streamed reply's final value is the whole reply's.
- A stream that stops mid-value without a finish reason is corrected as `cut_off`.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any, Optional

import pytest
from pydantic import BaseModel

from refinekit import Event, Final, Reset, checks, retry_on_low_quality, self_correct, subscribe
from refinekit.testing import Reply, ScriptedOpenAI

pytestmark = pytest.mark.reliability

KINDS = ["sync", "async"]
KEY = "sk-proj-Zq8v3LmN0pXr7TtY2wQe5RbU9sKd4HfG"
USER = [{"role": "user", "content": "Extract it."}]


class Note(BaseModel):
    text: str


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def event(data: Any) -> bytes:
    return b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"


def sse(*events: bytes) -> Reply:
    """A stream of these events, sent whole (the body's length known: no chunked encoding)."""
    return Reply.raw(b"".join(events), headers={"Content-Type": "text/event-stream"})


def stream_of(*pieces: str, finish: str | None = "stop", done: bool = True) -> Reply:
    """`pieces` as content chunks (each JSON-escaped as the server writes it)."""
    events = [event(chunk(piece)) for piece in pieces]
    if finish is not None:
        events.append(event(chunk(finish=finish)))
    if done:
        events.append(event(b"[DONE]"))
    return sse(*events)


def correcting(server: ScriptedOpenAI, kind: str, schema: Any, *, stream: bool = True) -> Any:
    """A `@self_correct` function streaming (or not) from model "m" with kind's client."""
    # early_abort=True: a failed reply is written again, and the consumer told so (a Reset)
    decorate = self_correct(schema=schema, max_corrections=1, early_abort=True)
    if kind == "sync":
        client = server.client(timeout=2, max_retries=0)

        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="m", messages=messages, stream=stream)

        extract.client = client  # type: ignore[attr-defined]
        return decorate(extract)
    aclient = server.async_client(timeout=2, max_retries=0)

    async def aextract(messages: list[dict[str, Any]]) -> Any:
        return await aclient.chat.completions.create(model="m", messages=messages, stream=stream)

    aextract.client = aclient  # type: ignore[attr-defined]
    return decorate(aextract)


async def close(fn: Any) -> None:
    client = fn.__wrapped__.client
    result = client.close()
    if result is not None:
        await result


async def items(kind: str, fn: Any) -> list[Any]:
    """Every item of `fn.stream(USER)`."""
    try:
        if kind == "sync":
            return list(fn.stream(USER))
        return [item async for item in fn.stream(USER)]
    finally:
        await close(fn)


async def call(kind: str, fn: Any) -> Any:
    try:
        if kind == "sync":
            return fn(USER)
        return await fn(USER)
    finally:
        await close(fn)


def correction_turns(server: ScriptedOpenAI) -> list[str]:
    """The text of the last user message of each request after the first."""
    return [str(r.body["messages"][-1]["content"]) for r in server.requests_for("m")[1:]]


# --- 2. a key in a mid-stream error event -----------------------------------------------------


def key_error_stream() -> Reply:
    error = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_key"}}
    return sse(event(chunk('{"text": "hal')), event(error))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_key_in_a_mid_stream_error_event_reaches_no_text_refinekit_makes(
    server: ScriptedOpenAI, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.script("m", [key_error_stream(), '{"text": "ok"}'])
    events: list[Event] = []
    caplog.set_level(logging.DEBUG, logger="refinekit")
    with subscribe(events.append):
        got = await items(kind, correcting(server, kind, Note))
    resets = [item for item in got if isinstance(item, Reset)]
    assert [type(item) for item in got][-1] is Final
    assert got[-1].value == Note(text="ok")
    assert len(resets) == 1
    assert "[redacted key]" in resets[0].reason
    assert "the stream sent an error" in resets[0].reason
    by_kind = {e.kind: e for e in events}
    texts = {
        "stream.aborted": next(e.aborted for e in events if e.kind == "stream"),
        "reset.error": by_kind["reset"].error,
        "correction.error": by_kind["correction"].error,
    }
    for where, text in texts.items():
        assert "[redacted key]" in (text or ""), where
    assert by_kind["correction"].failure == "cut_off"
    assert all(KEY not in repr(e) for e in events)
    assert KEY not in caplog.text
    assert "[redacted key]" in caplog.text
    assert all(KEY not in turn for turn in correction_turns(server))  # the correction turn
    assert all(KEY not in json.dumps(r.body) for r in server.requests_for("m"))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_interrupted_by_a_key_in_an_error_event_raises_no_key(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("m", [key_error_stream()])
    decorate = retry_on_low_quality(evaluator=checks.max_length(500), max_retries=1)
    if kind == "sync":
        client = server.client(timeout=2, max_retries=0)

        def answer(question: str) -> Any:
            messages = [{"role": "user", "content": question}]
            return client.chat.completions.create(model="m", messages=messages, stream=True)

        with pytest.raises(Exception, match="the stream sent an error") as caught:
            list(decorate(answer).stream("Why?"))
        client.close()
    else:
        aclient = server.async_client(timeout=2, max_retries=0)

        async def aanswer(question: str) -> Any:
            messages = [{"role": "user", "content": question}]
            return await aclient.chat.completions.create(model="m", messages=messages, stream=True)

        with pytest.raises(Exception, match="the stream sent an error") as caught:
            [item async for item in decorate(aanswer).stream("Why?")]
        await aclient.close()
    assert type(caught.value).__name__ == "StreamInterrupted"
    assert KEY not in str(caught.value)
    assert "[redacted key]" in str(caught.value)
    assert KEY not in caught.value.reason  # type: ignore[attr-defined]
    # its cause (the SDK's error) is printed with every traceback of it
    assert KEY not in "".join(traceback.format_exception(caught.value))


@pytest.mark.parametrize("kind", KINDS)
async def test_the_streams_own_client_key_of_no_known_shape_is_redacted_too(
    server: ScriptedOpenAI, kind: str
) -> None:
    key = "team-7Q2x-key-of-no-known-shape"
    error = {"error": {"message": f"Incorrect API key provided: {key}"}}
    server.script("m", [sse(event(chunk('{"text": "hal')), event(error)), '{"text": "ok"}'])
    if kind == "sync":
        client = server.client(timeout=2, max_retries=0, api_key=key)

        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="m", messages=messages, stream=True)

        extract.client = client  # type: ignore[attr-defined]
        fn = self_correct(schema=Note, max_corrections=1, early_abort=True)(extract)
    else:
        aclient = server.async_client(timeout=2, max_retries=0, api_key=key)

        async def aextract(messages: list[dict[str, Any]]) -> Any:
            return await aclient.chat.completions.create(model="m", messages=messages, stream=True)

        aextract.client = aclient  # type: ignore[attr-defined]
        fn = self_correct(schema=Note, max_corrections=1, early_abort=True)(aextract)
    events: list[Event] = []
    with subscribe(events.append):
        got = await items(kind, fn)
    assert isinstance(got[0], Reset)
    assert key not in got[0].reason
    assert "[redacted]" in got[0].reason
    assert all(key not in repr(e) for e in events)


# --- 4. hostile bytes ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("schema", [str, Note], ids=["str", "model"])
async def test_a_surrogate_pair_split_over_two_chunks_gives_the_whole_replys_value(
    server: ScriptedOpenAI, kind: str, schema: Any
) -> None:
    # each chunk's JSON escapes one half of U+1F600 (the client decodes each to a lone half)
    split = ['"A\ud83d', '\ude00"'] if schema is str else ['{"text": "A\ud83d', '\ude00"}']
    server.script("m", [stream_of(*split), stream_of("".join(split))])
    apart = await items(kind, correcting(server, kind, schema))
    whole = await items(kind, correcting(server, kind, schema))
    expected = "A\U0001f600" if schema is str else Note(text="A\U0001f600")
    assert [type(i) for i in apart] == [type(i) for i in whole]
    assert apart[-1] == whole[-1] == Final(expected, 1)
    assert len(server.requests_for("m")) == 2  # one call each: no correction


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("schema", [str, Note], ids=["str", "model"])
async def test_a_lone_surrogate_is_a_correction_streamed_or_not(
    server: ScriptedOpenAI, kind: str, schema: Any
) -> None:
    bad, good = (
        ('"A\ud83d"', '"ok"') if schema is str else ('{"text": "A\ud83d"}', '{"text": "ok"}')
    )
    completion = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": bad}, "finish_reason": "stop"}
        ],
    }
    server.script("m", [stream_of(bad), good, Reply.raw(completion), good])
    streamed = await items(kind, correcting(server, kind, schema))
    called = await call(kind, correcting(server, kind, schema, stream=False))
    expected = "ok" if schema is str else Note(text="ok")
    assert isinstance(streamed[0], Reset)
    assert streamed[-1] == Final(expected, 2)
    assert called == expected
    turns = [r.body["messages"][-1]["content"] for r in server.requests_for("m")]
    assert "broken character" in turns[1]
    assert "broken character" in turns[3]


@pytest.mark.parametrize("kind", KINDS)
async def test_invalid_utf8_split_over_two_events_is_a_correction(
    server: ScriptedOpenAI, kind: str
) -> None:
    # U+1F600's four bytes, two in each event: neither event is UTF-8 text
    first = b'{"choices": [{"index": 0, "delta": {"content": "{\\"text\\": \\"A\xf0\x9f"}}]}'
    second = b'{"choices": [{"index": 0, "delta": {"content": "\x98\x80\\"}"}}]}'
    server.script("m", [sse(event(first), event(second), event(b"[DONE]")), '{"text": "ok"}'])
    events: list[Event] = []
    with subscribe(events.append):
        got = await items(kind, correcting(server, kind, Note))
    assert isinstance(got[0], Reset)
    assert "not UTF-8" in got[0].reason
    assert got[-1] == Final(Note(text="ok"), 2)
    assert [e.failure for e in events if e.kind == "correction"] == ["cut_off"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("schema", [str, Optional[str]], ids=["str", "optional"])  # noqa: UP045
@pytest.mark.parametrize("stream", [False, True], ids=["called", "streamed"])
async def test_a_bare_number_for_a_str_schema_is_repaired(
    server: ScriptedOpenAI, kind: str, schema: Any, stream: bool
) -> None:
    server.script("m", ["1"])
    fn = correcting(server, kind, schema, stream=stream)
    events: list[Event] = []
    with subscribe(events.append):
        assert await call(kind, fn) == "1"
    assert len(server.requests_for("m")) == 1
    assert not [e for e in events if e.kind == "correction"]


# --- 8. a stream that ends without a finish reason ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_that_stops_mid_value_without_a_finish_reason_is_cut_off(
    server: ScriptedOpenAI, kind: str
) -> None:
    cut = stream_of('{"text": ', '"hal', finish=None, done=False)
    server.script("m", [cut, '{"text": "ok"}'])
    events: list[Event] = []
    with subscribe(events.append):
        got = await items(kind, correcting(server, kind, Note))
    assert isinstance(got[0], Reset)
    assert "without a finish reason" in got[0].reason
    assert got[-1] == Final(Note(text="ok"), 2)
    assert [e.failure for e in events if e.kind == "correction"] == ["cut_off"]
    assert "cut off" in correction_turns(server)[0]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_whole_reply_without_a_finish_reason_is_taken(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("m", [stream_of('{"text": ', '"hi"}', finish=None, done=False)])
    got = await items(kind, correcting(server, kind, Note))
    assert got[-1] == Final(Note(text="hi"), 1)
    assert len(server.requests_for("m")) == 1
