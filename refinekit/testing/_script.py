"""The scripted server's language: the `Reply` values a test scripts, and the scripts per model.

What a reply *is* lives here, apart from how it is sent: `refinekit.testing._openai_wire`
renders a reply as a chat completion, `refinekit.testing._anthropic_wire` as an Anthropic
`Message`, and `refinekit.testing._wire` does what both share (waits, cut bodies, held and
dropped connections). `Scripts` keeps each model's replies and serves them in order.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.numbers import is_number, is_real, shown

__all__ = [
    "Delay",
    "Disconnect",
    "Error",
    "Hang",
    "Malformed",
    "NoChoices",
    "Raw",
    "RecordedRequest",
    "RecordedStream",
    "Reply",
    "ReplyLike",
    "Scripts",
    "Text",
    "ToolCall",
    "Truncated",
    "as_reply",
    "split",
]

_WORDS = re.compile(r"\s*\S+|\s+")  # whitespace-led words: "a b " -> "a", " b", " "


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the scripted server received, as a test sees it.

    Attributes:
        method: The HTTP method, e.g. "POST".
        path: The request path, e.g. "/v1/chat/completions".
        headers: The request headers, names lower-cased; credentials (`authorization`,
            `api-key`, ...) are redacted, e.g. "Bearer ***", so no secret is ever stored.
        body: The parsed JSON body, or None when there was no JSON object.
        model: The body's "model", or None.
        batch_id: The id of the batch that carried it, or None for a request sent directly.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    model: str | None
    batch_id: str | None = None


@dataclass(frozen=True)
class RecordedStream:
    """One streamed reply the scripted server sent (or began to), as a test sees it.

    Attributes:
        request: The request it answered.
        chunks: The reply's chunks: the pieces of its text (or tool call arguments) a whole
            stream sends, each in its own event.
        sent: The chunks written to the connection before the stream ended.
        finished: Whether the whole stream was written, its last event (`data: [DONE]`,
            `message_stop`) included. Written is not read: a short stream fits in the
            socket's buffers before the client reads its first chunk.
        client_closed: Whether the client hung up before the stream's end: noticed between
            two events, or while the stream was held (`Reply.hang(after=...)`).
        fault: The scripted fault that ended it (`"disconnect"`, `"hang"`, `"malformed"`),
            or None.
    """

    request: RecordedRequest
    chunks: int
    sent: int
    finished: bool
    client_closed: bool
    fault: str | None


class Reply:
    """A scripted reply of `ScriptedOpenAI`; build one with a classmethod.

    `Reply.text`, `Reply.tool_call` and `Reply.error` answer at once; `Reply.delay` waits
    first; `Reply.hang`, `Reply.disconnect`, `Reply.truncated`, `Reply.malformed`,
    `Reply.no_choices` and `Reply.raw` are faults of the endpoint or the transport.
    """

    __slots__ = ()

    @classmethod
    def text(
        cls,
        content: str,
        top_logprobs: Mapping[str, float] | None = None,
        *,
        finish_reason: str = "stop",
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        logprobs: bool = True,
        chunks: Sequence[str] | int | None = None,
    ) -> Reply:
        """An assistant message with text content (streamed when the request asks).

        Args:
            content: The assistant's text.
            top_logprobs: Candidate first tokens and their probabilities, e.g.
                `{"Yes": 0.9, "No": 0.1}`, returned as OpenAI logprobs when the request asks
                for them. `content` must start with one of the candidates: that is the
                first token (normally the most probable one).
            finish_reason: The choice's finish reason, e.g. "stop" or "length".
            prompt_tokens: The usage's prompt tokens (default: counted from the request).
            completion_tokens: The usage's completion tokens (default: words in `content`).
            logprobs: False plays an endpoint that ignores a request for logprobs (as some
                OpenAI-compatible servers do): `logprobs` is then always null.
            chunks: How a streamed request gets the content: the pieces (`str`s that join
                to it), or a size (every piece that many characters, the last one shorter).
                Default: whitespace-led words (`"a b"` is `"a"`, `" b"`).

        Returns:
            The reply.

        Raises:
            ValueError: A probability outside (0, 1], probabilities summing above 1, a
                `content` that starts with none of the candidates, or `chunks` that do not
                join to the content (or a size below 1).
        """
        candidates = tuple(sorted((top_logprobs or {}).items(), key=lambda kv: -kv[1]))
        if any(not 0.0 < p <= 1.0 for _, p in candidates):
            raise ValueError(f"top_logprobs probabilities must be in (0, 1]: {top_logprobs}")
        if sum(p for _, p in candidates) > 1.0 + 1e-9:
            raise ValueError(f"top_logprobs probabilities sum above 1: {top_logprobs}")
        if candidates and not any(content.startswith(token) for token, _ in candidates):
            raise ValueError(
                f"content {content[:40]!r} must start with one of the top_logprobs candidates "
                f"{[token for token, _ in candidates]}"
            )
        pieces = split(content, chunks)
        return Text(
            content, candidates, finish_reason, prompt_tokens, completion_tokens, logprobs, pieces
        )

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        chunks: Sequence[str] | int | None = None,
    ) -> Reply:
        """An assistant message calling one function (what instructor's TOOLS mode reads).

        Args:
            name: The function name.
            arguments: The arguments, as a mapping or a JSON string (sent as given).
            prompt_tokens: The usage's prompt tokens (default: counted from the request).
            completion_tokens: The usage's completion tokens (default: words in the
                arguments).
            chunks: How a streamed request gets the arguments' JSON text: as for
                `Reply.text`.

        Returns:
            The reply.

        Raises:
            ValueError: `chunks` that do not join to the arguments' text.
        """
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        return ToolCall(name, args, prompt_tokens, completion_tokens, split(args, chunks))

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        *,
        type: str | None = None,  # the field's name in OpenAI's error body
        code: str | None = None,
        retry_after: float | str | None = None,
    ) -> Reply:
        """An HTTP error with an OpenAI-shaped body, `{"error": {"message", "type", ...}}`.

        Args:
            status: The HTTP status, 400 to 599.
            message: The error message.
            type: The error type (default by status: "invalid_request_error" for 400, 404,
                422 and other 4xx, "authentication_error" 401, "permission_error" 403,
                "rate_limit_error" 429, "server_error" 5xx).
            code: The error code, e.g. "model_not_found".
            retry_after: The `retry-after` header: seconds (a number >= 0), or a `str` sent
                as it is (an HTTP date, or a value a client must survive, such as
                "soon"). Default: "0" for 429, no header for other statuses.

        Returns:
            The reply.

        Raises:
            ValueError: `status` is not an HTTP error status, or `retry_after` is a negative
                or non-finite number.
        """
        if not 400 <= status <= 599:
            raise ValueError(f"an error status is 400 to 599, not {status}")
        if retry_after is None:
            header = "0" if status == 429 else None
        elif isinstance(retry_after, str):
            header = retry_after
        elif is_number(retry_after) and is_real(retry_after) and retry_after >= 0:
            header = f"{retry_after:g}"
        else:
            raise ValueError(f"retry_after is seconds >= 0 or a str, not {shown(retry_after)}")
        return Error(status, message, type, code, header)

    @classmethod
    def delay(cls, seconds: float, then: str | Reply) -> Reply:
        """Wait, then serve another reply: for testing client timeouts and concurrency.

        The wait is real (it blocks the connection's server thread, not the server), so
        keep it short in tests.

        Args:
            seconds: How long to wait, >= 0.
            then: What to serve afterwards: text, or any reply.

        Returns:
            The reply.

        Raises:
            ValueError: `seconds` is negative, infinite, NaN or too large for a float.
        """
        if not is_number(seconds) or not is_real(seconds) or seconds < 0:
            raise ValueError(f"a delay is >= 0 seconds (a finite number), not {shown(seconds)}")
        return Delay(float(seconds), as_reply(then))

    @classmethod
    def hang(cls, *, after: int | None = None, then: str | Reply | None = None) -> Reply:
        """Never answer: hold the connection until the client gives up or the server stops.

        What a stalled endpoint does; the client's own timeout ends the request (give it a
        short one, e.g. `timeout=0.2`). Unlike `Reply.delay`, nothing waits a fixed time:
        the connection's thread returns as soon as the client closes the connection, and
        stopping the server ends every held connection.

        With `after`, a stream that stalls: the first `after` chunks of `then`'s stream are
        sent, then nothing more until the client hangs up (for a streamed request only).

        Args:
            after: The chunks of `then` sent before the stall (0: none, after the stream's
                opening events).
            then: The streamed reply (text, `Reply.text` or `Reply.tool_call`), with `after`.

        Returns:
            The reply.

        Raises:
            ValueError: `after` without `then` (or the reverse), or more chunks than `then` has.
        """
        return Hang(*_stream_fault("hang", after, then))

    @classmethod
    def disconnect(cls, *, after: int | None = None, then: str | Reply | None = None) -> Reply:
        """Close the connection without sending any response.

        With `after`, a stream cut off: the first `after` chunks of `then`'s stream are
        sent, then the connection is closed mid-body (for a streamed request only).

        Args:
            after: The chunks of `then` sent before the connection drops.
            then: The streamed reply (text, `Reply.text` or `Reply.tool_call`), with `after`.

        Returns:
            The reply.

        Raises:
            ValueError: `after` without `then` (or the reverse), or more chunks than `then` has.
        """
        return Disconnect(*_stream_fault("disconnect", after, then))

    @classmethod
    def truncated(cls, then: str | Reply = "a reply cut short") -> Reply:
        """Start a response, then close the connection halfway through its body.

        The status line and the headers of `then`'s response are sent, with a
        `Content-Length` for its whole body, then only the first half of the body.

        Args:
            then: The reply to cut short: text, or any reply that sends a response.

        Returns:
            The reply.
        """
        return Truncated(as_reply(then))

    @classmethod
    def malformed(cls, *, after: int | None = None, then: str | Reply | None = None) -> Reply:
        """HTTP 200, `Content-Type: application/json`, and a body that is not JSON.

        The response is complete (its `Content-Length` is right): the JSON in it is cut
        short. See `Reply.truncated` for a connection that drops mid-body. A streamed
        request gets a stream whose first chunk is not JSON.

        With `after`, a stream with one bad chunk: `then`'s stream, whose chunk after the
        first `after` is not JSON (its data cut short); the rest follows as scripted (for a
        streamed request only).

        Args:
            after: The good chunks of `then` sent before the bad one.
            then: The streamed reply (text, `Reply.text` or `Reply.tool_call`), with `after`.

        Returns:
            The reply.

        Raises:
            ValueError: `after` without `then` (or the reverse), or not fewer chunks than
                `then` has.
        """
        return Malformed(*_stream_fault("malformed", after, then))

    @classmethod
    def no_choices(cls) -> Reply:
        """HTTP 200 and a chat completion with `"choices": []` (and usage).

        What some servers send when a content filter or an overload leaves nothing to return.

        Returns:
            The reply.
        """
        return NoChoices()

    @classmethod
    def raw(
        cls,
        body: bytes | str | Mapping[str, Any] | list[Any],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Any response: a status, a body sent as given, and headers.

        For bodies no other reply sends: a completion missing a field, a `null` message,
        an error body that is not OpenAI's shape.

        Args:
            body: `bytes` (sent as they are), a `str` (sent UTF-8 encoded), or a mapping or
                list (sent as JSON).
            status: The HTTP status, 100 to 599 (not 1xx, 204 or 304, which have no body).
            headers: Response headers; `Content-Type: application/json` unless given.

        Returns:
            The reply.

        Raises:
            ValueError: A status out of range or without a body, or a `str` that cannot be
                encoded (a lone surrogate).
            TypeError: A body of another type.
        """
        if not 200 <= status <= 599 or status in (204, 304):
            raise ValueError(f"a raw reply's status is 200 to 599 (not 204 or 304), not {status}")
        given: object = body  # checked at run time too: tests pass odd values on purpose
        if isinstance(given, bytes):
            data = given
        elif isinstance(given, str):
            try:
                data = given.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"a raw reply's str body must be valid UTF-8: {e}") from None
        elif isinstance(given, (Mapping, list)):
            data = json.dumps(given).encode()
        else:
            kind = type(given).__name__
            raise TypeError(f"a raw reply's body is bytes, a str, a mapping or a list, not {kind}")
        sent = tuple((str(k), str(v)) for k, v in (headers or {}).items())
        return Raw(status, data, sent)


