from __future__ import annotations

from collections.abc import Iterator

import pytest

import refinekit.testing


@pytest.fixture(autouse=True)
def _instant_backoff() -> Iterator[None]:
    """No test sleeps for real: refinekit's waits are computed but not slept."""
    with refinekit.testing.set_testing():
        yield
