"""The local_model tier, streaming: `fn.stream(...)` over llama.cpp's real server-sent events.

Run with `pytest -m local_model --local-model` (wrapped in `flock /work/notes/local_model.lock`
on a shared machine). As in test_local_model.py nothing asserts a wording or a quality; what
holds for any model is asserted: partial values hold only completed fields, the stream ends
in the final validated value (the plain call's) or a typed error; a completed field that fails
closes the HTTP response there and the server stops generating; the stream's usage is counted.
The figures (parity with the whole reply, tokens saved) are benchmarks/bench_local_streaming.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, TypeAdapter

import refinekit
from refinekit import CorrectionExhausted, Final, Partial, Reset, self_correct
from refinekit.local import LocalModel

pytestmark = pytest.mark.local_model


@pytest.fixture(scope="module")
def local() -> Iterator[LocalModel]:
    with LocalModel() as model:
        yield model


class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    total: float


SYSTEM = (
    "You extract data from invoices. Reply with only a JSON object with exactly these keys: "
    '"number" (a string), "vendor" (a string), "currency" ("EUR", "USD" or "GBP"), "total" '
    "(a number)."
)
EXAMPLE = "Invoice 2019-118 from Example Corp, total due GBP 1,020.50."
EXAMPLE_REPLY = (
    '{"number": "2019-118", "vendor": "Example Corp", "currency": "GBP", "total": 1020.5}'
)
TEXTS = [
    "Invoice INV-0042 from Acme Ltd. Total due: EUR 12.50.",
    "Bill no. 7731 from Globex, amount payable $1,204.00 (USD).",
]


def messages(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": EXAMPLE},
        {"role": "assistant", "content": EXAMPLE_REPLY},
        {"role": "user", "content": text},
    ]


def streamed(local: LocalModel, kind: str, schema: type[BaseModel], **options: Any) -> Any:
    """`@self_correct(schema=...)` over a function returning the real server's stream."""
    settings = {"model": local.model, "temperature": 0, "seed": 42, "max_tokens": 96}
    if kind == "sync":
        client = local.client()

        def call(conversation: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(messages=conversation, stream=True, **settings)

        return self_correct(schema=schema, **options)(call)
    aclient = local.async_client()

    async def acall(conversation: list[dict[str, Any]]) -> Any:
        return await aclient.chat.completions.create(messages=conversation, stream=True, **settings)

    return self_correct(schema=schema, **options)(acall)


def collect(kind: str, decorated: Any, *args: Any) -> tuple[list[Any], Exception | None]:
    """The stream's items, and the typed error it ended with (None: it ended in a Final)."""
    items: list[Any] = []

    async def drain() -> None:
        async for item in decorated.stream(*args):
            items.append(item)

    try:
        if kind == "sync":
            items.extend(decorated.stream(*args))
        else:
            asyncio.run(drain())
    except CorrectionExhausted as e:
        return items, e
    return items, None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_real_stream_gives_completed_fields_then_the_plain_calls_value(
    local: LocalModel, kind: str
) -> None:
    extract = streamed(local, kind, Invoice)
    for text in TEXTS:
        with refinekit.job() as job:
            items, error = collect(kind, extract, messages(text))
        assert job.usage.model_calls >= 1
        assert job.usage.completion_tokens >= 1  # estimated: llama.cpp streams no usage
        seen: set[str] = set()
        for item in items:
            if isinstance(item, Reset):
                seen = set()  # a correction starts over
                continue
            if isinstance(item, Partial):
                keys = set(item.value)
                assert keys <= set(Invoice.model_fields)
                assert seen <= keys  # fields only ever complete, never change back
                # a completed field is its own type's valid value, never a half-written one
                for name, value in item.value.items():
                    annotation = Invoice.model_fields[name].annotation
                    assert TypeAdapter(annotation).validate_python(value) == value
                seen = keys
        if error is None:
            last = items[-1]
            assert isinstance(last, Final)
            assert isinstance(last.value, Invoice)
            # the plain call (no stream consumer) gives the same value: greedy decoding
            plain = (
                extract(messages(text)) if kind == "sync" else asyncio.run(extract(messages(text)))
            )
            assert plain == last.value
        else:
            assert isinstance(error, (refinekit.JsonParseError, refinekit.ResponseValidationError))


class Impossible(BaseModel):
    """An invoice whose number no model writes: its first field fails as soon as it closes."""

    number: Annotated[str, Field(pattern=r"^NEVER-[0-9]{9}$")]
    vendor: str
    currency: str
    total: float


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_failed_field_closes_the_real_stream_and_the_server_stops(
    local: LocalModel, kind: str
) -> None:
    seen: list[refinekit.Event] = []
    extract = streamed(local, kind, Impossible, max_corrections=0)
    with refinekit.subscribe(seen.append):
        items, error = collect(kind, extract, messages(TEXTS[0]))
    assert isinstance(error, refinekit.ResponseValidationError)
    assert "number" in str(error)
    (event,) = [e for e in seen if e.kind == "stream"]
    # closed at the number: the rest of the reply (three more fields) was never read
    assert event.aborted is not None
    assert event.aborted.startswith("number:")
    assert event.chunks is not None
    assert event.chunks < 40
    assert event.estimated
    assert not [i for i in items if isinstance(i, Final)]
    # llama.cpp's server saw the client leave and stopped generating
    local.check(wait=2.0)
    assert "Disconnected from client" in local.log_tail()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_without_early_abort_the_real_stream_is_read_to_its_end(
    local: LocalModel, kind: str
) -> None:
    seen: list[refinekit.Event] = []
    extract = streamed(local, kind, Impossible, max_corrections=0, early_abort=False)
    with refinekit.subscribe(seen.append):
        items, error = collect(kind, extract, messages(TEXTS[0]))
    assert isinstance(error, refinekit.ResponseValidationError)
    assert "number" in str(error)
    (event,) = [e for e in seen if e.kind == "stream"]
    assert event.aborted is None  # read to the end the model gave it, not closed early
    assert event.chunks
    # nothing is shown after the number failed: at most the partials before it (none here)
    assert not [i for i in items if isinstance(i, (Partial, Final))]
