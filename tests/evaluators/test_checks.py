"""The rule checks of `refinekit.checks`: pass rules, scores, feedback, argument errors."""

from __future__ import annotations

import dataclasses
import re

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from refinekit import ContextDocument, EvaluationRequest, ToolCall, Verdict, checks
from refinekit.checks import Check


def request(answer: str, *sources: str | None) -> EvaluationRequest:
    """A request whose context has one document per source (None: a document without one)."""
    context = tuple(ContextDocument(text=f"document {i}", source=s) for i, s in enumerate(sources))
    return EvaluationRequest(question="What is it?", answer=answer, context=context)


async def judge(check: Check, req: EvaluationRequest) -> Verdict:
    """Judge through both entry points; they must agree."""
    sync_verdict = check.evaluate(req)
    async_verdict = await check.aevaluate(req)
    assert sync_verdict == async_verdict
    return sync_verdict


# --- cites_source ---------------------------------------------------------------------------


async def test_cites_source_passes_when_one_source_is_cited() -> None:
    verdict = await judge(
        checks.cites_source(),
        request("Refunds take 5 days (docs/refunds.md).", "docs/refunds.md", "docs/billing.md"),
    )
    assert verdict.passed
    assert verdict.score == 0.5
    assert verdict.feedback == ""
    assert verdict.metadata["cited"] == ["docs/refunds.md"]
    assert verdict.metadata["source"] == "code"


async def test_cites_source_scores_the_share_of_sources_cited() -> None:
    verdict = await judge(
        checks.cites_source(),
        request("See a.md, b.md and c.md.", "a.md", "b.md", "c.md", "d.md"),
    )
    assert verdict.passed
    assert verdict.score == 0.75


@pytest.mark.parametrize(
    ("answer", "cited"),
    [
        ("See a.md.", True),
        ("See (a.md), then b.", True),
        ("a.md, b.md", True),
        ("See data.md.", False),
        ("See docs/a.md.", False),
        ("See a.md.bak.", False),
        ("See a.mdx.", False),
    ],
)
async def test_cites_source_matches_the_source_as_a_whole_token(answer: str, cited: bool) -> None:
    verdict = await judge(checks.cites_source(), request(answer, "a.md"))
    assert verdict.passed is cited


async def test_cites_source_counts_only_documents_that_have_a_source() -> None:
    verdict = await judge(checks.cites_source(), request("As a.md says.", "a.md", None, None))
    assert verdict.passed
    assert verdict.score == 1.0


async def test_cites_source_fails_naming_the_sources_when_none_is_cited() -> None:
    verdict = await judge(
        checks.cites_source(),
        request("Refunds take 5 days.", "docs/refunds.md", "docs/billing.md"),
    )
    assert not verdict.passed
    assert verdict.score == 0.0
    assert verdict.feedback == (
        "Cite the source you used as [docs/refunds.md] or [docs/billing.md]."
    )
    assert verdict.metadata["cited"] == []


async def test_cites_source_feedback_with_one_source_says_exactly_what_to_write() -> None:
    verdict = await judge(
        checks.cites_source(), request("The warranty is 10 months.", "policies/warranty-1.md")
    )
    assert verdict.feedback == "Cite the source as [policies/warranty-1.md]."


async def test_cites_source_feedback_lists_at_most_five_sources() -> None:
    sources = [f"s{i}.md" for i in range(7)]
    verdict = await judge(checks.cites_source(), request("No citation here.", *sources))
    assert not verdict.passed
    assert verdict.feedback == (
        "Cite the source you used as [s0.md], [s1.md], [s2.md], [s3.md] or [s4.md] "
        "(or another of the 7 sources given)."
    )


