"""The fault suite: the seeded runs are marked `reliability` and run only when selected.

`python -m pytest -m reliability` runs them (`.ci/run` does); a plain `pytest` skips them and
runs the fast slice. `RK_FAULT_SEED=N` replays the mix of seed N (a failure names its seed).
"""

from __future__ import annotations

import os

import pytest

DEFAULT_SEED = 20260
"""The seed CI runs: a fixed mix, so a red run is reproducible as it is."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `reliability` items unless the `-m` expression names the marker."""
    if "reliability" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the seeded fault suite: run with -m reliability")
    for item in items:
        if item.get_closest_marker("reliability") is not None:
            item.add_marker(skip)


@pytest.fixture
def fault_seed() -> int:
    """The seed of the mix: $RK_FAULT_SEED, else the fixed one."""
    return int(os.environ.get("RK_FAULT_SEED", DEFAULT_SEED))
