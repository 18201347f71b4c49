"""`returns="text"`: the function returns the model's reply, so its usage counts in the job, and
the caller gets the reply's text (`@retry_on_low_quality`, `@guarded`).

Every model call goes over real HTTP to the scripted server, with the `openai` client of the
test's kind (`OpenAI` for a `def` function, `AsyncOpenAI` for an `async def` one), and the
`anthropic` client for Anthropic's Messages API.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

import refinekit
from refinekit import (
    EvaluationRequest,
    LowQualityAnswer,
    Usage,
    checks,
    guarded,
    record_context,
    retry_on_low_quality,
    retry_prompt,
)
from refinekit.testing import Reply, ScriptedOpenAI

MODEL = "answer-model"
DOC = {"text": "Refunds are accepted within 30 days.", "source": "policies/refunds.md"}
UNCITED = "Refunds take 30 days."
CITED = "Refunds take 30 days [policies/refunds.md]."


def answerer(kind: str, client: Any, decorator: Callable[..., Any]) -> Callable[..., Any]:
    """A help-centre answer function of the kind, decorated: it returns the `ChatCompletion`."""
    if kind == "sync":

        def answer(question: str) -> ChatCompletion:
            record_context([DOC])
            prompt = retry_prompt(f"Answer from the policy, citing it.\n\nQ: {question}")
            return client.chat.completions.create(  # type: ignore[no-any-return]
                model=MODEL, messages=[{"role": "user", "content": prompt}]
            )

        return decorator(answer)  # type: ignore[no-any-return]

    async def aanswer(question: str) -> ChatCompletion:
        record_context([DOC])
        prompt = retry_prompt(f"Answer from the policy, citing it.\n\nQ: {question}")
        return await client.chat.completions.create(  # type: ignore[no-any-return]
            model=MODEL, messages=[{"role": "user", "content": prompt}]
        )

    return decorator(aanswer)  # type: ignore[no-any-return]


def citing_retry() -> Callable[..., Any]:
    """@retry_on_low_quality retrying an answer that cites no source, returning text."""
    return retry_on_low_quality(evaluator=checks.cites_source(), returns="text")


async def invoke(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


def billed(text: str, prompt: int, completion: int) -> Reply:
    """A scripted text reply with the usage the server bills for it."""
    return Reply.text(text, prompt_tokens=prompt, completion_tokens=completion)


def usage(*billed: tuple[int, int]) -> Usage:
    """The usage of replies billed (prompt, completion) each."""
    return Usage(
        model_calls=len(billed),
        prompt_tokens=sum(p for p, _ in billed),
        completion_tokens=sum(c for _, c in billed),
    )


# --- @retry_on_low_quality -----------------------------------------------------------------------


async def test_the_caller_gets_the_text_and_every_reply_counts(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(UNCITED, 40, 4), billed(CITED, 60, 5)])
    fn = answerer(kind, client, citing_retry())
    with refinekit.job() as job:
        text = await invoke(fn, "How long do refunds take?")
    assert text == CITED
    assert type(text) is str
    assert job.usage == usage((40, 4), (60, 5))  # the rejected reply was paid for: counted
    # the retry's prompt quotes the rejected answer as text, not a ChatCompletion's repr
    retried = server.requests_for(MODEL)[1].body
    assert retried is not None
    assert f"Your answer was: {UNCITED}\n" in retried["messages"][-1]["content"]


async def test_the_outcome_holds_text_and_the_usage(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(UNCITED, 10, 4), billed(CITED, 20, 5)])
    fn = answerer(kind, client, citing_retry())
    outcome = await invoke(fn.outcome, "How long do refunds take?")
    assert outcome.value == CITED
    assert [a.answer for a in outcome.attempts] == [UNCITED, CITED]
    assert outcome.usage == usage((10, 4), (20, 5))


async def test_the_evaluator_judges_the_text_the_caller_gets(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [CITED])
    seen: list[EvaluationRequest] = []

    def judge(request: EvaluationRequest) -> bool:
        seen.append(request)
        return True

    fn = answerer(kind, client, retry_on_low_quality(evaluator=judge, returns="text"))
    assert await invoke(fn, "How long do refunds take?") == CITED
    assert [r.answer for r in seen] == [CITED]


async def test_exhausted_attempts_carry_text(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(UNCITED, 10, 4), billed("Refunds: 30 days.", 11, 3)])
    fn = answerer(
        kind,
        client,
        retry_on_low_quality(evaluator=checks.cites_source(), max_retries=1, returns="text"),
    )
    with pytest.raises(LowQualityAnswer) as raised:
        await invoke(fn, "How long do refunds take?")
    assert raised.value.answer == "Refunds: 30 days."
    assert [a.answer for a in raised.value.attempts] == [UNCITED, "Refunds: 30 days."]
    assert raised.value.best is not None
    assert raised.value.best.answer == "Refunds: 30 days."
    assert raised.value.usage == usage((10, 4), (11, 3))


async def test_return_best_returns_the_best_attempts_text(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [UNCITED, "Refunds: 30 days."])
    fn = answerer(
        kind,
        client,
        retry_on_low_quality(
            evaluator=checks.cites_source(),
            max_retries=1,
            on_exhausted="return_best",
            returns="text",
        ),
    )
    assert await invoke(fn, "How long do refunds take?") == "Refunds: 30 days."


async def test_by_default_the_caller_gets_the_reply_as_the_function_returned_it(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [CITED])
    fn = answerer(kind, client, retry_on_low_quality(evaluator=checks.cites_source()))
    reply = await invoke(fn, "How long do refunds take?")
    assert isinstance(reply, ChatCompletion)
    assert reply.choices[0].message.content == CITED


async def test_retry_with_can_ask_for_the_text(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [CITED, CITED])
    fn = answerer(kind, client, retry_on_low_quality(evaluator=checks.cites_source()))
    assert await invoke(fn.retry_with(returns="text"), "How long do refunds take?") == CITED
    assert isinstance(await invoke(fn, "How long do refunds take?"), ChatCompletion)


async def test_a_tool_call_is_not_a_final_answer(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [Reply.tool_call("lookup_order", {"order": "A-1"})])
    judged: list[EvaluationRequest] = []
    fn = answerer(kind, client, retry_on_low_quality(evaluator=judged.append, returns="text"))
    with pytest.raises(TypeError, match=r"returns='text'\): the reply asks to call lookup_order"):
        await invoke(fn, "Where is my order?")
    assert judged == []  # refused before any judge call
    assert len(server.requests_for(MODEL)) == 1  # and never retried


@pytest.mark.parametrize("value", [42, None, {"answer": "a dict without content"}])
async def test_a_value_that_is_no_reply_is_a_type_error_naming_the_function(
    kind: str, value: Any
) -> None:
    def impl(question: str) -> Any:
        return value

    fn: Callable[..., Any] = impl
    if kind == "async":

        async def aimpl(question: str) -> Any:
            return value

        fn = aimpl
    decorated = retry_on_low_quality(returns="text")(fn)
    with pytest.raises(TypeError, match=r"impl is decorated with @retry_on_low_quality\(retu"):
        await invoke(decorated, "q")


async def test_a_str_is_its_own_text(kind: str) -> None:
    def impl(question: str) -> str:
        return CITED

    async def aimpl(question: str) -> str:
        return CITED

    decorated = retry_on_low_quality(evaluator=checks.not_empty(), returns="text")(
        impl if kind == "sync" else aimpl
    )
    assert await invoke(decorated, "q") == CITED


async def test_a_low_quality_answer_raised_with_the_reply_carries_its_text(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(UNCITED, 7, 4), billed(UNCITED, 8, 4)])
    create = client.chat.completions.create
    messages = [{"role": "user", "content": "q"}]

    def impl(question: str) -> ChatCompletion:
        raise LowQualityAnswer("Cite the policy.", answer=create(model=MODEL, messages=messages))

    async def aimpl(question: str) -> ChatCompletion:
        reply = await create(model=MODEL, messages=messages)
        raise LowQualityAnswer("Cite the policy.", answer=reply)

    decorated = retry_on_low_quality(max_retries=1, returns="text")(
        impl if kind == "sync" else aimpl
    )
    with refinekit.job() as job, pytest.raises(LowQualityAnswer) as raised:
        await invoke(decorated, "q")
    assert raised.value.answer == UNCITED
    assert [a.answer for a in raised.value.attempts] == [UNCITED, UNCITED]
    assert job.usage == usage((7, 4), (8, 4))


async def test_an_anthropic_message_is_read_as_its_text_and_counted(
    kind: str, server: ScriptedOpenAI
) -> None:
    pytest.importorskip("anthropic")
    server.script("claude", [billed(UNCITED, 10, 4), billed(CITED, 20, 5)])

    def ask(client: Any) -> Any:
        return client.messages.create(
            model="claude",
            max_tokens=100,
            messages=[{"role": "user", "content": retry_prompt("How long?")}],
        )

    decorate = citing_retry()
    with refinekit.job() as job:
        if kind == "sync":
            with server.anthropic_client() as claude:

                @decorate
                def answer(question: str) -> Any:
                    record_context([DOC])
                    return ask(claude)

                text = answer("How long?")
        else:
            async with server.async_anthropic_client() as aclaude:

                @decorate
                async def aanswer(question: str) -> Any:
                    record_context([DOC])
                    return await ask(aclaude)

                text = await aanswer("How long?")
    assert text == CITED
    assert job.usage == usage((10, 4), (20, 5))


@pytest.mark.parametrize("returns", ["json", "str", str, None, ""])
def test_an_unknown_returns_is_refused_when_decorating(returns: Any) -> None:
    with pytest.raises(ValueError, match=r"returns must be 'value' .* or 'text'"):
        retry_on_low_quality(returns=returns)
    with pytest.raises(ValueError, match=r"returns must be 'value' .* or 'text'"):
        guarded(screen=checks.not_empty(), returns=returns)


# --- @guarded ------------------------------------------------------------------------------------


async def test_guarded_publishes_the_replys_text_and_counts_it(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(CITED, 30, 5)])
    fn = answerer(kind, client, guarded(screen=checks.not_empty(), returns="text"))
    with refinekit.job() as job:
        assert await invoke(fn, "How long do refunds take?") == CITED
    assert job.usage == usage((30, 5))


async def test_guarded_blocks_a_reply_with_the_refusal_and_still_counts_it(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed("Sure: the card is 4111 1111 1111 1111.", 12, 9)])
    screened: list[str] = []

    def screen(request: EvaluationRequest) -> bool:
        screened.append(request.answer)
        return "4111" not in request.answer

    fn = answerer(kind, client, guarded(screen=screen, refusal="No.", returns="text"))
    with refinekit.job() as job:
        assert await invoke(fn, "What card is on file?") == "No."
    assert screened == ["Sure: the card is 4111 1111 1111 1111."]
    assert job.usage == usage((12, 9))


async def test_guarded_under_a_retry_hands_the_text_to_the_retry(
    kind: str, client: Any, server: ScriptedOpenAI
) -> None:
    server.script(MODEL, [billed(UNCITED, 10, 4), billed(CITED, 20, 5)])
    outer = retry_on_low_quality(evaluator=checks.cites_source())
    inner = guarded(screen=checks.not_empty(), returns="text")
    fn = answerer(kind, client, lambda f: outer(inner(f)))
    with refinekit.job() as job:
        assert await invoke(fn, "How long do refunds take?") == CITED
    assert job.usage == usage((10, 4), (20, 5))  # each reply counted once, by the inner one
