"""Fitting a cascade's thresholds on labelled items, with a guaranteed agreement with people.

`fit_cascade` reads, for each labelled item, every level's verdict and confidence (what a
calibration run records under `every_member()`, `metadata["cascade"]["levels"]`) and picks
the thresholds by fixed-sequence testing; `CascadeFit` holds them, with what they did on the
fitting data, and goes to and from JSON. `judges.cascade(..., fit=fit)` or
`cascade.with_fit(fit)` applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.numbers import is_number, is_real, shown

__all__ = [
    "GRID",
    "START_ITEMS",
    "CascadeFit",
    "binomial_cdf",
    "fewest_testable",
    "fit_cascade",
    "grid_counts",
    "grid_index",
]

GRID: tuple[float, ...] = tuple(round(1.0 - i / 100, 2) for i in range(51))
"""The candidate thresholds, from the most confident (1.0) to the least (0.5), 0.01 apart."""


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= k), exactly (summed in log space, so large `n` do not overflow).

    Args:
        k: The most successes.
        n: The trials, 0 or more.
        p: The probability of a success, from 0 to 1.

    Returns:
        The probability, from 0 to 1.
    """
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    head = math.lgamma(n + 1)
    logs = [
        head - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q
        for j in range(k + 1)
    ]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(x - top) for x in logs))


START_ITEMS = 100
"""The sequence starts at the highest threshold keeping this many items (or a quarter)."""


def fewest_testable(target: float, level: float) -> int:
    """The fewest kept items with which a test at `level` can reject: none may disagree.

    The smallest n with target**n <= level, the p-value of n items and no disagreement.
    """
    return max(1, math.ceil(math.log(level) / math.log(target) - 1e-12))


def _number(value: object, what: str, low: float, high: float, *, open_: bool) -> float:
    if isinstance(value, bool) or not is_number(value) or not is_real(value):
        raise TypeError(f"{what} must be a number, got {shown(value)}")
    number = float(value)
    inside = low < number < high if open_ else low <= number <= high
    if not inside:
        span = f"between {low:g} and {high:g}" if open_ else f"from {low:g} to {high:g}"
        raise ValueError(f"{what} must be {span}, got {shown(value)}")
    return number


@dataclass(frozen=True)
class CascadeFit:
    """A cascade's fitted thresholds, and what they did on the items they were fitted on.

    Attributes:
        thresholds: One per level, from 0.5 to 1; None for a level that never decides (every
            level's is None when no threshold could be certified: the cascade then abstains
            on every item).
        target: The agreement with people guaranteed, from 0 to 1.
        risk: The probability, from 0 to 1, that the guarantee fails (the fitting items were
            unluckily kind).
        n: The labelled items fitted on.
        shares: On the fitting items, the share each level decided, one per level, then the
            share the cascade abstained on (they sum to 1).
        observed: The agreement with people of the verdicts kept on the fitting items; None
            when none was kept.
        p_value: The exact binomial p-value of the chosen thresholds (at most `risk`); None
            when none was certified.
    """

    thresholds: tuple[float | None, ...]
    target: float
    risk: float
    n: int
    shares: tuple[float, ...]
    observed: float | None
    p_value: float | None = None

    @property
    def abstained(self) -> float:
        """The share of the fitting items the cascade abstained on."""
        return self.shares[-1]

    @property
    def certified(self) -> bool:
        """Whether any threshold was certified (else the cascade abstains on every item)."""
        return any(t is not None for t in self.thresholds)

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON-ready data (`CascadeFit.from_dict` reads it back)."""
        return {
            "thresholds": list(self.thresholds),
            "target": self.target,
            "risk": self.risk,
            "n": self.n,
            "shares": list(self.shares),
            "observed": self.observed,
            "p_value": self.p_value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CascadeFit:
        """The fit `to_dict` made.

        Args:
            data: What `to_dict` returned (read back from JSON).

        Returns:
            The fit.

        Raises:
            ValueError: A key missing or a value of the wrong kind.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a cascade fit is a mapping, got {type(data).__name__}")
        missing = [k for k in ("thresholds", "target", "risk", "n", "shares") if k not in data]
        if missing:
            raise ValueError(f"a cascade fit needs {', '.join(missing)}")
        try:
            thresholds = tuple(
                None if t is None else _number(t, "a threshold", 0.5, 1.0, open_=False)
                for t in data["thresholds"]
            )
            shares = tuple(_number(s, "a share", 0.0, 1.0, open_=False) for s in data["shares"])
            observed = data.get("observed")
            p_value = data.get("p_value")
            n = data["n"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"n must be a whole number, got {n!r}")
            if len(shares) != len(thresholds) + 1:
                raise ValueError("shares must have one entry per level and one for abstained")
            return cls(
                thresholds=thresholds,
                target=_number(data["target"], "target", 0.0, 1.0, open_=True),
                risk=_number(data["risk"], "risk", 0.0, 1.0, open_=True),
                n=n,
                shares=shares,
                observed=None
                if observed is None
                else _number(observed, "observed", 0.0, 1.0, open_=False),
                p_value=None
                if p_value is None
                else _number(p_value, "p_value", 0.0, 1.0, open_=False),
            )
        except TypeError as e:
            raise ValueError(f"not a cascade fit: {e}") from None


