"""The internal signals: each is caught inside refinekit and never reaches a caller as it is.

Listed in the tree of `refinekit._core.errors`, which re-exports them.
"""

from __future__ import annotations

__all__ = [
    "DeadlinePassed",
    "GoldenFileError",
    "ReplyShapeError",
    "ReviserFailed",
    "TimedOut",
]


class ReplyShapeError(ValueError):
    """A reply that holds no single text to parse (e.g. two tool calls); corrected like bad JSON.

    `text` renders what the reply did hold, to show the model what it sent.
    """

    def __init__(self, message: str, text: str = "") -> None:
        super().__init__(message)
        self.text = text


class TimedOut(TimeoutError):
    """A `Timed` command gave no result within its seconds (its own errors pass unchanged)."""


class DeadlinePassed(TimeoutError):
    """A judge request not sent: the time limit around it (a `Timed` command's) had passed."""


class ReviserFailed(Exception):
    """The default reviser's model call failed: the review ends with `reason`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class GoldenFileError(Exception):
    """A golden file that cannot be used; reported as the test module's collection error."""
