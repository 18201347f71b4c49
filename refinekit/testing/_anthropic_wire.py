"""The scripted server's Anthropic side: `POST /v1/messages`, answered from the same scripts.

A request to `/v1/messages` is served from the script of its model name, as a chat
completion request is; each `Reply` is rendered as Anthropic's Messages API answers:

- `Reply.text(...)`: a `Message` with one text block (`stop_reason` from `finish_reason`:
  "stop" is "end_turn", "length" is "max_tokens", "tool_calls" is "tool_use"); no token
  probabilities (Anthropic has none);
- `Reply.tool_call(name, arguments)`: a `Message` with one `tool_use` block whose `input`
  is the arguments (a JSON object), `stop_reason` "tool_use";
- `Reply.error(status, ...)` and the server's own errors (no script, no reply left, a body
  that is not JSON, streaming): Anthropic's error body, `{"type": "error", "error":
  {"type", "message"}}`, with the same status;
- `Reply.no_choices()`: a `Message` with no content blocks;
- `Reply.malformed`: the same body cut short as on the OpenAI side;
- `Reply.delay`, `Reply.truncated`, `Reply.hang`, `Reply.disconnect` and `Reply.raw`: as on the
  OpenAI side (`refinekit.testing._wire`).

Every rendered `Message` carries `usage` (`input_tokens`, `output_tokens`), counted as the
chat completions' usage is unless the reply gives `prompt_tokens` / `completion_tokens`.

A request with `"stream": true` gets the reply as the Messages API streams it (`stream`):
`message_start` (the input tokens), `content_block_start`, a `ping`, one
`content_block_delta` per scripted piece (`text_delta`, or `input_json_delta` for a tool
call), `content_block_stop`, `message_delta` (the stop reason, the output tokens) and
`message_stop`, each with its `event:` name.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import _openai_wire
from ._script import Error, Malformed, NoChoices, RecordedRequest, Reply, Text, ToolCall
from ._wire import API_KEY, Event, Ids, Response, Role, Streamed, error_response, sse, usage

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "MESSAGES_PATH",
    "anthropic_options",
    "answer",
    "async_client",
    "client",
    "error",
    "stream",
]

MESSAGES_PATH = "/v1/messages"

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# OpenAI's finish reasons as Anthropic's stop reasons
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def anthropic_options(base_url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic client's options for the server at `base_url` (which ends in `/v1`)."""
    return {
        "base_url": base_url.removesuffix("/v1"),
        "api_key": API_KEY,
        "max_retries": 0,
        "timeout": 10.0,
        **kwargs,
    }


def client(base_url: str, kwargs: dict[str, Any]) -> anthropic.Anthropic:
    """A real `anthropic.Anthropic` client for the server at `base_url`."""
    import anthropic

    return anthropic.Anthropic(**anthropic_options(base_url, kwargs))


def async_client(base_url: str, kwargs: dict[str, Any]) -> anthropic.AsyncAnthropic:
    """A real `anthropic.AsyncAnthropic` client for the server at `base_url`."""
    import anthropic

    return anthropic.AsyncAnthropic(**anthropic_options(base_url, kwargs))


def error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> Response:
    """The server's own error in Anthropic's shape (`param` and `code` are OpenAI's: not sent)."""
    return error_response(status, _error_body(status, message, None))


def _error_body(status: int, message: str, type: str | None) -> dict[str, Any]:
    kind = type or _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else None)
    return {"type": "error", "error": {"type": kind or "invalid_request_error", "message": message}}


def _input_messages(request: RecordedRequest) -> list[Any]:
    """The request's messages with its `system` prompt first, to count their words."""
    body = request.body or {}
    system = body.get("system")
    messages = body.get("messages")
    messages = list(messages) if isinstance(messages, list) else []
    if isinstance(system, (str, list)):  # text, or text blocks
        messages.insert(0, {"role": "system", "content": system})
    return messages


