"""The `refinekit` logger, a subscriber of the event stream: the log lines of each kind of event.

Subscribed by default (`refinekit._engine.events` attaches it first). Each kind of event has
its lines in `LINES`, each at its level; a line's arguments are made only when its level is on,
and a line whose arguments are None is not written for that event. Every text a line quotes
(feedback, an error, a verdict's reason, a DEBUG detail) passes through `redact` first.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .._core.redact import redact

if TYPE_CHECKING:
    from .event import Event

__all__ = ["EVENT_LOG", "LINES", "EventLog", "LogLine", "logger"]

logger = logging.getLogger("refinekit")
logger.addHandler(logging.NullHandler())

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


class LogLine(NamedTuple):
    """One line an event writes: its level, its %-format, and its arguments (None: no line)."""

    level: int
    message: str
    args: Callable[[Event], tuple[object, ...] | None]


def _clip(text: str | None, limit: int = 300) -> str:
    """Text for a log line: redacted (before it is shortened), on one line, at most `limit`."""
    if text is None:
        return ""
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _numbered(event: Event, *rest: object) -> tuple[object, ...]:
    """The function, the attempt and the most attempts, then `rest`."""
    return (event.function, event.attempt, event.max_attempts, *rest)


def _detail(event: Event) -> tuple[object, ...] | None:
    return None if not event.detail else (event.function, redact(event.detail))


def _review(event: Event) -> tuple[object, ...]:
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
    return (
        event.function,
        f"{mode} " if mode else "",
        event.attempt,
        event.max_attempts,
        outcome,
        f": {_clip(why)}" if why else "",
    )


def _progress(event: Event) -> tuple[object, ...]:
    passed = "" if event.verdict is None else f" passed={event.verdict.passed}"
    return (event.function, event.kind, event.attempt, event.max_attempts, passed)


def _repairs(event: Event) -> tuple[object, ...] | None:
    return (event.function, ", ".join(event.repairs)) if event.repairs else None


_PROGRESS = (
    LogLine(DEBUG, "%s: %s %d/%d%s", _progress),
    LogLine(DEBUG, "%s: repaired: %s", _repairs),
)
"""The lines of an attempt, a verdict, a skipped judging (and a stream read to its end)."""


def _unless_aborted(line: LogLine) -> LogLine:
    def args(event: Event) -> tuple[object, ...] | None:
        return None if event.aborted is not None else line.args(event)

    return line._replace(args=args)


LINES: dict[str, tuple[LogLine, ...]] = {
    "retry": (
        LogLine(
            INFO,
            "%s: attempt %d/%d rejected, retrying in %.2fs: %s",
            lambda e: _numbered(e, e.wait or 0.0, _clip(e.feedback)),
        ),
    ),
    "correction": (
        LogLine(INFO, "%s: correction %d/%d: %s", lambda e: _numbered(e, _clip(e.error))),
        LogLine(DEBUG, "%s: correction message sent:\n%s", _detail),
    ),
    "unjudged": (
        LogLine(
            WARNING,
            "%s: attempt %d/%d returned unjudged: %s",
            lambda e: _numbered(e, _clip(e.verdict.reason if e.verdict is not None else None)),
        ),
    ),
    "blocked": (  # the blocked text itself (`detail`) never goes above DEBUG
        LogLine(WARNING, "%s: %s; returned the refusal", lambda e: (e.function, _clip(e.error))),
        LogLine(
            DEBUG,
            "%s: blocked text:\n%s",
            lambda e: None if e.detail is None else (e.function, redact(e.detail)),
        ),
    ),
    "review": (LogLine(INFO, "%s: %sreview of draft %d/%d: %s%s", _review),),
    "revision": (
        LogLine(
            INFO, "%s: revision %d/%d requested: %s", lambda e: _numbered(e, _clip(e.feedback))
        ),
    ),
    "rejected": (
        LogLine(
            WARNING,
            "%s: answer rejected after %d draft%s: %s",
            lambda e: (e.function, e.attempt, "" if e.attempt == 1 else "s", _clip(e.error)),
        ),
    ),
    "budget": (LogLine(WARNING, "%s: %s", lambda e: (e.function, _clip(e.error))),),
    "grounding": (
        LogLine(INFO, "%s: grounded decoding: %s", lambda e: (e.function, _clip(e.error))),
    ),
    "escalation": (
        LogLine(
            INFO,
            "%s: escalating to tier %d/%d %r (%s): %s",
            lambda e: (e.function, e.attempt, e.max_attempts, e.tier, e.failure, _clip(e.error)),
        ),
    ),
    "exhausted": (
        LogLine(
            WARNING,
            "%s: out of attempts after %d: %s",
            lambda e: (e.function, e.attempt, _clip(e.error)),
        ),
    ),
    "stream": (  # at INFO when it was aborted or broke, else as an attempt is
        LogLine(
            INFO,
            "%s: stream of attempt %d/%d closed after %d chunk%s: %s",
            lambda e: (
                None
                if e.aborted is None
                else _numbered(e, e.chunks or 0, "" if e.chunks == 1 else "s", _clip(e.aborted))
            ),
        ),
        *(_unless_aborted(line) for line in _PROGRESS),
    ),
    "reset": (
        LogLine(
            INFO,
            "%s: stream reset: attempt %d/%d is void: %s",
            lambda e: _numbered(e, _clip(e.error)),
        ),
    ),
    "judge_cache": (
        LogLine(DEBUG, "judge cache %s: %s (key %s)", lambda e: (e.cache, e.function, e.detail)),
    ),
}
"""Each kind's lines, in order; a kind not here writes the lines of an attempt (`_PROGRESS`)."""


class EventLog:
    """The subscriber writing each event's lines on the `refinekit` logger."""

    __slots__ = ()

    def __call__(self, event: Event) -> None:
        for level, message, args in LINES.get(event.kind, _PROGRESS):
            if logger.isEnabledFor(level):
                made = args(event)
                if made is not None:
                    logger.log(level, message, *made)

    wants_debug: Callable[[], bool] = functools.partial(logger.isEnabledFor, DEBUG)
    """Whether a DEBUG-only event would write a line: the logger writes DEBUG records."""


EVENT_LOG = EventLog()
