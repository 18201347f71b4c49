"""The extraction and citation runs of the benchmark and of `refinekit demo --local`.

`benchmarks/bench_local_quality.py` measures them and `refinekit demo --local` shows them: one
implementation, so the demo's figures are the benchmark's.

Extraction: an invoice text (`_synthetic.invoices`) into `Invoice(number, vendor, currency,
total)`, the same system message and worked example for every method; `make_extract` builds
a method's function (a constraint on the reply, a schema to validate with, a correction
budget) and `run_item` runs it on one item and classifies the outcome (valid, exact, per
field, why an unusable reply was unusable), with calls and tokens counted on the wire
(`_count`). Citations: a question with one source document (`_synthetic.citation_items`)
answered under `@retry_on_low_quality(evaluator=all_of(cites_source(), contains(fact)))`,
the first prompt with one worked example, a retry's feedback placed by `retry_prompt`
(`run_citation_item`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any, Literal

import openai
from pydantic import BaseModel, model_validator

from ... import checks
from ..._core.errors import CorrectionExhausted, LowQualityAnswer
from ..._core.types import ContextDocument, EvaluationRequest
from ..._decorators.correct import self_correct
from ..._decorators.retry import retry_on_low_quality
from ..._decorators.retry_prompt import retry_prompt
from ..._engine.evaluators import all_of
from ..._engine.events import Event, subscribe
from ..._engine.grounded import response_format
from ..._engine.job import current_attempt, record_context
from ..._structure.corrections import CHECK_MARKER
from ..._structure.grounding import InSource, in_source
from ._count import Counter, Tally
from ._synthetic import CitationItem, Invoice, InvoiceItem

__all__ = [
    "CONSTRAINTS",
    "FIELDS",
    "REQUEST_SEED",
    "TIMEOUT_S",
    "CheckedInvoice",
    "CitationResult",
    "Extract",
    "GroundedInvoice",
    "ItemResult",
    "Retry",
    "extraction_messages",
    "first_example",
    "invoice_text",
    "make_extract",
    "retry_quote",
    "run_citation_item",
    "run_item",
    "source_of",
]

TIMEOUT_S = 300.0
REQUEST_SEED = 42
FIELDS = ("number", "vendor", "currency", "total")

SYSTEM = (
    "You extract data from invoices. Reply with only a JSON object with exactly these keys:\n"
    '- "number": the invoice number as written, a string\n'
    '- "vendor": the name of the company that issued the invoice, a string\n'
    '- "currency": "EUR", "USD" or "GBP"\n'
    '- "total": the total due, a number such as 1204.5'
)
EXAMPLE_TEXT = "Invoice 2019-118 from Example Corp, total due GBP 1,020.50."
EXAMPLE_REPLY = (
    '{"number": "2019-118", "vendor": "Example Corp", "currency": "GBP", "total": 1020.50}'
)


def extraction_messages(item: InvoiceItem) -> list[dict[str, Any]]:
    """The conversation every method starts from: the same for all of them.

    The instructions, one worked example as a user/assistant exchange, then the invoice.
    Chosen on items of another seed (7), on the bare method only, among three prompts: without
    the example the bare model gave almost no valid JSON; with the example inside the system
    message it copied the example's values into its replies.
    """
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": EXAMPLE_TEXT},
        {"role": "assistant", "content": EXAMPLE_REPLY},
        {"role": "user", "content": item.text},
    ]


Extract = Callable[[list[dict[str, Any]]], Invoice]


def _not_the_vendor(number: str, vendor: str) -> None:
    if number.strip().casefold() == vendor.strip().casefold():
        raise ValueError(
            f"number and vendor are both {number!r}: the number is the invoice's identifier, "
            "as written in the text"
        )


class CheckedInvoice(BaseModel):
    """`Invoice` with checks no grammar can make.

    The strings appear in the invoice's text (`InSource`, against the validation context), and
    the number is not the vendor's name.
    """

    number: Annotated[str, InSource]
    vendor: Annotated[str, InSource]
    currency: Literal["EUR", "USD", "GBP"]
    total: Decimal

    @model_validator(mode="after")
    def _number_is_not_the_vendor(self) -> CheckedInvoice:
        _not_the_vendor(self.number, self.vendor)
        return self


CURRENCY_FORMS = {"EUR": ["€", "euro"], "USD": ["$", "dollar"], "GBP": ["£", "pound"]}
"""How the invoices write each currency besides its code (`_synthetic._amount`)."""


# `CheckedInvoice` with every field grounded: the total a number the text writes, the currency
# one the text states (its code, symbol or name). Grounded decoding constrains all four to the
# text (`response_format(GroundedInvoice, source=text)`). No docstring: it would become the
# JSON schema's description.
class GroundedInvoice(BaseModel):
    number: Annotated[str, InSource]
    vendor: Annotated[str, InSource]
    currency: Annotated[Literal["EUR", "USD", "GBP"], in_source(aliases=CURRENCY_FORMS)]
    total: Annotated[Decimal, InSource]

    @model_validator(mode="after")
    def _number_is_not_the_vendor(self) -> GroundedInvoice:
        _not_the_vendor(self.number, self.vendor)
        return self


def source_of(arguments: Any) -> dict[str, str]:
    """The validation context: the invoice's text, the conversation's last message."""
    return {"source": str(arguments["messages"][-1]["content"])}


def invoice_text(messages: list[dict[str, Any]]) -> str:
    """The invoice's text in a conversation: its last user message that is no correction."""
    for message in reversed(messages):
        content = str(message.get("content") or "")
        if message.get("role") == "user" and not content.startswith(CHECK_MARKER):
            return content
    return ""


