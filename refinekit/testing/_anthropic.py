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
- `Reply.delay`, `Reply.truncated`: the same, of the rendered reply; `Reply.hang`,
  `Reply.disconnect`, `Reply.malformed` and `Reply.raw` are sent as they are.

Every rendered `Message` carries `usage` (`input_tokens`, `output_tokens`), counted as the
chat completions' usage is unless the reply gives `prompt_tokens` / `completion_tokens`.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ._server import (
    _API_KEY,
    RecordedRequest,
    Reply,
    _Delay,
    _Error,
    _Hold,
    _Ids,
    _NoChoices,
    _Response,
    _Text,
    _ToolCall,
    _Truncated,
    _usage,
)

if TYPE_CHECKING:
    import anthropic

__all__ = ["MESSAGES_PATH", "anthropic_options", "is_messages", "render", "shaped"]

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


class _Rendered(_Response):
    """A response already in Anthropic's shape (or sent as given): `shaped` leaves it be."""


def is_messages(path: str) -> bool:
    """Whether a request path is the Messages API's (`/v1/messages`, query aside)."""
    return path.partition("?")[0] == MESSAGES_PATH


def anthropic_options(base_url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic client's options for the server at `base_url` (which ends in `/v1`)."""
    return {
        "base_url": base_url.removesuffix("/v1"),
        "api_key": _API_KEY,
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


def _error_body(status: int, message: str, kind: str | None = None) -> bytes:
    kind = kind or _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else None)
    body = {"type": "error", "error": {"type": kind or "invalid_request_error", "message": message}}
    return json.dumps(body).encode()


def shaped(response: _Response | _Hold | None) -> _Response | _Hold | None:
    """A response of the server's own (an OpenAI-shaped error) in Anthropic's shape.

    A response `render` made is sent as it is.
    """
    if not isinstance(response, _Response) or isinstance(response, _Rendered):
        return response
    try:
        body = json.loads(response.body)
    except ValueError:
        return response
    error = body.get("error") if isinstance(body, dict) else None
    if response.status < 400 or not isinstance(error, dict):
        return response
    message = str(error.get("message") or "")
    return _Rendered(response.status, _error_body(response.status, message), response.headers)


def _input_text(request: RecordedRequest) -> RecordedRequest:
    """The request with its `system` prompt as a first message, to count its words."""
    body = dict(request.body or {})
    system = body.get("system")
    messages = body.get("messages")
    messages = list(messages) if isinstance(messages, list) else []
    if isinstance(system, (str, list)):  # text, or text blocks
        messages.insert(0, {"role": "system", "content": system})
    body["messages"] = messages
    return RecordedRequest(request.method, request.path, request.headers, body, request.model)


def _message(
    request: RecordedRequest,
    ids: _Ids,
    content: list[dict[str, Any]],
    stop_reason: str,
    output: str,
    prompt: int | None,
    completion: int | None,
) -> _Rendered:
    usage = _usage(_input_text(request), output, prompt, completion)
    message = {
        "id": f"msg_scripted_{next(ids.completions)}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        },
    }
    return _Rendered(200, json.dumps(message).encode())


def render(reply: Reply, request: RecordedRequest, ids: _Ids) -> _Response | _Hold | None:
    """A scripted reply as the Messages API answers it (see the module's docstring)."""
    if isinstance(reply, _Text):
        stop = _STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
        blocks = [{"type": "text", "text": reply.content, "citations": None}]
        return _message(
            request, ids, blocks, stop, reply.content, reply.prompt_tokens, reply.completion_tokens
        )
    if isinstance(reply, _ToolCall):
        try:
            arguments = json.loads(reply.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):  # Anthropic's `input` is always an object
            return _Rendered(
                500,
                _error_body(
                    500,
                    "scripted server: a tool_use block's input is a JSON object; "
                    f"Reply.tool_call({reply.name!r}) has {reply.arguments[:60]!r}",
                ),
            )
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
    if isinstance(reply, _Error):
        given = None if reply.type == _openai_default(reply.status) else reply.type
        headers = (("retry-after", reply.retry_after),) if reply.retry_after is not None else ()
        return _Rendered(reply.status, _error_body(reply.status, reply.message, given), headers)
    if isinstance(reply, _NoChoices):
        return _message(request, ids, [], "end_turn", "", None, 0)
    if isinstance(reply, _Delay):
        time.sleep(reply.seconds)
        return render(reply.then, request, ids)
    if isinstance(reply, _Truncated):
        response = render(reply.then, request, ids)
        if not isinstance(response, _Response):
            return response
        cut = (len(response.body) if response.cut_at is None else response.cut_at) // 2
        return _Rendered(response.status, response.body, response.headers, cut)
    response = reply._respond(request, ids)  # hang, disconnect, malformed, raw: as they are
    if isinstance(response, _Response):
        return _Rendered(response.status, response.body, response.headers, response.cut_at)
    return response


def _openai_default(status: int) -> str:
    """The error type `Reply.error` picks for a status when none is given (OpenAI's)."""
    from ._server import _ERROR_TYPES as OPENAI_TYPES

    if status >= 500:
        return "server_error"
    return OPENAI_TYPES.get(status, "invalid_request_error")
