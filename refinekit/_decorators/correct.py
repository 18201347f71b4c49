"""`@self_correct`: parse and validate a reply; a failure becomes a correction turn."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import (
    Any,
    ClassVar,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeVar,
    cast,
    overload,
)

from .._core.errors import ReplyShapeError
from .._core.errtext import correction_text, utf8_text
from .._core.stream_items import Final, Partial, Reset
from .._core.tiers import Escalation, EscalationLike, ModelRefused
from .._core.types import Verdict
from .._engine.attempt import attempt_step
from .._engine.budget import without_attempts
from .._engine.decorated import AsyncStreamingFunction, StreamingFunction
from .._engine.events import Event, EventKind, emit, make_event, wants_debug_events
from .._engine.flow import Call, Flow
from .._engine.grounded import pinning
from .._engine.job import Job, check_budget_option
from .._engine.ladder import Escalate, Ladder, Rung, Tally, climb, tier_step
from .._engine.ledger import take_correction, tier_corrections
from .._engine.options import Args, Fn, Kwargs, Options
from .._engine.outcome import Record
from .._engine.policy import check_budget
from .._engine.prices import Budget
from .._engine.request import function_name
from .._engine.reserve import Reservation
from .._engine.stream_commands import StreamLike, SyncStreamLike, is_streamed
from .._engine.wrapper import wrap
from .._providers.replies import Reply, finish_reason_of, refusal_of, reply_text
from .._structure.corrections import CHECK_MARKER, CorrectionRequest, default_correction
from .._structure.parse import CorrectionFailure, Parsed, Parser, parse_failure
from .._structure.resume import ResumePoint
from .correct_partials import (
    AbortMode,
    StreamedReply,
    abort_mode,
    final,
    kept_check,
    read_reply,
    resume_point,
    void,
)
from .correct_turns import (
    conversation_of,
    diagnosis_of,
    placeholder_failure,
    record_attempt,
    request_of,
    resumed_turn,
    sendable,
)

__all__ = [
    "CHECK_MARKER",
    "MAX_CORRECTIONS_LIMIT",
    "CorrectionBuilder",
    "self_correct",
]

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

MAX_CORRECTIONS_LIMIT = 10
"""The largest correction budget accepted per job."""


CorrectionBuilder = Callable[[CorrectionRequest], "str | Sequence[Mapping[str, Any]]"]
"""A `correction=` hook: the turn to send for a failed reply, as text or as messages."""

EarlyAbort: TypeAlias = 'bool | Literal["resume", "prefill", "restate"]'
"""`@self_correct(early_abort=...)`: what a streamed reply's failed field does."""

ValidationContext: TypeAlias = (
    "Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None"
)


