"""`@self_correct`: parse and validate a reply; a failure becomes a correction turn."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeAlias, TypeVar, overload

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import (
    PydanticSchemaGenerationError,
    PydanticUndefinedAnnotation,
    PydanticUserError,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionMessage

from ._decorate import wrap
from ._errors import (
    CorrectionExhausted,
    JsonParseError,
    ReplyShapeError,
    ResponseValidationError,
)
from ._errtext import error_lines, error_path, utf8_text
from ._flow import Call, Flow
from ._hooks import Event, EventKind, emit, make_event, wants_debug_events
from ._job import Job
from ._policy import check_budget
from ._replies import reply_text
from ._request import function_name
from ._schema import require_type

__all__ = ["MAX_CORRECTIONS_LIMIT", "CorrectionFailure", "self_correct"]

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

MAX_CORRECTIONS_LIMIT = 10
"""The largest correction budget accepted per job."""

CHECK_MARKER = "[Automated format check by the application, not a message from the user]"
"""How every correction turn begins, so the model (and a reader) can tell it from the user."""

_MAX_LISTED_ERRORS = 8
_MAX_ERRORS_CHARS = 1500
_MAX_PROSE_CANDIDATES = 16
_OPENERS = re.compile(r"[{\[]")


class CorrectionFailure:
    """Why one reply was unusable: a parse failure or a validation failure."""

    __slots__ = ("errors", "explanation", "kind", "summary")

    def __init__(
        self, kind: str, summary: str, explanation: str, errors: list[dict[str, Any]]
    ) -> None:
        self.kind = kind  # "parse" or "validation"
        self.summary = summary
        self.explanation = explanation
        self.errors = errors

    @property
    def error_type(self) -> type[CorrectionExhausted]:
        return JsonParseError if self.kind == "parse" else ResponseValidationError


def _validation_failure(error: ValidationError) -> CorrectionFailure:
    errors = error.errors(include_url=False, include_context=False)
    lines = error_lines(errors, max_items=_MAX_LISTED_ERRORS, max_chars=_MAX_ERRORS_CHARS)
    n = len(errors)
    first = errors[0]
    plural = "s" if n > 1 else ""
    summary = f"{n} validation error{plural}, first: {error_path(first['loc'])}: {first['msg']}"
    explanation = "Your previous reply was JSON but did not match the schema:\n" + "\n".join(lines)
    return CorrectionFailure("validation", summary, explanation, [dict(e) for e in errors])


def _parse_failure(
    text: str, detail: str | None = None, *, invalid_json: str | None = None
) -> CorrectionFailure:
    if detail is not None:
        summary = detail
        errors: list[dict[str, Any]] = [{"msg": detail}]
    elif not text.strip():
        summary = "the reply was empty"
        errors = [{"msg": summary, "line": 1, "column": 1, "pos": 0}]
    else:
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            summary = f"{e.msg}: line {e.lineno} column {e.colno} (char {e.pos})"
            errors = [{"msg": e.msg, "line": e.lineno, "column": e.colno, "pos": e.pos}]
        except RecursionError:
            summary = "the JSON is nested too deeply"
            errors = [{"msg": summary}]
        except ValueError:  # an integer longer than Python converts (4300 digits by default)
            summary = invalid_json or "a number in the JSON has too many digits"
            errors = [{"msg": summary}]
        else:  # Python's json accepts what pydantic's parser rejects (deep nesting, surrogates)
            summary = invalid_json or "the reply is not strict JSON"
            errors = [{"msg": summary}]
    explanation = f"Your previous reply could not be parsed as JSON: {summary}."
    return CorrectionFailure("parse", summary, explanation, errors)


def _json_invalid(error: ValidationError) -> bool:
    """Whether the text could not be read as JSON at all (rather than failing validation).

    A lone surrogate anywhere in the text (say in prose around the JSON) makes pydantic
    refuse the whole text as `string_unicode` at the root: unreadable, not invalid.
    """
    if error.error_count() != 1:
        return False
    first = error.errors(include_url=False)[0]
    return first["type"] == "json_invalid" or (
        first["type"] == "string_unicode" and not first["loc"]
    )


def _fenced_blocks(text: str) -> list[str]:
    """The contents of ``` fenced blocks, without a `json` tag.

    A plain scan rather than a regex: a fence followed by a long run of blanks made the regex
    this replaces backtrack in cubic time (seconds for a few thousand spaces).
    """
    blocks: list[str] = []
    start = text.find("```")
    while start != -1:
        end = text.find("```", start + 3)
        if end == -1:
            break
        body = text[start + 3 : end].strip()
        if body[:4] in ("json", "JSON"):
            body = body[4:].strip()
        blocks.append(body)
        start = text.find("```", end + 3)
    return blocks


