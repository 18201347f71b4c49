"""A cascade judge in the workflow: fitted by a calibration, applied by an eval.

A calibration runs every level of a cascade on every item (`every_member()`), and each
verdict records each level's vote and confidence (`metadata["cascade"]`). From those and
people's labels, `cascade_calibration` fits the levels' thresholds (`fit_cascade`: each
level's kept verdicts agree with people at `target` or better, with probability `1 - risk`)
and works out what the fitted cascade would have done on the calibration's items: the share
each level decides, its agreement with people there, the share left abstained, and the model
calls (and money, with prices) a verdict costs, against the strongest (last) level alone.
The calibration stores it in its summary (`cascade`), where `stored_fit` reads the fit back
for `refinekit eval --calibration RUN`; an eval's summary counts the share each level judged
(`level_shares`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import UsageProblem
from .._engine.evaluators import Adapted
from ..judges import Cascade
from ..judges._panel import expected_calls
from ._cascade_fit import CascadeFit, fit_cascade
from ._stats import cohen_kappa
from ._store import CaseRecord, RunInfo

__all__ = [
    "CascadeCalibration",
    "CascadeLevel",
    "cascade_calibration",
    "cascade_of",
    "level_shares",
    "stored_fit",
]


@dataclass(frozen=True)
class CascadeLevel:
    """One level of a fitted cascade, on the calibration's items.

    Attributes:
        name: The level's name.
        threshold: The fitted confidence at or above which its verdict is kept; None when
            no threshold holds the target (the level never decides).
        calls: The model calls one verdict of the level takes (a rule check: 0); None when
            unknown.
        decided: Items this level decided (the levels before it passed them on).
        share: `decided` over the items.
        agreement: The share of those whose verdict agrees with people; None without any.
        guaranteed: The agreement the fit guarantees for its kept verdicts (the target, at
            the fit's risk); None when the level decides nothing by its threshold.
        alone: The level's agreement with people on every item it voted on, as if it judged
            alone.
        voted: Items it voted on (pass or fail) in the calibration.
    """

    name: str
    threshold: float | None
    calls: float | None
    decided: int
    share: float
    agreement: float | None
    guaranteed: float | None
    alone: float | None
    voted: int


@dataclass(frozen=True)
class CascadeCalibration:
    """A cascade fitted by a calibration, and what it does on the calibration's items.

    Attributes:
        target: The agreement each level's kept verdicts must reach (`--target-agreement`).
        risk: The chance the guarantee fails (`--risk`).
        items: Labelled items whose levels were recorded (what the fit was made on).
        levels: Each level, in the cascade's order.
        abstained: Items no level decided (the last level below its threshold).
        abstained_share: `abstained` over the items.
        agreement: The fitted cascade's agreement with people on the items it decided.
        kappa: Its Cohen's kappa there.
        both_pass: Items the fitted cascade passed that people passed (and so on: the
            confusion table of the decided items, which `--calibration` corrects with).
        human_fail_only: Passed by the cascade, failed by people.
        judge_fail_only: Failed by the cascade, passed by people.
        both_fail: Failed by both.
        calls_per_verdict: The model calls the fitted cascade takes per item (the levels up
            to the one that decided, every level on an abstained item; a level without a
            threshold is not asked); None when a level's calls are unknown.
        strongest_calls: The strongest (last) level's calls per item, alone.
        cost_per_verdict: With prices, `calls_per_verdict` at the calibration's mean price
            of a judge's model call; None without prices.
        strongest_cost: The same for the strongest level alone.
        fit: The fit as stored (`CascadeFit.to_dict()`): what `--calibration` applies.
        unguaranteed: Items the last level decided below its threshold (a cascade made
            with `abstain=False`): in its share and in the agreement, outside the guarantee.
    """

    target: float
    risk: float
    items: int
    levels: list[CascadeLevel]
    abstained: int
    abstained_share: float
    agreement: float | None
    kappa: float | None
    both_pass: int
    human_fail_only: int
    judge_fail_only: int
    both_fail: int
    calls_per_verdict: float | None
    strongest_calls: float | None
    cost_per_verdict: float | None = None
    strongest_cost: float | None = None
    fit: dict[str, Any] = field(default_factory=dict)
    unguaranteed: int = 0

    @property
    def coverage(self) -> float:
        """The share of the items the fitted cascade decided (did not abstain on)."""
        return 1.0 - self.abstained_share if self.items else 0.0


def _record(case: CaseRecord) -> Mapping[str, Any] | None:
    """A case's cascade record (`metadata["cascade"]` of its first verdict), or None."""
    if not case.verdicts:
        return None
    record = (case.verdicts[0].get("metadata") or {}).get("cascade")
    if not isinstance(record, Mapping) or not isinstance(record.get("levels"), Sequence):
        return None
    return record


def cascade_of(judge: Any) -> Cascade | None:
    """The cascade a run's judge is (an adapter's wrapped object too), or None."""
    obj = judge.wrapped if isinstance(judge, Adapted) else judge
    return obj if isinstance(obj, Cascade) else None


def _vote(entry: Any) -> tuple[bool | None, float | None]:
    if not isinstance(entry, Mapping):
        return None, None
    passed = entry.get("passed")
    confidence = entry.get("confidence")
    vote = passed if isinstance(passed, bool) else None
    sure = (
        float(confidence)
        if isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
        else None
    )
    return vote, sure


def _decides(vote: bool | None, sure: float | None, threshold: float | None) -> bool:
    return vote is not None and sure is not None and threshold is not None and sure >= threshold


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _mean_call_price(cases: Sequence[CaseRecord]) -> float | None:
    """What one judge model call cost, on average over the calibration's priced items."""
    priced = [c for c in cases if c.cost]
    calls = sum(c.judge_usage.model_calls for c in priced)
    if not priced or not calls:
        return None
    return sum(float(c.cost.get("judge", 0.0)) for c in priced) / calls


def cascade_calibration(
    cases: Sequence[CaseRecord],
    judge: Any,
    *,
    target: float,
    risk: float,
) -> CascadeCalibration | None:
    """The cascade's fit from a calibration's items, and its figures; None without a cascade.

    Args:
        cases: The calibration's items, each with its label and verdicts.
        judge: The calibration's judge (for the levels' names and model calls); the items'
            cascade records are enough without one.
        target: The agreement each level's kept verdicts must reach.
        risk: The chance the guarantee fails.
    """
    rows = [(r, c) for c in cases if c.label is not None and (r := _record(c)) is not None]
    if not rows:
        return None
    cascade = cascade_of(judge)
    count = max(len(r["levels"]) for r, _ in rows)
    votes = [
        [_vote(r["levels"][k] if k < len(r["levels"]) else None) for r, _ in rows]
        for k in range(count)
    ]
    labels = [c.label == "pass" for _, c in rows]
    fit = fit_cascade(
        [[votes[k][i][0] for k in range(count)] for i in range(len(rows))],
        [[votes[k][i][1] for k in range(count)] for i in range(len(rows))],
        labels,
        target=target,
        risk=risk,
    )
    thresholds = list(fit.thresholds)
    first = rows[0][0]["levels"]
    names = [
        str(e.get("name")) if isinstance(e, Mapping) and e.get("name") else f"level {k + 1}"
        for k, e in enumerate(first)
    ]
    calls: list[float | None] = [None] * count
    fallback = False  # the last level decides below its threshold (abstain=False)
    if cascade is not None and len(cascade.levels) == count:
        names = list(cascade.level_names)
        calls = [expected_calls(level) for level in cascade.levels]
        fallback = not cascade.abstain
    decided_at: list[int | None] = []
    below = 0
    for i in range(len(rows)):
        at = next((k for k in range(count) if _decides(*votes[k][i], thresholds[k])), None)
        if at is None and fallback and votes[-1][i][0] is not None:
            at, below = count - 1, below + 1  # outside the guarantee
        decided_at.append(at)
    n = len(rows)
    levels = []
    pairs: list[tuple[bool, bool]] = []
    for k in range(count):
        mine = [i for i in range(n) if decided_at[i] == k]
        agree = sum(votes[k][i][0] == labels[i] for i in mine)
        voted = [i for i in range(n) if votes[k][i][0] is not None]
        levels.append(
            CascadeLevel(
                name=names[k],
                threshold=thresholds[k],
                calls=calls[k],
                decided=len(mine),
                share=len(mine) / n,
                agreement=_ratio(agree, len(mine)),
                guaranteed=target if thresholds[k] is not None else None,
                alone=_ratio(sum(votes[k][i][0] == labels[i] for i in voted), len(voted)),
                voted=len(voted),
            )
        )
        pairs.extend((bool(votes[k][i][0]), labels[i]) for i in mine)
    abstained = sum(at is None for at in decided_at)
    spent: float | None = None
    if all(c is not None for c in calls):
        # a level that cannot decide (no threshold) is not asked, unless it is a last level
        # that decides anyway (abstain=False)
        asked = [
            float(c) if t is not None or (k == count - 1 and fallback) else 0.0
            for k, (c, t) in enumerate(zip(calls, thresholds, strict=True))
            if c is not None
        ]
        spent = sum(sum(asked[: (count if at is None else at + 1)]) for at in decided_at) / n
    price = _mean_call_price([c for _, c in rows])
    strongest = calls[-1]
    return CascadeCalibration(
        target=target,
        risk=risk,
        items=n,
        levels=levels,
        abstained=abstained,
        abstained_share=abstained / n,
        agreement=_ratio(sum(j == h for j, h in pairs), len(pairs)),
        kappa=cohen_kappa(pairs) if pairs else None,
        both_pass=sum(j and h for j, h in pairs),
        human_fail_only=sum(j and not h for j, h in pairs),
        judge_fail_only=sum(h and not j for j, h in pairs),
        both_fail=sum(not j and not h for j, h in pairs),
        calls_per_verdict=spent,
        strongest_calls=strongest,
        cost_per_verdict=None if price is None or spent is None else spent * price,
        strongest_cost=None if price is None or strongest is None else strongest * price,
        fit=fit.to_dict(),
        unguaranteed=below,
    )


def stored_fit(run: RunInfo, cascade: Cascade) -> CascadeFit:
    """The fit a calibrate run stored, for `cascade`; what `--calibration RUN` applies.

    Raises:
        UsageProblem: The run stored no cascade fit (its judge was no cascade, or it was
            calibrated by an older refinekit), or its fit is for a cascade of another
            number of levels.
    """
    stored = run.summary.get("cascade")
    fit = stored.get("fit") if isinstance(stored, Mapping) else None
    if not isinstance(fit, Mapping):
        raise UsageProblem(
            f"--calibration {run.id}: the judge is a cascade, and calibration run {run.id} "
            "stored no cascade fit (its judge was not a cascade, or it was calibrated by an "
            "older refinekit): calibrate this cascade with `refinekit calibrate`, then give "
            "that run"
        )
    try:
        made = CascadeFit.from_dict(dict(fit))
    except (TypeError, ValueError, KeyError) as e:
        raise UsageProblem(
            f"--calibration {run.id}: its stored cascade fit cannot be read ({e}); calibrate "
            "the cascade again"
        ) from None
    if len(made.thresholds) != len(cascade.levels):
        raise UsageProblem(
            f"--calibration {run.id}: its cascade fit has {len(made.thresholds)} levels and "
            f"this run's cascade has {len(cascade.levels)}: calibrate this cascade"
        )
    return made


def level_shares(cases: Sequence[CaseRecord]) -> dict[str, Any] | None:
    """The share of a run's verdicts each cascade level decided; None without a cascade.

    Returns:
        `items` (cases whose verdict came from a cascade), `levels` (per level: `level`, its
        index from 0; its `name`; `decided`; `share`) and `abstained` with its
        `abstained_share`.
    """
    records = [r for c in cases if (r := _record(c)) is not None]
    if not records:
        return None
    longest = max(records, key=lambda r: len(r["levels"]))["levels"]
    at = [r.get("level") for r in records]
    n = len(records)
    levels: list[dict[str, Any]] = []
    decided_in_all = 0
    for k, entry in enumerate(longest):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        decided = sum(1 for a in at if isinstance(a, int) and not isinstance(a, bool) and a == k)
        levels.append(
            {
                "level": k,
                "name": str(name) if name else f"level {k + 1}",
                "decided": decided,
                "share": decided / n,
            }
        )
        decided_in_all += decided
    abstained = n - decided_in_all
    return {
        "items": n,
        "levels": levels,
        "abstained": abstained,
        "abstained_share": abstained / n,
    }
