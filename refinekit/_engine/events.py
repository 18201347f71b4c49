"""Events and the hook API; logging is one subscriber.

Every text a log line quotes (feedback, an error, a verdict's reason, a DEBUG detail) passes
through `redact` first. An event's own texts (`feedback`, `error`, `detail`, `aborted`) are
redacted when it is made, whoever made it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._core.errors import MissingPrice, RefinekitWarning
from .._core.redact import redact, redact_fields
from .._core.types import Cost, Usage, Verdict
from .job import cost_of

__all__ = ["Event", "EventKind", "Subscription", "subscribe"]

logger = logging.getLogger("refinekit")
logger.addHandler(logging.NullHandler())

EventKind = Literal[
    "attempt",
    "verdict",
    "skipped",
    "unjudged",
    "retry",
    "correction",
    "exhausted",
    "blocked",
    "review",
    "revision",
    "rejected",
    "judge_cache",
    "budget",
    "stream",
    "reset",
    "grounding",
]
"""What happened:

- `attempt`: the wrapped function returned (or raised `LowQualityAnswer`);
- `verdict`: an evaluator judged the answer;
- `skipped`: `skip=` said not to judge the answer, which is returned as it is;
- `unjudged`: judging failed and the error policy let the answer through unjudged;
- `retry`: another attempt follows, after `wait` seconds, with `feedback`;
- `correction`: `@self_correct` appended a correction turn (`error` says why);
- `exhausted`: the budget ran out; the error named in `error` is raised (or the best
  attempt returned);
- `blocked`: `@guarded`'s screen blocked an input or an output, and the refusal was returned
  in its place (`error` says which and why, `verdict` is the screen's, and `detail` holds the
  blocked text, which is logged at DEBUG only);
- `review`: `@reviewed` judged a draft (`attempt`: 1 for the original, 2 for the first
  revision); `verdict` is the verdict (`unjudged` when the judge failed or timed out, `error`
  then says why), and its `metadata["review"]` holds the mode and the draft number;
- `revision`: `@reviewed` asked the reviser for revision number `attempt`, with `feedback`;
- `rejected`: `@reviewed` raises `AnswerRejected`; `error` starts with its reason;
- `judge_cache`: a judge model with a cache looked a request up (`cache` is "hit" or "miss",
  `function` the judge's kind, `decorator` is "judge", `detail` the key, `attempt` and
  `max_attempts` 0; `job_id` and the usage are the job's the judge runs in, or "" and none
  outside a job). Like `attempt` and `verdict`, it is logged at DEBUG only.
- `budget`: the job's `refinekit.Budget` stopped the call: `BudgetExceeded` is raised, and
  `error` is its message (once per stop, from the innermost decorated call it left).
- `stream`: a stream the function returned ended (`attempt` is the attempt it was): `chunks`
  read, `first_chunk` (seconds to the first one), `aborted` (why it was closed early, or how
  it broke; None when it was read to its end), `estimated` (its usage is an estimate). Logged
  at INFO when it was aborted or broke, else at DEBUG only (and only built for a hook).
- `reset`: the consumer of `fn.stream(...)` was told that what it got is void (a
  `refinekit.Reset`); `error` says why, `attempt` is the voided attempt.
- `grounding`: `response_format(..., source=...)` left a grounded field unconstrained
  (`decorator` is "response_format", `function` the schema's name, `error` names the field
  and why: no source text, no candidate, over a cap); the validator checks it afterwards.
  `job_id` is the job it was called in, or "" outside one.
