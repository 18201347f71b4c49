"""Replies from the SDKs people use, read by the one reader, their usage counted in the job.

Each SDK's real reply objects: Anthropic `Message`s from the real `anthropic` client over HTTP
(the scripted server's `/v1/messages`), LangChain `AIMessage`s and LiteLLM `ModelResponse`s
built with their own classes (a LangChain chat model needs a provider package; LiteLLM's
clients leave sockets open at exit, which this suite's warnings-as-errors refuses).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from helpers import as_kind, call
from pydantic import BaseModel

import refinekit
from refinekit import (
    EvaluationRequest,
    JsonParseError,
    Usage,
    Verdict,
    record_usage,
    retry_on_low_quality,
    reviewed,
    self_correct,
)
from refinekit._decorators.correct import CHECK_MARKER
from refinekit.testing import Reply, ScriptedOpenAI

anthropic = pytest.importorskip("anthropic")
messages_module = pytest.importorskip("langchain_core.messages")
AIMessage = messages_module.AIMessage
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
litellm = pytest.importorskip("litellm")

# litellm's message types use TypedDict `ReadOnly` items, which pydantic warns about when it
# first builds them: litellm's own warning, not this code's
pytestmark = pytest.mark.filterwarnings(
    "ignore:Item .* on TypedDict class 'ChatCompletion.*' is using the .ReadOnly.:UserWarning"
)


class Invoice(BaseModel):
    number: str
    total_cents: int


INVOICE = Invoice(number="A-1", total_cents=1250)
GOOD = {"number": "A-1", "total_cents": 1250}
USER = [{"role": "user", "content": "the invoice"}]


def corrected(messages: list[dict[str, Any]]) -> bool:
    return str(messages[-1]["content"]).startswith(CHECK_MARKER)


# --- the SDKs' reply objects ---------------------------------------------------------------------


def ai_tool_call(args: dict[str, Any], tokens: tuple[int, int] = (11, 7)) -> Any:
    """A LangChain AIMessage calling one tool, as `ChatOpenAI(...).bind_tools` returns it."""
    return AIMessage(
        content="",
        tool_calls=[{"name": "Invoice", "args": args, "id": "call_1"}],
        usage_metadata={
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "total_tokens": sum(tokens),
        },
    )


def litellm_reply(
    content: str | None = None,
    *,
    arguments: str | None = None,
    tokens: tuple[int, int] = (9, 4),
    finish_reason: str = "stop",
) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if arguments is not None:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "Invoice", "arguments": arguments},
            }
        ]
    return litellm.ModelResponse(
        model="gpt-test",
        choices=[{"index": 0, "message": message, "finish_reason": finish_reason}],
        usage={
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        },
    )


@pytest.fixture
def claude(server: ScriptedOpenAI) -> Any:
    with server.anthropic_client() as client:
        yield client


def ask(client: Any, messages: list[dict[str, Any]], model: str = "claude") -> Any:
    """One Messages API request: what an answer function built on `anthropic` does."""
    return client.messages.create(model=model, max_tokens=200, messages=messages)


# --- LangChain -----------------------------------------------------------------------------------


def test_a_langchain_tool_call_is_parsed_as_the_models_value_without_a_correction(
    kind: str,
) -> None:
    """The issue's case: an AIMessage carrying a tool call was read as an empty reply."""
    calls: list[list[dict[str, Any]]] = []
    reply = ai_tool_call(GOOD)

    def extract(messages: list[dict[str, Any]]) -> Any:
        calls.append(messages)
        return reply

    with refinekit.job() as job:
        value = call(self_correct(schema=Invoice)(as_kind(kind, extract)), USER)
    assert value == INVOICE
    assert len(calls) == 1
    assert job.corrections_used == 0
    assert job.usage == Usage(model_calls=1, prompt_tokens=11, completion_tokens=7)
    assert reply.tool_calls[0]["args"] == GOOD  # the caller's reply is not changed


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(GOOD),
        [json.dumps(GOOD)],
        [{"type": "text", "text": '{"number": "A-1", '}, '"total_cents": 1250}'],
    ],
    ids=["str", "one-str-part", "text-and-str-parts"],
)
def test_a_langchain_text_reply_is_parsed_from_its_content_or_content_parts(
    kind: str, content: Any
) -> None:
    extract = as_kind(kind, lambda messages: AIMessage(content=content))
    assert call(self_correct(schema=Invoice)(extract), USER) == INVOICE


