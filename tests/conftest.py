from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Cli, Workspace, cli_runner, workspace
from pg import PostgresServer, binaries, require

import refinekit
import refinekit.testing
from refinekit import Event
from refinekit.testing import ScriptedOpenAI


@pytest.fixture(autouse=True)
def _instant_backoff() -> Iterator[None]:
    """No test sleeps for real: refinekit's waits are computed but not slept."""
    with refinekit.testing.set_testing():
        yield


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which side a test runs: `def` functions and sync clients, or `async def` and async ones.

    Sync and async must behave the same: a test taking `kind` runs once on each side.
    """
    return str(request.param)


@pytest.fixture
def events() -> Iterator[list[Event]]:
    """Every refinekit event emitted during the test, in order."""
    seen: list[Event] = []
    with refinekit.subscribe(seen.append):
        yield seen


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedOpenAI]:
    """A scripted OpenAI-compatible server on 127.0.0.1 for the test, stopped after it.

    Its address is in $RK_BASE_URL too, where the target and judge modules the `refinekit
    eval` tests write (tests/helpers.py) read it.
    """
    with ScriptedOpenAI() as scripted:
        monkeypatch.setenv("RK_BASE_URL", scripted.base_url)
        yield scripted


@pytest.fixture
async def client(kind: str, server: ScriptedOpenAI) -> AsyncIterator[Any]:
    """An `openai` client of the test's kind (sync or async) on the scripted server."""
    if kind == "sync":
        with server.client() as sync_client:
            yield sync_client
    else:
        async with server.async_client() as async_client:
            yield async_client


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """The test's project folder (helpers.Workspace): importable, current, no $REFINEKIT_DB."""
    yield from workspace(tmp_path, monkeypatch)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """`refinekit ARGS` run in process: its exit status and what it printed (helpers.Result)."""
    return cli_runner(capsys)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the session (tests/pg.py), stopped at its end.

    Tests that take it are skipped only when PostgreSQL's binaries are not installed (and
    fail then under CI, which installs them).
    """
    server = PostgresServer(require(binaries()))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL (password included) of an empty database of the test's own."""
    return postgres_server.new_database()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--local-model",
        action="store_true",
        default=False,
        help="run the local_model tier: real llama.cpp + SmolLM2 tests (needs refinekit[local])",
    )


SLOW_MODULES = {
    "test_benchmarks.py": "runs the benchmark scripts",
    "test_demo.py": "runs `refinekit demo` end to end",
    "test_docs.py": "runs every block of every page",
    "test_examples.py": "runs every example in a process of its own",
    "test_pg_fixture.py": "starts PostgreSQL servers",
    "test_properties.py": "hypothesis: hundreds of generated replies (minutes)",
    "test_ray.py": "starts a local Ray instance",
    "test_shared_runs.py": "several workers on one PostgreSQL run store",
}
"""Test modules marked `slow`: they start processes or services (README, "Contributing")."""

SLOW_FIXTURES = frozenset({"postgres_server", "postgres_url"})
"""A test that takes one of these is `slow` too: it needs the throwaway PostgreSQL server."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the `slow` tests; skip the local_model tier unless --local-model is given.

    `.ci/run` gives --local-model; `-m "not slow"` is the contributors' quick pass.
    """
    slow = pytest.mark.slow
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.path.name in SLOW_MODULES or SLOW_FIXTURES.intersection(fixtures):
            item.add_marker(slow)
    if config.getoption("--local-model"):
        return
    skip = pytest.mark.skip(
        reason="real local model: run with --local-model (needs pip install 'refinekit[local]')"
    )
    for item in items:
        if item.get_closest_marker("local_model") is not None:
            item.add_marker(skip)
