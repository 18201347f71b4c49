"""`@self_correct` over a streamed reply: partial values as fields complete, early abort.

`correct`'s flow calls `read_reply` when the function returned a stream (see
`refinekit._engine.stream_commands`): the reply's text (or its single tool call's arguments) is fed
to a partial reader delta by delta; each time a field completes and passes its own validation
a `Partial` is emitted; when a completed field fails (a wrong type, a `Literal` outside its
choices, an `InSource` refusal, a field validator) and no lossless repair could fix it at the
end, the stream is closed at once and the failure is the reply's, as if the whole reply had
failed with it; with `early_abort=False` the reply is read on to its end (no more partials)
and parsed whole, so its failure names every field that failed. A stream read to its end is
parsed whole by the same `Parser` as any reply, so the final value and its repairs are the
non-streamed path's. A stream that broke before its end is a reply cut off (`finish_reason`
"length": a `cut_off` failure), whatever its text; so is an SDK's stream (OpenAI's chunks,
Anthropic's events) that ended without a finish reason (the connection closed where a body
without a length ends) when its text is not a whole JSON value: its correction says it was
cut off, not that the model wrote no JSON.

`void` tells the consumer that what it saw of a failed reply is void (a `Reset`), before the
correction turn is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import pydantic_core
from pydantic import BaseModel

from .._core.errtext import error_path
from .._core.stream_items import Final, Partial, Reset
from .._engine.events import emit, make_event
from .._engine.job import Job
from .._engine.stream_commands import Emit, StreamRead, listening, read_stream
from .._providers import anthropic as anthropic_wire
from .._providers import openai as openai_wire
from .._providers.sdk_streams import Delta, says_finish
from .._structure.parse import CorrectionFailure, Parsed, Parser, parse_failure, python_json
from .._structure.partial_validation import PartialReader
from .._structure.resume import ResumePoint, ResumeWay, continues, cut

__all__ = [
    "AbortMode",
    "ReadOptions",
    "StreamedReply",
    "final",
    "read_reply",
    "resume_point",
    "void",
]

AbortMode = Literal["off", "restart", "resume", "prefill", "restate"]
"""`early_abort` as one word: False is "off", True "restart"; the others resume."""

_ABORT_MODES: dict[object, AbortMode] = {
    False: "off",
    True: "restart",
    "resume": "resume",
    "prefill": "prefill",
    "restate": "restate",
}


def abort_mode(value: object) -> AbortMode | None:
    return _ABORT_MODES.get(value) if type(value) in (bool, str) else None


class ReadOptions(Protocol):
    """What reading a streamed reply takes of `@self_correct`'s options."""

    @property
    def parser(self) -> Parser[Any]: ...
    @property
    def repair(self) -> bool: ...
    @property
    def abort_mode(self) -> AbortMode: ...


# Error types a lossless value repair may fix at the end (`repair.value_fixes`): no abort.
def _repairable(error: Mapping[str, Any]) -> bool:
    kind = error.get("type")
    if kind == "string_type":  # number_to_string: a JSON number where a string is expected
        value = error.get("input")
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return kind == "extra_forbidden"  # wrapper: one object around the value


class _FieldReader:
    """The partial reader of a pydantic model schema's reply; other schemas wait for the end.

    `refinekit._structure.partial_validation.PartialReader` validates each top-level field once its
    JSON value has closed, at a cost per delta that does not grow with the reply.
    """

    def __init__(self, parser: Parser[Any], context: Mapping[str, Any] | None) -> None:
        schema = parser.schema
        model = isinstance(schema, type) and issubclass(schema, BaseModel)
        self.reader: PartialReader[Any] | None = (
            PartialReader(parser.adapter, context=context) if model else None
        )
        self.value: Any = None
        self.parser = parser
        self.context = context

    def fresh(self) -> _FieldReader:
        """A reader of the same schema that has read nothing."""
        return _FieldReader(self.parser, self.context)

    def feed(self, text: str) -> tuple[bool, Sequence[dict[str, Any]]]:
        """(whether a field completed and passed, the errors of the fields this text completed).

        The errors are the reader's own list: read them, never change them.
        """
        if self.reader is None:
            return False, ()
        progress = self.reader.feed(text)
        self.value = progress.value
        return progress.changed, progress.failures


