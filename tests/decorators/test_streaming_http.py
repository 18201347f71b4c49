"""The decorators over real HTTP streams: the openai and anthropic clients, sync and async.

The scripted server streams server-sent events and counts what it sent before the client hung
up. An early abort is checked with a stream that stalls after its failing part
(`Reply.hang(after=N, then=...)`): refinekit must close the response there and send the
correction; a reader that waited for more would time out instead (the clients' timeout is 2 s).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, BeforeValidator, ConfigDict
from streaming_helpers import GOOD, INVOICE, KINDS, USER, Invoice

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


@pytest.fixture(params=["openai", "anthropic"])
def sdk(request: pytest.FixtureRequest) -> str:
    """The SDK whose client a test streams with (each test taking it runs with both)."""
    return str(request.param)


def bad_then_good() -> list[Reply]:
    """A stream held after its second chunk (the currency is wrong by then), then a good one."""
    return [
        Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD)),
        Reply.text(GOOD, chunks=8, prompt_tokens=40, completion_tokens=17),
    ]


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
    """The streams in the order their requests came (`streamed()` lists them as they ended:
    under load, a closed stream's end can be recorded after the next stream's)."""
    order = {id(request): i for i, request in enumerate(server.requests)}
    return sorted(server.streamed("m"), key=lambda s: order[id(s.request)])


async def test_self_correct_closes_the_http_stream_at_a_failed_field_and_corrects(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", bad_then_good())
    extract = self_correct(schema=Invoice, early_abort=True)(streaming(sdk, kind, clients))
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


async def test_without_early_abort_the_failed_http_stream_is_read_to_its_end(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", [Reply.text("".join(BAD), chunks=BAD), Reply.text(GOOD, chunks=8)])
    extract = self_correct(schema=Invoice, early_abort=False)(streaming(sdk, kind, clients))
    items = await collect(kind, extract, USER)
    first, second = streams(server)
    assert first.finished  # every chunk read, the stream ended
    assert not first.client_closed
    assert first.sent == len(BAD)
    assert second.finished
    assert items[0] == Partial({"number": "A-1"}, 1)  # shown before the currency failed
    assert items[1].cause == "correction"
    assert not items[1].aborted
    assert items[-1] == Final(INVOICE, 2)
    # parsed whole: its correction keeps the total read after the failed currency
    correction = server.requests[1].body["messages"][-1]["content"]  # type: ignore[index]
    assert '"currency": got "GBP"' in correction
    assert '"total_cents": 1250}' in correction


async def test_streamed_usage_is_what_the_server_reported_and_an_aborted_stream_is_estimated(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", bad_then_good())
    extract = self_correct(schema=Invoice)(streaming(sdk, kind, clients))
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert done.usage.model_calls == 2
    # the complete stream: what the server reported; the aborted one: at least its text / 4
    aborted_completion = done.usage.completion_tokens - 17
    assert aborted_completion >= -(-len(BAD[0] + BAD[1]) // 4)
    assert done.usage.prompt_tokens > 40


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
    # the server holds the stream after 40 chunks: had the client waited for more it would have
    # timed out (StreamInterrupted); it hung up, before or while the server held it
    assert (record.client_closed, record.finished) == (True, False)
    assert record.sent <= 40
    (event,) = [e for e in seen if e.kind == "stream"]
    assert event.aborted == "budget"
    assert event.chunks is not None
    assert event.chunks < 40
    assert event.estimated  # the server never got to its usage chunk: characters / 4
    # the tokens of the stream so far are spent
    assert raised.value.usage.total_tokens > 80
    assert raised.value.usage == event.usage


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


# --- usage, budgets and events of the text decorators' streams -----------------------------------

QUESTION = "Can I get a refund for the order I placed last week, please?"
LONG = "word " * 400


def text_decorators() -> dict[str, Any]:
    """Each text decorator, with a rule that never rejects (`budget=` added by the test)."""
    return {
        "retry": lambda **kw: retry_on_low_quality(evaluator=checks.excludes("zzz"), **kw),
        "reviewed": lambda **kw: reviewed(judge=lambda r: True, max_revisions=0, **kw),
        "guarded": lambda **kw: guarded(screen=checks.excludes("zzz"), refusal="no", **kw),
    }


async def test_a_text_streams_usage_is_reported_and_an_aborted_ones_prompt_is_estimated(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.hang(
                after=3, then=Reply.text("Refunds are guaranteed, always.", prompt_tokens=30)
            ),
            Reply.text("Refunds within 30 days.", prompt_tokens=21, completion_tokens=5),
        ],
    )
    seen: list[refinekit.Event] = []
    answer = retry_on_low_quality(evaluator=checks.excludes("guaranteed"), max_retries=1)(
        streaming(sdk, kind, clients, first="question")
    )
    with refinekit.subscribe(seen.append):
        done = await outcome(kind, answer, QUESTION)
    assert done.value == "Refunds within 30 days."
    aborted, complete = [e for e in seen if e.kind == "stream"]
    assert aborted.aborted is not None
    assert aborted.aborted.startswith("rejected by a rule check")
    assert aborted.estimated
    assert not complete.estimated
    assert complete.aborted is None
    # the complete stream counts what the server reported; the aborted one an estimate: its
    # prompt the question's characters / 4 when the server reported nothing (OpenAI's usage
    # chunk comes last), what Anthropic's message_start reported; its completion its text's
    assert done.usage.model_calls == 2
    prompt = 30 if sdk == "anthropic" else -(-len(QUESTION) // 4)
    assert done.usage.prompt_tokens == 21 + prompt
    assert done.usage.completion_tokens - 5 >= -(-len("Refunds are guaranteed,") // 4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
@pytest.mark.parametrize("decorator", ["retry", "reviewed", "guarded"])
async def test_a_budget_closes_a_text_stream_midway(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str, decorator: str
) -> None:
    server.script("m", Reply.hang(after=300, then=Reply.text(LONG)))
    seen: list[refinekit.Event] = []
    made = text_decorators()[decorator](budget=refinekit.Budget(max_tokens=60))
    answer = made(streaming(sdk, kind, clients, first="question"))
    with refinekit.subscribe(seen.append), pytest.raises(BudgetExceeded) as raised:
        await collect(kind, answer, "q")
    (record,) = streams(server)
    # held after 300 chunks: a reader that went on would time out instead
    assert (record.client_closed, record.finished) == (True, False)
    (event,) = [e for e in seen if e.kind == "stream"]
    assert event.aborted == "budget"
    assert event.chunks is not None
    assert event.chunks < 300
    assert raised.value.usage.total_tokens > 60
    assert raised.value.usage.model_calls == 1


async def test_each_stream_has_an_event_with_its_chunks_and_time_to_first_chunk(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script("m", bad_then_good())
    seen: list[refinekit.Event] = []
    extract = self_correct(schema=Invoice)(streaming(sdk, kind, clients))
    with refinekit.subscribe(seen.append):
        await collect(kind, extract, USER)
    aborted, complete = [e for e in seen if e.kind == "stream"]
    first, second = streams(server)
    assert (aborted.attempt, complete.attempt) == (1, 2)
    assert aborted.aborted == "currency: Input should be 'EUR' or 'USD'"
    assert complete.aborted is None
    for event in (aborted, complete):
        assert event.first_chunk is not None
        assert 0 <= event.first_chunk < 2
    # every chunk the server sent of the complete stream was read (the SDK's events: the text
    # chunks plus, for Anthropic, its message and block events, and OpenAI's usage chunk)
    assert complete.chunks is not None
    assert complete.chunks >= second.sent == 8
    assert aborted.chunks is not None
    assert aborted.chunks >= first.sent == 2


# --- LangChain chunks and LiteLLM's stream ------------------------------------------------------


def usage_metadata(inputs: int, outputs: int) -> dict[str, int]:
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}


def langchain_model(kind: str, *texts: str) -> Any:
    """A function returning what a LangChain chat model's `.stream()` / `.astream()` yields.

    Built with LangChain's own `AIMessageChunk` (a chat model needs a provider package, which
    the suite does not install): the usage arrives in two parts, added up.
    """
    messages = pytest.importorskip("langchain_core.messages")

    def chunks() -> list[Any]:
        made = [messages.AIMessageChunk(content="", usage_metadata=usage_metadata(15, 0))]
        made += [messages.AIMessageChunk(content=t) for t in texts[:-1]]
        made.append(messages.AIMessageChunk(content=texts[-1], usage_metadata=usage_metadata(0, 7)))
        return made

    def stream(first: Any) -> Any:
        return iter(chunks())

    async def astream(first: Any) -> Any:
        async def items() -> AsyncIterator[Any]:
            for chunk in chunks():
                yield chunk

        return items()

    return stream if kind == "sync" else astream


async def test_langchain_chunks_usage_metadata_is_counted_by_every_decorator(kind: str) -> None:
    extract = self_correct(schema=Invoice)(
        langchain_model(kind, '{"number": "A-1", ', '"currency": "EUR", ', '"total_cents": 1250}')
    )
    done = await outcome(kind, extract, USER)
    assert done.value == INVOICE
    assert done.usage == refinekit.Usage(1, 15, 7)
    for decorator in text_decorators().values():
        answer = decorator()(langchain_model(kind, "Refunds within ", "30 days."))
        done = await outcome(kind, answer, "q")
        assert done.value == "Refunds within 30 days."
        assert done.usage == refinekit.Usage(1, 15, 7)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings(
    "ignore:Items? .* on TypedDict class .* using the .ReadOnly.:UserWarning"
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_litellm_stream_is_corrected_with_its_reported_usage(
    server: ScriptedOpenAI, kind: str
) -> None:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    litellm = pytest.importorskip("litellm")
    server.script("m", bad_then_good())
    options = {
        "model": "openai/m",
        "api_base": server.base_url,
        "api_key": "scripted-key",
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": 2,
    }

    def call(messages: list[dict[str, Any]]) -> Any:
        return litellm.completion(messages=messages, **options)

    async def acall(messages: list[dict[str, Any]]) -> Any:
        return await litellm.acompletion(messages=messages, **options)

    extract = self_correct(schema=Invoice)(call if kind == "sync" else acall)
    items = await collect(kind, extract, USER)
    assert items[-1] == Final(INVOICE, 2)
    first, second = streams(server)
    assert first.client_closed
    assert second.finished


async def test_provisional_retry_shows_the_chunks_a_reset_then_the_retry(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    server.script(
        "m",
        [
            Reply.hang(after=3, then=Reply.text("Refunds are guaranteed.")),
            Reply.text("Within 30 days."),
        ],
    )
    answer = retry_on_low_quality(
        evaluator=checks.excludes("guaranteed"), max_retries=1, stream_mode="provisional"
    )(streaming(sdk, kind, clients, first="question"))
    items = await collect(kind, answer, "q")
    assert items[:3] == ["Refunds", " are", " guaranteed."]
    reset = items[3]
    assert isinstance(reset, refinekit.Reset)
    assert (reset.cause, reset.attempt, reset.aborted) == ("retry", 1, True)
    assert items[4:] == ["Within", " 30", " days."]
    assert streams(server)[0].client_closed


async def test_reviewed_passes_a_streamed_tool_call_round_through_unreviewed(
    server: ScriptedOpenAI, clients: dict[str, Any], sdk: str, kind: str
) -> None:
    judged: list[str] = []

    def judge(request: EvaluationRequest) -> bool:
        judged.append(request.answer)
        return False

    server.script("m", Reply.tool_call("lookup", {"order": "A-1"}, chunks=3))
    function = streaming(sdk, kind, clients, first="question")
    items = await collect(kind, reviewed(judge=judge, max_revisions=0)(function), "q")
    assert items
    assert all(isinstance(i, refinekit.ToolCallChunk) for i in items)
    assert items[0].name == "lookup"
    assert json.loads("".join(i.arguments for i in items)) == {"order": "A-1"}
    assert judged == []  # a tool-call round is not an answer: not reviewed


class Buyer(BaseModel):
    name: str


class Priced(BaseModel):
    """Fields whose validated value is no JSON type: a Decimal, a date, a nested model."""

    total: Decimal
    due: datetime.date
    buyer: Buyer


async def test_a_partial_value_is_json_so_json_dumps_takes_it(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    reply = '{"total": 12.50, "due": "2026-12-31", "buyer": {"name": "Acme"}}'
    server.script("m", Reply.text(reply, chunks=4))
    extract = self_correct(schema=Priced)(streaming("openai", kind, clients))
    items = await collect(kind, extract, USER)
    partials = [item for item in items if isinstance(item, Partial)]
    assert partials
    for item in partials:
        assert json.loads(json.dumps(item.value)) == item.value
    final = items[-1]
    assert isinstance(final, Final)
    # the last partial is the final value's JSON form, field by field
    assert partials[-1].value == final.value.model_dump(mode="json")
    assert partials[-1].value == {"total": "12.5", "due": "2026-12-31", "buyer": {"name": "Acme"}}
    assert final.value.total == Decimal("12.50")  # the final value keeps the field's type


class Point:
    """A type pydantic cannot write as JSON (allowed with `arbitrary_types_allowed`)."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


class Placed(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    at: Annotated[Point, BeforeValidator(lambda v: Point(*v))]


async def test_a_field_pydantic_cannot_write_as_json_is_shown_as_validated(
    server: ScriptedOpenAI, clients: dict[str, Any], kind: str
) -> None:
    server.script("m", Reply.text('{"name": "A", "at": [1, 2]}', chunks=3))
    place = self_correct(schema=Placed)(streaming("openai", kind, clients))
    items = await collect(kind, place, USER)
    partials = [item.value for item in items if isinstance(item, Partial)]
    assert partials[0] == {"name": "A"}
    assert isinstance(partials[-1]["at"], Point)  # not refused, not dropped: the stream goes on
    assert isinstance(items[-1], Final)
    assert (items[-1].value.at.x, items[-1].value.at.y) == (1, 2)