def test_a_langchain_tool_call_that_did_not_parse_is_corrected(kind: str) -> None:
    """LangChain keeps a tool call whose arguments are not JSON in `invalid_tool_calls`."""

    def extract(messages: list[dict[str, Any]]) -> Any:
        if corrected(messages):
            return ai_tool_call(GOOD, (20, 8))
        return AIMessage(
            content="",
            invalid_tool_calls=[
                {"name": "Invoice", "args": '{"number": "A-1", "total_cents": ', "id": "c1"}
            ],
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        )

    with refinekit.job() as job:
        value = call(self_correct(schema=Invoice)(as_kind(kind, extract)), USER)
    assert value == INVOICE
    assert job.corrections_used == 1
    assert job.usage == Usage(model_calls=2, prompt_tokens=30, completion_tokens=13)


def test_a_langchain_reply_with_two_tool_calls_is_refused_with_both_shown() -> None:
    reply = AIMessage(
        content="",
        tool_calls=[
            {"name": "Invoice", "args": GOOD, "id": "c1"},
            {"name": "Invoice", "args": {"number": "B-2"}, "id": "c2"},
        ],
    )
    with pytest.raises(JsonParseError) as exc_info:
        self_correct(schema=Invoice, max_corrections=0)(lambda messages: reply)([])
    assert "2 tool calls" in str(exc_info.value)
    assert "B-2" in exc_info.value.raw_reply


def test_a_langchain_reply_in_its_dict_form_reads_the_same() -> None:
    reply = ai_tool_call(GOOD).model_dump()
    with refinekit.job() as job:
        assert self_correct(schema=Invoice)(lambda messages: reply)([]) == INVOICE
    assert job.usage == Usage(model_calls=1, prompt_tokens=11, completion_tokens=7)


def test_streamed_langchain_chunks_added_up_read_as_one_reply() -> None:
    chunks = [
        messages_module.AIMessageChunk(content='{"number": "A-1", '),
        messages_module.AIMessageChunk(
            content='"total_cents": 1250}',
            usage_metadata={"input_tokens": 8, "output_tokens": 9, "total_tokens": 17},
        ),
    ]
    streamed = chunks[0] + chunks[1]
    with refinekit.job() as job:
        assert self_correct(schema=Invoice)(lambda messages: streamed)(USER) == INVOICE
    assert job.usage == Usage(model_calls=1, prompt_tokens=8, completion_tokens=9)


def test_a_langchain_reply_cut_off_at_its_limit_is_diagnosed_as_cut_off() -> None:
    reply = AIMessage(content='{"number": "A-', response_metadata={"finish_reason": "length"})
    with pytest.raises(JsonParseError) as exc_info:
        self_correct(schema=Invoice, max_corrections=0)(lambda messages: reply)(USER)
    assert exc_info.value.failure == "cut_off"


def test_retry_on_low_quality_judges_a_langchain_replys_text_and_counts_its_usage(
    kind: str,
) -> None:
    replies = [
        AIMessage(
            content=[{"type": "text", "text": "draft"}],
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        ),
        AIMessage(
            content="final [1]",
            usage_metadata={"input_tokens": 30, "output_tokens": 3, "total_tokens": 33},
        ),
    ]
    seen: list[str] = []

    def evaluator(request: EvaluationRequest) -> Verdict:
        seen.append(request.answer)
        return Verdict(passed="[1]" in request.answer, score=1.0, feedback="cite a source")

    answer = as_kind(kind, lambda question: replies[len(seen)])
    with refinekit.job() as job:
        result = call(retry_on_low_quality(evaluator=evaluator)(answer), "q")
    assert result is replies[1]
    assert seen == ["draft", "final [1]"]
    assert job.usage == Usage(model_calls=2, prompt_tokens=40, completion_tokens=5)


# --- Anthropic -----------------------------------------------------------------------------------


