"""What a correction says and what is repaired before one is spent (`@self_correct`).

Each failure kind with the exact turn the default builder writes; the instance template; the
lossless repairs and what they refuse to guess; the `correction=` hook; `validation_context=`
with `InSource`; `schema_prompt` and `response_format`; and the prompt tokens a correction
costs against a minimal hand-written loop, over HTTP.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, Field, ValidationError, model_validator

import refinekit
from refinekit import (
    CorrectionRequest,
    Event,
    InSource,
    JsonParseError,
    ReplyProblem,
    ResponseValidationError,
    in_source,
    response_format,
    schema_prompt,
    self_correct,
)
from refinekit._structure.corrections import CHECK_MARKER
from refinekit._structure.template import Template
from refinekit.testing import Reply, ScriptedOpenAI

LEAD = "Reply with only a JSON object like this one, with the <...> placeholders filled in:"


class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    total: Decimal


USER = [
    {"role": "system", "content": "You extract invoices as JSON."},
    {"role": "user", "content": "Bill no. FA32135 | From: Beacon Security | Amount: USD 954.88"},
]
GOOD = '{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", "total": 954.88}'
INVOICE = Invoice.model_validate_json(GOOD)


class Model:
    """Plays `replies` in order (the last repeats) and records every conversation it got."""

    def __init__(self, *replies: Any) -> None:
        self.replies = replies
        self.received: list[list[dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> Any:
        self.received.append(json.loads(json.dumps(messages)))
        return self.replies[min(len(self.received), len(self.replies)) - 1]

    def correction(self, call: int = 2) -> str:
        return str(self.received[call - 1][-1]["content"])


def decorated(kind: str, model: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    options.setdefault("schema", Invoice)
    if kind == "sync":

        def extract(messages: list[dict[str, Any]]) -> Any:
            return model(messages)

        return self_correct(**options)(extract)

    async def aextract(messages: list[dict[str, Any]]) -> Any:
        await asyncio.sleep(0)
        return model(messages)

    return self_correct(**options)(aextract)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    return asyncio.run(result) if inspect.iscoroutine(result) else result


def run(kind: str, *replies: Any, **options: Any) -> tuple[Any, Model]:
    model = Model(*replies)
    return call(decorated(kind, model, **options), USER), model


def completion(content: str, finish_reason: str = "stop") -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", "content": content},
                }
            ],
        }
    )


def turn(*problems: str, template: str) -> str:
    return "\n".join([CHECK_MARKER, *problems, LEAD, template])


# --- the default correction, kind by kind (the examples docs/self_correct.md shows) --------------


@pytest.mark.parametrize(
    ("reply", "failure", "expected"),
    [
        pytest.param(
            '{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
            '"amount_paid": 954.88}',
            "invalid",
            turn(
                'Use "total", not "amount_paid".',
                template='{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
                '"total": <number>}',
            ),
            id="a-misnamed-key",
        ),
        pytest.param(
            '{"number": "FA32135", "vendor": "Beacon Security", "currency": "US dollars", '
            '"total": 954.88}',
            "invalid",
            turn(
                '"currency": got "US dollars"; use one of the choices shown.',
                template='{"number": "FA32135", "vendor": "Beacon Security", '
                '"currency": "<EUR, USD or GBP>", "total": 954.88}',
            ),
            id="a-wrong-value",
        ),
        pytest.param(
            '{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
            '"total": 954.88 USD}',
            "not_json",
            turn(
                'The value of "total" must be JSON alone: 954.88, without "USD" after it.',
                template='{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
                '"total": <number>}',
            ),
            id="words-after-a-number",
        ),
        pytest.param(
            "The invoice FA32135 is from Beacon Security, total USD 954.88.",
            "not_json",
            turn(
                "The reply had no JSON in it.",
                template='{"number": "<string>", "vendor": "<string>", '
                '"currency": "<EUR, USD or GBP>", "total": <number>}',
            ),
            id="prose-without-json",
        ),
        pytest.param(
            'Here you go: {"number": "FA32135", "vendor": "Beacon Security", "currency": "USD"} '
            "Hope it helps!",
            "invalid",
            turn(
                "Reply with the JSON alone, without text or a code fence around it.",
                '"total" is missing.',
                template='{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
                '"total": <number>}',
            ),
            id="prose-around-json",
        ),
        pytest.param(
            json.dumps(Invoice.model_json_schema()),
            "schema_echo",
            turn(
                "The reply described the fields (a JSON schema) instead of giving their values.",
                template='{"number": "<string>", "vendor": "<string>", '
                '"currency": "<EUR, USD or GBP>", "total": <number>}',
            ),
            id="the-schema-echoed",
        ),
        pytest.param(
            completion(
                '{"number": "FA32135", "vendor": "Beacon Security", "note": "a long note that',
                finish_reason="length",
            ),
            "cut_off",
            turn(
                "The reply was cut off at the length limit before the JSON was complete: keep "
                "it short.",
                '"currency" is missing.',
                '"total" is missing.',
                template='{"number": "FA32135", "vendor": "Beacon Security", '
                '"currency": "<EUR, USD or GBP>", "total": <number>}',
            ),
            id="cut-off-at-the-token-limit",
        ),
        pytest.param(
            "",
            "empty",
            turn(
                "The reply was empty.",
                template='{"number": "<string>", "vendor": "<string>", '
                '"currency": "<EUR, USD or GBP>", "total": <number>}',
            ),
            id="empty",
        ),
    ],
)
def test_each_failure_kind_gets_its_own_plain_words_and_a_template(
    kind: str, reply: Any, failure: str, expected: str, events: list[Event]
) -> None:
    value, model = run(kind, reply, GOOD)
    assert value == INVOICE
    assert model.received[1] == [*USER, {"role": "user", "content": expected}]
    (correction,) = [e for e in events if e.kind == "correction"]
    assert correction.failure == failure
    assert correction.detail == expected


def test_a_copied_placeholder_is_a_failure_never_a_value(kind: str) -> None:
    copied = '{"number": "FA32135", "vendor": "<string>", "currency": "USD", "total": 954.88}'
    value, model = run(kind, '{"number": "FA32135"}', copied, GOOD)
    assert value == INVOICE
    assert len(model.received) == 3
    assert model.correction(3) == turn(
        '"<string>" is a placeholder of the template: put the real value there.',
        template='{"number": "<string>", "vendor": "<string>", '
        '"currency": "<EUR, USD or GBP>", "total": <number>}',
    )
    error_model = Model('{"number": "FA32135"}', copied)
    with pytest.raises(ResponseValidationError) as info:
        call(decorated(kind, error_model), USER)
    assert info.value.failure == "placeholder"
    assert info.value.errors[0]["input"] == "<string>"


def test_a_correction_never_carries_the_json_schema_and_never_compounds(kind: str) -> None:
    _, model = run(kind, "no json", '{"number": "FA32135"}', GOOD)
    for conversation in model.received[1:]:
        assert conversation[: len(USER)] == USER
        assert len(conversation) == len(USER) + 1
        assert '"properties"' not in conversation[-1]["content"]
        assert "$defs" not in conversation[-1]["content"]


# --- the instance template -----------------------------------------------------------------------


class Line(BaseModel):
    sku: str
    qty: int = Field(description="units ordered")


class Order(BaseModel):
    id: int
    placed: datetime.date
    note: str | None = None
    express: bool
    lines: list[Line]
    kind: Literal["retail"]
    tags: dict[str, float] = {}
    customer_name: str = Field(alias="customer")


@pytest.mark.parametrize(
    ("schema", "template"),
    [
        pytest.param(
            Order,
            '{"id": <integer>, "placed": "<date YYYY-MM-DD>", "note": "<string or null>", '
            '"express": <true or false>, "lines": [{"sku": "<string>", "qty": <integer>}, ...], '
            '"kind": "retail", "tags": {"<key>": <number>, ...}, "customer": "<string>"}',
            id="model-with-every-kind-of-field",
        ),
        pytest.param(list[Line], '[{"sku": "<string>", "qty": <integer>}, ...]', id="list"),
        pytest.param(int, "<integer>", id="int"),
        pytest.param(Decimal, "<number>", id="decimal-is-a-number"),
        pytest.param(Literal["a", "b"], '"<a or b>"', id="literal"),
        pytest.param(tuple[int, str], '[<integer>, "<string>"]', id="tuple"),
    ],
)
def test_the_template_shows_an_instance_never_a_schema(schema: Any, template: str) -> None:
    made = Template.of(schema)
    assert made is not None
    assert made.render() == template


def test_the_template_keeps_valid_values_and_shows_placeholders_where_they_failed() -> None:
    made = Template.of(Order)
    assert made is not None
    reply = {
        "id": 7,
        "placed": "soon",
        "express": True,
        "lines": [{"sku": "A", "qty": "two"}, {"sku": "B", "qty": 1}],
        "kind": "retail",
        "customer": "Ada",
    }
    bad = [("placed",), ("lines", 0, "qty")]
    assert made.render(reply, bad) == (
        '{"id": 7, "placed": "<date YYYY-MM-DD>", "note": "<string or null>", "express": true, '
        '"lines": [{"sku": "A", "qty": <integer>}, {"sku": "B", "qty": 1}], "kind": "retail", '
        '"tags": {"<key>": <number>, ...}, "customer": "Ada"}'
    )


def test_a_huge_schema_gives_a_template_of_bounded_size() -> None:
    fields = {f"field_{i}": (dict[str, list[Line]], ...) for i in range(200)}
    from pydantic import create_model

    big = create_model("Big", **fields)  # type: ignore[call-overload]
    made = Template.of(big)
    assert made is not None
    assert len(made.render()) < 10_000


# --- repairs: lossless only ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "repairs"),
    [
        pytest.param(f"```json\n{GOOD}\n```", ("code_fence",), id="code-fence"),
        pytest.param(f"Sure! {GOOD} Anything else?", ("prose",), id="prose"),
        pytest.param(GOOD[:-1] + ",}", ("trailing_comma",), id="trailing-comma"),
        pytest.param(
            f"Here: {GOOD[:-1]},}} ok", ("prose", "trailing_comma"), id="prose-trailing-comma"
        ),
        pytest.param(
            "Sure: {'number': 'FA32135', 'vendor': 'Beacon Security', 'currency': 'USD', "
            "'total': 954.88,} done",
            ("prose", "python_literal"),
            id="prose-python-dict",
        ),
        pytest.param(
            GOOD.replace('"total"', '// the amount\n"total"'), ("comment",), id="line-comment"
        ),
        pytest.param(GOOD.replace(", ", ", /* x */ ", 1), ("comment",), id="block-comment"),
        pytest.param(
            "{'number': 'FA32135', 'vendor': 'Beacon Security', 'currency': 'USD', "
            "'total': 954.88}",
            ("python_literal",),
            id="python-dict",
        ),
        pytest.param(json.dumps({"invoice": json.loads(GOOD)}), ("wrapper",), id="wrapper"),
        pytest.param(
            GOOD.replace('"FA32135"', "32135"), ("number_to_string",), id="number-for-a-string"
        ),
        pytest.param(
            "```\n{'invoice': {'number': 32135, 'vendor': 'Beacon Security', "
            "'currency': 'USD', 'total': 954.88,},}\n```",
            ("code_fence", "python_literal", "wrapper", "number_to_string"),
            id="several",
        ),
    ],
)
def test_a_lossless_repair_costs_no_call_and_is_reported(
    kind: str, reply: str, repairs: tuple[str, ...], events: list[Event]
) -> None:
    value, model = run(kind, reply)
    assert len(model.received) == 1
    assert value.vendor == "Beacon Security"
    assert value.total == Decimal("954.88")
    (attempt,) = [e for e in events if e.kind == "attempt"]
    assert attempt.repairs == repairs
    assert not [e for e in events if e.kind == "correction"]


def test_a_number_for_a_string_keeps_its_digits_as_written(kind: str) -> None:
    value, _ = run(kind, GOOD.replace('"FA32135"', "12.50"))
    assert value.number == "12.50"  # as written, not "12.5"
    value, _ = run(kind, GOOD.replace('"FA32135"', "1e3"))
    assert value.number == "1e3"
    # JSON forbids a leading zero: that is not JSON, so it is not repaired but corrected
    value, model = run(kind, GOOD.replace('"FA32135"', "0012"), GOOD)
    assert value == INVOICE
    assert len(model.received) == 2


def test_python_literals_inside_strings_are_left_alone(kind: str) -> None:
    reply = GOOD.replace("Beacon Security", "True None, }")[:-1] + ",}"
    value, _ = run(kind, reply)
    assert value.vendor == "True None, }"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(GOOD.replace("954.88", "954.88 USD"), id="a-number-with-words"),
        pytest.param(GOOD.replace('"total"', '"amount"'), id="a-misnamed-key"),
        pytest.param(GOOD.replace(', "currency": "USD"', ""), id="a-missing-field"),
        pytest.param(GOOD.replace('"USD"', '"usd"'), id="a-wrong-case-enum"),
        pytest.param(json.dumps({"a": json.loads(GOOD), "b": 1}), id="a-wrapper-with-two-keys"),
    ],
)
def test_what_a_repair_would_have_to_guess_goes_to_the_model(kind: str, reply: str) -> None:
    value, model = run(kind, reply, GOOD)
    assert value == INVOICE
    assert len(model.received) == 2


def test_repair_false_accepts_strict_json_only(kind: str) -> None:
    fenced = f"```json\n{GOOD}\n```"
    value, model = run(kind, fenced, GOOD, repair=False)
    assert value == INVOICE
    assert len(model.received) == 2
    assert model.correction() == turn(
        "The reply must be strict JSON alone: no code fence, comments, trailing commas or text "
        "around it.",
        template=GOOD.replace("954.88", "954.88"),
    )
    with pytest.raises(JsonParseError) as info:
        call(decorated(kind, Model(fenced), repair=False, max_corrections=0), USER)
    assert "repair=False" in str(info.value)


def test_repair_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="repair must be True or False"):
        self_correct(schema=Invoice, repair="yes")  # type: ignore[arg-type]


# --- the correction= hook ------------------------------------------------------------------------


def test_the_hook_gets_a_typed_request_and_its_text_is_sent_as_one_user_turn(kind: str) -> None:
    seen: list[CorrectionRequest] = []

    def builder(request: CorrectionRequest) -> str:
        seen.append(request)
        return f"Fix {', '.join(p.path for p in request.problems)}. {request.template}"

    bad = GOOD.replace('"total"', '"amount_paid"')
    value, model = run(kind, bad, GOOD, correction=builder)
    assert value == INVOICE
    (request,) = seen
    assert request.number == 1
    assert request.max_corrections == 2
    assert request.kind == "invalid"
    assert request.problems == (ReplyProblem("total", 'use "total", not "amount_paid"'),)
    assert request.reply == bad
    assert request.finish_reason is None
    assert request.schema is Invoice
    assert request.json_schema == Invoice.model_json_schema()
    assert request.messages == tuple(USER)
    assert request.errors[0]["type"] == "missing"
    assert request.default().startswith(CHECK_MARKER)
    assert model.received[1] == [
        *USER,
        {
            "role": "user",
            "content": 'Fix total. {"number": "FA32135", "vendor": "Beacon Security", '
            '"currency": "USD", "total": <number>}',
        },
    ]


def test_the_hook_may_return_the_messages_to_add(kind: str) -> None:
    def classic(request: CorrectionRequest) -> list[dict[str, Any]]:
        return [
            {"role": "assistant", "content": request.reply},
            {"role": "user", "content": request.default()},
        ]

    _, model = run(kind, "no json", GOOD, correction=classic)
    assert [m["role"] for m in model.received[1][len(USER) :]] == ["assistant", "user"]
    assert model.received[1][len(USER)]["content"] == "no json"


@pytest.mark.parametrize("made", [None, 3, [{"content": "no role"}], {"role": "user"}])
def test_a_hook_returning_anything_else_is_a_type_error(kind: str, made: Any) -> None:
    with pytest.raises(TypeError, match="correction= builder"):
        run(kind, "no json", GOOD, correction=lambda request: made)


def test_a_hook_that_raises_propagates(kind: str) -> None:
    def broken(request: CorrectionRequest) -> str:
        raise KeyError("bug in the builder")

    with pytest.raises(KeyError, match="bug in the builder"):
        run(kind, "no json", GOOD, correction=broken)


def test_a_hook_that_is_not_callable_is_a_type_error_when_decorating() -> None:
    with pytest.raises(TypeError, match="correction= must be a callable"):
        self_correct(schema=Invoice, correction="be nicer")  # type: ignore[arg-type]


# --- validation_context= and InSource -------------------------------------------------------------


class Grounded(BaseModel):
    number: Annotated[str, InSource]
    vendor: Annotated[str, in_source()]
    currency: Literal["EUR", "USD", "GBP"]
    total: Decimal


def test_a_string_not_in_the_source_is_corrected_with_the_closest_span(kind: str) -> None:
    text = USER[1]["content"]
    bad = GOOD.replace("Beacon Security", "Bacon Securty")
    value, model = run(kind, bad, GOOD, schema=Grounded, validation_context={"source": text})
    assert value.vendor == "Beacon Security"
    assert model.correction() == turn(
        "\"vendor\": 'Bacon Securty' does not appear in the text; it has 'Beacon Security'.",
        template='{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", '
        '"total": 954.88}',
    )
    # the span is shown in the field's place for the model to confirm: the next reply is
    # validated against the text again


def test_a_refused_string_without_a_close_span_gets_a_placeholder(kind: str) -> None:
    bad = GOOD.replace("Beacon Security", "Zzyzx Qqq Ltd Wwww")
    value, model = run(
        kind, bad, GOOD, schema=Grounded, validation_context={"source": USER[1]["content"]}
    )
    assert value == Grounded.model_validate_json(GOOD)
    assert model.correction() == turn(
        "\"vendor\": 'Zzyzx Qqq Ltd Wwww' does not appear in the text.",
        template='{"number": "FA32135", "vendor": "<string>", "currency": "USD", "total": 954.88}',
    )


def test_a_suggestion_is_validated_again_like_any_reply(kind: str) -> None:
    # a reply that ignores the suggested span and invents again is refused again
    bad = GOOD.replace("Beacon Security", "Bacon Securty")
    options = {"schema": Grounded, "validation_context": {"source": USER[1]["content"]}}
    with pytest.raises(ResponseValidationError) as info:
        call(decorated(kind, Model(bad), **options), USER)
    assert [e["type"] for e in info.value.errors] == ["not_in_source"]
    assert info.value.corrections_used == 2


def test_the_context_can_be_made_from_the_calls_arguments(kind: str) -> None:
    made: list[Mapping[str, Any]] = []

    def context(arguments: Mapping[str, Any]) -> dict[str, str]:
        made.append(arguments)
        return {"source": arguments["text"]}

    def extract(messages: list[dict[str, Any]], text: str) -> str:
        return "X" + GOOD if len(messages) > 2 else GOOD.replace("FA32135", "FA99999")

    async def aextract(messages: list[dict[str, Any]], text: str) -> str:
        return extract(messages, text)

    fn = self_correct(schema=Grounded, validation_context=context)(
        extract if kind == "sync" else aextract
    )
    value = call(fn, USER, text=USER[1]["content"])
    assert value.number == "FA32135"
    assert made[0]["text"] == USER[1]["content"]
    assert made[0]["messages"] == USER


def test_without_the_source_in_the_context_a_grounded_field_is_not_checked() -> None:
    assert Grounded.model_validate_json(GOOD.replace("FA32135", "anything")).number == "anything"


def test_grounding_ignores_case_and_runs_of_spaces() -> None:
    source = "Invoice  INV-7\nfrom ACME   audio GmbH"
    value = Grounded.model_validate(
        {"number": "inv-7", "vendor": "Acme Audio GmbH", "currency": "EUR", "total": 1},
        context={"source": source},
    )
    assert value.vendor == "Acme Audio GmbH"
    with pytest.raises(ValidationError, match="it has 'ACME   audio'"):
        Grounded.model_validate(
            {"number": "INV-7", "vendor": "Acme Audo", "currency": "EUR", "total": 1},
            context={"source": source},
        )


@pytest.mark.parametrize("bad", [42, "source"])
def test_a_bad_validation_context_is_a_type_error(kind: str, bad: Any) -> None:
    with pytest.raises(TypeError, match="validation_context"):
        self_correct(schema=Invoice, validation_context=bad)


def test_a_context_callable_returning_no_dict_is_a_type_error(kind: str) -> None:
    with pytest.raises(TypeError, match="must return a dict"):
        run(kind, GOOD, validation_context=lambda arguments: "text")


def test_a_cross_field_validator_error_becomes_the_correction(kind: str) -> None:
    class Distinct(BaseModel):
        number: str
        vendor: str

        @model_validator(mode="after")
        def differ(self) -> Distinct:
            if self.number == self.vendor:
                raise ValueError("number and vendor are the same: the number identifies it")
            return self

    same = '{"number": "Beacon", "vendor": "Beacon"}'
    good = '{"number": "FA32135", "vendor": "Beacon"}'
    value, model = run(kind, same, good, schema=Distinct)
    assert value.number == "FA32135"
    assert "Number and vendor are the same: the number identifies it" in model.correction()


# --- the first call: schema_prompt and response_format -------------------------------------------


def test_schema_prompt_is_an_instance_template_with_descriptions() -> None:
    assert schema_prompt(Order).splitlines() == [
        LEAD,
        '{"id": <integer>, "placed": "<date YYYY-MM-DD>", "note": "<string or null>", '
        '"express": <true or false>, "lines": [{"sku": "<string>", "qty": <integer>}, ...], '
        '"kind": "retail", "tags": {"<key>": <number>, ...}, "customer": "<string>"}',
    ]

    class Described(BaseModel):
        total: Decimal = Field(description="the total due,\n as written")

    assert schema_prompt(Described).splitlines()[2:] == [
        "Where:",
        '- "total": the total due, as written',
    ]
    assert "Where" not in schema_prompt(Described, descriptions=False)
    with pytest.raises(TypeError, match="schema_prompt"):
        schema_prompt(lambda: None)


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        pytest.param("llama.cpp", {"response_format": {"type": "json_object", "schema": "S"}}),
        pytest.param("ollama", {"format": "S"}),
        pytest.param("vllm", {"extra_body": {"guided_json": "S"}}),
    ],
)
def test_response_format_per_dialect(dialect: Any, expected: dict[str, Any]) -> None:
    schema = Invoice.model_json_schema()
    made = json.loads(json.dumps(expected).replace('"S"', json.dumps(schema)))
    assert response_format(Invoice, dialect=dialect) == made


def test_response_format_for_openai_is_strict() -> None:
    made = response_format(Order)
    spec = made["response_format"]["json_schema"]
    assert made["response_format"]["type"] == "json_schema"
    assert spec["name"] == "Order"
    assert spec["strict"] is True
    schema = spec["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == list(schema["properties"])
    assert schema["properties"]["tags"]["anyOf"][1] == {"type": "null"}
    assert schema["$defs"]["Line"]["additionalProperties"] is False
    assert "default" not in json.dumps(schema)
    response_format(Order)["response_format"]["json_schema"]["schema"]["x"] = 1
    assert "x" not in response_format(Order)["response_format"]["json_schema"]["schema"]


def test_response_format_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="dialect must be one of"):
        response_format(Invoice, dialect="gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a JSON object at the top"):
        response_format(list[Line])
    with pytest.raises(TypeError):
        response_format(Invoice.model_validate_json)  # type: ignore[arg-type]


# --- cost: a correction repeats nothing the request already carries ------------------------------


def _tokens(server: ScriptedOpenAI, model: str) -> int:
    total = 0
    for request in server.requests_for(model):
        assert request.body is not None
        messages: Sequence[Mapping[str, Any]] = request.body["messages"]
        total += sum(1 + len(str(m["content"]).split()) for m in messages)
    return total


SYSTEM = (
    "You extract data from invoices. Reply with only a JSON object with exactly these keys:\n"
    '- "number": the invoice number as written, a string\n'
    '- "vendor": the name of the company that issued the invoice, a string\n'
    '- "currency": "EUR", "USD" or "GBP"\n'
    '- "total": the total due, a number such as 1204.5'
)
EXTRACTION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Invoice 2019-118 from Example Corp, total due GBP 1,020.50."},
    {
        "role": "assistant",
        "content": '{"number": "2019-118", "vendor": "Example Corp", "currency": "GBP", '
        '"total": 1020.50}',
    },
    {"role": "user", "content": USER[1]["content"]},
]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(GOOD.replace('"total"', '"amount_paid"'), id="a-misnamed-key"),
        pytest.param(GOOD.replace('"USD"', '"dollars"'), id="a-wrong-value"),
        pytest.param(GOOD.replace("954.88", "954.88 USD"), id="words-after-a-number"),
    ],
)
def test_a_one_correction_job_sends_at_most_the_minimal_loops_prompt_tokens(
    scripted_openai: ScriptedOpenAI, bad: str
) -> None:
    """The request carries the schema (response_format); the correction does not repeat it.

    Measured in the scripted server's prompt tokens (words), against what one writes by hand:
    the failed reply and pydantic's error, then ask again. benchmarks/bench_correction_cost.py
    prints the same figures.
    """
    constrained = response_format(Invoice, dialect="llama.cpp")
    for model in ("refinekit", "minimal"):
        scripted_openai.script(model, [bad, GOOD])
    client = scripted_openai.client()

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
        return client.chat.completions.create(model="refinekit", messages=messages, **constrained)

    with refinekit.job() as job:
        assert extract(EXTRACTION) == INVOICE

    messages = list(EXTRACTION)
    reply = client.chat.completions.create(model="minimal", messages=messages, **constrained)
    text = reply.choices[0].message.content or ""
    with pytest.raises(ValidationError) as info:
        Invoice.model_validate_json(text)
    messages += [
        {"role": "assistant", "content": text},
        {"role": "user", "content": f"Invalid: {info.value}. Reply with the corrected JSON."},
    ]
    client.chat.completions.create(model="minimal", messages=messages, **constrained)

    ours, minimal = _tokens(scripted_openai, "refinekit"), _tokens(scripted_openai, "minimal")
    assert job.usage.prompt_tokens == ours
    assert ours <= 1.05 * minimal, (ours, minimal)


def test_over_http_a_cut_off_reply_is_named_from_its_finish_reason(
    kind: str, scripted_openai: ScriptedOpenAI
) -> None:
    scripted_openai.script(
        "extractor",
        [Reply.text('{"number": "FA32135", "vendor": "Bea', finish_reason="length"), GOOD],
    )
    if kind == "sync":

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
            with scripted_openai.client() as client:
                return client.chat.completions.create(model="extractor", messages=messages)

        assert extract(USER) == INVOICE
    else:

        @self_correct(schema=Invoice)
        async def aextract(messages: list[dict[str, Any]]) -> ChatCompletion:
            async with scripted_openai.async_client() as client:
                return await client.chat.completions.create(model="extractor", messages=messages)

        assert asyncio.run(aextract(USER)) == INVOICE
    second = scripted_openai.requests_for("extractor")[1]
    assert second.body is not None
    content = second.body["messages"][-1]["content"]
    assert "The reply was cut off at the length limit" in content
    assert '{"number": "FA32135", "vendor": "<string>"' in content


def test_a_number_for_a_string_next_to_another_problem_is_suggested_as_a_string(
    kind: str,
) -> None:
    # alone it would be repaired; with another problem it goes to the model, with the digits
    # already in quotes in the template
    bad = '{"number": 32135, "vendor": "Beacon Security", "currency": "USD"}'
    value, model = run(kind, bad, GOOD)
    assert value == INVOICE
    assert model.correction() == turn(
        '"number" must be a string: write "32135", in quotes.',
        '"total" is missing.',
        template='{"number": "32135", "vendor": "Beacon Security", "currency": "USD", '
        '"total": <number>}',
    )
