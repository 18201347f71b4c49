"""`ScriptedOpenAI`: a real OpenAI-compatible HTTP server on 127.0.0.1, answering from a script.

The HTTP side and the server's lifecycle; what a reply is lives in `_script`, how it is sent in
`_openai_wire` (`POST /v1/chat/completions`) and `_anthropic_wire` (`POST /v1/messages`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Collection, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import TYPE_CHECKING, Any

from . import _anthropic_wire, _openai_wire
from ._batch_shapes import check_plan
from ._batches import BATCH_PREFIXES, Batches, RecordedBatch
from ._script import RecordedRequest, RecordedStream, Reply, ReplyLike, Scripts
from ._wire import API_KEY, Hold, Ids, Rendered, Streamed, Wire, answer_from

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = ["RecordedBatch", "RecordedRequest", "RecordedStream", "Reply", "ScriptedOpenAI"]

_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})


def _wire(path: str) -> Wire:
    """The wire format of a request path: Anthropic's under `/v1/messages`, else OpenAI's."""
    route = path.partition("?")[0]
    if route == _anthropic_wire.MESSAGES_PATH or route.startswith("/v1/messages/"):
        return _anthropic_wire
    return _openai_wire


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
            scripted._http_requests += 1
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
            response: Rendered = _wire(self.path).error(
                400, "scripted server: send a Content-Length"
            )
        else:
            raw = self.rfile.read(length)
            headers = {k.lower(): _redact(k.lower(), v) for k, v in self.headers.items()}
            response = self.server.scripted._dispatch(self.command, self.path, headers, raw)
        if response is None:  # Reply.disconnect()
            self.close_connection = True
            return
        if isinstance(response, Hold):  # Reply.hang()
            self.close_connection = True
            self._hold()
            return
        self._answered()
        if isinstance(response, Streamed):
            self._stream(response)
            return
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

    def _stream(self, stream: Streamed) -> None:
        """Send a stream's events, one HTTP chunk each, watching for the client to hang up."""
        scripted = self.server.scripted
        generation = scripted._stream_began()
        sent = 0
        finished = left = False
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in stream.events:
                if self._client_left():
                    left = True
                    break
                data = event.encode()
                self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
                sent += event.role == "chunk"
            else:
                if stream.end == "end":
                    self.wfile.write(b"0\r\n\r\n")
                    finished = True
                elif stream.end == "hang":
                    self._hold()
                    left = True
        except OSError:  # the client hung up while an event was written
            left = True
        finally:
            if not finished:
                self.close_connection = True  # Reply.disconnect(after=...): no last chunk
            if stream.request is not None:
                record = RecordedStream(
                    stream.request, stream.chunks, sent, finished, left, stream.fault
                )
                scripted._stream_ended(record, generation)

    def _client_left(self) -> bool:
        """Whether the client has closed the connection (it sends nothing while it reads)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True

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

    def __init__(self, scripted: ScriptedOpenAI, host: str, port: int) -> None:
        self.scripted = scripted
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self.scripted_host = host
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup of the host (no network but loopback)."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.scripted_host, self.socket.getsockname()[1]

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
    A request with `"stream": true` gets its reply as server-sent events, in the format of
    the API it came to, and each stream sent is recorded (`streamed`).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """A server, not yet running: `with` (or `async with`) starts it and stops it.

        Args:
            host: The address to listen on. The default, 127.0.0.1, takes connections from
                this machine only; `"::1"` is IPv6's loopback.
            port: The port; 0 (the default) is a free one, chosen when the server starts.

        Raises:
            ValueError: `port` is not a whole number from 0 to 65535, or `host` is empty.
        """
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port is a whole number from 0 to 65535, not {port!r}")
        if not isinstance(host, str) or not host.strip():
            raise ValueError(f"host is an address to listen on, such as '127.0.0.1', not {host!r}")
        self._host = host.strip().strip("[]")
        self._port = port
        self._lock = threading.Lock()
        self._scripts = Scripts()
        self._requests: list[RecordedRequest] = []
        self._streams: list[RecordedStream] = []
        self._streaming = 0  # streams being sent
        self._generation = 0  # reset() counts up: a stream begun before it is not recorded
        self._stream_done = threading.Condition(self._lock)
        self._in_flight = 0
        self._ids = Ids()
        self._http_requests = 0
        self._batches = Batches(self._scripts, self._ids, self._record)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def __enter__(self) -> ScriptedOpenAI:
        if self._httpd is not None:
            raise RuntimeError("this ScriptedOpenAI is already running")
        self._httpd = _HTTPServer(self, self._host, self._port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ScriptedOpenAI-{self._httpd.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
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

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)  # blocks for at most one poll interval (50 ms)

    # clients

    @property
    def base_url(self) -> str:
        """The API's base URL, `http://127.0.0.1:<port>/v1` (only while running)."""
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAI is not running: use it in a `with` block")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._httpd.server_port}/v1"

    def _client_options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "api_key": API_KEY,
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
        return _anthropic_wire.client(self.base_url, kwargs)

    def async_anthropic_client(self, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """A real `anthropic.AsyncAnthropic` client pointed at this server (see above).

        Args:
            **kwargs: Override or add client options, e.g. `max_retries=2`, `timeout=0.2`.

        Returns:
            The client (close it, or use it as an async context manager).
        """
        return _anthropic_wire.async_client(self.base_url, kwargs)

    # script and record

    def script(
        self,
        model: str,
        replies: ReplyLike | Iterable[ReplyLike],
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
        self._scripts.add(model, replies, times)

    def reset(self) -> None:
        """Forget every script, recorded request and stream, and every batch and file.

        The server keeps running; `http_requests` counts from 0 again.

        A stream still being sent when it is called is not recorded when it ends.

        Its address stays the same, so clients already pointed at it keep working: what the
        `scripted_openai_session` fixture does before each test that uses it.
        """
        self._scripts.clear()
        self._batches.clear()
        with self._lock:
            self._http_requests = 0
            self._requests.clear()
            self._streams.clear()
            self._generation += 1  # a stream still being sent now is not recorded when it ends

    def script_batches(
        self,
        *,
        polls: int = 1,
        fail: Collection[int] = (),
        expire: bool = False,
        expire_after: int = 0,
        times: int | None = None,
    ) -> None:
        """How the next batches run (OpenAI's Batches, Anthropic's Message Batches).

        A batch advances only when it is polled (a GET of the batch), never with time;
        unscripted, it ends at its first poll with every item answered.

        Args:
            polls: The poll at which it ends, from 1; on the way: validating, in_progress
                (done items counting up), finalizing (from 3 polls), "completed"/"ended".
            fail: 0-based positions of items that fail, taking no reply: an error file
                line with a 500 `server_error` (OpenAI), an "errored" result (Anthropic).
            expire: The batch ends "expired" (Anthropic: "ended") after its first
                `expire_after` items; the others take no reply and are expired.
            expire_after: With `expire`, how many items are done before it expires.
            times: For the next `times` batches (after those scripted before); None:
                every later batch once those are used.

        Raises:
            ValueError: `polls` or `times` below 1, or a negative count or position.
            TypeError: `fail` is not a collection of positions, or `expire` not a bool.
        """
        self._batches.script(check_plan(polls, fail, expire, expire_after), times)

    def end_batches(self) -> None:
        """Every batch not ended yet ends at its next poll (as it was scripted to end)."""
        self._batches.end_all()

    @property
    def batches(self) -> list[RecordedBatch]:
        """Every batch created so far, oldest first, as `RecordedBatch`es (a snapshot)."""
        return self._batches.recorded()

    @property
    def http_requests(self) -> int:
        """HTTP requests received so far, on every path (batch and file endpoints too)."""
        with self._lock:
            return self._http_requests

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy).

        A request of a batch is recorded as a request of its own (its `batch_id` set) when
        the batch is created; the calls to the batch and file endpoints themselves are not
        recorded (`http_requests` counts them).
        """
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

    def streamed(self, model: str | None = None, *, wait: float = 5.0) -> list[RecordedStream]:
        """The streams sent so far (for one model name, or all), in the order they ended.

        Waits first until no stream is being sent, so that a stream the client has just
        closed is counted: the server notices a client that hangs up between two events, or
        while a stream is held.

        Args:
            model: Only the streams answering this model name; None for every stream.
            wait: How long to wait, in seconds, for the streams being sent to end.

        Returns:
            The streams, as `RecordedStream`s.

        Raises:
            TimeoutError: A stream was still being sent after `wait` seconds: the client
                neither read it to its end nor closed it.
        """
        deadline = time.monotonic() + wait
        with self._stream_done:
            while self._streaming:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"scripted server: {self._streaming} stream(s) still being sent after "
                        f"{wait:g} s: the client neither read them to their end nor closed them"
                    )
                self._stream_done.wait(left)
            streams = list(self._streams)
        return [s for s in streams if model is None or s.request.model == model]

    def _stream_began(self) -> int:
        with self._lock:
            self._streaming += 1
            return self._generation

    def _stream_ended(self, record: RecordedStream, generation: int) -> None:
        with self._stream_done:
            self._streaming -= 1
            if generation == self._generation:  # else it began before a reset()
                self._streams.append(record)
            self._stream_done.notify_all()

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

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _dispatch(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Rendered:
        wire = _wire(path)
        route = path.partition("?")[0]
        if any(route == p or route.startswith(p + "/") for p in BATCH_PREFIXES):
            answered = self._batches.handle(method, path, headers, raw, self.base_url)
            if answered is not None:
                return answered
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
        self._record(request)
        chat, messages = _openai_wire.CHAT_PATH, _anthropic_wire.MESSAGES_PATH
        if method != "POST" or path.partition("?")[0] not in (chat, messages):
            message = (
                f"scripted server: no route {method} {path}; it serves POST {chat} "
                f"and POST {messages}"
            )
            return wire.error(404, message)
        if bad_json or parsed is None:
            return wire.error(400, "scripted server: the request body is not a JSON object")
        rendered = answer_from(self._scripts, wire, request, self._ids)
        if isinstance(rendered, Streamed):
            return dataclasses.replace(rendered, request=request)
        return rendered
