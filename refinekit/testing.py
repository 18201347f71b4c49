"""Helpers for testing code that uses refinekit.

`set_testing()` makes every backoff instant, so a test suite never sleeps::

    import pytest
    import refinekit.testing

    @pytest.fixture(autouse=True)
    def instant_refinekit():
        with refinekit.testing.set_testing():
            yield
"""

from __future__ import annotations

from ._config import is_testing, set_testing

__all__ = ["is_testing", "set_testing"]