@dataclass(frozen=True)
class Text(Reply):
    """`Reply.text`: an assistant message with text content."""

    content: str
    candidates: tuple[tuple[str, float], ...]
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    with_logprobs: bool
    chunks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCall(Reply):
    """`Reply.tool_call`: an assistant message calling one function."""

    name: str
    arguments: str
    prompt_tokens: int | None
    completion_tokens: int | None
    chunks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Error(Reply):
    """`Reply.error`: an HTTP error; `type` None is the wire's default for the status."""

    status: int
    message: str
    type: str | None
    code: str | None
    retry_after: str | None


@dataclass(frozen=True)
class Delay(Reply):
    """`Reply.delay`: wait, then serve another reply."""

    seconds: float
    then: Reply


@dataclass(frozen=True)
class _Stops(Reply):
    """A reply that stops: at once, or a stream of `then` after `after` chunks."""

    after: int | None = None
    then: Text | ToolCall | None = None


@dataclass(frozen=True)
class Hang(_Stops):
    """`Reply.hang`: never answer; with `after`, stall a stream after that many chunks."""


@dataclass(frozen=True)
class Disconnect(_Stops):
    """`Reply.disconnect`: close the connection without a response, or a stream mid-way."""


@dataclass(frozen=True)
class Truncated(Reply):
    """`Reply.truncated`: another reply's response, cut off halfway through its body."""

    then: Reply


