"""Continuing a trailing assistant message ("prefill"), with the model's own chat template.

A conversation whose last message is the assistant's is rendered with that message left
open: the template is rendered with a placeholder as the message's content and no generation
prompt, cut at the placeholder, and the real content appended. Any template that writes a
message's content as it is works so; one that rewrites it is reported and not continued.

When the request constrains the reply to a JSON schema and the open message is a JSON object
of that schema cut before a field's value (`{"number": "FA1", "vendor": `), the continuation
is held to the rest of the object: that field's value, then the properties not yet written
(in the schema's order; the required ones required), then `}`. Each value's grammar comes from
llama-cpp-python's own JSON-schema converter.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_cpp.llama_chat_format import ChatFormatterResponse, Jinja2ChatFormatter
from llama_cpp.llama_grammar import SchemaConverter

__all__ = ["OpenFormatter", "continued", "rest_of_object_grammar", "schema_of"]

PLACEHOLDER = "\u2063refinekit-continue-here\u2063"
_SPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


def continued(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text to continue: the last message's content when the assistant wrote it, else None.

    A message with tool calls, or whose content is not a string, is not continued.
    """
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls") or last.get("function_call"):
        return None
    content = last.get("content")
    return content if isinstance(content, str) else None


class OpenFormatter:
    """Renders a conversation with its last (assistant) message open, for the model to go on.

    Args:
        template: The model's Jinja chat template (`tokenizer.chat_template`).
        eos_token: The end-of-sequence token's text.
        bos_token: The beginning-of-sequence token's text.
        eos_token_id: The end-of-sequence token, on which generation stops.
    """

    def __init__(self, template: str, eos_token: str, bos_token: str, eos_token_id: int) -> None:
        self._closed = Jinja2ChatFormatter(
            template=template,
            eos_token=eos_token,
            bos_token=bos_token,
            add_generation_prompt=False,
            stop_token_ids=[eos_token_id],
        )

    def __call__(
        self, *, messages: list[Any], **kwargs: Any
    ) -> ChatFormatterResponse:  # the llama_cpp ChatFormatter protocol
        """The prompt ending in the last message's content, left open.

        Raises:
            ValueError: The template does not write the last message's content as it is
                (the placeholder is not found once in the rendered prompt).
        """
        content = continued(messages)
        if content is None:
            raise ValueError("the last message is not an assistant message with text")
        marked = [*messages[:-1], {**messages[-1], "content": PLACEHOLDER}]
        result = self._closed(messages=marked, **kwargs)
        if result.prompt.count(PLACEHOLDER) != 1:
            raise ValueError("the chat template does not write the assistant's content as is")
        result.prompt = result.prompt[: result.prompt.index(PLACEHOLDER)] + content
        return result


def schema_of(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a `response_format` constrains the reply to, if any."""
    if not response_format:
        return None
    schema = response_format.get("schema")
    if response_format.get("type") == "json_schema":
        inner = response_format.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, Mapping) else None
    return dict(schema) if isinstance(schema, Mapping) else None


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _open_field(prefix: str) -> tuple[list[str], str] | None:
    """The keys a JSON object prefix has written, and the one whose value comes next.

    The prefix must be `{`, then `"key": value,` pairs, then `"key":` (with any whitespace);
    any text before its first `{` is allowed (a code fence). Else None.
    """
    at = prefix.find("{")
    if at < 0:
        return None
    at = _skip(prefix, at + 1)
    keys: list[str] = []
    try:
        while True:
            key, at = _DECODER.raw_decode(prefix, at)
            at = _skip(prefix, at)
            if not isinstance(key, str) or prefix[at : at + 1] != ":":
                return None
            at = _skip(prefix, at + 1)
            if at == len(prefix):
                return keys, key
            keys.append(key)
            _, at = _DECODER.raw_decode(prefix, at)
            at = _skip(prefix, at)
            if prefix[at : at + 1] != ",":
                return None
            at = _skip(prefix, at + 1)
    except ValueError:  # a key or value cut short, or not JSON
        return None


def rest_of_object_grammar(schema: Mapping[str, Any], prefix: str) -> str | None:
    """A GBNF grammar for the rest of a JSON object of `schema` that `prefix` begins.

    The prefix stops before a top-level field's value. The rest is that value, then each
    property not written yet, in the schema's order (the required ones required, the others
    optional), then `}`.

    Returns:
        The grammar (its start rule `root`), or None when the prefix does not match the
        schema (a field it does not have, one written twice, a prefix not cut before a value)
        or the schema is not an object with properties.
    """
    found = _open_field(prefix)
    if found is None:
        return None
    written, open_key = found
    converter = SchemaConverter(  # type: ignore[no-untyped-call]
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    resolved = converter.resolve_refs(copy.deepcopy(dict(schema)), "input")
    ref = resolved.get("$ref")
    if isinstance(ref, str):
        resolved = converter._refs.get(ref, resolved)
    properties = resolved.get("properties")
    if not isinstance(properties, Mapping):
        return None
    names = list(properties)
    seen = [*written, open_key]
    if len(set(seen)) != len(seen) or not set(seen) <= set(names):
        return None
    required = set(resolved.get("required", ()))

    def value_rule(name: str, index: int) -> str:
        rule: str = converter.visit(properties[name], f"field{index}")  # type: ignore[no-untyped-call]
        return rule

    parts = ["space", value_rule(open_key, names.index(open_key))]
    for index, name in enumerate(names):
        if name in seen:
            continue
        key: str = converter.visit({"const": name}, f"field{index}-key")  # type: ignore[no-untyped-call]
        pair = f'"," space {key} space ":" space {value_rule(name, index)}'
        parts.append(f"( {pair} )" if name in required else f"( {pair} )?")
    parts.append('"}" space')
    grammar: str = converter.format_grammar()  # type: ignore[no-untyped-call]
    if any(line.startswith("root ::=") for line in grammar.splitlines()):
        return None  # the schema's own rules took the name
    return f"{grammar}\nroot ::= {' '.join(parts)}"
