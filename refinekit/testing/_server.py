"""`ScriptedOpenAI`: a real OpenAI-compatible HTTP server on 127.0.0.1, answering from a script."""

from __future__ import annotations

import abc
import contextlib
import itertools
import json
import math
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._numbers import is_number, is_real, shown

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = ["RecordedRequest", "Reply", "ScriptedOpenAI"]

_API_KEY = "scripted-key"
_CHAT_PATH = "/v1/chat/completions"
_MESSAGES_PATH = "/v1/messages"  # Anthropic's Messages API: refinekit/testing/_anthropic.py
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_CHUNKS = re.compile(r"\s*\S+|\s+")  # whitespace-preserving tokens: "a b " -> "a", " b", " "


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
    """

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    model: str | None


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    cut_at: int | None = None  # send only this many bytes of the body, then hang up


class _Hold:
    """What `Reply.hang()` answers: no response; the connection is held until the client leaves."""


_HOLD = _Hold()


@dataclass(frozen=True)
class _Ids:
    completions: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    tool_calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))


class Reply(abc.ABC):
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
    ) -> Reply:
        """An assistant message with text content.

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

        Returns:
            The reply.

        Raises:
            ValueError: A probability outside (0, 1], probabilities summing above 1, or a
                `content` that starts with none of the candidates.
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
        return _Text(content, candidates, finish_reason, prompt_tokens, completion_tokens, logprobs)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> Reply:
        """An assistant message calling one function (what instructor's TOOLS mode reads).

        Args:
            name: The function name.
            arguments: The arguments, as a mapping or a JSON string (sent as given).
            prompt_tokens: The usage's prompt tokens (default: counted from the request).
            completion_tokens: The usage's completion tokens (default: words in the
                arguments).

        Returns:
            The reply.
        """
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        return _ToolCall(name, args, prompt_tokens, completion_tokens)

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
        default = "server_error" if status >= 500 else _ERROR_TYPES.get(status)
        return _Error(status, message, type or default or "invalid_request_error", code, header)

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
        return _Delay(float(seconds), _as_reply(then))

    @classmethod
    def hang(cls) -> Reply:
        """Never answer: hold the connection until the client gives up or the server stops.

        What a stalled endpoint does; the client's own timeout ends the request (give it a
        short one, e.g. `timeout=0.2`). Unlike `Reply.delay`, nothing waits a fixed time:
        the connection's thread returns as soon as the client closes the connection, and
        stopping the server ends every held connection.

        Returns:
            The reply.
        """
        return _Hang()

    @classmethod
    def disconnect(cls) -> Reply:
        """Close the connection without sending any response.

        Returns:
            The reply.
        """
        return _Disconnect()

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
        return _Truncated(_as_reply(then))

    @classmethod
    def malformed(cls) -> Reply:
        """HTTP 200, `Content-Type: application/json`, and a body that is not JSON.

        The response is complete (its `Content-Length` is right): the JSON in it is cut
        short. See `Reply.truncated` for a connection that drops mid-body.

        Returns:
            The reply.
        """
        return _Malformed()

    @classmethod
    def no_choices(cls) -> Reply:
        """HTTP 200 and a chat completion with `"choices": []` (and usage).

        What some servers send when a content filter or an overload leaves nothing to return.

        Returns:
            The reply.
        """
        return _NoChoices()

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
        return _Raw(_Response(status, data, sent))

    @abc.abstractmethod
    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response | _Hold | None:
        """The HTTP response to send (None: close the connection; `_HOLD`: hold it)."""


@dataclass(frozen=True)
class _Text(Reply):
    content: str
    candidates: tuple[tuple[str, float], ...]
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    with_logprobs: bool

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        message = {"role": "assistant", "content": self.content, "refusal": None}
        body = request.body or {}
        asked = bool(body.get("logprobs")) and self.with_logprobs
        logprobs = _logprobs(self.content, self.candidates, body) if asked else None
        usage = _usage(request, self.content, self.prompt_tokens, self.completion_tokens)
        return _completion(request, ids, message, logprobs, self.finish_reason, usage)


@dataclass(frozen=True)
class _ToolCall(Reply):
    name: str
    arguments: str
    prompt_tokens: int | None
    completion_tokens: int | None

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        call_id = f"call_{next(ids.tool_calls)}"
        function = {"name": self.name, "arguments": self.arguments}
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
        usage = _usage(request, self.arguments, self.prompt_tokens, self.completion_tokens)
        return _completion(request, ids, message, None, "tool_calls", usage)


@dataclass(frozen=True)
class _Error(Reply):
    status: int
    message: str
    type: str
    code: str | None
    retry_after: str | None

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        return _error(
            self.status, self.message, self.type, code=self.code, retry_after=self.retry_after
        )


