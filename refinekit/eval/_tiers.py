"""An escalating target in a run: what each case's tiers did, and the run's figures per tier.

A target decorated with `escalate=` is called through its `.outcome(...)`, whose `tiers` say
what each tier tried did (a call that raised carries them on its error); each case keeps them
(`CaseRecord.tier`, `CaseRecord.tiers`), and `tier_figures` makes the run's figures per tier
of them: how many cases ended at each tier, their pass rate, what they cost.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .._core.errors import MissingPrice
from .._core.types import TierReport
from .._engine.bridge import in_thread, is_async_callable
from .._engine.outcome import Outcome
from .._engine.prices import Prices
from .._engine.wrapper import AsyncDecorated, SyncDecorated
from ._money import total as total_cost
from ._stats import wilson_interval
from ._store import CaseRecord

__all__ = ["call_target", "ended_at", "tier_dicts", "tier_figures", "tier_reports"]

_COUNTED = ("passed", "failed", "raised")


async def _call(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The answer function's result: an async callable awaited here, a sync one in a thread.

    A sync function that returns an awaitable anyway has it awaited here too.
    """
    if is_async_callable(function):
        return await function(*args, **kwargs)
    result = await in_thread(function, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def call_target(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, Outcome[Any] | None]:
    """The target's result, and a decorated target's `Outcome` (else None).

    A decorated target (`@self_correct`, `@retry_on_low_quality`...) is called through its
    `.outcome(...)`, which calls it exactly as a plain call does; its `Outcome` says which
    tier of an escalating target answered and what each tier did.
    """
    decorated: Any = function
    if isinstance(decorated, AsyncDecorated):
        outcome: Outcome[Any] = await decorated.outcome(*args, **kwargs)
    elif isinstance(decorated, SyncDecorated):
        outcome = await in_thread(decorated.outcome, *args, **kwargs)
    else:
        return await _call(function, args, kwargs), None
    return outcome.value, outcome


def tier_reports(value: object) -> tuple[TierReport, ...]:
    """The `TierReport`s an outcome or an error carries (`tiers`); empty when it has none."""
    tiers = getattr(value, "tiers", None)
    if isinstance(tiers, tuple) and all(isinstance(t, TierReport) for t in tiers):
        return tiers
    return ()


def _priced(report: TierReport, prices: Prices | None) -> float | None:
    """A tier's answer calls priced as its model; its own cost without `prices`; else None."""
    if prices is not None and report.model is not None:
        try:
            usage = report.usage
            return prices.cost(report.model, usage.prompt_tokens, usage.completion_tokens)
        except MissingPrice:
            return None
    if report.cost is not None:
        return report.cost.answer + report.cost.judge
    return None


def tier_dicts(reports: Sequence[TierReport], prices: Prices | None) -> list[dict[str, Any]]:
    """A call's tier reports as a case stores them (`CaseRecord.tiers`)."""
    return [
        {
            "name": r.name,
            "model": r.model,
            "calls": r.calls,
            "answered": r.answered,
            "ended": r.ended,
            "model_calls": r.usage.model_calls,
            "prompt_tokens": r.usage.prompt_tokens,
            "completion_tokens": r.usage.completion_tokens,
            "judge_tokens": r.judge_usage.total_tokens,
            "cost": None if r.calls == 0 and r.ended != "answered" else _priced(r, prices),
        }
        for r in reports
    ]


def ended_at(reports: Sequence[TierReport]) -> str | None:
    """The tier a call ended at: the one that answered, else the last one tried."""
    answered = next((r.name for r in reports if r.answered), None)
    if answered is not None:
        return answered
    tried = [r.name for r in reports if r.ended not in ("skipped", "unaffordable")]
    return tried[-1] if tried else (reports[-1].name if reports else None)


def tokens(tier: dict[str, Any]) -> int:
    """A stored tier's answer tokens, prompt and completion."""
    return int(tier.get("prompt_tokens", 0)) + int(tier.get("completion_tokens", 0))


def tier_figures(cases: Sequence[CaseRecord]) -> dict[str, Any] | None:
    """A run's figures per tier of its escalating target; None when no case has tiers.

    For each tier, in the ladder's order: `name`, `model`; `ended` (the cases that ended at
    it: answered there, or raised there as the last tier tried), of which `passed` out of
    `counted` (passed, failed or raised) with the pass `rate` and its 95% Wilson `lower` and
    `upper`; `cost` (what the cases that ended there cost in all, their judging included;
    None without prices); `tried` (cases in which the tier was called), `answered` (cases it
    answered), `model_calls`, `tokens` (its answer calls' prompt and completion tokens over
    every case) and `spent` (those calls priced as its model; None when a case's could not
    be). Besides: `cases` (the cases with tiers).
    """
    laddered = [c for c in cases if c.tiers]
    if not laddered:
        return None
    order: list[str] = []
    models: dict[str, str | None] = {}
    for case in laddered:
        for tier in case.tiers:
            name = str(tier.get("name"))
            if name not in models:
                order.append(name)
                models[name] = tier.get("model")
    priced = any(c.cost for c in laddered)
    figures = []
    for name in order:
        ended = [c for c in laddered if c.tier == name]
        counted = [c for c in ended if c.outcome in _COUNTED]
        passed = sum(c.outcome == "passed" for c in counted)
        lower, upper = wilson_interval(passed, len(counted))
        own = [t for c in laddered for t in c.tiers if t.get("name") == name]
        tried = [t for t in own if t.get("ended") not in ("skipped", "unaffordable")]
        spent = [t.get("cost") for t in tried]
        figures.append(
            {
                "name": name,
                "model": models[name],
                "ended": len(ended),
                "passed": passed,
                "counted": len(counted),
                "rate": passed / len(counted) if counted else None,
                "lower": lower,
                "upper": upper,
                "cost": sum(total_cost(c.cost) for c in ended) if priced else None,
                "tried": len(tried),
                "answered": sum(bool(t.get("answered")) for t in own),
                "model_calls": sum(int(t.get("model_calls", 0)) for t in tried),
                "tokens": sum(tokens(t) for t in tried),
                "spent": (
                    sum(float(s) for s in spent if s is not None)
                    if all(s is not None for s in spent)
                    else None
                ),
            }
        )
    return {"cases": len(laddered), "tiers": figures}
