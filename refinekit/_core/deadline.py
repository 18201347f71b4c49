"""The deadline the running code is under: the innermost time limit around it, if any.

The engine's `Timed` command sets it (`refinekit._engine.flow`) for the command it bounds,
in that command's own copy of the context; a call that blocks (a judge model's HTTP request,
`refinekit._providers`) reads it to bound itself, so it ends when its limit is reached
instead of running on unseen in an abandoned worker thread.
"""

from __future__ import annotations

import contextvars

__all__ = ["DEADLINE", "current_deadline"]

DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "refinekit_deadline", default=None
)
"""The innermost limit, in `time.monotonic()` seconds; None when no limit is set."""


def current_deadline() -> float | None:
    """The innermost `Timed` limit around this code, in `time.monotonic()` seconds; or None."""
    return DEADLINE.get()
