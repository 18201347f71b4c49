"""Point the environment at the plugin's session-wide scripted server, then import the app.

`scripted_openai_session` is one server for the whole pytest session, at one address, so a
client built once at import keeps working in every test; before each test that uses it, its
scripts and recorded requests are reset.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from refinekit.testing import ScriptedOpenAI


@pytest.fixture(scope="session")
def support_app(scripted_openai_session: ScriptedOpenAI) -> Iterator[ModuleType]:
    """The app module, imported once the environment names the scripted server."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_BASE_URL", scripted_openai_session.base_url)
        env.setenv("OPENAI_API_KEY", "sk-scripted-tests")  # any key: the server accepts it
        env.syspath_prepend(str(Path(__file__).parent))
        sys.modules.pop("support_app", None)  # imported here, after the environment is set
        module = importlib.import_module("support_app")
        yield module
        module.client.close()
        sys.modules.pop("support_app", None)


@pytest.fixture
def server(scripted_openai_session: ScriptedOpenAI, refinekit_testing: object) -> ScriptedOpenAI:
    """The session server, reset for this test; retries without waiting."""
    return scripted_openai_session
