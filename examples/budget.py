"""A budget per job: a judge that never passes cannot run up the bill.

The answer function and its judge both run on refinekit.testing.ScriptedOpenAI, a real
OpenAI-compatible HTTP server on 127.0.0.1 whose replies are scripted (offline): the judge
always says "No.", the worst case for `max_retries=10`. A `refinekit.Budget` with your own
prices stops the job at a known point with `BudgetExceeded`, which carries what was spent and
the best answer so far. Run: python examples/budget.py
"""

from __future__ import annotations

from typing import Any

import openai

import refinekit
from refinekit import Budget, BudgetExceeded, Prices, judges
from refinekit.testing import Reply, ScriptedOpenAI

# Your prices, per million input and output tokens (refinekit ships no price table).
PRICES = Prices({"gpt-4.1-mini": (0.40, 1.60), "judge-mini": (0.15, 0.60)})


def make_answer(client: openai.OpenAI) -> Any:
    def answer(question: str, feedback: str | None = None) -> Any:
        prompt = question if feedback is None else f"{question}\n\nFix this: {feedback}"
        return client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": prompt}]
        )

    return answer


def main() -> None:
    with ScriptedOpenAI() as server, server.client() as client:
        server.script(
            "gpt-4.1-mini",
            Reply.text("Refunds take 30 days.", prompt_tokens=400, completion_tokens=60),
            times=None,
        )
        server.script(
            "judge-mini",
            Reply.text("No.", prompt_tokens=600, completion_tokens=1),
            times=None,
        )
        relevancy = judges.relevancy(judges.JudgeModel(client, "judge-mini"))
        print("offline: a scripted server plays the answering model and the judge (which")
        print("always says 'No.'), so this shows the wiring, not a model's quality")

        # 1. At most 5 model calls, answer and judge calls together.
        capped = refinekit.retry_on_low_quality(
            evaluator=relevancy, max_retries=10, budget=Budget(max_calls=5)
        )(make_answer(client))
        try:
            capped("How long do refunds take?")
        except BudgetExceeded as stopped:
            print(f"stopped: {stopped.limit}={stopped.maximum:g}, planned: {stopped.planned}")
            print(
                f"calls on the wire: {len(server.requests)} "
                f"({stopped.usage.model_calls} answer, {stopped.judge_usage.model_calls} judge)"
            )
            best = stopped.best.number if stopped.best is not None else None
            print(f"best attempt: {best} of {len(stopped.attempts)}")

        # 2. At most $0.001 for the whole job, with a cost on the error.
        server.reset()
        server.script(
            "gpt-4.1-mini",
            Reply.text("Refunds take 30 days.", prompt_tokens=400, completion_tokens=60),
            times=None,
        )
        server.script(
            "judge-mini", Reply.text("No.", prompt_tokens=600, completion_tokens=1), times=None
        )
        priced = capped.retry_with(budget=Budget(max_cost=0.001, prices=PRICES))
        try:
            priced("How long do refunds take?")
        except BudgetExceeded as stopped:
            cost = stopped.cost or refinekit.Cost()
            print(
                f"stopped at cost {cost.total:.6f} (answer {cost.answer:.6f}, "
                f"judge {cost.judge:.6f}) of max_cost={stopped.maximum:g}"
            )
            how = "a call's reply took the job over" if stopped.needed is None else "before a call"
            print(f"calls on the wire: {len(server.requests)} ({how})")


if __name__ == "__main__":
    main()
