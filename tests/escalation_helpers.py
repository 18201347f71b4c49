"""What the escalation tests share: the replies a cheap and a strong model send, the judge.

tests/decorators/test_escalation.py and test_escalation_budget.py script the scripted server
with these; each builds its own decorated functions.
"""

from __future__ import annotations

from helpers import Invoice

import refinekit
from refinekit import Verdict
from refinekit.testing import ScriptedOpenAI

USER = [{"role": "user", "content": "Extract the invoice: A-1, total 12.50"}]
GOOD = '{"number": "A-1", "total_cents": 1250}'
BAD = '{"number": "A-1", "total_cents": "lots"}'
INVOICE = Invoice(number="A-1", total_cents=1250)
RIGHT = "Refunds take 30 days."


def judged(request: refinekit.EvaluationRequest) -> Verdict:
    """Passes the right answer only; the feedback quotes what was rejected."""
    if request.answer == RIGHT:
        return Verdict(passed=True)
    return Verdict(passed=False, feedback=f"wrong: {request.answer}")


def models(server: ScriptedOpenAI) -> list[str | None]:
    """The model of every request the server received, in order."""
    return [r.model for r in server.requests]
