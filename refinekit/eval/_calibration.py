"""How far a judge agrees with people: the figures of `refinekit calibrate`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ._agreement import (
    LengthBand,
    PanelAgreement,
    PositionConsistency,
    length_bands,
    members_of,
    position_consistency,
    self_judged,
    verbosity_warning,
)
from ._cascade_runs import CascadeCalibration
from ._stats import (
    ReliabilityBin,
    cohen_kappa,
    expected_calibration_error,
    kappa_interval,
    reliability_table,
    wilson_interval,
)
from ._store import CaseRecord

__all__ = ["Calibration", "Thresholds", "calibrate", "recommend_thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """Pass and fail thresholds on the judge's probability, and what they leave uncertain.

    An answer passes at `pass_at` or above and fails at `fail_at` or below (as
    `Criterion(pass_at=..., fail_at=...)` reads them); in between it is uncertain, for a
    person to look at. Either threshold is None when no value keeps its side's error under
    the target.

    Attributes:
        target_error: The most wrong decisions allowed on each side (a fraction).
        pass_at: The lowest probability that passes, or None.
        fail_at: The highest probability that fails, or None.
        passes: Items at or above `pass_at`.
        wrong_passes: Of those, items people failed.
        pass_error_upper: The 95% Wilson upper bound of the wrong-pass rate.
        fails: Items at or below `fail_at`.
        wrong_fails: Of those, items people passed.
        fail_error_upper: The 95% Wilson upper bound of the wrong-fail rate.
        uncertain: Items between the thresholds (all items when neither exists).
    """

    target_error: float
    pass_at: float | None
    fail_at: float | None
    passes: int
    wrong_passes: int
    pass_error_upper: float | None
    fails: int
    wrong_fails: int
    fail_error_upper: float | None
    uncertain: int


def recommend_thresholds(
    probabilities: Sequence[float], labels: Sequence[bool], target_error: float
) -> Thresholds:
    """The widest pass and fail regions whose observed error stays at or under the target.

    `pass_at` is the lowest observed probability p such that, of the items at or above p, at
    most `target_error` were failed by people; `fail_at` the highest observed probability
    below `pass_at` such that, of the items at or below it, at most `target_error` were
    passed by people.

    Args:
        probabilities: The judge's probability that each item passes.
        labels: The people's labels, True for pass, in the same order.
        target_error: The most wrong decisions allowed on each side, from 0 to 1.

    Raises:
        ValueError: Sequences of different lengths, or a target outside [0, 1).
    """
    if len(probabilities) != len(labels):
        raise ValueError("probabilities and labels differ in length")
    if not 0.0 <= target_error < 1.0:
        raise ValueError(f"the target error must be from 0 to below 1, got {target_error!r}")
    items = sorted(zip(probabilities, labels, strict=True), key=lambda item: -item[0])
    candidates = sorted({p for p, _ in items}, reverse=True)
    pass_at = None
    best = (0, 0)
    for t in candidates:  # descending; keep the lowest that holds
        chosen = [label for p, label in items if p >= t]
        wrong = sum(not label for label in chosen)
        if wrong <= target_error * len(chosen):
            pass_at, best = t, (len(chosen), wrong)
    fail_at = None
    worst = (0, 0)
    for t in sorted(candidates):  # ascending; keep the highest that holds
        if pass_at is not None and t >= pass_at:
            break
        chosen = [label for p, label in items if p <= t]
        wrong = sum(label for label in chosen)
        if wrong <= target_error * len(chosen):
            fail_at, worst = t, (len(chosen), wrong)

    def upper(n: int, wrong: int) -> float | None:
        return wilson_interval(wrong, n)[1] if n else None

    return Thresholds(
        target_error=target_error,
        pass_at=pass_at,
        fail_at=fail_at,
        passes=best[0],
        wrong_passes=best[1],
        pass_error_upper=upper(*best),
        fails=worst[0],
        wrong_fails=worst[1],
        fail_error_upper=upper(*worst),
        uncertain=len(items) - best[0] - worst[0],
    )


@dataclass(frozen=True)
class Calibration:
    """A judge against human labels.

    Failures are the positive class: precision on failures is the share of the judge's
    failures that people also failed, recall the share of people's failures the judge caught.

    Attributes:
        items: Labelled items the judge judged (pass or fail).
        unavailable: Items the judge could not judge (left out of every figure).
        inconclusive: Items with no verdict (left out of every figure).
        both_fail: Judge and people failed it.
        judge_fail_only: The judge failed it, people passed it.
        human_fail_only: People failed it, the judge passed it.
        both_pass: Both passed it.
        accuracy: Agreement rate.
        precision_fail: Of the judge's failures, the share people failed too; None without any.
        recall_fail: Of people's failures, the share the judge failed; None without any.
        kappa: Cohen's kappa (agreement corrected for chance); None without items.
        with_probability: Items whose verdict carried a probability.
        reliability: The reliability table, when every judged item had a probability.
        ece: The expected calibration error, likewise.
        thresholds: The recommended thresholds, likewise.
        sensitivity: Of the items people passed, the share the judge passed; None without.
        specificity: Of the items people failed, the share the judge failed; None without.
        kappa_lower: The kappa's 95% lower bound (Fleiss, Cohen and Everitt); None without
            a kappa, or when it is undefined. What `refinekit eval --calibration` holds
            against `--min-judge-kappa`.
        kappa_upper: Its upper bound.
        panel: For a panel judge: each member's kappa, each pair's agreement, and which
            member adds nothing (`refinekit.eval.PanelAgreement`); else None.
        length_bands: Agreement by answer length, in thirds (verbosity bias); empty under
            9 items.
        position: For a pairwise judge (`Pairwise.against`), alone or in a panel: how often
            swapping the two answers changed its vote.
        self_judged: Items whose answer was written (a labelled row's `answer_model` or
            `model` column) by a model that judged it.
        self_judge_models: Those models.
        warnings: What a person should look at: verbosity bias, answers judged by the model
            that wrote them, a pairwise judge whose vote often depends on the order, a panel
            member that adds nothing, a fitted cascade that abstains on most items.
        cascade: For a cascade judge (`refinekit.judges.cascade`): its levels' thresholds
            fitted to the target agreement, and what the fitted cascade does on these items
            (`CascadeCalibration`); else None.
    """

    items: int
    unavailable: int
    inconclusive: int
    both_fail: int
    judge_fail_only: int
    human_fail_only: int
    both_pass: int
    accuracy: float | None
    precision_fail: float | None
    recall_fail: float | None
    kappa: float | None
    with_probability: int
    reliability: list[ReliabilityBin] | None
    ece: float | None
    thresholds: Thresholds | None
    sensitivity: float | None = None
    specificity: float | None = None
    kappa_lower: float | None = None
    kappa_upper: float | None = None
    panel: PanelAgreement | None = None
    length_bands: list[LengthBand] = field(default_factory=list)
    position: list[PositionConsistency] = field(default_factory=list)
    self_judged: int = 0
    self_judge_models: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cascade: CascadeCalibration | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


POSITION_FLOOR = 0.8
"""The position-consistency rate under which a calibration warns of position bias."""


ABSTAINED_WARNING = 0.5
"""The abstained share of a fitted cascade over which a calibration warns."""


def calibrate(
    cases: Sequence[CaseRecord],
    *,
    target_error: float,
    bins: int = 10,
    judge: str | None = None,
    cascade: CascadeCalibration | None = None,
) -> Calibration:
    """The figures of a calibration run's cases (each with its human `label`).

    `cascade` is the fit of a cascade judge (`_cascade_runs.cascade_calibration`), kept with
    the figures.
    """
    judged = [c for c in cases if c.outcome in ("passed", "failed") and c.label is not None]
    pairs = [(c.outcome == "passed", c.label == "pass") for c in judged]
    both_fail = sum(not j and not h for j, h in pairs)
    judge_fail_only = sum(not j and h for j, h in pairs)
    human_fail_only = sum(j and not h for j, h in pairs)
    both_pass = sum(j and h for j, h in pairs)
    probable = [c for c in judged if c.probability is not None]
    reliability = ece = thresholds = None
    if probable and len(probable) == len(judged):
        probabilities = [float(c.probability) for c in probable if c.probability is not None]
        labels = [c.label == "pass" for c in probable]
        reliability = reliability_table(probabilities, labels, bins)
        ece = expected_calibration_error(probabilities, labels, bins)
        thresholds = recommend_thresholds(probabilities, labels, target_error)
    bounds = kappa_interval(both_pass, human_fail_only, judge_fail_only, both_fail)
    kappa = cohen_kappa(pairs) if pairs else None
    panel = members_of(cases, kappa)
    bands = length_bands(cases)
    position = position_consistency(cases, judge or "judge")
    self_count, self_models = self_judged(cases)
    warnings = [w for w in (verbosity_warning(bands),) if w]
    if self_count:
        warnings.append(
            f"self-preference: {self_count} answers were judged by the model that wrote them "
            f"({', '.join(self_models)}); a model tends to rate its own answers higher: judge "
            "with another model, or calibrate on answers of another"
        )
    for p in position:
        if p.items and p.rate < POSITION_FLOOR:
            warnings.append(
                f"position bias: swapping the two answers changed {p.judge}'s vote on "
                f"{p.items - p.consistent} of {p.items} items (consistent {p.rate:.2f})"
            )
    if panel is not None and panel.adds_nothing:
        warnings.append(
            "panel members that add nothing (the panel agrees with people as well without "
            f"them): {', '.join(panel.adds_nothing)}"
        )
    if cascade is not None and cascade.abstained_share > ABSTAINED_WARNING:
        warnings.append(
            f"the fitted cascade abstains on {cascade.abstained} of {cascade.items} items "
            f"({cascade.abstained_share:.0%}): no level's verdicts reach agreement "
            f"{cascade.target:.2f} at risk {cascade.risk:.2f} on the rest; lower "
            "--target-agreement, label more items, or use stronger levels"
        )
    return Calibration(
        items=len(judged),
        unavailable=sum(c.outcome == "unavailable" for c in cases),
        inconclusive=sum(c.outcome == "inconclusive" for c in cases),
        both_fail=both_fail,
        judge_fail_only=judge_fail_only,
        human_fail_only=human_fail_only,
        both_pass=both_pass,
        accuracy=_ratio(both_fail + both_pass, len(judged)),
        precision_fail=_ratio(both_fail, both_fail + judge_fail_only),
        recall_fail=_ratio(both_fail, both_fail + human_fail_only),
        kappa=kappa,
        with_probability=len(probable),
        reliability=reliability,
        ece=ece,
        thresholds=thresholds,
        sensitivity=_ratio(both_pass, both_pass + judge_fail_only),
        specificity=_ratio(both_fail, both_fail + human_fail_only),
        kappa_lower=None if bounds is None else bounds[0],
        kappa_upper=None if bounds is None else bounds[1],
        panel=panel,
        length_bands=bands,
        position=position,
        self_judged=self_count,
        self_judge_models=self_models,
        warnings=warnings,
        cascade=cascade,
    )