CONSTRAINTS = ("none", "json_object", "json_object + schema", "grounded")
"""What a method asks the server to constrain its reply to: nothing, any JSON object, JSON of
`Invoice`'s schema (llama.cpp's grammar), or `GroundedInvoice`'s schema grounded in the
invoice's text (`response_format(..., source=text)`)."""


def make_extract(
    client: openai.OpenAI,
    model: str,
    max_tokens: int,
    *,
    constraint: str,
    checked: bool,
    corrections: int,
) -> Extract:
    """An extraction function under `@self_correct`, calling `model` through `client`.

    Args:
        client: The client (the benchmark's counts on the wire).
        model: The model's name.
        max_tokens: Of every call.
        constraint: One of `CONSTRAINTS`.
        checked: Validate with the checked schema (`GroundedInvoice` under grounded decoding,
            else `CheckedInvoice`) against the invoice's text; else with `Invoice`.
        corrections: The correction budget (0: one call, its reply taken as it is).
    """
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    settings: dict[str, Any] = {
        "model": model,
        "temperature": 0.0,
        "seed": REQUEST_SEED,
        "max_tokens": max_tokens,
    }
    if constraint == "json_object":
        settings["response_format"] = {"type": "json_object"}
    elif constraint == "json_object + schema":
        # llama.cpp turns the schema into a grammar; the checks stay with the validator
        settings.update(response_format(Invoice, dialect="llama.cpp"))
    grounded = constraint == "grounded"
    schema: type[BaseModel] = Invoice
    if checked:
        schema = GroundedInvoice if grounded else CheckedInvoice

    @self_correct(
        schema=schema,
        max_corrections=corrections,
        validation_context=source_of if checked else None,
    )
    def extract(messages: list[dict[str, Any]]) -> Any:
        options = settings
        if grounded:  # the grammar of this invoice: its spans, numbers and currencies
            text = invoice_text(messages)
            options = {
                **settings,
                **response_format(GroundedInvoice, dialect="llama.cpp", source=text),
            }
        return client.chat.completions.create(messages=messages, **options)  # type: ignore[arg-type]

    made: Extract = extract
    return made


