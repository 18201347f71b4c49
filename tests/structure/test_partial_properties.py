"""Property tests of the partial reader: a valid reply, cut into any chunks, never fails before
its end, and what it shows is what the whole reply validates to; a bad field fails exactly when
its value closes. Read through the stream reader, sync (`streams.read`) and async
(`streams.aread`) alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, field_validator

from refinekit import InSource
from refinekit._providers import sdk_streams as streams
from refinekit._structure.partial_validation import PartialReader, Progress


class Line(BaseModel):
    sku: str
    qty: int
    price: float | None = None


class Invoice(BaseModel):
    number: Annotated[str, InSource]
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    total: Decimal
    issued: date | None = None
    paid: bool = False
    lines: list[Line] = []
    notes: dict[str, list[int]] = {}

    @field_validator("vendor")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the vendor is blank")
        return value


SOURCE_PREFIX = "the invoice's text: "

# JSON's own characters often (quotes, escapes, brackets, commas inside strings), and any other
texts = st.text(
    st.sampled_from('"\\,:{}[] \n/') | st.characters(codec="utf-8", exclude_categories=["Cs"]),
    max_size=12,
)
lines = st.fixed_dictionaries(
    {"sku": texts, "qty": st.integers(-(10**12), 10**12)},
    optional={"price": st.none() | st.floats(allow_nan=False, allow_infinity=False)},
)
invoices = st.fixed_dictionaries(
    {
        "number": texts,
        "vendor": texts.filter(lambda s: bool(s.strip())),
        "currency": st.sampled_from(["EUR", "USD", "GBP"]),
        "total": st.decimals(allow_nan=False, allow_infinity=False, places=2).map(float),
    },
    optional={
        "issued": st.none() | st.dates().map(date.isoformat),
        "paid": st.booleans(),
        "lines": st.lists(lines, max_size=4),
        "notes": st.dictionaries(texts, st.lists(st.integers(), max_size=3), max_size=3),
    },
)


@st.composite
def replies(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[str]]:
    """A valid invoice's JSON (as a model might space it), and the text cut into chunks."""
    value = draw(invoices)
    keys = list(value)
    ordered = {k: value[k] for k in draw(st.permutations(keys))}
    text = json.dumps(
        ordered,
        indent=draw(st.none() | st.integers(0, 3)),
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([None, (",", ":"), (" , ", " : ")])),
    )
    text = draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", "\n"]))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False) if text[a:b]]
    return text, ordered, chunks


def source_of(value: dict[str, Any]) -> dict[str, str]:
    return {"source": SOURCE_PREFIX + str(value["number"])}


def check(
    text: str, chunks: list[str], steps: list[Progress[Any]], context: dict[str, str]
) -> None:
    """No failure, readable throughout, closed only at the end, each value the final's part."""
    final = Invoice.model_validate_json(text, context=context)
    assert all(not s.failures for s in steps), [s.failures for s in steps]
    assert all(s.readable for s in steps)
    closing = _chunk_at(chunks, len(text.rstrip()) - 1)  # the chunk with the last "}"
    assert [s.closed for s in steps] == [i >= closing for i in range(len(steps))]
    for step in steps:
        shown = step.value or {}
        assert all(shown[name] == getattr(final, name) for name in shown)
    assert set(steps[-1].value or {}) == set(json.loads(text))


def read_sync(chunks: list[str], context: dict[str, str]) -> list[Progress[Any]]:
    reader: PartialReader[Invoice] = PartialReader(Invoice, context=context)
    with streams.read(iter(chunks)) as deltas:
        return [reader.feed(delta.text) for delta in deltas]


async def read_async(chunks: list[str], context: dict[str, str]) -> list[Progress[Any]]:
    async def stream() -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    reader: PartialReader[Invoice] = PartialReader(Invoice, context=context)
    async with streams.aread(stream()) as deltas:
        return [reader.feed(delta.text) async for delta in deltas]


chunkings = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@chunkings
@given(replies())
def test_a_valid_reply_in_any_chunks_never_fails_before_its_end_sync(
    reply: tuple[str, dict[str, Any], list[str]],
) -> None:
    text, value, chunks = reply
    context = source_of(value)
    check(text, chunks, read_sync(chunks, context), context)


@chunkings
@given(replies())
def test_a_valid_reply_in_any_chunks_never_fails_before_its_end_async(
    reply: tuple[str, dict[str, Any], list[str]],
) -> None:
    text, value, chunks = reply
    context = source_of(value)
    check(text, chunks, asyncio.run(read_async(chunks, context)), context)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies(), st.sampled_from(["currency", "total", "vendor", "number"]), st.data())
def test_a_bad_field_fails_in_the_chunk_that_closes_it_and_not_before(
    reply: tuple[str, dict[str, Any], list[str]], bad: str, data: st.DataObject
) -> None:
    _, value, _ = reply
    spoilt = {**value, bad: {"currency": "XXX", "total": "many", "vendor": " ", "number": 7}[bad]}
    text, end = "{", 0
    for key, item in spoilt.items():
        text += ("" if text == "{" else ", ") + f"{json.dumps(key)}: {json.dumps(item)}"
        if key == bad:
            end = len(text)  # the "," or "}" that follows closes the bad field's value
    text += "}"
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=20)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False)]
    context = {"source": f"{SOURCE_PREFIX}{value['number']} 7"}
    steps = read_sync(chunks, context)
    closes = _chunk_at(chunks, end)
    assert [i for i, s in enumerate(steps) if s.failures] == [closes]
    (failure,) = steps[closes].failures
    assert failure["loc"] == (bad,)
    assert failure["input"] == spoilt[bad]
    expected = {
        "currency": "literal_error",
        "total": "decimal_parsing",
        "vendor": "value_error",
        "number": "string_type",
    }
    assert failure["type"] == expected[bad]
    assert bad not in (steps[-1].value or {})


def _chunk_at(chunks: list[str], position: int) -> int:
    """The index of the chunk holding the text's character at `position`."""
    at = 0
    for i, chunk in enumerate(chunks):
        at += len(chunk)
        if position < at:
            return i
    raise AssertionError(f"no chunk holds position {position}")
