"""The OpenTelemetry tracer behind `refinekit.otel.instrument()`: spans from the engine's hooks.

Imported only by `instrument()`, so `import refinekit` never imports `opentelemetry`. It is
one of the engine's instruments (see `refinekit._engine.events.Instrument`): the engine runs
each decorated call inside its `call` context (the call's span) and each command a flow yields
as its `command` gives it back. What a command is, the command says itself (its `role`, see
`refinekit._engine.flow.Command`):

- an "attempt" (the function; `@reviewed`'s reviser) starts the call's next attempt: the
  previous attempt's span ends and a new one becomes the current span, so what the function
  does (its own model call, a nested decorated call) and the judging of its answer nest under
  it; a "wait" (before a retry) or the call's end ends it;
- an "evaluation" gets a span of its own, and its verdict a `gen_ai.evaluation.result` event
  on the span of the attempt it judged;
- a judge's "model_request" gets a GenAI client span (`chat {model}`) with the model and the
  token counts of the reply (a judge cache's hit makes no request: no span);
- a command running others (`map_commands`: a time limit, a gathering, a judge cache's
  lookup) runs them traced, in the worker threads or tasks it uses (each runs in a copy of the
  caller's context, so the current span carries over);
- a streamed reply's `stream` event sets its chunks, time to first chunk and why it was
  aborted (`refinekit.stream.*`) on the span of the attempt it belongs to.

Nested flows (an evaluator's, a judge's) run through the same drivers, so their commands are
traced too. The event bus adds span events (`refinekit.retry`, `refinekit.correction`, ...).
Every text that reaches an attribute (an error, an explanation, a stack trace) is redacted.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .._core import otel_names as n
from .._core.errors import MissingPrice, TimedOut
from .._core.package import version
from .._core.redact import redact
from .._core.types import Cost, Usage, Verdict
from .._engine.evaluators import evaluator_name
from .._engine.events import Event, Subscription, subscribe
from .._engine.job import cost_of, current_attempt, current_job
from .._providers.replies import usage_of

__all__ = ["OtelTracing"]

_DECORATORS = {
    "_retry_flow": "retry_on_low_quality",
    "_correct_flow": "self_correct",
    "_correct_ladder": "self_correct",
    "_review_flow": "reviewed",
    "_guard_flow": "guarded",
}
"""The decorator each flow belongs to, by the flow function's name."""

TEXT_LIMIT = 2000
"""The most characters of one text attribute (an explanation, an error message)."""

# The span kinds of the event bus that become span events (the others repeat what a span
# or an evaluation event already says).
_BUS_KINDS = frozenset(
    {
        "retry",
        "correction",
        "exhausted",
        "blocked",
        "revision",
        "rejected",
        "skipped",
        "budget",
        "stream",
        "reset",
        "escalation",
    }
)


def _text(text: str) -> str:
    text = redact(text)
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def _error_name(exc: BaseException) -> str:
    return type(exc).__qualname__


def record_error(span: Span, exc: BaseException) -> None:
    """Mark `span` failed by `exc`, with its type, message and stack trace redacted."""
    message = _text(str(exc))
    span.set_status(Status(StatusCode.ERROR, f"{_error_name(exc)}: {message}"))
    span.set_attribute(n.ERROR_TYPE, _error_name(exc))
    span.add_event(
        n.EXCEPTION,
        {
            n.EXCEPTION_TYPE: f"{type(exc).__module__}.{type(exc).__qualname__}",
            n.EXCEPTION_MESSAGE: message,
            n.EXCEPTION_STACKTRACE: redact("".join(traceback.format_exception(exc))),
        },
    )


class _CallState:
    """One decorated call's spans: its own and its current attempt's."""

    __slots__ = ("attempt", "attempt_token", "attempts", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.attempt: Span | None = None
        self.attempt_token: object = None
        self.attempts = 0

    @property
    def current(self) -> Span:
        """The span an evaluation or a bus event of this call belongs to."""
        return self.attempt if self.attempt is not None else self.span

    def end_attempt(self) -> None:
        if self.attempt is not None:
            otel_context.detach(self.attempt_token)  # type: ignore[arg-type]
            self.attempt.end()
            self.attempt = None
            self.attempt_token = None


_STATE: contextvars.ContextVar[_CallState | None] = contextvars.ContextVar(
    "refinekit_otel_call", default=None
)
"""The decorated call whose flow the current driver runs; None inside an evaluator."""

_TARGET: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "refinekit_otel_target", default=None
)
"""Inside an evaluator: the attempt's span, where nested evaluations' results go too."""


