"""Process-wide settings: the testing switch."""

from __future__ import annotations

__all__ = ["is_testing", "set_testing"]

_testing = False


class _RestoreTesting:
    """Returned by `set_testing`; restores the previous setting when used as a context manager."""

    __slots__ = ("_previous",)

    def __init__(self, previous: bool) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        global _testing
        _testing = self._previous


def set_testing(on: bool = True) -> _RestoreTesting:
    """Make refinekit's backoff instant (or normal again), for test suites.

    With testing on, the wait before each retry is still computed (events and logs report
    it) but never slept. Call it once (e.g. in a `conftest.py` fixture), or use it as a
    context manager to restore the previous setting afterwards::

        with refinekit.testing.set_testing():
            ...

    Args:
        on: True for instant waits, False for real ones.

    Returns:
        A context manager that restores the previous setting on exit.
    """
    global _testing
    previous = _testing
    _testing = bool(on)
    return _RestoreTesting(previous)


def is_testing() -> bool:
    """Whether the testing switch is on (waits are not slept)."""
    return _testing
