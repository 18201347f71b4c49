"""The local_model tier: the server continues a trailing assistant message ("prefill").

Run with `pytest -m local_model --local-model`. Over the real `openai` client: a conversation
ending in the assistant's cut JSON reply is continued (the reply is only the rest, streamed or
not), and a JSON-schema `response_format` holds the rest to the schema, so prefix and
continuation join into the schema's object; every other request is answered as
`python -m llama_cpp.server` answers it (the same text at temperature 0 and a fixed seed).
Nothing asserts a wording: what holds for any model is asserted.
"""

from __future__ import annotations

import importlib
import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel

from refinekit.local import LocalModel

pytestmark = pytest.mark.local_model


def rest_of_object_grammar(schema: Any, prefix: str) -> str | None:
    """The server's grammar of a continued object (its module needs the `local` extra)."""
    continuation = importlib.import_module("refinekit._local.continuation")
    made: str | None = continuation.rest_of_object_grammar(schema, prefix)
    return made


class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    total: float


SCHEMA = Invoice.model_json_schema()
SYSTEM = (
    "You extract data from invoices. Reply with only a JSON object with exactly these keys: "
    '"number" (a string), "vendor" (a string), "currency" ("EUR", "USD" or "GBP"), "total" '
    "(a number)."
)
TEXTS = [
    "Invoice INV-0042 from Acme Ltd. Total due: EUR 12.50.",
    "Bill no. 7731 from Globex, amount payable $1,204.00 (USD).",
]
# each cut before a field's value, as a resumed reply is; and what it wrote
PREFIXES = [
    '{"number": "INV-0042", "vendor": ',
    '{"number": "7731", "vendor": "Globex", "currency":',
]
WRITTEN = [{"number": "INV-0042"}, {"number": "7731", "vendor": "Globex"}]
SETTINGS: dict[str, Any] = {"temperature": 0, "seed": 42, "max_tokens": 64}
JSON_OBJECT = {"type": "json_object", "schema": SCHEMA}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "Invoice", "schema": SCHEMA}}


def conversation(text: str, prefix: str | None = None) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    if prefix is not None:
        messages.append({"role": "assistant", "content": prefix})
    return messages


@pytest.fixture(scope="module")
def local() -> Iterator[LocalModel]:
    with LocalModel() as model:
        yield model


class PlainServer(LocalModel):
    """`python -m llama_cpp.server` itself, with the arguments `LocalModel` gives it."""

    def _server_command(self, port: int) -> list[str]:
        command = super()._server_command(port)
        command[command.index("refinekit._local.server")] = "llama_cpp.server"
        return command


