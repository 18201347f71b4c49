"""A service module that builds its OpenAI client, and its judge, when it is imported.

As a FastAPI app's `main.py` often does: `client = openai.OpenAI()` at module level reads
OPENAI_BASE_URL and OPENAI_API_KEY from the environment once, at import. The tests beside it
(conftest.py, test_support_app.py) point that environment at the plugin's session-wide
scripted server before importing this module. Run them: pytest examples/testing_app_at_import
"""

from __future__ import annotations

import os

import openai

from refinekit import retry_on_low_quality, retry_prompt
from refinekit.judges import Criterion, JudgeModel, criteria

ANSWER_MODEL = os.environ.get("SUPPORT_ANSWER_MODEL", "support-answer")
JUDGE_MODEL = os.environ.get("SUPPORT_JUDGE_MODEL", "support-judge")

client = openai.OpenAI()  # built at import, from OPENAI_BASE_URL and OPENAI_API_KEY
judge = criteria(  # holds the client too: patching `client` later would not reach it
    JudgeModel(client, JUDGE_MODEL),
    [
        Criterion(
            "answers_question",
            "Does the answer tell the customer what they asked?",
            when_false="Answer the customer's question directly.",
        )
    ],
)


@retry_on_low_quality(evaluator=judge, max_retries=2)
def answer(question: str) -> str:
    """The support answer: the model's reply, judged, retried with the judge's feedback."""
    reply = client.chat.completions.create(
        model=ANSWER_MODEL,
        messages=[{"role": "user", "content": retry_prompt(f"Customer question: {question}")}],
    )
    return reply.choices[0].message.content or ""
