"""Fixtures of the judge tests."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import Evaluate

from refinekit import EvaluationRequest, Verdict


@pytest.fixture
def evaluate(kind: str) -> Evaluate:
    """`judge.evaluate(request)` or `await judge.aevaluate(request)`, by kind."""

    async def run(judge: Any, request: EvaluationRequest) -> Verdict:
        if kind == "sync":
            verdict: Verdict = judge.evaluate(request)
        else:
            verdict = await judge.aevaluate(request)
        return verdict

    return run
