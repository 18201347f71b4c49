"""The stream reader: every SDK's stream read as `Delta`s, closed on demand, sync and async.

This module reads plain iterators and chunk objects built with their SDK's own classes;
tests/providers/test_sdk_streams.py reads the real clients' streams over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from streaming_helpers import Source

from refinekit import Usage
from refinekit._providers import sdk_streams as streams
from refinekit._providers.sdk_streams import Delta, StreamInterrupted


def read_all(kind: str, stream: Any) -> list[Delta]:
    """Every delta of a stream, read with `read` (sync) or `aread` (async)."""
    if kind == "sync":
        return list(streams.read(stream))

    async def main() -> list[Delta]:
        return [delta async for delta in streams.aread(stream)]

    return asyncio.run(main())


def first_then_close(kind: str, stream: Any) -> Delta:
    """Read one delta, then close the reader: what an early abort does."""
    if kind == "sync":
        reader = streams.read(stream)
        delta = next(reader)
        reader.close()
        assert reader.closed
        assert list(reader) == []
        return delta

    async def main() -> Delta:
        reader = streams.aread(stream)
        delta = await reader.__anext__()
        await reader.aclose()
        assert reader.closed
        assert [d async for d in reader] == []
        return delta

    return asyncio.run(main())


# --- plain text streams ---------------------------------------------------------------------------


def test_a_text_stream_gives_one_delta_per_text_in_order(kind: str) -> None:
    source = Source('{"a": ', "1", "}")
    deltas = read_all(kind, source.of(kind))
    assert [d.text for d in deltas] == ['{"a": ', "1", "}"]
    assert [d.raw for d in deltas] == ['{"a": ', "1", "}"]
    assert all(d.finish_reason is None and d.usage is None for d in deltas)
    assert source.closed


def test_closing_the_reader_closes_the_stream_and_nothing_more_is_read(kind: str) -> None:
    source = Source("a", "b", "c")
    delta = first_then_close(kind, source.of(kind))
    assert delta.text == "a"
    assert source.closed
    assert source.given == 1


def test_a_reader_is_a_context_manager_that_closes_the_stream(kind: str) -> None:
    source = Source("a", "b")
    if kind == "sync":
        with streams.read(source.sync()) as reader:
            assert next(reader).text == "a"
    else:

        async def main() -> None:
            async with streams.aread(source.async_()) as reader:
                assert (await reader.__anext__()).text == "a"

        asyncio.run(main())
    assert source.closed
    assert source.given == 1


def test_the_reader_counts_the_chunks_read(kind: str) -> None:
    if kind == "sync":
        reader = streams.read(iter(["a", "b", "c"]))
        next(reader)
        next(reader)
        assert reader.chunks == 2
        assert [d.text for d in reader] == ["c"]
        assert reader.chunks == 3
        assert reader.closed
    else:

        async def main() -> None:
            reader = streams.aread(Source("a", "b", "c").async_())
            await reader.__anext__()
            assert reader.chunks == 1
            assert [d.text async for d in reader] == ["b", "c"]
            assert reader.chunks == 3

        asyncio.run(main())


def test_aread_reads_a_sync_stream_too() -> None:
    source = Source("a", "b")

    async def main() -> list[str]:
        return [d.text async for d in streams.aread(source.sync())]

    assert asyncio.run(main()) == ["a", "b"]
    assert source.closed


def test_read_refuses_an_async_stream_and_says_to_use_aread() -> None:
    stream = Source("a").async_()
    with pytest.raises(TypeError, match=r"async stream: read it with aread\(\)"):
        streams.read(stream)
    asyncio.run(stream.aclose())


@pytest.mark.parametrize(
    "value", ["text", b"bytes", ["a", "b"], {"choices": []}, None, 3], ids=repr
)
def test_text_lists_dicts_and_other_values_are_not_streams(value: Any) -> None:
    assert not streams.is_stream(value)
    assert not streams.is_async_stream(value)
    with pytest.raises(TypeError, match="not a stream"):
        streams.read(value)
    with pytest.raises(TypeError, match="not a stream"):
        streams.aread(value)


def test_sync_and_async_streams_are_told_apart() -> None:
    sync, async_ = Source("a").sync(), Source("a").async_()
    assert streams.is_stream(sync)
    assert not streams.is_async_stream(sync)
    assert streams.is_async_stream(async_)
    assert not streams.is_stream(async_)
    asyncio.run(async_.aclose())


def test_a_connection_error_mid_stream_is_an_interruption_with_the_chunks_read(kind: str) -> None:
    cause = ConnectionResetError("peer reset")
    source = Source("a", "b", error=cause)
    with pytest.raises(StreamInterrupted, match="the connection broke") as caught:
        read_all(kind, source.of(kind))
    assert caught.value.chunks == 2
    assert caught.value.__cause__ is cause
    assert source.closed


def test_a_bug_in_a_generator_propagates_unchanged(kind: str) -> None:
    source = Source("a", error=KeyError("oops"))
    with pytest.raises(KeyError, match="oops"):
        read_all(kind, source.of(kind))


def test_an_item_of_no_known_shape_is_a_type_error_naming_it_and_the_stream_is_closed(
    kind: str,
) -> None:
    class Odd:
        pass

    def items() -> Iterator[Any]:
        yield "a"
        yield Odd()

    async def aitems() -> AsyncIterator[Any]:
        for item in items():
            yield item

    with pytest.raises(TypeError, match="yielded a Odd"):
        read_all(kind, items() if kind == "sync" else aitems())


# --- chunks of each SDK, built with its own classes -----------------------------------------------


def openai_chunks(*deltas: dict[str, Any], usage: tuple[int, int] | None = None) -> list[Any]:
    """OpenAI `ChatCompletionChunk`s: one per delta, the last with `finish_reason`."""
    from openai.types.chat import ChatCompletionChunk

    def chunk(**fields: Any) -> Any:
        head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0}
        return ChatCompletionChunk.model_validate({**head, "model": "gpt-test", **fields})

    made = []
    for i, delta in enumerate(deltas):
        reason = delta.pop("finish_reason", None)
        made.append(
            chunk(
                choices=[{"index": 0, "delta": delta, "finish_reason": reason}]
                if delta or reason
                else [],
                **({"usage": None} if i else {}),
            )
        )
    if usage is not None:
        made.append(
            chunk(
                choices=[],
                usage={
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": sum(usage),
                },
            )
        )
    return made


def test_openai_chunks_give_text_finish_reason_usage_and_model(kind: str) -> None:
    chunks = openai_chunks(
        {"role": "assistant", "content": ""},
        {"content": '{"a": '},
        {"content": "1}"},
        {"finish_reason": "length"},
        usage=(12, 3),
    )
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    assert "".join(d.text for d in deltas) == '{"a": 1}'
    assert [d.finish_reason for d in deltas] == [None, None, None, "length", None]
    assert deltas[-1].usage == Usage(model_calls=1, prompt_tokens=12, completion_tokens=3)
    assert all(d.model == "gpt-test" for d in deltas)
    assert [d.raw for d in deltas] == chunks


def test_openai_tool_call_chunks_give_the_arguments_name_and_number(kind: str) -> None:
    def call(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
        function: dict[str, Any] = {"arguments": arguments}
        if name is not None:
            function["name"] = name
        return {"index": index, "function": function, **({"id": f"c{index}"} if name else {})}

    chunks = openai_chunks(
        {"role": "assistant", "tool_calls": [call(0, "", "Invoice")]},
        {"tool_calls": [call(0, '{"number": ')]},
        {"tool_calls": [call(0, '"A-1"}')]},
        {"tool_calls": [call(1, "{}", "Other"), call(0, "")]},
        {"finish_reason": "tool_calls"},
    )
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    first = "".join(d.tool_arguments for d in deltas if d.tool_index == 0)
    assert first == '{"number": "A-1"}'
    assert [(d.tool_name, d.tool_index) for d in deltas if d.tool_name] == [
        ("Invoice", 0),
        ("Other", 1),
    ]
    assert len(deltas) == 6  # the chunk with parts of two calls gives one delta per call
    assert deltas[3].raw is deltas[4].raw
    assert deltas[-1].finish_reason == "tool_calls"


def test_anthropic_events_give_text_tool_input_stop_reason_and_usage(kind: str) -> None:
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 1},
    }
    raw = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "Invoice", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": 1'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "}"},
        },
        {"type": "ping"},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    # the SDK's objects (its client drops the pings) and the dict forms alike
    events = [adapter.validate_python(event) for event in raw if event["type"] != "ping"]
    for items in (events, raw):
        deltas = read_all(kind, iter(items) if kind == "sync" else aiter_of(items))
        assert len(deltas) == len(items)
        assert "".join(d.text for d in deltas) == "Hi"
        assert "".join(d.tool_arguments for d in deltas) == '{"a": 1}'
        assert {d.tool_index for d in deltas if d.tool_arguments} == {0}  # renumbered
        assert [d.tool_name for d in deltas if d.tool_name] == ["Invoice"]
        assert deltas[0].usage == Usage(model_calls=1, prompt_tokens=20, completion_tokens=1)
        assert deltas[0].model == "claude-test"
        assert deltas[-2].finish_reason == "length"
        assert deltas[-2].usage == Usage(model_calls=1, prompt_tokens=20, completion_tokens=9)


def test_an_anthropic_error_event_is_an_interruption(kind: str) -> None:
    items = [
        {"type": "ping"},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    with pytest.raises(StreamInterrupted, match="Overloaded") as caught:
        read_all(kind, iter(items) if kind == "sync" else aiter_of(items))
    assert caught.value.chunks == 1


def test_langchain_chunks_give_text_tool_call_chunks_and_added_up_usage(kind: str) -> None:
    from langchain_core.messages import AIMessageChunk

    chunks = [
        AIMessageChunk(content="", usage_metadata=usage_metadata(15, 0)),
        AIMessageChunk(content=[{"type": "text", "text": "Hel", "index": 0}]),
        AIMessageChunk(content="lo"),
        AIMessageChunk(
            content="",
            tool_call_chunks=[{"name": "Invoice", "args": '{"a"', "id": "c1", "index": 3}],
        ),
        AIMessageChunk(content="", tool_call_chunks=[{"args": ": 2}", "index": 3}]),
        AIMessageChunk(
            content="",
            usage_metadata=usage_metadata(0, 7),
            response_metadata={"finish_reason": "stop", "model_name": "gpt-lc"},
        ),
    ]
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    assert "".join(d.text for d in deltas) == "Hello"
    assert "".join(d.tool_arguments for d in deltas) == '{"a": 2}'
    assert [(d.tool_name, d.tool_index) for d in deltas if d.tool_name] == [("Invoice", 0)]
    assert deltas[0].usage == Usage(model_calls=1, prompt_tokens=15, completion_tokens=0)
    assert deltas[-1].usage == Usage(model_calls=1, prompt_tokens=15, completion_tokens=7)
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].model == "gpt-lc"


@pytest.mark.parametrize("sdk", ["openai", "langchain"])
def test_tool_call_parts_without_an_index_go_by_id_and_without_either_continue_the_latest(
    kind: str, sdk: str
) -> None:
    def chunk(name: str | None, call_id: str | None, arguments: str) -> dict[str, Any]:
        """A dict chunk with one part of a tool call that has no `index`."""
        part: dict[str, Any] = {"id": call_id} if call_id else {}
        if sdk == "openai":
            function = {"arguments": arguments, **({"name": name} if name else {})}
            delta = {"tool_calls": [{**part, "function": function}]}
            return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
        part = {**part, "args": arguments, **({"name": name} if name else {})}
        return {"type": "AIMessageChunk", "content": "", "tool_call_chunks": [part]}

    chunks = [
        chunk("first", "call-a", '{"x": '),
        chunk(None, None, "1}"),  # neither an index nor an id: the latest call's
        chunk("second", "call-b", "{"),
        chunk(None, None, "}"),
    ]
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    assert [d.tool_index for d in deltas] == [0, 0, 1, 1]
    assert [d.tool_arguments for d in deltas] == ['{"x": ', "1}", "{", "}"]
    assert [(d.tool_name, d.tool_index) for d in deltas if d.tool_name] == [
        ("first", 0),
        ("second", 1),
    ]


def usage_metadata(inputs: int, outputs: int) -> Any:
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}


async def aiter_of(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


# --- hostile text -----------------------------------------------------------------------------

SMILE = "\U0001f600"  # U+1F600: the surrogate pair \ud83d \ude00 in UTF-16


def test_a_surrogate_pair_split_over_two_chunks_is_given_whole(kind: str) -> None:
    chunks = openai_chunks(
        {"content": '"A\ud83d'}, {"content": '\ude00"'}, {"finish_reason": "stop"}
    )
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    assert "".join(d.text for d in deltas) == f'"A{SMILE}"'
    assert [d.text for d in deltas] == ['"A', f'{SMILE}"', ""]


def test_a_surrogate_pair_split_over_two_text_deltas_or_tool_arguments_is_given_whole(
    kind: str,
) -> None:
    deltas = read_all(kind, Source("A\ud83d", "\ude00!").of(kind))
    assert "".join(d.text for d in deltas) == f"A{SMILE}!"
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a": "\ud83d'}}
    chunks = openai_chunks(
        {"tool_calls": [call]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '\ude00"}'}}]},
    )
    deltas = read_all(kind, iter(chunks) if kind == "sync" else aiter_of(chunks))
    assert "".join(d.tool_arguments for d in deltas) == f'{{"a": "{SMILE}"}}'


def test_a_lone_half_of_a_pair_is_given_as_it_came_even_at_the_end(kind: str) -> None:
    deltas = read_all(kind, Source("A\ud83d", "B", "C\ud83d").of(kind))
    assert "".join(d.text for d in deltas) == "A\ud83dBC\ud83d"


def test_a_chunk_that_is_not_utf8_is_an_interruption(kind: str) -> None:
    cause = UnicodeDecodeError("utf-8", b"\xf0\x9f", 0, 2, "unexpected end of data")
    with pytest.raises(StreamInterrupted, match="not UTF-8 text") as caught:
        read_all(kind, Source("a", error=cause).of(kind))
    assert caught.value.__cause__ is cause


def test_an_error_event_quoting_a_key_is_an_interruption_without_it(kind: str) -> None:
    key = "sk-proj-Zq8v3LmN0pXr7TtY2wQe5RbU9sKd4HfG"
    items = [{"type": "error", "error": {"type": "auth", "message": f"Bad key {key}"}}]
    with pytest.raises(StreamInterrupted) as caught:
        read_all(kind, iter(items) if kind == "sync" else aiter_of(items))
    assert key not in str(caught.value)
    assert key not in caught.value.reason
    assert "[redacted key]" in caught.value.reason