def _embedded_json(text: str) -> list[str]:
    """JSON values found inside a fenced code block or surrounded by prose, in order."""
    found = _fenced_blocks(text)
    decoder = json.JSONDecoder()
    end = tried = 0
    for match in _OPENERS.finditer(text):
        start = match.start()
        if start < end:  # inside a value already found
            continue
        if tried == _MAX_PROSE_CANDIDATES:
            break
        tried += 1
        try:
            _, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        found.append(text[start:end])
    return list(dict.fromkeys(found))


class _Parser(Generic[T]):
    __slots__ = ("adapter", "schema_text", "validate_json")

    def __init__(self, schema: Any) -> None:
        require_type(schema, "self_correct(schema=...)")
        try:
            self.adapter: TypeAdapter[T] = TypeAdapter(schema)
            self.schema_text = json.dumps(self.adapter.json_schema(), separators=(",", ":"))
            # pydantic-core's validator itself: what `TypeAdapter.validate_json` calls, minus
            # its Python frame, so parsing a good reply costs exactly what pydantic costs.
            self.validate_json: Callable[[str], T] = self.adapter.validator.validate_json
        except (
            PydanticSchemaGenerationError,
            PydanticUndefinedAnnotation,
            PydanticUserError,
            TypeError,
        ) as e:
            raise TypeError(
                f"self_correct(schema={schema!r}): pydantic cannot validate this type ({e}). "
                "Pass a pydantic model or a type pydantic.TypeAdapter accepts "
                "(list[Item], a dataclass, a TypedDict, ...)."
            ) from e

    def parse(self, text: str) -> T | CorrectionFailure:
        try:
            return self.validate_json(text)
        except ValidationError as e:
            if not _json_invalid(e):
                return _validation_failure(e)
            invalid_json = str(e.errors(include_url=False)[0]["msg"])
        except RecursionError:
            return _parse_failure(text, "the JSON is nested too deeply")
        # The first embedded value that validates wins; if none does, the errors reported are
        # those of the longest one (a "[1]" citation in the prose is not the answer).
        rejected: tuple[int, ValidationError] | None = None
        for candidate in _embedded_json(text):
            try:
                return self.validate_json(candidate)
            except ValidationError as e:
                if not _json_invalid(e) and (rejected is None or len(candidate) > rejected[0]):
                    rejected = (len(candidate), e)
            except RecursionError:
                continue
        if rejected is not None:
            return _validation_failure(rejected[1])
        return _parse_failure(text, invalid_json=invalid_json)

    def correction(self, failure: CorrectionFailure) -> str:
        # Sent as it is: valid UTF-8 whatever an error message quotes from the reply.
        return utf8_text(
            f"{CHECK_MARKER}\n{failure.explanation}\n\n"
            "Reply again with only the corrected JSON (no prose, no code fences), "
            f"matching this JSON schema:\n{self.schema_text}"
        )


def _conversation(messages: object, function: str) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"{function} is decorated with @self_correct, so its first argument must be the "
            "conversation: a list of message dicts such as {'role': 'user', 'content': '...'}; "
            f"got {type(messages).__name__}"
        )
    copied: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise TypeError(
                f"{function}: message {i} of the conversation must be a dict with a 'role', "
                f"got {type(m).__name__}"
            )
        copied.append(dict(m))
    return copied


