"""Partial validation of a streamed reply: each top-level member validated once it is closed.

A reply streamed as text deltas is fed, delta by delta, to one `PartialReader` per reply::

    reader = PartialReader(Invoice, context={"source": text})
    for delta in deltas:
        progress = reader.feed(delta)  # a Progress

What counts as a *member* is a top-level part of the reply's JSON value that the schema
gives a type of its own:

- an object's field, when the schema is a pydantic model, a dataclass or a `TypedDict`
  (matched by the key the JSON uses: the field's name, or its `validation_alias` when it is a
  plain string; the model's `validate_by_name` also accepts the name);
- an object's entry, when the schema is a `dict[K, V]` (the key validated as `K`, the value
  as `V`);
- an array's item, when the schema is a `list[X]` (a `RootModel` of one of those too).

A member is validated when its JSON value is *closed*: the `,` after it at the top level, or
the end of the whole value, has arrived. Nothing is validated before: no validator ever sees
a half-written string or number. It is validated alone, with the member's own type and
validators (`Annotated` ones, `@field_validator`s, a nested model's own validators), with
the schema's config, with pydantic's JSON validator on the member's text (so its value is
read exactly as `validate_json` of the whole reply reads it), and with `context=` (so
`InSource` checks it against the source). What needs the whole value waits for the end and is
not run here: model validators (`@model_validator`), a dataclass's `__post_init__`, missing
required fields. A field validator that reads other fields (`info.data`) sees `None` here; one
that raises anything other than a validation error on that is not judged on the partial (the
member is left out, no failure).

`feed(text)` returns a `Progress`:

- `value`: the partial value, the members completed so far and valid, each as validated
  (its field's type: a nested model instance, a `Decimal`, ...): a `dict` from field name to
  value for a model, a dataclass or a `TypedDict` (fields not yet seen, still being written,
  or that failed are absent: never a half value); a `dict` of the entries for a `dict[K, V]`;
  a `list` of the items for a `list[X]` (a prefix of the reply's items: those before the
  first that failed, or could not be judged; the later ones are still validated). None until
  the first member completes, and always None for a schema with no members (a `str`, a union
  at the top, a schema with a `mode="before"` / `"wrap"` model validator, which may rewrite
  the input), or for a reply whose top-level value is not the schema's (an array where an
  object is expected: the full parse may still unwrap it). Each `Progress`
  that changed holds its own copy (one made per completed member: the earlier ones are never
  changed under the caller); a feed that completed nothing may give the very `Progress` the
  feed before it gave (it says the same). It is never the final value: the whole reply is
  parsed at its end (with its repairs) by `Parser`, and that value is the reply's.
- `changed`: whether this feed completed a member that passed (a new partial is worth
  showing).
- `failures`: the errors of the members this feed completed, in order, as pydantic error dicts
  (`ValidationError.errors(include_url=False)`: `type`, `loc`, `msg`, `input`, `ctx`), the
  `loc` starting with the member's key as the JSON wrote it (its index for a list item).
  A key the schema forbids (`extra="forbid"`) is an `extra_forbidden` error.
- `readable`: False once the text is not (the start of) one JSON value pydantic reads: prose
  or a code fence before it, text after it, invalid JSON in a member (a trailing comma, single
  quotes, a comment, Python's `True`), a lone UTF-16 surrogate (pydantic reads no text that
  holds one, so the whole reply fails as the non-streamed one does). From then on nothing
  more is validated (the full parse, with its repairs, decides at the end).
- `closed`: whether the top-level value is complete.

Cost: each delta is scanned once (a regular expression jumps to the next quote, bracket or
comma; the text of a string is skipped at C speed), and a member's text is validated once,
when it closes; only the member being written is kept. So a feed costs what its own delta and
the members it closes cost, whatever the reply's length (`benchmarks/bench_streaming.py`),
plus, per member completed, a shallow copy of the partial value (a reference per member so
far: a reply of thousands of top-level members copies that many references per member).
The JSON itself is read by pydantic-core (`validate_json`, `from_json`), never by a parser of
ours: the scan only finds where a top-level member can have closed. Pydantic's partial modes
(`experimental_allow_partial`, `from_json(..., allow_partial=True)`) are not used: they read
the whole text so far at each call (a cost growing with the reply) and give the value being
written as if it were whole (a string cut mid-way), which is what this reader never shows.

The validators are built once per schema (a `TypeAdapter`, or a type: cached) and shared by
every reader of that schema.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import pydantic_core
from pydantic import TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

from .._core.schema import require_type

__all__ = ["PartialReader", "Progress"]

T = TypeVar("T")

_OUTSIDE = re.compile(r'[\[\]{}",]')  # what changes the scan's state outside a string
_INSIDE = re.compile(r'["\\]')  # what ends a string, or escapes its next character
_STARTS = frozenset('{["-0123456789tfn')  # how a JSON value can start
_SPACE = " \t\r\n"
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one: a pair is one character in a str


@dataclass(frozen=True)
class Progress(Generic[T]):
    """What one `PartialReader.feed` found (see the module's docstring for each field).

    Attributes:
        value: The members completed and valid so far (a dict or a list), None before any.
        changed: Whether this feed completed a member that passed its validation.
        failures: The pydantic error dicts of the members this feed completed and that failed.
        readable: False once the text is not (the start of) one JSON value.
        closed: Whether the top-level JSON value is complete.
    """

    value: Any
    changed: bool
    failures: list[dict[str, Any]] = field(default_factory=list)
    readable: bool = True
    closed: bool = False


Kind = Literal["fields", "entries", "items", "none"]


@dataclass(frozen=True)
class _Plan:
    """How a schema's top-level members are validated: by kind, by key."""

    kind: Kind
    fields: Mapping[str, tuple[str, SchemaValidator]] = field(default_factory=dict)
    """For "fields": the JSON key -> (the field's name, its validator)."""
    member: SchemaValidator | None = None
    """For "items" and "entries": the item's (the entry value's) validator; None: any."""
    key: SchemaValidator | None = None
    """For "entries": the key's validator; None: any."""
    extra: str = "ignore"
    """For "fields": what a key no field has is ("ignore", "allow", "forbid")."""
    whole: SchemaValidator | None = None
    """For "fields" with extra="forbid": the schema's validator, for the error it gives."""


_NONE = _Plan("none")


def _validator(schema: Mapping[str, Any], defs: list[Any], config: Any) -> SchemaValidator:
    core: Any = dict(schema)
    if defs:
        core = {"type": "definitions", "schema": core, "definitions": defs}
    return SchemaValidator(core, config)


def _keys(name: str, spec: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The JSON keys a field is read from (none for an alias path or choices)."""
    alias = spec.get("validation_alias")
    if alias is None:
        return [name]
    keys = [alias] if isinstance(alias, str) else []
    if config.get("validate_by_name") or config.get("populate_by_name"):
        keys.append(name)
    return keys


def _fields(
    specs: Iterator[tuple[str, Mapping[str, Any]]],
    defs: list[Any],
    config: Mapping[str, Any],
    extra: str,
    whole: SchemaValidator,
) -> _Plan:
    fields: dict[str, tuple[str, SchemaValidator]] = {}
    for name, spec in specs:
        if spec.get("init_only") or spec.get("init") is False:
            continue
        validator = _validator(spec["schema"], defs, config or None)
        for key in _keys(name, spec, config):
            fields.setdefault(key, (name, validator))
    return _Plan("fields", fields, extra=extra, whole=whole if extra == "forbid" else None)


def _plan(schema: Mapping[str, Any], defs: list[Any], whole: SchemaValidator) -> _Plan:
    """The members of a core schema's top level (unwrapping definitions and after-validators)."""
    kind = schema["type"]
    if kind == "definitions":
        return _plan(schema["schema"], [*defs, *schema["definitions"]], whole)
    if kind == "definition-ref":
        for found in defs:
            if found.get("ref") == schema["schema_ref"]:
                return _plan(found, defs, whole)
        return _NONE
    if kind == "function-after":  # a model validator: it needs the whole value, at the end
        return _plan(schema["schema"], defs, whole)
    if kind == "model":
        inner = schema["schema"]
        config = dict(schema.get("config") or {})
        if schema.get("root_model"):
            return _plan(inner, defs, whole)
        if inner.get("type") != "model-fields":
            return _NONE
        extra = inner.get("extra_behavior") or config.get("extra_fields_behavior") or "ignore"
        return _fields(iter(inner["fields"].items()), defs, config, extra, whole)
    if kind == "dataclass":
        inner = schema["schema"]
        config = dict(schema.get("config") or {})
        if inner.get("type") != "dataclass-args":
            return _NONE
        extra = inner.get("extra_behavior") or config.get("extra_fields_behavior") or "ignore"
        specs = ((spec["name"], spec) for spec in inner["fields"])
        return _fields(specs, defs, config, extra, whole)
    if kind == "typed-dict":
        config = dict(schema.get("config") or {})
        extra = schema.get("extra_behavior") or config.get("extra_fields_behavior") or "ignore"
        return _fields(iter(schema["fields"].items()), defs, config, extra, whole)
    if kind == "list":
        items = schema.get("items_schema")
        return _Plan("items", member=None if items is None else _validator(items, defs, None))
    if kind == "dict":
        keys, values = schema.get("keys_schema"), schema.get("values_schema")
        return _Plan(
            "entries",
            member=None if values is None else _validator(values, defs, None),
            key=None if keys is None else _validator(keys, defs, None),
        )
    return _NONE  # a scalar, a union, a before/wrap/plain validator that may rewrite the input


_plans: weakref.WeakKeyDictionary[TypeAdapter[Any], _Plan] = weakref.WeakKeyDictionary()
_by_type: dict[Any, TypeAdapter[Any]] = {}
_lock = threading.Lock()
_MAX_TYPES = 256


def _adapter(schema: Any) -> TypeAdapter[Any]:
    if isinstance(schema, TypeAdapter):
        return schema
    require_type(schema, "PartialReader(schema)")
    try:
        with _lock:
            found = _by_type.get(schema)
    except TypeError:  # an unhashable typing form: not cached
        return TypeAdapter(schema)
    if found is None:
        found = TypeAdapter(schema)
        with _lock:
            if len(_by_type) >= _MAX_TYPES:
                _by_type.pop(next(iter(_by_type)))
            _by_type[schema] = found
    return found


def _plan_of(adapter: TypeAdapter[Any]) -> _Plan:
    with _lock:
        plan = _plans.get(adapter)
    if plan is None:
        plan = _plan(adapter.core_schema, [], adapter.validator)  # type: ignore[arg-type]
        with _lock:
            _plans[adapter] = plan
    return plan


class PartialReader(Generic[T]):
    """One streamed reply's text, fed delta by delta; its top-level members validated as they close.

    See the module's docstring for what a member is, when it is validated and what `Progress`
    holds. Not thread-safe: one reader per reply, fed in order.
    """

    def __init__(self, schema: Any, *, context: Mapping[str, Any] | None = None) -> None:
        """A reader of replies of `schema` (a type, or its `pydantic.TypeAdapter`).

        Args:
            schema: The reply's type, as `@self_correct(schema=...)` takes it, or a
                `TypeAdapter` of it.
            context: The validation context each member is validated with (`InSource` reads
                its source there).

        Raises:
            TypeError: `schema` is not a type pydantic can validate.
        """
        self._plan = _plan_of(_adapter(schema))
        self._context = context
        self._state: Literal["start", "inside", "after", "scalar", "unreadable"] = "start"
        self._array = False  # the top-level value is an array (else an object)
        self._members = False  # its members are validated (it is what the schema reads)
        self._depth = 0
        self._string = False
        self._escape = False
        self._pieces: list[str] = []  # the member being written, so far
        self._size = 0  # its length
        self._key_end = -1  # where its key ends (an object's member), -1 before
        self._count = 0  # members closed
        self._value: dict[Any, Any] | list[Any] | None = None
        self._gap = False  # an item failed, or was not judged: later ones are not shown
        self._idle: Progress[T] = Progress(None, False)  # what a feed that completes nothing gives

    def feed(self, text: str) -> Progress[T]:
        """The reply's next text delta: what it completed (see `Progress`).

        Args:
            text: The next piece of the reply's text (an empty one changes nothing).

        Returns:
            The partial value so far and what this delta changed.
        """
        if not isinstance(text, str):
            raise TypeError(f"PartialReader.feed takes the reply's text (a str), got {text!r}")
        if not text.isascii() and _SURROGATE.search(text):
            self._state = "unreadable"
        closed: list[tuple[int, str]] = []
        trailing = bool(text) and self._state != "unreadable" and self._scan(text, closed)
        if not closed and not trailing:
            return self._unchanged()
        changed = False
        failures: list[dict[str, Any]] = []
        last = len(closed) - 1
        for i, (key_end, member) in enumerate(closed):
            if self._state == "unreadable":
                break
            final = i == last and self._state == "after"
            passed = self._member(key_end, member, failures, final=final)
            changed = changed or passed
        if trailing:
            self._state = "unreadable"  # text after the value: not one JSON value
        return Progress(
            self._value,
            changed,
            failures,
            readable=self._state != "unreadable",
            closed=self._state == "after",
        )

    def _unchanged(self) -> Progress[T]:
        """The `Progress` of a feed that completed nothing: the one before's, when it is the same.

        Most deltas complete nothing: their `Progress` is made once per state, not per delta
        (and again if its empty `failures` list was added to).
        """
        idle, readable, closed = self._idle, self._state != "unreadable", self._state == "after"
        if (
            idle.value is not self._value
            or idle.readable != readable
            or idle.closed != closed
            or idle.failures
        ):
            idle = self._idle = Progress(self._value, False, readable=readable, closed=closed)
        return idle

    # --- the scan -------------------------------------------------------------------------

    def _scan(self, text: str, closed: list[tuple[int, str]]) -> bool:
        """Find in `text` where top-level members end: (key's end, text) added to `closed`.

        Returns whether non-blank text follows the top-level value's end.
        """
        if self._state == "after":
            return bool(text.strip(_SPACE))
        if self._state == "scalar":
            return False
        i, n = 0, len(text)
        if self._state == "start":
            stripped = text.lstrip(_SPACE)
            if not stripped:
                return False
            first = stripped[0]
            if first not in "{[":
                # A scalar is read whole at the end, when the schema reads one; any other
                # start (prose, a code fence, a Python literal) is not what the schema reads.
                scalar = self._plan.kind == "none" and first in _STARTS
                self._state = "scalar" if scalar else "unreadable"
                return False
            self._array = first == "["
            self._members = self._plan.kind == ("items" if self._array else "fields") or (
                self._plan.kind == "entries" and not self._array
            )
            self._state = "inside"
            self._depth = 1
            i = n - len(stripped) + 1
        start = i  # where the member being written resumes in this delta
        while i < n:
            if self._escape:
                self._escape = False
                i += 1
                continue
            if self._string:
                found = _INSIDE.search(text, i)
                if found is None:
                    break
                i = found.end()
                if found.group() == "\\":
                    self._escape = True
                else:
                    self._string = False
                    if self._depth == 1 and not self._array and self._key_end < 0:
                        self._key_end = self._size + i - start
                continue
            found = _OUTSIDE.search(text, i)
            if found is None:
                break
            at = found.start()
            i = at + 1
            char = found.group()
            if char == '"':
                self._string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    closed.append(self._take(text[start:at]))
                    self._state = "after"
                    return bool(text[i:].strip(_SPACE))
            elif self._depth == 1:  # a comma between two members
                closed.append(self._take(text[start:at]))
                start = i
        self._pieces.append(text[start:])
        self._size += n - start
        return False

    def _take(self, tail: str) -> tuple[int, str]:
        """The member that just closed (with `tail`, its end in this delta); the next begins."""
        self._pieces.append(tail)
        member = "".join(self._pieces)
        self._pieces = []
        self._size = 0
        key_end, self._key_end = self._key_end, -1
        return key_end, member

    # --- a closed member ------------------------------------------------------------------

    def _member(
        self, key_end: int, member: str, failures: list[dict[str, Any]], *, final: bool
    ) -> bool:
        """Validate one closed member; whether it passed (and joined the value)."""
        index = self._count
        self._count += 1
        key: Any
        if self._array:
            body, key_text, key = member, None, index
        else:
            if key_end < 0:  # no key: `{}` is fine, `{"a": 1,}` and `{1: 2}` are not JSON
                if member.strip(_SPACE) or index:
                    self._state = "unreadable"
                return False
            key_text = member[:key_end]
            body = member[key_end:].lstrip(_SPACE)
            if not body.startswith(":"):
                self._state = "unreadable"
                return False
            body = body[1:]
            try:
                key = pydantic_core.from_json(key_text)
            except (ValueError, TypeError):  # TypeError: a text pydantic cannot take
                self._state = "unreadable"
                return False
        if not body.strip(_SPACE):  # `[1,]`, `{"a": }`: not JSON
            if not (self._array and not index and final):  # `[]` is fine
                self._state = "unreadable"
            return False
        if not self._members:
            return False
        passed = self._validate(key, key_text, body, failures)
        self._gap = self._gap or not passed
        return passed and not (self._array and self._gap)

    def _validate(
        self, key: Any, key_text: str | None, body: str, failures: list[dict[str, Any]]
    ) -> bool:
        plan = self._plan
        name: Any = key
        validator = plan.member
        if plan.kind == "fields":
            found = plan.fields.get(key)
            if found is None:
                return self._extra(key, key_text, body, failures)
            name, validator = found
        elif plan.kind == "entries" and plan.key is not None:
            try:
                name = plan.key.validate_json(key_text or '""', context=self._context)
            except ValidationError as e:
                return self._failed(e, (key, "[key]"), failures)
            except Exception:  # a validator that needs the whole value: not judged now
                return False
        try:
            if validator is None:
                value = pydantic_core.from_json(body)
            else:
                value = validator.validate_json(body, context=self._context)
        except ValidationError as e:
            return self._failed(e, (key,), failures)
        except ValueError:  # from_json: not JSON
            self._state = "unreadable"
            return False
        except Exception:  # a validator that needs the whole value (`info.data`): not judged now
            return False
        self._add(name, value)
        return True

    def _extra(
        self, key: Any, key_text: str | None, body: str, failures: list[dict[str, Any]]
    ) -> bool:
        """A key no field reads: ignored, kept (extra="allow") or an `extra_forbidden`."""
        try:
            value = pydantic_core.from_json(body)
        except (ValueError, TypeError):  # TypeError: a text pydantic cannot take
            self._state = "unreadable"
            return False
        if self._plan.extra == "allow":
            self._add(key, value)
            return True
        if self._plan.extra == "forbid" and self._plan.whole is not None:
            try:
                self._plan.whole.validate_json(f"{{{key_text}:{body}}}", context=self._context)
            except ValidationError as e:
                found = [
                    dict(error)
                    for error in e.errors(include_url=False)
                    if error["type"] == "extra_forbidden" and error["loc"][:1] == (key,)
                ]
                failures.extend(found[:1])
            except Exception:  # a validator of the whole that needs all of it: not judged now
                pass
        return False

    def _failed(
        self, error: ValidationError, prefix: tuple[Any, ...], failures: list[dict[str, Any]]
    ) -> bool:
        found = error.errors(include_url=False)
        if any(e["type"] == "json_invalid" for e in found):
            self._state = "unreadable"
            return False
        for e in found:
            failure = dict(e)
            failure["loc"] = (*prefix, *e["loc"])
            failures.append(failure)
        return False

    def _add(self, name: Any, value: Any) -> None:
        """A copy of the value with the member added: earlier `Progress` values never change."""
        if isinstance(self._value, dict):
            self._value = {**self._value, name: value}
        elif isinstance(self._value, list):
            if not self._gap:  # a list's partial is a prefix of its items: no holes
                self._value = [*self._value, value]
        elif self._array:
            if not self._gap:
                self._value = [value]
        else:
            self._value = {name: value}
