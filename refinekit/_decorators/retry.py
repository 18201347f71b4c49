"""`@retry_on_low_quality`: judge each answer, feed the defect back, try again within a cap."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Literal, TypedDict, overload

import tenacity
from typing_extensions import Unpack

from .._core import config as _config
from .._core.errors import BudgetExceeded, JudgeError, LowQualityAnswer
from .._core.errtext import utf8_text
from .._core.tiers import Escalation, EscalationLike, ModelRefused
from .._core.types import Attempt, AttemptInfo, EvaluationRequest, Verdict
from .._engine import budget as _budget
from .._engine.attempt import attempt_step
from .._engine.evaluators import Adapted, EvaluatorLike, as_evaluator
from .._engine.events import Event, EventKind, emit, make_event, wants_debug_events
from .._engine.flow import Call, Evaluate, Flow, Sleep
from .._engine.job import Job, check_budget_option, current_attempt
from .._engine.ladder import Escalate, Ladder, Rung, Tally, climb, tier_step
from .._engine.options import Args, Fn, Kwargs, Options, signature_of
from .._engine.outcome import Record
from .._engine.policy import (
    JudgeErrorPolicy,
    OnInconclusive,
    check_budget,
    check_on_inconclusive,
    check_policy,
    judge_failure,
)
from .._engine.prices import Budget
from .._engine.request import QuestionSelector, RequestMaker
from .._engine.reserve import Reservation
from .._engine.stream_commands import arguments_chars, is_streamed
from .._engine.wrapper import wrap
from .._providers.replies import Returns, check_returns, refusal_of, text_answer
from .retry_attempts import best_of, kept, unjudged
from .retry_stream_modes import Attempts, StreamMode, check_stream_mode
from .retry_types import (
    DEFAULT_WAIT,
    MAX_RETRIES_LIMIT,
    Callback,
    OnExhausted,
    Retrying,
    Stop,
    TextRetrying,
    Wait,
    check_callable,
    check_wait,
)

__all__ = ["DEFAULT_WAIT", "MAX_RETRIES_LIMIT", "Retrying", "TextRetrying", "retry_on_low_quality"]


class _RetryKeywords(TypedDict, total=False):
    """The options but `returns`, as type checkers see them (`retry_on_low_quality`'s overloads)."""

    evaluator: EvaluatorLike | None
    max_retries: int
    wait: Wait
    on_exhausted: OnExhausted
    question: QuestionSelector | None
    answer: Callable[[Any], str] | None
    context: Callable[[Mapping[str, Any]], Iterable[Any]] | None
    skip: Callable[[EvaluationRequest], bool] | None
    judge_error_policy: JudgeErrorPolicy
    on_inconclusive: OnInconclusive
    stop: Stop | None
    before_sleep: Callback | None
    after: Callback | None
    budget: Budget | None
    stream_mode: StreamMode
    escalate: EscalationLike | None


class _RetryConfig:
    """One function's configuration: its requests, where its `feedback` goes, its options."""

    def __init__(self, fn: Callable[..., Any], options: _RetryOptions) -> None:
        self.requests = RequestMaker(
            fn, question=options.question, answer=options.answer, context=options.context
        )
        self.function = self.requests.function
        feedback = self.requests.signature.parameters.get("feedback")
        self.accepts_feedback = feedback is not None and feedback.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        self.feedback_index = (
            self.requests.names.index("feedback")
            if feedback is not None and feedback.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            else None
        )
        self.options = options
        self.ladder = Ladder.of(
            options.escalation, fn, self.function, "max_retries", options.max_retries
        )

    def with_feedback(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], feedback: str
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not self.accepts_feedback:
            return args, kwargs
        i = self.feedback_index
        if i is not None and len(args) > i:
            return (*args[:i], feedback, *args[i + 1 :]), kwargs
        return args, {**kwargs, "feedback": feedback}


@dataclass(frozen=True)
class _RetryOptions(Options):
    """`retry_on_low_quality`'s options: its keyword arguments (documented there), checked once."""

    decorator: ClassVar[str] = "retry_on_low_quality"
    config: ClassVar[type[_RetryConfig]] = _RetryConfig
    _: KW_ONLY
    evaluator: EvaluatorLike | None = None
    max_retries: int = 2
    wait: Wait = DEFAULT_WAIT
    on_exhausted: OnExhausted = "raise"
    question: QuestionSelector | None = None
    answer: Callable[[Any], str] | None = None
    context: Callable[[Mapping[str, Any]], Iterable[Any]] | None = None
    skip: Callable[[EvaluationRequest], bool] | None = None
    judge_error_policy: JudgeErrorPolicy = "fail_open"
    on_inconclusive: OnInconclusive = "fail"
    stop: Stop | None = None
    before_sleep: Callback | None = None
    after: Callback | None = None
    budget: Budget | None = None
    stream_mode: StreamMode = "buffered"
    escalate: EscalationLike | None = None
    returns: Returns = "value"
    # What the checks make of them:
    adapted: Adapted | None = field(init=False, repr=False, compare=False)
    wait_fn: Callable[[tenacity.RetryCallState], float] = field(
        init=False, repr=False, compare=False
    )
    job_budget: Budget | None = field(init=False, repr=False, compare=False)
    returns_text: bool = field(init=False, repr=False, compare=False)
    escalation: Escalation | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_budget("max_retries", self.max_retries, MAX_RETRIES_LIMIT)
        check_stream_mode(self.stream_mode)
        returns_text = check_returns(self.returns)
        job_budget = check_budget_option(self.budget)
        if self.on_exhausted not in ("raise", "return_best"):
            raise ValueError(
                f"on_exhausted must be 'raise' or 'return_best', got {self.on_exhausted!r}"
            )
        check_policy(self.judge_error_policy)
        check_on_inconclusive(self.on_inconclusive)
        adapted = None if self.evaluator is None else as_evaluator(self.evaluator)
        wait_fn = check_wait(self.wait)
        for name in ("question", "answer", "context", "skip"):
            value = getattr(self, name)
            if (
                value is not None
                and not callable(value)
                and not (name == "question" and isinstance(value, str))
            ):
                raise TypeError(f"{name}= must be callable, got {type(value).__name__}")
        stop = "a tenacity stop strategy (e.g. tenacity.stop_after_delay(10))"
        check_callable("stop", self.stop, stop)
        callback = "a callable taking a tenacity.RetryCallState"
        check_callable("before_sleep", self.before_sleep, callback)
        check_callable("after", self.after, callback)
        escalation = Escalation.of(self.escalate)
        for tier in () if escalation is None else escalation.tiers:
            if tier.max_retries is not None:
                check_budget(f"max_retries of tier {tier.name!r}", tier.max_retries, 100)
        self.keep(
            adapted=adapted,
            wait_fn=wait_fn,
            job_budget=job_budget,
            returns_text=returns_text,
            escalation=escalation,
        )

    def decorate(self, fn: Any) -> Any:
        return wrap(fn, _retry_flow, self)


def _event(
    cfg: _RetryConfig,
    job: Job,
    kind: EventKind,
    number: int,
    maximum: int | None = None,
    **fields: Any,
) -> Event:
    # under a ladder, attempts are numbered across its tiers: the most is all tiers' together
    ladder = cfg.ladder
    most = cfg.options.max_retries + 1 if ladder is None else ladder.total
    most = most if maximum is None else maximum
    return make_event(kind, "retry_on_low_quality", cfg.function, job, number, most, **fields)


def _retry_flow(
    cfg: _RetryConfig, fn: Fn, args: Args, kwargs: Kwargs, job: Job, record: Record | None
) -> Flow[Any]:
    opts = cfg.options
    attempts: list[Attempt] = []
    ladder = cfg.ladder
    most = opts.max_retries + 1 if ladder is None else ladder.total
    streams = Attempts(cfg.function, opts.stream_mode, most, opts.adapted)
    infos: list[AttemptInfo] = []
    try:
        if ladder is None:
            steps = _retry_steps(cfg, fn, args, kwargs, job, record, attempts, streams, infos)
        else:

            def run(rung: Rung, carried: Any, tally: Tally) -> Flow[Any]:
                return _retry_steps(
                    cfg,
                    fn,
                    args,
                    kwargs,
                    job,
                    record,
                    attempts,
                    streams,
                    infos,
                    rung,
                    carried,
                    tally,
                )

            steps = climb(ladder, job, record, run, decorator="retry_on_low_quality")
        value = yield from steps
        yield from streams.finish(job, value)  # fn.stream(...): the answer returned
        return value
    except BudgetExceeded as stopped:
        _budget.surface(
            stopped,
            attempts,
            best_of(attempts),
            decorator="retry_on_low_quality",
            function=cfg.function,
            job=job,
        )
        raise


def _retry_steps(
    cfg: _RetryConfig,
    fn: Fn,
    args: Args,
    kwargs: Kwargs,
    job: Job,
    record: Record | None,
    attempts: list[Attempt],
    streams: Attempts,
    infos: list[AttemptInfo],
    rung: Rung | None = None,
    carried: tuple[str, Any] | None = None,
    tally: Tally | None = None,
) -> Flow[Any]:
    """The attempts of one tier (the only one without `escalate=`) until one passes."""
    opts = cfg.options
    first = len(infos) + 1  # attempts are numbered across a ladder's tiers
    in_tier = (opts.max_retries if rung is None else rung.budget) + 1
    max_attempts = in_tier if cfg.ladder is None else cfg.ladder.total
    previous_attempt: Reservation | None = None  # what the last attempt held and used
    arguments: dict[str, Any] | None = None
    state: tenacity.RetryCallState | None = None
    feedback: str | None = None
    previous: Any = None
    call_args, call_kwargs = args, kwargs
    if carried is not None:  # the tier below's last feedback and answer
        feedback, previous = carried
        call_args, call_kwargs = cfg.with_feedback(args, kwargs, feedback)
    outer = current_attempt()  # an enclosing attempt (or `refinekit eval`'s case), if any
    began = time.monotonic()  # tenacity's `start_time`: what `stop_after_delay` counts from
    for number in range(first, first + in_tier):
        # Each attempt reserves its share of the budget (estimated from the previous one)
        # before it is made, until its reply is counted; it stops here when that does not fit.
        extra = len(feedback) if feedback else 0
        planned = f"attempt {number} of {cfg.function}"
        if rung is None:
            info = AttemptInfo(number, max_attempts, feedback, previous)
            command = Call(fn, call_args, call_kwargs)
        else:
            info = rung.info(number, max_attempts, feedback, previous)
            command = Call(*rung.call(fn, call_args, call_kwargs))
        infos.append(info)
        # Entered during the call, its tool calls recorded for the judge; a LowQualityAnswer
        # it raises is a rejection. Its reply is counted before the event, so `attempt`
        # events include this attempt.
        made = attempt_step(
            job,
            cfg.function,
            command,
            planned=planned,
            previous=previous_attempt,
            extra_chars=extra,
            info=info,
            enter=True,
            tools=True,
            rejects=True,
        )
        with (yield from tier_step(made, tally, planned)) as step:
            previous_attempt, started, recorder = step.held, step.started, step.recorder
            value, rejection = step.value, step.rejection
            assert recorder is not None
            streamed = rejection is None and is_streamed(value)
            cut: Verdict | None = None
            if streamed:  # read as text (retry_stream_modes): counted, maybe stopped by a rule
                chars = arguments_chars(call_args, call_kwargs)
                value, cut = yield from streams.read(value, job, number, chars)
                if cut is not None:
                    rejection = LowQualityAnswer(
                        cut.feedback or "the answer was rejected by a rule check",
                        verdict=cut,
                        answer=value,
                    )
        if rung is not None and rejection is None:
            refused = streams.refusal if streamed else refusal_of(value)
            if refused is not None:  # what fn.stream(...) showed of it is void
                yield from streams.retrying(job, number, f"the model refused: {refused}", False)
                raise ModelRefused(refused)
        if opts.returns_text and (rejection is None or value is not None):
            # From here on the answer is the reply's text: judged, kept, returned.
            value = text_answer(value, cfg.function, "retry_on_low_quality")
            if rejection is not None:
                rejection.answer = value
        yield from streams.show(value, number, streamed)  # provisional: a whole answer
        if wants_debug_events():
            emit(_event(cfg, job, "attempt", number, duration=time.perf_counter() - started))
        if rejection is None:
            if recorder.direct is not None:  # a return_direct tool's output: not judged
                if wants_debug_events():
                    emit(_event(cfg, job, "skipped", number))
                unjudged(record, info, value, "return_direct", started)
                return kept(value, info, outer)
            if opts.adapted is None and opts.skip is None:
                unjudged(record, info, value, "no evaluator", started)
                return kept(value, info, outer)
            if arguments is None:
                arguments = cfg.requests.bind(args, kwargs) or {}
            request = cfg.requests.request(arguments, value, info._context, number, recorder.calls)
            if opts.skip is not None and opts.skip(request):
                if wants_debug_events():
                    emit(_event(cfg, job, "skipped", number))
                unjudged(record, info, value, "skipped", started)
                return kept(value, info, outer)
            if opts.adapted is None:
                unjudged(record, info, value, "no evaluator", started)
                return kept(value, info, outer)
            try:
                verdict: Verdict = yield Evaluate(opts.adapted, request)
            except JudgeError as e:
                verdict = judge_failure(e, opts.judge_error_policy)
            if record is not None:
                record.verdicts.append(verdict)
            accepted_unjudged = verdict.status == "unjudged" or (
                verdict.status == "inconclusive" and opts.on_inconclusive == "accept"
            )
            if accepted_unjudged or verdict.passed:
                if accepted_unjudged:  # not judged, and the policy lets the answer through
                    emit(_event(cfg, job, "unjudged", number, verdict=verdict))
                elif wants_debug_events():
                    emit(_event(cfg, job, "verdict", number, verdict=verdict))
                if record is not None:
                    duration = time.perf_counter() - started
                    record.attempts.append(
                        Attempt(number, value, verdict, duration, feedback, info.tier)
                    )
                return kept(value, info, outer)
            if wants_debug_events():
                emit(_event(cfg, job, "verdict", number, verdict=verdict))
            rejection = LowQualityAnswer(
                verdict.feedback
                or (
                    f"the answer could not be judged ({verdict.reason})"
                    if verdict.status == "inconclusive"
                    else f"the answer was rejected by {opts.adapted.name}"
                ),
                verdict=verdict,
                answer=value,
            )
        elif record is not None:
            record.verdicts.append(rejection.verdict)
        duration = time.perf_counter() - started
        attempt = Attempt(number, value, rejection.verdict, duration, feedback, info.tier)
        attempts.append(attempt)
        if record is not None:
            record.attempts.append(attempt)
        # Valid UTF-8, as the function will likely put it into its next request.
        feedback, previous = utf8_text(rejection.feedback), value
        if state is None:
            state = tenacity.RetryCallState(None, fn, args, kwargs)  # type: ignore[arg-type]
            state.start_time = began
        # What tenacity's own loop holds here, so any wait or stop strategy and any callback
        # works, including those reading the failure (`wait_exception`, `before_sleep_log`)
        # or the time since the first call (`stop_after_delay`).
        state.attempt_number = number
        state.outcome = tenacity.Future.construct(number, rejection, True)
        state.outcome_timestamp = time.monotonic()
        if opts.after is not None:
            yield Call(opts.after, (state,), {})
        if number == first + in_tier - 1:
            break
        delay = max(0.0, float(opts.wait_fn(state)))
        state.upcoming_sleep = delay
        if opts.stop is not None and opts.stop(state):
            break
        call_args, call_kwargs = cfg.with_feedback(args, kwargs, feedback)
        state.next_action = tenacity.RetryAction(delay)
        state.idle_for += delay
        if record is not None:
            record.idle_for += delay
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
        # provisional fn.stream(...): what the consumer saw of this attempt is void
        yield from streams.retrying(job, number, feedback, cut is not None)
        if opts.before_sleep is not None:
            yield Call(opts.before_sleep, (state,), {})
        if delay > 0 and not _config._testing:
            yield Sleep(delay)
    assert rejection is not None
    if rung is not None and not rung.last:  # the next tier is tried, maybe told this
        yield from streams.retrying(job, number, rejection.feedback, cut is not None)
        summary = rejection.feedback or "the answer was rejected"
        raise Escalate(rejection, (utf8_text(rejection.feedback), rejection.answer), summary)
    rejection.attempts = tuple(attempts)
    rejection.best = best_of(attempts)
    best = rejection.best if opts.on_exhausted == "return_best" else None
    rejection.usage = job.usage
    rejection.judge_usage = job.judge_usage
    rejection.job_id = job.id
    emit(
        _event(
            cfg,
            job,
            "exhausted",
            len(attempts),
            len(attempts),  # the most there were: `stop=` may have ended them early
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
        if tally is not None:
            tally.answered_by = best.tier
        return kept(best.answer, infos[best.number - 1], outer)
    raise rejection


@overload
def retry_on_low_quality(
    *, returns: Literal["text"], **options: Unpack[_RetryKeywords]
) -> TextRetrying: ...


@overload
def retry_on_low_quality(
    *, returns: Literal["value"] = ..., **options: Unpack[_RetryKeywords]
) -> Retrying: ...


@signature_of(_RetryOptions)
def retry_on_low_quality(**options: Any) -> Retrying | TextRetrying:  # noqa: D417
    """Judge every answer of the decorated function and retry a poor one with its feedback.

    An attempt fails when the function raises `LowQualityAnswer` itself or when `evaluator`
    rejects its return value. The next attempt is called with the same arguments plus the
    latest feedback (as the `feedback` keyword, when the function declares that parameter;
    always through `refinekit.current_attempt()`). Feedback never compounds: each retry is
    built from the original call. Any other exception propagates at once, unretried. Works
    on `def` and `async def` functions alike, and on methods, classmethods and staticmethods
    (`self`/`cls` is bound, never the question nor one of the bound arguments it reads).

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
        stop: A tenacity stop strategy (`tenacity.stop_after_delay(10)`, combinations with
            `|` and `&`), asked after each rejected attempt whether to stop retrying; the
            attempts end at whichever comes first, it or `max_retries`. Its
            `RetryCallState` holds the rejection (`outcome.exception()` is the
            `LowQualityAnswer`) and `upcoming_sleep`, the wait the next retry would have.
        before_sleep: Called with the tenacity `RetryCallState` before each wait (after the
            `retry` event), as tenacity calls it: `tenacity.before_sleep_log(logger,
            logging.INFO)` works. An `async def` callback is awaited on the async path.
        after: Called with the tenacity `RetryCallState` after each rejected attempt (the last
            one too), as tenacity calls it: `tenacity.after_log(logger, logging.INFO)` works.
        budget: A `refinekit.Budget` for the job (tokens, cost, model calls of the answer
            calls and the judge calls together): the call raises `refinekit.BudgetExceeded`
            as soon as a call has taken the job over it, or before another attempt or a judge
            call it cannot cover. Inside another refinekit call it can only tighten that
            job's budget. See docs/budgets.md.
        stream_mode: For a function that returns a stream (its answer's text is judged when
            complete), what `fn.stream(...)` yields: `"buffered"` (the default): only the
            answer returned (one that passed, or the best attempt), replayed as the pieces it
            streamed; `"provisional"`: each attempt's pieces as they come, and a
            `refinekit.Reset` before a retry's. A rule check that rejects a part of the answer
            (`checks.excludes`, `checks.max_length`) stops its stream early in both modes. See
            docs/streaming.md.
        escalate: An escalation ladder, cheapest tier first: a list of model names (passed
            to the function as its `model` keyword argument), callables (called instead of
            the function, with its arguments) or `refinekit.Tier`s, or a
            `refinekit.Escalation`. Each tier gets its own retries (`Tier(...,
            max_retries=0)`; default `max_retries`); when they are spent, or the model
            refuses, the next tier is tried, from the caller's arguments
            (`Escalation(carry=True)`: given the last feedback and answer, as a retry is).
            Attempts are numbered across the
            tiers; the last tier's rejection raises (or returns the best attempt of any
            tier) as without a ladder, with `tiers`. `Outcome.tier` says which tier
            answered. See docs/escalation.md.
        returns: What the caller gets. `"value"` (the default): what the function returned,
            as it is (a stream: its text). `"text"`: the reply's text, for a function that
            returns the model's reply (an OpenAI `ChatCompletion`, an Anthropic `Message`, ...
            or a `str`), so that its usage counts in the job and the caller still gets a
            `str`: the text the
            evaluator judged, also in `LowQualityAnswer.answer`, the attempts, the best
            attempt and `current_attempt().previous_answer`. A reply that asks for tool calls,
            or a value that is no reply, is then a `TypeError`.

    Returns:
        A decorator keeping the function's signature. The decorated function also has
        `.outcome(*args, **kwargs)` (the call's `refinekit.Outcome`),
        `.retry_with(**changes)` (the same function with options changed) and
        `.stream(*args, **kwargs)` (the call consumed as it runs).

    Raises:
        ValueError: `max_retries` is not an int from 0 to 100, `on_exhausted`,
            `judge_error_policy`, `stream_mode` or `returns` is unknown, or
            `question` names no parameter (raised when decorating, not when calling).
        TypeError: `evaluator`, `wait`, `stop`, `before_sleep`, `after`, `budget` or
            `escalate` cannot be used (also when decorating).
    """
    return _RetryOptions.of(options).decorate
