"""`checks.values_supported()` and `evidence.stated_values()`: no value without a source.

Every number and quoted name a prose answer states (every string and number of a JSON answer)
must be in a context document; each stated value comes with where a document states it.
"""

from __future__ import annotations

import pytest

from refinekit import (
    ContextDocument,
    EvaluationRequest,
    ToolCall,
    ValueEvidence,
    Verdict,
    checks,
    evidence,
    retry_on_low_quality,
)
from refinekit.checks import Check

INVOICE = "Invoice INV-7 from ACME  Ltd, issued 3 March 2025. Total due: 12.50 EUR, VAT 20%."


def asked(answer: str, *texts: str, question: str = "Who sent it?") -> EvaluationRequest:
    context = tuple(
        ContextDocument(text=t, source=f"docs/{i}.md" if i else None) for i, t in enumerate(texts)
    )
    return EvaluationRequest(question=question, answer=answer, context=context)


async def judge(check: Check, req: EvaluationRequest) -> Verdict:
    verdict = check.evaluate(req)
    assert await check.aevaluate(req) == verdict
    return verdict


async def test_an_answer_whose_values_are_all_in_the_context_passes() -> None:
    verdict = await judge(
        checks.values_supported(),
        asked('"Acme Ltd" asks 12.5 EUR with 20% VAT.', INVOICE),
    )
    assert verdict.passed, verdict.feedback
    assert verdict.score == 1.0
    assert verdict.metadata["unsupported"] == []


async def test_a_name_or_number_in_no_document_is_refused_and_named() -> None:
    verdict = await judge(
        checks.values_supported(),
        asked("'Globex Corp' sent it; the total is 12.50 and VAT 14%.", INVOICE),
    )
    assert not verdict.passed
    assert verdict.feedback == (
        "Use only values from the context: 'Globex Corp' and 14% are not in it."
    )
    assert verdict.score == pytest.approx(1 / 3)
    assert verdict.metadata["unsupported"] == ["Globex Corp", "14%"]


async def test_numbers_supported_alone_lets_an_invented_name_through() -> None:
    # the difference this check makes: the figures are right, the name is not in the text
    req = asked('It came from "Globex Corp", 12.50 EUR.', INVOICE)
    assert (await judge(checks.numbers_supported(), req)).passed
    assert not (await judge(checks.values_supported(), req)).passed


def test_each_stated_value_says_where_the_context_states_it() -> None:
    req = asked(
        "\u201cAcme Ltd\u201d billed 12.5 (VAT 20 percent); see \u00abthe annex\u00bb.",
        "Nothing here.",
        INVOICE,
    )
    records = evidence.stated_values(req)
    assert records == (
        ValueEvidence(
            path="", value="Acme Ltd", text="ACME  Ltd", start=19, end=28, source="docs/1.md"
        ),
        ValueEvidence(path="", value="12.5", text="12.50", start=62, end=67, source="docs/1.md"),
        ValueEvidence(
            path="", value="20 percent", text="20%", start=77, end=80, source="docs/1.md"
        ),
        ValueEvidence(path="", value="the annex"),
    )
    for record in records[:3]:
        assert record.found
        assert record.start is not None
        assert record.end is not None
        assert INVOICE[record.start : record.end] == record.text
    assert not records[3].found
    # the check's verdict carries the same records, as JSON-ready dicts
    verdict = checks.values_supported().evaluate(req)
    assert verdict.metadata["values"] == [r.model_dump() for r in records]


def test_a_document_without_a_source_is_named_by_its_position() -> None:
    (record,) = evidence.stated_values(asked("It is 12.50.", INVOICE))
    assert record.source == "context[0]"


def test_a_json_answer_states_each_value_at_its_field() -> None:
    answer = (
        '{"vendor": "Acme Ltd", "currency": "USD", "total": 12.5, "paid": true, '
        '"lines": [{"sku": "INV-7"}], "note": null}'
    )
    records = evidence.stated_values(asked(answer, INVOICE))
    assert [(r.path, r.value, r.found) for r in records] == [
        ("vendor", "Acme Ltd", True),
        ("currency", "USD", False),
        ("total", "12.5", True),
        ("lines[0].sku", "INV-7", True),
    ]
    verdict = checks.values_supported().evaluate(asked(answer, INVOICE))
    assert verdict.feedback == "Use only values from the context: 'USD' (currency) is not in it."


@pytest.mark.parametrize(
    "answer",
    [
        "It doesn't say; Acme's invoice is due.",  # apostrophes are no quotes
        "See [docs/1.md] and docs/1.md for it.",  # a citation states no value
        "No value at all.",
        "",
    ],
)
async def test_answers_stating_no_value_pass(answer: str) -> None:
    req = EvaluationRequest(
        question="?", answer=answer, context=(ContextDocument("Acme", source="docs/1.md"),)
    )
    verdict = await judge(checks.values_supported(), req)
    assert verdict.passed, verdict.feedback
    assert verdict.metadata["values"] == []


def test_tool_results_the_question_and_numbers_as_words_support_values() -> None:
    req = EvaluationRequest(
        question="Where is order A-1001?",
        answer="Order 1001 ships in 2 days from 'Lyon'.",
        tool_calls=(
            ToolCall(name="track", result="Ships from Lyon in two days."),
            ToolCall(name="broken", result="error: Paris", ok=False),
        ),
    )
    records = evidence.stated_values(req)
    assert [(r.value, r.source, r.text) for r in records] == [
        ("1001", "question", "1001"),
        ("2", "tool_calls[0]", "two"),
        ("Lyon", "tool_calls[0]", "Lyon"),
    ]
    # a failed tool call's result supports nothing
    failed = req.model_copy(update={"answer": "It ships from 'Paris'."})
    assert checks.values_supported().evaluate(failed).metadata["unsupported"] == ["Paris"]


