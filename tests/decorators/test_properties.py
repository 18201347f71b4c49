"""Property tests: whatever a model replies, `@self_correct` returns a valid value or raises
`CorrectionExhausted`, every message it sends is valid UTF-8, and a valid reply gives exactly
what pydantic's `validate_json` gives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from helpers import Invoice, Item
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from refinekit import CorrectionExhausted, JsonParseError, ResponseValidationError, self_correct

SCHEMAS: list[Any] = [Invoice, list[Item]]
USER = [{"role": "user", "content": "Extract the invoice."}]

common = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- replies -------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
valid_invoices = st.fixed_dictionaries({"number": st.text(), "total_cents": st.integers()})
valid_items = st.lists(
    st.fixed_dictionaries({"name": st.text(), "price": st.integers()}), max_size=4
)
valid_json = st.one_of(valid_invoices, valid_items).flatmap(
    lambda value: st.builds(
        json.dumps,
        st.just(value),
        indent=st.none() | st.integers(0, 4),
        ensure_ascii=st.booleans(),
    )
)
truncated_json = valid_json.flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n]))
wrong_types = st.one_of(
    st.fixed_dictionaries({"number": json_values, "total_cents": json_values}),
    st.lists(st.fixed_dictionaries({"name": json_values, "price": json_values}), max_size=3),
    json_values,
).map(json.dumps)
deep_nesting = st.builds(
    lambda n, pair, closed: pair[0] * n + (f"1{pair[1] * n}" if closed else ""),
    st.integers(1, 5000),
    st.sampled_from([("[", "]"), ('{"a":', "}"), ('[{"name":', "}]")]),
    st.booleans(),
)
prose = st.text(max_size=40)
plain_prose = st.text(st.characters(exclude_characters="{}[]`"), max_size=40)
wrapped_json = st.builds(
    lambda before, value, after, fence: (
        f"{before}\n```json\n{value}\n```\n{after}" if fence else f"{before} {value} {after}"
    ),
    prose,
    valid_json,
    prose,
    st.booleans(),
)
none_like = st.sampled_from(
    [
        *("", " ", "\n\t", "null", "None", "nil", "undefined", "NaN", "{}", "[]", '""', "[null]"),
        *('{"number": null, "total_cents": null}', "```json\n```", "```", "{", "["),
    ]
)
# any code point: lone surrogates, controls, emoji, unassigned
unicode_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=60)
# half an emoji (a lone surrogate) somewhere in a reply: no client can send it back as it is
with_lone_surrogate = st.builds(
    lambda before, half, after: before + half + after,
    st.one_of(valid_json, wrong_types, st.text(max_size=20)),
    st.sampled_from(["\ud83d", "\ude00", "\udfff"]),
    st.one_of(st.just(""), prose),
)
# integers longer than Python converts (4300 digits): a repetition loop cut off at the limit
huge_numbers = st.builds(
    lambda digits, before, after: f"{before}{'9' * digits}{after}",
    st.integers(4200, 6000),
    st.sampled_from(["", "[", '{"number": "A", "total_cents": ', 'Here: {"total_cents": ', "-"]),
    st.sampled_from(["", "]", "}", "} ok", ".5", "e3"]),
)
replies = st.one_of(
    st.text(),
    valid_json,
    truncated_json,
    wrong_types,
    deep_nesting,
    wrapped_json,
    none_like,
    unicode_text,
    with_lone_surrogate,
    huge_numbers,
)


HUGE_SHAPES: dict[str, Callable[[int], str]] = {
    "valid": lambda n: json.dumps({"number": "x" * n, "total_cents": 1}),
    "wrong-type": lambda n: json.dumps({"number": 1, "total_cents": "9x" * (n // 2)}),
    "garbage": lambda n: "x" * n,
    "unclosed-string": lambda n: '{"number": "' + "x" * n,
    "fence-then-blanks": lambda n: "```" + " " * n,
    "brackets": lambda n: "[" * n,
}
huge_replies = st.builds(
    lambda size, shape: HUGE_SHAPES[shape](size),
    st.integers(1_000_000, 2_000_000),
    st.sampled_from(sorted(HUGE_SHAPES)),
)

# --- the properties ------------------------------------------------------------------------------


class Scripted:
    """A stand-in model playing `script` (the last reply repeats), counting its calls."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.calls = 0
        self.received: list[list[dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.calls += 1
        self.received.append([dict(m) for m in messages])
        return self.script[min(self.calls, len(self.script)) - 1]


def outcome(schema: Any, model: Scripted, *, run_async: bool = False) -> Any:
    """The value of a `@self_correct` call to `model`, or the `CorrectionExhausted` it raised."""

    def extract(messages: list[dict[str, Any]]) -> str:
        return model(messages)

    async def extract_async(messages: list[dict[str, Any]]) -> str:
        return model(messages)

    try:
        if run_async:
            return asyncio.run(self_correct(schema=schema)(extract_async)(USER))
        return self_correct(schema=schema)(extract)(USER)
    except CorrectionExhausted as error:
        return error


def check_only_valid_or_exhausted(schema: Any, script: list[str], *, run_async: bool) -> None:
    model = Scripted(script)
    result = outcome(schema, model, run_async=run_async)
    for messages in model.received:  # whatever the replies held, every request can be sent
        for message in messages:
            message["content"].encode("utf-8")
    if isinstance(result, CorrectionExhausted):
        assert type(result) in (JsonParseError, ResponseValidationError)
        assert model.calls == 3
        assert result.corrections_used == 2
        # the reply as it came, and as it can be sent on (a lone surrogate as U+FFFD)
        sendable = result.raw_reply.encode("utf-16-le", "surrogatepass").decode(
            "utf-16-le", "replace"
        )
        assert result.conversation[-1] == {"role": "assistant", "content": sendable}
        assert result.errors
    else:
        assert model.calls <= 3
        # a valid instance of the schema: it survives a round trip through the schema
        adapter = TypeAdapter(schema)
        assert adapter.validate_json(adapter.dump_json(result)) == result
        if schema is Invoice:
            assert isinstance(result, Invoice)


@common
@given(schema=st.sampled_from(SCHEMAS), script=st.lists(replies, min_size=1, max_size=3))
def test_any_replies_give_a_valid_value_or_correction_exhausted(
    schema: Any, script: list[str]
) -> None:
    check_only_valid_or_exhausted(schema, script, run_async=False)


@settings(common, max_examples=50)
@given(schema=st.sampled_from(SCHEMAS), script=st.lists(replies, min_size=1, max_size=3))
def test_any_replies_give_a_valid_value_or_correction_exhausted_async(
    schema: Any, script: list[str]
) -> None:
    check_only_valid_or_exhausted(schema, script, run_async=True)


@settings(common, max_examples=12)
@given(reply=huge_replies)
def test_huge_replies_give_a_valid_value_or_correction_exhausted(reply: str) -> None:
    check_only_valid_or_exhausted(Invoice, [reply], run_async=False)


@common
@given(schema=st.sampled_from(SCHEMAS), reply=st.one_of(replies, valid_json, valid_json))
def test_a_reply_pydantic_accepts_gives_exactly_its_value_at_once(schema: Any, reply: str) -> None:
    adapter = TypeAdapter(schema)
    try:
        expected = adapter.validate_json(reply)
    except ValidationError:
        return
    model = Scripted([reply, "never used"])
    assert outcome(schema, model) == expected
    assert model.calls == 1


@common
@given(value=valid_invoices, before=plain_prose, after=plain_prose, fence=st.booleans())
def test_valid_json_in_prose_or_a_fence_gives_the_value_validate_json_gives(
    value: dict[str, Any], before: str, after: str, fence: bool
) -> None:
    text = json.dumps(value)
    reply = f"{before}\n```json\n{text}\n```\n{after}" if fence else f"{before} {text} {after}"
    model = Scripted([reply])
    assert outcome(Invoice, model) == TypeAdapter(Invoice).validate_json(text)
    assert model.calls == 1