"""


@dataclass(frozen=True)
class Event:
    """One thing that happened inside a refinekit call.

    Attributes:
        kind: What happened (see `EventKind`).
        decorator: `retry_on_low_quality`, `self_correct`, `guarded` or `reviewed` (`judge`
            for `judge_cache`, `response_format` for `grounding`).
        function: The qualified name of the decorated function.
        job_id: The id of the job the call belongs to.
        attempt: The attempt number (for `correction`: the number of the correction).
        max_attempts: The most attempts (for `correction`: the job's correction budget).
        is_last: Whether no further attempt (or correction) is possible after this one.
        usage: The job's usage of the answering model so far.
        judge_usage: The job's usage of model judges so far.
        cost: What the job's model calls cost so far (answer and judge apart), when its
            budget has prices (`refinekit.Budget(prices=...)`); None otherwise.
        verdict: The verdict, on `verdict` and on `retry`/`exhausted` after a rejection.
        feedback: The feedback passed on (retry) or the error explained (correction).
        wait: Seconds waited before the next attempt (`retry`; reported even in testing mode).
        duration: Seconds the attempt took (`attempt`).
        error: A short summary of what failed (`correction`, `exhausted`, `blocked`).
        detail: Long text for DEBUG logs only, such as the full correction message or the
            text `@guarded` blocked.
        repairs: The lossless repairs `@self_correct` made to the reply (`attempt`), e.g.
            `("code_fence", "trailing_comma")`; empty when the reply was strict JSON.
        failure: What was wrong with the reply (`correction`, `exhausted` of `@self_correct`):
            a `refinekit.FailureKind`.
        cache: "hit" or "miss" (`judge_cache`): whether the judge cache held the reply.
        chunks: The chunks a stream yielded before it ended or was closed (`stream`).
        first_chunk: Seconds from opening the stream to its first chunk (`stream`; None when
            none came).
        aborted: Why the stream was closed before its end (`"budget"`, a failed field, a rule
            check's rejection, `"closed"`: by its consumer, or its task was cancelled), or how
            it broke (`"interrupted: ..."`); None when it was read to its end (`stream`).
        estimated: Whether the stream's usage in `usage` is an estimate (characters / 4): the
            server reported none before the stream ended or was closed (`stream`).
    """

    kind: EventKind
    decorator: str
    function: str
    job_id: str
    attempt: int
    max_attempts: int
    is_last: bool
    usage: Usage
    judge_usage: Usage = field(default_factory=Usage)
    cost: Cost | None = None
    verdict: Verdict | None = None
    feedback: str | None = None
    wait: float | None = None
    duration: float | None = None
    error: str | None = None
    detail: str | None = None
    repairs: tuple[str, ...] = ()
    failure: str | None = None
    cache: Literal["hit", "miss"] | None = None
    chunks: int | None = None
    first_chunk: float | None = None
    aborted: str | None = None
    estimated: bool = False

    def __post_init__(self) -> None:
        # Every text an event carries is redacted here, whoever made it: hooks, logs and
        # traces only ever see it so.
        redact_fields(self, _TEXT_FIELDS)


_TEXT_FIELDS = ("feedback", "error", "detail", "aborted")


def make_event(
    kind: EventKind,
    decorator: str,
    function: str,
    job: Any,
    number: int,
    maximum: int,
    **fields: Any,
) -> Event:
    """An event of `job` (a `refinekit.Job`), with `is_last` and the usage so far filled in."""
    return Event(
        kind=kind,
        decorator=decorator,
        function=function,
        job_id=job.id,
        attempt=number,
        max_attempts=maximum,
        is_last=number >= maximum,
        usage=job.usage,
        judge_usage=job.judge_usage,
        cost=_cost(job),
        **fields,
    )


def _cost(job: Any) -> Cost | None:
    """The job's cost for an event; None unpriced (a missing price stops the job elsewhere)."""
    try:
        return cost_of(job)
    except MissingPrice:
        return None


Hook = Callable[[Event], object]

_lock = threading.Lock()
_hooks: tuple[Hook, ...] = ()


class Subscription:
    """A registered hook; `close()` (or leaving the `with` block) unsubscribes it."""

    __slots__ = ("hook",)

    def __init__(self, hook: Hook) -> None:
        self.hook = hook

    def close(self) -> None:
        """Stop calling the hook. Closing twice is harmless."""
        global _hooks
        with _lock:
            _hooks = tuple(h for h in _hooks if h is not self.hook)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def subscribe(hook: Hook) -> Subscription:
    """Call `hook(event)` for every refinekit event, in every thread and task.

    A hook that raises does not break the job: the error is logged on the `refinekit` logger
    with its traceback and issued as a `RefinekitWarning`, and the job goes on.

    Args:
        hook: A callable taking an `Event`; its return value is ignored.

    Returns:
        A `Subscription`; close it (or use it as a context manager) to unsubscribe.
    """
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    global _hooks
    with _lock:
        _hooks = (*_hooks, hook)
    return Subscription(hook)


def _report_hook_error(hook: Hook, event: Event, exc: Exception) -> None:
    name = getattr(hook, "__qualname__", repr(hook))
    message = f"refinekit event hook {name} raised {type(exc).__name__} on a {event.kind!r} event"
    logger.error(message, exc_info=exc)
    # A warnings filter that escalates to errors must not break the job: the log stands.
    with contextlib.suppress(Exception):
        warnings.warn(f"{message}: {redact(str(exc))}", RefinekitWarning, stacklevel=2)


def wants_debug_events() -> bool:
    """Whether a DEBUG-only event (attempt, verdict, skipped, judge_cache) reaches anyone.

    Building an `Event` costs microseconds; when no hook is subscribed and the `refinekit`
    logger drops DEBUG records, such an event would reach nobody, so callers skip building it.
    The other kinds (retry, correction, exhausted, unjudged, blocked, review, revision,
    rejected) are always emitted.
    """
    return bool(_hooks) or logger.isEnabledFor(logging.DEBUG)


def emit(event: Event) -> None:
    _log_event(event)
    for hook in _hooks:
        try:
            hook(event)
        except Exception as exc:
            _report_hook_error(hook, event, exc)


class Tracing(Protocol):
    """What the engine asks of a tracer (`refinekit.otel.instrument()` installs one).

    The decorator wrapper opens `call(...)` around each decorated call, and the flow drivers
    run each command through `run_sync` / `run_async` instead of the command's own methods;
    nothing else in refinekit knows about tracing. With no tracer installed (`tracing` is
    None) both are skipped after one check, so tracing off costs nothing measurable.
    """

    def call(self, flow: Callable[..., Any], cfg: Any, job: Any) -> AbstractContextManager[None]:
        """Around one decorated call: `flow` is the decorator's flow, `job` the call's job."""
        ...

    def run_sync(self, command: Any) -> Any:
        """Run a flow command blocking (`command.run_sync()`), traced."""
        ...

    def run_async(self, command: Any) -> Awaitable[Any]:
        """Run a flow command awaited (`command.run_async()`), traced."""
        ...


tracing: Tracing | None = None
"""The installed tracer, or None (the default): read by `wrapper.wrap` and `flow`'s drivers."""


def set_tracing(tracer: Tracing | None) -> None:
    """Install `tracer` for every call that starts from now on (None switches tracing off)."""
    global tracing
    tracing = tracer


def _clip(text: str | None, limit: int = 300) -> str:
    """Text for a log line: redacted (before it is shortened), on one line, at most `limit`."""
    if text is None:
        return ""
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _log_event(event: Event) -> None:
    if event.kind == "retry":
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s: attempt %d/%d rejected, retrying in %.2fs: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                event.wait or 0.0,
                _clip(event.feedback),
            )
    elif event.kind == "correction":
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s: correction %d/%d: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                _clip(event.error),
            )
        if event.detail and logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: correction message sent:\n%s", event.function, redact(event.detail))
    elif event.kind == "unjudged":
        if logger.isEnabledFor(logging.WARNING):
            reason = event.verdict.reason if event.verdict is not None else None
            logger.warning(
                "%s: attempt %d/%d returned unjudged: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                _clip(reason),
            )
    elif event.kind == "blocked":
        # The blocked text itself (`detail`) never goes above DEBUG.
        if logger.isEnabledFor(logging.WARNING):
            logger.warning("%s: %s; returned the refusal", event.function, _clip(event.error))
        if event.detail is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: blocked text:\n%s", event.function, redact(event.detail))
    elif event.kind == "review":
        if logger.isEnabledFor(logging.INFO):
            verdict = event.verdict
            review = verdict.metadata.get("review") if verdict is not None else None
            mode = review.get("mode", "") if isinstance(review, dict) else ""
            if verdict is None:
                outcome = "no verdict"
            elif verdict.passed:
                outcome = "passed"
            else:
                outcome = "failed" if verdict.judged else verdict.status
            unjudged = verdict is not None and not verdict.judged
            why = (verdict.reason if unjudged and verdict is not None else None) or (
                event.feedback or event.error
            )
            logger.info(
                "%s: %sreview of draft %d/%d: %s%s",
                event.function,
                f"{mode} " if mode else "",
                event.attempt,
                event.max_attempts,
                outcome,
                f": {_clip(why)}" if why else "",
            )
    elif event.kind == "revision":
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s: revision %d/%d requested: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                _clip(event.feedback),
            )
    elif event.kind == "rejected":
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: answer rejected after %d draft%s: %s",
                event.function,
                event.attempt,
                "" if event.attempt == 1 else "s",
                _clip(event.error),
            )
    elif event.kind == "budget":
        if logger.isEnabledFor(logging.WARNING):
            logger.warning("%s: %s", event.function, _clip(event.error))
    elif event.kind == "grounding":
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s: grounded decoding: %s", event.function, _clip(event.error))
    elif event.kind == "exhausted":
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: out of attempts after %d: %s",
                event.function,
                event.attempt,
                _clip(event.error),
            )
    elif event.kind == "stream" and event.aborted is not None:
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s: stream of attempt %d/%d closed after %d chunk%s: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                event.chunks or 0,
                "" if event.chunks == 1 else "s",
                _clip(event.aborted),
            )
    elif event.kind == "reset":
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s: stream reset: attempt %d/%d is void: %s",
                event.function,
                event.attempt,
                event.max_attempts,
                _clip(event.error),
            )
    elif event.kind == "judge_cache":
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("judge cache %s: %s (key %s)", event.cache, event.function, event.detail)
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "%s: %s %d/%d%s",
            event.function,
            event.kind,
            event.attempt,
            event.max_attempts,
            "" if event.verdict is None else f" passed={event.verdict.passed}",
        )
        if event.repairs:
            logger.debug("%s: repaired: %s", event.function, ", ".join(event.repairs))
