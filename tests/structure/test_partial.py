"""The partial reader: a streamed reply's top-level members validated once each is closed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from refinekit import InSource
from refinekit._structure.partial_validation import PartialReader, Progress

SOURCE = "Invoice A-1 from Baltic Paper, total 12.50 EUR"


class Line(BaseModel):
    sku: str
    qty: int


class Invoice(BaseModel):
    number: Annotated[str, InSource]
    currency: Literal["EUR", "USD"]
    total: Decimal
    lines: list[Line] = []

    @field_validator("total")
    @classmethod
    def _not_negative(cls, value: Decimal) -> Decimal:
        if value < 0:
            raise ValueError("the total is negative")
        return value

    @model_validator(mode="after")
    def _lines_or_total(self) -> Invoice:
        if not self.lines and self.total == 0:
            raise ValueError("an empty invoice")
        return self


def feed_all(reader: PartialReader[Any], pieces: Iterable[str]) -> list[Progress[Any]]:
    return [reader.feed(piece) for piece in pieces]


def invoice_reader() -> PartialReader[Invoice]:
    return PartialReader(Invoice, context={"source": SOURCE})


def test_a_field_is_validated_and_shown_only_once_its_value_is_closed() -> None:
    reader = invoice_reader()
    steps = feed_all(reader, ['{"number": "A', '-1"', ', "curr', 'ency": "EUR", "total": 12', ".5"])
    both = {"number": "A-1", "currency": "EUR"}
    assert [s.value for s in steps] == [None, None, {"number": "A-1"}, both, both]
    assert [s.changed for s in steps] == [False, False, True, True, False]
    # 12.5 is still being written: a number is closed by what follows it
    end = reader.feed("0}")
    assert end.value == {"number": "A-1", "currency": "EUR", "total": Decimal("12.50")}
    assert isinstance(end.value["total"], Decimal)
    assert end.changed
    assert end.closed
    assert end.readable
    assert not end.failures


def test_a_completed_field_that_fails_is_reported_by_the_feed_that_closed_it() -> None:
    """Its pydantic error dict: type, loc (from the field), msg, input, ctx; not in the value."""
    reader = invoice_reader()
    first = reader.feed('{"number": "B-2", "currency"')
    assert first.failures == [
        {
            "type": "not_in_source",
            "loc": ("number",),
            "msg": "'B-2' does not appear in the text",
            "input": "B-2",
            "ctx": {"value": "B-2"},
        }
    ]
    assert first.value is None
    assert not first.changed
    second = reader.feed(': "GBP", "total": -1, "lines": [{"sku": "x", "qty": "two"}]}')
    assert [(f["type"], f["loc"], f["input"]) for f in second.failures] == [
        ("literal_error", ("currency",), "GBP"),
        ("value_error", ("total",), -1),
        ("int_parsing", ("lines", 0, "qty"), "two"),
    ]
    assert second.closed
    assert second.value is None


def test_model_validators_and_missing_fields_wait_for_the_whole_reply() -> None:
    """`{"total": 0}` breaks the model validator and misses fields: nothing of it is partial."""
    steps = feed_all(invoice_reader(), ['{"total": 0', "}"])
    assert steps[-1].value == {"total": Decimal(0)}
    assert all(not s.failures for s in steps)


def test_a_number_where_a_string_is_expected_keeps_its_input_for_the_repair() -> None:
    """The decorators skip what a lossless repair fixes at the end: `type` and `input` as given."""
    (step,) = feed_all(invoice_reader(), ['{"number": 7, '])
    assert [(f["type"], f["input"]) for f in step.failures] == [("string_type", 7)]


def test_a_string_is_never_closed_by_an_escaped_quote_or_a_comma_inside_it() -> None:
    text = r'{"number": "A-1", "lines": [{"sku": "a\"}, \\", "qty": 1}], "currency": "USD"}'
    for size in (1, 2, 3, 5):
        reader = PartialReader(Invoice)
        steps = feed_all(reader, [text[i : i + size] for i in range(0, len(text), size)])
        assert all(not s.failures and s.readable for s in steps)
        assert steps[-1].value == {
            "number": "A-1",
            "lines": [Line(sku='a"}, \\', qty=1)],
            "currency": "USD",
        }


def test_earlier_progress_values_are_never_changed() -> None:
    reader = invoice_reader()
    first = reader.feed('{"number": "A-1", ')
    reader.feed('"currency": "EUR", ')
    assert first.value == {"number": "A-1"}


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"number": "A-1"}\n```',
        'Here is the invoice: {"number": "A-1"}',
        "{'number': 'A-1'}",
        '{"number": "A-1",}',
        '{"number": "A-1" // the number\n}',
        '{"number": "A-1"} I hope this helps.',
        '{number: "A-1"}',
        '"A-1"',
    ],
)
def test_what_is_not_one_json_value_is_unreadable_and_never_fails(text: str) -> None:
    reader = invoice_reader()
    steps = feed_all(reader, [text[i : i + 4] for i in range(0, len(text), 4)])
    assert not steps[-1].readable
    assert all(not s.failures for s in steps)
    later = reader.feed(', "currency": "XXX"}')
    assert not later.readable
    assert not later.failures


def test_blank_text_before_the_value_and_after_it_is_fine() -> None:
    steps = feed_all(invoice_reader(), ["\n  ", ' {"number": "A-1"}', "\n"])
    assert all(s.readable for s in steps)
    assert steps[-1].closed
    assert steps[-1].value == {"number": "A-1"}


def test_a_list_schema_shows_its_items_as_they_close_a_prefix_without_holes() -> None:
    reader = PartialReader(list[Line])
    steps = feed_all(
        reader,
        ['[{"sku": "a", "qty": 1}, {"sku"', ': "b", "qty": "x"}, {"sku": "c", "qty": 3}]'],
    )
    assert steps[0].value == [Line(sku="a", qty=1)]
    assert steps[1].value == [Line(sku="a", qty=1)]  # the third is not shown after a failed one
    assert [f["loc"] for f in steps[1].failures] == [(1, "qty")]
    assert steps[1].closed


def test_a_dict_schema_validates_keys_and_values() -> None:
    reader = PartialReader(dict[int, Decimal])
    step = reader.feed('{"1": 2.5, "x": 3, "4": "no"}')
    assert step.value == {1: Decimal("2.5")}
    assert [(f["loc"], f["type"]) for f in step.failures] == [
        (("x", "[key]"), "int_parsing"),
        (("4",), "decimal_parsing"),
    ]


def test_aliases_extra_keys_and_config() -> None:
    class Aliased(BaseModel):
        model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
        total: int = Field(alias="total_cents")
        either: str = Field("", validation_alias=AliasChoices("a", "b"))

    step = PartialReader(Aliased).feed('{"total_cents": 5, "total": 6, "vendor": " V "}')
    assert step.value == {"total": 5}  # `either` reads an alias choice: judged at the end
    assert [(f["type"], f["loc"], f["input"]) for f in step.failures] == [
        ("extra_forbidden", ("total",), 6),
        ("extra_forbidden", ("vendor",), " V "),
    ]

    class Open(BaseModel):
        model_config = ConfigDict(extra="allow", str_strip_whitespace=True)
        name: str

    assert PartialReader(Open).feed('{"name": " N ", "x": [1]}').value == {"name": "N", "x": [1]}


def test_dataclasses_typed_dicts_and_root_models() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        y: int = dataclasses.field(default=0, init=False)

    class Movie(TypedDict):
        title: str
        year: int

    class Lines(RootModel[list[Line]]):
        pass

    point = PartialReader(Point).feed('{"x": 1, "y": "z"}')
    assert point.value == {"x": 1}
    assert not point.failures
    movie = PartialReader(Movie).feed('{"title": "M", "year": "soon"}')
    assert movie.value == {"title": "M"}
    assert [f["loc"] for f in movie.failures] == [("year",)]
    lines = PartialReader(Lines).feed('[{"sku": "a", "qty": 1}]')
    assert lines.value == [Line(sku="a", qty=1)]
    adapter = TypeAdapter(list[int])
    assert PartialReader(adapter).feed("[1, 2,").value == [1, 2]


def test_a_before_validator_of_the_whole_means_nothing_is_judged_early() -> None:
    """It may rewrite the input (rename keys, unwrap): a member alone says nothing."""

    class Wrapped(BaseModel):
        number: str

        @model_validator(mode="before")
        @classmethod
        def _unwrap(cls, data: Any) -> Any:
            return data.get("invoice", data) if isinstance(data, dict) else data

    step = PartialReader(Wrapped).feed('{"invoice": {"number": "A-1"}, "number": 7}')
    assert step.value is None
    assert not step.failures
    assert step.readable
    assert step.closed


def test_a_validator_that_needs_other_fields_is_not_judged_on_the_partial() -> None:
    class Dated(BaseModel):
        start: int
        end: int

        @field_validator("end")
        @classmethod
        def _after_start(cls, value: int, info: ValidationInfo) -> int:
            if value < info.data["start"]:
                raise ValueError("ends before it starts")
            return value

    step = PartialReader(Dated).feed('{"start": 5, "end": 1}')
    assert step.value == {"start": 5}
    assert not step.failures


def test_scalar_schemas_are_read_whole_at_the_end() -> None:
    reader = PartialReader(str)
    assert [reader.feed(p) for p in ['"ab', 'c"']][-1] == Progress(None, False, [], True, False)


def test_refuses_what_is_not_a_schema_or_text() -> None:
    with pytest.raises(TypeError, match="not a type"):
        PartialReader(len)
    with pytest.raises(TypeError, match="takes the reply's text"):
        PartialReader(Invoice).feed(b"{}")  # type: ignore[arg-type]


def test_the_context_is_not_mutated_and_is_used_as_given() -> None:
    context = {"source": SOURCE}
    PartialReader(Invoice, context=context).feed('{"number": "A-1", ')
    assert context == {"source": SOURCE}


class _Note(BaseModel):
    text: str
    more: str = ""


@pytest.mark.parametrize(
    "pieces",
    [
        ['{"text": "A\ud83d", ', '"more": "x"}'],  # in a field's value
        ['{"te\ud83dxt": "A", ', '"more": "x"}'],  # in a key
        ['{"text": "A"', ', "more": "x", "ext\ud83d": 1}'],  # in a key no field reads
    ],
)
def test_a_lone_surrogate_makes_the_reply_unreadable_never_a_crash(pieces: list[str]) -> None:
    reader = PartialReader(_Note)
    progress = [reader.feed(piece) for piece in pieces]
    assert not progress[-1].readable
    assert all(not p.failures for p in progress)  # the whole reply decides, as unstreamed
