"""The cheapest model that gets it right: escalate to a stronger tier when validation fails.

Both tiers run on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted (offline): the cheap model ("gpt-4.1-nano") replies with
an invoice whose total is not a number, the strong one ("gpt-4.1") with a valid invoice. The
ladder tries the cheap tier without corrections, then the strong tier, afresh (or told what was
wrong, with `carry=True`).
A budget with your prices stops a ladder before a tier it cannot afford.
Run: python examples/escalation.py
"""

from __future__ import annotations

from typing import Any

import openai
from pydantic import BaseModel

import refinekit
from refinekit import (
    Budget,
    Escalation,
    EscalationUnaffordable,
    Prices,
    Tier,
    self_correct,
)
from refinekit.testing import Reply, ScriptedOpenAI

# Your prices, per million input and output tokens (refinekit ships no price table).
PRICES = Prices({"gpt-4.1-nano": (0.10, 0.40), "gpt-4.1": (2.00, 8.00)})
LADDER = Escalation([Tier("gpt-4.1-nano", max_corrections=0), Tier("gpt-4.1")])
CARRIED = Escalation(LADDER.tiers, carry=True)  # the strong tier told what was wrong


class Invoice(BaseModel):
    number: str
    total: float


def make_extract(client: openai.OpenAI, budget: Budget, ladder: Escalation = LADDER) -> Any:
    @self_correct(schema=Invoice, escalate=ladder, budget=budget)
    def extract(messages: list[dict[str, Any]], *, model: str = "gpt-4.1-nano") -> Any:
        # The ladder passes each tier's model name as `model`.
        return client.chat.completions.create(model=model, messages=messages)

    return extract


def main() -> None:
    with ScriptedOpenAI() as server, server.client() as client:
        server.script(
            "gpt-4.1-nano",
            Reply.text(
                '{"number": "INV-7", "total": "twelve fifty"}',
                prompt_tokens=300,
                completion_tokens=20,
            ),
            times=None,
        )
        server.script(
            "gpt-4.1",
            Reply.text(
                '{"number": "INV-7", "total": 12.5}', prompt_tokens=400, completion_tokens=20
            ),
            times=None,
        )
        print("offline: a scripted server plays both models, so this shows the wiring,")
        print("not a model's quality")
        messages = [{"role": "user", "content": "Invoice INV-7, total 12.50 EUR. As JSON."}]

        seen: list[str] = []
        with refinekit.subscribe(
            lambda e: seen.append(f"{e.tier} after {e.failure}") if e.kind == "escalation" else None
        ):
            extract = make_extract(client, Budget(prices=PRICES))
            outcome = extract.outcome(messages)
        print(f"caller got: {outcome.value!r} from tier {outcome.tier!r}")
        print(f"escalation: {seen[0]}")
        for tier in outcome.tiers:
            assert tier.cost is not None
            cost = tier.cost.total
            print(f"  tier {tier.name}: {tier.calls} call(s), {tier.ended}, cost {cost:.6f}")
        strong = server.requests[-1].body or {}
        print(f"the strong tier ({strong['model']}) got {len(strong['messages'])} message(s)")

        # carry=True: the strong tier also gets the correction the cheap reply earned.
        make_extract(client, Budget(prices=PRICES), CARRIED)(messages)
        told = (server.requests[-1].body or {})["messages"][-1]["content"].splitlines()[1]
        print(f"with carry=True it was told: {told}")

        # The same ladder with a cost cap the strong tier's first call would break.
        capped = make_extract(client, Budget(max_cost=0.0005, prices=PRICES))
        try:
            capped(messages)
        except EscalationUnaffordable as stopped:
            print(f"stopped before tier {stopped.tier!r}: {type(stopped.failure).__name__} below")


if __name__ == "__main__":
    main()
