"""`@guarded`: screen every output (and optionally the input); publish a refusal instead."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, overload

from ._errors import JudgeReplyError, JudgeUnavailable, LowQualityAnswer
from ._evaluators import EvaluatorLike, _Adapted, as_evaluator
from ._flow import Call, Evaluate, Flow, run_async, run_sync
from ._hooks import Event, EventKind, emit, make_event, wants_debug_events
from ._job import _ATTEMPT, Job, enter_job, leave_job
from ._model import EvaluationRequest, Verdict
from ._replies import answer_text, usage_of
from ._retry import JudgeErrorPolicy, check_policy

__all__ = ["DEFAULT_REFUSAL", "Guarding", "guarded"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_REFUSAL = "I can't help with that."
"""What a blocked call returns unless `refusal=` says otherwise."""

InputSelector = str | Callable[[Mapping[str, Any]], str]
Screened = Literal["input", "output"]


class Guarding(Protocol):
    """The decorator `guarded(...)` returns: the call returns the function's type or the refusal.

    For a function returning `str` that is `str`; for any other return type `T` it is
    `T | str`, since a blocked call returns the refusal text.
    """

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /
    ) -> Callable[P, Coroutine[Any, Any, T | str]]: ...

    @overload
    def __call__(self, fn: Callable[P, T], /) -> Callable[P, T | str]: ...


def _as_text(value: Any) -> str:
    """An argument as text to screen: a str as is, None as "", anything else as JSON."""
    return value if isinstance(value, str) else answer_text(value)


class _GuardConfig:
    __slots__ = (
        "function",
        "input",
        "judge_error_policy",
        "refusal",
        "screen",
        "screen_input",
        "signature",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        screen: _Adapted,
        refusal: str,
        screen_input: bool,
        input: InputSelector | None,
        judge_error_policy: JudgeErrorPolicy,
    ) -> None:
        self.function = getattr(fn, "__qualname__", repr(fn))
        self.signature = inspect.signature(fn)
        names = list(self.signature.parameters)
        if isinstance(input, str) and input not in names:
            raise ValueError(
                f"input={input!r} names no parameter of {self.function}{self.signature}"
            )
        if screen_input and input is None and not names:
            raise ValueError(
                f"screen_input=True, but {self.function}{self.signature} takes no argument "
                "to screen"
            )
        self.screen = screen
        self.refusal = refusal
        self.screen_input = screen_input
        self.input = input
        self.judge_error_policy = judge_error_policy

    def input_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The input as text: what `input=` selects, else `question`, else the first str.

        When the input is screened, not finding one raises `TypeError` rather than screen
        nothing; otherwise the output's screen just gets an empty question.
        """
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            if self.screen_input:
                raise  # the call itself cannot work; the function is not called unscreened
            return ""
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        selector = self.input
        if callable(selector):
            text = selector(arguments)
            if not isinstance(text, str):
                raise TypeError(
                    f"input= of {self.function} must return a str, got {type(text).__name__}"
                )
            return text
        if isinstance(selector, str):
            return _as_text(arguments.get(selector))
        if "question" in arguments:
            return _as_text(arguments["question"])
        found = next((v for v in arguments.values() if isinstance(v, str)), None)
        if found is None and self.screen_input:
            raise TypeError(
                f"@guarded(screen_input=True) found no str argument to screen in this call of "
                f"{self.function}; name the input with input= (a parameter name or a callable "
                "of the bound arguments)"
            )
        return found or ""


def _event(cfg: _GuardConfig, job: Job, kind: EventKind, **fields: Any) -> Event:
    # Inside @retry_on_low_quality the event carries the retry's attempt; alone, it is 1 of 1.
    info = _ATTEMPT.get()
    number, maximum = (info.number, info.max_attempts) if info is not None else (1, 1)
    return make_event(kind, "guarded", cfg.function, job, number, maximum, **fields)


def _why(verdict: Verdict) -> str:
    """Why a verdict is not a judgement, without any text it may quote: its first word."""
    code = (verdict.reason or "no reason given").split(":", 1)[0].strip()
    return f"{verdict.status} ({code[:80]})"


