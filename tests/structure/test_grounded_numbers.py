"""Grounded numbers are the text's numbers, exactly as written, wherever they are in it.

A grounded number field's enum (`response_format(..., source=text)`) offers only numbers a JSON
schema states exactly, as the field reads them back; the others leave the field free, and the
`grounding` event says why. `InSource` compares exactly (a 29-digit number is not its
neighbour), over the whole text (a number past 20,000 characters is found), and never raises on
a 5,000-digit number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any

import pytest
from helpers import schema_of
from pydantic import BaseModel, ValidationError

import refinekit
from refinekit import Event, InSource, response_format, self_correct
from refinekit.testing import ScriptedOpenAI

DIALECTS = ["openai", "llama.cpp", "ollama", "vllm"]

TWENTY_NINE = "12345678901234567890123456789"
FIVE_THOUSAND = "7" * 5000


class Due(BaseModel):
    amount: Annotated[Decimal, InSource]


class Measured(BaseModel):
    reading: Annotated[float, InSource]


class Counted(BaseModel):
    count: Annotated[int, InSource]


@pytest.fixture
def events() -> Iterator[list[Event]]:
    seen: list[Event] = []
    with refinekit.subscribe(seen.append):
        yield seen


def field(model: type[BaseModel], dialect: str, source: str) -> dict[str, Any]:
    (name,) = model.model_fields
    made = response_format(model, dialect=dialect, source=source)  # type: ignore[arg-type]
    return dict(schema_of(made, dialect)["properties"][name])


def said(events: list[Event]) -> list[str]:
    return [e.error or "" for e in events if e.kind == "grounding"]


# --- a number a JSON schema cannot state exactly ---------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_number_no_json_number_states_exactly_leaves_the_field_free(
    dialect: str, events: list[Event]
) -> None:
    source = "Amount due 1.000000000000000001 ETH, fee 3"
    amount = field(Due, dialect, source)
    assert "enum" not in json.dumps(amount)  # not [1.0, 3]: 1.0 is not the text's number
    assert said(events) == [
        '"amount" left unconstrained: the source\'s number 1.000000000000000001 has no exact '
        "JSON number (as a float it would be 1.0)"
    ]
    # the validator, which still runs, takes the text's number and refuses the float's
    context = {"source": source}
    assert Due.model_validate_json('{"amount": "1.000000000000000001"}', context=context)
    with pytest.raises(ValidationError, match=r"1\.0 is not a number of the text"):
        Due.model_validate({"amount": 1.0}, context=context)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_29_digit_number_is_offered_exactly_and_compared_exactly(
    dialect: str, events: list[Event]
) -> None:
    source = f"Total {TWENTY_NINE} wei"
    for model in (Due, Counted):
        (offered,) = field(model, dialect, source)["enum"]
        assert offered == int(TWENTY_NINE)  # not ...6790
        (name,) = model.model_fields
        reply = json.dumps({name: offered})
        assert model.model_validate_json(reply, context={"source": source})
        rounded = reply.replace(TWENTY_NINE, "12345678901234567890123456790")
        with pytest.raises(ValidationError, match="not a number of the text"):
            model.model_validate_json(rounded, context={"source": source})
    assert said(events) == []
    # a float field cannot hold it: offered, it would be read back as 1.2345678901234568e+28
    assert "enum" not in field(Measured, dialect, source)
    assert said(events) == [
        f'"reading" left unconstrained: the source\'s number {TWENTY_NINE} has no exact JSON '
        "number (as a float it would be 1.2345678901234568e+28)"
    ]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_5000_digit_number_in_the_source_never_raises(dialect: str, events: list[Event]) -> None:
    source = f"Checksum {FIVE_THOUSAND}, amount 3"
    for model in (Due, Counted, Measured):
        assert "enum" not in field(model, dialect, source)
    assert said(events)[0] == (
        '"amount" left unconstrained: the source\'s number 777777777777777777777777...77777777 '
        "(5000 characters) has no exact JSON number (it has 5000 digits, more than a JSON "
        "number of the schema may have)"
    )
    assert len(said(events)) == 3
    with pytest.raises(ValidationError) as refused:
        Due.model_validate({"amount": 4}, context={"source": source})
    assert refused.value.errors()[0]["msg"] == (
        "4 is not a number of the text; it has 777777777777777777777777...77777777 "
        "(5000 characters) or 3"
    )
    assert Due.model_validate({"amount": Decimal(FIVE_THOUSAND)}, context={"source": source})


# --- a long source ---------------------------------------------------------------------------

FILLER = "Terms and conditions apply. " * 1000  # 28,000 characters
LONG = f"{FILLER}Amount payable: 4321.09 EUR for 3 items."


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_number_far_into_a_long_source_is_the_texts_and_is_offered(
    dialect: str, events: list[Event]
) -> None:
    assert LONG.index("4321.09") > 20_000
    assert Due.model_validate({"amount": Decimal("4321.09")}, context={"source": LONG})
    with pytest.raises(ValidationError) as refused:
        Due.model_validate({"amount": Decimal("4321.1")}, context={"source": LONG})
    assert refused.value.errors()[0]["msg"] == (
        "4321.1 is not a number of the text; it has 4321.09 or 3"
    )
    assert field(Due, dialect, LONG)["enum"] == [4321.09, 3]
    assert said(events) == []


def test_a_right_value_far_into_the_source_costs_no_correction(
    scripted_openai: ScriptedOpenAI,
) -> None:
    scripted_openai.script("extractor", ['{"amount": 4321.09}', '{"amount": 4321.09}'])
    client = scripted_openai.client()

    @self_correct(schema=Due, validation_context={"source": LONG})
    def extract(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(
            model="extractor",
            messages=messages,
            **response_format(Due, dialect="openai", source=LONG),
        )

    assert extract([{"role": "user", "content": LONG}]).amount == Decimal("4321.09")
    assert len(scripted_openai.requests_for("extractor")) == 1


def test_provenance_of_a_5000_digit_value_is_its_span() -> None:
    source = f"Checksum {FIVE_THOUSAND}."
    counted = Counted.model_validate({"count": 7 * (10**5000 - 1) // 9}, context={"source": source})
    (where,) = refinekit.provenance(counted, source=source)
    assert (where.value, where.text, where.start) == (FIVE_THOUSAND, FIVE_THOUSAND, 9)


class Bill(BaseModel):
    vendor: Annotated[str, InSource]
    amount: Annotated[Decimal, InSource]


def test_on_a_long_source_numbers_are_offered_and_strings_left_free(events: list[Event]) -> None:
    made = response_format(Bill, dialect="llama.cpp", source=LONG)
    fields = schema_of(made, "llama.cpp")["properties"]
    assert fields["amount"]["enum"] == [4321.09, 3]
    assert "enum" not in fields["vendor"]
    assert said(events) == [
        f'"vendor" left unconstrained: the source has {len(LONG)} characters, over 20000'
    ]