def _role(command: Any) -> str:
    """What `command` is (see `refinekit._engine.flow.Command`); "" for the others."""
    role: str = getattr(command, "role", "")
    return role


def _starts_attempt(command: Any) -> bool:
    if _role(command) == "time_limit":
        command = command.command
    return _role(command) == "attempt"


class OtelTracing:
    """Spans for refinekit's calls, attempts, evaluations and judge requests: an instrument."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(n.TRACER_NAME, version(), tracer_provider=tracer_provider)
        self.subscription: Subscription | None = None

    def start(self) -> None:
        self.subscription = subscribe(self._on_event)

    def stop(self) -> None:
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None

    # --- a decorated call -----------------------------------------------------------------

    @contextlib.contextmanager
    def call(self, flow: Callable[..., Any], cfg: Any, job: Any) -> Iterator[None]:
        decorator = _DECORATORS.get(getattr(flow, "__name__", ""), "refinekit")
        function = str(getattr(cfg, "function", "") or "?")
        span = self.tracer.start_span(
            f"refinekit.{decorator} {function}",
            kind=SpanKind.INTERNAL,
            attributes={n.DECORATOR: decorator, n.FUNCTION: function, n.JOB_ID: job.id},
        )
        context_token = otel_context.attach(trace.set_span_in_context(span))
        state = _CallState(span)
        state_token = _STATE.set(state)
        try:
            yield
        except BaseException as exc:
            state.end_attempt()
            record_error(span, exc)
            raise
        finally:
            state.end_attempt()
            _STATE.reset(state_token)
            otel_context.detach(context_token)
            usage: Usage = job.usage
            judge_usage: Usage = job.judge_usage
            span.set_attributes(
                {
                    n.ATTEMPTS: state.attempts,
                    n.INPUT_TOKENS: usage.prompt_tokens,
                    n.OUTPUT_TOKENS: usage.completion_tokens,
                    n.JUDGE_INPUT_TOKENS: judge_usage.prompt_tokens,
                    n.JUDGE_OUTPUT_TOKENS: judge_usage.completion_tokens,
                }
            )
            cost = _cost(job)
            if cost is not None:  # only with prices (`refinekit.Budget(prices=...)`)
                span.set_attributes({n.COST: cost.answer, n.JUDGE_COST: cost.judge})
            span.end()

    # --- the commands a flow yields -------------------------------------------------------

    def _before(self, command: Any) -> _CallState | None:
        """Start or end an attempt of the call whose flow yields `command`.

        Returns:
            The call's state when `command` runs the function (its error fails the attempt).
        """
        state = _STATE.get()
        if state is None:
            return None
        if _starts_attempt(command):
            state.end_attempt()
            state.attempts += 1
            attributes: dict[str, Any] = {n.ATTEMPT_NUMBER: state.attempts}
            info = current_attempt()
            if info is not None and info.tier is not None:  # an escalation ladder's tier
                attributes[n.TIER] = info.tier
                state.span.set_attribute(n.TIER, info.tier)  # the last one tried: who answered
            state.attempt = self.tracer.start_span(
                n.ATTEMPT_SPAN, kind=SpanKind.INTERNAL, attributes=attributes
            )
            state.attempt_token = otel_context.attach(trace.set_span_in_context(state.attempt))
            return state
        if _role(command) == "wait":
            state.end_attempt()
        return None

    def command(self, command: Any) -> _Traced:
        """`command` as it runs traced: the engine runs it next, in the flow's own context."""
        return _Traced(self, command)

    def traced(self, command: Any) -> Any:
        """`command` as it runs traced (itself when it needs no span)."""
        role = _role(command)
        if role == "evaluation":
            return _TracedEvaluate(self, command)
        if role == "model_request":
            return _TracedJudgeCall(self, command)
        map_commands = getattr(command, "map_commands", None)
        return command if map_commands is None else map_commands(self.traced)

    # --- the event bus ----------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if event.kind not in _BUS_KINDS:
            return
        state = _STATE.get()
        if state is None:
            return
        attributes: dict[str, Any] = {n.ATTEMPT_NUMBER: event.attempt}
        if event.wait is not None:
            attributes[n.WAIT] = event.wait
        if event.error:
            attributes[n.ERROR] = _text(event.error)
        if event.failure:
            attributes[n.FAILURE] = event.failure
        if event.kind == "escalation":  # on the call's span: the tier left, and what it did
            state.span.set_attribute(n.TIER, event.tier or "")
            state.span.add_event(n.EVENT_PREFIX + event.kind, _escalation(event, attributes))
            return
        if event.kind == "stream":  # the attempt's span says how its stream went
            streamed: dict[str, Any] = {
                n.STREAM_CHUNKS: event.chunks or 0,
                n.STREAM_USAGE_ESTIMATED: event.estimated,
            }
            if event.first_chunk is not None:
                streamed[n.STREAM_FIRST_CHUNK] = event.first_chunk
            if event.aborted is not None:
                streamed[n.STREAM_ABORTED] = _text(event.aborted)
            if event.resumed:
                streamed[n.STREAM_RESUMED] = True
                streamed[n.STREAM_KEPT] = event.kept or 0
            state.current.set_attributes(streamed)
            attributes.update(streamed)
        state.current.add_event(n.EVENT_PREFIX + event.kind, attributes)


