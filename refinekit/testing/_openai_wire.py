"""The scripted server's OpenAI side: replies as Chat Completions (`POST /v1/chat/completions`).

- `Text`: a `chat.completion` with one choice, its message's text, and OpenAI logprobs when the
  request asks for them (the first token from the reply's candidates, the rest certain);
- `ToolCall`: a message with one function call, `finish_reason` "tool_calls";
- `Error` and the server's own errors: OpenAI's error body, `{"error": {"message", "type",
  "param", "code"}}`, the type by status unless the reply gives one;
- `Malformed`: a body cut short inside its JSON; `NoChoices`: `"choices": []`.

Every completion carries `usage`, counted in words unless the reply gives the counts.

A request with `"stream": true` gets the reply as server-sent events, OpenAI's way
(`stream`): `chat.completion.chunk`s, the first with the role (and a tool call's id and
name), one per scripted piece of the text or the arguments, one with the `finish_reason`,
a usage chunk (`"choices": []`) when `stream_options.include_usage` is true (and
`"usage": null` on the others), then `data: [DONE]`. No logprobs in a stream.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from ._script import Error, Malformed, NoChoices, RecordedRequest, Reply, Text, ToolCall
from ._wire import Event, Ids, Response, Streamed, error_response, sse, usage

__all__ = ["CHAT_PATH", "answer", "error", "stream"]

CHAT_PATH = "/v1/chat/completions"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_CHUNKS = re.compile(r"\s*\S+|\s+")  # whitespace-preserving tokens: "a b " -> "a", " b", " "
_BAD = '{"id": "chatcmpl-scripted", "choices": [{"delta": '  # JSON cut short


def _usage(
    request: RecordedRequest, output: str, prompt: int | None, completion: int | None
) -> dict[str, int]:
    prompt, completion = usage((request.body or {}).get("messages"), output, prompt, completion)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _token(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _logprobs(
    content: str, candidates: tuple[tuple[str, float], ...], body: Mapping[str, Any]
) -> dict[str, Any]:
    """OpenAI's `choice.logprobs`: the first token from the candidates, the rest certain."""
    top_n = body.get("top_logprobs")
    top_n = top_n if isinstance(top_n, int) and top_n > 0 else 0
    first = next(((t, p) for t, p in candidates if content.startswith(t)), None)
    tokens = []
    if first is not None:
        top = [_token(t, math.log(p)) for t, p in candidates[:top_n]]
        tokens.append({**_token(first[0], math.log(first[1])), "top_logprobs": top})
        content = content[len(first[0]) :]
    for chunk in _CHUNKS.findall(content):
        tokens.append({**_token(chunk, 0.0), "top_logprobs": [_token(chunk, 0.0)][:top_n]})
    return {"content": tokens, "refusal": None}


def _completion(
    request: RecordedRequest,
    ids: Ids,
    choices: list[dict[str, Any]],
    usage: dict[str, int],
) -> Response:
    completion = {
        "id": f"chatcmpl-scripted-{next(ids.completions)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": usage,
        "system_fingerprint": None,
    }
    return Response(200, json.dumps(completion).encode())


def _choice(
    message: dict[str, Any], logprobs: dict[str, Any] | None, finish_reason: str
) -> dict[str, Any]:
    return {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}


def error_type(status: int) -> str:
    """The error type OpenAI sends with a status (what `Reply.error` defaults to)."""
    if status >= 500:
        return "server_error"
    return _ERROR_TYPES.get(status, "invalid_request_error")


def error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> Response:
    """The server's own error in OpenAI's shape."""
    return error_response(status, _error_body(status, message, param, code, None))


def _error_body(
    status: int, message: str, param: str | None, code: str | None, type: str | None
) -> dict[str, Any]:
    kind = type or error_type(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def answer(reply: Reply, request: RecordedRequest, ids: Ids) -> Response:
    """A reply that carries an answer, as the Chat Completions API sends it."""
    if isinstance(reply, Text):
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        body = request.body or {}
        asked = bool(body.get("logprobs")) and reply.with_logprobs
        logprobs = _logprobs(reply.content, reply.candidates, body) if asked else None
        counted = _usage(request, reply.content, reply.prompt_tokens, reply.completion_tokens)
        return _completion(request, ids, [_choice(message, logprobs, reply.finish_reason)], counted)
    if isinstance(reply, ToolCall):
        call_id = f"call_{next(ids.tool_calls)}"
        function = {"name": reply.name, "arguments": reply.arguments}
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
        counted = _usage(request, reply.arguments, reply.prompt_tokens, reply.completion_tokens)
        return _completion(request, ids, [_choice(message, None, "tool_calls")], counted)
    if isinstance(reply, Error):
        body = _error_body(reply.status, reply.message, None, reply.code, reply.type)
        return error_response(reply.status, body, reply.retry_after)
    if isinstance(reply, NoChoices):
        return _completion(request, ids, [], _usage(request, "", None, 0))
    if isinstance(reply, Malformed):
        return Response(200, b'{"id": "chatcmpl-scripted", "choices": [{"message": ')
    raise TypeError(f"not a reply that carries an answer: {reply!r}")  # pragma: no cover


def stream(reply: Reply, request: RecordedRequest, ids: Ids) -> Streamed:
    """A reply that carries an answer, streamed as the Chat Completions API streams it."""
    body = request.body or {}
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    completion_id = f"chatcmpl-scripted-{next(ids.completions)}"
    created = int(time.time())

    def chunk(choices: list[dict[str, Any]], used: dict[str, int] | None = None) -> dict[str, Any]:
        made: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "system_fingerprint": None,
            "choices": choices,
        }
        if with_usage:
            made["usage"] = used
        return made

    def delta(fields: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": fields, "logprobs": None, "finish_reason": finish_reason}
        return chunk([choice])

    events: list[Event]
    if isinstance(reply, Text):
        opening: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        events = [sse(delta(opening), role="open")]
        events += [sse(delta({"content": piece})) for piece in reply.chunks]
        events.append(sse(delta({}, reply.finish_reason), role="close"))
        counted = _usage(request, reply.content, reply.prompt_tokens, reply.completion_tokens)
    elif isinstance(reply, ToolCall):
        call_id = f"call_{next(ids.tool_calls)}"
        function = {"name": reply.name, "arguments": ""}
        call = {"index": 0, "id": call_id, "type": "function", "function": function}
        opening = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
        events = [sse(delta(opening), role="open")]
        events += [
            sse(delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            for piece in reply.chunks
        ]
        events.append(sse(delta({}, "tool_calls"), role="close"))
        counted = _usage(request, reply.arguments, reply.prompt_tokens, reply.completion_tokens)
    elif isinstance(reply, NoChoices):
        events = [sse(chunk([]), role="open")]
        counted = _usage(request, "", None, 0)
    elif isinstance(reply, Malformed):
        done = Event("[DONE]", role="close")
        return Streamed((Event(_BAD), done), fault="malformed")
    else:  # pragma: no cover
        raise TypeError(f"not a reply that streams: {reply!r}")
    if with_usage:
        events.append(sse(chunk([], counted), role="close"))
    events.append(Event("[DONE]", role="close"))
    return Streamed(tuple(events))