def reply(local: LocalModel, messages: list[dict[str, Any]], stream: bool, **extra: Any) -> str:
    client = local.client()
    options = {"model": local.model, **SETTINGS, **extra}
    if not stream:
        answer = client.chat.completions.create(messages=messages, **options)
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(messages=messages, stream=True, **options)
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def token_count(local: LocalModel, text: str) -> int:
    request = urllib.request.Request(
        local.base_url.removesuffix("/v1") + "/extras/tokenize/count",
        data=json.dumps({"input": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        count: int = json.load(response)["count"]
    return count


@pytest.mark.parametrize("response_format", [JSON_OBJECT, JSON_SCHEMA], ids=["object", "schema"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_cut_json_reply_is_continued_into_the_schemas_object(
    local: LocalModel, stream: bool, response_format: dict[str, Any]
) -> None:
    for text, prefix, written in zip(TEXTS, PREFIXES, WRITTEN, strict=True):
        rest = reply(local, conversation(text, prefix), stream, response_format=response_format)
        assert not rest.lstrip().startswith("{")  # the rest of the reply, not a new one
        joined = Invoice.model_validate_json(prefix + rest)  # the schema held the rest
        assert joined.model_dump(include=set(written)) == written  # the prefix's fields stand


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_prompt_ends_in_the_open_reply(local: LocalModel, stream: bool) -> None:
    client = local.client()
    options = {"model": local.model, **SETTINGS, "max_tokens": 1}
    for text, prefix in zip(TEXTS, PREFIXES, strict=True):
        fresh = client.chat.completions.create(messages=conversation(text), **options)
        resumed = client.chat.completions.create(messages=conversation(text, prefix), **options)
        assert fresh.usage is not None
        assert resumed.usage is not None
        # the new assistant turn the fresh prompt ends with is the one the prefix goes on in
        # (its trailing whitespace left for the model to write): no turn closed, none opened
        added = resumed.usage.prompt_tokens - fresh.usage.prompt_tokens
        assert added == token_count(local, prefix.rstrip())
    # streamed and whole, constrained or not, give the same continuation
    messages = conversation(TEXTS[0], PREFIXES[0])
    assert reply(local, messages, stream) == reply(local, messages, not stream)
    assert reply(local, messages, stream, response_format=JSON_SCHEMA) == reply(
        local, messages, not stream, response_format=JSON_OBJECT
    )


def test_a_prefix_off_the_schema_is_continued_without_the_constraint(local: LocalModel) -> None:
    prefix = '{"number": "INV-0042", "reference": '  # a field the schema does not have
    logged = local.log_tail(100_000).count("continuing without the JSON constraint")
    rest = reply(local, conversation(TEXTS[0], prefix), False, response_format=JSON_SCHEMA)
    assert not rest.lstrip().startswith("{")
    assert local.log_tail(100_000).count("continuing without the JSON constraint") == logged + 1


def test_an_ordinary_request_is_answered_as_llama_cpp_server_answers_it(
    local: LocalModel,
) -> None:
    ordinary = [
        ({}, conversation(TEXTS[0])),
        ({}, conversation(TEXTS[1])),
        ({"response_format": JSON_OBJECT}, conversation(TEXTS[0])),
        ({"response_format": {"type": "json_object"}}, conversation(TEXTS[1])),
        (
            {},
            [
                *conversation(TEXTS[0], '{"number": "INV-0042"}'),
                {"role": "user", "content": "Again."},
            ],
        ),
    ]
    ours = [
        reply(local, messages, stream, **extra)
        for extra, messages in ordinary
        for stream in (False, True)
    ]
    with PlainServer() as plain:
        theirs = [
            reply(plain, messages, stream, **extra)
            for extra, messages in ordinary
            for stream in (False, True)
        ]
        # the OpenAI form of a schema, refused by both on a request that continues nothing
        for server in (local, plain):
            with pytest.raises(openai.InternalServerError, match="response_format"):
                reply(server, conversation(TEXTS[0]), False, response_format=JSON_SCHEMA)
    assert ours == theirs
    assert all(ours)


def test_the_rest_of_the_object_follows_the_schema() -> None:
    grammar = rest_of_object_grammar(SCHEMA, PREFIXES[0])
    assert grammar is not None
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    # the open value (a string), then the properties not yet written, each required, then `}`
    assert rules["root"].startswith("space string ")
    keys = [rules[name] for name in re.findall(r"field\d+-key", rules["root"])]
    assert keys == ['"\\"currency\\""', '"\\"total\\""']
    assert ")?" not in rules["root"]
    assert rules["root"].endswith('"}" space')
    optional = {
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    tail = (rest_of_object_grammar(optional, '{"a": ') or "").splitlines()[-1]
    assert tail.endswith(')? "}" space')  # an optional property may be left out
    for prefix in [
        '{"number": "INV-0042", "reference": ',  # a field the schema does not have
        '{"number": "INV-0042", "number": ',  # written twice
        '{"number": "INV-0042"',  # not cut before a value
        '{"number": "INV-',  # cut inside one
        "INV-0042",  # not an object
    ]:
        assert rest_of_object_grammar(SCHEMA, prefix) is None, prefix
    assert rest_of_object_grammar({"type": "string"}, '{"a": ') is None
