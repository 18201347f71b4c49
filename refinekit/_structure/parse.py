"""Reading a model's reply as a schema's value: strict JSON, lossless repairs, the failure.

`Parser` is `@self_correct`'s reader: pydantic's JSON validator first (the happy path costs
what pydantic costs), then the candidates a reply may hold (the whole text repaired, a code
fence, JSON inside prose, each with the syntax repairs), then the value repairs; what fails is
a `CorrectionFailure`, which the correction turn is built from.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import (
    PydanticInvalidForJsonSchema,
    PydanticSchemaGenerationError,
    PydanticUndefinedAnnotation,
    PydanticUserError,
)

from .._core.errors import CorrectionExhausted, JsonParseError, ResponseValidationError
from .._core.errtext import error_path
from .._core.schema import require_type
from .grounding import grounded_json_schema, grounded_nodes
from .repair import balanced_end, loads_raw, syntax_fixes, value_fixes
from .template import Template

__all__ = ["CorrectionFailure", "Parsed", "Parser", "parse_failure", "python_json"]

T = TypeVar("T")


_MAX_PROSE_CANDIDATES = 16
_OPENERS = re.compile(r"[{\[]")


class CorrectionFailure:
    """Why one reply was unusable, with what is needed to explain it to the model."""

    __slots__ = (
        "detailed",
        "errors",
        "parsed",
        "placeholders",
        "prose",
        "shape_error",
        "summary",
        "text",
        "value",
    )

    def __init__(
        self,
        summary: str,
        errors: list[dict[str, Any]],
        *,
        text: str,
        parsed: bool,
        value: Any = None,
        prose: bool = False,
        shape_error: str | None = None,
        placeholders: tuple[str, ...] = (),
    ) -> None:
        self.summary = summary
        self.errors = errors
        self.text = text
        self.parsed = parsed  # a JSON value was read (and failed validation)
        self.value = value  # that value, as Python's json reads it
        self.prose = prose  # it was found inside prose or a code fence
        self.shape_error = shape_error
        self.placeholders = placeholders
        self.detailed: list[dict[str, Any]] = errors  # with pydantic's ctx, to explain them

    @property
    def error_type(self) -> type[CorrectionExhausted]:
        return ResponseValidationError if self.parsed or self.placeholders else JsonParseError


def python_json(text: str) -> tuple[bool, Any]:
    """(True, value) when Python's json reads `text` (for explaining, never for returning).

    A number Python will not convert (more digits than its limit) is kept as written.
    """
    try:
        return True, json.loads(text)
    except RecursionError:
        return False, None
    except ValueError:
        try:
            return True, loads_raw(text)
        except (ValueError, RecursionError):
            return False, None


def _validation_failure(
    error: ValidationError, text: str, *, prose: bool = False
) -> CorrectionFailure:
    errors = error.errors(include_url=False, include_context=False)
    n = len(errors)
    first = errors[0]
    plural = "s" if n > 1 else ""
    summary = f"{n} validation error{plural}, first: {error_path(first['loc'])}: {first['msg']}"
    _, value = python_json(text)  # pydantic read it: a validation failure, not a parse one
    failure = CorrectionFailure(
        summary, [dict(e) for e in errors], text=text, parsed=True, value=value, prose=prose
    )
    failure.detailed = [dict(e) for e in error.errors(include_url=False)]
    return failure


def parse_failure(
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
    return CorrectionFailure(summary, errors, text=text, parsed=False)


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


def _nested_too_deeply(error: ValidationError) -> bool:
    """Whether pydantic's parser refused the text for its depth (past 200 levels)."""
    first = error.errors(include_url=False)[0]
    return first["type"] == "json_invalid" and "recursion limit" in str(first["msg"])


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


def _prose_json(text: str) -> list[str]:
    """JSON values found inside prose, in order (at most 16 tried)."""
    found: list[str] = []
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


def _prose_broken(text: str) -> list[str]:
    """Bracketed spans inside prose that did not decode as JSON (for the syntax repairs).

    From each `{` or `[` (at most 16) where no JSON value starts, the span to its matching
    bracket, strings skipped: `Here: {"a": 1,} ok` gives `{"a": 1,}`.
    """
    found: list[str] = []
    decoder = json.JSONDecoder()
    end = tried = 0
    for match in _OPENERS.finditer(text):
        start = match.start()
        if start < end:
            continue
        if tried == _MAX_PROSE_CANDIDATES:
            break
        tried += 1
        try:
            decoder.raw_decode(text, start)
        except RecursionError:  # nested past what any schema reads: no repair can help
            continue
        except ValueError:
            close = balanced_end(text, start)
            if close is not None:
                found.append(text[start:close])
                end = close
    return list(dict.fromkeys(found))


Parsed = tuple[Any, tuple[str, ...]]
"""A validated value and the repairs it took (empty: the reply was strict JSON)."""