@dataclass(frozen=True)
class _Delay(Reply):
    seconds: float
    then: Reply

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response | _Hold | None:
        time.sleep(self.seconds)
        return self.then._respond(request, ids)


@dataclass(frozen=True)
class _Hang(Reply):
    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Hold:
        return _HOLD


@dataclass(frozen=True)
class _Disconnect(Reply):
    def _respond(self, request: RecordedRequest, ids: _Ids) -> None:
        return None


@dataclass(frozen=True)
class _Truncated(Reply):
    then: Reply

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response | _Hold | None:
        response = self.then._respond(request, ids)
        if not isinstance(response, _Response):  # nothing to cut: it sends no response
            return response
        cut = (len(response.body) if response.cut_at is None else response.cut_at) // 2
        return _Response(response.status, response.body, response.headers, cut)


@dataclass(frozen=True)
class _Malformed(Reply):
    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        return _Response(200, b'{"id": "chatcmpl-scripted", "choices": [{"message": ')


@dataclass(frozen=True)
class _NoChoices(Reply):
    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        usage = _usage(request, "", None, 0)
        completion = {
            "id": f"chatcmpl-scripted-{next(ids.completions)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [],
            "usage": usage,
            "system_fingerprint": None,
        }
        return _Response(200, json.dumps(completion).encode())


@dataclass(frozen=True)
class _Raw(Reply):
    response: _Response

    def _respond(self, request: RecordedRequest, ids: _Ids) -> _Response:
        return self.response


_ReplyLike = str | Reply | Callable[[RecordedRequest], str | Reply]


def _as_reply(reply: str | Reply) -> Reply:
    if isinstance(reply, Reply):
        return reply
    if isinstance(reply, str):
        return Reply.text(reply)
    raise TypeError(f"a reply is a str or a Reply, not {type(reply).__name__}")


def _render(reply: Reply, request: RecordedRequest, ids: _Ids) -> _Response | _Hold | None:
    """The reply's response: a chat completion, or an Anthropic `Message` on `/v1/messages`."""
    if request.path.partition("?")[0] == _MESSAGES_PATH:
        from . import _anthropic

        return _anthropic.render(reply, request, ids)
    return reply._respond(request, ids)


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _usage(
    request: RecordedRequest, output: str, prompt: int | None, completion: int | None
) -> dict[str, int]:
    if prompt is None:  # total words of the messages' text, plus one per message
        messages = (request.body or {}).get("messages")
        prompt = 0
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            parts = content if isinstance(content, list) else [{"text": content}]
            texts = [part.get("text") for part in parts if isinstance(part, dict)]
            prompt += 1 + sum(_words(text) for text in texts if isinstance(text, str))
    if completion is None:
        completion = max(1, _words(output))
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
    ids: _Ids,
    message: dict[str, Any],
    logprobs: dict[str, Any] | None,
    finish_reason: str,
    usage: dict[str, int],
) -> _Response:
    completion = {
        "id": f"chatcmpl-scripted-{next(ids.completions)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
        ],
        "usage": usage,
        "system_fingerprint": None,
    }
    return _Response(200, json.dumps(completion).encode())