def _rows(
    passed: Sequence[Sequence[bool | None]],
    confidence: Sequence[Sequence[float | None]],
    labels: Sequence[bool],
) -> tuple[list[list[tuple[bool, float] | None]], list[bool], int]:
    """Each item's levels as (passed, confidence) or None (no verdict), the labels, levels."""
    for what, given in (("passed", passed), ("confidence", confidence), ("labels", labels)):
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError(f"{what} must be a list, got {type(given).__name__}")
    if not (len(passed) == len(confidence) == len(labels)):
        raise ValueError(
            "passed, confidence and labels must have one entry per item, got "
            f"{len(passed)}, {len(confidence)} and {len(labels)}"
        )
    if not labels:
        raise ValueError("fitting a cascade needs at least one labelled item")
    levels: int | None = None
    rows: list[list[tuple[bool, float] | None]] = []
    for i, (verdicts, sureness, label) in enumerate(zip(passed, confidence, labels, strict=True)):
        if not isinstance(label, bool):
            raise TypeError(f"labels[{i}] must be a bool (did people pass it?), got {label!r}")
        for what, entry in (("passed", verdicts), ("confidence", sureness)):
            if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence):
                raise TypeError(f"{what}[{i}] must be a list of one entry per level")
        if len(verdicts) != len(sureness):
            raise ValueError(f"passed[{i}] and confidence[{i}] have different lengths")
        if levels is None:
            levels = len(verdicts)
            if levels == 0:
                raise ValueError("a cascade has at least one level: passed[0] is empty")
        elif len(verdicts) != levels:
            raise ValueError(
                f"item {i} has {len(verdicts)} levels, item 0 has {levels}: every item needs "
                "every level's entry (None where a level gave no verdict)"
            )
        row: list[tuple[bool, float] | None] = []
        for k, (verdict, sure) in enumerate(zip(verdicts, sureness, strict=True)):
            if verdict is not None and not isinstance(verdict, bool):
                raise TypeError(f"passed[{i}][{k}] must be a bool or None, got {verdict!r}")
            if sure is not None:
                sure = _number(sure, f"confidence[{i}][{k}]", 0.0, 1.0, open_=False)
            row.append(None if verdict is None or sure is None else (verdict, max(0.5, sure)))
        rows.append(row)
    assert levels is not None
    return rows, list(labels), levels


def _costs(given: Sequence[float] | None, levels: int) -> list[float] | None:
    if given is None:
        return None
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise TypeError(f"costs must be a list of one number per level, got {given!r}")
    if len(given) != levels:
        raise ValueError(f"costs must have one entry per level ({levels}), got {len(given)}")
    return [_number(c, f"costs[{k}]", 0.0, math.inf, open_=False) for k, c in enumerate(given)]


def _decisions(
    rows: list[list[tuple[bool, float] | None]], thresholds: Sequence[float | None]
) -> list[tuple[int, bool] | None]:
    """Each item's (deciding level, verdict), or None when the cascade abstains."""
    made: list[tuple[int, bool] | None] = []
    for row in rows:
        decided: tuple[int, bool] | None = None
        for k, (level, threshold) in enumerate(zip(row, thresholds, strict=True)):
            if level is not None and threshold is not None and level[1] >= threshold:
                decided = (k, level[0])
                break
        made.append(decided)
    return made


def grid_index(confidence: float) -> int:
    """The first grid point at or below `confidence`: from there on down, it clears them all."""
    g = min(len(GRID) - 1, max(0, math.ceil(round((1.0 - confidence) * 100, 9))))
    while g > 0 and GRID[g - 1] <= confidence:
        g -= 1
    while g < len(GRID) and GRID[g] > confidence:
        g += 1
    return g