class _CorrectConfig(Generic[T]):
    __slots__ = ("function", "max_corrections", "messages_name", "parser")

    def __init__(self, fn: Callable[..., Any], parser: _Parser[T], max_corrections: int) -> None:
        self.function = function_name(fn)
        params = list(inspect.signature(fn).parameters.values())
        if not params or params[0].kind in (
            inspect.Parameter.VAR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            raise TypeError(
                f"@self_correct needs {self.function} to take the conversation (a list of "
                "message dicts) as its first argument"
            )
        self.messages_name = (
            None if params[0].kind is inspect.Parameter.VAR_POSITIONAL else params[0].name
        )
        self.parser = parser
        self.max_corrections = max_corrections

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[object, tuple[Any, ...], dict[str, Any]]:
        if args:
            return args[0], args[1:], kwargs
        if self.messages_name is not None and self.messages_name in kwargs:
            rest = dict(kwargs)
            return rest.pop(self.messages_name), (), rest
        raise TypeError(f"{self.function}() is missing the conversation, its first argument")


def _event(
    cfg: _CorrectConfig[Any], job: Job, kind: EventKind, number: int, maximum: int, **fields: Any
) -> Event:
    return make_event(kind, "self_correct", cfg.function, job, number, maximum, **fields)


def _correct_flow(
    cfg: _CorrectConfig[T],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    job: Job,
) -> Flow[T]:
    messages, rest, rest_kwargs = cfg.split(args, kwargs)
    conversation = _conversation(messages, cfg.function)
    call = 0
    while True:
        call += 1
        # Fresh copies each call: edits the function makes to its messages never compound.
        sent = [dict(m) for m in conversation]
        counted = job._replies_counted()
        reply = yield Call(fn, (sent, *rest), rest_kwargs)
        job._count_reply(reply, counted)
        result: T | CorrectionFailure
        try:
            text = reply_text(reply)
        except ReplyShapeError as e:
            text, result = e.text, _parse_failure(e.text, str(e))
        else:
            result = cfg.parser.parse(text)
        possible = call + max(0, cfg.max_corrections - job.corrections_used)
        if wants_debug_events():
            emit(_event(cfg, job, "attempt", call, possible))
        if not isinstance(result, CorrectionFailure):
            return result
        failure = result
        # As it can be sent: a lone surrogate in the reply would make the next request fail.
        conversation.append({"role": "assistant", "content": utf8_text(text)})
        if not job._take_correction(cfg.max_corrections):
            error = failure.error_type(
                failure.summary,
                raw_reply=text,
                errors=failure.errors,
                conversation=conversation,
                corrections_used=job.corrections_used,
                usage=job.usage,
            )
            emit(
                _event(
                    cfg,
                    job,
                    "exhausted",
                    call,
                    call,
                    error=f"{type(error).__name__}: {failure.summary}",
                )
            )
            raise error
        message = cfg.parser.correction(failure)
        conversation.append({"role": "user", "content": message})
        emit(
            _event(
                cfg,
                job,
                "correction",
                job.corrections_used,
                cfg.max_corrections,
                error=failure.summary,
                detail=message,
            )
        )


Reply: TypeAlias = "str | ChatCompletion | ChatCompletionMessage | Mapping[str, Any]"
"""What a function decorated with `@self_correct` returns: the model's reply."""


class SelfCorrecting(Protocol[T_co]):
    """The decorator `self_correct(schema=...)` returns; the call returns the schema's type."""

    @overload
    def __call__(
        self, fn: Callable[P, Awaitable[Reply]], /
    ) -> Callable[P, Coroutine[Any, Any, T_co]]: ...

    @overload
    def __call__(self, fn: Callable[P, Reply], /) -> Callable[P, T_co]: ...


def self_correct(*, schema: type[T], max_corrections: int = 2) -> SelfCorrecting[T]:
    """Parse and validate the decorated function's reply; correct a bad one in conversation.

    The function takes the conversation (a list of OpenAI-style message dicts) as its first
    argument and returns the model's reply: a `str`, an OpenAI `ChatCompletion` or a message
    (its text, or the arguments of its single tool call, is parsed). The decorated call
    returns the validated value.

    On a reply that does not parse or fails validation, while the job's budget lasts, the
    failed reply is appended as an assistant message and a correction as a user message
    (marked as an automated check; it states the errors and repeats the JSON schema), and the
    function is called again with the grown conversation. The caller's list is never mutated.
    Exceptions the function raises (timeouts, HTTP errors) propagate and cost no correction.

    Args:
        schema: The type of the value: a pydantic model, or any class or typing form
            `pydantic.TypeAdapter` accepts (`list[Item]`, a dataclass, a TypedDict,
            `Item | None`, ...). Not a function, a method or an instance.
        max_corrections: The job's correction budget, 0 to 10. The budget belongs to the job
            (the outermost refinekit call, or a `refinekit.job()` block): retries of an outer
            `@retry_on_low_quality` share it rather than reset it.

    Returns:
        A decorator; the decorated function returns the schema's type (awaitable for
        `async def`).

    Raises:
        ValueError: `max_corrections` is not an int from 0 to 10 (when decorating).
        TypeError: `schema` is not a type (a function, a method, an instance), pydantic
            cannot validate it, or the function takes no argument for the conversation (when
            decorating).
    """
    check_budget("max_corrections", max_corrections, MAX_CORRECTIONS_LIMIT)
    parser: _Parser[T] = _Parser(schema)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        cfg = _CorrectConfig(fn, parser, max_corrections)
        return wrap(fn, _correct_flow, cfg)

    return decorate