def _escalation(event: Event, attributes: dict[str, Any]) -> dict[str, Any]:
    """An `escalation` span event's attributes: the tier moved to, and the one left."""
    del attributes[n.ATTEMPT_NUMBER]  # the tier's place, not an attempt's
    attributes[n.TIER] = event.tier or ""
    attributes[n.TIER_INDEX] = event.attempt
    left = event.left
    if left is not None:
        attributes[n.TIER_LEFT] = left.name
        attributes[n.TIER_LEFT_CALLS] = left.calls
        attributes[n.TIER_LEFT_INPUT_TOKENS] = left.usage.prompt_tokens
        attributes[n.TIER_LEFT_OUTPUT_TOKENS] = left.usage.completion_tokens
        if left.cost is not None:
            attributes[n.TIER_LEFT_COST] = left.cost.total
    return attributes


class _Traced:
    """A command a flow yields, run traced: its attempt started or ended, its failure recorded."""

    __slots__ = ("command", "otel")

    def __init__(self, otel: OtelTracing, command: Any) -> None:
        self.otel = otel
        self.command = command

    def run_sync(self) -> Any:
        state = self.otel._before(self.command)
        try:
            return self.otel.traced(self.command).run_sync()
        except Exception as exc:
            _failed(self.command, exc, state)
            raise

    async def run_async(self) -> Any:
        state = self.otel._before(self.command)
        try:
            return await self.otel.traced(self.command).run_async()
        except Exception as exc:
            _failed(self.command, exc, state)
            raise


def _cost(job: Any) -> Cost | None:
    """The job's cost for the call's span; None unpriced (a missing price is raised elsewhere)."""
    try:
        return cost_of(job)
    except MissingPrice:
        return None


def _failed(command: Any, exc: Exception, attempt_of: _CallState | None) -> None:
    """Record a failed command: the function failing its attempt, or a time-limited evaluation.

    A time limit that cut an evaluation off leaves its span to the abandoned worker, which
    may still finish it later: the timeout goes on the attempt's span as the evaluation's
    result.
    """
    if attempt_of is not None and attempt_of.attempt is not None:
        record_error(attempt_of.attempt, exc)
    elif (
        _role(command) == "time_limit"
        and _role(command.command) == "evaluation"
        and isinstance(exc, TimedOut)
    ):
        state = _STATE.get()
        target = state.current if state is not None else _TARGET.get()
        if target is not None:
            name = evaluator_name(command.command.evaluator)
            _add_result(target, {n.EVALUATION_NAME: name, n.ERROR_TYPE: _error_name(exc)})


def _add_result(span: Span, attributes: dict[str, Any]) -> None:
    span.add_event(n.EVALUATION_RESULT, attributes)


class _Spanned:
    """A command run in a span of its own: `_span()` opens it and yields what the result does."""

    __slots__ = ("command", "otel")

    def __init__(self, otel: OtelTracing, command: Any) -> None:
        self.otel = otel
        self.command = command

    def _span(self) -> AbstractContextManager[Callable[[Any], None]]:
        raise NotImplementedError

    def run_sync(self) -> Any:
        with self._span() as done:
            result = self.command.run_sync()
            done(result)
            return result

    async def run_async(self) -> Any:
        with self._span() as done:
            result = await self.command.run_async()
            done(result)
            return result