def grid_counts(
    rows: list[list[tuple[bool, float] | None]], labels: list[bool]
) -> tuple[list[int], list[int]]:
    """At each grid point `t` (one threshold for every level): items kept, and kept wrongly.

    The second list counts the kept items whose verdict is against people's label. Each
    item's deciding level changes only where a lower level starts to clear `t`, so the counts
    are summed per stretch of the grid (difference arrays): linear in the items.
    """
    size = len(GRID)
    kept = [0] * (size + 1)
    errors = [0] * (size + 1)
    for row, label in zip(rows, labels, strict=True):
        # (first grid index it clears, level) for the levels with a verdict, surest first
        starts = sorted(
            (grid_index(level[1]), k) for k, level in enumerate(row) if level is not None
        )
        decider: int | None = None
        stretch_start = 0
        for start, k in starts:
            if start >= size:
                break
            if decider is None:
                kept[start] += 1
                kept[size] -= 1
                decider, stretch_start = k, start
            elif k < decider:  # a lower level clears t from here on: it decides
                wrong = row[decider][0] != label  # type: ignore[index]
                errors[stretch_start] += wrong
                errors[start] -= wrong
                decider, stretch_start = k, start
        if decider is not None:
            wrong = row[decider][0] != label  # type: ignore[index]
            errors[stretch_start] += wrong
            errors[size] -= wrong
    for g in range(1, size + 1):
        kept[g] += kept[g - 1]
        errors[g] += errors[g - 1]
    return kept[:size], errors[:size]


