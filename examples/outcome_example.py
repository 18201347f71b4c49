"""A service class with decorated methods; each response carries how its answer was made.

`.outcome()` makes the same call as the method and returns the value with its attempts,
verdicts, usage and job id; `.retry_with()` makes a variant with other options; tenacity's
`stop=` and `before_sleep=` work as in tenacity. The "model" is a deterministic stand-in
(offline). Run: python examples/outcome_example.py
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import tenacity
from pydantic import BaseModel

from refinekit import (
    LowQualityAnswer,
    checks,
    record_context,
    retry_on_low_quality,
    retry_prompt,
    self_correct,
)

log = logging.getLogger("support")  # the application's own logger, for tenacity's callback
log.addHandler(logging.StreamHandler(sys.stdout))
log.setLevel(logging.INFO)

DOCS = [{"text": "Refunds are accepted within 30 days.", "source": "policies/refunds.md"}]


class Ticket(BaseModel):
    order: str
    reason: str


class SupportService:
    """A web service's handlers, one instance per tenant: the methods are decorated."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.model_calls = 0

    def _model(self, prompt: str) -> str:
        """A stand-in model: it cites its source once the feedback asks it to."""
        self.model_calls += 1
        if "Cite the source as [policies/refunds.md]" in prompt:
            return "Refunds are accepted within 30 days (policies/refunds.md)."
        return "Refunds are accepted within 30 days."

    @retry_on_low_quality(
        evaluator=checks.cites_source(),
        max_retries=2,
        wait=0.01,
        stop=tenacity.stop_after_delay(10),  # whichever comes first: this or max_retries
        before_sleep=tenacity.before_sleep_log(log, logging.INFO),
    )
    def answer(self, question: str) -> str:
        record_context(DOCS)
        return self._model(retry_prompt(f"[{self.tenant}] Question: {question}"))

    @self_correct(schema=Ticket)
    async def triage(self, messages: list[dict[str, Any]]) -> str:
        self.model_calls += 1
        if len(messages) == 1:  # the first reply forgets a field; the correction names it
            return '{"order": "A-1001"}'
        return '{"order": "A-1001", "reason": "damaged"}'

    def handle(self, question: str) -> dict[str, Any]:
        """The HTTP response: the answer, and how many attempts it took."""
        outcome = self.answer.outcome(question)
        return {
            "answer": outcome.value,
            "attempts": outcome.attempt_count,
            "verdicts": [v.passed for v in outcome.verdicts],
            "waited_s": outcome.idle_for,
            "job": outcome.job_id,  # the id every refinekit event of this call carries
        }


async def main_async(service: SupportService) -> None:
    messages = [{"role": "user", "content": "My order A-1001 arrived broken."}]
    outcome = await service.triage.outcome(messages)
    print(f"triage: {outcome.value!r}, corrections used: {outcome.corrections_used}")


def main() -> None:
    print("(offline: a deterministic stand-in model, no network)")
    acme, globex = SupportService("acme"), SupportService("globex")
    print("response:", json.dumps(acme.handle("How long do I have to return an item?")))
    print("plain call:", globex.answer("How long do I have to return an item?"))
    print(f"model calls: acme {acme.model_calls}, globex {globex.model_calls}")
    asyncio.run(main_async(acme))
    strict = acme.answer.retry_with(max_retries=0)  # the same method, no retries
    try:
        strict("How long do I have to return an item?")
    except LowQualityAnswer as e:
        print(f"retry_with(max_retries=0): gave up after {len(e.attempts)} attempt: {e.feedback}")


if __name__ == "__main__":
    main()
