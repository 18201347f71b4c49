"""`@guarded`: screen every output (and optionally the input); publish a refusal instead."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import KW_ONLY, dataclass, field
from typing import (
    Any,
    ClassVar,
    Literal,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    overload,
)

from typing_extensions import Required, Unpack

from .._core.errors import JudgeError, LowQualityAnswer
from .._core.types import Attempt, EvaluationRequest, Verdict
from .._engine.attempt import attempt_step
from .._engine.budget import without_attempts
from .._engine.decorated import AsyncStreamingFunction, StreamingFunction
from .._engine.evaluators import Adapted, EvaluatorLike, as_evaluator
from .._engine.events import Event, EventKind, emit, make_event, wants_debug_events
from .._engine.flow import Call, Evaluate, Flow
from .._engine.job import Job, check_budget_option, current_attempt
from .._engine.options import Args, Fn, Kwargs, Options, signature_of
from .._engine.outcome import Record
from .._engine.policy import JudgeErrorPolicy, check_policy, judge_failure
from .._engine.prices import Budget
from .._engine.request import QuestionSelector, RequestMaker
from .._engine.stream_commands import StreamLike, SyncStreamLike, arguments_chars, is_streamed
from .._engine.text_answers import TextRead, publish, read_text
from .._engine.wrapper import wrap
from .._providers.replies import Reply, Returns, answer_text, check_returns, text_answer

__all__ = ["DEFAULT_REFUSAL", "Guarding", "TextGuarding", "guarded"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_REFUSAL = "I can't help with that."
"""What a blocked call returns unless `refusal=` says otherwise."""

InputSelector = QuestionSelector
Screened = Literal["input", "output"]


class Guarding(Protocol):
    """The decorator `guarded(...)` returns: the call returns the function's type or the refusal.

    For a function returning `str` that is `str`; for any other return type `T` it is
    `T | str`, since a blocked call returns the refusal text. A function returning a stream
    gives its screened text (or the refusal); `fn.stream(...)` yields it (docs/streaming.md).
    """

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, StreamLike]], /
    ) -> AsyncStreamingFunction[P, str, str]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, str, str]: ...

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, T]], /
    ) -> AsyncStreamingFunction[P, T | str, T | str]: ...

    @overload
    def __call__(self, fn: Callable[P, SyncStreamLike], /) -> StreamingFunction[P, str, str]: ...

    @overload
    def __call__(self, fn: Callable[P, T], /) -> StreamingFunction[P, T | str, T | str]: ...


class TextGuarding(Protocol):
    """The decorator `guarded(returns="text", ...)` returns: the call returns `str`.

    The function returns the model's reply (or its text, or a stream); the caller gets the
    reply's text or the refusal.
    """

    @overload
    def __call__(
        self, fn: Callable[P, Awaitable[Reply | StreamLike]], /
    ) -> AsyncStreamingFunction[P, str, str]: ...

    @overload
    def __call__(
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, str, str]: ...

    @overload
    def __call__(
        self, fn: Callable[P, Reply | SyncStreamLike], /
    ) -> StreamingFunction[P, str, str]: ...


class _GuardKeywords(TypedDict, total=False):
    """The options but `returns`, as type checkers see them (`guarded`'s overloads)."""

    screen: Required[EvaluatorLike]
    refusal: str
    screen_input: bool
    input: InputSelector | None
    judge_error_policy: JudgeErrorPolicy
    budget: Budget | None


class _GuardConfig:
    """One function's configuration: which of its arguments is the input, and its options."""

    def __init__(self, fn: Callable[..., Any], options: _GuardOptions) -> None:
        self.requests = RequestMaker(fn, question=options.input, option="input")
        self.function = self.requests.function
        if options.screens_input and options.input is None and not self.requests.names:
            raise ValueError(
                f"screen_input=True, but {self.function}{self.requests.signature} takes no "
                "argument to screen"
            )
        self.options = options

    def input_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The input as text: what `input=` selects, else `question`, else the first str.

        When the input is screened, not finding one raises `TypeError` rather than screen
        nothing (the function is not called unscreened); otherwise the output's screen just
        gets an empty question.
        """
        screened = self.options.screens_input
        arguments = self.requests.bind(args, kwargs, strict=screened)
        if arguments is None:  # the call itself cannot work
            return ""
        text = self.requests.question_of(arguments)
        if text is None and screened:
            raise TypeError(
                f"@guarded(screen_input=True) found no str argument to screen in this call of "
                f"{self.function}; name the input with input= (a parameter name or a callable "
                "of the bound arguments)"
            )
        return text or ""


@dataclass(frozen=True)
class _GuardOptions(Options):
    """`guarded`'s options: its keyword arguments (documented there), checked once."""

    decorator: ClassVar[str] = "guarded"
    config: ClassVar[type[_GuardConfig]] = _GuardConfig
    _: KW_ONLY
    screen: EvaluatorLike
    refusal: str = DEFAULT_REFUSAL
    screen_input: bool = False
    input: InputSelector | None = None
    judge_error_policy: JudgeErrorPolicy = "fail_closed"
    budget: Budget | None = None
    returns: Returns = "value"
    # What the checks make of them:
    adapted: Adapted = field(init=False, repr=False, compare=False)
    screens_input: bool = field(init=False, repr=False, compare=False)
    job_budget: Budget | None = field(init=False, repr=False, compare=False)
    returns_text: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        adapted = as_evaluator(self.screen)
        if not isinstance(self.refusal, str):
            raise TypeError(f"refusal must be a str, got {type(self.refusal).__name__}")
        if not isinstance(self.screen_input, bool):
            raise TypeError(f"screen_input must be a bool, got {type(self.screen_input).__name__}")
        if self.input is not None and not isinstance(self.input, str) and not callable(self.input):
            raise TypeError(
                "input= must be a parameter name or a callable of the bound arguments, "
                f"got {type(self.input).__name__}"
            )
        check_policy(self.judge_error_policy)
        job_budget = check_budget_option(self.budget)
        self.keep(
            adapted=adapted,
            screens_input=self.screen_input or self.input is not None,
            job_budget=job_budget,
            returns_text=check_returns(self.returns),
        )

    def decorate(self, fn: Any) -> Any:
        return wrap(fn, _FLOW, self)


def _event(cfg: _GuardConfig, job: Job, kind: EventKind, **fields: Any) -> Event:
    # Inside @retry_on_low_quality the event carries the retry's attempt; alone, it is 1 of 1.
    info = current_attempt()
    number, maximum = (info.number, info.max_attempts) if info is not None else (1, 1)
    return make_event(kind, "guarded", cfg.function, job, number, maximum, **fields)


def _why(verdict: Verdict) -> str:
    """Why a verdict is not a judgement, without any text it may quote: its first word."""
    code = (verdict.reason or "no reason given").split(":", 1)[0].strip()
    return f"{verdict.status} ({code[:80]})"


def _screen(
    cfg: _GuardConfig,
    job: Job,
    screened: Screened,
    request: EvaluationRequest,
    record: Record | None,
) -> Flow[bool]:
    """Screen one text; the flow's result is True when it is blocked."""
    screen = cfg.options.adapted
    try:
        verdict: Verdict = yield Evaluate(screen, request)
    except JudgeError as exc:
        # A failure is an unjudged verdict, which this guard's own policy blocks or lets
        # through below. JudgeMisconfigured, a failure a judge's own "fail_closed" policy
        # raised and any exception of a rule check (a bug) propagate.
        verdict = judge_failure(exc, "fail_open", screen=screen.name)
    if record is not None:
        record.verdicts.append(verdict)
    name = screen.name
    if verdict.judged:
        if verdict.passed:
            if wants_debug_events():
                emit(_event(cfg, job, "verdict", verdict=verdict))
            return False
        error = f"{screened} blocked by screen {name!r}"
    elif cfg.options.judge_error_policy == "fail_open":
        emit(
            _event(
                cfg,
                job,
                "unjudged",
                verdict=verdict,
                error=f"{screened} let through unscreened: screen {name!r} {_why(verdict)}",
            )
        )
        return False
    else:
        error = f"{screened} blocked, failing closed: screen {name!r} {_why(verdict)}"
    if screened == "input":
        error += "; the function was not called"
    emit(_event(cfg, job, "blocked", verdict=verdict, error=error, detail=request.answer))
    return True


def _guard_flow(
    cfg: _GuardConfig, fn: Fn, args: Args, kwargs: Kwargs, job: Job, record: Record | None
) -> Flow[Any]:
    opts = cfg.options
    question = cfg.input_text(args, kwargs)
    if opts.screens_input:
        request = EvaluationRequest(
            answer=question, metadata={"function": cfg.function, "screened": "input"}
        )
        if (yield from _screen(cfg, job, "input", request, record)):
            return opts.refusal
    # The one call: one model call reserved until its reply is counted (none left: stop).
    # A draft carried by a raised LowQualityAnswer can still be returned (an outer retry's
    # "return_best"), so it is screened too.
    with (yield from attempt_step(job, cfg.function, Call(fn, args, kwargs), rejects=True)) as step:
        started, value = step.started, step.value
        rejection: LowQualityAnswer | None = step.rejection
        read: TextRead | None = None
        if rejection is None and is_streamed(value):  # buffered: nothing shown unscreened
            read = yield from read_text(
                value,
                job,
                emit=False,
                evaluator=opts.adapted,  # a rule that rejects a part stops the stream
                decorator="guarded",
                function=cfg.function,
                number=1,
                maximum=1,
                prompt_chars=arguments_chars(args, kwargs),
            )
            if read.tool_round:
                raise TypeError(
                    f"{cfg.function} is decorated with @guarded and streamed tool calls: a "
                    "tool call is not a final answer; run the tools and return the final reply"
                )
            value = read.text
    if rejection is not None and value is None:
        raise rejection
    if opts.returns_text:  # screened, published and carried as the reply's text
        value = text_answer(value, cfg.function, "guarded")
        if rejection is not None:
            rejection.answer = value
    request = EvaluationRequest(
        question=question,
        answer=answer_text(value),
        metadata={"function": cfg.function, "screened": "output"},
    )
    if read is not None and read.rejected is not None:  # stopped before its end: blocked
        blocked = _blocked_early(cfg, job, read.rejected, request, record)
    else:
        blocked = yield from _screen(cfg, job, "output", request, record)
    if rejection is not None:
        if blocked:
            rejection.answer = opts.refusal
        raise rejection
    published = opts.refusal if blocked else value
    if record is not None:  # the published text, never a blocked one
        duration = time.perf_counter() - started
        record.attempts.append(Attempt(1, published, record.verdicts[-1], duration))
    yield from publish(published, read)  # fn.stream(...): the screened text, or the refusal
    return published


def _blocked_early(
    cfg: _GuardConfig,
    job: Job,
    verdict: Verdict,
    request: EvaluationRequest,
    record: Record | None,
) -> bool:
    """A streamed output a rule check rejected from a part of it: blocked, the stream closed."""
    if record is not None:
        record.verdicts.append(verdict)
    name = cfg.options.adapted.name
    error = f"output blocked by screen {name!r} before its end (the stream was closed)"
    emit(_event(cfg, job, "blocked", verdict=verdict, error=error, detail=request.answer))
    return True


_FLOW = without_attempts(_guard_flow, "guarded")


@overload
def guarded(*, returns: Literal["text"], **options: Unpack[_GuardKeywords]) -> TextGuarding: ...


@overload
def guarded(*, returns: Literal["value"] = ..., **options: Unpack[_GuardKeywords]) -> Guarding: ...


@signature_of(_GuardOptions)
def guarded(**options: Any) -> Guarding | TextGuarding:  # noqa: D417
    """Screen every output of the decorated function; publish a refusal instead of unsafe text.

    `screen` judges each return value (a passing verdict means safe). An unsafe output is
    replaced by `refusal` before anything else sees it: an outer `@retry_on_low_quality`
    judges the refusal, never the unsafe draft. With input screening on, the input is
    screened before the call, and a blocked input returns the refusal without calling the
    function at all. Works on `def` and `async def` functions alike, and on methods
    (`self`/`cls` is bound, never the input).

    A `str` output is screened as it is, an OpenAI `ChatCompletion` as its message text, a
    pydantic model (or any other value) as JSON. A blocked call always returns the `refusal`
    string, whatever the function returns, so for a function returning `T` the decorated
    call returns `T | str`.

    Args:
        screen: What decides that a text is safe: a rule check (`checks.matches(...)`, a
            `checks.Check`), a model judge, or a function `(EvaluationRequest) -> bool |
            Verdict`, sync or async. The screened text is `request.answer`;
            `request.metadata["screened"]` says `"input"` or `"output"`, and for an output
            `request.question` is the input.
        refusal: The text returned in place of a blocked output or for a blocked input.
        screen_input: Screen the input too, before the call.
        input: Which argument is the input (giving it turns input screening on): a parameter
            name, or a callable of the bound arguments (a dict) returning the text. Default:
            the parameter `question`, else the first `str` argument; a non-`str` argument is
            screened as JSON.
        judge_error_policy: What a judging failure does: the screen raised `JudgeUnavailable`
            or `JudgeReplyError`, or returned a verdict that is `unjudged` or `inconclusive`.
            `"fail_closed"` (the default) blocks: the refusal is returned, with a `blocked`
            event saying why. `"fail_open"` publishes the text unscreened, with an `unjudged`
            event and a WARNING log line. `JudgeMisconfigured` is always raised, a judge's own
            `judge_error_policy="fail_closed"` raises past this one, and an exception inside a
            rule check (a bug) propagates.
        budget: A `refinekit.Budget` for the job (the function's model calls and the screen's
            judge calls): the call raises `refinekit.BudgetExceeded` (never publishing an
            unscreened answer) as soon as a call has taken the job over it, or before a
            judge call it cannot cover. Inside another refinekit call it can only tighten that
            job's budget. See docs/budgets.md.
        returns: What the caller gets. `"value"` (the default): what the function returned,
            or the refusal. `"text"`: the reply's text, or the refusal, for a function that
            returns the model's reply (an OpenAI `ChatCompletion`, an Anthropic `Message`,
            ... or a `str`), so that its usage counts in the job and the call always returns
            a `str`. A reply that asks for tool calls, or a value that is no reply, is then
            a `TypeError`.

    Returns:
        A decorator keeping the function's signature; the decorated function has
        `.outcome(...)` and `.retry_with(**changes)`.

    Raises:
        TypeError: `screen` is not an evaluator, `refusal` is not a `str`, `screen_input` is
            not a bool, `input` is neither a name nor a callable, or `budget` is not a
            `refinekit.Budget` (when decorating).
        ValueError: `input` names no parameter of the function, or `judge_error_policy` or
            `returns` is unknown (when decorating).
    """
    return _GuardOptions.of(options).decorate