def _error(
    status: int,
    message: str,
    type: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
    retry_after: str | None = None,
) -> _Response:
    error_type = type or ("server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    headers = (("retry-after", retry_after),) if retry_after is not None else ()
    return _Response(status, json.dumps(body).encode(), headers)


def _redact(name: str, value: str) -> str:
    if name not in _SECRET_HEADERS:
        return value
    scheme, _, secret = value.partition(" ")
    return f"{scheme} ***" if secret and name.endswith("authorization") else "***"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai client's connection pool expects
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean: no access log."""

    def _serve(self) -> None:
        scripted = self.server.scripted
        with scripted._lock:
            scripted._in_flight += 1
        self._in_flight = True
        try:
            self._answer()
        finally:
            self._answered()

    def _answered(self) -> None:
        """Count the request out of `in_flight`, once.

        Called before a response starts (so a client that has its reply never sees its
        request still counted), or after a held connection's hang-up.
        """
        if self._in_flight:
            self._in_flight = False
            scripted = self.server.scripted
            with scripted._lock:
                scripted._in_flight -= 1

    def _answer(self) -> None:
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0 or "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.close_connection = True  # can't find the end of the body: don't reuse
            response: _Response | _Hold | None = _error(
                400, "scripted server: send a Content-Length"
            )
        else:
            raw = self.rfile.read(length)
            headers = {k.lower(): _redact(k.lower(), v) for k, v in self.headers.items()}
            response = self.server.scripted._dispatch(self.command, self.path, headers, raw)
            if self.path.partition("?")[0] == _MESSAGES_PATH:  # errors in Anthropic's shape
                from ._anthropic import shaped

                response = shaped(response)
        if response is None:  # Reply.disconnect()
            self.close_connection = True
            return
        if isinstance(response, _Hold):  # Reply.hang()
            self.close_connection = True
            self._hold()
            return
        self._answered()
        try:
            self.send_response(response.status)
            named = {name.lower() for name, _ in response.headers}
            default = () if "content-type" in named else (("Content-Type", "application/json"),)
            for name, value in (*default, *response.headers):
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if response.cut_at is None:
                self.wfile.write(response.body)
            else:  # Reply.truncated(): hang up mid-body
                self.wfile.write(response.body[: response.cut_at])
                self.wfile.flush()
                self.close_connection = True
        except OSError:  # the client gave up (e.g. timed out during a Reply.delay)
            self.close_connection = True

    def _hold(self) -> None:
        """Wait, sending nothing, until the client closes the connection or the server stops.

        Stopping the server shuts every connection down, which wakes this wait as well.
        """
        while True:
            readable, _, _ = select.select([self.connection], [], [], 1.0)
            if readable:  # the client hung up (or sent something: it gets no answer either)
                return

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _HTTPServer(ThreadingHTTPServer):
    """A threading server that tracks its connections, so stopping leaves no thread behind."""

    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, scripted: ScriptedOpenAI) -> None:
        self.scripted = scripted
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup of the host (no network but loopback)."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.socket.getsockname()[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve one connection in its own (tracked) thread."""
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name="ScriptedOpenAI-connection",
            daemon=True,
        )
        with self._lock:
            self._connections[request] = thread
        thread.start()

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._connections.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Hang up every open (keep-alive) connection and wait for its thread."""
        with self._lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for _, thread in connections:
            thread.join()


class ScriptedOpenAI:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

    It speaks the Chat Completions API (`POST /v1/chat/completions`), so the real `openai`
    client, sync or async, and `instructor` work against it unchanged. Each model name has
    its own script of replies, served in order; every request is recorded::

        with ScriptedOpenAI() as server:
            server.script("judge", ["Yes", Reply.error(429)])
            client = server.client()
            reply = client.chat.completions.create(model="judge", messages=[...])
            assert server.requests[0].body["messages"] == [...]

    A request for a model with no script gets a 404 (`model_not_found`), a request beyond
    the end of a script a 500, both naming the model, so a test fails loudly instead of
    hanging; `script(model, reply, times=None)` answers every request from then on.
    Streaming is not supported (400).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[_ReplyLike]] = {}
        self._forever: dict[str, list[_ReplyLike]] = {}  # served in turn once a script is done
        self._served: dict[str, int] = {}
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self._ids = _Ids()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def __enter__(self) -> ScriptedOpenAI:
        if self._httpd is not None:
            raise RuntimeError("this ScriptedOpenAI is already running")
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ScriptedOpenAI-{self._httpd.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        thread.join()
        self._httpd = self._thread = None

    async def __aenter__(self) -> ScriptedOpenAI:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)  # blocks for at most one poll interval (50 ms)

    # clients

    @property
    def base_url(self) -> str:
        """The API's base URL, `http://127.0.0.1:<port>/v1` (only while running)."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAI is not running: use it in a `with` block")
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def _client_options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "api_key": _API_KEY,
            "max_retries": 0,
            "timeout": 10.0,
            **kwargs,
        }

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """A real `openai.OpenAI` client pointed at this server, client-side retries off.

        Args:
            **kwargs: Override or add client options, e.g. `max_retries=2`, `timeout=0.2`.

        Returns:
            The client (close it, or use it as a context manager).
        """
        import openai

        return openai.OpenAI(**self._client_options(kwargs))

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """A real `openai.AsyncOpenAI` client pointed at this server, client-side retries off.

        Args:
            **kwargs: Override or add client options, e.g. `max_retries=2`, `timeout=0.2`.

        Returns:
            The client (close it, or use it as an async context manager).
        """
        import openai

        return openai.AsyncOpenAI(**self._client_options(kwargs))

    def anthropic_client(self, **kwargs: Any) -> anthropic.Anthropic:
        """A real `anthropic.Anthropic` client pointed at this server, client-side retries off.

        Its requests go to `POST /v1/messages` and are answered from the same scripts, as
        Anthropic `Message`s (see docs/scripted_server.md). Needs the `anthropic` package.

        Args:
            **kwargs: Override or add client options, e.g. `max_retries=2`, `timeout=0.2`.

        Returns:
            The client (close it, or use it as a context manager).
        """
        from ._anthropic import client

        return client(self.base_url, kwargs)

    def async_anthropic_client(self, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """A real `anthropic.AsyncAnthropic` client pointed at this server (see above).

        Args:
            **kwargs: Override or add client options, e.g. `max_retries=2`, `timeout=0.2`.

        Returns:
            The client (close it, or use it as an async context manager).
        """
        from ._anthropic import async_client

        return async_client(self.base_url, kwargs)

    # script and record

    def script(
        self,
        model: str,
        replies: _ReplyLike | Iterable[_ReplyLike],
        *,
        times: int | None = 1,
    ) -> None:
        """Add replies for one model name; they are served in order, one per request.

        Calling it again for the same model appends to that model's script.
        `script("answer", "Paris.", times=None)` answers every request for the model with the
        same reply, however many concurrent tests send: no `["Paris."] * 100`. A callable
        reply, built from the request, serves every request differently.

        Args:
            model: The model name requests carry.
            replies: A reply or replies: a `str` (assistant text), a `Reply`, or a callable
                taking the `RecordedRequest` and returning either.
            times: How many times the replies are served, in turn (`["a", "b"]` twice is
                a, b, a, b); None serves them in turn for ever, after what was scripted
                before, so nothing can be appended after it.

        Raises:
            TypeError: A reply is none of these.
            ValueError: `times` is not a whole number of at least 1 or None; `times=None`
                with no reply; or the model's script already repeats for ever.
        """
        if isinstance(replies, (str, Reply)) or callable(replies):
            items: list[_ReplyLike] = [replies]
        else:
            items = list(replies)
        for item in items:
            if not (isinstance(item, (str, Reply)) or callable(item)):
                raise TypeError(f"a reply is a str, a Reply or a callable, not {item!r}")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int)):
            raise ValueError(f"times is a whole number of at least 1, or None, not {times!r}")
        if times is not None and times < 1:
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

    def reset(self) -> None:
        """Forget every script and every recorded request; the server keeps running.

        Its address stays the same, so clients already pointed at it keep working: what the
        `scripted_openai_session` fixture does before each test that uses it.
        """
        with self._lock:
            self._scripts.clear()
            self._forever.clear()
            self._served.clear()
            self._requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """The requests received so far for one model name, in arrival order.

        Args:
            model: The model name.

        Returns:
            The requests.
        """
        return [request for request in self.requests if request.model == model]

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered.

        A request held by `Reply.hang()` or waiting in `Reply.delay()` counts until the
        client hangs up or the response starts (so a client that has its reply never sees
        its request counted). After the code under test has returned, a request still in
        flight is one it left running in the background.
        """
        with self._lock:
            return self._in_flight

    # serving (called in the connection's thread)

    def _dispatch(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> _Response | _Hold | None:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
            bad_json = True
        else:
            bad_json = not isinstance(body, dict)
        parsed = body if isinstance(body, dict) else None
        model = parsed.get("model") if parsed is not None else None
        request = RecordedRequest(
            method, path, headers, parsed, model if isinstance(model, str) else None
        )
        with self._lock:
            self._requests.append(request)
        if method != "POST" or path.partition("?")[0] not in (_CHAT_PATH, _MESSAGES_PATH):
            message = (
                f"scripted server: no route {method} {path}; it serves POST {_CHAT_PATH} "
                f"and POST {_MESSAGES_PATH}"
            )
            return _error(404, message)
        if bad_json or parsed is None:
            return _error(400, "scripted server: the request body is not a JSON object")
        if parsed.get("stream"):
            return _error(400, "scripted server: streaming is not supported", param="stream")
        if request.model is None:
            return _error(400, "scripted server: the request has no model", param="model")
        with self._lock:
            script = self._scripts.get(request.model)
            forever = self._forever.get(request.model)
            served = self._served.get(request.model, 0)
            if script is not None:
                self._served[request.model] = served + 1
        if script is None:
            return _error(
                404,
                f"scripted server: no script for model {request.model!r}",
                param="model",
                code="model_not_found",
            )
        if served < len(script):
            reply = script[served]
        elif forever:
            reply = forever[(served - len(script)) % len(forever)]
        else:
            return _error(
                500,
                f"scripted server: no reply left for model {request.model!r} "
                f"({len(script)} scripted, this is request {served + 1})",
            )
        try:
            if not isinstance(reply, (str, Reply)):
                reply = reply(request)
            return _render(_as_reply(reply), request, self._ids)
        except Exception as exc:  # a bug in a test's callable: fail the request loudly
            return _error(
                500,
                f"scripted server: reply {served + 1} for model {request.model!r} raised "
                f"{type(exc).__name__}: {exc}",
            )
