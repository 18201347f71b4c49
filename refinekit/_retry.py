"""`@retry_on_low_quality`: judge each answer, feed the defect back, try again within a cap."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, ParamSpec, TypeVar

import tenacity
from tenacity.wait import wait_base

from . import _config
from ._errors import JudgeReplyError, JudgeUnavailable, LowQualityAnswer
from ._evaluators import EvaluatorLike, _Adapted, as_evaluator
from ._flow import Call, Evaluate, Flow, Sleep, run_async, run_sync
from ._hooks import Event, EventKind, emit, make_event, wants_debug_events
from ._job import _ATTEMPT, Job, enter_job, leave_job
from ._model import Attempt, AttemptInfo, ContextDocument, EvaluationRequest, ToolCall, Verdict
from ._replies import answer_text, usage_of
from ._tools import start_recording, stop_recording

__all__ = ["DEFAULT_WAIT", "MAX_RETRIES_LIMIT", "retry_on_low_quality"]

P = ParamSpec("P")
R = TypeVar("R")

MAX_RETRIES_LIMIT = 100
"""The largest `max_retries` accepted: "retry until it passes" does not exist."""

# tenacity 9.1 renamed `initial` to `multiplier` (and warns on `initial`); 8.x only has `initial`.
_START = (
    "multiplier"
    if "multiplier" in inspect.signature(tenacity.wait_exponential_jitter).parameters
    else "initial"
)
DEFAULT_WAIT: wait_base = tenacity.wait_exponential_jitter(
    exp_base=2, max=5.0, jitter=0.2, **{_START: 0.2}
)
"""The default backoff: 0.2 s doubling per retry, plus up to 0.2 s of jitter, capped at 5 s."""

Wait = wait_base | Callable[[tenacity.RetryCallState], float] | float | int
OnExhausted = Literal["raise", "return_best"]
JudgeErrorPolicy = Literal["fail_open", "fail_closed"]
OnInconclusive = Literal["fail", "accept"]


def check_budget(name: str, value: object, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ValueError(
            f"{name} must be an int from 0 to {limit}, got {value!r}: every refinekit loop is "
            "bounded, there is no 'retry until it passes'"
        )
    return value


def check_policy(policy: object) -> None:
    if policy not in ("fail_open", "fail_closed"):
        raise ValueError(f"judge_error_policy must be 'fail_open' or 'fail_closed', got {policy!r}")


def _check_wait(wait: object) -> Callable[[tenacity.RetryCallState], float]:
    if isinstance(wait, bool):
        raise TypeError("wait must be a tenacity wait strategy or a number of seconds, not a bool")
    if isinstance(wait, (int, float)):
        if wait < 0:
            raise ValueError(f"wait must not be negative, got {wait!r}")
        return tenacity.wait_fixed(wait)
    if callable(wait):
        return wait
    raise TypeError(
        "wait must be a tenacity wait strategy (e.g. tenacity.wait_exponential()), a callable "
        f"taking a tenacity.RetryCallState, or a number of seconds; got {type(wait).__name__}"
    )


def _best(attempts: list[Attempt]) -> Attempt | None:
    """Most criteria passed net of those failed; the later attempt wins a tie."""
    best: Attempt | None = None
    for attempt in attempts:
        if attempt.answer is None:
            continue
        if best is None or attempt.verdict.net_criteria() >= best.verdict.net_criteria():
            best = attempt
    return best


class _RetryConfig:
    __slots__ = (
        "accepts_feedback",
        "answer",
        "context",
        "defaults",
        "evaluator",
        "feedback_index",
        "function",
        "judge_error_policy",
        "max_retries",
        "names",
        "on_exhausted",
        "on_inconclusive",
        "plain",
        "question",
        "signature",
        "skip",
        "wait",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        evaluator: _Adapted | None,
        max_retries: int,
        wait: Callable[[tenacity.RetryCallState], float],
        on_exhausted: OnExhausted,
        question: str | Callable[[Mapping[str, Any]], str] | None,
        answer: Callable[[Any], str] | None,
        context: Callable[[Mapping[str, Any]], Iterable[Any]] | None,
        skip: Callable[[EvaluationRequest], bool] | None,
        judge_error_policy: JudgeErrorPolicy,
        on_inconclusive: OnInconclusive,
    ) -> None:
        self.judge_error_policy = judge_error_policy
        self.on_inconclusive = on_inconclusive
        self.function = getattr(fn, "__qualname__", repr(fn))
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        names = [p.name for p in params]
        # Only positional-or-keyword parameters: `bind` can skip `Signature.bind` (see there).
        self.plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
        self.names = tuple(names)
        self.defaults = tuple(p.default for p in params)
        if isinstance(question, str) and question not in names:
            raise ValueError(
                f"question={question!r} names no parameter of {self.function}{self.signature}"
            )
        feedback = self.signature.parameters.get("feedback")
        self.accepts_feedback = feedback is not None and feedback.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        self.feedback_index = (
            names.index("feedback")
            if feedback is not None and feedback.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            else None
        )
        self.evaluator = evaluator
        self.max_retries = max_retries
        self.wait = wait
        self.on_exhausted = on_exhausted
        self.question = question
        self.answer = answer
        self.context = context
        self.skip = skip

    def with_feedback(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], feedback: str
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not self.accepts_feedback:
            return args, kwargs
        i = self.feedback_index
        if i is not None and len(args) > i:
            return (*args[:i], feedback, *args[i + 1 :]), kwargs
        return args, {**kwargs, "feedback": feedback}

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.plain and len(args) <= len(self.names):
            # The common case, at a fraction of `Signature.bind`'s cost and with the same result
            # (every parameter, in declaration order, defaults applied). Anything unusual (an
            # unknown or duplicated keyword, a missing argument) goes the general way below.
            arguments = dict(zip(self.names, args, strict=False))
            given = 0
            empty = inspect.Parameter.empty
            n = len(args)
            for name, default in zip(self.names[n:], self.defaults[n:], strict=True):
                if name in kwargs:
                    arguments[name] = kwargs[name]
                    given += 1
                elif default is not empty:
                    arguments[name] = default
                else:
                    break
            else:
                if given == len(kwargs):
                    return arguments
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return {}
        bound.apply_defaults()
        return dict(bound.arguments)

    def request(
        self,
        arguments: dict[str, Any],
        value: Any,
        recorded: list[ContextDocument],
        number: int,
        tool_calls: list[ToolCall],
    ) -> EvaluationRequest:
        question = self.question
        q: Any
        if callable(question):
            q = question(arguments)
        elif isinstance(question, str):
            q = arguments.get(question)
        elif "question" in arguments:
            q = arguments["question"]
        else:
            q = next((v for v in arguments.values() if isinstance(v, str)), "")
        if self.answer is not None:
            text = self.answer(value)
            if not isinstance(text, str):
                raise TypeError(
                    f"answer= of {self.function} must return a str, got {type(text).__name__}"
                )
        else:
            text = answer_text(value)
        documents: list[ContextDocument] = []
        if self.context is not None:
            given = self.context(arguments)
            if isinstance(given, (str, ContextDocument, Mapping)):
                given = [given]
            documents.extend(ContextDocument.coerce(d) for d in given)
        documents.extend(recorded)
        return EvaluationRequest(
            question="" if q is None else str(q),
            answer=text,
            context=tuple(documents),
            metadata={"function": self.function, "attempt": number},
            tool_calls=tuple(tool_calls),
        )


def _event(cfg: _RetryConfig, job: Job, kind: EventKind, number: int, **fields: Any) -> Event:
    return make_event(
        kind, "retry_on_low_quality", cfg.function, job, number, cfg.max_retries + 1, **fields
    )


def _kept(value: Any, info: AttemptInfo, outer: AttemptInfo | None) -> Any:
    """Return the accepted answer; the documents it was built from go to the enclosing attempt.

    An answer built on an inner answer is built on that answer's context too, so an outer
    evaluator (an outer `@retry_on_low_quality`, `refinekit eval`'s judge) sees it.
    """
    if outer is not None:
        outer._context.extend(info._context)
    return value


def _retry_flow(
    cfg: _RetryConfig,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    job: Job,
) -> Flow[Any]:
    max_attempts = cfg.max_retries + 1
    attempts: list[Attempt] = []
    arguments: dict[str, Any] | None = None
    state: tenacity.RetryCallState | None = None
    feedback: str | None = None
    previous: Any = None
    call_args, call_kwargs = args, kwargs
    outer = _ATTEMPT.get()  # an enclosing attempt (or `refinekit eval`'s case), if any
    infos: list[AttemptInfo] = []
    for number in range(1, max_attempts + 1):
        info = AttemptInfo(number, max_attempts, feedback, previous)
        infos.append(info)
        started = time.perf_counter()
        token = _ATTEMPT.set(info)
        recorder = start_recording()  # this attempt's tool calls, for the judge
        counted = job._replies_counted()
        try:
            value = yield Call(fn, call_args, call_kwargs)
        except LowQualityAnswer as raised:
            rejection: LowQualityAnswer | None = raised
            value = raised.answer
        else:
            rejection = None
        finally:
            stop_recording(recorder)
            _ATTEMPT.reset(token)
        # Count the reply's tokens before the event, so `attempt` events include this attempt;
        # a rejected reply (returned, or carried by a raised LowQualityAnswer) was paid for too.
        usage = usage_of(value)
        if usage is not None:
            job._add_usage(usage, value, counted)
        if wants_debug_events():
            emit(_event(cfg, job, "attempt", number, duration=time.perf_counter() - started))
        if rejection is None:
            if recorder.direct is not None:  # a return_direct tool's output: not judged
                if wants_debug_events():
                    emit(_event(cfg, job, "skipped", number))
                return _kept(value, info, outer)
            if cfg.evaluator is None and cfg.skip is None:
                return _kept(value, info, outer)
            if arguments is None:
                arguments = cfg.bind(args, kwargs)
            request = cfg.request(arguments, value, info._context, number, recorder.calls)
            if cfg.skip is not None and cfg.skip(request):
                if wants_debug_events():
                    emit(_event(cfg, job, "skipped", number))
                return _kept(value, info, outer)
            if cfg.evaluator is None:
                return _kept(value, info, outer)
            try:
                verdict: Verdict = yield Evaluate(cfg.evaluator, request)
            except (JudgeUnavailable, JudgeReplyError) as e:
                if cfg.judge_error_policy == "fail_closed" or e.fail_closed:
                    raise
                verdict = Verdict.unjudged(f"{type(e).__name__}: {e}")
            accepted_unjudged = verdict.status == "unjudged" or (
                verdict.status == "inconclusive" and cfg.on_inconclusive == "accept"
            )
            if accepted_unjudged:  # not judged, and the policy lets the answer through
                emit(_event(cfg, job, "unjudged", number, verdict=verdict))
                return _kept(value, info, outer)
            if wants_debug_events():
                emit(_event(cfg, job, "verdict", number, verdict=verdict))
            if verdict.passed:
                return _kept(value, info, outer)
            rejection = LowQualityAnswer(
                verdict.feedback
                or (
                    f"the answer could not be judged ({verdict.reason})"
                    if verdict.status == "inconclusive"
                    else f"the answer was rejected by {cfg.evaluator.name}"
                ),
                verdict=verdict,
                answer=value,
            )
        attempts.append(
            Attempt(number, value, rejection.verdict, time.perf_counter() - started, feedback)
        )
        if number == max_attempts:
            break
        feedback, previous = rejection.feedback, value
        call_args, call_kwargs = cfg.with_feedback(args, kwargs, feedback)
        if state is None:
            state = tenacity.RetryCallState(None, fn, args, kwargs)  # type: ignore[arg-type]
        # What tenacity's own loop would hold here, so any wait strategy works, including
        # those reading the failure (`wait_exception`) or the time since the first call.
        state.attempt_number = number
        state.outcome = tenacity.Future.construct(number, rejection, True)
        state.outcome_timestamp = time.monotonic()
        delay = max(0.0, float(cfg.wait(state)))
        state.idle_for += delay
        emit(
            _event(
                cfg,
                job,
                "retry",
                number,
                verdict=rejection.verdict,
                feedback=feedback,
                wait=delay,
            )
        )
        if delay > 0 and not _config._testing:
            yield Sleep(delay)
    assert rejection is not None
    rejection.attempts = tuple(attempts)
    rejection.best = _best(attempts)
    best = rejection.best if cfg.on_exhausted == "return_best" else None
    rejection.usage = job.usage
    emit(
        _event(
            cfg,
            job,
            "exhausted",
            max_attempts,
            verdict=rejection.verdict,
            feedback=rejection.feedback,
            error=(
                f"returned the best attempt ({best.number}); last feedback: {rejection.feedback}"
                if best is not None
                else f"LowQualityAnswer: {rejection.feedback}"
            ),
        )
    )
    if best is not None:
        return _kept(best.answer, infos[best.number - 1], outer)
    raise rejection


def retry_on_low_quality(
    *,
    evaluator: EvaluatorLike | None = None,
    max_retries: int = 2,
    wait: Wait = DEFAULT_WAIT,
    on_exhausted: OnExhausted = "raise",
    question: str | Callable[[Mapping[str, Any]], str] | None = None,
    answer: Callable[[Any], str] | None = None,
    context: Callable[[Mapping[str, Any]], Iterable[Any]] | None = None,
    skip: Callable[[EvaluationRequest], bool] | None = None,
    judge_error_policy: JudgeErrorPolicy = "fail_open",
    on_inconclusive: OnInconclusive = "fail",
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Judge every answer of the decorated function and retry a poor one with its feedback.

    An attempt fails when the function raises `LowQualityAnswer` itself or when `evaluator`
    rejects its return value. The next attempt is called with the same arguments plus the
    latest feedback (as the `feedback` keyword, when the function declares that parameter;
    always through `refinekit.current_attempt()`). Feedback never compounds: each retry is
    built from the original call. Any other exception propagates at once, unretried. Works
    on `def` and `async def` functions alike.

    Args:
        evaluator: What judges each answer: an evaluator, an async evaluator or a function
            `(EvaluationRequest) -> Verdict | bool`. None: only `LowQualityAnswer` raised by the
            function triggers a retry.
        max_retries: Retries after the first attempt, 0 to 100 (2 means at most 3 calls).
        wait: Backoff before each retry: any tenacity wait strategy, or seconds. Use
            `refinekit.testing.set_testing()` to make it instant in tests.
        on_exhausted: `"raise"` raises the last `LowQualityAnswer` (with `.attempts` and
            `.best`); `"return_best"` returns the best attempt's answer instead (most criteria
            passed net of failed, the later one on a tie).
        question: Which argument is the question: a parameter name, or a callable of the bound
            arguments (a dict). Default: the parameter `question`, else the first `str` argument.
        answer: A callable turning the return value into the text to judge. Default: a `str` as
            is, a `ChatCompletion`'s text, anything else (a pydantic model, ...) as JSON.
        context: A callable of the bound arguments returning the context documents. Documents
            recorded with `refinekit.record_context()` during the attempt are added to them.
        skip: A predicate of the `EvaluationRequest`; when it is true the answer is returned
            without judging.
        judge_error_policy: What a judging failure does. `"fail_open"`: on `JudgeUnavailable`
            or `JudgeReplyError` the answer is returned unjudged, with a warning and an
            `unjudged` event (never counted as passed). `"fail_closed"`: they are raised.
            `JudgeMisconfigured` is always raised, and a judge's own explicit policy wins.
        on_inconclusive: What an `inconclusive` verdict (the evidence could not support a
            judgement: incomplete tool-call pairing, a state over its size limit) does:
            `"fail"` (the default) counts it as a rejection; `"accept"` returns the answer
            unjudged, with an `unjudged` event.

    Returns:
        A decorator keeping the function's signature.

    Raises:
        ValueError: `max_retries` is not an int from 0 to 100, `on_exhausted` or
            `judge_error_policy` is unknown, or
            `question` names no parameter (raised when decorating, not when calling).
        TypeError: `evaluator` or `wait` cannot be used (also when decorating).
    """
    check_budget("max_retries", max_retries, MAX_RETRIES_LIMIT)
    if on_exhausted not in ("raise", "return_best"):
        raise ValueError(f"on_exhausted must be 'raise' or 'return_best', got {on_exhausted!r}")
    check_policy(judge_error_policy)
    if on_inconclusive not in ("fail", "accept"):
        raise ValueError(f"on_inconclusive must be 'fail' or 'accept', got {on_inconclusive!r}")
    adapted = None if evaluator is None else as_evaluator(evaluator)
    wait_fn = _check_wait(wait)
    for name, value in (
        ("question", question),
        ("answer", answer),
        ("context", context),
        ("skip", skip),
    ):
        if (
            value is not None
            and not callable(value)
            and not (name == "question" and isinstance(value, str))
        ):
            raise TypeError(f"{name}= must be callable, got {type(value).__name__}")

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        cfg = _RetryConfig(
            fn,
            evaluator=adapted,
            max_retries=max_retries,
            wait=wait_fn,
            on_exhausted=on_exhausted,
            question=question,
            answer=answer,
            context=context,
            skip=skip,
            judge_error_policy=judge_error_policy,
            on_inconclusive=on_inconclusive,
        )
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                job, token = enter_job()
                try:
                    return await run_async(_retry_flow(cfg, fn, args, kwargs, job))
                finally:
                    leave_job(token)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            job, token = enter_job()
            try:
                return run_sync(_retry_flow(cfg, fn, args, kwargs, job))  # type: ignore[no-any-return]
            finally:
                leave_job(token)

        return wrapper

    return decorate
