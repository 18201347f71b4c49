"""Fixtures of the eval tests."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from refinekit.testing import ScriptedOpenAI


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
