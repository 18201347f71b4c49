"""Where a failed reply is cut for a resume, and whether a prefilled reply continued it."""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from hypothesis import given, settings
from hypothesis import strategies as st

from refinekit._structure.resume import ResumePoint, continues, cut

TEXT = '{"number": "A-1", "vendor": "Acme \\"Ltd\\", {x}", "lines": [{"a": 1}], "total": 12.5}'


def test_the_cut_is_after_the_first_member_not_kept_and_its_colon() -> None:
    made = cut(TEXT, frozenset({"number", "vendor"}))
    assert made is not None
    assert made.prefix == '{"number": "A-1", "vendor": "Acme \\"Ltd\\", {x}", "lines":'
    assert (made.keys, made.key) == (("number", "vendor"), "lines")
    assert cut(TEXT, frozenset()) == type(made)('{"number":', (), "number")


def test_nested_keys_and_brackets_in_strings_do_not_count() -> None:
    made = cut(TEXT, frozenset({"number", "vendor", "lines", "a"}))
    assert made is not None
    assert (made.key, made.prefix.endswith('"total":')) == ("total", True)


def test_a_text_that_stops_after_a_kept_comma_is_cut_there() -> None:
    made = cut('{"number": "A-1", "vendor": "Acme", ', frozenset({"number", "vendor"}))
    assert made is not None
    assert (made.prefix, made.keys, made.key) == (
        '{"number": "A-1", "vendor": "Acme",',
        ("number", "vendor"),
        None,
    )


def test_no_cut_where_nothing_is_sure() -> None:
    assert cut('["A-1"]', frozenset()) is None  # not an object
    assert cut('Here: {"a": 1', frozenset()) is None  # prose first
    assert cut('{"a": 1, "a": 2, "b": 3}', frozenset({"a"})) is None  # a repeated kept key
    assert cut('{"a": 1, "b', frozenset({"a"})) is None  # the next key is not whole yet
    assert cut("{", frozenset()) is None


def point(*keys: str, key: str = "currency") -> ResumePoint:
    return ResumePoint(
        "prefill", "", {k: 1 for k in keys}, {k: 1 for k in keys}, {k: k for k in keys}, key
    )


def test_a_continuation_is_told_from_a_new_start() -> None:
    kept = point("number")
    assert continues("  ", kept) is None  # nothing yet
    assert continues(' "EUR"', kept) is True
    assert continues(" {", kept) is None  # an object value, or the object again
    assert continues('{ "num', kept) is None
    assert continues('{"number": "A-1"', kept) is False  # the object again
    assert continues('{"code": "EUR"}', kept) is True  # an object as the value
    assert continues('{"number"', point(key="number")) is False  # nothing kept: its own key


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=6,
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(min_value=0, max_value=6),
    st.booleans(),
)
def test_a_cut_text_and_its_rest_make_the_reply_again(
    value: dict[str, Any], kept_count: int, spaced: bool
) -> None:
    text = json.dumps(value, indent=2 if spaced else None)
    keys = list(value)
    kept = frozenset(keys[:kept_count])
    made = cut(text, kept)
    if kept_count >= len(keys):
        assert made is None  # every member kept: nothing to resume at
        return
    assert made is not None
    assert text.startswith(made.prefix)
    assert made.keys == tuple(keys[:kept_count])
    assert made.key == keys[kept_count]
    # the rest is the member's value first: the prefix is the object up to it
    rest = text[len(made.prefix) :]
    whole = pydantic_core.from_json(made.prefix + rest)
    assert whole == value
    assert continues(
        rest, ResumePoint("prefill", made.prefix, {}, {}, {k: k for k in made.keys}, made.key)
    ) in (True, None) or isinstance(value[made.key], dict)