class _CorrectConfig(Generic[T]):
    """One function's configuration: where its conversation is, and its options."""

    def __init__(self, fn: Callable[..., Any], options: _CorrectOptions[T]) -> None:
        self.function = function_name(fn)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
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
        self.options = options
        self.ladder = Ladder.of(
            options.escalation, fn, self.function, "max_corrections", options.max_corrections
        )

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[object, tuple[Any, ...], dict[str, Any]]:
        if args:
            return args[0], args[1:], kwargs
        if self.messages_name is not None and self.messages_name in kwargs:
            rest = dict(kwargs)
            return rest.pop(self.messages_name), (), rest
        raise TypeError(f"{self.function}() is missing the conversation, its first argument")

    def validation_context(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Mapping[str, Any] | None:
        """The `context=` to validate with: `validation_context`, or what it returns."""
        given = self.options.validation_context
        if given is None or isinstance(given, Mapping):
            return given
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            arguments: dict[str, Any] = {}
        else:
            bound.apply_defaults()
            arguments = dict(bound.arguments)
        made = given(arguments)
        if made is not None and not isinstance(made, Mapping):
            raise TypeError(
                f"validation_context of {self.function} must return a dict (or None), "
                f"got {type(made).__name__}"
            )
        return made

    def turn(self, request: CorrectionRequest) -> list[dict[str, Any]]:
        """The messages a correction adds after the original conversation."""
        correction = self.options.correction
        if correction is None:
            return [{"role": "user", "content": correction_text(default_correction(request))}]
        made = correction(request)
        if isinstance(made, str):
            return [{"role": "user", "content": correction_text(made)}]
        if isinstance(made, Sequence):
            turn = [sendable(m) for m in made if isinstance(m, Mapping) and "role" in m]
            if len(turn) == len(made):
                return turn
        raise TypeError(
            f"the correction= builder of {self.function} must return the correction's text (a "
            "str) or the messages to add (a list of dicts with a 'role'), got "
            f"{type(made).__name__}"
        )


@dataclass(frozen=True)
class _CorrectOptions(Options, Generic[T]):
    """`self_correct`'s options: its keyword arguments (documented there), checked once."""

    decorator: ClassVar[str] = "self_correct"
    config: ClassVar[type[_CorrectConfig[Any]]] = _CorrectConfig
    _: KW_ONLY
    schema: type[T]
    max_corrections: int = 2
    repair: bool = True
    correction: CorrectionBuilder | None = None
    validation_context: ValidationContext = None
    budget: Budget | None = None
    early_abort: EarlyAbort = "resume"
    escalate: EscalationLike | None = None
    # What the checks make of them:
    abort_mode: AbortMode = field(init=False, repr=False, compare=False)
    parser: Parser[T] = field(init=False, repr=False, compare=False)
    job_budget: Budget | None = field(init=False, repr=False, compare=False)
    escalation: Escalation | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_budget("max_corrections", self.max_corrections, MAX_CORRECTIONS_LIMIT)
        job_budget = check_budget_option(self.budget)
        if not isinstance(self.repair, bool):
            raise TypeError(f"repair must be True or False, got {type(self.repair).__name__}")
        mode = abort_mode(self.early_abort)
        if mode is None and not isinstance(self.early_abort, (bool, str)):
            raise TypeError(
                'early_abort must be True, False, "resume", "prefill" or "restate", got '
                f"{type(self.early_abort).__name__}"
            )
        if mode is None:
            raise ValueError(
                'early_abort must be True, False, "resume", "prefill" or "restate", got '
                f"{self.early_abort!r}"[:200]
            )
        if self.correction is not None and not callable(self.correction):
            raise TypeError(
                "correction= must be a callable taking a refinekit.CorrectionRequest, got "
                f"{type(self.correction).__name__}"
            )
        context = self.validation_context
        if context is not None and not (isinstance(context, Mapping) or callable(context)):
            raise TypeError(
                "validation_context= must be a dict or a callable of the call's arguments, got "
                f"{type(context).__name__}"
            )
        escalation = Escalation.of(self.escalate)
        for tier in () if escalation is None else escalation.tiers:
            if tier.max_corrections is not None:
                check_budget(
                    f"max_corrections of tier {tier.name!r}",
                    tier.max_corrections,
                    MAX_CORRECTIONS_LIMIT,
                )
        self.keep(
            parser=Parser(self.schema),
            job_budget=job_budget,
            escalation=escalation,
            abort_mode=mode,
        )

    def decorate(self, fn: Any) -> Any:
        return wrap(fn, _FLOW if self.escalation is None else _LADDER_FLOW, self)


def _event(
    cfg: _CorrectConfig[Any], job: Job, kind: EventKind, number: int, maximum: int, **fields: Any
) -> Event:
    return make_event(kind, "self_correct", cfg.function, job, number, maximum, **fields)


def _correct_ladder(
    cfg: _CorrectConfig[T], fn: Fn, args: Args, kwargs: Kwargs, job: Job, record: Record | None
) -> Flow[T]:
    """With `escalate=`: each tier's calls in turn (`climb`)."""
    assert cfg.ladder is not None
    shared = _Shared()

    def run(rung: Rung, carried: Any, tally: Tally) -> Flow[T]:
        return _correct_flow(cfg, fn, args, kwargs, job, record, shared, rung, carried, tally)

    climbing = climb(cfg.ladder, job, record, run, decorator="self_correct", extra_chars=_chars)
    return (yield from climbing)


class _Shared:
    """What the tiers of one call share: the replies so far, and the calls made."""

    __slots__ = ("calls", "replies")

    def __init__(self) -> None:
        self.calls = 0
        self.replies: list[str] = []


def _chars(turn: Sequence[Mapping[str, Any]] | None) -> int:
    return 0 if not turn else sum(len(str(m.get("content") or "")) for m in turn)


def _correct_flow(
    cfg: _CorrectConfig[T],
    fn: Fn,
    args: Args,
    kwargs: Kwargs,
    job: Job,
    record: Record | None,
    shared: _Shared | None = None,
    rung: Rung | None = None,
    carried: list[dict[str, Any]] | None = None,
    tally: Tally | None = None,
) -> Flow[T]:
    """The calls until a reply validates: a call's, or under `escalate=` one tier's."""
    opts = cfg.options
    parser = opts.parser
    messages, rest, rest_kwargs = cfg.split(args, kwargs)
    conversation = conversation_of(messages, cfg.function)
    context = cfg.validation_context(args, kwargs) if opts.validation_context is not None else None
    # the latest correction turn (never compounds); under a ladder, what the tier below earned
    added: list[dict[str, Any]] = [dict(m) for m in carried] if carried else []
    replies = [] if shared is None else shared.replies
    limit = opts.max_corrections if rung is None else rung.budget
    tier = None if rung is None else (cfg.function, rung.name)
    # Calls are numbered across the tiers; the most a call can make counts the tiers above.
    later = 0 if rung is None or cfg.ladder is None else cfg.ladder.after(rung)
    call = 0
    previous: Reservation | None = None  # what the last call held and used
    resume: ResumePoint | None = None  # what the next call keeps of a reply whose field failed
    while True:
        call += 1
        if shared is None:
            number = call
        else:  # numbered across the tiers
            shared.calls += 1
            number = shared.calls
        used = job.corrections_used if tier is None else tier_corrections(job, tier)
        possible = number + max(0, limit - used) + later
        # Each call must fit in the budget: a correction as the last call's usage plus its turn.
        turn = sum(len(str(m.get("content") or "")) for m in added)
        planned = (
            f"correction {job.corrections_used} of {cfg.function}"
            if call > 1
            else f"call of {cfg.function}"
        )
        # Fresh copies each call: edits the function makes to its messages never compound.
        sent = [dict(m) for m in conversation]
        sent.extend(dict(m) for m in added)
        # reserved until its reply is counted
        if rung is None:
            command = Call(fn, (sent, *rest), rest_kwargs)
            info = None
        else:
            command = Call(*rung.call(fn, (sent, *rest), rest_kwargs))
            info = rung.inner_info(number, possible)
        made = attempt_step(
            job,
            cfg.function,
            command,
            planned=planned,
            previous=previous,
            extra_chars=turn,
            info=info,
            enter=info is not None,
        )
        with pinning(parser.schema, None if resume is None else resume.restated()):
            held = yield from tier_step(made, tally, planned)  # `response_format` pins them
        with held as step:
            previous, reply, started = step.held, step.value, step.started
            if is_streamed(reply):  # read as it comes (correct_partials); its usage counted
                reply = yield from read_reply(
                    reply,
                    job,
                    opts,
                    context=context,
                    function=cfg.function,
                    number=number,
                    maximum=possible,
                    prompt_chars=sum(len(str(m.get("content") or "")) for m in sent),
                    resume=resume,
                )
        if rung is not None:
            refused = refusal_of(reply)
            if isinstance(reply, StreamedReply) and reply.read.finish_reason == "refusal":
                refused = reply.text  # a stream that ended as a refusal (Anthropic's)
            if refused is not None:
                raise ModelRefused(refused)
        result: Parsed | CorrectionFailure
        streamed = reply if isinstance(reply, StreamedReply) else None
        try:
            text = reply_text(reply) if streamed is None else streamed.text
        except ReplyShapeError as e:
            text, result = e.text, parse_failure(e.text, str(e))
            result.shape_error = str(e)
        else:
            if streamed is not None and streamed.failure is not None:
                result = streamed.failure  # a completed field failed, or the stream broke
            else:
                result = parser.parse(text, repair=opts.repair, context=context)
            if not isinstance(result, CorrectionFailure) and added:
                copied = parser.placeholders(result[0], text)
                if copied:
                    result = placeholder_failure(text, copied)
            if not isinstance(result, CorrectionFailure) and resume is not None:
                result = kept_check(result, resume, text)
        name = None if rung is None else rung.name
        if not isinstance(result, CorrectionFailure):
            if wants_debug_events():
                emit(_event(cfg, job, "attempt", number, possible, repairs=result[1]))
            if record is not None:
                verdict = Verdict(passed=True, metadata={"repairs": list(result[1])})
                record_attempt(record, number, result[0], verdict, started, added, name)
            yield from final(result[0], number)  # fn.stream(...)'s last item
            return cast(T, result[0])
        if wants_debug_events():
            emit(_event(cfg, job, "attempt", number, possible))
        failure = result
        finish = finish_reason_of(reply) if streamed is None else streamed.finish_reason
        replies.append(text)
        # As it can be sent: a lone surrogate in the reply would make the next request fail.
        last = [*sent, {"role": "assistant", "content": utf8_text(text)}]
        diagnosis = diagnosis_of(parser, failure, finish, context)
        if record is not None:
            verdict = Verdict(
                passed=False, feedback=failure.summary, metadata={"failure": diagnosis.kind}
            )
            record_attempt(record, number, text, verdict, started, added, name)
        if not take_correction(job, limit, tier):
            error = failure.error_type(
                failure.summary,
                raw_reply=text,
                errors=failure.errors,
                conversation=last,
                corrections_used=job.corrections_used,
                usage=job.usage,
                replies=replies,
                failure=diagnosis.kind,
                judge_usage=job.judge_usage,
                job_id=job.id,
            )
            if rung is not None and not rung.last:  # the next tier is tried, maybe told this
                if streamed is not None:
                    yield from void(streamed, job, cfg.function, number, number, failure.summary)
                request = request_of(
                    parser,
                    used,
                    limit,
                    diagnosis,
                    failure,
                    text,
                    finish,
                    conversation,
                )
                raise Escalate(error, cfg.turn(request), failure.summary)
            ended = f"{type(error).__name__}: {failure.summary}"
            emit(_event(cfg, job, "exhausted", number, number, error=ended, failure=diagnosis.kind))
            raise error
        resume = None if streamed is None else resume_point(streamed, opts.abort_mode, parser)
        if streamed is not None:  # what fn.stream(...) showed of it is void (but kept fields)
            reason = failure.summary
            yield from void(streamed, job, cfg.function, number, possible, reason, resume)
        request = request_of(
            parser,
            job.corrections_used if tier is None else tier_corrections(job, tier),
            limit,
            diagnosis,
            failure,
            text,
            finish,
            conversation,
            resume,
        )
        added = resumed_turn(cfg.turn(request), resume)
        emit(
            _event(
                cfg,
                job,
                "correction",
                job.corrections_used if tier is None else tier_corrections(job, tier),
                limit,
                error=failure.summary,
                detail="\n\n".join(str(m.get("content", "")) for m in added),
                failure=diagnosis.kind,
                resumed=resume is not None,
                kept=None if resume is None else len(resume.kept),
            )
        )


_FLOW = without_attempts(_correct_flow, "self_correct")
_LADDER_FLOW = without_attempts(_correct_ladder, "self_correct")

Corrected: TypeAlias = "Partial[Any] | Final[T] | Reset"
"""What `fn.stream(...)` of a `@self_correct` function yields (docs/streaming.md)."""


class SelfCorrecting(Protocol[T_co]):
    """The decorator `self_correct(schema=...)` returns; the call returns the schema's type.

    `fn.stream(...)` yields `Partial` values as the reply's fields complete, `Reset`s, and the
    `Final` value.
    """

    @overload
    def __call__(
        self, fn: Callable[P, Awaitable[Reply | StreamLike]], /
    ) -> AsyncStreamingFunction[P, T_co, Corrected[T_co]]: ...

    @overload
    def __call__(
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, T_co, Corrected[T_co]]: ...

    @overload
    def __call__(
        self, fn: Callable[P, Reply | SyncStreamLike], /
    ) -> StreamingFunction[P, T_co, Corrected[T_co]]: ...


def self_correct(
    *,
    schema: type[T],
    max_corrections: int = 2,
    repair: bool = True,
    correction: CorrectionBuilder | None = None,
    validation_context: Mapping[str, Any]
    | Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
    | None = None,
    budget: Budget | None = None,
    early_abort: bool | Literal["resume", "prefill", "restate"] = "resume",
    escalate: EscalationLike | None = None,
) -> SelfCorrecting[T]:
    """Parse and validate the decorated function's reply; correct a bad one in conversation.

    The function takes the conversation (a list of OpenAI-style message dicts) as its first
    argument (the first after `self` or `cls` on a method or classmethod) and returns the
    model's reply: a `str`, an OpenAI `ChatCompletion` or LiteLLM `ModelResponse`, an
    Anthropic `Message`, a LangChain `AIMessage`, or a message (its text, or the arguments of
    its single tool call, is parsed; docs/sdks.md). The decorated call
    returns the validated value.

    A reply that is not strict JSON is first repaired locally when that loses nothing (JSON in
    a code fence or in prose, comments, trailing commas, Python literals, one wrapper object,
    a number where a string is expected): no call is spent. A reply that still does not parse
    or validate, while the job's budget lasts, costs a correction: the function is called
    again with the original conversation plus one correction turn, a user message marked as an
    automated check that says what was wrong field by field and shows the expected reply as a
    JSON instance to fill in. The instance keeps a value of the failed reply only when nothing
    implicates it: a field an error is about, a field a validator's message names, and (when
    the validation context holds the source text) a value the source does not hold are
    placeholders, and an error of the whole reply that names no field keeps no value at all
    (docs/self_correct.md). Earlier failed replies
    and corrections are not resent, and the JSON schema is never repeated. The caller's list is
    never mutated. Exceptions the function raises (timeouts, HTTP errors) propagate and cost no
    correction.

    Args:
        schema: The type of the value: a pydantic model, or any class or typing form
            `pydantic.TypeAdapter` accepts (`list[Item]`, a dataclass, a TypedDict,
            `Item | None`, ...). Not a function, a method or an instance.
        max_corrections: The job's correction budget, 0 to 10. The budget belongs to the job
            (the outermost refinekit call, or a `refinekit.job()` block): retries of an outer
            `@retry_on_low_quality` share it rather than reset it.
        repair: Whether lossless local repairs are tried before a correction is spent. With
            False, only strict JSON is accepted.
        correction: A builder replacing the default correction turn: it gets a
            `CorrectionRequest` and returns the turn's text (sent as a user message after the
            original conversation) or the list of messages to add there instead.
        validation_context: Passed to pydantic as `context=` when validating, so validators
            can check values against the call (`refinekit.InSource` checks that a string
            appears in `context["source"]`): a dict, or a callable of the call's bound
            arguments (a dict by parameter name) returning one.
        budget: A `refinekit.Budget` for the job (tokens, cost, model calls, corrections and
            judge calls included): the call raises `refinekit.BudgetExceeded` as soon as a
            reply has taken the job over it. Inside another refinekit call it can only
            tighten that job's budget. See docs/budgets.md.
        early_abort: For a function that returns a stream: what a field that completes and
            fails does. True: the stream is closed there and the correction sent at once
            (fewer tokens generated for a reply that failed); the model writes the whole
            object again. "resume": closed there too, and the next request keeps the fields
            validated before it, so the model writes only the rest: by prefill (the reply's
            text up to the failed field sent as the start of the assistant's reply) over
            Anthropic's API and OpenAI-compatible servers other than OpenAI's own, else
            restated (the correction names them as fixed; `response_format` pins them).
            "prefill" / "restate" force one way. A resumed reply that changes a kept field
            fails. False: the failed reply is read to its end, so that its correction names
            every field that failed, as for a whole reply (no partial value is shown after
            the failure). docs/streaming.md has the ways and the trade-off as measured on a
            real model.
        escalate: An escalation ladder, cheapest tier first: a list of model names (passed
            to the function as its `model` keyword argument), callables (called instead of
            the function, with its arguments) or `refinekit.Tier`s, or a
            `refinekit.Escalation`. Each tier gets its own corrections (`Tier(...,
            max_corrections=0)` for none; default `max_corrections`); when they are spent, or
            the model refuses, the next tier is tried, from the caller's conversation
            (`Escalation(carry=True)`: told the failed reply's correction). The last tier's
            failure raises as
            without a ladder, with every tier's replies and `tiers`. `Outcome.tier` says which
            tier answered. See docs/escalation.md.

    Returns:
        A decorator; the decorated function returns the schema's type (awaitable for
        `async def`), and has `.outcome(...)` and `.retry_with(**changes)`.

    Raises:
        ValueError: `max_corrections` (or a tier's) is not an int from 0 to 10, or the
            ladder has fewer than two tiers or two of the same name (when decorating).
        TypeError: `schema` is not a type (a function, a method, an instance), pydantic
            cannot validate it, the function takes no argument for the conversation,
            `correction`/`validation_context` is neither None nor usable, `budget` is not
            a `refinekit.Budget`, or `escalate` cannot be used: a model tier for a function
            without the keyword parameter, an async tier for a sync function (when
            decorating).
    """
    return _CorrectOptions(
        schema=schema,
        max_corrections=max_corrections,
        repair=repair,
        correction=correction,
        validation_context=validation_context,
        budget=budget,
        early_abort=early_abort,
        escalate=escalate,
    ).decorate
