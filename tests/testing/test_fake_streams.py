"""`FakeStream`: a scripted stream of a reply, in process, read by refinekit's stream reader."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from refinekit import Usage
from refinekit._providers import sdk_streams as streams
from refinekit._providers.sdk_streams import Delta, StreamInterrupted
from refinekit.testing import FakeStream

INVOICE = '{"number": "A-1", "total": 12.5}'


def read(kind: str, stream: FakeStream, n: int | None = None) -> list[Delta]:
    """Read `stream` sync or async (its first `n` deltas, then close the reader)."""
    if kind == "sync":
        assert streams.is_stream(stream)
        reader = streams.read(stream)
        if n is None:
            return list(reader)
        seen = [next(reader) for _ in range(n)]
        reader.close()
        return seen

    async def main() -> list[Delta]:
        assert streams.is_async_stream(stream)
        reader = streams.aread(stream)
        if n is None:
            return [d async for d in reader]
        seen = [await reader.__anext__() for _ in range(n)]
        await reader.aclose()
        return seen

    return asyncio.run(main())


def test_a_text_stream_yields_its_pieces_and_finishes(kind: str) -> None:
    stream = FakeStream(INVOICE, chunks=4)
    deltas = read(kind, stream)
    assert [d.text for d in deltas] == list(stream.pieces)
    assert "".join(stream.pieces) == INVOICE
    assert len(stream.pieces[0]) == 4
    assert (stream.sent, stream.finished, stream.closed, stream.client_closed) == (
        8,
        True,
        True,
        False,
    )


def test_pieces_by_default_are_words_as_the_scripted_server_cuts_them() -> None:
    assert FakeStream("a b  c").pieces == ("a", " b", "  c")
    assert FakeStream("abc", chunks=["a", "bc"]).pieces == ("a", "bc")


def test_an_openai_shaped_stream_says_its_finish_reason_and_usage(kind: str) -> None:
    stream = FakeStream(
        INVOICE,
        chunks=10,
        shape="openai",
        finish_reason="length",
        prompt_tokens=7,
        completion_tokens=3,
    )
    deltas = read(kind, stream)
    assert "".join(d.text for d in deltas) == INVOICE
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]
    assert deltas[-1].usage == Usage(model_calls=1, prompt_tokens=7, completion_tokens=3)


def test_closing_the_reader_closes_the_fake_early(kind: str) -> None:
    stream = FakeStream(INVOICE, chunks=2)
    seen = read(kind, stream, n=3)
    assert "".join(d.text for d in seen) == '{"numb'
    assert (stream.sent, stream.finished, stream.client_closed) == (3, False, True)
    assert list(stream) == []  # closed: nothing more


def test_a_stream_that_breaks_is_interrupted_after_the_pieces_sent(kind: str) -> None:
    stream = FakeStream(INVOICE, chunks=4, break_after=2)
    with pytest.raises(StreamInterrupted, match="the connection broke") as broke:
        read(kind, stream)
    assert broke.value.chunks == 2
    assert (stream.sent, stream.finished, stream.closed) == (2, False, True)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"chunks": ["a"]}, ValueError, "do not join"),
        ({"chunks": 0}, ValueError, "at least 1"),
        ({"chunks": "ab"}, TypeError, "a list of str or a size"),
        ({"break_after": 5}, ValueError, r"break_after is 0\.\.2"),
        ({"finish_reason": "length"}, ValueError, "shape='openai'"),
        ({"prompt_tokens": 3}, ValueError, "shape='openai'"),
        ({"shape": "anthropic"}, ValueError, 'is "text" or "openai"'),
    ],
)
def test_bad_options_say_what_to_fix(options: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        FakeStream("ab", chunks=options.pop("chunks", 1), **options)


pytest_plugins = ["pytester"]


def test_the_fake_stream_fixture_makes_streams_and_keeps_them(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        def first_line(stream):
            text = ""
            for piece in stream:
                text += piece
                if "\\n" in text:
                    stream.close()  # stop reading: the rest is not needed
                    break
            return text.partition("\\n")[0]

        def test_stops_early(fake_stream):
            one = fake_stream("Refunds take 14 days.\\nDetails follow...", chunks=5)
            two = fake_stream("Short.")
            assert first_line(one) == "Refunds take 14 days."
            assert first_line(two) == "Short."
            assert fake_stream.made == [one, two]
            assert one.client_closed and one.sent == 5
            assert two.finished and not two.client_closed
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
