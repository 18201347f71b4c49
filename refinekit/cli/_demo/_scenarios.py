"""The demo's two scenarios: the same functions on the scripted server and on a real endpoint.

1. Refund answer: `@retry_on_low_quality` with a criteria judge, over a function answering
   from a policy document.
2. Invoice extraction: `@self_correct(schema=Invoice)` over a function sending the
   conversation to the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import openai
from pydantic import BaseModel, Field

from ... import checks, judges
from ..._core.types import ContextDocument
from ..._decorators.correct import self_correct
from ..._decorators.retry import retry_on_low_quality
from ..._decorators.retry_prompt import retry_prompt
from ..._engine.job import record_context
from ..._structure.template import schema_prompt

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

__all__ = [
    "CRITERIA",
    "EXPECTED_INVOICE",
    "INVOICE_TEXT",
    "POLICY",
    "QUESTION",
    "RETRY_WAIT",
    "SCRIPTED_JUDGE",
    "SCRIPTED_MODEL",
    "Invoice",
    "invoice_extractor",
    "invoice_messages",
    "refund_answerer",
    "refund_messages",
]

SCRIPTED_MODEL = "demo-answer"
"""The answering model's name on the scripted server."""

SCRIPTED_JUDGE = "demo-judge"
"""The judge model's name on the scripted server."""

RETRY_WAIT = 0.1
"""Seconds between quality retries, the decorator's own `wait=`.

The demo keeps the wait short this way rather than with `refinekit.testing.set_testing()`, so
the wait it reports is the wait it takes, on the scripted server and on a real endpoint alike.
"""

QUESTION = "Can I get a refund for my order?"

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)

CRITERIA = (
    judges.Criterion(
        "answers_question",
        "Does the answer tell the customer whether they can get a refund?",
        when_false="Answer the question: say whether the customer can get a refund.",
    ),
    judges.Criterion(
        "keeps_conditions",
        "Does the answer keep every condition the context puts on a refund: that the order "
        "is unused, and that the refund is asked for within seven days?",
        when_false="The answer drops the conditions of the refund policy: keep 'unused' and "
        "'within seven days'.",
    ),
)

INVOICE_TEXT = "Invoice INV-7 from Acme Audio GmbH, issued 3 March 2025. Total due: 12.50 EUR."


class Invoice(BaseModel):
    """What the extraction scenario asks for."""

    number: str = Field(description="the invoice number as written, e.g. INV-3")
    total_cents: int = Field(description="the total due in cents: 12.50 is 1250")
    currency: str = Field(description="the ISO currency code, e.g. EUR")


EXPECTED_INVOICE = Invoice(number="INV-7", total_cents=1250, currency="EUR")


def _ignore(reply: ChatCompletion) -> None:
    """The default `on_reply`: show nothing."""


def refund_messages(question: str, policy: ContextDocument) -> list[dict[str, Any]]:
    """The answering model's prompt, as on the first attempt: the policy and the question.

    On a retry, `refinekit.retry_prompt` adds the rejected answer and the feedback to it.

    Args:
        question: The customer's question.
        policy: The policy document to answer from.

    Returns:
        The chat messages.
    """
    user = f"Policy [{policy.source}]:\n{policy.text}\n\nQuestion: {question}"
    return [
        {
            "role": "system",
            "content": "You answer customers' questions from the policy given, in one or two "
            "sentences, and end with the policy's source path in square brackets.",
        },
        {"role": "user", "content": user},
    ]


def refund_answerer(
    client: openai.OpenAI,
    model: str,
    judge: judges.JudgeModel,
    on_reply: Callable[[ChatCompletion], None] = _ignore,
) -> Callable[..., ChatCompletion]:
    """The refund scenario's function, decorated with `@retry_on_low_quality`.

    Args:
        client: The `openai` client of the answering model.
        model: The answering model's name.
        judge: The judge of the `criteria` evaluator.
        on_reply: Called with each reply, to show it.

    Returns:
        `answer(question)`, returning the `ChatCompletion` that passed.
    """
    evaluator = checks.all_of(checks.not_empty(), judges.criteria(judge, CRITERIA))

    @retry_on_low_quality(evaluator=evaluator, max_retries=2, wait=RETRY_WAIT)
    def answer(question: str) -> ChatCompletion:
        record_context(POLICY)  # what the judge checks the answer against
        # on a retry: the prompt, "Your answer was: <the rejected answer>", then the feedback
        messages = retry_prompt(refund_messages(question, POLICY))
        reply = client.chat.completions.create(
            model=model,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            temperature=0,
        )
        on_reply(reply)
        return reply  # a ChatCompletion: the job counts its tokens

    return answer


def invoice_messages(text: str) -> list[dict[str, Any]]:
    """The extraction request: the format as `schema_prompt` writes it, then the invoice.

    Args:
        text: The invoice's text.

    Returns:
        The conversation to pass to the extraction function.
    """
    return [
        {
            "role": "system",
            "content": "You extract invoices.\n" + schema_prompt(Invoice),
        },
        {"role": "user", "content": f"Extract the invoice: {text}"},
    ]


def invoice_extractor(
    client: openai.OpenAI,
    model: str,
    on_reply: Callable[[list[dict[str, Any]], ChatCompletion], None] = lambda m, r: None,
) -> Callable[[list[dict[str, Any]]], Invoice]:
    """The extraction scenario's function, decorated with `@self_correct(schema=Invoice)`.

    Args:
        client: The `openai` client of the answering model.
        model: The answering model's name.
        on_reply: Called with the messages sent and each reply, to show them.

    Returns:
        `extract(messages)`, returning a validated `Invoice`.
    """

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
        reply = client.chat.completions.create(
            model=model, messages=cast("list[ChatCompletionMessageParam]", messages), temperature=0
        )
        on_reply(messages, reply)
        return reply

    return extract
