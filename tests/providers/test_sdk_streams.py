"""The SDKs' real streams, over HTTP from the scripted server, read by the one stream reader.

`openai`'s `Stream` / `AsyncStream` and its `.stream()` manager, `anthropic`'s raw event
streams and its `messages.stream()` manager, and LiteLLM's `CustomStreamWrapper`, each made by
its own client against `ScriptedOpenAI`; closing the reader closes the HTTP response (the
server sees the client leave), and a broken stream is a `StreamInterrupted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from refinekit import Usage
from refinekit._providers import sdk_streams as streams
from refinekit._providers.sdk_streams import Delta, StreamInterrupted
from refinekit.testing import Reply, ScriptedOpenAI

anthropic = pytest.importorskip("anthropic")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
litellm = pytest.importorskip("litellm")

pytestmark = pytest.mark.filterwarnings(
    # litellm's message types use TypedDict `ReadOnly` items (litellm's own warning)
    "ignore:Items? .* on TypedDict class .* using the .ReadOnly.:UserWarning"
)

USER = [{"role": "user", "content": "the invoice"}]
INVOICE = '{"number": "A-1", "total_cents": 1250}'


Opener = Callable[[Any], Any]
"""Open a stream with a client (sync, or a coroutine for an async client)."""


def run(
    kind: str, server: ScriptedOpenAI, client: str, open_stream: Opener, n: int | None = None
) -> tuple[list[Delta], int]:
    """Open a stream on a fresh client and read it (its first `n` deltas, then close it).

    `client` is "openai", "anthropic" or "none" (LiteLLM makes its own); the client is sync or
    async by `kind`, and closed afterwards. Closing the reader must end the stream on the
    server before the client is closed (`server.streamed` times out otherwise). Returns the
    deltas read and the chunks counted.
    """
    made: dict[str, Callable[[], Any]] = {
        "openai": server.client if kind == "sync" else server.async_client,
        "anthropic": server.anthropic_client if kind == "sync" else server.async_anthropic_client,
        "none": contextlib.nullcontext if kind == "sync" else NoClient,
    }
    if kind == "sync":
        with made[client]() as opened:
            reader = streams.read(open_stream(opened))
            if n is None:
                return list(reader), reader.chunks
            seen = [next(reader) for _ in range(n)]
            reader.close()
            server.streamed(wait=2)  # the server saw the stream end before the client closed
            return seen, reader.chunks

    async def main() -> tuple[list[Delta], int]:
        async with made[client]() as opened:
            stream = open_stream(opened)
            if asyncio.iscoroutine(stream):
                stream = await stream
            reader = streams.aread(stream)
            if n is None:
                return [d async for d in reader], reader.chunks
            seen = [await reader.__anext__() for _ in range(n)]
            await reader.aclose()
            server.streamed(wait=2)
            return seen, reader.chunks

    return asyncio.run(main())


class NoClient:
    """An async context manager with no client in it."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def text(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def arguments(deltas: list[Delta]) -> str:
    return "".join(d.tool_arguments for d in deltas)


def last_usage(deltas: list[Delta]) -> Usage | None:
    used = [d.usage for d in deltas if d.usage is not None]
    return used[-1] if used else None


def reason(deltas: list[Delta]) -> str | None:
    said = [d.finish_reason for d in deltas if d.finish_reason is not None]
    return said[-1] if said else None


# --- openai -----------------------------------------------------------------------------------


def create(**kwargs: Any) -> Opener:
    """`chat.completions.create(model="m", stream=True)` on the client given."""
    return lambda client: client.chat.completions.create(
        model="m", messages=USER, stream=True, **kwargs
    )


