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
from typing import Any, Protocol

import pydantic_core
from pydantic import BaseModel

from .._core.errtext import error_path
from .._core.stream_items import Final, Partial, Reset
from .._engine.events import emit, make_event
from .._engine.job import Job
from .._engine.stream_commands import Emit, StreamRead, listening, read_stream
from .._providers.sdk_streams import Delta, says_finish
from .._structure.parse import CorrectionFailure, Parser, parse_failure
from .._structure.partial_validation import PartialReader

__all__ = ["ReadOptions", "StreamedReply", "final", "read_reply", "void"]


class ReadOptions(Protocol):
    """What reading a streamed reply takes of `@self_correct`'s options."""

    @property
    def parser(self) -> Parser[Any]: ...
    @property
    def repair(self) -> bool: ...
    @property
    def early_abort(self) -> bool: ...


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

    def feed(self, text: str) -> tuple[bool, list[dict[str, Any]]]:
        """(whether a field completed and passed, the errors of the fields this text completed)."""
        if self.reader is None:
            return False, []
        progress = self.reader.feed(text)
        self.value = progress.value
        return progress.changed, list(progress.failures)


class _StructuredSink:
    """Feeds a streamed reply to the partial reader; emits partials, aborts on a failed field."""

    def __init__(
        self, options: ReadOptions, context: Mapping[str, Any] | None, number: int
    ) -> None:
        self.reader = _FieldReader(options.parser, context)
        self.tools = _FieldReader(options.parser, context)
        self.options = options
        self.number = number
        self.failed = False  # a field failed: the reply is void, whether it is read on or not
        self.emit = listening()
        self.failure: dict[str, Any] | None = None
        self.value: Any = None
        self.repairable: set[Any] = set()  # completed fields a repair may fix at the end
        self._shown: dict[str, tuple[Any, Any]] = {}  # field: (validated value, its JSON form)
        self.says_finish = False  # the stream's chunks say why it ended (an SDK's)

    def feed(self, delta: Delta) -> tuple[Sequence[Any], str | None]:
        self.says_finish = self.says_finish or says_finish(delta.raw)
        piece = delta.tool_arguments if delta.tool_index == 0 else ""
        reader = self.tools if piece else self.reader
        piece = piece or delta.text
        if not piece or (self.failed and not self.options.early_abort):
            return (), None  # read on to its end: parsed whole, its correction names all
        changed, failures = reader.feed(piece)
        for failure in failures:
            if self.options.repair and _repairable(failure):
                self.repairable.update(failure["loc"][:1])
                continue  # a lossless repair may fix it when the reply is parsed whole
            self.failed = True
            if not self.options.early_abort:
                return (), None
            self.failure = failure
            self.value = reader.value
            return (), f"{error_path(failure['loc'])}: {failure['msg']}"
        if changed and self.emit:
            return (Partial(self._json(reader.value), self.number),), None
        return (), None

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
) -> Any:
    """Read a streamed reply (a sub-flow): a `StreamedReply`, its usage counted in `job`.

    `options`: the decorator's (its parser, `repair` and `early_abort`).
    """
    sink = _StructuredSink(options, context, number)
    read: StreamRead = yield from read_stream(
        stream,
        job,
        sink,
        decorator="self_correct",
        function=function,
        number=number,
        maximum=maximum,
        prompt_chars=prompt_chars,
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
    return StreamedReply(read, text, failure, cut)


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
    reply: StreamedReply, job: Job, function: str, number: int, maximum: int, reason: str
) -> Any:
    """Tell the consumer that what it saw of this reply is void (a sub-flow): a `Reset`."""
    if listening():
        emit(make_event("reset", "self_correct", function, job, number, maximum, error=reason))
        yield Emit(Reset("correction", number, reason, reply.read.aborted is not None))


def final(value: Any, number: int) -> Any:
    """Hand the validated value to the consumer, marked final (a sub-flow): a `Final`."""
    if listening():
        yield Emit(Final(value, number))