@dataclass(frozen=True)
class Malformed(_Stops):
    """`Reply.malformed`: HTTP 200 and a body that is not JSON; or a stream's bad chunk."""


@dataclass(frozen=True)
class NoChoices(Reply):
    """`Reply.no_choices`: HTTP 200 and a reply with nothing in it."""


@dataclass(frozen=True)
class Raw(Reply):
    """`Reply.raw`: a status, a body and headers, sent as given."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]


ReplyLike = str | Reply | Callable[[RecordedRequest], str | Reply]
"""What a script holds: a text, a reply, or a callable building either from the request."""


def as_reply(reply: str | Reply) -> Reply:
    """A scripted item as a `Reply` (a `str` is `Reply.text`)."""
    if isinstance(reply, Reply):
        return reply
    if isinstance(reply, str):
        return Reply.text(reply)
    raise TypeError(f"a reply is a str or a Reply, not {type(reply).__name__}")


def split(text: str, chunks: Sequence[str] | int | None) -> tuple[str, ...]:
    """A text's streamed pieces (`Reply.text`'s `chunks`): as given, by size, or by words.

    Raises:
        ValueError: Pieces that do not join to the text, or a size below 1.
        TypeError: `chunks` is neither pieces nor a size.
    """
    if chunks is None:
        return tuple(_WORDS.findall(text))
    if isinstance(chunks, int) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ValueError(f"a chunk size is at least 1 character, not {chunks}")
        return tuple(text[i : i + chunks] for i in range(0, len(text), chunks))
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise TypeError(f"chunks are a list of str or a size (an int), not {shown(chunks)}")
    pieces = tuple(chunks)
    if not all(isinstance(piece, str) for piece in pieces):
        raise TypeError(f"chunks are str pieces of the text: {pieces!r}")
    if "".join(pieces) != text:
        raise ValueError(
            f"the chunks {pieces!r} do not join to the text {text[:60]!r}: script pieces that "
            "add up to it"
        )
    return pieces


def _stream_fault(
    fault: str, after: int | None, then: str | Reply | None
) -> tuple[int | None, Text | ToolCall | None]:
    """A streamed fault's (after, then), checked; (None, None) for the fault without a stream."""
    if after is None and then is None:
        return None, None
    if after is None or then is None:
        raise ValueError(
            f"Reply.{fault}(after=..., then=...) streams `then` and fails after `after` chunks: "
            "give both (or neither, for the fault without a stream)"
        )
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after is a number of chunks, 0 or more, not {shown(after)}")
    reply = as_reply(then)
    if not isinstance(reply, (Text, ToolCall)):
        raise ValueError(
            f"Reply.{fault}(after=...) streams a text or a tool call, not {type(reply).__name__}"
        )
    most = len(reply.chunks) - (1 if fault == "malformed" else 0)
    if after > most:
        has = len(reply.chunks)
        raise ValueError(
            f"Reply.{fault}(after={after}) needs a reply of more chunks: it has {has} "
            f"({reply.chunks[:5]!r}...); script chunks=[...] to choose them"
        )
    return after, reply