def fit_cascade(
    passed: Sequence[Sequence[bool | None]],
    confidence: Sequence[Sequence[float | None]],
    labels: Sequence[bool],
    *,
    target: float = 0.9,
    risk: float = 0.1,
    costs: Sequence[float] | None = None,
) -> CascadeFit:
    """Thresholds for a cascade whose verdicts agree with people at least `target` of the time.

    The guarantee: with probability at least `1 - risk` over the draw of the labelled items,
    the verdicts the fitted cascade gives (those it does not abstain on) agree with people's
    labels at least a share `target` of the time, on new items from the same distribution
    (run the same way: the same judges, prompts and settings).

    **The procedure.** A *path* is a set of levels allowed to decide: every level, every
    level but the first, ..., the last level alone (the levels left out never decide, and
    are not asked). Each path is fitted by fixed-sequence testing at level `risk / K` (K
    the number of levels; the whole `risk` with one level): one threshold `t` for the
    levels it allows, tried on a fixed grid (`GRID`) from the most confident, 1.0, to the
    least, 0.5, 0.01 apart. At each `t`, the cascade keeps `n_t` of the items (the first
    allowed level whose verdict has a confidence of at least `t` decides; no level: it
    abstains), `e_t` of them against people. The null hypothesis that its disagreement
    among the items it keeps is above `1 - target` is tested with the exact binomial tail,
    p = P(Bin(n_t, 1 - target) <= e_t), and rejected when p <= `risk / K`. The sequence
    stops at the first `t` not rejected; the path's fit is the last `t` rejected. Of the
    paths with a fit, the fit keeps, with `costs`, the one whose verdicts cost least on the
    fitting items (each item costs the levels asked: the allowed ones up to the one that
    decided, or all of them when none did; divided by the verdicts given), and without
    `costs` the one keeping the most items; on a tie, the one allowing more levels. No path
    with a fit: every threshold None, the cascade abstains on all.

    **Where a sequence starts.** At the top of the grid few verdicts are that sure, and a
    test of a few items fails for one disagreement, which would stop the sequence at once.
    So it starts at the highest threshold keeping at least `START_ITEMS` (100) items or a
    quarter of them, whichever is fewer, and never fewer than the fewest with which a test
    could reject (`fewest_testable`: ceil(log(level) / log(target)), 22 at 0.9 and 0.1, 29
    at 0.9 and 0.05). The thresholds above the start lose nothing: their items are kept at
    the start too. The start depends on how many items the thresholds keep, never on the
    labels (as in Jung et al., who try only thresholds keeping 30 items or more).

    **Why it holds.** The paths, the grid and its order are fixed before the labels are
    seen, and each hypothesis is about one fixed cascade: for a fixed path and `t`, the
    items it keeps are independent draws from the items it keeps in general, so given
    `n_t` its disagreements are Binomial(n_t, d_t), with d_t its true disagreement; under
    the null d_t > 1 - target, and P(p <= risk / K) <= risk / K. Fixed-sequence testing
    bounds the chance of rejecting any true null of a path by `risk / K`: the sequence
    passes the first true null in its order only by rejecting it. By the union bound over
    the K paths, with probability at least `1 - risk` no path rejects a true null, so every
    path's fit has d_t <= 1 - target, and so has the one kept, whichever it is. Each path
    tests the whole cascade, so no threshold is fitted on items chosen by another fitted
    threshold (the items reaching a later level would then depend on the labels that chose
    the earlier threshold, and the later test would not be exact). The argument takes the
    start as fixed; here it is chosen from the counts alone, never the labels. Given the
    start, the top stratum it passes over holds fewer items than it would by chance, and
    they are the surest verdicts: when surer verdicts agree with people at least as often
    (what a confidence is for), having fewer of them can only make a tested cascade look
    worse, so the test stays conservative; `benchmarks/bench_cascade.py` measures the
    guarantee with the start as it is.

    **The price.** One threshold for the levels a path allows, so their confidences should
    be on one scale (the probability the verdict is right); a cheap level surer than it is
    right is left out by the paths that skip it, and `confidence=` of `judges.cascade`
    rescales a level. And each path has `risk / K` of the risk.

    Args:
        passed: `passed[i][k]`: item i's verdict at level k (True pass, False fail, None no
            verdict).
        confidence: `confidence[i][k]`: that verdict's confidence, 0.5 to 1 (lower values
            count as 0.5), or None (unknown: the level never decides the item).
        labels: `labels[i]`: whether people passed item i.
        target: The agreement with people to guarantee, between 0 and 1.
        risk: The chance the guarantee may fail, between 0 and 1.
        costs: What asking each level costs (any unit: model calls, money), one per level,
            0 or more; None: the fit keeps the path keeping the most items.

    Returns:
        The fit.

    Raises:
        TypeError: A list, verdict, confidence, label, target, risk or cost of the wrong
            type.
        ValueError: Lists of different lengths, no item, items with different numbers of
            levels, costs for another number of levels, or a confidence, target, risk or
            cost out of range.
    """
    target = _number(target, "target", 0.0, 1.0, open_=True)
    risk = _number(risk, "risk", 0.0, 1.0, open_=True)
    rows, truth, levels = _rows(passed, confidence, labels)
    prices = _costs(costs, levels)
    level = risk / levels  # the union bound over the paths
    fewest = max(fewest_testable(target, level), min(START_ITEMS, len(rows) // 4))
    chosen: tuple[float | None, ...] = (None,) * levels
    p_chosen: float | None = None
    best: tuple[float, int] | None = None  # (cost per verdict, -kept): the lower, the better
    for first in range(levels):  # the path of the levels from `first` on
        skipped: list[tuple[bool, float] | None] = [None] * first
        allowed = [skipped + row[first:] for row in rows]
        t_path: float | None = None
        p_path: float | None = None
        for t, n_t, e_t in zip(GRID, *grid_counts(allowed, truth), strict=True):
            if n_t < fewest:
                continue  # too few items to test: the sequence starts lower (the counts only)
            p = binomial_cdf(e_t, n_t, 1.0 - target)
            if p > level:
                break
            t_path, p_path = t, p
        if t_path is None:
            continue
        thresholds = (None,) * first + (t_path,) * (levels - first)
        decisions = _decisions(rows, thresholds)
        kept = sum(1 for d in decisions if d is not None)
        per_verdict = 0.0
        if prices is not None and kept:
            asked = (prices[first : (levels if d is None else d[0] + 1)] for d in decisions)
            per_verdict = math.fsum(math.fsum(each) for each in asked) / kept
        rank = (per_verdict, -kept)
        if best is None or rank < best:  # a tie keeps the earlier path: more levels allowed
            chosen, p_chosen, best = thresholds, p_path, rank
    decisions = _decisions(rows, chosen)
    n = len(rows)
    counts = [0] * (levels + 1)
    agree = 0
    for decision, label in zip(decisions, truth, strict=True):
        if decision is None:
            counts[levels] += 1
        else:
            counts[decision[0]] += 1
            agree += decision[1] == label
    kept_total = n - counts[levels]
    return CascadeFit(
        thresholds=chosen,
        target=target,
        risk=risk,
        n=n,
        shares=tuple(c / n for c in counts),
        observed=agree / kept_total if kept_total else None,
        p_value=p_chosen,
    )