async def test_cites_source_feedback_names_a_citation_shortened_to_the_end_of_its_path() -> None:
    check = checks.cites_source()
    verdict = await judge(
        check, request("The warranty is 10 months [warranty-1.md].", "policies/warranty-1.md")
    )
    assert not verdict.passed
    assert verdict.feedback == "Cite the source as [policies/warranty-1.md], not warranty-1.md."
    several = await judge(check, request("See [faq/7].", "https://x.test/faq/7", "b.md"))
    assert (
        several.feedback
        == "Cite the source you used as [https://x.test/faq/7] or [b.md], not faq/7."
    )


async def test_cites_source_does_not_take_a_bare_word_or_number_for_a_shortened_citation() -> None:
    verdict = await judge(
        checks.cites_source(), request("It takes 7 days.", "https://x.test/faq/7")
    )
    assert verdict.feedback == "Cite the source as [https://x.test/faq/7]."


@pytest.mark.parametrize(
    "sources",
    [("policies/warranty-1.md",), ("a.md", "b.md", "c.md"), ("https://x.test/faq?id=7", "id-42")],
)
async def test_cites_source_feedback_followed_passes(sources: tuple[str, ...]) -> None:
    # the instruction names the citation in the form the check accepts: doing what it says passes
    check = checks.cites_source()
    feedback = (await judge(check, request("Refunds take 5 days.", *sources))).feedback
    citation = re.findall(r"\[[^\]]+\]", feedback)[-1]
    assert (await judge(check, request(f"Refunds take 5 days {citation}.", *sources))).passed


@pytest.mark.parametrize("sources", [(), (None,), (None, None)], ids=["no-docs", "one", "two"])
async def test_cites_source_fails_clearly_when_no_document_has_a_source(
    sources: tuple[None, ...],
) -> None:
    verdict = await judge(checks.cites_source(), request("Anything, docs/a.md.", *sources))
    assert not verdict.passed
    assert verdict.score == 0.0
    assert "No context document with a source" in verdict.feedback


# --- contains -------------------------------------------------------------------------------


async def test_contains_all_is_case_insensitive_by_default() -> None:
    verdict = await judge(
        checks.contains("Paris", "FRANCE"), request("paris is the capital of France.")
    )
    assert verdict.passed
    assert verdict.score == 1.0
    assert verdict.feedback == ""


async def test_contains_folds_case_fully() -> None:
    verdict = await judge(checks.contains("Straße"), request("The STRASSE is closed."))
    assert verdict.passed


async def test_contains_all_fails_naming_only_the_missing_phrases() -> None:
    verdict = await judge(
        checks.contains("Paris", "Berlin", "Rome"), request("Paris and Rome, not the others.")
    )
    assert not verdict.passed
    assert verdict.score == pytest.approx(2 / 3)
    assert verdict.feedback == "Mention 'Berlin' in the answer."
    assert verdict.metadata["missing"] == ["Berlin"]


async def test_contains_case_sensitive() -> None:
    check = checks.contains("Paris", case_sensitive=True)
    failed = await judge(check, request("paris is lowercase here."))
    assert not failed.passed
    assert "'Paris'" in failed.feedback
    assert (await judge(check, request("Paris."))).passed


async def test_contains_any_passes_with_one_phrase() -> None:
    verdict = await judge(
        checks.contains("refund", "credit", "voucher", all_required=False),
        request("You get a Voucher."),
    )
    assert verdict.passed
    assert verdict.score == pytest.approx(1 / 3)
    assert verdict.feedback == ""


async def test_contains_any_fails_naming_every_phrase() -> None:
    verdict = await judge(
        checks.contains("refund", "credit", all_required=False), request("Nothing to offer.")
    )
    assert not verdict.passed
    assert verdict.score == 0.0
    assert verdict.feedback == "Mention 'refund' or 'credit' in the answer."


async def test_contains_names_every_missing_phrase_in_one_instruction() -> None:
    verdict = await judge(checks.contains("a1", "b2", "c3"), request("Nothing here."))
    assert verdict.feedback == "Mention 'a1', 'b2' and 'c3' in the answer."
    followed = await judge(checks.contains("a1", "b2", "c3"), request("a1, b2 and c3."))
    assert followed.passed