def test_an_anthropic_tool_use_reply_is_parsed_from_its_input(
    server: ScriptedOpenAI, claude: Any
) -> None:
    server.script("claude", Reply.tool_call("Invoice", GOOD, prompt_tokens=12, completion_tokens=6))

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> Any:
        return ask(claude, messages)

    with refinekit.job() as job:
        assert extract([{"role": "user", "content": "the invoice"}]) == INVOICE
    assert job.corrections_used == 0
    assert job.usage == Usage(model_calls=1, prompt_tokens=12, completion_tokens=6)
    assert server.requests[0].path == "/v1/messages"


async def test_an_async_anthropic_text_reply_is_corrected_and_every_call_counted(
    server: ScriptedOpenAI,
) -> None:
    server.script(
        "claude",
        [
            Reply.text("Sorry, no JSON here.", prompt_tokens=10, completion_tokens=4),
            Reply.text(json.dumps(GOOD), prompt_tokens=25, completion_tokens=9),
        ],
    )
    async with server.async_anthropic_client() as client:

        @self_correct(schema=Invoice)
        async def extract(messages: list[dict[str, Any]]) -> Any:
            return await client.messages.create(model="claude", max_tokens=200, messages=messages)

        async with refinekit.job() as job:
            assert await extract([{"role": "user", "content": "the invoice"}]) == INVOICE
    assert job.corrections_used == 1
    assert job.usage == Usage(model_calls=2, prompt_tokens=35, completion_tokens=13)
    correction = server.requests[1].body
    assert correction is not None
    assert correction["messages"][-1]["content"].startswith(CHECK_MARKER)


def test_an_anthropic_reply_cut_off_at_max_tokens_is_diagnosed_as_cut_off(
    server: ScriptedOpenAI, claude: Any
) -> None:
    server.script("claude", [Reply.text('{"number": "A-1", "tot', finish_reason="length")])
    extract = self_correct(schema=Invoice, max_corrections=0)(lambda m: ask(claude, m))
    with pytest.raises(JsonParseError) as exc_info:
        extract(USER)
    assert exc_info.value.failure == "cut_off"  # stop_reason "max_tokens"


def test_retry_on_low_quality_over_anthropic_replies(
    server: ScriptedOpenAI, claude: Any, kind: str
) -> None:
    server.script(
        "claude",
        [
            Reply.text("draft", prompt_tokens=10, completion_tokens=1),
            Reply.text("final [1]", prompt_tokens=20, completion_tokens=2),
        ],
    )
    seen: list[str] = []

    def evaluator(request: EvaluationRequest) -> bool:
        seen.append(request.answer)
        return "[1]" in request.answer

    answer = as_kind(kind, lambda question: ask(claude, [{"role": "user", "content": question}]))
    with refinekit.job() as job:
        result = call(retry_on_low_quality(evaluator=evaluator)(answer), "q")
    assert isinstance(result, anthropic.types.Message)
    assert seen == ["draft", "final [1]"]
    assert job.usage == Usage(model_calls=2, prompt_tokens=30, completion_tokens=3)


def test_anthropic_cache_tokens_count_as_prompt_tokens() -> None:
    reply = anthropic.types.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": json.dumps(GOOD)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 5,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 1000,
                "output_tokens": 7,
            },
        }
    )
    for shape in (reply, reply.model_dump()):
        with refinekit.job() as job:
            assert self_correct(schema=Invoice)(lambda messages, r=shape: r)([]) == INVOICE
        assert job.usage == Usage(model_calls=1, prompt_tokens=1105, completion_tokens=7)


# --- LiteLLM -------------------------------------------------------------------------------------


def test_a_litellm_model_response_is_parsed_and_counted(kind: str) -> None:
    replies = [
        litellm_reply("not JSON", tokens=(9, 2)),
        litellm_reply(arguments=json.dumps(GOOD), tokens=(20, 6), finish_reason="tool_calls"),
    ]
    calls: list[Any] = []

    def extract(messages: list[dict[str, Any]]) -> Any:
        calls.append(messages)
        return replies[len(calls) - 1]

    with refinekit.job() as job:
        value = call(self_correct(schema=Invoice)(as_kind(kind, extract)), USER)
    assert value == INVOICE
    assert job.usage == Usage(model_calls=2, prompt_tokens=29, completion_tokens=8)


