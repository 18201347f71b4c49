"""`refinekit.retry_prompt`: the retry's prompt carries the rejected answer and the feedback.

End to end over real HTTP (ScriptedOpenAI, the real openai client), sync and async: what the
model receives on each attempt of a function written as the README shows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from refinekit import (
    LowQualityAnswer,
    checks,
    current_attempt,
    record_context,
    retry_on_low_quality,
    retry_prompt,
)
from refinekit.testing import ScriptedOpenAI

DOC = {"text": "Our kettles carry a warranty of 10 months.", "source": "policies/warranty-1.md"}
PROMPT = "Answer from the document.\n\nDocument: ...\n\nQuestion: How long is the warranty?"
EVALUATOR = checks.all_of(checks.cites_source(), checks.contains("10 months"))


def prompts(server: ScriptedOpenAI) -> list[str]:
    """The text of the last message of each request the model received."""
    return [r.body["messages"][-1]["content"] for r in server.requests]


def readme_answer(client: openai.OpenAI) -> Callable[[str], str]:
    """The function the README shows, asking model "m" through `client`."""

    @retry_on_low_quality(evaluator=EVALUATOR, max_retries=2)
    def answer(question: str) -> str:
        record_context(DOC)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": retry_prompt(PROMPT)}]
        )
        return reply.choices[0].message.content or ""

    return answer


def test_a_retry_quotes_the_rejected_answer_then_the_feedback(server: ScriptedOpenAI) -> None:
    server.script(
        "m",
        [
            "The warranty is 10 months.",
            "The warranty is 10 months [policies/warranty-1.md].",
        ],
    )
    with server.client() as client:
        answer = readme_answer(client)
        assert answer("How long is the warranty?").endswith("[policies/warranty-1.md].")
    first, second = prompts(server)
    assert first == PROMPT  # the first attempt: the prompt as built
    assert second == (
        PROMPT + "\n\nYour answer was: The warranty is 10 months.\n"
        "Cite the source as [policies/warranty-1.md]."
    )


async def test_the_async_path_sends_the_same_prompts(server: ScriptedOpenAI) -> None:
    server.script(
        "m",
        ["Ten months [policies/warranty-1.md].", "10 months [policies/warranty-1.md]."],
    )
    async with server.async_client() as client:

        @retry_on_low_quality(evaluator=EVALUATOR, max_retries=2)
        async def answer(question: str) -> str:
            record_context(DOC)
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": retry_prompt(PROMPT)}]
            )
            return reply.choices[0].message.content or ""

        await answer("How long is the warranty?")
    assert prompts(server)[1] == (
        PROMPT + "\n\nYour answer was: Ten months [policies/warranty-1.md].\n"
        "Mention '10 months' in the answer."
    )


def test_only_the_latest_answer_and_feedback_are_added(server: ScriptedOpenAI) -> None:
    server.script("m", ["No.", "Still no [policies/warranty-1.md].", "Nope."])
    with server.client() as client:
        answer = readme_answer(client)
        with pytest.raises(LowQualityAnswer):
            answer("How long is the warranty?")
    third = prompts(server)[2]
    assert third == (
        PROMPT + "\n\nYour answer was: Still no [policies/warranty-1.md].\n"
        "Mention '10 months' in the answer."
    )
    assert "No." not in third.replace("Still no", "")  # the first rejection is gone


def test_a_chat_completion_answer_is_quoted_as_its_text(server: ScriptedOpenAI) -> None:
    server.script("m", ["The warranty is 10 months.", "10 months [policies/warranty-1.md]."])
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": PROMPT},
    ]
    kept = copy.deepcopy(messages)
    with server.client() as client:

        @retry_on_low_quality(evaluator=EVALUATOR, max_retries=1)
        def answer(question: str) -> ChatCompletion:
            record_context(DOC)
            return client.chat.completions.create(model="m", messages=retry_prompt(messages))  # type: ignore[arg-type]

        answer("How long is the warranty?")
    retried = server.requests[1].body["messages"]
    assert retried[0] == {"role": "system", "content": "Be brief."}
    assert retried[1]["content"] == (
        PROMPT + "\n\nYour answer was: The warranty is 10 months.\n"
        "Cite the source as [policies/warranty-1.md]."
    )
    assert len(retried) == 2
    assert messages == kept  # the caller's list and dicts are untouched


def test_outside_a_retry_the_prompt_comes_back_unchanged() -> None:
    assert retry_prompt("Hello") == "Hello"
    messages = [{"role": "user", "content": "Hello"}]
    same = retry_prompt(messages)
    assert same == messages
    assert same is not messages  # a new list, so appending to it leaves the caller's alone


def test_explicit_answer_and_feedback() -> None:
    assert retry_prompt("Q?", rejected="A.", feedback="Say B.") == (
        "Q?\n\nYour answer was: A.\nSay B."
    )
    assert retry_prompt("Q?", feedback="Say B.") == "Q?\n\nSay B."


@pytest.mark.parametrize(
    ("messages", "added"),
    [
        ([{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A."}], 1),
        ([{"role": "user", "content": [{"type": "text", "text": "Q?"}]}], 1),
        ([], 1),
    ],
    ids=["ends-with-assistant", "content-parts", "empty"],
)
def test_a_last_message_without_user_text_gets_a_new_user_turn(
    messages: list[dict[str, Any]], added: int
) -> None:
    out = retry_prompt(messages, rejected="A.", feedback="Say B.")
    assert out[:-1] == messages
    assert len(out) == len(messages) + added
    assert out[-1] == {"role": "user", "content": "Your answer was: A.\nSay B."}


def test_a_rejection_without_an_answer_adds_the_feedback_only() -> None:
    seen: list[str] = []

    @retry_on_low_quality(max_retries=1)
    def answer(question: str) -> str:
        attempt = current_attempt()
        assert attempt is not None
        seen.append(retry_prompt("Q?"))
        if attempt.number == 1:
            raise LowQualityAnswer("Say it in French.")  # no answer= given
        return "Oui."

    assert answer("Q?") == "Oui."
    assert seen == ["Q?", "Q?\n\nSay it in French."]


@pytest.mark.parametrize(
    ("prompt", "kwargs", "says"),
    [
        (42, {}, "not int"),
        ([("user", "Q?")], {}, "message 0 is a tuple"),
        ("Q?", {"feedback": 3}, "feedback must be a str"),
        ("Q?", {"rejected": b"A."}, "rejected must be a str"),
    ],
)
def test_bad_arguments_are_a_type_error(prompt: Any, kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(TypeError, match=says):
        retry_prompt(prompt, **kwargs)
