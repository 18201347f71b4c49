"""`@self_correct`: every rule, each checked on a `def` and on an `async def` function."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, NewType, Optional

import httpx2
import openai
import pytest
from helpers import Invoice, Item, call
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from pydantic import BaseModel, Field, TypeAdapter
from typing_extensions import TypedDict

import refinekit
from refinekit import (
    CorrectionExhausted,
    Event,
    JsonParseError,
    RefinekitError,
    ResponseValidationError,
    Usage,
    self_correct,
)
from refinekit._decorators.correct import CHECK_MARKER
from refinekit.testing import ScriptedOpenAI

# --- schemas and replies -------------------------------------------------------------------------


class Order(BaseModel):
    items: list[Item]
    total_cents: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


USER = [
    {"role": "system", "content": "You extract invoices."},
    {"role": "user", "content": "Extract the invoice: A-1, total 12.50"},
]
GOOD = '{"number": "A-1", "total_cents": 1250}'
INVOICE = Invoice(number="A-1", total_cents=1250)
GARBAGE = "Sorry, I cannot help with that."
WRONG_TYPE = '{"number": "A-1", "total_cents": "lots"}'
MISSING = '{"number": "A-1"}'


def completion(
    content: str | None = None, *, tool_args: Sequence[str] = (), usage: tuple[int, int] = (10, 5)
) -> ChatCompletion:
    """An OpenAI ChatCompletion with text `content` or one tool call per `tool_args`."""
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": message(content, tool_args)}
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            },
        }
    )


def message(content: str | None = None, tool_args: Sequence[str] = ()) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "emit", "arguments": args}}
        for i, args in enumerate(tool_args)
    ]
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


# --- helpers shared by the sync and async variants -----------------------------------------------


class Model:
    """A stand-in model: plays `replies` in order (the last repeats; an exception is raised).

    Records a deep copy of the conversation each call received, and the job it ran in.
    """

    def __init__(self, *replies: Any) -> None:
        self.replies = replies
        self.received: list[list[dict[str, Any]]] = []
        self.jobs: list[refinekit.Job | None] = []

    def __call__(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        self.received.append(copy.deepcopy(messages))
        self.jobs.append(refinekit.current_job())
        reply = self.replies[min(len(self.received), len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @property
    def calls(self) -> int:
        return len(self.received)

    def correction(self, call: int = 2) -> str:
        """The correction turn the `call`-th call (1-based) received last."""
        last = self.received[call - 1][-1]
        assert last["role"] == "user"
        return str(last["content"])


def decorated(kind: str, model: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """`model` behind `@self_correct(**options)` (schema Invoice by default), def or async def."""
    options.setdefault("schema", Invoice)
    if kind == "sync":

        def extract(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            return model(messages, *args, **kwargs)

    else:

        async def extract(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            return model(messages, *args, **kwargs)

    return self_correct(**options)(extract)


def run(kind: str, *replies: Any, **options: Any) -> tuple[Any, Model]:
    model = Model(*replies)
    return call(decorated(kind, model, **options), USER), model


def fails(kind: str, *replies: Any, **options: Any) -> tuple[CorrectionExhausted, Model]:
    model = Model(*replies)
    fn = decorated(kind, model, **options)
    with pytest.raises(CorrectionExhausted) as info:
        call(fn, USER)
    return info.value, model


def schema_json(schema: Any) -> str:
    return json.dumps(TypeAdapter(schema).json_schema(), separators=(",", ":"))


LEAD = "Reply with only a JSON object like this one, with the <...> placeholders filled in:"


def expected_correction(*problems: str, template: str, lead: str = LEAD) -> str:
    return "\n".join([CHECK_MARKER, *problems, lead, template])


# --- schemas -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "bad", "good", "expected"),
    [
        pytest.param(Invoice, WRONG_TYPE, GOOD, INVOICE, id="pydantic-model"),
        pytest.param(
            list[Item],
            '[{"name": "pen"}]',
            '[{"name": "pen", "price": 3}]',
            [Item(name="pen", price=3)],
            id="list-of-models",
        ),
        pytest.param(Point, '{"x": 1}', '{"x": 1, "y": 2}', Point(1, 2), id="dataclass"),
        pytest.param(
            Person,
            '{"name": "Ada", "age": "old"}',
            '{"name": "Ada", "age": 36}',
            {"name": "Ada", "age": 36},
            id="typeddict",
        ),
    ],
)
def test_each_schema_kind_is_validated_corrected_and_returned(
    kind: str, schema: Any, bad: str, good: str, expected: Any
) -> None:
    value, model = run(kind, bad, good, schema=schema)
    assert value == expected
    assert type(value) is type(expected)
    assert model.calls == 2
    # the correction ends with the expected shape as an instance to fill in, never the schema
    correction = model.correction()
    assert "<" in correction.splitlines()[-1]
    assert '"properties"' not in correction
    assert schema_json(schema) not in correction


def test_a_valid_first_reply_costs_one_call_and_no_correction(
    kind: str, events: list[Event]
) -> None:
    value, model = run(kind, GOOD)
    assert value == INVOICE
    assert model.calls == 1
    assert model.received[0] == USER
    assert model.jobs[0] is not None
    assert model.jobs[0].corrections_used == 0
    assert not [e for e in events if e.kind in ("correction", "exhausted")]


# --- replies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(GOOD, id="str"),
        pytest.param(completion(GOOD), id="completion-text"),
        pytest.param(completion(tool_args=[GOOD]), id="completion-one-tool-call"),
        pytest.param(ChatCompletionMessage.model_validate(message(GOOD)), id="message-text"),
        pytest.param(
            ChatCompletionMessage.model_validate(message(tool_args=[GOOD])), id="message-tool-call"
        ),
    ],
)
def test_each_reply_kind_is_parsed(kind: str, reply: Any) -> None:
    value, model = run(kind, reply)
    assert value == INVOICE
    assert model.calls == 1


def test_a_correction_is_one_turn_after_the_original_conversation(kind: str) -> None:
    _, model = run(kind, completion(tool_args=[WRONG_TYPE]), completion(GOOD))
    assert model.received[1][: len(USER)] == USER
    assert len(model.received[1]) == len(USER) + 1  # the failed reply is not resent
    assert model.received[1][-1]["role"] == "user"
    # ... but its valid values are kept in the template: the tool call's arguments were read
    assert '{"number": "A-1", "total_cents": <integer>}' in model.correction()


def test_two_tool_calls_are_corrected_like_unparsable_json(kind: str) -> None:
    value, model = run(kind, completion(tool_args=[GOOD, GOOD]), GOOD)
    assert value == INVOICE
    assert model.calls == 2
    correction = model.correction()
    assert correction.startswith(CHECK_MARKER)
    assert "The reply made 2 tool calls; exactly one was expected." in correction

    error, _ = fails(kind, ChatCompletionMessage.model_validate(message(tool_args=[GOOD, GOOD])))
    assert isinstance(error, JsonParseError)
    assert error.failure == "tool_calls"
    assert json.loads(error.raw_reply)[0]["arguments"] == GOOD


def test_a_return_value_that_is_no_reply_is_a_type_error_not_a_correction(kind: str) -> None:
    model = Model(None)
    with pytest.raises(TypeError, match="must return the model's reply"):
        call(decorated(kind, model), USER)
    assert model.calls == 1


# --- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(GOOD, id="strict"),
        pytest.param(f"\n  {GOOD}\n", id="strict-with-blanks"),
        pytest.param(f"```json\n{GOOD}\n```", id="json-fence"),
        pytest.param(f"```\n{GOOD}\n```", id="bare-fence"),
        pytest.param(f"Here it is:\n```json\n{GOOD}\n```\nAnything else?", id="fence-in-prose"),
        pytest.param(f"Sure! The invoice is {GOOD}. Hope this helps.", id="prose"),
        pytest.param(f"As the document [1] says, the invoice is {GOOD}.", id="prose-citation"),
        pytest.param(f"{GOOD} \ud83d", id="lone-surrogate-in-prose"),
    ],
)
def test_json_is_accepted_strict_fenced_or_in_prose(kind: str, reply: str) -> None:
    value, model = run(kind, reply)
    assert value == INVOICE
    assert model.calls == 1


def test_a_long_run_of_blanks_after_an_unclosed_fence_still_finds_the_json(kind: str) -> None:
    # A regression guard: the fence regex this replaced backtracked in cubic time on this
    # reply (about 30 s for 2000 blanks), so a regression shows as a hang, not a timing.
    value, _ = run(kind, "```" + " " * 2000 + GOOD)
    assert value == INVOICE


def test_json_nested_too_deeply_is_reported_as_such(kind: str) -> None:
    _, model = run(kind, "[" * 300 + "]" * 300, GOOD)
    correction = model.correction()
    assert "Invalid JSON: recursion limit exceeded" in correction
    assert "NaN" not in correction


HUGE = "9" * 5000  # more digits than Python converts (4300): a repetition loop cut off


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param('{"number": "A-1", "total_cents": ' + HUGE, id="cut-off"),
        pytest.param('{"number": "A-1", "total_cents": ' + HUGE + "}", id="closed"),
        pytest.param(HUGE, id="bare-number"),
        pytest.param(f'Here: {{"number": "A-1", "total_cents": {HUGE}}} ok', id="in-prose"),
        pytest.param(f'```json\n{{"number": "A-1", "total_cents": {HUGE}}}\n```', id="fenced"),
    ],
)
def test_an_integer_too_long_for_python_is_a_parse_failure_then_a_correction(
    kind: str, reply: str
) -> None:
    value, model = run(kind, reply, GOOD)
    assert value == INVOICE
    assert model.calls == 2
    correction = model.correction()
    assert correction.startswith(CHECK_MARKER)
    assert HUGE not in correction  # quoted cut short, never whole
    assert len(correction) < 1000
    if reply.startswith("{"):  # the number is what is wrong, and the correction says so
        assert 'The value of "total_cents" is not JSON: 999' in correction
        assert '{"number": "A-1", "total_cents": <integer>}' in correction
    elif reply == HUGE:
        assert "Invalid JSON: number out of range" in correction

    error, model = fails(kind, reply)
    assert isinstance(error, JsonParseError)
    assert model.calls == 3
    assert error.raw_reply == reply
    assert error.replies == [reply] * 3
    assert error.corrections_used == 2


def test_a_long_integer_is_quoted_in_a_correction_whatever_pythons_digit_limit(
    kind: str,
) -> None:
    # pydantic reads up to 4300 digits; an application may have lowered Python's own limit.
    reply = '{"number": ' + "7" * 1000 + ', "total_cents": "x"}'
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        value, model = run(kind, reply, GOOD, repair=False)
        repaired, _ = run(kind, '{"number": ' + "7" * 1000 + ', "total_cents": 1}')
    finally:
        sys.set_int_max_str_digits(limit)
    assert value == INVOICE
    assert '"number": got a number too long to show; it should be a valid string' in (
        model.correction()
    )
    # a number where a string goes is repaired digit for digit, whatever the digit limit
    assert repaired == Invoice(number="7" * 1000, total_cents=1)


# --- the correction turn -------------------------------------------------------------------------


def test_a_parse_failure_correction_is_exactly_the_conversation_then_one_marked_turn(
    kind: str,
) -> None:
    bad = '{\n  "number": "A-1",\n  "total_cents": \n}'
    _, model = run(kind, bad, GOOD)
    assert model.received[1] == [
        *USER,
        {
            "role": "user",
            "content": expected_correction(
                '"total_cents" has no value.',
                template='{"number": "A-1", "total_cents": <integer>}',
            ),
        },
    ]


def test_a_validation_failure_correction_lists_each_error_by_field_path(kind: str) -> None:
    bad = '{"items": [{"name": "pen", "price": "abc"}]}'
    good = '{"items": [{"name": "pen", "price": 3}], "total_cents": 3}'
    value, model = run(kind, bad, good, schema=Order)
    assert value.total_cents == 3
    assert model.received[1] == [
        *USER,
        {
            "role": "user",
            "content": expected_correction(
                '"items[0].price": got "abc"; it should be a valid integer, unable to parse '
                "string as an integer.",
                '"total_cents" is missing.',
                template='{"items": [{"name": "pen", "price": <integer>}], '
                '"total_cents": <integer>}',
            ),
        },
    ]


def test_the_correction_carries_no_pydantic_url(kind: str) -> None:
    _, model = run(kind, WRONG_TYPE, GOOD)
    assert "errors.pydantic.dev" not in model.correction()
    assert "total_cents" in model.correction()


def test_many_errors_are_capped_with_a_count_of_the_rest(kind: str) -> None:
    bad = json.dumps([{"name": i, "price": f"x{i}"} for i in range(30)])  # 60 errors
    _, model = run(kind, bad, "[]", schema=list[Item])
    lines = model.correction().splitlines()
    assert len(lines) == 1 + 6 + 2  # marker, six problem lines, lead and template
    assert lines[6] == "And 55 more problems."


def test_huge_wrong_values_keep_the_correction_short(kind: str) -> None:
    bad = json.dumps([{"name": ["y"] * 5000, "price": "x" * 100_000}] * 20)
    _, model = run(kind, bad, "[]", schema=list[Item])
    correction = model.correction()
    assert len(correction) < 2000
    assert "x" * 100 not in correction


# --- the caller's conversation -------------------------------------------------------------------


def test_the_callers_list_and_dicts_are_untouched_even_when_the_function_mutates_its_own(
    kind: str,
) -> None:
    messages = copy.deepcopy(USER)
    dicts = list(messages)
    received: list[list[dict[str, Any]]] = []

    def rude_model(msgs: list[dict[str, Any]]) -> str:
        received.append(copy.deepcopy(msgs))
        msgs[0]["content"] += " Answer in JSON."
        msgs.append({"role": "user", "content": "injected"})
        return GOOD if len(received) == 3 else GARBAGE

    assert call(decorated(kind, rude_model), messages) == INVOICE
    assert messages == USER
    assert all(a is b for a, b in zip(messages, dicts, strict=True))
    # every call starts from the original turns, never from the previous call's edits, and
    # carries only the latest correction: corrections do not compound
    assert received[2][: len(USER)] == USER
    assert len(received[2]) == len(USER) + 1
    assert received[2][-1]["role"] == "user"
    assert received[2][-1]["content"].startswith(CHECK_MARKER)


def test_the_conversation_can_be_passed_by_keyword_and_other_arguments_reach_every_call(
    kind: str,
) -> None:
    seen: list[tuple[Any, ...]] = []

    def model(messages: list[dict[str, Any]], model_name: str, *, temperature: float) -> str:
        seen.append((len(messages), model_name, temperature))
        return GARBAGE if len(seen) == 1 else GOOD

    if kind == "sync":

        def extract(messages: list[dict[str, Any]], model_name: str, temperature: float) -> str:
            return model(messages, model_name, temperature=temperature)

    else:

        async def extract(
            messages: list[dict[str, Any]], model_name: str, temperature: float
        ) -> str:
            return model(messages, model_name, temperature=temperature)

    fn = self_correct(schema=Invoice)(extract)
    assert call(fn, model_name="gpt-x", temperature=0.0, messages=USER) == INVOICE
    assert seen == [(2, "gpt-x", 0.0), (3, "gpt-x", 0.0)]


# --- the budget and exhaustion -------------------------------------------------------------------


def test_the_default_budget_is_two_corrections(kind: str) -> None:
    error, model = fails(kind, GARBAGE)
    assert model.calls == 3
    assert error.corrections_used == 2


@pytest.mark.parametrize("budget", [0, 1, 3, 10])
def test_calls_are_exactly_max_corrections_plus_one(kind: str, budget: int) -> None:
    error, model = fails(kind, GARBAGE, max_corrections=budget)
    assert model.calls == budget + 1
    assert error.corrections_used == budget


def test_max_corrections_zero_raises_on_the_first_failure(kind: str) -> None:
    error, model = fails(kind, WRONG_TYPE, GOOD, max_corrections=0)
    assert isinstance(error, ResponseValidationError)
    assert model.calls == 1
    assert error.conversation == [*USER, {"role": "assistant", "content": WRONG_TYPE}]


def test_the_last_correction_can_still_succeed(kind: str) -> None:
    value, model = run(kind, GARBAGE, WRONG_TYPE, GOOD)
    assert value == INVOICE
    assert model.calls == 3


def test_exhaustion_on_an_unparsable_last_reply_is_a_json_parse_error(kind: str) -> None:
    error, _ = fails(kind, WRONG_TYPE, WRONG_TYPE, GARBAGE)
    assert type(error) is JsonParseError
    assert isinstance(error, CorrectionExhausted)
    assert isinstance(error, RefinekitError)
    assert error.raw_reply == GARBAGE
    assert error.errors == [{"msg": "Expecting value", "line": 1, "column": 1, "pos": 0}]


def test_exhaustion_on_a_missing_field_is_a_response_validation_error(kind: str) -> None:
    error, _ = fails(kind, GARBAGE, GARBAGE, MISSING)
    assert type(error) is ResponseValidationError
    assert isinstance(error, CorrectionExhausted)
    assert isinstance(error, RefinekitError)
    assert error.raw_reply == MISSING
    assert [(e["type"], e["loc"]) for e in error.errors] == [("missing", ("total_cents",))]
    assert all("url" not in e for e in error.errors)


def test_the_exhausted_error_carries_the_conversation_ending_with_the_last_reply(
    kind: str,
) -> None:
    error, model = fails(kind, GARBAGE, WRONG_TYPE, MISSING)
    assert error.conversation == [
        *model.received[2],
        {"role": "assistant", "content": MISSING},
    ]
    # as last sent: the original turns, the latest correction, then the last reply
    assert [m["role"] for m in error.conversation[len(USER) :]] == ["user", "assistant"]
    assert error.replies == [GARBAGE, WRONG_TYPE, MISSING]  # nothing lost
    assert error.failure == "invalid"
    assert error.corrections_used == 2
    assert error.usage == Usage()  # str replies carry no usage
    assert "after 2 corrections" in str(error)


# --- transport errors ----------------------------------------------------------------------------


def _timeout() -> openai.APITimeoutError:
    return openai.APITimeoutError(
        request=httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    )


@pytest.mark.parametrize(
    "make_error",
    [
        pytest.param(lambda: TimeoutError("read timed out"), id="TimeoutError"),
        pytest.param(_timeout, id="openai.APITimeoutError"),
        pytest.param(lambda: RuntimeError("boom"), id="RuntimeError"),
    ],
)
def test_an_exception_from_the_function_propagates_unchanged_and_costs_no_correction(
    kind: str, make_error: Callable[[], Exception], events: list[Event]
) -> None:
    error = make_error()
    model = Model(GARBAGE, error, GOOD)
    fn = decorated(kind, model)
    with refinekit.job() as job, pytest.raises(type(error)) as info:
        call(fn, USER)
    assert info.value is error
    assert model.calls == 2  # not called again: the exception is no correction turn
    assert job.corrections_used == 1  # the garbage reply's correction only
    assert [e.kind for e in events].count("correction") == 1
    assert not [e for e in events if e.kind == "exhausted"]


# --- decoration-time and call-time errors --------------------------------------------------------


@pytest.mark.parametrize("budget", [-1, 11, True, "2", 2.0, None])
def test_a_bad_max_corrections_is_a_value_error_when_decorating(budget: Any) -> None:
    with pytest.raises(ValueError, match="max_corrections"):
        self_correct(schema=Invoice, max_corrections=budget)


class Plain:  # no annotations: pydantic has no schema for it
    pass


def test_a_class_pydantic_cannot_handle_is_a_type_error_when_decorating() -> None:
    with pytest.raises(TypeError, match="pydantic cannot validate"):
        self_correct(schema=Plain)


def invoice_fields(number: str, total_cents: int) -> tuple[str, int]:
    return number, total_cents


def not_types() -> list[Any]:
    """Schemas that are not types, each with what the TypeError must tell the caller."""
    return [
        pytest.param(invoice_fields, "the function invoice_fields is not a type", id="function"),
        pytest.param(lambda number, total_cents: 0, "<lambda> is not a type", id="lambda"),
        pytest.param(Invoice.model_validate_json, "Pass Invoice itself", id="classmethod"),
        pytest.param(INVOICE.model_dump, "the method BaseModel.model_dump", id="bound-method"),
        pytest.param(functools.partial(invoice_fields, "A-1"), "partial", id="partial"),
        pytest.param(INVOICE, "an instance of Invoice is not a type", id="model-instance"),
        pytest.param(Point(1, 2), "Pass Point itself", id="dataclass-instance"),
        pytest.param("Invoice", "not its name", id="name"),
        pytest.param({"type": "int"}, "an instance of dict", id="dict"),
        pytest.param(None, "None is not a type", id="none"),
        pytest.param(42, "an instance of int", id="int"),
        pytest.param(object(), "an instance of object", id="object"),
    ]


@pytest.mark.parametrize(("schema", "says"), not_types())
def test_a_schema_that_is_not_a_type_is_a_type_error_when_decorating(
    schema: Any, says: str
) -> None:
    # pydantic would have taken a function for a call to make with the reply's fields
    with pytest.raises(TypeError) as caught:
        self_correct(schema=schema)
    message = str(caught.value)
    assert message.startswith("self_correct(schema=...): ")
    assert says in message
    assert "Pass the type of the value the reply must be" in message


Cents = NewType("Cents", int)


@pytest.mark.parametrize(
    ("schema", "bad", "good", "expected"),
    [
        pytest.param(dict[str, int], '{"a": "x"}', '{"a": 1}', {"a": 1}, id="dict"),
        pytest.param(Annotated[int, Field(ge=0)], "-1", "5", 5, id="annotated"),
        pytest.param(Literal["paid", "open"], '"late"', '"paid"', "paid", id="literal"),
        pytest.param(Invoice | None, '{"number": 1}', "null", None, id="union-with-none"),
        pytest.param(Optional[Invoice], '{"number": 1}', GOOD, INVOICE, id="optional"),  # noqa: UP045
        pytest.param(Cents, '"x"', "12", 12, id="newtype"),
        pytest.param(tuple[int, str], "[1]", '[1, "a"]', (1, "a"), id="tuple"),
    ],
)
def test_typing_forms_are_schemas(
    kind: str, schema: Any, bad: str, good: str, expected: Any
) -> None:
    value, model = run(kind, bad, good, schema=schema)
    assert value == expected
    assert model.calls == 2
    assert model.correction().startswith(CHECK_MARKER)
    assert "it should be" in model.correction() or "is missing" in model.correction()


def _no_params() -> str:
    return GOOD


async def _no_params_async() -> str:
    return GOOD


def _keyword_only(*, messages: list[dict[str, Any]]) -> str:
    return GOOD


@pytest.mark.parametrize("fn", [_no_params, _no_params_async, _keyword_only])
def test_a_function_without_a_conversation_parameter_is_a_type_error(
    fn: Callable[..., Any],
) -> None:
    with pytest.raises(TypeError, match="first argument"):
        self_correct(schema=Invoice)(fn)


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param("Extract the invoice", id="str"),
        pytest.param(["Extract the invoice"], id="list-of-str"),
        pytest.param({"role": "user", "content": "hi"}, id="a-single-dict"),
        pytest.param([{"content": "no role"}], id="dict-without-role"),
        pytest.param(None, id="None"),
    ],
)
def test_a_first_argument_that_is_not_a_conversation_is_a_type_error(
    kind: str, messages: Any
) -> None:
    model = Model(GOOD)
    with pytest.raises(TypeError, match=r"conversation|message 0"):
        call(decorated(kind, model), messages)
    assert model.calls == 0


# --- usage ---------------------------------------------------------------------------------------


def test_completion_usage_adds_up_per_call_without_rewriting_the_replies(kind: str) -> None:
    replies = [
        completion(GARBAGE, usage=(10, 5)),
        completion(WRONG_TYPE, usage=(20, 7)),
        completion(GOOD, usage=(30, 9)),
    ]
    before = [r.model_dump() for r in replies]
    value, model = run(kind, *replies)
    assert value == INVOICE
    job = model.jobs[-1]
    assert job is not None
    assert job.usage == Usage(model_calls=3, prompt_tokens=60, completion_tokens=21)
    assert [r.model_dump() for r in replies] == before


def test_the_exhausted_error_carries_the_usage_of_every_call(kind: str) -> None:
    error, _ = fails(kind, completion(GARBAGE, usage=(10, 5)), completion(MISSING, usage=(1, 2)))
    assert error.usage == Usage(model_calls=3, prompt_tokens=12, completion_tokens=9)
    assert error.usage.total_tokens == 21


# --- events --------------------------------------------------------------------------------------


def test_correction_events_carry_the_correction_number_and_the_budget(
    kind: str, events: list[Event]
) -> None:
    run(kind, GARBAGE, WRONG_TYPE, GOOD, max_corrections=3)
    corrections = [e for e in events if e.kind == "correction"]
    assert [(e.attempt, e.max_attempts, e.is_last) for e in corrections] == [
        (1, 3, False),
        (2, 3, False),
    ]
    assert all(e.decorator == "self_correct" for e in corrections)
    assert "Expecting value" in (corrections[0].error or "")
    assert "total_cents" in (corrections[1].error or "")
    assert not [e for e in events if e.kind == "exhausted"]


def test_exhaustion_emits_one_exhausted_event_naming_the_error(
    kind: str, events: list[Event]
) -> None:
    error, _ = fails(kind, GARBAGE)
    corrections = [e for e in events if e.kind == "correction"]
    assert [(e.attempt, e.max_attempts, e.is_last) for e in corrections] == [
        (1, 2, False),
        (2, 2, True),
    ]
    (exhausted,) = [e for e in events if e.kind == "exhausted"]
    assert (exhausted.error or "").startswith("JsonParseError")
    assert exhausted.usage == error.usage
    assert len({e.job_id for e in events}) == 1


# --- over HTTP: what refinekit sends is valid UTF-8 ----------------------------------------------


def over_http(kind: str, server: ScriptedOpenAI, **options: Any) -> Callable[..., Any]:
    """A function asking the scripted server's "extractor" model, under `@self_correct`."""
    options.setdefault("schema", Invoice)
    if kind == "sync":

        def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
            with server.client() as client:
                return client.chat.completions.create(model="extractor", messages=messages)

        return self_correct(**options)(extract)

    async def aextract(messages: list[dict[str, Any]]) -> ChatCompletion:
        async with server.async_client() as client:
            return await client.chat.completions.create(model="extractor", messages=messages)

    return self_correct(**options)(aextract)


def test_a_lone_surrogate_in_a_reply_reaches_the_model_as_u_fffd(
    kind: str, server: ScriptedOpenAI
) -> None:
    # The server sends "\ud83d" escaped in its JSON; the client decodes it to a lone surrogate.
    broken = '{"number": "A-1 \ud83d", "total_cents": 1250}'
    server.script("extractor", [broken, GOOD])
    assert call(over_http(kind, server), USER) == INVOICE
    first, second = server.requests_for("extractor")
    assert first.body is not None
    assert first.body["messages"] == USER
    assert second.body is not None
    assert second.body["messages"] == [
        *USER,
        {
            "role": "user",
            "content": expected_correction(
                "The reply held a broken character (shown as \ufffd): write it again.",
                template='{"number": "A-1 \ufffd", "total_cents": 1250}',
            ),
        },
    ]
