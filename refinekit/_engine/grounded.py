"""`response_format`: constrained decoding per server, grounded in a source text when given.

The request options are built in `_structure.formats`; this module adds what the engine
knows: a `grounding` event for each grounded field that could not be constrained.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .._core.types import Usage
from .._structure.formats import MAX_CANDIDATES, MAX_SPAN_WORDS, Dialect, constrained_format
from .events import Event, emit
from .job import current_job

__all__ = ["pinning", "response_format"]

_PINNED: ContextVar[tuple[Any, Mapping[str, Any]] | None] = ContextVar(
    "refinekit_pinned", default=None
)


@contextmanager
def pinning(schema: Any, values: Mapping[str, Any] | None) -> Iterator[None]:
    """While the block runs, `response_format(schema, ...)` holds these fields to these values.

    `values`: JSON key -> JSON value (a resumed request's kept fields); None pins nothing.
    """
    token = _PINNED.set(None if not values else (schema, dict(values)))
    try:
        yield
    finally:
        try:
            _PINNED.reset(token)
        except ValueError:  # resumed in another context (a stream iterated elsewhere)
            _PINNED.set(None)


def response_format(
    schema: Any,
    *,
    dialect: Dialect = "openai",
    source: str | Mapping[str, Any] | None = None,
    max_span_words: int = MAX_SPAN_WORDS,
    max_candidates: int = MAX_CANDIDATES,
) -> dict[str, Any]:
    """The keyword arguments that ask a server to constrain its reply to JSON of `schema`.

    Splat them into the request: ``client.chat.completions.create(model=..., messages=...,
    **response_format(Invoice, dialect="llama.cpp"))``. A grammar makes the reply well-formed
    JSON of the schema's shape; it does not make the values right, nor check validators:
    `@self_correct` still validates and corrects what is left.

    **Grounded decoding.** Given the `source` text, each grounded field (marked `InSource` or
    `in_source(key)`, at any depth) is constrained to the values that text holds, so the
    model cannot invent one: a string field to an `enum` of the text's spans (every run of 1
    to `max_span_words` words, runs of whitespace as one space, each as written and without
    the punctuation at its edges), a number field (`int`, `float`, `Decimal`) to an `enum`
    of the numbers the text writes in digits (an `int` field: the whole ones). Every such
    value passes `InSource`, which still runs on the reply. A field is left as the schema
    says, and a `grounding` event (`error` names the field and why) is emitted, when it
    cannot be constrained: no text under its key, no candidate in the text, a string or
    choice field's source over 20,000 characters, more than `max_candidates` candidates, or
    (OpenAI) more enum values or characters than one strict schema takes (500 values and
    100,000 characters, the schema's own enums included); a number field, when one of the
    text's numbers has no JSON number that states it exactly as the field reads it back
    (`1.000000000000000001`, which a float makes 1.0; more than 4,300 digits). Its value is
    then checked by the validator alone.

    **Inside a resumed request.** Called by a `@self_correct(early_abort="resume")` function
    while it makes a request that restates a failed reply's validated fields (see
    docs/streaming.md), the fields kept are pinned: each becomes a single-value `enum` of
    its kept value (a string, number, boolean or null one), so a strict schema keeps the
    model from changing them. Only for that function's own `schema`.

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
        source: The source text the grounded fields take their values from (for the
            default key, "source"), or the validation context (a dict of texts by key, as
            given to `@self_correct(validation_context=...)`). None: nothing is grounded.
        max_span_words: The longest span a grounded string may be, in words (default 6).
        max_candidates: The most values one grounded field's enum may have (default 250).

    Returns:
        A new dict of keyword arguments (a copy each call: change it freely).

    Raises:
        ValueError: `dialect` is not one of the four, OpenAI's strict mode is asked for a
            schema whose top is not an object, or a cap is not a positive int.
        TypeError: `schema` is not a type, pydantic cannot write its JSON schema, or
            `source` is neither a str nor a mapping.
    """
    pins = _PINNED.get()
    made, free = constrained_format(
        schema,
        dialect=dialect,
        source=source,
        max_span_words=max_span_words,
        max_candidates=max_candidates,
        pinned=pins[1] if pins is not None and pins[0] is schema else None,
    )
    if free:
        job = current_job()
        name = getattr(schema, "__qualname__", None) or repr(schema)
        for field in free:
            emit(
                Event(
                    kind="grounding",
                    decorator="response_format",
                    function=name,
                    job_id=job.id if job is not None else "",
                    attempt=0,
                    max_attempts=0,
                    is_last=False,
                    usage=job.usage if job is not None else Usage(),
                    judge_usage=job.judge_usage if job is not None else Usage(),
                    error=f'"{field.path}" left unconstrained: {field.reason}',
                )
            )
    return made
