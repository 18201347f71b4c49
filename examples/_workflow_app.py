"""The application eval_workflow.py evaluates: a help-centre answer function and its judge.

Not an example itself: `refinekit eval --target _workflow_app:answer` and
`--judge _workflow_app:grounded` import it, as they would import your application's module.
Its clients are made from OPENAI_BASE_URL and OPENAI_API_KEY, as an application's are.

Two answer functions stand for two commits of the same function: `answer` (the main branch)
and `answer_v2` (a branch that asks for shorter answers).
"""

from __future__ import annotations

import functools
from typing import Any

import openai

from refinekit import checks, judges, record_context, retry_on_low_quality, retry_prompt

DOCS = [
    {
        "source": "policies/refunds.md",
        "keywords": ("return", "refund"),
        "text": "An unused order may be refunded within 30 days of delivery. Refunds go back "
        "to the original payment method within 5 business days.",
    },
    {
        "source": "policies/shipping.md",
        "keywords": ("ship",),
        "text": "We ship to the US, Canada and the EU. Standard shipping takes 3 to 5 business "
        "days; express shipping takes 1 to 2 business days.",
    },
    {
        "source": "policies/payment.md",
        "keywords": ("pay",),
        "text": "We accept cards and PayPal. Business customers with an account can pay by "
        "invoice, due in 30 days.",
    },
    {
        "source": "policies/warranty.md",
        "keywords": ("warranty", "damage"),
        "text": "Every product has a two-year warranty against manufacturing defects. "
        "Accidental damage is not covered.",
    },
    {
        "source": "policies/accounts.md",
        "keywords": ("account",),
        "text": "You can delete your account from Settings > Privacy. Deletion is final after "
        "14 days.",
    },
    {
        "source": "policies/stores.md",
        "keywords": ("store",),
        "text": "Our stores are open Monday to Saturday, 9:00 to 18:00, and closed on Sundays.",
    },
]

SYSTEM = (
    "Answer the customer's question from the documents only. Cite the document's source path "
    "in brackets."
)
SHORTER = " Answer in one short sentence."
MODEL = "shop-model"
JUDGE_MODEL = "judge"


@functools.cache
def client() -> openai.OpenAI:
    # max_retries=0: a rate limit (HTTP 429) reaches refinekit eval, which backs off itself
    return openai.OpenAI(max_retries=0)


def retrieve(question: str) -> list[dict[str, str]]:
    """The application's retrieval (a keyword match here)."""
    words = question.lower()
    return [
        {"text": d["text"], "source": d["source"]}
        for d in DOCS
        if any(k in words for k in d["keywords"])
    ]


def _ask(system: str, question: str) -> Any:
    docs = retrieve(question)
    record_context(docs)  # what cites_source checks the answer against
    documents = "\n".join(f"[{d['source']}] {d['text']}" for d in docs)
    # on a retry: + "Your answer was: <the rejected answer>" + the feedback
    prompt = retry_prompt(f"Question: {question}\n\nDocuments:\n{documents}")
    return client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
    )


@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=1)
def answer(question: str) -> Any:
    """The main branch's answer function (a ChatCompletion; its usage is counted)."""
    return _ask(SYSTEM, question)


@retry_on_low_quality(evaluator=checks.cites_source(), max_retries=1)
def answer_v2(question: str) -> Any:
    """The branch's answer function: the same, asking for one short sentence."""
    return _ask(SYSTEM + SHORTER, question)


grounded = judges.criteria(
    judges.JudgeModel(client(), JUDGE_MODEL),
    [
        judges.Criterion(
            "grounded",
            "Is every claim in the answer supported by the context?",
            when_false="Say only what the context supports, with its conditions.",
        )
    ],
)