@pytest.mark.parametrize("phrases", [(), ("",), ("ok", "")], ids=["none", "empty", "one-empty"])
def test_contains_rejects_no_phrase_or_an_empty_one(phrases: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="non-empty strings"):
        checks.contains(*phrases)


# --- matches --------------------------------------------------------------------------------


async def test_matches_searches_anywhere_in_the_answer() -> None:
    check = checks.matches(r"\d{4}-\d{2}-\d{2}")
    passed = await judge(check, request("It shipped on 2026-01-31, on time."))
    assert passed.passed
    assert passed.score == 1.0
    assert passed.feedback == ""
    failed = await judge(check, request("It shipped last Tuesday."))
    assert not failed.passed
    assert failed.score == 0.0
    assert (
        failed.feedback
        == r"Include text matching the pattern '\\d{4}-\\d{2}-\\d{2}' in the answer."
    )


async def test_matches_takes_a_compiled_pattern_with_its_flags() -> None:
    check = checks.matches(re.compile(r"ticket #\d+", re.IGNORECASE))
    assert (await judge(check, request("See TICKET #42."))).passed
    failed = await judge(check, request("See the ticket."))
    assert not failed.passed
    assert "ticket #" in failed.feedback


async def test_matches_uses_the_description_in_feedback() -> None:
    check = checks.matches(r"\d{4}-\d{2}-\d{2}", description="a date like 2026-01-31")
    verdict = await judge(check, request("soon"))
    assert verdict.feedback == "Include a date like 2026-01-31 in the answer."


def test_matches_rejects_an_invalid_regex() -> None:
    with pytest.raises(ValueError, match="invalid regular expression") as info:
        checks.matches("(unclosed")
    assert isinstance(info.value.__cause__, re.error)


# --- max_length -----------------------------------------------------------------------------


async def test_max_length_boundary() -> None:
    check = checks.max_length(10)
    at_limit = await judge(check, request("x" * 10))
    assert at_limit.passed
    assert at_limit.feedback == ""
    over = await judge(check, request("x" * 11))
    assert not over.passed
    assert over.score == 0.0
    assert over.feedback == "Shorten the answer to at most 10 characters; it has 11."
    assert over.metadata["length"] == 11


@pytest.mark.parametrize("n", [0, -1, True, 2.5, "10", None])
def test_max_length_rejects_anything_but_a_positive_int(n: object) -> None:
    with pytest.raises(ValueError, match="positive int"):
        checks.max_length(n)  # type: ignore[arg-type]


# --- not_empty ------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["", " ", "\n\t  \r\n"])
async def test_not_empty_fails_on_blank_answers(answer: str) -> None:
    verdict = await judge(checks.not_empty(), request(answer))
    assert not verdict.passed
    assert verdict.feedback == "Answer the question; the answer was empty."


async def test_not_empty_passes_on_text() -> None:
    verdict = await judge(checks.not_empty(), request("  ok  "))
    assert verdict.passed
    assert verdict.feedback == ""


# --- json_schema ----------------------------------------------------------------------------


class Item(BaseModel):
    name: str
    price_cents: int


class Order(BaseModel):
    number: str
    items: list[Item]


async def test_json_schema_passes_valid_json() -> None:
    answer = '{"number": "A-1", "items": [{"name": "pen", "price_cents": 120}]}'
    verdict = await judge(checks.json_schema(Order), request(answer))
    assert verdict.passed
    assert verdict.score == 1.0
    assert verdict.feedback == ""


async def test_json_schema_reports_invalid_json() -> None:
    verdict = await judge(checks.json_schema(Order), request('{"number": "A-1", "items": ['))
    assert not verdict.passed
    assert verdict.feedback.startswith("Reply with JSON that fits the schema; fix:\n")
    assert "(the whole value): Invalid JSON" in verdict.feedback


