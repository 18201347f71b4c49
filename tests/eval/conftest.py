"""Fixtures of the eval tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from helpers import Cli

from refinekit.testing import ScriptedOpenAI


@pytest.fixture
def cli(
    cli: Cli, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Cli:
    """`refinekit ARGS` in process, run in tmp_path; the test's own module is importable by
    name, so that its functions serve as targets and judges."""
    monkeypatch.syspath_prepend(str(request.path.parent))
    monkeypatch.chdir(tmp_path)
    return cli


@pytest.fixture
def judge_client(scripted_openai: ScriptedOpenAI) -> Iterator[openai.OpenAI]:
    """An `openai.OpenAI` client of the scripted server, for the judges the tests build.

    "Connection: close": the judge's async counterpart of this client, made for the run's
    event loop, leaves no socket open behind it.
    """
    client = openai.OpenAI(
        base_url=scripted_openai.base_url,
        api_key="sk-test",
        max_retries=0,
        default_headers={"Connection": "close"},
    )
    with client:
        yield client
