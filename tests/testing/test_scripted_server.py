"""ScriptedOpenAI over real HTTP, with the real openai client (sync and async) and instructor."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import instructor
import openai
import pytest
from helpers import Invoice
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

Create = Callable[..., Awaitable[ChatCompletion]]
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Is the sky blue?"}]


@pytest.fixture(params=["sync", "async"])
async def create(request: pytest.FixtureRequest, server: ScriptedOpenAI) -> AsyncIterator[Create]:
    """`chat.completions.create` through the sync or the async client, awaited alike."""
    if request.param == "sync":
        with server.client() as client:

            async def create_sync(**kwargs: Any) -> ChatCompletion:
                completion: ChatCompletion = client.chat.completions.create(**kwargs)
                return completion

            yield create_sync
    else:
        async with server.async_client() as aclient:

            async def create_async(**kwargs: Any) -> ChatCompletion:
                completion: ChatCompletion = await aclient.chat.completions.create(**kwargs)
                return completion

            yield create_async


# the server and its clients


def test_base_url_and_client_defaults(server: ScriptedOpenAI) -> None:
    assert server.base_url.startswith("http://127.0.0.1:")
    assert server.base_url.endswith("/v1")
    with server.client() as client:
        assert str(client.base_url) == server.base_url + "/"
        assert client.max_retries == 0
        assert client.timeout == 10
    with server.client(max_retries=2, timeout=0.2) as client:
        assert (client.max_retries, client.timeout) == (2, 0.2)


def test_base_url_needs_a_running_server() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        _ = ScriptedOpenAI().base_url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_and_a_host_can_be_chosen() -> None:
    port = free_port()
    with ScriptedOpenAI(port=port) as server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        server.script("gpt-test", "Paris.")
        with server.client() as client:
            reply = client.chat.completions.create(model="gpt-test", messages=[])
        assert reply.choices[0].message.content == "Paris."
    if not socket.has_ipv6:
        return
    try:
        with ScriptedOpenAI(host="::1") as server:
            assert server.base_url.startswith("http://[::1]:")
            server.script("gpt-test", "Paris.")
            with server.client() as client:
                reply = client.chat.completions.create(model="gpt-test", messages=[])
            assert reply.choices[0].message.content == "Paris."
    except OSError:  # a machine without IPv6's loopback
        pass


@pytest.mark.parametrize("port", [-1, 65536, 1.5, True, "80"])
def test_a_port_is_0_to_65535(port: Any) -> None:
    with pytest.raises(ValueError, match="port is a whole number from 0 to 65535"):
        ScriptedOpenAI(port=port)


def test_a_host_is_an_address() -> None:
    with pytest.raises(ValueError, match="host is an address to listen on"):
        ScriptedOpenAI(host=" ")


def test_a_running_server_cannot_be_entered_again(server: ScriptedOpenAI) -> None:
    with pytest.raises(RuntimeError, match="already running"):
        server.__enter__()


# text replies


async def test_text_reply(server: ScriptedOpenAI, create: Create) -> None:
    server.script("gpt-test", ["The sky is blue."])
    completion = await create(model="gpt-test", messages=USER)
    assert completion.id.startswith("chatcmpl-scripted-")
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-test"
    assert completion.system_fingerprint is None
    (choice,) = completion.choices
    assert choice.index == 0
    assert choice.finish_reason == "stop"
    assert choice.logprobs is None
    assert choice.message.role == "assistant"
    assert choice.message.content == "The sky is blue."
    assert choice.message.tool_calls is None
    assert choice.message.refusal is None


async def test_replies_are_served_in_order_per_model(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("a", ["a1", Reply.text("a2")])
    server.script("b", "b1")  # a single reply needs no list
    server.script("a", ["a3"])  # scripting the same model again appends
    contents = [
        (await create(model=model, messages=USER)).choices[0].message.content
        for model in ["a", "b", "a", "a"]
    ]
    assert contents == ["a1", "b1", "a2", "a3"]


async def test_callable_reply_sees_the_request(server: ScriptedOpenAI, create: Create) -> None:
    seen: list[RecordedRequest] = []

    def echo(request: RecordedRequest) -> str:
        seen.append(request)
        assert request.body is not None
        return f"you said: {request.body['messages'][-1]['content']}"

    server.script("echo", [echo, lambda request: str((request.body or {})["temperature"])])
    first = await create(model="echo", messages=USER)
    second = await create(model="echo", messages=USER, temperature=0.5)
    assert first.choices[0].message.content == "you said: Is the sky blue?"
    assert second.choices[0].message.content == "0.5"
    assert seen[0].model == "echo"
    assert seen[0].path == "/v1/chat/completions"


async def test_finish_reason_can_be_scripted(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.text("cut sh", finish_reason="length")])
    completion = await create(model="m", messages=USER)
    assert completion.choices[0].finish_reason == "length"


# logprobs


async def test_logprobs_shape(server: ScriptedOpenAI, create: Create) -> None:
    server.script("judge", [Reply.text("Yes, it is.", {"No": 0.1, "Yes": 0.9})])
    completion = await create(model="judge", messages=USER, logprobs=True, top_logprobs=2)
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.content is not None
    assert logprobs.refusal is None
    first, *rest = logprobs.content
    assert first.token == "Yes"
    assert first.logprob == math.log(0.9)
    assert first.bytes == list(b"Yes")
    assert [(t.token, t.logprob, t.bytes) for t in first.top_logprobs] == [
        ("Yes", math.log(0.9), list(b"Yes")),
        ("No", math.log(0.1), list(b"No")),
    ]
    assert [t.token for t in rest] == [",", " it", " is."]
    assert "".join(t.token for t in logprobs.content) == "Yes, it is."
    for token in rest:
        assert token.logprob == 0.0
        assert [(t.token, t.logprob) for t in token.top_logprobs] == [(token.token, 0.0)]


async def test_top_logprobs_count_is_honoured(server: ScriptedOpenAI, create: Create) -> None:
    server.script("judge", [Reply.text("Yes", {"Yes": 0.7, "No": 0.2, "Maybe": 0.1})] * 2)
    one = await create(model="judge", messages=USER, logprobs=True, top_logprobs=1)
    none = await create(model="judge", messages=USER, logprobs=True)
    assert one.choices[0].logprobs is not None
    assert one.choices[0].logprobs.content is not None
    assert [t.token for t in one.choices[0].logprobs.content[0].top_logprobs] == ["Yes"]
    assert none.choices[0].logprobs is not None
    assert none.choices[0].logprobs.content is not None
    assert none.choices[0].logprobs.content[0].top_logprobs == []


async def test_no_logprobs_unless_asked(server: ScriptedOpenAI, create: Create) -> None:
    server.script("judge", [Reply.text("Yes", {"Yes": 0.9, "No": 0.1})] * 2)
    assert (await create(model="judge", messages=USER)).choices[0].logprobs is None
    completion = await create(model="judge", messages=USER, logprobs=False)
    assert completion.choices[0].logprobs is None


async def test_a_reply_can_play_an_endpoint_that_ignores_logprobs(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("judge", [Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, logprobs=False)])
    completion = await create(model="judge", messages=USER, logprobs=True, top_logprobs=5)
    assert completion.choices[0].logprobs is None
    assert completion.choices[0].message.content == "Yes"


async def test_first_token_is_the_candidate_the_content_starts_with(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("judge", [Reply.text("No.", {"Yes": 0.6, "No": 0.4})])
    completion = await create(model="judge", messages=USER, logprobs=True, top_logprobs=5)
    assert completion.choices[0].logprobs is not None
    content = completion.choices[0].logprobs.content
    assert content is not None
    assert (content[0].token, content[0].logprob) == ("No", math.log(0.4))
    assert [t.token for t in content[0].top_logprobs] == ["Yes", "No"]
    assert [t.token for t in content[1:]] == ["."]


async def test_logprobs_of_plain_text_are_certain(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", ["hello  world "])
    completion = await create(model="m", messages=USER, logprobs=True, top_logprobs=3)
    assert completion.choices[0].logprobs is not None
    content = completion.choices[0].logprobs.content
    assert content is not None
    assert [(t.token, t.logprob) for t in content] == [("hello", 0.0), ("  world", 0.0), (" ", 0.0)]


@pytest.mark.parametrize(
    ("content", "top", "message"),
    [
        ("Maybe", {"Yes": 0.9, "No": 0.1}, "must start with one of"),
        ("Yes", {"Yes": 0.0}, r"in \(0, 1\]"),
        ("Yes", {"Yes": 1.5}, r"in \(0, 1\]"),
        ("Yes", {"Yes": 0.8, "No": 0.8}, "sum above 1"),
    ],
)
def test_bad_top_logprobs_are_refused(content: str, top: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Reply.text(content, top)


# tool calls


async def test_tool_call(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.tool_call("lookup", {"city": "Oslo"}), Reply.tool_call("f", "{}")])
    completion = await create(model="m", messages=USER)
    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.type == "function"
    assert call.id == "call_1"
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    completion = await create(model="m", messages=USER)
    assert completion.choices[0].message.tool_calls is not None
    (call,) = completion.choices[0].message.tool_calls
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.id, call.function.arguments) == ("call_2", "{}")


# errors

ERRORS = [
    (400, openai.BadRequestError, "invalid_request_error"),
    (401, openai.AuthenticationError, "authentication_error"),
    (403, openai.PermissionDeniedError, "permission_error"),
    (404, openai.NotFoundError, "invalid_request_error"),
    (422, openai.UnprocessableEntityError, "invalid_request_error"),
    (429, openai.RateLimitError, "rate_limit_error"),
    (500, openai.InternalServerError, "server_error"),
    (503, openai.InternalServerError, "server_error"),
]


@pytest.mark.parametrize(("status", "exception", "error_type"), ERRORS)
async def test_error_reply_raises_the_openai_exception(
    server: ScriptedOpenAI,
    create: Create,
    status: int,
    exception: type[openai.APIStatusError],
    error_type: str,
) -> None:
    server.script("m", [Reply.error(status, "scripted failure", code="some_code")])
    with pytest.raises(exception) as caught:
        await create(model="m", messages=USER)
    assert caught.value.status_code == status
    assert caught.value.body == {
        "message": "scripted failure",
        "type": error_type,
        "param": None,
        "code": "some_code",
    }
    assert caught.value.type == error_type
    assert caught.value.code == "some_code"
    retry_after = caught.value.response.headers.get("retry-after")
    assert retry_after == ("0" if status == 429 else None)


async def test_error_type_can_be_given(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.error(400, "too long", type="context_length_exceeded")])
    with pytest.raises(openai.BadRequestError, match="too long") as caught:
        await create(model="m", messages=USER)
    assert caught.value.type == "context_length_exceeded"


@pytest.mark.parametrize("status", [200, 302, 600])
def test_error_status_must_be_an_error(status: int) -> None:
    with pytest.raises(ValueError, match="400 to 599"):
        Reply.error(status)


async def test_unscripted_model_is_a_404_naming_it(server: ScriptedOpenAI, create: Create) -> None:
    server.script("judge", ["Yes"])
    with pytest.raises(openai.NotFoundError, match="'gpt-unknown'") as caught:
        await create(model="gpt-unknown", messages=USER)
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


async def test_exhausted_script_is_a_500_naming_the_model(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("judge", ["Yes", "No"])
    await create(model="judge", messages=USER)
    await create(model="judge", messages=USER)
    with pytest.raises(openai.InternalServerError) as caught:
        await create(model="judge", messages=USER)
    assert caught.value.body is not None
    assert caught.value.body["message"] == (  # type: ignore[index]
        "scripted server: no reply left for model 'judge' (2 scripted, this is request 3)"
    )


async def test_a_callable_that_raises_is_a_500(server: ScriptedOpenAI, create: Create) -> None:
    def broken(request: RecordedRequest) -> str:
        raise KeyError("oops")

    server.script("m", [broken])
    with pytest.raises(openai.InternalServerError, match="reply 1 for model 'm' raised KeyError"):
        await create(model="m", messages=USER)


def test_unknown_paths_and_bad_bodies(server: ScriptedOpenAI) -> None:
    with httpx2.Client(base_url=server.base_url) as http:
        models = http.get("/models")
        not_json = http.post(
            "/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
        no_model = http.post("/chat/completions", json={"messages": []})
    assert models.status_code == 404
    assert models.json()["error"]["message"].startswith("scripted server: no route GET /v1/models")
    assert not_json.status_code == 400
    assert not_json.json()["error"]["message"] == (
        "scripted server: the request body is not a JSON object"
    )
    assert no_model.status_code == 400
    assert no_model.json()["error"]["param"] == "model"
    assert [(r.method, r.path, r.body) for r in server.requests] == [
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", None),
        ("POST", "/v1/chat/completions", {"messages": []}),
    ]


def test_script_refuses_what_is_not_a_reply(server: ScriptedOpenAI) -> None:
    with pytest.raises(TypeError, match="a reply is a str, a Reply or a callable"):
        server.script("m", ["ok", 42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=">= 0 seconds"):
        Reply.delay(-1, "late")


# replies that repeat, and reset


async def test_times_serves_the_replies_in_turn_that_many_times(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("m", ["a", "b"], times=2)
    server.script("m", "c")
    contents = [
        (await create(model="m", messages=USER)).choices[0].message.content for _ in "12345"
    ]
    assert contents == ["a", "b", "a", "b", "c"]
    with pytest.raises(openai.InternalServerError, match=r"\(5 scripted, this is request 6\)"):
        await create(model="m", messages=USER)


async def test_times_none_answers_every_request_after_the_script(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("m", "first")
    server.script("m", ["x", lambda request: "y"], times=None)
    contents = [
        (await create(model="m", messages=USER)).choices[0].message.content for _ in "12345"
    ]
    assert contents == ["first", "x", "y", "x", "y"]


def test_a_reply_for_ever_serves_many_concurrent_clients(server: ScriptedOpenAI) -> None:
    server.script("m", Reply.text("Paris."), times=None)
    replies: list[str | None] = []

    def ask() -> None:
        with server.client() as client:
            for _ in range(5):
                reply = client.chat.completions.create(model="m", messages=USER)
                replies.append(reply.choices[0].message.content)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert replies == ["Paris."] * 40
    assert len(server.requests_for("m")) == 40


def test_times_is_checked_and_nothing_follows_a_reply_for_ever(server: ScriptedOpenAI) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="times is a whole number of at least 1, or None"):
            server.script("m", "x", times=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give at least one"):
        server.script("m", [], times=None)
    server.script("m", "x", times=None)
    with pytest.raises(ValueError, match="'m' already repeats for ever"):
        server.script("m", "y")


async def test_reset_forgets_scripts_and_requests_at_the_same_address(
    server: ScriptedOpenAI, create: Create
) -> None:
    base_url = server.base_url
    server.script("m", ["left over", "and this"])
    server.script("n", "x", times=None)
    await create(model="m", messages=USER)

    server.reset()

    assert server.requests == []
    assert server.base_url == base_url
    with pytest.raises(openai.NotFoundError, match="no script for model 'm'"):
        await create(model="m", messages=USER)
    server.script("n", "fresh")  # no longer for ever: it can be scripted again
    assert (await create(model="n", messages=USER)).choices[0].message.content == "fresh"
    assert [r.model for r in server.requests] == ["m", "n"]


# transport faults


async def test_delay_then_reply(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.delay(0.01, "late"), Reply.delay(0.01, Reply.tool_call("f", {}))])
    assert (await create(model="m", messages=USER)).choices[0].message.content == "late"
    assert (await create(model="m", messages=USER)).choices[0].finish_reason == "tool_calls"


async def test_delay_beyond_the_client_timeout(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.delay(0.3, "too late")])
    with pytest.raises(openai.APITimeoutError):
        await create(model="m", messages=USER, timeout=0.1)


async def test_disconnect_is_a_connection_error(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.disconnect(), "after the fault"])
    with pytest.raises(openai.APIConnectionError) as caught:
        await create(model="m", messages=USER)
    assert not isinstance(caught.value, openai.APITimeoutError)
    # the client recovers on a new connection
    assert (await create(model="m", messages=USER)).choices[0].message.content == "after the fault"


async def test_malformed_body_raises_a_json_decode_error(
    server: ScriptedOpenAI, create: Create
) -> None:
    # The openai client reads a 200 `application/json` response with `response.json()` and
    # does not wrap the failure: the caller gets `json.JSONDecodeError` (a ValueError), not an
    # `openai.APIError` and not `openai.APIResponseValidationError`.
    server.script("m", [Reply.malformed()])
    with pytest.raises(json.JSONDecodeError):
        await create(model="m", messages=USER)


async def test_hang_is_a_client_timeout_and_frees_the_connection(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("m", [Reply.hang(), "after the fault"])
    with pytest.raises(openai.APITimeoutError):
        await create(model="m", messages=USER, timeout=0.2)
    assert (await create(model="m", messages=USER)).choices[0].message.content == "after the fault"
    assert len(server.requests) == 2


def held_request(
    server: ScriptedOpenAI, client: openai.OpenAI, caught: list[BaseException]
) -> threading.Thread:
    """A thread asking model "m" through `client` (what the call raises goes to `caught`),
    returned once its request arrived (and is held, when the script says so)."""

    def ask() -> None:
        try:
            client.chat.completions.create(model="m", messages=USER)
        except BaseException as e:
            caught.append(e)

    asking = threading.Thread(target=ask)
    asking.start()
    while not server.requests:
        asking.join(0.01)
    return asking


def test_in_flight_counts_requests_until_their_response_is_done(server: ScriptedOpenAI) -> None:
    server.script("m", [Reply.hang(), "done"])
    assert server.in_flight == 0
    with server.client(timeout=0.5) as client:
        caught: list[BaseException] = []
        asking = held_request(server, client, caught)
        assert server.in_flight == 1  # held, and the client still waits
        asking.join(5)  # the client times out and hangs up
        assert [type(e) for e in caught] == [openai.APITimeoutError]
        deadline = time.monotonic() + 5
        while server.in_flight and time.monotonic() < deadline:  # noticed at once
            asking.join(0.01)
        assert server.in_flight == 0
        assert client.chat.completions.create(model="m", messages=USER).choices
    assert server.in_flight == 0


def test_stopping_the_server_ends_a_held_connection() -> None:
    before = set(threading.enumerate())
    caught: list[BaseException] = []
    with ScriptedOpenAI() as server, server.client(timeout=30) as client:
        server.script("m", [Reply.hang()])
        asking = held_request(server, client, caught)
    # the client's 30 s timeout did not have to run out: stopping the server hung up
    asking.join(5)
    assert not asking.is_alive()
    [error] = caught
    assert isinstance(error, openai.APIConnectionError)
    assert not isinstance(error, openai.APITimeoutError)
    assert set(threading.enumerate()) == before


@pytest.mark.parametrize(
    "then", ["cut short", Reply.error(500, "x" * 200), Reply.tool_call("f", {"a": 1})]
)
async def test_truncated_drops_the_connection_mid_body(
    server: ScriptedOpenAI, create: Create, then: str | Reply
) -> None:
    server.script("m", [Reply.truncated(then), "after the fault"])
    with pytest.raises(openai.APIConnectionError) as caught:
        await create(model="m", messages=USER)
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert "peer closed connection without sending complete message body" in str(
        caught.value.__cause__
    )
    assert (await create(model="m", messages=USER)).choices[0].message.content == "after the fault"


async def test_truncated_of_a_reply_without_a_response_is_that_reply(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("m", [Reply.truncated(Reply.disconnect())])
    with pytest.raises(openai.APIConnectionError):
        await create(model="m", messages=USER)


async def test_no_choices(server: ScriptedOpenAI, create: Create) -> None:
    server.script("m", [Reply.no_choices()])
    completion = await create(model="m", messages=USER)
    assert completion.choices == []
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 0
    assert completion.id.startswith("chatcmpl-scripted-")


async def test_raw_bodies_statuses_and_headers(server: ScriptedOpenAI, create: Create) -> None:
    server.script(
        "m",
        [
            Reply.raw({"choices": [{"message": None}]}),
            Reply.raw(
                b"<html>Bad gateway</html>", status=502, headers={"Content-Type": "text/html"}
            ),
            Reply.raw("not json", headers={"x-scripted": "yes"}),
            Reply.raw([1, 2]),
        ],
    )
    odd = await create(model="m", messages=USER)  # the client does not validate the shape
    assert odd.choices[0].message is None
    with pytest.raises(openai.InternalServerError) as caught:
        await create(model="m", messages=USER)
    assert caught.value.status_code == 502
    assert caught.value.response.headers["content-type"] == "text/html"
    assert caught.value.response.text == "<html>Bad gateway</html>"
    with pytest.raises(json.JSONDecodeError):
        await create(model="m", messages=USER)
    listed = await create(model="m", messages=USER)  # a JSON list is not a completion
    assert not isinstance(listed, ChatCompletion)


def test_raw_refuses_what_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="200 to 599"):
        Reply.raw(b"", status=204)
    with pytest.raises(ValueError, match="200 to 599"):
        Reply.raw(b"", status=101)
    with pytest.raises(ValueError, match="valid UTF-8"):
        Reply.raw("lone \ud83d surrogate")
    with pytest.raises(TypeError, match="bytes, a str, a mapping or a list"):
        Reply.raw(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "retry_after", "header"),
    [(429, None, "0"), (429, 7, "7"), (503, 0.5, "0.5"), (503, None, None), (429, "soon", "soon")],
)
async def test_retry_after_header(
    server: ScriptedOpenAI,
    create: Create,
    status: int,
    retry_after: float | str | None,
    header: str | None,
) -> None:
    server.script("m", [Reply.error(status, "busy", retry_after=retry_after)])
    with pytest.raises(openai.APIStatusError) as caught:
        await create(model="m", messages=USER)
    assert caught.value.response.headers.get("retry-after") == header


@pytest.mark.parametrize("retry_after", [-1, math.inf, math.nan, True])
def test_retry_after_must_be_seconds_or_a_str(retry_after: float) -> None:
    with pytest.raises(ValueError, match="retry_after is seconds >= 0 or a str"):
        Reply.error(429, retry_after=retry_after)


# usage


async def test_usage_on_every_reply(server: ScriptedOpenAI, create: Create) -> None:
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": "Is the sky blue?"}]},
    ]
    server.script(
        "m",
        [
            "Yes, it is blue.",
            Reply.text("", {}),
            Reply.tool_call("f", {"a": 1, "b": 2}),
            Reply.delay(0, Reply.text("x", prompt_tokens=100, completion_tokens=7)),
        ],
    )
    usages = []
    for _ in range(4):
        usage = (await create(model="m", messages=messages)).usage
        assert usage is not None
        usages.append((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens))
    # prompt: 2 + 4 words, plus one per message; completion: words, at least one
    assert usages == [(8, 4, 12), (8, 1, 9), (8, 4, 12), (100, 7, 107)]


# the record of requests


async def test_requests_are_recorded_in_order_and_redacted(
    server: ScriptedOpenAI, create: Create
) -> None:
    server.script("a", ["1", "3"])
    server.script("b", ["2"])
    for model, text in [("a", "one"), ("b", "two"), ("a", "three")]:
        await create(model=model, messages=[{"role": "user", "content": text}])
    assert [(r.model, r.body["messages"][0]["content"]) for r in server.requests] == [  # type: ignore[index]
        ("a", "one"),
        ("b", "two"),
        ("a", "three"),
    ]
    assert [r.body["messages"][0]["content"] for r in server.requests_for("a")] == [  # type: ignore[index]
        "one",
        "three",
    ]
    first = server.requests[0]
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer ***"
    assert first.headers["content-type"] == "application/json"
    assert "scripted-key" not in repr(server.requests)


def test_other_credentials_are_redacted(server: ScriptedOpenAI) -> None:
    server.script("m", ["ok"])
    headers = {"api-key": "secret-1", "x-api-key": "secret-2"}
    with server.client(api_key="secret-0", default_headers=headers) as client:
        client.chat.completions.create(model="m", messages=USER)
    (request,) = server.requests
    assert request.headers["api-key"] == request.headers["x-api-key"] == "***"
    assert "secret" not in repr(request)


# instructor


async def extracted(server: ScriptedOpenAI, mode: instructor.Mode) -> list[Invoice]:
    """An `Invoice` extracted with instructor in `mode`, by the sync client then the async one."""
    with server.client() as client:
        sync = instructor.from_openai(client, mode=mode)
        invoices = [sync.create(model="extract", response_model=Invoice, messages=USER)]
    async with server.async_client() as aclient:
        asynchronous = instructor.from_openai(aclient, mode=mode)
        invoices.append(
            await asynchronous.create(model="extract", response_model=Invoice, messages=USER)
        )
    return invoices


async def test_instructor_json_mode(server: ScriptedOpenAI) -> None:
    server.script("extract", ['{"number": "A-1", "total_cents": 1250}'] * 2)
    for invoice in await extracted(server, instructor.Mode.JSON):
        assert invoice.model_dump() == {"number": "A-1", "total_cents": 1250}
    body = server.requests[0].body
    assert body is not None
    assert body["response_format"] == {"type": "json_object"}


async def test_instructor_tools_mode(server: ScriptedOpenAI) -> None:
    server.script("extract", [Reply.tool_call("Invoice", {"number": "B-2", "total_cents": 99})] * 2)
    for invoice in await extracted(server, instructor.Mode.TOOLS):
        assert invoice.model_dump() == {"number": "B-2", "total_cents": 99}
    body = server.requests[0].body
    assert body is not None
    assert body["tool_choice"] == {"type": "function", "function": {"name": "Invoice"}}


# concurrency and lifecycle


async def test_many_concurrent_requests(server: ScriptedOpenAI) -> None:
    server.script("m", [Reply.delay(0.05, f"answer {i}") for i in range(200)])
    async with server.async_client() as client:
        completions = await asyncio.gather(
            *(client.chat.completions.create(model="m", messages=USER) for _ in range(200))
        )
    contents = {completion.choices[0].message.content for completion in completions}
    assert contents == {f"answer {i}" for i in range(200)}
    assert len(server.requests) == 200


def test_with_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    with ScriptedOpenAI() as server:
        server.script("m", ["a", "b"])
        client = server.client()
        client.chat.completions.create(model="m", messages=USER)
        client.chat.completions.create(model="m", messages=USER)
        assert any(t.name.startswith("ScriptedOpenAI") for t in threading.enumerate())
    try:  # the server stopped while the client still held a keep-alive connection
        # (other threads, such as refinekit's idle workers, may end meanwhile: only new ones
        # would be the server's)
        assert set(threading.enumerate()) - before == set()
    finally:
        client.close()


async def test_async_with_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    async with ScriptedOpenAI() as server:
        server.script("m", [Reply.delay(0.01, "x")] * 20)
        client = server.async_client()
        await asyncio.gather(
            *(client.chat.completions.create(model="m", messages=USER) for _ in range(20))
        )
        assert any(t.name.startswith("ScriptedOpenAI") for t in threading.enumerate())
    try:
        # the event loop's default executor (the async client's DNS lookups) is not the server's
        left = set(threading.enumerate()) - before
        assert {t for t in left if not t.name.startswith("asyncio_")} == set()
    finally:
        await client.close()


def test_a_server_can_run_again_after_exit() -> None:
    server = ScriptedOpenAI()
    server.script("m", ["first", "second"])
    for expected in ["first", "second"]:
        with server, server.client() as client:
            reply = client.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content == expected


def test_an_anthropic_prefill_that_ends_with_whitespace_is_refused(
    server: ScriptedOpenAI,
) -> None:
    import anthropic

    server.script("claude", [' "EUR"}', "refused", "refused"])
    with server.anthropic_client(max_retries=0) as client:
        prefilled = [
            {"role": "user", "content": "The currency?"},
            {"role": "assistant", "content": '{"currency":'},
        ]
        message = client.messages.create(model="claude", max_tokens=20, messages=prefilled)
        assert message.content[0].text == ' "EUR"}'  # type: ignore[union-attr]
        prefilled[-1] = {"role": "assistant", "content": '{"currency": '}
        for stream in (False, True):
            with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
                client.messages.create(
                    model="claude", max_tokens=20, messages=prefilled, stream=stream
                )
