"""A stand-in for `python -m llama_cpp.server`, for tests of `LocalModel` without the extra.

It answers `GET /v1/models` like the real server, and `POST /v1/chat/completions` with a
one-word completion, until the POST numbered `--crash-on` (1: the first), on which it kills
itself with `--signal` (SIGSEGV: what a llama.cpp build crashing in its CPU kernels does)
before answering. `--crash-on 0` never crashes. It writes its pid to `--pid-file`.

    python tests/fake_llama_server.py --port 8080 --crash-on 1 --pid-file /tmp/pid

With `--script FILE` (a JSON list of `{"contains": [...], "last": "...", "reply": "..."}`) a
completion replies with the first rule whose `contains` texts all appear in the request's
messages and whose `last` (optional) appears in its last message; "Hello" when none does.
With `--requests FILE` each completion request's JSON body is appended to FILE, one a line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import TCPServer
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model_alias", default="stand-in")
    parser.add_argument("--crash-on", type=int, default=1)
    parser.add_argument("--signal", default="SIGSEGV")
    parser.add_argument("--pid-file")
    parser.add_argument("--script")
    parser.add_argument("--requests")
    args = parser.parse_args()
    rules: list[dict[str, Any]] = []
    if args.script:
        with open(args.script) as f:
            rules = json.load(f)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    posts = 0

    def reply_to(body: bytes) -> str:
        try:
            messages = json.loads(body).get("messages") or []
        except ValueError:
            messages = []
        texts = [str(m.get("content") or "") for m in messages]
        every = "\n".join(texts)
        last = texts[-1] if texts else ""
        for rule in rules:
            if all(t in every for t in rule.get("contains", ())) and rule.get("last", "") in last:
                return str(rule["reply"])
        return "Hello"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *log_args: Any) -> None:
            print(f"request: {format % log_args}", file=sys.stderr, flush=True)

        def send(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.send({"object": "list", "data": [{"id": args.model_alias, "object": "model"}]})

        def do_POST(self) -> None:
            nonlocal posts
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            posts += 1
            if args.requests:
                with open(args.requests, "a") as f:
                    f.write(body.decode() + "\n")
            if posts == args.crash_on:
                print("ggml_vec_dot: crashing now (stand-in)", file=sys.stderr, flush=True)
                os.kill(os.getpid(), getattr(signal, args.signal))
            message = {"role": "assistant", "content": reply_to(body)}
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            self.send(
                {
                    "id": f"chatcmpl-{posts}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": args.model_alias,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )

    class Server(HTTPServer):
        def server_bind(self) -> None:  # no reverse DNS lookup: loopback only
            TCPServer.server_bind(self)
            self.server_name, self.server_port = "127.0.0.1", args.port

    print(f"stand-in llama server on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    Server(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
