"""llama-cpp-python's OpenAI-compatible server, continuing a trailing assistant message.

Run as `python -m refinekit._local.server` with `llama_cpp.server`'s own arguments
(`refinekit.local.LocalModel` does). Two things differ from `python -m llama_cpp.server`:

- A conversation whose last message is the assistant's is continued, as llama.cpp's own
  server does: the reply's text is only the continuation. Any other request is rendered and
  answered exactly as before (the chat format llama-cpp-python picks for the model).
- On a continued reply, a JSON schema in `response_format` holds the rest of the object (see
  `continuation`), given as `{"type": "json_object", "schema": ...}` or in the OpenAI form
  `{"type": "json_schema", "json_schema": {"schema": ...}}` (which llama-cpp-python refuses
  on any other request, as before).

Unless `--chat_format` is given, the model's own chat template (`tokenizer.chat_template` in
the GGUF file) renders the open message.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any, cast

import uvicorn
from llama_cpp import Llama, llama_chat_format
from llama_cpp.llama_grammar import LlamaGrammar
from llama_cpp.server.app import create_app
from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
from llama_cpp.server.settings import ConfigFileSettings, ModelSettings, ServerSettings, Settings

from .continuation import OpenFormatter, continued, rest_of_object_grammar, schema_of

__all__ = ["CHAT_FORMAT", "JsonSchemaFormat", "continuing_handler", "main"]

CHAT_FORMAT = "refinekit-continue"
"""The chat format this server registers and selects, unless `--chat_format` is given."""

_log = logging.getLogger("refinekit.local.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _default_format(llama: Llama) -> str:
    """The chat format llama-cpp-python picks for the model when none is given."""
    metadata = llama.metadata
    if "tokenizer.chat_template" not in metadata:
        return "llama-2"
    return llama_chat_format.guess_chat_format_from_gguf_metadata(metadata) or (
        "chat_template.default"
    )


_open: dict[int, OpenFormatter | None] = {}


def _open_formatter(llama: Llama) -> OpenFormatter | None:
    """The formatter that leaves the last message open: from the model's template, if any."""
    key = id(llama)
    if key not in _open:
        template = llama.metadata.get("tokenizer.chat_template")
        formatter = None
        if template:
            eos, bos = llama.token_eos(), llama.token_bos()
            formatter = OpenFormatter(
                template,
                eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
                eos_token_id=eos,
            )
        _open[key] = formatter
    return _open[key]


def continuing_handler(
    *,
    llama: Llama,
    messages: list[Any],
    response_format: dict[str, Any] | None = None,
    grammar: LlamaGrammar | None = None,
    **kwargs: Any,
) -> Any:
    """A llama-cpp-python chat handler: the default one, continuing a trailing assistant message.

    Args:
        llama: The model.
        messages: The conversation.
        response_format: The request's `response_format`.
        grammar: A grammar given by the caller.
        **kwargs: The other sampling arguments, passed on.

    Returns:
        The handler's completion, or its chunks when streamed.
    """
    prefix = continued(messages)
    formatter = _open_formatter(llama) if prefix is not None else None
    if prefix is not None and formatter is not None:
        try:
            formatter(messages=messages)
        except ValueError as e:
            _log.warning("not continuing the assistant message: %s", e)
            formatter = None
    if prefix is None or formatter is None:
        fmt = _default_format(llama)
        default = llama._chat_handlers.get(fmt) or llama_chat_format.get_chat_completion_handler(
            fmt
        )
        return default(
            llama=llama,
            messages=messages,
            response_format=cast(Any, response_format),
            grammar=grammar,
            **kwargs,
        )
    if response_format is not None and response_format.get("type") == "json_object":
        schema = schema_of(response_format)
        rest = None if schema is None else rest_of_object_grammar(schema, prefix)
        if rest is not None:
            grammar = LlamaGrammar.from_string(rest, verbose=False)
        else:
            what = "no schema" if schema is None else "the reply so far does not match its schema"
            _log.warning("continuing without the JSON constraint: %s", what)
    # Trailing whitespace is left for the model to write: a lone space token, which the
    # tokenizer rarely gives mid-text, derails a small model (after `"vendor": ` SmolLM2 wrote
    # a number; after `"vendor":`, the string). What it writes there is not sent back.
    kept = prefix.rstrip()
    if kept != prefix:
        messages = [*messages[:-1], {**messages[-1], "content": kept}]
    handler = llama_chat_format.chat_formatter_to_chat_completion_handler(formatter)
    result: Any = handler(
        llama=llama, messages=messages, response_format=None, grammar=grammar, **kwargs
    )
    if kept == prefix:
        return result
    if isinstance(result, dict):
        for choice in result.get("choices", ()):
            message = choice.get("message") or {}
            if isinstance(message.get("content"), str):
                message["content"] = message["content"].lstrip()
        return result
    return _lstripped(result)