@dataclass
class ItemResult:
    """One method on one item.

    `corrections` holds each correction turn the method sent (the text of its last message),
    `first_valid` whether the first reply alone was usable (so a valid item with a correction
    was rescued by it).
    """

    valid: bool
    exact: bool
    fields: dict[str, bool]
    tally: Tally
    seconds: float
    failure: str = ""
    error: str | None = None
    repaired: bool = False
    corrections: list[str] = field(default_factory=list)
    value: Any = None


FAILURES = ("schema echoed", "cut off", "not JSON", "JSON, not an Invoice")


def failure_of(tally: Tally) -> str:
    """Why the final reply was unusable, read the same way for every method.

    "schema echoed": the reply is (or starts like) the JSON schema it was shown, which a
    small model tends to copy; "cut off": it stopped at `max_tokens`.
    """
    reply = tally.last_reply or ""
    if '"properties"' in reply and '"type"' in reply:
        return "schema echoed"
    if tally.last_finish == "length":
        return "cut off"
    try:
        json.loads((tally.last_reply or "").strip())
    except ValueError:
        return "not JSON"
    return "JSON, not an Invoice"


def run_item(
    extract: Extract,
    counter: Counter,
    item: InvoiceItem,
    unusable: tuple[type[BaseException], ...] = (CorrectionExhausted,),
) -> ItemResult:
    """Extract one invoice; classify the outcome; count its calls and time.

    Args:
        extract: The method's function.
        counter: The counter under its client.
        item: The invoice.
        unusable: The exceptions that mean "the reply was unusable" (an invalid output, not
            a crash): refinekit's `CorrectionExhausted`, and another library's own.
    """
    before = counter.snapshot()
    started = time.perf_counter()
    result: Any = None
    error: str | None = None
    repairs: list[Event] = []
    corrections: list[str] = []

    def seen(event: Event) -> None:
        if event.repairs:
            repairs.append(event)
        if event.kind == "correction" and event.decorator == "self_correct":
            corrections.append(event.detail or "")

    try:
        with subscribe(seen):
            result = extract(extraction_messages(item))
    except unusable:
        pass  # the reply was unusable: invalid (an HTTP error under it is caught below)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - started
    tally = counter.snapshot().minus(before)
    if error is None and tally.errors:
        error = f"{tally.errors} HTTP call(s) failed"
    if error is not None or result is None:
        return ItemResult(
            valid=False,
            exact=False,
            fields=dict.fromkeys(FIELDS, False),
            tally=tally,
            seconds=seconds,
            failure="error" if error else failure_of(tally),
            error=error,
            corrections=corrections,
        )
    fields = {f: getattr(result, f) == getattr(item.truth, f) for f in FIELDS}
    return ItemResult(
        True,
        all(fields.values()),
        fields,
        tally,
        seconds,
        repaired=bool(repairs),
        corrections=corrections,
        value=result,
    )


# --- answers with citations ---------------------------------------------------------------------

CITATION_SYSTEM = (
    "Answer the question in one sentence, using only the document. End the answer with the "
    "document's source in square brackets."
)
CITATION_EXAMPLE_QUESTION = "How long is the warranty on your kettles?"
CITATION_EXAMPLE_DOCUMENT = (
    "Our kettles carry a warranty of 2 years from the date of purchase. It does not cover "
    "limescale."
)
CITATION_EXAMPLE_SOURCE = "policies/kettles-1.md"
CITATION_EXAMPLE_REPLY = "The warranty on your kettles is 2 years [policies/kettles-1.md]."


def question_and_document(item: CitationItem) -> str:
    return f"Document [{item.source}]:\n{item.document}\n\nQuestion: {item.question}"


def first_example(item: CitationItem) -> list[dict[str, Any]]:
    """A system instruction, one worked example as a user/assistant exchange, then the item."""
    example = CitationItem(
        -1,
        "example",
        CITATION_EXAMPLE_QUESTION,
        CITATION_EXAMPLE_SOURCE,
        CITATION_EXAMPLE_DOCUMENT,
        "",
    )
    return [
        {"role": "system", "content": CITATION_SYSTEM},
        {"role": "user", "content": question_and_document(example)},
        {"role": "assistant", "content": CITATION_EXAMPLE_REPLY},
        {"role": "user", "content": question_and_document(item)},
    ]