def test_an_openai_stream_gives_its_text_usage_finish_reason_and_model(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("m", Reply.text(INVOICE, chunks=5, prompt_tokens=8, completion_tokens=6))
    opened = create(stream_options={"include_usage": True})
    deltas, chunks = run(kind, server, "openai", opened)
    assert text(deltas) == INVOICE
    assert chunks == len(deltas) == 1 + 8 + 1 + 1  # role, pieces, finish, usage
    assert reason(deltas) == "stop"
    assert last_usage(deltas) == Usage(model_calls=1, prompt_tokens=8, completion_tokens=6)
    assert {d.model for d in deltas} == {"m"}
    assert type(deltas[0].raw).__name__ == "ChatCompletionChunk"


def test_an_openai_tool_call_stream_gives_its_arguments_and_name(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("m", Reply.tool_call("Invoice", INVOICE, chunks=3))
    deltas, _ = run(kind, server, "openai", create())
    assert arguments(deltas) == INVOICE
    assert [d.tool_name for d in deltas if d.tool_name] == ["Invoice"]
    assert {d.tool_index for d in deltas} == {0}
    assert text(deltas) == ""
    assert reason(deltas) == "tool_calls"


def test_an_openai_stream_cut_off_says_length(server: ScriptedOpenAI, kind: str) -> None:
    server.script("m", Reply.text('{"number": "A-', finish_reason="length"))
    deltas, _ = run(kind, server, "openai", create())
    assert reason(deltas) == "length"


def test_closing_the_reader_closes_the_http_response_so_the_server_stops(
    server: ScriptedOpenAI, kind: str
) -> None:
    """An early abort: the stream stalls after 3 chunks until the client leaves."""
    server.script("m", Reply.hang(after=3, then=Reply.text(INVOICE, chunks=2)))
    seen, _ = run(kind, server, "openai", create(), n=4)  # the role chunk and 3 pieces
    assert text(seen) == '{"numb'
    (record,) = server.streamed()
    assert (record.sent, record.chunks, record.client_closed) == (3, 19, True)
    assert not record.finished


def test_the_openai_stream_manager_is_entered_and_exited(server: ScriptedOpenAI, kind: str) -> None:
    server.script("m", [Reply.text(INVOICE, chunks=9), Reply.hang(after=1, then="a b c")])

    def manager(client: Any) -> Any:
        made = client.chat.completions.stream(model="m", messages=USER)
        assert streams.is_stream(made) is (kind == "sync")
        assert streams.is_async_stream(made) is (kind == "async")
        return made

    deltas, _ = run(kind, server, "openai", manager)
    assert text(deltas) == INVOICE
    assert reason(deltas) == "stop"
    seen, _ = run(kind, server, "openai", manager, n=2)
    assert text(seen) == "a"
    assert server.streamed()[-1].client_closed


def test_a_manager_closed_before_it_is_entered_sends_nothing(
    server: ScriptedOpenAI, kind: str
) -> None:
    """Its request is discarded, never sent (and an async one's coroutine closed)."""
    server.script("m", "never sent")
    run(kind, server, "openai", lambda c: c.chat.completions.stream(model="m", messages=USER), 0)
    run(
        kind,
        server,
        "anthropic",
        lambda c: c.messages.stream(model="m", max_tokens=5, messages=USER),
        0,
    )
    assert server.requests == []


def test_an_openai_stream_that_drops_is_interrupted_with_the_chunks_read(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.disconnect(after=2, then=Reply.text(INVOICE, chunks=4)),
            Reply.malformed(after=1, then=Reply.text(INVOICE, chunks=4)),
        ],
    )
    with pytest.raises(StreamInterrupted, match="the connection broke") as dropped:
        run(kind, server, "openai", create())
    assert dropped.value.chunks == 3  # the role chunk and 2 pieces
    assert "incomplete chunked read" in str(dropped.value.__cause__)
    with pytest.raises(StreamInterrupted, match="is not JSON") as spoilt:
        run(kind, server, "openai", create())
    assert spoilt.value.chunks == 2


def test_a_stalled_openai_stream_that_times_out_is_interrupted(server: ScriptedOpenAI) -> None:
    server.script("m", Reply.hang(after=1, then="a b"))
    with server.client(timeout=0.2) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        reader = streams.read(stream)
        with pytest.raises(StreamInterrupted, match="timed out"):
            list(reader)
        assert reader.closed


def test_an_http_error_before_the_stream_is_the_sdks_own(server: ScriptedOpenAI) -> None:
    """Not an interruption: the request failed before any stream existed."""
    import openai

    server.script("m", Reply.error(401, "bad key"))
    with server.client() as client, pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m", messages=USER, stream=True)


# --- anthropic --------------------------------------------------------------------------------


def messages(client: Any) -> Any:
    """`messages.create(model="c", stream=True)` on the client given."""
    return client.messages.create(model="c", max_tokens=50, messages=USER, stream=True)


def test_an_anthropic_stream_gives_its_text_usage_and_stop_reason(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("c", Reply.text(INVOICE, chunks=10, prompt_tokens=12, completion_tokens=9))
    deltas, chunks = run(kind, server, "anthropic", messages)
    assert text(deltas) == INVOICE
    assert chunks == len(deltas) == 2 + 4 + 3  # start, block start, pieces, stops, delta
    assert deltas[0].usage == Usage(model_calls=1, prompt_tokens=12, completion_tokens=1)
    assert last_usage(deltas) == Usage(model_calls=1, prompt_tokens=12, completion_tokens=9)
    assert reason(deltas) == "stop"
    assert deltas[0].model == "c"


def test_an_anthropic_tool_use_stream_gives_the_input_json(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script("c", Reply.tool_call("Invoice", INVOICE, chunks=5))
    deltas, _ = run(kind, server, "anthropic", messages)
    assert arguments(deltas) == INVOICE
    assert [d.tool_name for d in deltas if d.tool_name] == ["Invoice"]
    assert reason(deltas) == "tool_calls"


def test_the_anthropic_stream_manager_reads_without_its_repeated_events(
    server: ScriptedOpenAI, kind: str
) -> None:
    """`messages.stream()`: the helper's own `text` events repeat the raw deltas: read once."""
    server.script(
        "c",
        [
            Reply.text(INVOICE, chunks=10, finish_reason="length"),
            Reply.hang(after=1, then="a b c"),
        ],
    )

    def manager(client: Any) -> Any:
        return client.messages.stream(model="c", max_tokens=50, messages=USER)

    deltas, chunks = run(kind, server, "anthropic", manager)
    assert text(deltas) == INVOICE
    assert chunks == 9
    assert reason(deltas) == "length"
    seen, _ = run(kind, server, "anthropic", manager, n=3)
    assert text(seen) == "a"
    assert server.streamed()[-1].client_closed


def test_an_anthropic_stream_that_drops_is_interrupted(server: ScriptedOpenAI, kind: str) -> None:
    server.script("c", Reply.disconnect(after=1, then="a b c"))
    with pytest.raises(StreamInterrupted, match="the connection broke") as dropped:
        run(kind, server, "anthropic", messages)
    assert dropped.value.chunks == 3  # message_start, content_block_start, one delta


# --- LiteLLM ------------------------------------------------------------------------------------


def litellm_stream(server: ScriptedOpenAI, kind: str, **kwargs: Any) -> Opener:
    """`litellm.completion(stream=True)` (or `acompletion`) to the scripted server."""
    options = {
        "model": "openai/m",
        "api_base": server.base_url,
        "api_key": "scripted-key",
        "messages": USER,
        "stream": True,
        **kwargs,
    }
    call = litellm.completion if kind == "sync" else litellm.acompletion
    return lambda _: call(**options)


LITELLM_WARNINGS = [  # LiteLLM's own: its clients and loops, its use of pydantic
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]


@LITELLM_WARNINGS[0]
@LITELLM_WARNINGS[1]
@LITELLM_WARNINGS[2]
def test_a_litellm_stream_is_read_as_openai_chunks_and_told_sync_or_async(
    server: ScriptedOpenAI, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.text(INVOICE, chunks=6, finish_reason="length"),
            Reply.tool_call("Invoice", INVOICE, chunks=20),
            Reply.hang(after=1, then="a b c"),
            "x",
        ],
    )
    opened = litellm_stream(server, kind, stream_options={"include_usage": True})
    deltas, _ = run(kind, server, "none", opened)
    assert text(deltas) == INVOICE
    assert reason(deltas) == "length"
    usage = last_usage(deltas)
    assert usage is not None
    assert usage.completion_tokens == 4
    deltas, _ = run(kind, server, "none", litellm_stream(server, kind))
    assert arguments(deltas) == INVOICE
    assert [d.tool_name for d in deltas if d.tool_name] == ["Invoice"]
    seen, _ = run(kind, server, "none", litellm_stream(server, kind), n=2)
    assert text(seen) == "a"
    assert server.streamed()[-1].client_closed

    def told(wrapper: Any) -> Any:
        assert type(wrapper).__name__ == "CustomStreamWrapper"
        assert streams.is_stream(wrapper) is (kind == "sync")
        assert streams.is_async_stream(wrapper) is (kind == "async")
        if kind == "async":
            with pytest.raises(TypeError, match="aread"):
                streams.read(wrapper)
        return wrapper

    def open_and_tell(client: Any) -> Any:
        made = litellm_stream(server, kind)(client)
        if kind == "sync":
            return told(made)

        async def later() -> Any:
            return told(await made)

        return later()

    run(kind, server, "none", open_and_tell, n=0)


@LITELLM_WARNINGS[0]
@LITELLM_WARNINGS[1]
@LITELLM_WARNINGS[2]
def test_a_litellm_stream_that_drops_is_interrupted(server: ScriptedOpenAI, kind: str) -> None:
    server.script("m", Reply.disconnect(after=1, then="a b c"))
    with pytest.raises(StreamInterrupted, match="the stream broke") as broke:
        run(kind, server, "none", litellm_stream(server, kind))
    assert type(broke.value.__cause__).__name__ == "MidStreamFallbackError"