def test_a_judging_state_from_messages_is_read_the_same_way() -> None:
    state = evidence.from_messages(
        [
            {"role": "user", "content": "Total?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Total: 1,020.50 EUR"},
            {"role": "assistant", "content": "The total is 1020.5 EUR, not 1100."},
        ]
    )
    records = evidence.stated_values(state)
    assert [(r.value, r.source, r.text) for r in records] == [
        ("1020.5", "tool:get#c1", "1,020.50"),
        ("1100", None, None),
    ]


def test_stated_values_takes_a_request_only() -> None:
    with pytest.raises(TypeError, match="stated_values\\(\\) takes an EvaluationRequest, not str"):
        evidence.stated_values("The total is 12.")  # type: ignore[arg-type]


def test_the_caller_s_request_is_not_changed() -> None:
    req = asked("'Globex' 14", INVOICE)
    before = req.model_dump()
    checks.values_supported().evaluate(req)
    assert req.model_dump() == before


def test_a_retry_fixes_an_answer_that_invented_a_value() -> None:
    seen: list[str | None] = []

    @retry_on_low_quality(
        evaluator=checks.values_supported(),
        max_retries=1,
        wait=0,
        context=lambda args: [ContextDocument(INVOICE)],
    )
    def answer(question: str, feedback: str | None = None) -> str:
        seen.append(feedback)
        return "Sent by 'Acme Ltd'." if feedback else "Sent by 'Globex Corp'."

    assert answer("Who sent it?") == "Sent by 'Acme Ltd'."
    assert seen[1] is not None
    assert "'Globex Corp' is not in it" in seen[1]


# --- numbers exactly as written, over the whole text ------------------------------------------

TWENTY_NINE = "12345678901234567890123456789"


@pytest.mark.parametrize(
    "answer",
    [
        "The balance is 12345678901234567890123456790 wei.",
        '{"balance": 12345678901234567890123456790}',
    ],
)
async def test_a_long_number_is_compared_exactly_not_rounded(answer: str) -> None:
    req = asked(answer, f"Balance: {TWENTY_NINE} wei")
    for check in (checks.values_supported(), checks.numbers_supported()):
        verdict = await judge(check, req)
        assert not verdict.passed, check
        assert verdict.metadata["unsupported"] == ["12345678901234567890123456790"]
    right = asked(answer.replace("567890123456790", "567890123456789"), f"Balance: {TWENTY_NINE}")
    assert (await judge(checks.values_supported(), right)).passed
    assert (await judge(checks.numbers_supported(), right)).passed


async def test_a_json_number_past_a_float_s_range_is_a_value_the_text_must_state() -> None:
    verdict = await judge(checks.values_supported(), asked('{"total": 1e400}', "Total: 1 EUR"))
    assert not verdict.passed
    assert verdict.feedback == "Use only values from the context: 1e400 (total) is not in it."
    stated = asked('{"total": 1e400, "tax": 1.0}', "Total: 1e400? No: 1 EUR")
    assert [r.found for r in evidence.stated_values(stated)] == [False, True]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_a_json_nan_or_infinity_is_a_value_the_text_must_state(constant: str) -> None:
    verdict = await judge(checks.values_supported(), asked(f'{{"total": {constant}}}', "Total: 1"))
    assert not verdict.passed
    assert (
        verdict.feedback == f"Use only values from the context: '{constant}' (total) is not in it."
    )


async def test_a_5000_digit_number_is_read_in_an_answer_and_in_the_context() -> None:
    huge = "7" * 5000
    for answer in (f"Checksum {huge}.", f'{{"checksum": {huge}}}'):
        assert (await judge(checks.values_supported(), asked(answer, f"sum {huge}"))).passed
        other = asked(answer, f"sum {huge[:-1]}8")
        assert not (await judge(checks.values_supported(), other)).passed
        assert not (await judge(checks.numbers_supported(), other)).passed


async def test_a_number_far_into_a_long_document_supports_the_answer() -> None:
    document = "Terms and conditions apply. " * 1000 + "Total payable: 4321.09 EUR."
    assert document.index("4321.09") > 20_000
    for answer in ("The total is 4321.09 EUR.", '{"total": 4321.09}'):
        for check in (checks.values_supported(), checks.numbers_supported()):
            assert (await judge(check, asked(answer, document))).passed, (check, answer)
            wrong = asked(answer.replace("4321.09", "4321.9"), document)
            assert not (await judge(check, wrong)).passed, (check, answer)


async def test_a_json_answer_nested_past_200_levels_is_refused_not_a_crash() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    verdict = await judge(checks.values_supported(), asked(deep, INVOICE))
    assert not verdict.passed
    assert verdict.feedback == (
        "Reply with JSON nested at most 200 levels deep; the answer's is nested deeper."
    )
    with pytest.raises(ValueError, match="nested more than 200 levels deep"):
        evidence.stated_values(asked(deep, INVOICE))
    just_over = "[" * 201 + "12.50" + "]" * 201
    assert not (await judge(checks.values_supported(), asked(just_over, INVOICE))).passed


async def test_a_value_150_levels_deep_is_read_and_checked() -> None:
    # reliability.md: a value up to 200 levels deep is read; none is skipped for its depth
    invented = '{"a":' * 150 + "999" + "}" * 150
    verdict = await judge(checks.values_supported(), asked(invented, INVOICE))
    assert verdict.feedback == (
        "Use only values from the context: 999 (" + ".".join(["a"] * 150) + ") is not in it."
    )
    stated = '{"a":' * 150 + "12.50" + "}" * 150
    assert (await judge(checks.values_supported(), asked(stated, INVOICE))).passed