class _TracedEvaluate(_Spanned):
    """An evaluation in a span of its own; its verdict an evaluation event."""

    __slots__ = ()

    @contextlib.contextmanager
    def _span(self) -> Iterator[Callable[[Verdict], None]]:
        name = evaluator_name(self.command.evaluator)
        state = _STATE.get()
        target = state.current if state is not None else _TARGET.get()
        with self.otel.tracer.start_as_current_span(
            f"{n.EVALUATE_SPAN_PREFIX} {name}",
            kind=SpanKind.INTERNAL,
            attributes={n.EVALUATOR: name},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            state_token = _STATE.set(None)
            target_token = _TARGET.set(target)
            try:
                yield functools.partial(_evaluated, span, target, name)
            except Exception as exc:
                record_error(span, exc)
                _add_result(
                    _open(target, span), {n.EVALUATION_NAME: name, n.ERROR_TYPE: _error_name(exc)}
                )
                raise
            finally:
                _TARGET.reset(target_token)
                _STATE.reset(state_token)


def _evaluated(span: Span, target: Span | None, name: str, verdict: Verdict) -> None:
    span.set_attributes({n.VERDICT_PASSED: verdict.passed, n.VERDICT_STATUS: verdict.status})
    attributes: dict[str, Any] = {n.EVALUATION_NAME: name}
    if verdict.score is not None:
        attributes[n.EVALUATION_SCORE_VALUE] = float(verdict.score)
    if verdict.status == "judged":
        attributes[n.EVALUATION_SCORE_LABEL] = "pass" if verdict.passed else "fail"
    else:
        attributes[n.EVALUATION_SCORE_LABEL] = verdict.status
    explanation = verdict.feedback or verdict.reason or ""
    if explanation:
        attributes[n.EVALUATION_EXPLANATION] = _text(explanation)
    _add_result(_open(target, span), attributes)


def _open(target: Span | None, span: Span) -> Span:
    """The attempt's span, unless it ended while a time limit's abandoned worker judged on."""
    return target if target is not None and target.is_recording() else span


class _TracedJudgeCall(_Spanned):
    """A judge model's request in a GenAI client span (`chat {model}`)."""

    __slots__ = ()

    @contextlib.contextmanager
    def _span(self) -> Iterator[Callable[[Any], None]]:
        before = _judge_usage()
        judge = self.command.judge
        kwargs = self.command.kwargs
        model = str(kwargs.get("model") or judge.model)
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.OPERATION_CHAT,
            n.PROVIDER_NAME: judge.provider,
            n.REQUEST_MODEL: model,
        }
        if isinstance(kwargs.get("max_tokens"), int):
            attributes[n.REQUEST_MAX_TOKENS] = kwargs["max_tokens"]
        if isinstance(kwargs.get("temperature"), (int, float)):
            attributes[n.REQUEST_TEMPERATURE] = float(kwargs["temperature"])
        attributes.update(_server(judge))
        with self.otel.tracer.start_as_current_span(
            f"{n.OPERATION_CHAT} {model}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield functools.partial(_replied, span, before=before)
            except Exception as exc:
                record_error(span, exc)
                raise


def _server(judge: Any) -> dict[str, Any]:
    """`server.address` and `server.port` of the judge's endpoint (never its credentials)."""
    try:
        parts = urlsplit(judge.where)
        host, port = parts.hostname, parts.port
    except (AttributeError, TypeError, ValueError):
        return {}
    found: dict[str, Any] = {}
    if host:
        found[n.SERVER_ADDRESS] = host
    if port:
        found[n.SERVER_PORT] = port
    return found


def _judge_usage() -> Usage | None:
    job = current_job()
    return job.judge_usage if job is not None else None


def _replied(span: Span, result: Any, before: Usage | None) -> None:
    """The reply's facts on the span: from the completion, or the job's judge usage since."""
    usage = usage_of(result)
    if usage is not None:  # a completion: its own facts
        _response(span, result)
    elif before is not None:
        # A structured reply (instructor's retries included) counted itself in the job.
        after = _judge_usage()
        if after is not None:
            usage = after - before
    if usage is not None:
        span.set_attributes(
            {
                n.USAGE_INPUT_TOKENS: usage.prompt_tokens,
                n.USAGE_OUTPUT_TOKENS: usage.completion_tokens,
            }
        )


def _response(span: Span, completion: Any) -> None:
    response_model = getattr(completion, "model", None)
    if isinstance(response_model, str) and response_model:
        span.set_attribute(n.RESPONSE_MODEL, response_model)
    response_id = getattr(completion, "id", None)
    if isinstance(response_id, str) and response_id:
        span.set_attribute(n.RESPONSE_ID, response_id)
    choices = getattr(completion, "choices", None)
    if isinstance(choices, list):
        reasons = [str(c.finish_reason) for c in choices if getattr(c, "finish_reason", None)]
        if reasons:
            span.set_attribute(n.RESPONSE_FINISH_REASONS, reasons)
