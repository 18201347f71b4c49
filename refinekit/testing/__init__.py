"""Helpers for testing code that uses refinekit.

`set_testing()` makes every backoff instant, so a test suite never sleeps::

    import pytest
    import refinekit.testing

    @pytest.fixture(autouse=True)
    def instant_refinekit():
        with refinekit.testing.set_testing():
            yield

`ScriptedOpenAI` is a real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a
script of `Reply` values, per model name, and records every request as a `RecordedRequest`;
the real `openai` client and `instructor` run against it unchanged::

    from refinekit.testing import Reply, ScriptedOpenAI

    def test_judge_says_yes():
        with ScriptedOpenAI() as server:
            server.script("judge", [Reply.text("Yes", {"Yes": 0.9, "No": 0.1})])
            with server.client() as client:
                ...

`FakeJudge("fail: cite a source", "pass")` is an evaluator returning scripted verdicts in
order and recording its requests; `FakeStream(text, chunks=4)` is a scripted stream of a
reply, in process, for a function that streams. Installing refinekit also installs a pytest
plugin (the fixtures `fake_judge`, `fake_stream`, `scripted_openai` and `refinekit_testing`,
the `golden` and `live` markers and a pass-rate gate): see docs/testing.md.
"""

from __future__ import annotations

from .._core.config import is_testing, set_testing
from .._core.package import rehome
from ._fakes import FakeJudge, FakeStream
from ._server import RecordedBatch, RecordedRequest, RecordedStream, Reply, ScriptedOpenAI

__all__ = [
    "FakeJudge",
    "FakeStream",
    "RecordedBatch",
    "RecordedRequest",
    "RecordedStream",
    "Reply",
    "ScriptedOpenAI",
    "is_testing",
    "set_testing",
]

rehome(globals(), __all__, __name__)  # shown as `refinekit.testing.<name>`