async def test_json_schema_names_the_path_of_a_wrong_field() -> None:
    answer = '{"number": "A-1", "items": [{"name": "pen", "price_cents": "cheap"}]}'
    verdict = await judge(checks.json_schema(Order), request(answer))
    assert not verdict.passed
    assert "- items[0].price_cents: Input should be a valid integer" in verdict.feedback
    assert '(got "cheap")' in verdict.feedback
    assert "errors.pydantic.dev" not in verdict.feedback


async def test_json_schema_names_a_missing_field() -> None:
    verdict = await judge(checks.json_schema(Order), request('{"items": []}'))
    assert not verdict.passed
    assert "- number: Field required" in verdict.feedback


async def test_json_schema_caps_the_number_of_errors() -> None:
    answer = "[" + ", ".join(['{"name": 1}'] * 10) + "]"
    verdict = await judge(checks.json_schema(list[Item]), request(answer))
    assert not verdict.passed
    lines = verdict.feedback.splitlines()[1:]
    assert len(lines) == 6
    assert lines[-1].startswith("- ... and ")


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Money:
    amount: int
    currency: str


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (list[Item], '[{"name": "a", "price_cents": 1}]', '[{"name": "a"}]'),
        (Point, '{"x": 1, "y": 2}', '{"x": 1}'),
        (Money, '{"amount": 5, "currency": "EUR"}', '{"amount": "five", "currency": "EUR"}'),
    ],
    ids=["list", "typeddict", "dataclass"],
)
async def test_json_schema_takes_any_type_pydantic_validates(
    schema: object, good: str, bad: str
) -> None:
    check = checks.json_schema(schema)
    assert (await judge(check, request(good))).passed
    assert not (await judge(check, request(bad))).passed


def test_json_schema_rejects_a_type_pydantic_cannot_handle() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="pydantic cannot validate"):
        checks.json_schema(Opaque)


def _fields(name: str, price_cents: int) -> Item:
    return Item(name=name, price_cents=price_cents)


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (_fields, "the function _fields is not a type"),
        (Item.model_validate_json, "Pass Item itself"),
        (Item(name="a", price_cents=1), "an instance of Item is not a type"),
    ],
    ids=["function", "classmethod", "instance"],
)
def test_json_schema_takes_a_type_not_a_callable_or_an_instance(schema: object, says: str) -> None:
    # pydantic would take a function for a call to make with the answer's fields
    with pytest.raises(TypeError) as caught:
        checks.json_schema(schema)
    assert str(caught.value).startswith("checks.json_schema(): ")
    assert says in str(caught.value)


# --- numbers_supported ----------------------------------------------------------------------


def grounded(answer: str, *texts: str, question: str = "What is it?") -> EvaluationRequest:
    """A request whose context has one document per text."""
    context = tuple(ContextDocument(text=t) for t in texts)
    return EvaluationRequest(question=question, answer=answer, context=context)


@pytest.mark.parametrize(
    ("answer", "context"),
    [
        ("Delivery takes 4 days.", "Orders arrive within 4 business days."),
        ("Delivery takes 4.0 days.", "Orders arrive within 4 business days."),
        ("The total is 1020.5 euros.", "Total due: EUR 1,020.50"),
        ("The total is 1,020.50 euros.", "Total due: EUR 1020.5"),
        ("Members get 15 percent off.", "Members get 15% off orders over 100 euros."),
        ("Members get 15 % off.", "Members get 15 per cent off."),
        ("A full charge takes 2 hours.", "A full charge takes about two hours."),
        ("It opens at 9:30.", "Open from 9:30 to 17:00."),
        ("No number here, just one of the answers.", "Nothing countable."),
        ("Invoice FA00731 from v2 of the system.", "Invoice FA00731."),
    ],
)
async def test_numbers_supported_passes_when_every_number_is_in_the_context(
    answer: str, context: str
) -> None:
    verdict = await judge(checks.numbers_supported(), grounded(answer, context))
    assert verdict.passed, verdict.feedback
    assert verdict.score == 1.0
    assert verdict.feedback == ""
    assert verdict.metadata["unsupported"] == []


