"""Grounded values: `InSource` on strings, numbers and choices; grounded decoding per dialect.

`response_format(Model, dialect=..., source=text)` restricts each grounded field to the
values of the text (its spans, its numbers, the choices it states), every one of which the
validator accepts; fields it cannot restrict are left free and said in a `grounding` event.
The requests are checked as the scripted server received them, over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from helpers import schema_of
from pydantic import BaseModel, ValidationError

import refinekit
from refinekit import Event, InSource, in_source, response_format, self_correct
from refinekit.testing import ScriptedOpenAI

CURRENCIES = {"EUR": ["€", "euro"], "USD": ["$", "dollar"], "GBP": ["£", "pound"]}


class Invoice(BaseModel):
    number: Annotated[str, InSource]
    vendor: Annotated[str, InSource]
    currency: Annotated[Literal["EUR", "USD", "GBP"], in_source(aliases=CURRENCIES)]
    total: Annotated[Decimal, InSource]


class Line(BaseModel):
    sku: Annotated[str, InSource]
    qty: Annotated[int, InSource]
    note: str = ""


class Order(BaseModel):
    customer: Annotated[str, InSource] | None = None
    lines: list[Line]


TEXT = "Bill no. FA32135\nFrom: Beacon  Security Ltd.\nAmount payable: 1,954.88 euros (3 items)"
GOOD = {"number": "FA32135", "vendor": "Beacon Security Ltd.", "currency": "EUR", "total": 1954.88}


@pytest.fixture
def events() -> Iterator[list[Event]]:
    seen: list[Event] = []
    with refinekit.subscribe(seen.append):
        yield seen


# --- the validator ---------------------------------------------------------------------------


def test_a_grounded_number_must_be_one_the_text_writes() -> None:
    context = {"source": TEXT}
    invoice = Invoice.model_validate(GOOD, context=context)
    assert invoice.total == Decimal("1954.88")
    assert Invoice.model_validate({**GOOD, "total": "1954.880"}, context=context).total
    with pytest.raises(ValidationError) as info:
        Invoice.model_validate({**GOOD, "total": 1954.8}, context=context)
    (error,) = info.value.errors()
    assert error["type"] == "not_in_source"
    assert error["msg"] == "1954.8 is not a number of the text; it has 1,954.88 or 3"


def test_a_choice_is_stated_by_itself_or_by_one_of_its_written_forms() -> None:
    context = {"source": "Total: 12.50 euros"}
    values = {"number": "12.50", "vendor": "Total", "total": 12.5}
    assert Invoice.model_validate({**values, "currency": "EUR"}, context=context)
    with pytest.raises(ValidationError, match="neither it nor '\\$', 'dollar' appears"):
        Invoice.model_validate({**values, "currency": "USD"}, context=context)
    with pytest.raises(TypeError, match="aliases"):
        in_source(aliases={"EUR": [""]})


def test_without_the_source_nothing_is_checked() -> None:
    assert Invoice.model_validate({**GOOD, "total": 7, "currency": "GBP"}).total == 7


# --- grounded decoding -----------------------------------------------------------------------


def test_grounded_fields_become_enums_of_the_texts_values() -> None:
    schema = schema_of(response_format(Invoice, dialect="llama.cpp", source=TEXT), "llama.cpp")
    fields = schema["properties"]
    spans = fields["vendor"]["enum"]
    assert fields["vendor"]["type"] == "string"
    # word-aligned spans, runs of whitespace as one space, with and without edge punctuation
    assert {"Beacon Security Ltd.", "Beacon Security Ltd", "FA32135", "1,954.88"} <= set(spans)
    assert "Beacon  Security" not in spans
    assert "eacon" not in spans
    assert all(len(s.split()) <= 6 for s in spans)
    assert fields["number"]["enum"] == spans
    assert fields["total"] == {"title": "Total", "type": "number", "enum": [1954.88, 3]}
    assert fields["currency"] == {"title": "Currency", "type": "string", "enum": ["EUR"]}
    assert "x-refinekit" not in json.dumps(schema)


def test_every_value_the_constraint_allows_passes_the_validator() -> None:
    fields = schema_of(response_format(Invoice, dialect="vllm", source=TEXT), "vllm")["properties"]
    context = {"source": TEXT}
    for key in ("number", "vendor", "currency", "total"):
        for value in fields[key]["enum"]:
            Invoice.model_validate({**GOOD, key: value}, context=context)  # never refused


def test_nested_optional_and_integer_fields_are_grounded_where_they_are() -> None:
    schema = schema_of(response_format(Order, dialect="openai", source=TEXT), "openai")
    line = schema["$defs"]["Line"]["properties"]
    assert line["qty"] == {"title": "Qty", "type": "integer", "enum": [3]}  # whole only
    assert "Beacon Security Ltd." in line["sku"]["enum"]
    assert line["note"]["anyOf"][0] == {"title": "Note", "type": "string"}  # not grounded
    customer = schema["properties"]["customer"]["anyOf"]
    assert customer[1] == {"type": "null"}
    assert "FA32135" in customer[0]["enum"]
    assert schema["$defs"]["Line"]["additionalProperties"] is False  # still strict


def test_without_a_source_the_request_is_unchanged() -> None:
    made = response_format(Invoice, dialect="llama.cpp")
    schema = Invoice.model_json_schema()
    assert made == {"response_format": {"type": "json_object", "schema": schema}}


@pytest.mark.parametrize("dialect", ["openai", "llama.cpp", "ollama", "vllm"])
def test_each_dialect_sends_the_grounded_schema(
    scripted_openai: ScriptedOpenAI, dialect: Any
) -> None:
    scripted_openai.script("extractor", [json.dumps(GOOD)])
    client = scripted_openai.client()
    made = response_format(Invoice, dialect=dialect, source=TEXT)
    # Ollama's `format` is no keyword of the openai client: it goes in the body as it is
    options = {"extra_body": made} if dialect == "ollama" else made

    @self_correct(schema=Invoice, validation_context={"source": TEXT})
    def extract(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(model="extractor", messages=messages, **options)

    assert extract([{"role": "user", "content": TEXT}]) == Invoice.model_validate(
        GOOD, context={"source": TEXT}
    )
    (request,) = scripted_openai.requests_for("extractor")
    assert request.body is not None
    sent = {k: v for k, v in request.body.items() if k not in ("model", "messages")}
    if dialect == "vllm":  # the openai client merges extra_body into the body
        sent = {"extra_body": sent}
    fields = schema_of(sent, dialect)["properties"]
    assert fields["total"]["enum"] == [1954.88, 3]
    assert fields["currency"]["enum"] == ["EUR"]
    assert "FA32135" in fields["number"]["enum"]


def test_a_field_past_a_cap_is_left_free_and_said_in_an_event(events: list[Event]) -> None:
    made = response_format(Invoice, dialect="llama.cpp", source=TEXT, max_candidates=5)
    fields = schema_of(made, "llama.cpp")["properties"]
    assert fields["number"] == {"title": "Number", "type": "string"}
    assert fields["total"]["enum"] == [1954.88, 3]  # 2 values: under the cap
    said = [e for e in events if e.kind == "grounding"]
    assert [e.error for e in said] == [
        '"number" left unconstrained: 88 candidate spans, over the cap of 5',
        '"vendor" left unconstrained: 88 candidate spans, over the cap of 5',
    ]
    assert {(e.decorator, e.function, e.job_id) for e in said} == {
        ("response_format", "Invoice", "")
    }


def test_a_missing_source_or_an_empty_one_leaves_fields_free(events: list[Event]) -> None:
    with refinekit.job() as job:
        made = response_format(Invoice, dialect="ollama", source={"other": TEXT})
    assert schema_of(made, "ollama") == Invoice.model_json_schema()
    said = [e for e in events if e.kind == "grounding"]
    assert len(said) == 4
    assert said[0].error == "\"number\" left unconstrained: no source text under 'source'"
    assert said[0].job_id == job.id
    events.clear()
    response_format(Invoice, dialect="ollama", source="no figures here")
    errors = [e.error for e in events]
    assert '"total" left unconstrained: the source has no number' in errors
    assert '"currency" left unconstrained: the source states no choice' in errors


def test_openai_limits_on_enums_across_the_schema_are_kept(events: list[Event]) -> None:
    long_text = " ".join(f"w{i}" for i in range(90))  # 90 words: 90 * 6 - 15 = 525 spans
    made = response_format(Order, dialect="openai", source=long_text, max_candidates=600)
    schema = schema_of(made, "openai")
    assert "enum" not in schema["$defs"]["Line"]["properties"]["sku"]
    assert any("OpenAI's limits" in (e.error or "") for e in events)
    llama = schema_of(
        response_format(Order, dialect="llama.cpp", source=long_text, max_candidates=600),
        "llama.cpp",
    )
    assert len(llama["$defs"]["Line"]["properties"]["sku"]["enum"]) == 525


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"source": 42}, TypeError, "source= takes"),
        ({"source": TEXT, "max_candidates": 0}, ValueError, "max_candidates"),
        ({"source": TEXT, "max_span_words": True}, ValueError, "max_span_words"),
    ],
)
def test_bad_grounding_options_are_clear_errors(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        response_format(Invoice, dialect="llama.cpp", **options)