class Parser(Generic[T]):
    __slots__ = ("adapter", "grounded", "json_schema", "schema", "template", "validate_json")

    def __init__(self, schema: Any) -> None:
        require_type(schema, "self_correct(schema=...)")
        try:
            self.adapter: TypeAdapter[T] = TypeAdapter(schema)
            # pydantic-core's validator itself: what `TypeAdapter.validate_json` calls, minus
            # its Python frame, so parsing a good reply costs exactly what pydantic costs.
            self.validate_json: Callable[..., T] = self.adapter.validator.validate_json
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
        self.schema = schema
        try:
            self.json_schema: dict[str, Any] | None = self.adapter.json_schema()
        except (PydanticInvalidForJsonSchema, PydanticUserError):
            self.json_schema = None
        self.template = None if self.json_schema is None else Template(self.json_schema)
        # the same schema with its grounded fields marked, for the correction's template
        self.grounded: dict[str, Any] | None = None
        if self.json_schema is not None:
            marked = grounded_json_schema(schema)
            self.grounded = marked if any(True for _ in grounded_nodes(marked)) else None

    def parse(
        self, text: str, *, repair: bool, context: Mapping[str, Any] | None = None
    ) -> Parsed | CorrectionFailure:
        """The reply's value, or why it is unusable.

        Strict JSON first (what a good reply costs: one pydantic call); then, with `repair`,
        the lossless repairs of `repair` in turn.
        """
        validate = (
            self.validate_json
            if context is None
            else functools.partial(self.validate_json, context=context)
        )
        try:
            return validate(text), ()
        except ValidationError as e:
            if not _json_invalid(e):
                if repair:
                    fixed = _value_fixes(text, e, validate)
                    if fixed is not None:
                        return fixed
                return _validation_failure(e, text)
            invalid_json = str(e.errors(include_url=False)[0]["msg"])
        except RecursionError:
            return parse_failure(text, "the JSON is nested too deeply")
        # Not JSON as it stands. The first candidate that validates wins; if none does, the
        # errors reported are those of the longest JSON that failed validation (a "[1]"
        # citation in the prose is not the answer).
        rejected: tuple[int, ValidationError, str, bool] | None = None
        too_deep = False  # a candidate (a fenced block, JSON in prose) nested too deeply
        for candidate, fixes, prose in _candidates(text):
            if not repair:
                # Not repaired, but still read: it explains the failure best.
                try:
                    validate(candidate)
                except ValidationError as e:
                    if not _json_invalid(e) and (rejected is None or len(candidate) > rejected[0]):
                        rejected = (len(candidate), e, candidate, prose)
                    too_deep = too_deep or _nested_too_deeply(e)
                except RecursionError:
                    too_deep = True
                else:
                    return _unrepaired(text, candidate, fixes)
                continue
            try:
                return validate(candidate), tuple(fixes)
            except ValidationError as e:
                if _json_invalid(e):
                    too_deep = too_deep or _nested_too_deeply(e)
                    continue
                value_fixed = _value_fixes(candidate, e, validate)
                if value_fixed is not None:
                    return value_fixed[0], (*fixes, *value_fixed[1])
                if rejected is None or len(candidate) > rejected[0]:
                    rejected = (len(candidate), e, candidate, prose)
            except RecursionError:
                too_deep = True
                continue
        if rejected is not None:
            return _validation_failure(rejected[1], rejected[2], prose=rejected[3])
        if too_deep and "recursion limit" not in invalid_json:
            # what the model must fix is the JSON's depth, not the fence or prose around it
            return parse_failure(text, "the JSON is nested too deeply")
        return parse_failure(text, invalid_json=invalid_json)

    def placeholders(self, value: Any, text: str) -> tuple[str, ...]:
        """Template placeholders (`"<string>"`) the validated value holds instead of values."""
        if self.template is None or '"<' not in text:
            return ()
        found: list[str] = []
        _strings(self.adapter.dump_python(value, mode="json"), self.template.placeholders, found)
        return tuple(dict.fromkeys(found))


def _strings(value: Any, wanted: set[str], found: list[str], depth: int = 0) -> None:
    if depth > 64:
        return
    if isinstance(value, str):
        if value in wanted:
            found.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _strings(v, wanted, found, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, wanted, found, depth + 1)


def _unrepaired(text: str, candidate: str, fixes: list[str]) -> CorrectionFailure:
    """A reply that a repair would have made valid, with `repair=False`: still a failure."""
    what = ", ".join(fixes)
    summary = f"the reply is not strict JSON (repair=False; it needed: {what})"
    _, value = python_json(candidate)
    return CorrectionFailure(
        summary,
        [{"msg": summary}],
        text=text,
        parsed=False,
        value=value,
        prose=bool({"prose", "code_fence"} & set(fixes)),
    )


def _value_fixes(
    text: str, error: ValidationError, validate: Callable[[str], Any]
) -> Parsed | None:
    try:
        raw = loads_raw(text)
    except (ValueError, RecursionError):
        return None
    fixed = value_fixes(raw, error, validate)
    return None if fixed is None else (fixed[0], tuple(fixed[1]))


def _candidates(text: str) -> Iterator[tuple[str, list[str], bool]]:
    """Texts that may hold the reply's JSON: (text, repairs it took, found inside prose)."""
    fixed, fixes = syntax_fixes(text)
    if fixes:
        yield fixed, fixes, False
    for block in _fenced_blocks(text):
        yield block, ["code_fence"], True
        fixed, fixes = syntax_fixes(block)
        if fixes:
            yield fixed, ["code_fence", *fixes], True
    for found in _prose_json(text):
        yield found, ["prose"], True
    for span in _prose_broken(text):
        fixed, fixes = syntax_fixes(span)
        if fixes:
            yield fixed, ["prose", *fixes], True
