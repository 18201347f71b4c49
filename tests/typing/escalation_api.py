"""Checked by mypy (strict) in CI: what type checkers see of `escalate=` on both decorators.

A ladder keeps the decorated function's parameters (`ParamSpec`) and return type; its values
(`Tier`, `Escalation`, `TierReport`) and errors are typed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from typing_extensions import assert_type

import refinekit
from refinekit import Escalation, Tier, retry_on_low_quality, self_correct


class Invoice(BaseModel):
    number: str
    total_cents: int


def with_example(messages: list[dict[str, Any]], *, model: str = "m") -> str:
    return "{}"


@self_correct(schema=Invoice, escalate=["cheap", Tier("strong", max_corrections=1)])
def extract(messages: list[dict[str, Any]], *, model: str = "cheap") -> str:
    return "{}"


@self_correct(
    schema=Invoice,
    escalate=Escalation([Tier("cheap", max_corrections=0), with_example], carry=False),
)
async def aextract(messages: list[dict[str, Any]], model: str = "cheap") -> str:
    return "{}"


@retry_on_low_quality(
    evaluator=lambda request: bool(request.answer),
    escalate=Escalation(["cheap", "strong"], keyword="engine", on_errors=(TimeoutError,)),
)
def answer(question: str, feedback: str | None = None, *, engine: str = "cheap") -> str:
    return question


async def use() -> None:
    assert_type(extract([{"role": "user", "content": "x"}], model="any"), Invoice)
    assert_type(await aextract([], "any"), Invoice)
    assert_type(answer("q", engine="e"), str)
    outcome = extract.outcome([])
    assert_type(outcome.tier, str | None)
    assert_type(outcome.tiers, tuple[refinekit.TierReport, ...])
    for report in outcome.tiers:
        assert_type(report.calls, int)
        assert_type(report.cost, refinekit.Cost | None)
    info = refinekit.current_attempt()
    if info is not None:
        assert_type(info.tier, str | None)
        assert_type(info.model, str | None)
    try:
        answer("q")
    except refinekit.EscalationUnaffordable as e:
        assert_type(e.tier, str)
        assert_type(e.failure, BaseException | None)
        assert_type(e.tiers, tuple[refinekit.TierReport, ...])
    except refinekit.ModelRefused as e:
        assert_type(e.refusal, str)
    except refinekit.LowQualityAnswer as e:
        assert_type(e.tiers, tuple[refinekit.TierReport, ...])


extract([], temperature=0.5)  # type: ignore[call-arg]
answer("q", model="m")  # type: ignore[call-arg]
Tier(3)  # type: ignore[arg-type]
