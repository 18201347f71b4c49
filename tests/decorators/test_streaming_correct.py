"""`@self_correct` over a streamed reply: partial values, the final value, early abort, resets.

Every test runs on a `def` and on an `async def` function (one flow, two drivers). The streams
here are plain (async) iterators of text that count what was read before they were closed;
test_streaming_http.py runs the same rules over real HTTP with the openai and anthropic clients.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel
from streaming_helpers import (
    GOOD,
    INVOICE,
    KINDS,
    USER,
    Invoice,
    Source,
    StreamingModel,
    call,
    chunked,
    collect,
)

import refinekit
from refinekit import (
    BudgetExceeded,
    Event,
    Final,
    InSource,
    Partial,
    Reset,
    ResponseValidationError,
    self_correct,
)


def _not_zero(value: int) -> int:
    if value == 0:
        raise ValueError("a total of zero is no invoice")
    return value


class Checked(BaseModel):
    number: Annotated[str, InSource]
    total_cents: Annotated[int, AfterValidator(_not_zero)]
    note: str = ""


BAD_CURRENCY = '{"number": "A-1", "currency": "GBP", "total_cents": 1250, "note": "' + "x" * 40


def events() -> tuple[list[Event], refinekit.Subscription]:
    seen: list[Event] = []
    return seen, refinekit.subscribe(seen.append)


@pytest.mark.parametrize("kind", KINDS)
def test_the_call_returns_the_validated_value_of_a_streamed_reply(kind: str) -> None:
    source = Source(*chunked(GOOD, 7))
    model = StreamingModel(kind, source)
    extract = self_correct(schema=Invoice)(model.function())
    outcome = extract.outcome(USER) if kind == "sync" else asyncio.run(extract.outcome(USER))
    assert outcome.value == INVOICE
    assert source.given == len(source.parts)
    assert source.closed
    # a plain text stream reports no usage: one call, its tokens estimated (characters / 4)
    assert outcome.usage.model_calls == 1
    assert outcome.usage.completion_tokens == -(-len(GOOD) // 4)
    assert outcome.usage.prompt_tokens == -(-len(USER[0]["content"]) // 4)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_yields_completed_fields_then_the_final_value(kind: str) -> None:
    model = StreamingModel(kind, Source(*chunked(GOOD, 5)))
    extract = self_correct(schema=Invoice)(model.function())
    items = collect(kind, extract, USER)
    partials = [i for i in items if isinstance(i, Partial)]
    assert isinstance(items[-1], Final)
    assert items[-1].final is True
    assert items[-1].value == INVOICE
    assert items[-1].attempt == 1
    assert all(not isinstance(i, Reset) for i in items)
    assert partials
    assert all(p.final is False for p in partials)
    # fields appear only once completed: never a half-written value
    for p in partials:
        for name, value in dict(p.value).items():
            assert value == INVOICE.model_dump()[name]
    seen = [tuple(dict(p.value)) for p in partials]
    assert seen == sorted(seen, key=len)  # each partial has the fields of the one before


@pytest.mark.parametrize("kind", KINDS)
def test_a_completed_field_that_fails_aborts_the_stream_and_corrects(kind: str) -> None:
    bad = Source(*chunked(BAD_CURRENCY, 6))
    model = StreamingModel(kind, bad, Source(*chunked(GOOD, 6)))
    extract = self_correct(early_abort=True, schema=Invoice)(model.function())
    seen, subscription = events()
    with subscription:
        items = collect(kind, extract, USER)
    # closed at once: the chunks after the failed field were never read
    assert bad.closed
    assert bad.given < len(bad.parts)
    assert bad.given <= (BAD_CURRENCY.index("GBP") + 12) // 6 + 1
    resets = [i for i in items if isinstance(i, Reset)]
    assert len(resets) == 1
    reset = resets[0]
    assert reset.cause == "correction"
    assert reset.attempt == 1
    assert reset.aborted
    assert "currency" in reset.reason
    after = items[items.index(reset) + 1 :]
    assert isinstance(after[-1], Final)
    assert after[-1].value == INVOICE
    assert after[-1].attempt == 2
    assert all(p.attempt == 2 for p in after if isinstance(p, Partial))
    # the correction turn explains the failed field, as for a whole reply
    correction = model.received[1][-1]["content"]
    assert '"currency": got "GBP"' in correction
    stream_events = [e for e in seen if e.kind == "stream"]
    assert stream_events[0].aborted is not None
    assert "currency" in stream_events[0].aborted
    assert stream_events[0].chunks == bad.given
    assert stream_events[0].estimated is True
    assert [e.kind for e in seen if e.kind in ("reset", "correction")] == ["reset", "correction"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_plain_call_aborts_early_too(kind: str) -> None:
    bad = Source(*chunked(BAD_CURRENCY, 6))
    model = StreamingModel(kind, bad, GOOD)
    extract = self_correct(schema=Invoice)(model.function())
    assert call(kind, extract, USER) == INVOICE
    assert bad.closed
    assert bad.given < len(bad.parts)


@pytest.mark.parametrize("kind", KINDS)
def test_aborted_streams_spend_the_budget_of_two(kind: str) -> None:
    sources = [Source(*chunked(BAD_CURRENCY, 6)) for _ in range(4)]
    model = StreamingModel(kind, *sources)
    extract = self_correct(schema=Invoice)(model.function())
    with pytest.raises(ResponseValidationError) as raised:
        collect(kind, extract, USER)
    assert raised.value.corrections_used == 2
    assert len(model.received) == 3
    assert all(s.closed and s.given < len(s.parts) for s in sources[:3])
    assert sources[3].given == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_a_lossless_repair_fixes_does_not_abort(kind: str) -> None:
    text = '{"number": 6306, "currency": "EUR", "total_cents": 1250}'
    source = Source(*chunked(text, 4))
    model = StreamingModel(kind, source)
    extract = self_correct(schema=Invoice)(model.function())
    items = collect(kind, extract, USER)
    assert items[-1] == Final(Invoice(number="6306", currency="EUR", total_cents=1250))
    assert source.given == len(source.parts)
    assert len(model.received) == 1
    # without repairs the same reply aborts at the number
    strict = self_correct(schema=Invoice, repair=False, max_corrections=0)
    model = StreamingModel(kind, Source(*chunked(text, 4)))
    with pytest.raises(ResponseValidationError):
        call(kind, strict(model.function()), USER)


@pytest.mark.parametrize("kind", KINDS)
def test_a_repairable_field_does_not_hide_a_later_failure(kind: str) -> None:
    text = '{"number": 6306, "currency": "GBP", "total_cents": 1250, "note": "' + "n" * 50
    bad = Source(*chunked(text, 5))
    model = StreamingModel(kind, bad, GOOD)
    extract = self_correct(schema=Invoice)(model.function())
    assert call(kind, extract, USER) == INVOICE
    assert bad.given < len(bad.parts)  # aborted at the currency, not read to the end


@pytest.mark.parametrize("kind", KINDS)
def test_grounding_and_field_validators_abort_as_their_field_completes(kind: str) -> None:
    source_text = "Invoice A-1 from ACME, total 12.50 EUR"
    invented = '{"number": "Z-9", "total_cents": 1250, "note": "' + "y" * 60 + '"}'
    zero = '{"number": "A-1", "total_cents": 0, "note": "' + "y" * 60 + '"}'
    for reply, field in ((invented, "number"), (zero, "total_cents")):
        bad = Source(*chunked(reply, 5))
        model = StreamingModel(kind, bad, '{"number": "A-1", "total_cents": 1250}')
        extract = self_correct(
            early_abort=True, schema=Checked, validation_context={"source": source_text}
        )(model.function())
        items = collect(kind, extract, USER)
        assert bad.closed, field
        assert bad.given < len(bad.parts), field
        reset = next(i for i in items if isinstance(i, Reset))
        assert field in reset.reason
        assert items[-1].value == Checked(number="A-1", total_cents=1250)


@pytest.mark.parametrize("kind", KINDS)
def test_without_early_abort_a_failed_reply_is_read_to_its_end_and_every_failure_named(
    kind: str,
) -> None:
    source_text = "Invoice A-1 from ACME, total 12.50 EUR"
    # two fields fail: the number as it completes, the total after it
    twice = '{"number": "Z-9", "total_cents": 0, "note": "' + "y" * 40 + '"}'
    good = '{"number": "A-1", "total_cents": 1250}'
    for early_abort in (True, False):
        bad = Source(*chunked(twice, 5))
        model = StreamingModel(kind, bad, Source(*chunked(good, 5)))
        extract = self_correct(
            schema=Checked, validation_context={"source": source_text}, early_abort=early_abort
        )(model.function())
        items = collect(kind, extract, USER)
        assert items[-1] == Final(Checked(number="A-1", total_cents=1250), 2)
        (reset,) = [i for i in items if isinstance(i, Reset)]
        first_try = items[: items.index(reset)]
        correction = model.received[1][-1]["content"]
        assert "number" in correction
        if early_abort:
            assert bad.given < len(bad.parts)
            assert reset.aborted
            assert "total of zero" not in correction  # the stream stopped before the total
        else:
            assert bad.given == len(bad.parts)  # read to its end, as a whole reply
            assert not reset.aborted
            assert "total of zero" in correction  # its correction names both failures
            assert first_try == []  # nothing shown of a reply known to have failed


@pytest.mark.parametrize("kind", KINDS)
def test_an_aborted_replys_template_never_keeps_a_value_half_written_after_the_failed_field(
    kind: str,
) -> None:
    # the chunk that closes the bad currency also begins the total: 87 of 1250
    bad = Source('{"number": "A-1", "currency": "GBP", "total_cents": 87', '50, "note": "x"}')
    model = StreamingModel(kind, bad, GOOD)
    requests: list[refinekit.CorrectionRequest] = []

    def builder(request: refinekit.CorrectionRequest) -> str:
        requests.append(request)
        return request.default()

    extract = self_correct(schema=Invoice, correction=builder)(model.function())
    assert call(kind, extract, USER) == INVOICE
    assert bad.given == 1  # closed at the currency
    (request,) = requests
    # the fields it completed are kept; the total it never finished is a placeholder
    expected = '{"number": "A-1", "currency": "<EUR or USD>", "total_cents": <integer>}'
    assert request.template == expected
    assert "87" not in model.received[1][-1]["content"]
    # a completed field a lossless repair fixes at the end (a number for a string) is kept
    bad = Source('{"number": 6306, "currency": "GBP", "total_cents": 87', "50}")
    model = StreamingModel(kind, bad, GOOD)
    assert call(kind, self_correct(schema=Invoice, correction=builder)(model.function()), USER)
    assert requests[-1].template == (
        '{"number": 6306, "currency": "<EUR or USD>", "total_cents": <integer>}'
    )


def test_early_abort_must_be_a_bool_or_a_resume_mode() -> None:
    with pytest.raises(ValueError, match=r'early_abort must be True, False, "resume", .*\'no\''):
        self_correct(schema=Invoice, early_abort="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"early_abort must be .* got int"):
        self_correct(schema=Invoice, early_abort=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_that_breaks_is_a_cut_off_reply(kind: str) -> None:
    broken = Source('{"number": "A-1", ', '"currency": "EU', error=ConnectionError("reset"))
    model = StreamingModel(kind, broken, GOOD)
    extract = self_correct(early_abort=True, schema=Invoice)(model.function())
    seen, subscription = events()
    with subscription:
        items = collect(kind, extract, USER)
    assert items[-1] == Final(INVOICE, 2)
    correction = next(e for e in seen if e.kind == "correction")
    assert correction.failure == "cut_off"
    stream = next(e for e in seen if e.kind == "stream")
    assert stream.aborted is not None
    assert stream.aborted.startswith("interrupted")
    reset = next(i for i in items if isinstance(i, Reset))
    assert reset.aborted is False  # it broke; it was not closed by refinekit


@pytest.mark.parametrize("kind", KINDS)
def test_a_complete_json_value_from_a_broken_stream_is_still_cut_off(kind: str) -> None:
    model = StreamingModel(kind, Source(GOOD, error=ConnectionError("reset")))
    extract = self_correct(schema=Invoice, max_corrections=0)(model.function())
    with pytest.raises(refinekit.JsonParseError) as raised:
        call(kind, extract, USER)
    assert raised.value.failure == "cut_off"


@pytest.mark.parametrize("kind", KINDS)
def test_closing_the_stream_early_closes_the_models_stream(kind: str) -> None:
    source = Source(*chunked(GOOD, 3))
    model = StreamingModel(kind, source)
    extract = self_correct(schema=Invoice)(model.function())
    if kind == "sync":
        with extract.stream(USER) as items:
            first = next(items)
    else:

        async def main() -> Any:
            async with extract.stream(USER) as items:
                return await items.__anext__()

        first = asyncio.run(main())
    assert isinstance(first, Partial)
    assert source.closed
    assert source.given < len(source.parts)


@pytest.mark.parametrize("kind", KINDS)
def test_a_budget_stops_a_stream_midway(kind: str) -> None:
    long = '{"number": "A-1", "currency": "EUR", "total_cents": 1250, "note": "' + "z" * 400
    source = Source(*chunked(long, 8))
    model = StreamingModel(kind, source)
    extract = self_correct(schema=Invoice, budget=refinekit.Budget(max_tokens=60))(model.function())
    seen, subscription = events()
    with subscription, pytest.raises(BudgetExceeded) as raised:
        collect(kind, extract, USER)
    assert source.closed
    assert source.given < len(source.parts)
    assert raised.value.limit == "max_tokens"
    # the stream's tokens so far are counted as spent (estimated: the server reported none)
    assert raised.value.usage.total_tokens > 60
    stream = next(e for e in seen if e.kind == "stream")
    assert stream.aborted == "budget"
    assert stream.estimated
    assert any(e.kind == "budget" for e in seen)


@pytest.mark.parametrize("kind", KINDS)
def test_the_call_does_not_leak_into_the_callers_context(kind: str) -> None:
    model = StreamingModel(kind, Source(*chunked(GOOD, 5)))
    extract = self_correct(schema=Invoice)(model.function())
    jobs: list[Any] = []
    if kind == "sync":
        for _ in extract.stream(USER):
            jobs.append(refinekit.current_job())
    else:

        async def main() -> None:
            async for _ in extract.stream(USER):
                jobs.append(refinekit.current_job())

        asyncio.run(main())
    assert jobs
    assert all(j is None for j in jobs)


def test_a_sync_function_returning_an_async_stream_is_a_clear_error() -> None:
    source = Source(GOOD)

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> Any:
        return source.async_()

    with pytest.raises(TypeError, match=r"async stream.*async def"):
        extract(USER)


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_reply_streams_as_its_final_value(kind: str) -> None:
    model = StreamingModel(kind, GOOD)
    extract = self_correct(schema=Invoice)(model.function())
    assert collect(kind, extract, USER) == [Final(INVOICE, 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_method_streams(kind: str) -> None:
    class Service:
        def __init__(self) -> None:
            self.model = StreamingModel(kind, Source(*chunked(GOOD, 9)))
            self.fn = self.model.function()

    if kind == "sync":

        class Sync(Service):
            @self_correct(schema=Invoice)
            def extract(self, messages: list[dict[str, Any]]) -> Any:
                return self.fn(messages)

        service: Any = Sync()
    else:

        class Async(Service):
            @self_correct(schema=Invoice)
            async def extract(self, messages: list[dict[str, Any]]) -> Any:
                return await self.fn(messages)

        service = Async()
    items = collect(kind, service.extract, USER)
    assert items[-1] == Final(INVOICE)


# --- any valid reply, cut anywhere, never fails before its end --------------------------------

replies = st.builds(
    lambda number, currency, total, spaces: json.dumps(
        {"number": number, "currency": currency, "total_cents": total},
        indent=spaces,
        ensure_ascii=False,
    ),
    st.text(min_size=0, max_size=12),
    st.sampled_from(["EUR", "USD"]),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from([None, 1, 2]),
)


@st.composite
def cut(draw: st.DrawFn) -> tuple[str, tuple[str, ...]]:
    text = draw(replies)
    points = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0, *points, len(text)]
    return text, tuple(text[a:b] for a, b in itertools.pairwise(bounds) if b > a)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cut())
def test_any_valid_reply_cut_anywhere_never_fails_before_its_end(
    kind: str, case: tuple[str, tuple[str, ...]]
) -> None:
    text, parts = case
    source = Source(*parts)
    model = StreamingModel(kind, source)
    extract = self_correct(schema=Invoice, max_corrections=0)(model.function())
    items = collect(kind, extract, USER)
    assert source.given == len(parts)  # read to its end: never aborted
    assert not any(isinstance(i, Reset) for i in items)
    assert items[-1] == Final(Invoice.model_validate_json(text))