def _screen(
    cfg: _GuardConfig, job: Job, screened: Screened, request: EvaluationRequest
) -> Flow[bool]:
    """Screen one text; the flow's result is True when it is blocked."""
    try:
        verdict: Verdict = yield Evaluate(cfg.screen, request)
    except (JudgeUnavailable, JudgeReplyError) as exc:
        if exc.fail_closed:  # the judge's own explicit policy raises past any outer one
            raise
        verdict = Verdict.unjudged(f"{type(exc).__name__}: {exc}", screen=cfg.screen.name)
    # JudgeMisconfigured, and any exception of a rule check (a bug), propagate from the yield.
    name = cfg.screen.name
    if verdict.judged:
        if verdict.passed:
            if wants_debug_events():
                emit(_event(cfg, job, "verdict", verdict=verdict))
            return False
        error = f"{screened} blocked by screen {name!r}"
    elif cfg.judge_error_policy == "fail_open":
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
    cfg: _GuardConfig,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    job: Job,
) -> Flow[Any]:
    question = cfg.input_text(args, kwargs)
    if cfg.screen_input:
        request = EvaluationRequest(
            answer=question, metadata={"function": cfg.function, "screened": "input"}
        )
        if (yield from _screen(cfg, job, "input", request)):
            return cfg.refusal
    counted = job._replies_counted()
    rejection: LowQualityAnswer | None = None
    try:
        value = yield Call(fn, args, kwargs)
    except LowQualityAnswer as raised:
        # A draft carried by the signal can still be returned (an outer retry's "return_best"),
        # so it is screened too.
        rejection, value = raised, raised.answer
    usage = usage_of(value)
    if usage is not None:
        job._add_usage(usage, value, counted)
    if rejection is not None and value is None:
        raise rejection
    request = EvaluationRequest(
        question=question,
        answer=answer_text(value),
        metadata={"function": cfg.function, "screened": "output"},
    )
    blocked = yield from _screen(cfg, job, "output", request)
    if rejection is not None:
        if blocked:
            rejection.answer = cfg.refusal
        raise rejection
    return cfg.refusal if blocked else value


def guarded(
    *,
    screen: EvaluatorLike,
    refusal: str = DEFAULT_REFUSAL,
    screen_input: bool = False,
    input: InputSelector | None = None,
    judge_error_policy: JudgeErrorPolicy = "fail_closed",
) -> Guarding:
    """Screen every output of the decorated function; publish a refusal instead of unsafe text.

    `screen` judges each return value (a passing verdict means safe). An unsafe output is
    replaced by `refusal` before anything else sees it: an outer `@retry_on_low_quality`
    judges the refusal, never the unsafe draft. With input screening on, the input is
    screened before the call, and a blocked input returns the refusal without calling the
    function at all. Works on `def` and `async def` functions alike.

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

    Returns:
        A decorator keeping the function's signature.

    Raises:
        TypeError: `screen` is not an evaluator, `refusal` is not a `str`, `screen_input` is
            not a bool, or `input` is neither a name nor a callable (when decorating).
        ValueError: `input` names no parameter of the function, or `judge_error_policy` is
            unknown (when decorating).
    """
    adapted = as_evaluator(screen)
    if not isinstance(refusal, str):
        raise TypeError(f"refusal must be a str, got {type(refusal).__name__}")
    if not isinstance(screen_input, bool):
        raise TypeError(f"screen_input must be a bool, got {type(screen_input).__name__}")
    if input is not None and not isinstance(input, str) and not callable(input):
        raise TypeError(
            "input= must be a parameter name or a callable of the bound arguments, "
            f"got {type(input).__name__}"
        )
    check_policy(judge_error_policy)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        cfg = _GuardConfig(
            fn,
            screen=adapted,
            refusal=refusal,
            screen_input=screen_input or input is not None,
            input=input,
            judge_error_policy=judge_error_policy,
        )
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                job, token = enter_job()
                try:
                    return await run_async(_guard_flow(cfg, fn, args, kwargs, job))
                finally:
                    leave_job(token)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            job, token = enter_job()
            try:
                return run_sync(_guard_flow(cfg, fn, args, kwargs, job))
            finally:
                leave_job(token)

        return wrapper

    return decorate