async def test_numbers_supported_names_the_unsupported_numbers_as_written() -> None:
    verdict = await judge(
        checks.numbers_supported(),
        grounded(
            "Shipping takes 5 days, costs 4.99 and 20% off: 5 days.", "Ships in 3 days for 4.99."
        ),
    )
    assert not verdict.passed
    assert verdict.feedback == "Use only numbers from the context: 5 and 20% are not in it."
    assert verdict.metadata["unsupported"] == ["5", "20%"]
    assert verdict.score == pytest.approx(1 / 4)  # 4.99 of 5, 4.99, 20%, 5


async def test_numbers_supported_one_unsupported_number() -> None:
    verdict = await judge(
        checks.numbers_supported(), grounded("Within 5 business days.", "Within 4 business days.")
    )
    assert verdict.feedback == "Use only numbers from the context: 5 is not in it."


@pytest.mark.parametrize(
    ("answer", "context"),
    [
        ("Members get 15% off.", "Members get 15 euros off."),  # a percentage needs one
        ("Members get 15 euros off.", "Members get 15% off."),
        ("It costs 1,020 euros.", "It costs 1.02 euros."),
        ("Within 14 days.", "Within 4 days."),  # not a substring match
        ("Within 4 days.", "Within 14 days."),
    ],
)
async def test_numbers_supported_compares_values_not_text(answer: str, context: str) -> None:
    verdict = await judge(checks.numbers_supported(), grounded(answer, context))
    assert not verdict.passed


async def test_numbers_supported_reads_a_comma_list_as_several_numbers() -> None:
    verdict = await judge(
        checks.numbers_supported(), grounded("Rooms 1,2 and 3.", "Rooms 1 and 2.")
    )
    assert verdict.metadata["unsupported"] == ["3"]


async def test_numbers_supported_counts_the_question_and_tool_results_as_support() -> None:
    check = checks.numbers_supported()
    asked = grounded("Order 1187 ships in 4 days.", "Ships in 4 days.", question="Order 1187?")
    assert (await judge(check, asked)).passed
    looked_up = EvaluationRequest(
        question="Where is my order?",
        answer="It ships in 6 days.",
        tool_calls=(ToolCall(name="status", result='{"days": 6}'),),
    )
    assert (await judge(check, looked_up)).passed
    failed_tool = EvaluationRequest(
        question="Where is my order?",
        answer="It ships in 6 days.",
        tool_calls=(ToolCall(name="status", result="error: 6 retries failed", ok=False),),
    )
    assert not (await judge(check, failed_tool)).passed


async def test_numbers_supported_without_context_fails_on_any_number() -> None:
    verdict = await judge(checks.numbers_supported(), EvaluationRequest(answer="It takes 3 days."))
    assert not verdict.passed
    assert verdict.metadata["unsupported"] == ["3"]


# --- every check ----------------------------------------------------------------------------

CASES = [
    (checks.cites_source(), request("no cite", "a.md"), request("per a.md", "a.md")),
    (checks.contains("x"), request("nothing"), request("an x")),
    (checks.contains("x", "y", all_required=False), request("nothing"), request("a y")),
    (checks.matches(r"\d"), request("none"), request("1")),
    (checks.max_length(3), request("long"), request("ok")),
    (checks.not_empty(), request(" "), request("ok")),
    (checks.json_schema(Item), request("{}"), request('{"name": "a", "price_cents": 1}')),
    (checks.numbers_supported(), request("It takes 5 days."), request("It takes days.")),
]
INSTRUCTIONS = ("Cite", "Mention", "Include", "Shorten", "Answer", "Reply", "Use")


