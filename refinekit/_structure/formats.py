"""Constrained decoding: the request options that make a server emit JSON of a schema."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticUserError

from .._core.schema import require_type

__all__ = ["Dialect", "response_format"]

Dialect = Literal["openai", "llama.cpp", "ollama", "vllm"]
"""Which server's way of asking for JSON of a schema (see `response_format`)."""

_DIALECTS = ("openai", "llama.cpp", "ollama", "vllm")
_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _name(schema: Any, json_schema: Mapping[str, Any]) -> str:
    title = json_schema.get("title") or getattr(schema, "__name__", "") or "reply"
    return _NAME.sub("_", str(title))[:64] or "reply"


def _strict(node: Any) -> Any:
    """OpenAI's strict mode: every object closed and every key required (optional = nullable)."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "default"}
    if out.get("type") == "object" and "properties" in out:
        required = set(out.get("required", ()))
        properties = out["properties"]
        for key, sub in list(properties.items()):
            if key not in required and not _nullable(sub):
                properties[key] = {"anyOf": [sub, {"type": "null"}]}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _nullable(node: Mapping[str, Any]) -> bool:
    if node.get("type") == "null":
        return True
    return any(isinstance(a, Mapping) and a.get("type") == "null" for a in node.get("anyOf", ()))


def response_format(schema: Any, *, dialect: Dialect = "openai") -> dict[str, Any]:
    """The keyword arguments that ask a server to constrain its reply to JSON of `schema`.

    Splat them into the request: ``client.chat.completions.create(model=..., messages=...,
    **response_format(Invoice, dialect="llama.cpp"))``. A grammar makes the reply well-formed
    JSON of the schema's shape; it does not make the values right, nor check validators:
    `@self_correct` still validates and corrects what is left.

    Dialects:

    - `"openai"`: `response_format={"type": "json_schema", "json_schema": {..., "strict":
      true}}`, OpenAI's structured outputs; the schema made strict as OpenAI requires (every
      object closed, every key required, optional keys nullable). Servers that implement this
      form (Ollama 0.5+ through its OpenAI-compatible endpoint, LM Studio, recent vLLM) take
      it too.
    - `"llama.cpp"`: `response_format={"type": "json_object", "schema": ...}`, which
      llama-cpp-python's server (and llama.cpp's) turns into a grammar.
    - `"ollama"`: `format=<schema>`, for Ollama's own API (the `ollama` Python library's
      `chat(..., format=...)`).
    - `"vllm"`: `extra_body={"guided_json": <schema>}`, vLLM's guided decoding.

    Args:
        schema: A pydantic model or any type `pydantic.TypeAdapter` accepts.
        dialect: The server's dialect.

    Returns:
        A new dict of keyword arguments (a copy each call: change it freely).

    Raises:
        ValueError: `dialect` is not one of the four, or OpenAI's strict mode is asked for a
            schema whose top is not an object.
        TypeError: `schema` is not a type, or pydantic cannot write its JSON schema.
    """
    if dialect not in _DIALECTS:
        choices = ", ".join(map(repr, _DIALECTS))
        raise ValueError(f"dialect must be one of {choices}; got {dialect!r}")
    require_type(schema, "response_format(schema=...)")
    try:
        json_schema = TypeAdapter(schema).json_schema()
    except (PydanticInvalidForJsonSchema, PydanticUserError) as e:
        raise TypeError(f"response_format: pydantic cannot describe {schema!r} ({e})") from e
    if dialect == "openai":
        if json_schema.get("type") != "object":
            raise ValueError(
                "response_format(dialect='openai'): OpenAI's strict mode needs a JSON object "
                f"at the top, and {schema!r} is not one; wrap it in a model"
            )
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": _name(schema, json_schema),
                    "schema": _strict(copy.deepcopy(json_schema)),
                    "strict": True,
                },
            }
        }
    if dialect == "llama.cpp":
        return {"response_format": {"type": "json_object", "schema": json_schema}}
    if dialect == "ollama":
        return {"format": json_schema}
    return {"extra_body": {"guided_json": json_schema}}