Retry = Callable[[list[dict[str, Any]], str, str], list[dict[str, Any]]]


def retry_quote(
    messages: list[dict[str, Any]], rejected: str, feedback: str
) -> list[dict[str, Any]]:
    """`refinekit.retry_prompt`: the rejected answer quoted, then the feedback."""
    return retry_prompt(messages, rejected=rejected, feedback=feedback)


ECHO_MARKS = (
    "cite the source",
    "mention '",
    "in the answer",
    "rejected",
    "rewrite",
    "instruction",
    "your answer was",
    "your last answer",
)
"""Phrases of the retry prompts and of the checks' feedback that an answer has no reason to
contain: a final answer with one of them (or "not <the source shortened>") repeats the
instruction instead of acting on it, and its pass is not counted as a rescue."""


@dataclass
class CitationResult:
    """One item under one variant."""

    passed_at: int | None  # the attempt that passed (1, 2, 3), None when none did
    echoed: bool  # the final answer repeats the retry instruction
    cited: bool
    mentioned: bool
    tally: Tally
    seconds: float
    answers: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def clean(self) -> bool:
        """Passed, and not by repeating the instruction."""
        return self.passed_at is not None and not self.echoed


def echoed(item: CitationItem, answer: str, retried: bool) -> bool:
    """Whether a retried final answer repeats the retry instruction (`ECHO_MARKS`)."""
    if not retried:
        return False
    text = answer.casefold()
    shortened = [f"not {p}".casefold() for p in item.source.split("/")[1:]]
    return any(mark in text for mark in (*ECHO_MARKS, *shortened))


def run_citation_item(
    item: CitationItem,
    retry: Retry | None,
    first: Callable[[CitationItem], list[dict[str, Any]]],
    client: openai.OpenAI,
    counter: Counter,
    settings: dict[str, Any],
) -> CitationResult:
    """Answer one question: attempt 1 alone (`retry` None), or with up to 2 retries.

    The answer function is the README's pattern: `record_context(doc)`, the prompt rebuilt
    from the question and document on every attempt, the latest feedback placed by `retry`.
    """
    answers: list[str] = []
    feedbacks: list[str] = []
    document = {"text": item.document, "source": item.source}

    @retry_on_low_quality(
        evaluator=all_of(checks.cites_source(), checks.contains(item.fact)),
        max_retries=0 if retry is None else 2,
        wait=0,
    )
    def answer(question: str, feedback: str | None = None) -> str:
        record_context(document)
        messages = first(item)
        attempt = current_attempt()
        if feedback is not None and retry is not None and attempt is not None:
            feedbacks.append(feedback)
            messages = retry(messages, str(attempt.previous_answer), feedback)
        reply = client.chat.completions.create(messages=messages, **settings)  # type: ignore[arg-type]
        text = reply.choices[0].message.content or ""
        answers.append(text)
        return text

    before = counter.snapshot()
    started = time.perf_counter()
    passed_at: int | None = None
    error: str | None = None
    try:
        answer(item.question)
        passed_at = len(answers)
    except LowQualityAnswer:
        pass
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - started
    tally = counter.snapshot().minus(before)
    if error is None and tally.errors:
        error = f"{tally.errors} HTTP call(s) failed"
    last = answers[-1] if answers else ""
    request = EvaluationRequest(
        question=item.question,
        answer=last,
        context=(ContextDocument(text=item.document, source=item.source),),
    )
    return CitationResult(
        passed_at=passed_at,
        echoed=echoed(item, last, len(answers) > 1),
        cited=checks.cites_source().evaluate(request).passed,
        mentioned=checks.contains(item.fact).evaluate(request).passed,
        tally=tally,
        seconds=seconds,
        answers=answers,
        feedback=feedbacks,
        error=error,
    )