@pytest.mark.parametrize(("check", "bad", "good"), CASES, ids=[c[0].name for c in CASES])
async def test_every_check_says_what_to_do_on_a_failure_and_nothing_on_a_pass(
    check: Check, bad: EvaluationRequest, good: EvaluationRequest
) -> None:
    failed = await judge(check, bad)
    assert not failed.passed
    # an instruction: what to do, not only what was wrong
    assert failed.feedback.split()[0] in INSTRUCTIONS, failed.feedback
    passed = await judge(check, good)
    assert passed.passed
    assert passed.feedback == ""
    assert passed.metadata["source"] == "code"
    assert repr(check) == f"<check {check.name}>"


async def test_a_custom_check_runs_on_both_paths() -> None:
    def short_sentences(req: EvaluationRequest) -> Verdict:
        longest = max(len(s) for s in req.answer.split("."))
        return Verdict(
            passed=longest <= 20,
            feedback="" if longest <= 20 else "Use sentences under 20 characters.",
        )

    check = Check("short_sentences", short_sentences)
    assert check.name == "short_sentences"
    assert (await judge(check, request("Short. Fine."))).passed
    verdict = await judge(check, request("This sentence is far too long for the rule."))
    assert verdict.feedback == "Use sentences under 20 characters."


# --- excludes, and prefix checkers (what stops a streamed answer early) ---------------------


async def test_excludes_fails_naming_the_phrases_found() -> None:
    check = checks.excludes("guaranteed", "forever")
    assert (await judge(check, request("Refunds within 30 days."))).passed
    failed = await judge(check, request("Refunds are GUARANTEED, forever."))
    assert not failed.passed
    assert failed.feedback == "Do not mention 'guaranteed' or 'forever' in the answer."
    assert not (await judge(checks.excludes("X", case_sensitive=True), request("x X"))).passed
    assert (await judge(checks.excludes("X", case_sensitive=True), request("x x"))).passed


@pytest.mark.parametrize("phrases", [(), ("",), ("ok", "")])
def test_excludes_rejects_no_phrase_or_an_empty_one(phrases: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        checks.excludes(*phrases)


def feed(check: object, parts: list[str]) -> tuple[int, Verdict] | None:
    """The index of the part after which the prefix checker rejected, and its verdict."""
    from refinekit._engine.text_answers import prefix_checker

    prefix = prefix_checker(check)
    assert prefix is not None
    for i, part in enumerate(parts):
        verdict = prefix(part)
        if verdict is not None:
            return i, verdict
    return None


def test_a_forbidden_phrase_split_across_deltas_is_found_at_once() -> None:
    found = feed(checks.excludes("guaranteed"), ["It is guar", "ANT", "eed, and more", " text"])
    assert found is not None
    assert found[0] == 2
    assert found[1].feedback == "Do not mention 'guaranteed' in the answer."
    assert feed(checks.excludes("guaranteed"), ["guar", "d ", "anteed"]) is None


def test_max_length_rejects_a_prefix_past_its_limit() -> None:
    found = feed(checks.max_length(10), ["12345", "67890", "1"])
    assert found is not None
    assert found[0] == 2
    assert feed(checks.max_length(10), ["12345", "67890"]) is None


def test_prefix_checkers_compose_as_their_evaluators_do() -> None:
    from refinekit import all_of, any_of
    from refinekit._engine.text_answers import prefix_checker

    def judge_fn(request: EvaluationRequest) -> bool:
        return True

    # all_of: any part's rejection fails it; a part without one (a judge) waits for the end
    found = feed(all_of(judge_fn, checks.excludes("no")), ["yes ", "no"])
    assert found is not None
    assert found[0] == 1
    # any_of fails only when every part rejects, so it needs a checker for every part
    assert prefix_checker(any_of(judge_fn, checks.excludes("no"))) is None
    both = any_of(checks.excludes("a"), checks.excludes("b"))
    found = feed(both, ["a", "..", "b"])
    assert found is not None
    assert found[0] == 2
    assert prefix_checker(checks.contains("x")) is None  # a missing phrase may still come
    assert prefix_checker(judge_fn) is None
