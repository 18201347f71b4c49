"""What the scripted server's two wire formats share: responses, ids, usage, and the faults.

A wire format (`_openai_wire`, `_anthropic_wire`) renders the replies that carry an answer
(`Text`, `ToolCall`, `Error`, `Malformed`, `NoChoices`) and the server's own errors in its
shape; `render` here does the rest the same for both: a `Delay` waits and renders what
follows, a `Truncated` cuts its reply's body in half, a `Hang` holds the connection, a
`Disconnect` drops it, a `Raw` is sent as given.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._script import Delay, Disconnect, Hang, Raw, RecordedRequest, Reply, Truncated

__all__ = ["HOLD", "Hold", "Ids", "Response", "Wire", "render", "usage", "words"]

API_KEY = "scripted-key"
"""The key the server's own clients send (it checks none)."""


@dataclass(frozen=True)
class Response:
    """An HTTP response to send."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    cut_at: int | None = None  # send only this many bytes of the body, then hang up


class Hold:
    """What `Reply.hang()` answers: no response; the connection is held until the client leaves."""


HOLD = Hold()


@dataclass(frozen=True)
class Ids:
    """The server's counters for the ids of completions and tool calls."""

    completions: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    tool_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))


class Wire(Protocol):
    """A wire format: how a reply that carries an answer, and an error, are sent."""

    def answer(self, reply: Reply, request: RecordedRequest, ids: Ids) -> Response:
        """The response for a `Text`, `ToolCall`, `Error`, `Malformed` or `NoChoices`."""
        ...

    def error(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> Response:
        """The server's own error (no script, no route, a bad body) in this format."""
        ...


def render(wire: Wire, reply: Reply, request: RecordedRequest, ids: Ids) -> Response | Hold | None:
    """The response to send for `reply` (None: close the connection; `HOLD`: hold it)."""
    if isinstance(reply, Delay):
        time.sleep(reply.seconds)
        return render(wire, reply.then, request, ids)
    if isinstance(reply, Truncated):
        response = render(wire, reply.then, request, ids)
        if not isinstance(response, Response):  # nothing to cut: it sends no response
            return response
        cut = (len(response.body) if response.cut_at is None else response.cut_at) // 2
        return Response(response.status, response.body, response.headers, cut)
    if isinstance(reply, Hang):
        return HOLD
    if isinstance(reply, Disconnect):
        return None
    if isinstance(reply, Raw):
        return Response(reply.status, reply.body, reply.headers)
    return wire.answer(reply, request, ids)


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