class Scripts:
    """Each model's scripted replies, served in order, one per request (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[ReplyLike]] = {}
        self._forever: dict[str, list[ReplyLike]] = {}  # served in turn once a script is done
        self._served: dict[str, int] = {}

    def add(self, model: str, replies: ReplyLike | Iterable[ReplyLike], times: int | None) -> None:
        """Append replies to a model's script (`ScriptedOpenAI.script` documents the rules)."""
        if isinstance(replies, (str, Reply)) or callable(replies):
            items: list[ReplyLike] = [replies]
        else:
            items = list(replies)
        for item in items:
            if not (isinstance(item, (str, Reply)) or callable(item)):
                raise TypeError(f"a reply is a str, a Reply or a callable, not {item!r}")
        if times is not None and (type(times) is not int or times < 1):  # not a bool either
            raise ValueError(f"times is a whole number of at least 1, or None, not {times!r}")
        if times is None and not items:
            raise ValueError("times=None repeats the replies for ever: give at least one")
        with self._lock:
            if model in self._forever:
                raise ValueError(
                    f"the script of model {model!r} already repeats for ever: nothing after it "
                    "would be served (reset() clears the scripts)"
                )
            if times is None:
                self._scripts.setdefault(model, [])
                self._forever[model] = items
            else:
                self._scripts.setdefault(model, []).extend(items * times)

    def clear(self) -> None:
        """Forget every script."""
        with self._lock:
            self._scripts.clear()
            self._forever.clear()
            self._served.clear()

    def next(self, model: str) -> tuple[ReplyLike | None, int, int | None]:
        """The model's next reply: (reply, its number from 1, the script's length).

        The reply is None when the model has no script (length None) or none is left.
        """
        with self._lock:
            script = self._scripts.get(model)
            forever = self._forever.get(model)
            served = self._served.get(model, 0)
            if script is not None:
                self._served[model] = served + 1
        if script is None:
            return None, served + 1, None
        if served < len(script):
            return script[served], served + 1, len(script)
        if forever:
            return forever[(served - len(script)) % len(forever)], served + 1, len(script)
        return None, served + 1, len(script)