class _StructuredSink:
    """Feeds a streamed reply to the partial reader; emits partials, aborts on a failed field.

    Resuming (`resume`): under prefill, the reader has read the kept prefix before the first
    delta, so the partials go on from the kept fields; the continuation's start is held
    until it shows whether the server continued the prefix or wrote the object again (read
    then as a whole reply). A reply written whole (restated, or a prefill the server did not
    continue) fails at the first kept field it changes.
    """

    def __init__(
        self,
        options: ReadOptions,
        context: Mapping[str, Any] | None,
        number: int,
        resume: ResumePoint | None = None,
    ) -> None:
        self.reader = _FieldReader(options.parser, context)
        self.tools = _FieldReader(options.parser, context)
        self.options = options
        self.aborts = options.abort_mode != "off"
        self.number = number
        self.failed = False  # a field failed: the reply is void, whether it is read on or not
        self.emit = listening()
        self.failure: dict[str, Any] | None = None
        self.value: Any = None
        self.repairable: set[Any] = set()  # completed fields a repair may fix at the end
        self._shown: dict[str, tuple[Any, Any]] = {}  # field: (validated value, its JSON form)
        self.says_finish = False  # the stream's chunks say why it ended (an SDK's)
        self.wire: str | None = None  # "anthropic", "openai" or "other": the first chunk's
        self.resume = resume
        self.continued: bool | None = False  # None: a prefill's start not yet decided
        self._held = ""
        self._unchecked: dict[str, Any] = {}  # kept fields a whole reply must repeat
        self._changed_names: set[str] = set()  # kept fields it changed: not validated
        if resume is not None and resume.way == "prefill":
            self.continued = None
            self.reader.feed(resume.prefix)  # the kept fields, validated again (they pass)
        elif resume is not None:
            self._unchecked = dict(resume.kept)

    def feed(self, delta: Delta) -> tuple[Sequence[Any], str | None]:
        if self.wire is None:
            self.wire = _wire_of(delta.raw)
        if not self.says_finish:
            self.says_finish = says_finish(delta.raw)
        piece = delta.tool_arguments if delta.tool_index == 0 else ""
        reader = self.tools if piece else self.reader
        piece = piece or delta.text
        if not piece or (self.failed and not self.aborts):
            return (), None  # read on to its end: parsed whole, its correction names all
        if self.continued is None and reader is self.reader:
            assert self.resume is not None
            self._held += piece
            decided = continues(self._held, self.resume)
            if decided is None:
                return (), None
            self.continued = decided
            piece, self._held = self._held, ""
            if not decided:  # the server wrote the object again: a whole reply, checked
                self.reader = reader = self.reader.fresh()
                self._unchecked = dict(self.resume.kept)
        changed, failures = reader.feed(piece)
        if self._unchecked and isinstance(reader.value, Mapping):
            failures = [*failures, *self._changed(reader.value)]
        for failure in failures:
            if self.options.repair and _repairable(failure):
                self.repairable.update(failure["loc"][:1])
                continue  # a lossless repair may fix it when the reply is parsed whole
            self.failed = True
            if not self.aborts:
                return (), None
            self.failure = failure
            self.value = reader.value
            if self._changed_names and isinstance(self.value, Mapping):
                self.value = {k: v for k, v in self.value.items() if k not in self._changed_names}
            return (), f"{error_path(failure['loc'])}: {failure['msg']}"
        if changed and self.emit:
            return (Partial(self._json(reader.value), self.number),), None
        return (), None

    def _changed(self, value: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The errors of the kept fields `value` now holds with another value."""
        assert self.resume is not None
        errors = []
        for name in [n for n in self._unchecked if n in value]:
            kept = self._unchecked.pop(name)
            if value[name] != kept:
                self._changed_names.add(name)
                errors.append(
                    changed_error(self.resume.keys[name], self.resume.shown[name], value[name])
                )
        return errors

    def _json(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """A partial's fields in their JSON form (a `Decimal` a str, a model a dict, ...).

        Each field is converted once, when it completes: the cost per partial is a reference
        per field, as the reader's own copy.
        """
        shown: dict[str, Any] = {}
        for name, field in value.items():
            known = self._shown.get(name)
            if known is None or known[0] is not field:
                known = self._shown[name] = (field, _json_form(field))
            shown[name] = known[1]
        return shown


def _json_form(value: Any) -> Any:
    """`value` as pydantic writes it in JSON; a type pydantic cannot write stays as it is."""
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError:  # an arbitrary type the schema allows
        return value


@dataclass
class StreamedReply:
    """A streamed reply as `@self_correct`'s flow reads it: its text, and how it ended."""

    read: StreamRead
    text: str
    failure: CorrectionFailure | None
    """Why it failed before it was parsed whole (a failed field, a break); None: parse it."""
    cut: bool = False
    """Whether it ended without a finish reason before its JSON was whole (cut off)."""
    validated: Mapping[str, Any] | None = None
    """When a field failed: the fields validated before it, by name (as the reader had them)."""
    wire: str | None = None
    """"anthropic", "openai" (api.openai.com or Azure's), "compatible" or "other"."""
    shown: frozenset[str] = frozenset()
    """The fields a `Partial` showed of it."""
    resumed: ResumePoint | None = None
    """The point it resumed from (its text holds the kept prefix when it continued it)."""

    @property
    def finish_reason(self) -> str | None:
        """The stream's finish reason ("length" for one that broke or was cut before its end)."""
        if self.read.interrupted is not None or self.cut:
            return "length"
        return self.read.finish_reason


def read_reply(
    stream: Any,
    job: Job,
    options: ReadOptions,
    *,
    context: Mapping[str, Any] | None,
    function: str,
    number: int,
    maximum: int,
    prompt_chars: int,
    resume: ResumePoint | None = None,
) -> Any:
    """Read a streamed reply (a sub-flow): a `StreamedReply`, its usage counted in `job`.

    `options`: the decorator's (its parser, `repair` and `early_abort`); `resume`: the point
    this request resumes from (its reply's text is then the prefix and what continued it).
    """
    sink = _StructuredSink(options, context, number, resume)
    read: StreamRead = yield from read_stream(
        stream,
        job,
        sink,
        decorator="self_correct",
        function=function,
        number=number,
        maximum=maximum,
        prompt_chars=prompt_chars,
        kept=None if resume is None else len(resume.kept),
    )
    tool_text = read.tool_text()
    if len(read.tools) > 1:
        text = read.text
        failure: CorrectionFailure | None = parse_failure(
            text, f"the reply made {len(read.tools)} tool calls; exactly one was expected"
        )
        assert failure is not None
        failure.shape_error = failure.summary
    else:
        text = tool_text if tool_text is not None else read.text
        failure = None
        if resume is not None and tool_text is None and sink.continued is not False:
            text = resume.prefix + text  # a continuation (or nothing yet): the kept prefix first
    if sink.failure is not None:
        completed = set(sink.value) if isinstance(sink.value, Mapping) else set()
        failure = _field_failure(text, sink.failure, completed | sink.repairable)
    elif read.interrupted is not None:
        failure = parse_failure(
            text, f"the reply stopped before its end: {read.interrupted.reason}"
        )
    cut = False
    if failure is None and read.complete and read.finish_reason is None and sink.says_finish:
        # no finish reason, no [DONE]: the connection closed; if the JSON is not whole, the
        # reply was cut off there (a complete reply is taken as it is)
        parsed = options.parser.parse(text, repair=options.repair, context=context)
        if isinstance(parsed, CorrectionFailure) and not parsed.parsed and parsed.value is None:
            failure = parse_failure(text, f"the reply stopped before its end: {_NO_FINISH}")
            cut = True
    validated = sink.value if sink.failure is not None else None
    if failure is not None and sink.failure is None and not read.tools:  # it stopped midway
        validated = sink.reader.value  # the fields it completed stand
    if failure is not None and validated is None and sink.reader.reader is not None:
        validated = {}  # a model's reply that failed before any field passed: nothing kept
    wire = sink.wire
    if wire == "openai":
        wire = _openai_host(stream)
    shown = frozenset(sink._shown)
    return StreamedReply(read, text, failure, cut, validated, wire, shown, resume)


_NO_FINISH = "the stream ended without a finish reason (the connection closed before its end)"


def _field_failure(text: str, error: dict[str, Any], completed: set[Any]) -> CorrectionFailure:
    """A completed field's failure as the reply's validation failure (cut where it stopped).

    Its value is the reply's own JSON of the fields that completed before the failed one and
    of the failed one: never what the text had begun of a field after it (`"total": 87` of
    872.00, which a template would otherwise send back as if right).
    """
    summary = f"1 validation error, first: {error_path(error['loc'])}: {error['msg']}"
    plain = {k: v for k, v in error.items() if k != "ctx"}
    try:
        whole = pydantic_core.from_json(text.strip(), allow_partial=True)
    except (ValueError, TypeError):  # TypeError: a text pydantic cannot take (a lone surrogate)
        whole = None
    value: Any = None
    if isinstance(whole, dict):
        loc = error.get("loc") or ()
        done = completed | set(loc[:1])
        value = {k: v for k, v in whole.items() if k in done}
    failure = CorrectionFailure(summary, [plain], text=text, parsed=True, value=value)
    failure.detailed = [error]
    return failure


def void(
    reply: StreamedReply,
    job: Job,
    function: str,
    number: int,
    maximum: int,
    reason: str,
    resume: ResumePoint | None = None,
) -> Any:
    """Tell the consumer that what it saw of this reply is void (a sub-flow): a `Reset`.

    Resumed from `resume`, the kept fields stand: no `Reset` when they are all it showed,
    else one that names them (`Reset.kept`).
    """
    kept = () if resume is None else tuple(resume.kept)
    shown = set(reply.shown) | (set() if reply.resumed is None else set(reply.resumed.kept))
    if resume is not None and shown <= set(kept):
        return
    if listening():
        emit(make_event("reset", "self_correct", function, job, number, maximum, error=reason))
        yield Emit(Reset("correction", number, reason, reply.read.aborted is not None, kept))


def resume_point(reply: StreamedReply, mode: AbortMode, parser: Parser[Any]) -> ResumePoint | None:
    """Where the next request resumes a reply whose field failed (None: it starts again).

    `mode` "resume" picks the way by the endpoint: prefill for Anthropic's and for an
    OpenAI-compatible server other than OpenAI's own (llama.cpp's, vLLM's, Ollama's, ...),
    restated for OpenAI's API (and Azure's) and for streams that do not say (LangChain's,
    plain text).
    """
    if mode not in ("resume", "prefill", "restate") or not isinstance(reply.validated, Mapping):
        return None
    if reply.read.tools:  # a tool call's arguments: no assistant text to continue
        way: ResumeWay = "restate"
    elif mode == "resume":
        way = "prefill" if reply.wire in ("anthropic", "compatible") else "restate"
    else:
        way = "prefill" if mode == "prefill" else "restate"
    names = _names_of(parser)
    validated = reply.validated
    keys = frozenset(k for k, name in names.items() if name in validated)
    text = reply.text if not reply.read.tools else (reply.read.tool_text() or "")
    point = cut(text, keys)
    if point is None:
        return None
    kept = {names[k]: validated[names[k]] for k in point.keys}
    return ResumePoint(
        way=way,
        prefix=point.prefix,
        kept=kept,
        shown={name: _json_form(value) for name, value in kept.items()},
        keys={names[k]: k for k in point.keys},
        key=point.key,
    )


def _names_of(parser: Parser[Any]) -> dict[str, str]:
    """A pydantic model's JSON keys (its fields' names and plain-string aliases) to names."""
    schema = parser.schema
    names: dict[str, str] = {}
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        for name, info in schema.model_fields.items():
            names[name] = name
            for alias in (info.alias, info.validation_alias):
                if isinstance(alias, str):
                    names[alias] = name
    return names


def changed_error(key: str, kept: Any, value: Any) -> dict[str, Any]:
    """The error of a reply that changed a kept field (a failure of its own)."""
    shown = pydantic_core.to_json(kept).decode()
    return {
        "type": "kept_changed",
        "loc": (key,),
        "msg": f"this field was already right as {shown} and must stay so",
        "input": _json_form(value),
    }


def _wire_of(raw: Any) -> str:
    if anthropic_wire.is_event(raw):
        return "anthropic"
    if openai_wire.is_chunk(raw) or openai_wire.is_helper_event(raw):
        return "openai"
    return "other"


_OPENAI_HOSTS = ("api.openai.com", ".openai.azure.com")


def _openai_host(stream: Any) -> str:
    """The wire of an OpenAI-shaped stream: "openai" (OpenAI's, Azure's) or "compatible"."""
    response = getattr(stream, "response", None)
    url = getattr(response, "url", None)
    host = str(getattr(url, "host", "") or "")
    if not host or host == "api.openai.com" or host.endswith(_OPENAI_HOSTS[1]):
        return "openai"
    return "compatible"


def final(value: Any, number: int) -> Any:
    """Hand the validated value to the consumer, marked final (a sub-flow): a `Final`."""
    if listening():
        yield Emit(Final(value, number))


def kept_check(result: Parsed, resume: ResumePoint, text: str) -> Parsed | CorrectionFailure:
    """A valid reply of a resumed request, refused when it changed a field kept from before."""
    value = result[0]
    for name, kept in resume.kept.items():
        now = getattr(value, name, kept)
        if now != kept:
            error = changed_error(resume.keys[name], resume.shown[name], now)
            summary = f"1 validation error, first: {resume.keys[name]}: {error['msg']}"
            _, parsed = python_json(text)
            failure = CorrectionFailure(summary, [error], text=text, parsed=True, value=parsed)
            failure.detailed = [error]
            return failure
    return result
