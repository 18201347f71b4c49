"""Statistics for evaluation runs: confidence bounds on pass rates and friends."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

__all__ = [
    "ReliabilityBin",
    "cohen_kappa",
    "corrected_interval",
    "kappa_interval",
    "rogan_gladen",
    "expected_calibration_error",
    "flip_rate",
    "mcnemar_exact",
    "reliability_table",
    "wilson_interval",
]


def wilson_interval(successes: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate.

    Unlike the normal approximation it stays inside [0, 1] and behaves at small `total` and at
    rates near 0 or 1: 19 passes out of 20 give a lower bound of about 0.76, 190 out of 200
    about 0.91.

    Args:
        successes: Passes, from 0 to `total`.
        total: Cases; 0 gives the uninformative interval (0, 1).
        confidence: The two-sided confidence level, between 0 and 1.

    Returns:
        The interval's lower and upper bounds.

    Raises:
        ValueError: Counts out of range or a confidence level outside (0, 1).
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be a non-negative int, got {total!r}")
    if (
        isinstance(successes, bool)
        or not isinstance(successes, int)
        or not (0 <= successes <= total)
    ):
        raise ValueError(f"successes must be an int from 0 to total ({total}), got {successes!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    if total == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    lower = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the edges, no
    upper = 1.0 if successes == total else min(1.0, centre + half)  # float residue
    return lower, upper


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def mcnemar_exact(b: int, c: int) -> float:
    """The exact two-sided McNemar test p-value of a paired before/after comparison.

    Only the discordant cases count: under the null hypothesis (no change) each is equally
    likely to have gone either way, so min(b, c) is tested against Binomial(b + c, 1/2) and the
    two-sided p-value is min(1, 2 * P(X <= min(b, c))). The binomial tail is summed exactly in
    integers, so the result is the correctly rounded float even for thousands of cases.

    Args:
        b: Cases that passed before and fail after (regressions).
        c: Cases that failed before and pass after (improvements).

    Returns:
        The p-value, in (0, 1]; 1.0 when there is no discordant case. Symmetric in b and c.

    Raises:
        ValueError: A count that is not a non-negative int.
    """
    b = _check_count("b", b)
    c = _check_count("c", c)
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def cohen_kappa(pairs: Iterable[tuple[bool, bool]]) -> float:
    """Cohen's kappa between two raters of pass/fail labels, such as a judge and a person.

    Kappa is (p_o - p_e) / (1 - p_e): the observed agreement p_o corrected for the agreement
    p_e two raters with the same label frequencies would reach by chance. 1 is perfect
    agreement, 0 agreement at chance level, negative values worse than chance.

    The chance agreement is 1 only when both raters gave the same single label to every item;
    kappa is then undefined (0 / 0) and this function returns 1.0, since the observed agreement
    is also perfect. (Were the observed agreement below 1 in that case it would return 0.0,
    but with two labels that cannot happen.)

    Args:
        pairs: One `(judge_label, human_label)` tuple of bools per item, True for pass.

    Returns:
        Kappa, in [-1, 1].

    Raises:
        ValueError: No pairs, or an item that is not a pair of bools.
    """
    counts = {(True, True): 0, (True, False): 0, (False, True): 0, (False, False): 0}
    for index, pair in enumerate(pairs):
        if (
            not isinstance(pair, tuple)
            or len(pair) != 2
            or not all(isinstance(label, bool) for label in pair)
        ):
            raise ValueError(f"pair {index} must be a tuple of two bools, got {pair!r}")
        counts[pair] += 1
    both_pass = counts[True, True]
    judge_only = counts[True, False]
    human_only = counts[False, True]
    both_fail = counts[False, False]
    n = both_pass + judge_only + human_only + both_fail
    if n == 0:
        raise ValueError("cohen_kappa needs at least one pair")
    # In integers, scaled by n * n: observed and chance agreement.
    observed = n * (both_pass + both_fail)
    chance = (both_pass + judge_only) * (both_pass + human_only) + (human_only + both_fail) * (
        judge_only + both_fail
    )
    if chance == n * n:
        return 1.0 if observed == n * n else 0.0
    return float(Fraction(observed - chance, n * n - chance))


def flip_rate(passes: int, total: int) -> float | None:
    """The chance that two of a case's runs (or verdicts) disagree, from `passes` of `total`.

    With a share p of passes over n runs, `2 p (1 - p) n / (n - 1)`: the share of the pairs
    of runs whose outcomes differ (an unbiased estimate of the probability that two
    independent runs disagree). 0 when every run agreed; None with fewer than two runs.
    """
    if total < 2:
        return None
    return 2 * passes * (total - passes) / (total * (total - 1))


def kappa_interval(
    both_pass: int, judge_only: int, human_only: int, both_fail: int, confidence: float = 0.95
) -> tuple[float, float] | None:
    """The large-sample interval of Cohen's kappa of a 2x2 agreement table.

    Kappa plus or minus z times its standard error as Fleiss, Cohen and Everitt (1969) give
    it (not the simpler error under the null of no agreement, which is too narrow away from
    0), clipped to [-1, 1].

    Args:
        both_pass: Items both raters passed.
        judge_only: Items the first rater (the judge) passed and the second failed.
        human_only: Items the second rater passed and the first failed.
        both_fail: Items both failed.
        confidence: The two-sided confidence level.

    Returns:
        The lower and upper bounds; None without items, or when kappa is undefined (both
        raters gave one same label to every item).
    """
    n = both_pass + judge_only + human_only + both_fail
    if n == 0:
        return None
    p = {(1, 1): both_pass / n, (1, 0): judge_only / n, (0, 1): human_only / n}
    p[(0, 0)] = both_fail / n
    row = {1: p[1, 1] + p[1, 0], 0: p[0, 1] + p[0, 0]}  # the judge's marginals
    col = {1: p[1, 1] + p[0, 1], 0: p[1, 0] + p[0, 0]}  # the people's
    chance = row[1] * col[1] + row[0] * col[0]
    if chance >= 1.0:
        return None
    kappa = (p[1, 1] + p[0, 0] - chance) / (1 - chance)
    diagonal = sum(p[i, i] * (1 - (row[i] + col[i]) * (1 - kappa)) ** 2 for i in (0, 1))
    off = (1 - kappa) ** 2 * sum(
        p[i, j] * (col[i] + row[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j
    )
    variance = (diagonal + off - (kappa - chance * (1 - kappa)) ** 2) / (n * (1 - chance) ** 2)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    half = z * math.sqrt(max(0.0, variance))
    return max(-1.0, kappa - half), min(1.0, kappa + half)


def rogan_gladen(rate: float, sensitivity: float, specificity: float) -> float | None:
    """A pass rate measured by an imperfect judge, corrected for the judge's errors.

    The judge passes a truly passing answer with probability `sensitivity` and fails a truly
    failing one with probability `specificity`, so it passes a share
    `observed = true * Se + (1 - true) * (1 - Sp)` of the answers; solved for the true share
    (Rogan and Gladen, 1978): `(observed + Sp - 1) / (Se + Sp - 1)`, clipped to [0, 1].

    Returns:
        The corrected rate; None when `Se + Sp <= 1` (the judge is no better than chance,
        and its verdicts say nothing of the true rate).
    """
    informedness = sensitivity + specificity - 1
    if informedness <= 0:
        return None
    return min(1.0, max(0.0, (rate + specificity - 1) / informedness))


def corrected_interval(
    passes: int,
    total: int,
    true_passes: int,
    positives: int,
    true_fails: int,
    negatives: int,
    confidence: float = 0.95,
) -> tuple[float | None, float, float]:
    """The Rogan-Gladen corrected pass rate and an interval with the judge's uncertainty in it.

    The observed rate (`passes` of `total`), the judge's sensitivity (`true_passes` of the
    `positives` people passed) and its specificity (`true_fails` of the `negatives` people
    failed) each get their Wilson interval at `confidence`; the corrected rate is increasing
    in the observed rate and in the specificity and decreasing in the sensitivity, so the
    interval is its range over those three intervals: its lower bound at (low rate, high
    sensitivity, low specificity), its upper bound at the opposite corner. A corner where
    `Se + Sp <= 1` (a judge no better than chance is within the uncertainty) leaves that side
    at 0 or 1.

    Why this one: it needs no normal approximation of a ratio whose denominator is itself
    uncertain (the delta method undercovers where the judge's sensitivity or specificity is
    near 1, or the calibration set is small), it keeps Wilson's behaviour at rates near 0 and
    1, and it is closed-form and deterministic, so a gate gives the same answer twice. In
    `benchmarks/bench_corrected_gate.py` it covered the true rate in at least 95% of the
    simulated runs in every cell (docs/panels.md has the table); it is wider than the delta
    method's, as a gate's bound may be: a gate never gets greener for want of evidence.

    Args:
        passes: Answers the judge passed.
        total: Answers judged.
        true_passes: Labelled items people passed that the judge passed too.
        positives: Labelled items people passed.
        true_fails: Labelled items people failed that the judge failed too.
        negatives: Labelled items people failed.
        confidence: The level of each of the three intervals.

    Returns:
        The corrected rate (None when the judge's point estimates are no better than chance,
        or a count is 0) and the interval's bounds.
    """
    if total == 0 or positives == 0 or negatives == 0:
        return None, 0.0, 1.0
    rate_low, rate_high = wilson_interval(passes, total, confidence)
    se_low, se_high = wilson_interval(true_passes, positives, confidence)
    sp_low, sp_high = wilson_interval(true_fails, negatives, confidence)
    estimate = rogan_gladen(passes / total, true_passes / positives, true_fails / negatives)
    lower = rogan_gladen(rate_low, se_high, sp_low)
    upper = rogan_gladen(rate_high, se_low, sp_high)
    return estimate, 0.0 if lower is None else lower, 1.0 if upper is None else upper


@dataclass(frozen=True)
class ReliabilityBin:
    """One equal-width probability bin of a reliability table.

    Attributes:
        lower: The bin's lower edge, included.
        upper: The bin's upper edge, excluded except for the last bin, which includes 1.0.
        count: Predictions whose probability fell in the bin (at least 1).
        mean_probability: Their mean predicted probability of passing.
        observed_rate: The fraction of them that actually passed.
    """

    lower: float
    upper: float
    count: int
    mean_probability: float
    observed_rate: float


def _check_calibration_input(
    probabilities: Sequence[float], outcomes: Sequence[bool], bins: int
) -> None:
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    if len(probabilities) != len(outcomes):
        raise ValueError(
            f"probabilities and outcomes differ in length ({len(probabilities)} and "
            f"{len(outcomes)})"
        )
    if not probabilities:
        raise ValueError("at least one probability is needed")
    for index, probability in enumerate(probabilities):
        if (
            isinstance(probability, bool)
            or not isinstance(probability, (int, float))
            or not 0.0 <= probability <= 1.0  # also rejects NaN
        ):
            raise ValueError(
                f"probabilities[{index}] must be a number from 0 to 1, got {probability!r}"
            )
    for index, outcome in enumerate(outcomes):
        if not isinstance(outcome, bool):
            raise ValueError(f"outcomes[{index}] must be a bool, got {outcome!r}")


def _bin_index(probability: float, bins: int) -> int:
    index = min(int(probability * bins), bins - 1)
    # Agree exactly with the edges index / bins despite float rounding in the product.
    while index > 0 and probability < index / bins:
        index -= 1
    while index < bins - 1 and probability >= (index + 1) / bins:
        index += 1
    return index


def reliability_table(
    probabilities: Sequence[float], outcomes: Sequence[bool], bins: int = 10
) -> list[ReliabilityBin]:
    """Group predicted pass probabilities into equal-width bins and compare with outcomes.

    Bin i covers [i / bins, (i + 1) / bins); the last bin is closed, so a probability of 1.0
    lands in it. A well calibrated judge has each bin's observed rate close to its mean
    probability; this is the data of a reliability diagram.

    Args:
        probabilities: The judge's probability that each answer passes, each from 0 to 1.
        outcomes: Whether each answer actually passed (the human label), in the same order.
        bins: The number of equal-width bins.

    Returns:
        The non-empty bins, in increasing order of probability; empty bins are left out.

    Raises:
        ValueError: Sequences of different or zero length, a probability outside [0, 1] or
            not a number, an outcome that is not a bool, or `bins` not a positive int.
    """
    _check_calibration_input(probabilities, outcomes, bins)
    grouped: dict[int, list[tuple[float, bool]]] = {}
    for probability, outcome in zip(probabilities, outcomes, strict=True):
        grouped.setdefault(_bin_index(probability, bins), []).append((probability, outcome))
    table = []
    for index in sorted(grouped):
        members = grouped[index]
        table.append(
            ReliabilityBin(
                lower=index / bins,
                upper=(index + 1) / bins,
                count=len(members),
                mean_probability=math.fsum(p for p, _ in members) / len(members),
                observed_rate=sum(1 for _, passed in members if passed) / len(members),
            )
        )
    return table


def expected_calibration_error(
    probabilities: Sequence[float], outcomes: Sequence[bool], bins: int = 10
) -> float:
    """The expected calibration error of predicted pass probabilities.

    The sum over the non-empty bins of `reliability_table` of count / N times the gap between
    the bin's observed pass rate and its mean predicted probability: 0 for a perfectly
    calibrated judge, up to 1 for one that is confidently wrong every time.

    Args:
        probabilities: The judge's probability that each answer passes, each from 0 to 1.
        outcomes: Whether each answer actually passed (the human label), in the same order.
        bins: The number of equal-width bins.

    Returns:
        The error, in [0, 1].

    Raises:
        ValueError: As for `reliability_table`.
    """
    table = reliability_table(probabilities, outcomes, bins)
    total = len(probabilities)
    error = math.fsum(
        row.count / total * abs(row.observed_rate - row.mean_probability) for row in table
    )
    return min(1.0, error)
