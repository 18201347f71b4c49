from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refinekit.eval._stats import (
    ReliabilityBin,
    cohen_kappa,
    corrected_interval,
    expected_calibration_error,
    flip_rate,
    kappa_interval,
    mcnemar_exact,
    reliability_table,
    rogan_gladen,
    wilson_interval,
)

# --- Wilson --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "total", "lower", "upper"),
    [(19, 20, 0.7639, 0.9911), (190, 200, 0.9104, 0.9725)],
)
def test_wilson_known_values(successes: int, total: int, lower: float, upper: float) -> None:
    low, high = wilson_interval(successes, total)
    assert low == pytest.approx(lower, abs=1e-3)
    assert high == pytest.approx(upper, abs=1e-3)


def test_wilson_edges() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert 0.0 < high < 1.0
    low, high = wilson_interval(10, 10)
    assert 0.0 < low < 1.0
    assert high == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_wider_at_higher_confidence() -> None:
    low95, high95 = wilson_interval(15, 20)
    low99, high99 = wilson_interval(15, 20, confidence=0.99)
    assert low99 < low95 < high95 < high99


@pytest.mark.parametrize(
    ("successes", "total", "confidence"),
    [
        (1, -1, 0.95),
        (-1, 5, 0.95),
        (6, 5, 0.95),
        (True, 5, 0.95),
        (1, 5.0, 0.95),
        (1, 5, 0.0),
        (1, 5, 1.0),
    ],
)
def test_wilson_bad_input(successes: Any, total: Any, confidence: float) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        wilson_interval(successes, total, confidence)


