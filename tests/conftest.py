from __future__ import annotations

from collections.abc import Iterator

import pytest

import refinekit.testing


@pytest.fixture(autouse=True)
def _instant_backoff() -> Iterator[None]:
    """No test sleeps for real: refinekit's waits are computed but not slept."""
    with refinekit.testing.set_testing():
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--local-model",
        action="store_true",
        default=False,
        help="run the local_model tier: real llama.cpp + SmolLM2 tests (needs refinekit[local])",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the local_model tier unless --local-model is given (`.ci/run` gives it)."""
    if config.getoption("--local-model"):
        return
    skip = pytest.mark.skip(
        reason="real local model: run with --local-model (needs pip install 'refinekit[local]')"
    )
    for item in items:
        if item.get_closest_marker("local_model") is not None:
            item.add_marker(skip)