def _message(
    request: RecordedRequest,
    ids: Ids,
    content: list[dict[str, Any]],
    stop_reason: str,
    output: str,
    prompt: int | None,
    completion: int | None,
) -> Response:
    input_tokens, output_tokens = usage(_input_messages(request), output, prompt, completion)
    message = {
        "id": f"msg_scripted_{next(ids.completions)}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
    return Response(200, json.dumps(message).encode())


def _tool_input(reply: ToolCall) -> dict[str, Any] | Response:
    """A tool call's arguments as a `tool_use` block's `input`, or the 500 saying it is none."""
    try:
        arguments = json.loads(reply.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):  # Anthropic's `input` is always an object
        return error(
            500,
            "scripted server: a tool_use block's input is a JSON object; "
            f"Reply.tool_call({reply.name!r}) has {reply.arguments[:60]!r}",
        )
    return arguments


def _refused(request: RecordedRequest) -> Response | None:
    """The 400 the Messages API gives a prefilled assistant turn that ends with whitespace."""
    messages = (request.body or {}).get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    content = last.get("content")
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        content = content[-1].get("text")
    if isinstance(content, str) and content != content.rstrip():
        return error(400, "messages: final assistant content cannot end with trailing whitespace")
    return None


def answer(reply: Reply, request: RecordedRequest, ids: Ids) -> Response:
    """A reply that carries an answer, as the Messages API sends it."""
    refused = _refused(request)
    if refused is not None:
        return refused
    if isinstance(reply, Text):
        stop = _STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
        blocks = [{"type": "text", "text": reply.content, "citations": None}]
        return _message(
            request, ids, blocks, stop, reply.content, reply.prompt_tokens, reply.completion_tokens
        )
    if isinstance(reply, ToolCall):
        arguments = _tool_input(reply)
        if isinstance(arguments, Response):
            return arguments
        block = {
            "type": "tool_use",
            "id": f"toolu_scripted_{next(ids.tool_calls)}",
            "name": reply.name,
            "input": arguments,
        }
        return _message(
            request,
            ids,
            [block],
            "tool_use",
            reply.arguments,
            reply.prompt_tokens,
            reply.completion_tokens,
        )
    if isinstance(reply, Error):
        body = _error_body(reply.status, reply.message, reply.type)
        return error_response(reply.status, body, reply.retry_after)
    if isinstance(reply, NoChoices):
        return _message(request, ids, [], "end_turn", "", None, 0)
    if isinstance(reply, Malformed):
        return _openai_wire.answer(reply, request, ids)
    raise TypeError(f"not a reply that carries an answer: {reply!r}")  # pragma: no cover


def _event(data: dict[str, Any], role: Role = "chunk") -> Event:
    return sse(data, str(data["type"]), role)


def stream(reply: Reply, request: RecordedRequest, ids: Ids) -> Streamed | Response:
    """A reply that carries an answer, streamed as the Messages API streams it."""
    refused = _refused(request)
    if refused is not None:
        return refused
    if isinstance(reply, Text):
        output, prompt, completion = reply.content, reply.prompt_tokens, reply.completion_tokens
        stop = _STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
        block: dict[str, Any] | None = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in reply.chunks]
    elif isinstance(reply, ToolCall):
        arguments = _tool_input(reply)
        if isinstance(arguments, Response):
            return arguments
        output, prompt, completion = reply.arguments, reply.prompt_tokens, reply.completion_tokens
        stop = "tool_use"
        tool_id = f"toolu_scripted_{next(ids.tool_calls)}"
        block = {"type": "tool_use", "id": tool_id, "name": reply.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in reply.chunks]
    elif isinstance(reply, (NoChoices, Malformed)):
        output, prompt, completion, stop, block, deltas = "", None, 0, "end_turn", None, []
    else:  # pragma: no cover
        raise TypeError(f"not a reply that streams: {reply!r}")
    input_tokens, output_tokens = usage(_input_messages(request), output, prompt, completion)
    message: dict[str, Any] = {
        "id": f"msg_scripted_{next(ids.completions)}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": min(1, output_tokens)},
    }
    events = [_event({"type": "message_start", "message": message}, "open")]
    if isinstance(reply, Malformed):  # a stream whose first chunk is not JSON
        bad = Event('{"type": "content_block_start", "index": 0, ', "content_block_start")
        return Streamed((events[0], bad), fault="malformed")
    if block is not None:
        events.append(
            _event({"type": "content_block_start", "index": 0, "content_block": block}, "open")
        )
        events.append(_event({"type": "ping"}, "open"))
        events += [_event({"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas]
        events.append(_event({"type": "content_block_stop", "index": 0}, "close"))
    finish = {"stop_reason": stop, "stop_sequence": None}
    events.append(
        _event(
            {"type": "message_delta", "delta": finish, "usage": {"output_tokens": output_tokens}},
            "close",
        )
    )
    events.append(_event({"type": "message_stop"}, "close"))
    return Streamed(tuple(events))