def _lstripped(chunks: Iterator[Any]) -> Iterator[Any]:
    """A streamed reply without the whitespace it begins with."""
    starting = True
    for chunk in chunks:
        if starting:
            for choice in chunk.get("choices", ()):
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    delta["content"] = delta["content"].lstrip()
                    starting = not delta["content"]
        yield chunk


def _json_schema_as_json_object(body: bytes) -> bytes:
    """A continued reply's request with an OpenAI `json_schema` response format in llama-cpp's form.

    Only a request whose last message is the assistant's: any other body is returned as it
    is, so llama-cpp-python answers it as before (it refuses `json_schema`).
    """
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return body
    if continued([m for m in request["messages"] if isinstance(m, dict)][-1:]) is None:
        return body
    response_format = request.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return body
    schema = schema_of(response_format)
    request["response_format"] = {"type": "json_object"} | (
        {} if schema is None else {"schema": schema}
    )
    return json.dumps(request).encode()


class JsonSchemaFormat:
    """ASGI middleware: a continued reply's `json_schema` response format, read as llama-cpp's.

    Args:
        app: The server's application.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, its body rewritten when it is a chat completion's."""
        path = str(scope.get("path", ""))
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not path.endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its body
                await self.app(scope, _replay([message], receive), send)
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        rewritten = _json_schema_as_json_object(body)
        if rewritten is not body:
            headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-length"]
            scope = {
                **scope,
                "headers": [*headers, (b"content-length", str(len(rewritten)).encode())],
            }
        first = {"type": "http.request", "body": rewritten, "more_body": False}
        await self.app(scope, _replay([first], receive), send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`receive` that gives `messages` first, then the client's own (e.g. its disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def main(argv: list[str] | None = None) -> None:
    """Parse `llama_cpp.server`'s arguments and serve until stopped (as its own `main`)."""
    parser = argparse.ArgumentParser(description="llama-cpp-python's server, continuing replies")
    add_args_from_model(parser, Settings)
    parser.add_argument("--config_file", type=str, help="Path to a config file to load.")
    args = parser.parse_args(argv)
    config_file = os.environ.get("CONFIG_FILE", args.config_file)
    try:
        if config_file:
            with open(config_file, "rb") as f:
                if config_file.endswith((".yaml", ".yml")):
                    text = json.dumps(importlib.import_module("yaml").safe_load(f))
                else:
                    text = f.read().decode()
            config = ConfigFileSettings.model_validate_json(text)
            server_settings = ServerSettings.model_validate(config)
            model_settings = config.models
        else:
            server_settings = cast(ServerSettings, parse_model_from_args(ServerSettings, args))
            model_settings = [cast(ModelSettings, parse_model_from_args(ModelSettings, args))]
    except Exception as e:
        print(e, file=sys.stderr)
        parser.print_help()
        sys.exit(1)
    for settings in model_settings:
        if settings.chat_format is None:
            settings.chat_format = CHAT_FORMAT
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    app = JsonSchemaFormat(
        create_app(server_settings=server_settings, model_settings=model_settings)
    )
    uvicorn.run(
        app,
        host=os.getenv("HOST", server_settings.host),
        port=int(os.getenv("PORT", server_settings.port)),
        ssl_keyfile=server_settings.ssl_keyfile,
        ssl_certfile=server_settings.ssl_certfile,
    )


_registry: Any = llama_chat_format.LlamaChatCompletionHandlerRegistry()  # type: ignore[no-untyped-call]
_registry.register_chat_completion_handler(CHAT_FORMAT, continuing_handler, overwrite=True)

if __name__ == "__main__":
    main()
