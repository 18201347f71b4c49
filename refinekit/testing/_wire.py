"""What the scripted server's two wire formats share: responses, ids, usage, and the faults.

A wire format (`_openai_wire`, `_anthropic_wire`) renders the replies that carry an answer
(`Text`, `ToolCall`, `Error`, `Malformed`, `NoChoices`) and the server's own errors in its
shape, whole or as a stream of server-sent events (a `Streamed`: its events, each an
opening, a chunk of the reply or a closing one); `render` here does the rest the same for
both: a `Delay` waits and renders what follows, a `Truncated` cuts its reply's body in half
(a stream: drops the connection after half its chunks), a `Hang` holds the connection, a
`Disconnect` drops it, a `Raw` is sent as given, and the streamed faults (`after=N`) cut,
hold or spoil a stream after its Nth chunk. `answer_from` takes a request's reply from the
scripts and renders it: for a request sent directly, or one carried by a batch.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from ._script import (
    Delay,
    Disconnect,
    Error,
    Hang,
    Malformed,
    Raw,
    RecordedRequest,
    Reply,
    Scripts,
    Truncated,
    as_reply,
)

__all__ = [
    "HOLD",
    "Event",
    "Hold",
    "Ids",
    "Response",
    "Streamed",
    "Wire",
    "answer_from",
    "error_response",
    "is_streamed",
    "render",
    "sse",
    "usage",
    "words",
]

API_KEY = "scripted-key"
"""The key the server's own clients send (it checks none)."""


@dataclass(frozen=True)
class Response:
    """An HTTP response to send."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    cut_at: int | None = None  # send only this many bytes of the body, then hang up


@dataclass(frozen=True)
class Event:
    """One server-sent event of a stream: `event: <name>` (when named) and `data: <data>`."""

    data: str
    name: str | None = None
    role: Literal["open", "chunk", "close"] = "chunk"  # a chunk is one scripted piece

    def encode(self) -> bytes:
        """The event as sent, ending in its blank line."""
        head = f"event: {self.name}\n" if self.name is not None else ""
        return f"{head}data: {self.data}\n\n".encode()


@dataclass(frozen=True)
class Streamed:
    """A streamed response: HTTP 200, `text/event-stream`, its events, and how it ends."""

    events: tuple[Event, ...]
    end: Literal["end", "disconnect", "hang"] = "end"
    fault: str | None = None
    request: RecordedRequest | None = None  # the request it answers (set by the server)
    scripted: int | None = None  # the chunks of the whole stream, when a fault cut it

    @property
    def chunks(self) -> int:
        """The scripted chunks of the whole stream (a fault may cut some)."""
        if self.scripted is not None:
            return self.scripted
        return sum(event.role == "chunk" for event in self.events)


class Hold:
    """What `Reply.hang()` answers: no response; the connection is held until the client leaves."""


HOLD = Hold()


@dataclass(frozen=True)
class Ids:
    """The server's counters for the ids of completions and tool calls."""

    completions: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    tool_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))


def error_response(status: int, body: dict[str, Any], retry_after: str | None = None) -> Response:
    """An error response: its JSON body, and the `retry-after` header when one is given."""
    headers = (("retry-after", retry_after),) if retry_after is not None else ()
    return Response(status, json.dumps(body).encode(), headers)