def test_retry_on_low_quality_over_litellm_replies(kind: str) -> None:
    replies = [litellm_reply("draft", tokens=(5, 1)), litellm_reply("final [1]", tokens=(7, 2))]
    seen: list[str] = []

    def evaluator(request: EvaluationRequest) -> bool:
        seen.append(request.answer)
        return "[1]" in request.answer

    answer = as_kind(kind, lambda question: replies[len(seen)])
    with refinekit.job() as job:
        assert call(retry_on_low_quality(evaluator=evaluator)(answer), "q") is replies[1]
    assert seen == ["draft", "final [1]"]
    assert job.usage == Usage(model_calls=2, prompt_tokens=12, completion_tokens=3)


# --- record_usage --------------------------------------------------------------------------------


def answering_text(kind: str, tokens: list[tuple[int, int]]) -> Callable[..., Any]:
    """An answer function returning `str`, reporting the usage of the calls it made."""

    def answer(question: str) -> str:
        for prompt, completion in tokens:
            record_usage(input_tokens=prompt, output_tokens=completion)
        return "an answer [1]"

    return as_kind(kind, answer)


def test_record_usage_counts_a_str_replys_calls_in_the_job(kind: str) -> None:
    fn = retry_on_low_quality(evaluator=lambda r: True)(answering_text(kind, [(100, 20), (5, 1)]))
    with refinekit.job() as job:
        assert call(fn, "q") == "an answer [1]"
    assert job.usage == Usage(model_calls=2, prompt_tokens=105, completion_tokens=21)
    assert job.judge_usage == Usage()


def test_record_usage_reaches_the_exhausted_error(kind: str) -> None:
    def extract(messages: list[dict[str, Any]]) -> str:
        record_usage(input_tokens=40, output_tokens=3)
        return "no JSON"

    with pytest.raises(JsonParseError) as exc_info:
        call(self_correct(schema=Invoice, max_corrections=1)(as_kind(kind, extract)), [])
    assert exc_info.value.usage == Usage(model_calls=2, prompt_tokens=80, completion_tokens=6)


def test_record_usage_for_a_judge_counts_apart_and_sums_with_calls() -> None:
    def evaluator(request: EvaluationRequest) -> bool:
        record_usage(input_tokens=50, output_tokens=2, calls=2, judge=True)
        return True

    with refinekit.job() as job:
        retry_on_low_quality(evaluator=evaluator)(lambda question: "a")("q")
    assert job.judge_usage == Usage(model_calls=2, prompt_tokens=50, completion_tokens=2)
    assert job.usage == Usage()


def test_record_usage_outside_a_job_does_nothing() -> None:
    record_usage(input_tokens=1, output_tokens=1)  # the function still works undecorated
    assert refinekit.current_job() is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"input_tokens": -1}, ValueError, "input_tokens must be >= 0"),
        ({"output_tokens": 1.5}, TypeError, "output_tokens is an int, not float"),
        ({"calls": True}, TypeError, "calls is an int, not bool"),
    ],
)
def test_record_usage_refuses_bad_counts(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with refinekit.job() as job, pytest.raises(error, match=message):
        record_usage(**kwargs)
    assert job.usage == Usage()


def test_reviewed_judges_an_anthropic_replys_text(
    server: ScriptedOpenAI, claude: Any, kind: str
) -> None:
    server.script("claude", Reply.text("Refunds take 5 days [1]."))
    seen: list[str] = []

    def judge(request: EvaluationRequest) -> bool:
        seen.append(request.answer)
        return True

    answer = as_kind(kind, lambda question: ask(claude, [{"role": "user", "content": question}]))
    result = call(reviewed(judge=judge, max_revisions=0)(answer), "q")
    assert result == "Refunds take 5 days [1]."
    assert seen == ["Refunds take 5 days [1]."]


def test_reviewed_judges_a_langchain_replys_text_and_refuses_its_tool_call(kind: str) -> None:
    seen: list[str] = []

    def judge(request: EvaluationRequest) -> bool:
        seen.append(request.answer)
        return True

    text = as_kind(kind, lambda question: AIMessage(content=[{"type": "text", "text": "Yes."}]))
    assert call(reviewed(judge=judge, max_revisions=0)(text), "q") == "Yes."
    assert seen == ["Yes."]
    tool = as_kind(kind, lambda question: ai_tool_call(GOOD))
    with pytest.raises(TypeError, match="calls tools"):
        call(reviewed(judge=judge, max_revisions=0)(tool), "q")