# --- McNemar -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (1, 6, 0.125),  # 2 * (1 + 7) / 128
        (0, 0, 1.0),
        (5, 5, 1.0),
        (0, 10, 2 / 1024),
        (0, 1, 1.0),
        (2, 8, 2 * (1 + 10 + 45) / 1024),
    ],
)
def test_mcnemar_known_values(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(c, b) == mcnemar_exact(b, c)


def test_mcnemar_large_counts_stay_accurate() -> None:
    p = mcnemar_exact(0, 3000)
    assert p == 2.0**-2999
    assert 0.0 < mcnemar_exact(1400, 1600) < 0.001
    assert mcnemar_exact(1500, 1500) == 1.0


@pytest.mark.parametrize(("b", "c"), [(-1, 2), (2, -1), (1.0, 2), (True, 2), ("1", 2)])
def test_mcnemar_bad_input(b: Any, c: Any) -> None:
    with pytest.raises(ValueError, match="non-negative int"):
        mcnemar_exact(b, c)


# --- Cohen's kappa -------------------------------------------------------------------------


def _pairs(both: int, judge_only: int, human_only: int, neither: int) -> list[tuple[bool, bool]]:
    return (
        [(True, True)] * both
        + [(True, False)] * judge_only
        + [(False, True)] * human_only
        + [(False, False)] * neither
    )


def test_kappa_textbook_example() -> None:
    # Wikipedia's example: 50 items, p_o = 0.7, p_e = 0.5.
    assert cohen_kappa(_pairs(20, 5, 10, 15)) == pytest.approx(0.4)


def test_kappa_perfect_and_chance_agreement() -> None:
    assert cohen_kappa(_pairs(7, 0, 0, 3)) == 1.0
    assert cohen_kappa(_pairs(1, 1, 1, 1)) == 0.0
    assert cohen_kappa(_pairs(0, 5, 5, 0)) == -1.0


def test_kappa_degenerate_single_label() -> None:
    assert cohen_kappa(_pairs(4, 0, 0, 0)) == 1.0
    assert cohen_kappa(_pairs(0, 0, 0, 4)) == 1.0


def test_kappa_accepts_any_iterable() -> None:
    assert cohen_kappa(iter(_pairs(20, 5, 10, 15))) == pytest.approx(0.4)


@pytest.mark.parametrize(
    "pairs",
    [[], [(True, 1)], [(True,)], [(True, True, False)], [[True, True]], ["ab"]],
)
def test_kappa_bad_input(pairs: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        cohen_kappa(pairs)


# --- Calibration ---------------------------------------------------------------------------


def test_ece_perfectly_calibrated() -> None:
    probabilities = [0.25] * 4 + [0.75] * 4 + [1.0] * 2 + [0.0] * 2
    outcomes = [True, False, False, False] + [True, True, True, False] + [True] * 2 + [False] * 2
    assert expected_calibration_error(probabilities, outcomes) == pytest.approx(0.0, abs=1e-12)


def test_ece_confidently_wrong() -> None:
    assert expected_calibration_error([1.0, 0.0, 1.0], [False, True, False]) == 1.0
    assert expected_calibration_error([0.95] * 10, [False] * 10) == pytest.approx(0.95)


def test_ece_hand_computed() -> None:
    # Bin [0.8, 0.9): 0.8, 0.8 -> mean 0.8, observed 1/2, gap 0.3, weight 2/4.
    # Bin [0.2, 0.3): 0.2, 0.2 -> mean 0.2, observed 0, gap 0.2, weight 2/4.
    probabilities = [0.8, 0.8, 0.2, 0.2]
    outcomes = [True, False, False, False]
    assert expected_calibration_error(probabilities, outcomes) == pytest.approx(0.25)
    # With a single bin everything is averaged: mean 0.5, observed 0.25.
    assert expected_calibration_error(probabilities, outcomes, bins=1) == pytest.approx(0.25)


def test_reliability_table_bins_and_edges() -> None:
    table = reliability_table(
        [0.0, 0.1, 0.5, 0.55, 0.99, 1.0], [False, True, True, False, True, True], bins=10
    )
    assert [(row.lower, row.upper, row.count) for row in table] == [
        (0.0, 0.1, 1),
        (0.1, 0.2, 1),
        (0.5, 0.6, 2),
        (0.9, 1.0, 2),  # 1.0 lands in the last, closed bin
    ]
    assert table[2] == ReliabilityBin(0.5, 0.6, 2, pytest.approx(0.525), 0.5)
    assert table[3].observed_rate == 1.0
    assert table[3].mean_probability == pytest.approx(0.995)


def test_reliability_table_edges_follow_the_bin_boundaries() -> None:
    # Boundaries such as 0.3, 0.6 and 0.7 fall in the bin they open, despite float rounding.
    for bins in (3, 5, 7, 10, 20):
        for i in range(bins + 1):
            probability = i / bins
            (row,) = reliability_table([probability], [True], bins=bins)
            assert row.lower <= probability
            assert probability < row.upper or (row.upper == 1.0 and probability == 1.0)


@pytest.mark.parametrize(
    ("probabilities", "outcomes", "bins", "match"),
    [
        ([0.5], [True, False], 10, "differ in length"),
        ([], [], 10, "at least one"),
        ([1.5], [True], 10, "from 0 to 1"),
        ([-0.1], [True], 10, "from 0 to 1"),
        ([math.nan], [True], 10, "from 0 to 1"),
        (["0.5"], [True], 10, "from 0 to 1"),
        ([True], [True], 10, "from 0 to 1"),
        ([0.5], [1], 10, "must be a bool"),
        ([0.5], [True], 0, "positive int"),
        ([0.5], [True], 2.0, "positive int"),
    ],
)
def test_calibration_bad_input(probabilities: Any, outcomes: Any, bins: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        expected_calibration_error(probabilities, outcomes, bins)
    with pytest.raises(ValueError, match=match):
        reliability_table(probabilities, outcomes, bins)


# --- Properties ----------------------------------------------------------------------------


@given(
    data=st.lists(st.tuples(st.floats(min_value=0.0, max_value=1.0), st.booleans()), min_size=1),
    bins=st.integers(min_value=1, max_value=50),
    total=st.integers(min_value=1, max_value=10_000),
    fraction=st.floats(min_value=0.0, max_value=1.0),
)
def test_ece_and_wilson_bounds(
    data: list[tuple[float, bool]], bins: int, total: int, fraction: float
) -> None:
    probabilities = [p for p, _ in data]
    outcomes = [o for _, o in data]
    ece = expected_calibration_error(probabilities, outcomes, bins)
    assert 0.0 <= ece <= 1.0
    assert sum(row.count for row in reliability_table(probabilities, outcomes, bins)) == len(data)
    successes = round(fraction * total)
    low, high = wilson_interval(successes, total)
    assert 0.0 <= low <= successes / total <= high <= 1.0


# --- the judge-corrected pass rate (Rogan-Gladen) ---------------------------------------------


def test_rogan_gladen_undoes_a_known_judge_error() -> None:
    # true rate 0.5, Se 0.9, Sp 0.8: the judge passes 0.5 * 0.9 + 0.5 * 0.2 = 0.55
    assert rogan_gladen(0.55, 0.9, 0.8) == pytest.approx(0.5)
    # a perfect judge needs no correction
    assert rogan_gladen(0.37, 1.0, 1.0) == pytest.approx(0.37)


def test_rogan_gladen_clips_and_refuses_a_judge_no_better_than_chance() -> None:
    assert rogan_gladen(0.1, 0.9, 0.8) == 0.0  # under the lenient judge's floor of 0.2
    assert rogan_gladen(0.99, 0.9, 0.95) == 1.0
    assert rogan_gladen(0.5, 0.5, 0.5) is None
    assert rogan_gladen(0.5, 0.3, 0.6) is None


def test_corrected_interval_holds_every_rate_its_three_intervals_allow() -> None:
    estimate, lower, upper = corrected_interval(110, 200, 45, 50, 40, 50)
    assert estimate == pytest.approx(rogan_gladen(110 / 200, 45 / 50, 40 / 50))
    rate = wilson_interval(110, 200)
    se = wilson_interval(45, 50)
    sp = wilson_interval(40, 50)
    grid = [lo + (hi - lo) * i / 4 for lo, hi in (rate, se, sp) for i in range(5)]
    for r in grid[0:5]:
        for a in grid[5:10]:
            for b in grid[10:15]:
                value = rogan_gladen(r, a, b)
                assert value is not None
                assert lower - 1e-12 <= value <= upper + 1e-12
    assert estimate is not None
    assert lower < estimate < upper
    # the judge's uncertainty widens the interval past the observed rate's own
    assert upper - lower > rate[1] - rate[0]


def test_corrected_interval_narrows_with_a_bigger_calibration() -> None:
    _, small_low, small_high = corrected_interval(110, 200, 18, 20, 16, 20)
    _, big_low, big_high = corrected_interval(110, 200, 450, 500, 400, 500)
    assert big_high - big_low < small_high - small_low


def test_corrected_interval_without_counts_is_uninformative() -> None:
    assert corrected_interval(0, 0, 45, 50, 40, 50) == (None, 0.0, 1.0)
    assert corrected_interval(10, 20, 0, 0, 40, 50) == (None, 0.0, 1.0)
    assert corrected_interval(10, 20, 45, 50, 0, 0) == (None, 0.0, 1.0)


def test_corrected_interval_of_a_chance_judge_spans_everything() -> None:
    # Se 0.5 and Sp 0.5: chance is inside the judge's uncertainty on both sides
    assert corrected_interval(50, 100, 10, 20, 10, 20) == (None, 0.0, 1.0)


# --- kappa's interval, flip rate ------------------------------------------------------------


def test_kappa_interval_matches_the_hand_computed_large_sample_variance() -> None:
    # p11 2/8, judge-only 1/8, people-only 2/8, p00 3/8: kappa 0.25, variance 0.10986
    # (Fleiss, Cohen and Everitt 1969, worked by hand)
    bounds = kappa_interval(2, 1, 2, 3)
    assert bounds is not None
    half = 1.959964 * math.sqrt(0.219726 / 2)
    assert bounds[0] == pytest.approx(0.25 - half, abs=1e-4)
    assert bounds[1] == pytest.approx(0.25 + half, abs=1e-4)


def test_kappa_interval_is_undefined_without_items_or_with_one_label() -> None:
    assert kappa_interval(0, 0, 0, 0) is None
    assert kappa_interval(5, 0, 0, 0) is None
    low, high = kappa_interval(50, 0, 0, 50) or (0.0, 0.0)
    assert high == 1.0
    assert low == 1.0


def test_flip_rate_is_the_share_of_pairs_of_runs_that_disagree() -> None:
    assert flip_rate(3, 3) == 0.0
    assert flip_rate(0, 4) == 0.0
    assert flip_rate(1, 2) == 1.0
    assert flip_rate(2, 4) == pytest.approx(4 / 6)  # 4 of the 6 pairs differ
    assert flip_rate(1, 1) is None