class Wire(Protocol):
    """A wire format: how a reply that carries an answer, and an error, are sent."""

    def answer(self, reply: Reply, request: RecordedRequest, ids: Ids) -> Response:
        """The response for a `Text`, `ToolCall`, `Error`, `Malformed` or `NoChoices`."""
        ...

    def stream(self, reply: Reply, request: RecordedRequest, ids: Ids) -> Streamed | Response:
        """The stream of a `Text`, `ToolCall`, `Malformed` or `NoChoices` (or an error)."""
        ...

    def error(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> Response:
        """The server's own error (no script, no route, a bad body) in this format."""
        ...


Rendered = Response | Streamed | Hold | None
"""What the server sends: a response, a stream, nothing yet (`HOLD`), or nothing (None)."""


def is_streamed(request: RecordedRequest) -> bool:
    """Whether the request asks for a stream (`"stream": true`)."""
    return (request.body or {}).get("stream") is True


def render(wire: Wire, reply: Reply, request: RecordedRequest, ids: Ids) -> Rendered:
    """What to send for `reply` (None: close the connection; `HOLD`: hold it).

    A request with `"stream": true` gets its reply streamed; a streamed fault (`after=`)
    answering a request that is not streamed is the server's 500, naming it.
    """
    streamed = is_streamed(request)
    if isinstance(reply, Delay):
        time.sleep(reply.seconds)
        return render(wire, reply.then, request, ids)
    if isinstance(reply, Truncated):
        response = render(wire, reply.then, request, ids)
        if isinstance(response, Streamed):  # a stream cut: half its chunks, then hang up
            return _cut(response, "disconnect", response.chunks // 2)
        if not isinstance(response, Response):  # nothing to cut: it sends no response
            return response
        cut = (len(response.body) if response.cut_at is None else response.cut_at) // 2
        return Response(response.status, response.body, response.headers, cut)
    if isinstance(reply, (Hang, Disconnect, Malformed)) and reply.then is not None:
        if not streamed:
            kind = type(reply).__name__.lower()
            return wire.error(
                500,
                f"scripted server: Reply.{kind}(after={reply.after}, ...) is a fault of a "
                'stream, and this request did not ask for one ("stream": true)',
            )
        stream = wire.stream(reply.then, request, ids)
        if not isinstance(stream, Streamed):  # the reply cannot be sent: the wire's error
            return stream
        fault = "hang" if isinstance(reply, Hang) else "disconnect"
        return _cut(stream, "malformed" if isinstance(reply, Malformed) else fault, reply.after)
    if isinstance(reply, Hang):
        return HOLD
    if isinstance(reply, Disconnect):
        return None
    if isinstance(reply, Raw):
        return Response(reply.status, reply.body, reply.headers)
    if streamed and not isinstance(reply, Error):  # an error is sent before any stream
        return wire.stream(reply, request, ids)
    return wire.answer(reply, request, ids)


def _cut(stream: Streamed, fault: str, after: int | None) -> Streamed:
    """A stream with a fault after its `after`th chunk.

    Cut there (`disconnect`), held there (`hang`), or with the next chunk's data cut short
    (`malformed`, the rest sent as scripted).
    """
    after = after or 0
    stream = replace(stream, scripted=stream.chunks)
    events = list(stream.events)
    seen = 0
    for i, event in enumerate(events):
        if seen == after and event.role != "open":  # the first event past the `after`th chunk
            if fault == "malformed":
                events[i] = replace(event, data=event.data[: len(event.data) // 2])
                return replace(stream, events=tuple(events), fault=fault)
            end: Literal["disconnect", "hang"] = "hang" if fault == "hang" else "disconnect"
            return replace(stream, events=tuple(events[:i]), end=end, fault=fault)
        seen += event.role == "chunk"
    end = "hang" if fault == "hang" else "disconnect"
    return replace(stream, end=end, fault=fault)


Role = Literal["open", "chunk", "close"]


def sse(data: Any, name: str | None = None, role: Role = "chunk") -> Event:
    """An event carrying `data` as JSON."""
    return Event(json.dumps(data), name, role)


def words(text: str | None) -> int:
    """A text's words: the scripted server's token count."""
    return len(text.split()) if text else 0


def usage(
    messages: Any, output: str, prompt: int | None, completion: int | None
) -> tuple[int, int]:
    """(prompt, completion) tokens: the given counts, else words counted.

    The prompt's default is the total words of the messages' text, plus one per message; the
    completion's is the words of `output` (at least 1).
    """
    if prompt is None:
        prompt = 0
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            parts = content if isinstance(content, list) else [{"text": content}]
            texts = [part.get("text") for part in parts if isinstance(part, dict)]
            prompt += 1 + sum(words(text) for text in texts if isinstance(text, str))
    if completion is None:
        completion = max(1, words(output))
    return prompt, completion


def answer_from(
    scripts: Scripts, wire: Wire, request: RecordedRequest, ids: Ids, *, batch: bool = False
) -> Rendered:
    """What to send for a request, from the script of its model (its next reply).

    No script, no reply left or a callable reply that raised is the server's error, in the
    request's wire format. `batch`: the request is an item of a batch, whose answer is a
    response, at once: a `Reply.delay` does not wait, and a reply that sends no response
    (`hang`, `disconnect`, `truncated`, a streamed fault) or a streamed request is the
    server's error.
    """
    if request.model is None:
        return wire.error(400, "scripted server: the request has no model", param="model")
    reply, number, scripted = scripts.next(request.model)
    if scripted is None:
        return wire.error(
            404,
            f"scripted server: no script for model {request.model!r}",
            param="model",
            code="model_not_found",
        )
    if reply is None:
        return wire.error(
            500,
            f"scripted server: no reply left for model {request.model!r} "
            f"({scripted} scripted, this is request {number})",
        )
    try:
        if not isinstance(reply, (str, Reply)):
            reply = reply(request)
        made = as_reply(reply)
        if batch:
            while isinstance(made, Delay):
                made = made.then
            if is_streamed(request):
                return wire.error(400, "scripted server: a request in a batch cannot stream")
            stops = isinstance(made, (Hang, Disconnect, Malformed)) and made.then is not None
            if stops or isinstance(made, (Hang, Disconnect, Truncated)):
                kind = type(made).__name__.lower()
                return wire.error(
                    500,
                    f"scripted server: Reply.{kind}() sends no response, so it cannot answer "
                    "a request in a batch: script a text, a tool call or an error",
                )
        return render(wire, made, request, ids)
    except Exception as exc:  # a bug in a test's callable: fail the request loudly
        return wire.error(
            500,
            f"scripted server: reply {number} for model {request.model!r} raised "
            f"{type(exc).__name__}: {exc}",
        )
