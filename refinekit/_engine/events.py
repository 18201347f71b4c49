"""Events, their subscribers, and the engine's instruments.

Whatever happens in a refinekit call is an `Event`, handed to every subscriber (`subscribe`):
the `refinekit` logger is one, attached by default (`refinekit._engine.eventlog`: each kind of
event's log lines), and `refinekit.otel.instrument()` subscribes another. An event's own texts
(`feedback`, `error`, `detail`, `aborted`) are redacted when it is made, whoever made it.

Instruments (`Instrument`, none by default) observe the engine's work itself: each decorated
call and each command a flow runs; `refinekit.otel.instrument()` installs its tracer as one.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .._core.errors import MissingPrice, RefinekitWarning
from .._core.redact import redact
from .._core.types import Cost
from .event import Event, EventKind
from .eventlog import EVENT_LOG, logger
from .job import cost_of

__all__ = ["Event", "EventKind", "Subscription", "subscribe"]


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
        cost=known_cost(job),
        **fields,
    )


def known_cost(job: Any) -> Cost | None:
    """The job's cost for an event; None unpriced (a missing price stops the job elsewhere)."""
    try:
        return cost_of(job)
    except MissingPrice:
        return None


Hook = Callable[[Event], object]

WantsDebug = Callable[[], bool]
"""Whether a DEBUG-only event would reach a subscriber now (see `wants_debug_events`)."""

_lock = threading.Lock()
_subscribed: tuple[tuple[Hook, WantsDebug | None], ...] = ()
_hooks: tuple[Hook, ...] = ()
"""Every subscriber, in the order subscribed: what `emit` calls."""


def _every() -> bool:
    return True


_wants_debug: WantsDebug = _every


def _install(subscribed: tuple[tuple[Hook, WantsDebug | None], ...]) -> None:
    """Make `subscribed` the subscribers (under `_lock`), with the one check of who wants all."""
    global _subscribed, _hooks, _wants_debug
    checks = tuple(wants for _, wants in subscribed if wants is not None)
    if len(checks) < len(subscribed):  # a hook of `subscribe`: it takes every event
        _wants_debug = _every
    elif len(checks) == 1:
        _wants_debug = checks[0]
    else:
        _wants_debug = functools.partial(_any_wants, checks)
    _subscribed = subscribed
    _hooks = tuple(hook for hook, _ in subscribed)


def _any_wants(checks: tuple[WantsDebug, ...]) -> bool:
    return any(wants() for wants in checks)


class Subscription:
    """A registered hook; `close()` (or leaving the `with` block) unsubscribes it."""

    __slots__ = ("hook",)

    def __init__(self, hook: Hook) -> None:
        self.hook = hook

    def close(self) -> None:
        """Stop calling the hook. Closing twice is harmless."""
        with _lock:
            _install(tuple(entry for entry in _subscribed if entry[0] is not self.hook))

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
    return attach(hook, None)


def attach(hook: Hook, wants_debug: WantsDebug | None) -> Subscription:
    """Subscribe `hook`; `wants_debug` says when it takes DEBUG-only events (None: always).

    A subscriber that takes them only sometimes (the log: when its logger writes DEBUG
    records) lets `wants_debug_events` skip building such events when nobody wants them.
    """
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    with _lock:
        _install((*_subscribed, (hook, wants_debug)))
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
    return _wants_debug()


def emit(event: Event) -> None:
    """Hand `event` to every subscriber, the log first (see `subscribe`)."""
    for hook in _hooks:
        try:
            hook(event)
        except Exception as exc:
            _report_hook_error(hook, event, exc)


attach(EVENT_LOG, EVENT_LOG.wants_debug)  # the default subscriber: the `refinekit` logger


class Instrument(Protocol):
    """What observes refinekit's work beyond its events (`refinekit.otel.instrument()` adds one).

    The decorator wrapper runs each decorated call inside every installed instrument's
    `call(...)`, and the flow drivers run each command as the instruments give it back
    (`command(...)`, called just before the command runs); nothing else in refinekit knows
    about them. With none installed both are skipped after one check, so they cost nothing
    measurable then. An instrument learns what a command is from the command itself (its
    `role`: see `refinekit._engine.flow.Command`).
    """

    def call(self, flow: Callable[..., Any], cfg: Any, job: Any) -> AbstractContextManager[None]:
        """Around one decorated call: `flow` is the decorator's flow, `job` the call's job."""
        ...

    def command(self, command: Any) -> Any:
        """`command` as it runs observed: itself, or a command running it."""
        ...


instruments: tuple[Instrument, ...] = ()
"""The installed instruments (none by default): read by the wrapper and the flow drivers."""


def set_instruments(installed: Iterable[Instrument]) -> None:
    """Install `installed` for every call that starts from now on (none: nothing observes)."""
    global instruments
    instruments = tuple(installed)


def observed(installed: tuple[Instrument, ...], command: Any) -> Any:
    """`command` as the instruments `installed` run it, the first one innermost."""
    for instrument in installed:
        command = instrument.command(command)
    return command


_UNOBSERVED: AbstractContextManager[None] = contextlib.nullcontext()


def observed_call(flow: Callable[..., Any], cfg: Any, job: Any) -> AbstractContextManager[None]:
    """Every installed instrument's `call(...)` context, the first one innermost (as `observed`)."""
    installed = instruments
    if not installed:
        return _UNOBSERVED
    if len(installed) == 1:
        return installed[0].call(flow, cfg, job)
    return _nested_calls(installed, flow, cfg, job)


@contextlib.contextmanager
def _nested_calls(
    installed: tuple[Instrument, ...], flow: Callable[..., Any], cfg: Any, job: Any
) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for instrument in reversed(installed):
            stack.enter_context(instrument.call(flow, cfg, job))
        yield
