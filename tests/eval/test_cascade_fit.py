"""`refinekit.eval.fit_cascade`: the fixed-sequence fit on hand-made data with known answers."""

from __future__ import annotations

import copy
import itertools
import json
import random
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refinekit.eval import CascadeFit, fit_cascade
from refinekit.eval._cascade_fit import GRID, binomial_cdf, fewest_testable, grid_counts

# --- the exact binomial tail -----------------------------------------------------------------


def exact_cdf(k: int, n: int, p: Fraction) -> float:
    return float(sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1)))


@pytest.mark.parametrize(("k", "n", "p"), [(1, 3, "1/2"), (0, 10, "1/10"), (7, 60, "1/10")])
def test_the_binomial_tail_is_exact(k: int, n: int, p: str) -> None:
    assert binomial_cdf(k, n, float(Fraction(p))) == pytest.approx(
        exact_cdf(k, n, Fraction(p)), rel=1e-12
    )


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 150), st.integers(1, 150), st.sampled_from([0.05, 0.1, 0.3]))
def test_the_binomial_tail_matches_the_exact_sum(k: int, n: int, p: float) -> None:
    assert binomial_cdf(k, n, p) == pytest.approx(
        exact_cdf(k, n, Fraction(p)), rel=1e-9, abs=1e-300
    )


def test_the_binomial_tail_of_many_items_does_not_overflow() -> None:
    assert 0.4 < binomial_cdf(500, 5000, 0.1) < 0.6  # the mean: about a half
    assert binomial_cdf(5000, 5000, 0.1) == 1.0
    assert binomial_cdf(-1, 5000, 0.1) == 0.0


def test_the_fewest_items_a_test_can_reject_with() -> None:
    assert fewest_testable(0.9, 0.1) == 22  # 0.9**22 = 0.098 <= 0.1 < 0.9**21 = 0.109
    assert fewest_testable(0.95, 0.05) == 59


# --- the fit on hand-made data ---------------------------------------------------------------


def test_a_judge_always_right_keeps_every_item() -> None:
    fit = fit_cascade([[True]] * 50, [[0.95]] * 50, [True] * 50)
    assert fit.thresholds == (0.5,)  # every threshold down the grid is rejected
    assert fit.shares == (1.0, 0.0)
    assert fit.observed == 1.0
    assert fit.p_value == pytest.approx(0.9**50)
    assert (fit.target, fit.risk, fit.n) == (0.9, 0.1, 50)
    assert fit.certified


def test_the_sequence_stops_at_the_first_threshold_not_rejected() -> None:
    # 100 items right at 0.9 sure; 100 at 0.6 sure, half of them wrong
    passed = [[True]] * 200
    confidence = [[0.9]] * 100 + [[0.6]] * 100
    labels = [True] * 100 + [True, False] * 50
    fit = fit_cascade(passed, confidence, labels)
    assert fit.thresholds == (0.61,)  # 0.60 keeps 200 items, 50 wrong: not rejected
    assert fit.shares == (0.5, 0.5)
    assert fit.observed == 1.0
    assert fit.p_value == pytest.approx(binomial_cdf(0, 100, 0.1))


def test_two_levels_share_the_threshold_and_each_decides_its_items() -> None:
    # 50 items the cheap level gets right, 0.99 sure; 50 it gets wrong, 0.55 sure, which
    # the strong level gets right, 0.97 sure
    passed = [[True, True]] * 50 + [[False, True]] * 50
    confidence = [[0.99, 0.99]] * 50 + [[0.55, 0.97]] * 50
    fit = fit_cascade(passed, confidence, [True] * 100)
    assert fit.thresholds == (0.56, 0.56)  # at 0.55 the cheap level keeps its 50 errors
    assert fit.shares == (0.5, 0.5, 0.0)
    assert fit.observed == 1.0


def test_a_level_without_a_verdict_never_decides_the_item() -> None:
    passed: list[list[bool | None]] = [[None, True]] * 40
    confidence: list[list[float | None]] = [[0.99, 0.9]] * 40
    fit = fit_cascade(passed, confidence, [True] * 40)
    assert fit.shares == (0.0, 1.0, 0.0)
    unknown = fit_cascade([[True, True]] * 40, [[None, 0.9]] * 40, [True] * 40)
    assert unknown.shares == (0.0, 1.0, 0.0)


def test_a_judge_too_often_wrong_certifies_nothing() -> None:
    labels = [True] * 70 + [False] * 30
    fit = fit_cascade([[True]] * 100, [[0.9]] * 100, labels)
    assert fit.thresholds == (None,)
    assert not fit.certified
    assert fit.shares == (0.0, 1.0)
    assert fit.abstained == 1.0
    assert fit.observed is None
    assert fit.p_value is None


def test_too_few_items_to_test_certify_nothing() -> None:
    fit = fit_cascade([[True]] * 21, [[0.99]] * 21, [True] * 21)  # 0.9**21 > 0.1
    assert fit.thresholds == (None,)


def test_a_confidence_under_one_half_counts_as_one_half() -> None:
    low = fit_cascade([[True]] * 30, [[0.2]] * 30, [True] * 30)
    half = fit_cascade([[True]] * 30, [[0.5]] * 30, [True] * 30)
    assert low == half
    assert low.thresholds == (0.5,)


def test_a_stricter_target_keeps_fewer_items() -> None:
    rng = random.Random(7)
    confidence = [[0.5 + 0.5 * rng.random()] for _ in range(1000)]
    passed = [[True]] * 1000
    labels = [rng.random() < c[0] for c in confidence]  # right as often as it says
    loose = fit_cascade(passed, confidence, labels, target=0.8, risk=0.1)
    strict = fit_cascade(passed, confidence, labels, target=0.9, risk=0.1)
    assert loose.thresholds[0] is not None
    assert strict.thresholds[0] is not None
    assert strict.thresholds[0] > loose.thresholds[0]
    assert strict.shares[0] < loose.shares[0]


def test_the_guarantee_holds_where_the_true_agreement_is_known() -> None:
    # confidence c uniform on 0.5..1 and right with probability c: among the items a
    # threshold t keeps, the true agreement is (1 + t) / 2, at least 0.9 exactly when t >= 0.8
    rng = random.Random(20261203)
    runs, n, too_low, chosen = 100, 1000, 0, []
    for _ in range(runs):
        confidence = [[0.5 + 0.5 * rng.random()] for _ in range(n)]
        labels = [rng.random() < c[0] for c in confidence]
        fit = fit_cascade([[True]] * n, confidence, labels, target=0.9, risk=0.1)
        t = fit.thresholds[0]
        if t is not None:
            chosen.append(t)
            too_low += t < 0.8 - 1e-9
    assert too_low / runs <= 0.1
    assert len(chosen) >= 0.9 * runs  # it certifies a threshold in nearly every run
    assert sorted(chosen)[len(chosen) // 2] <= 0.9  # and not a needlessly high one


# --- CascadeFit: to and from JSON ------------------------------------------------------------


def test_a_fit_goes_to_json_and_back() -> None:
    fit = fit_cascade([[True, False]] * 40, [[0.9, 0.8]] * 40, [True] * 40)
    data = json.loads(json.dumps(fit.to_dict()))
    assert CascadeFit.from_dict(data) == fit
    assert data["thresholds"] == [0.5, 0.5]
    nothing = fit_cascade([[True]] * 5, [[0.9]] * 5, [True] * 5)
    assert CascadeFit.from_dict(json.loads(json.dumps(nothing.to_dict()))) == nothing


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"thresholds": None}, "not a cascade fit"),
        ({"thresholds": [0.2]}, "a threshold must be from 0.5 to 1"),
        ({"target": 1.0}, "target must be between 0 and 1"),
        ({"risk": "low"}, "risk must be a number"),
        ({"n": -1}, "n must be a whole number"),
        ({"shares": [1.0]}, "shares must have one entry per level"),
        ({"observed": 2.0}, "observed must be from 0 to 1"),
    ],
)
def test_a_bad_stored_fit_is_a_value_error(change: dict[str, object], match: str) -> None:
    data = {**fit_cascade([[True]] * 40, [[0.9]] * 40, [True] * 40).to_dict(), **change}
    with pytest.raises(ValueError, match=match):
        CascadeFit.from_dict(data)
    with pytest.raises(ValueError, match="needs thresholds"):
        CascadeFit.from_dict({"target": 0.9})


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (([], [], []), {}, ValueError, "at least one labelled item"),
        (([[True]], [[0.9]], [True, False]), {}, ValueError, "one entry per item"),
        (([[True], [True, True]], [[0.9], [0.9, 0.9]], [True, True]), {}, ValueError, "levels"),
        (([[True]], [[0.9, 0.9]], [True]), {}, ValueError, "different lengths"),
        (([[]], [[]], [True]), {}, ValueError, "at least one level"),
        (([[True]], [[0.9]], ["yes"]), {}, TypeError, "labels"),
        (([["pass"]], [[0.9]], [True]), {}, TypeError, "bool or None"),
        (([[True]], [[1.5]], [True]), {}, ValueError, "confidence"),
        (([[True]], [["high"]], [True]), {}, TypeError, "confidence"),
        (([[True]], [[0.9]], [True]), {"target": 1.0}, ValueError, "target"),
        (([[True]], [[0.9]], [True]), {"risk": "low"}, TypeError, "risk"),
        ((True, [[0.9]], [True]), {}, TypeError, "passed must be a list"),
        (([True], [[0.9]], [True]), {}, TypeError, "passed"),
    ],
)
def test_bad_input_is_a_typed_error_saying_what_to_fix(
    args: tuple[object, ...], kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        fit_cascade(*args, **kwargs)  # type: ignore[arg-type]


def test_the_callers_lists_are_not_changed() -> None:
    passed = [[True, None]] * 30
    confidence = [[0.2, None]] * 30
    labels = [True] * 30
    before = copy.deepcopy((passed, confidence, labels))
    fit_cascade(passed, confidence, labels)
    assert (passed, confidence, labels) == before


def test_the_grid_runs_from_one_to_one_half() -> None:
    assert GRID[0] == 1.0
    assert GRID[-1] == 0.5
    assert len(GRID) == 51
    assert all(a > b for a, b in itertools.pairwise(GRID))


@settings(deadline=None, max_examples=80)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.one_of(
                    st.none(),
                    st.tuples(st.booleans(), st.floats(0.5, 1.0) | st.sampled_from(GRID)),
                ),
                min_size=3,
                max_size=3,
            ),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_counts_per_threshold_are_those_of_the_cascade_at_each_threshold(
    items: list[tuple[list[tuple[bool, float] | None], bool]],
) -> None:
    rows = [row for row, _ in items]
    labels = [label for _, label in items]
    kept, errors = grid_counts(rows, labels)
    for g, t in enumerate(GRID):
        decided = []  # the cascade at threshold t, level by level
        for row, label in items:
            level = next((x for x in row if x is not None and x[1] >= t), None)
            if level is not None:
                decided.append(level[0] != label)
        assert (kept[g], errors[g]) == (len(decided), sum(decided)), t


def test_a_cheap_level_surer_than_it_is_right_is_left_out() -> None:
    # the cheap level says 0.99 and is wrong half the time; the strong one is always right
    passed = [[True, True], [False, True]] * 100
    fit = fit_cascade(passed, [[0.99, 0.95]] * 200, [True] * 200)
    assert fit.thresholds == (None, 0.5)  # the path of the strong level alone
    assert fit.shares == (0.0, 1.0, 0.0)
    assert fit.observed == 1.0


def test_each_path_has_its_share_of_the_risk() -> None:
    # 25 items, all right: enough for one level at 0.1 (22), not for two paths at 0.05 (29)
    assert fit_cascade([[True]] * 25, [[0.99]] * 25, [True] * 25).certified
    two = fit_cascade([[True, True]] * 25, [[0.99, 0.99]] * 25, [True] * 25)
    assert not two.certified


def test_with_costs_the_path_whose_verdicts_cost_least_is_kept() -> None:
    # the cheap level is right and 0.95 sure on half the items, 0.6 sure and half wrong on
    # the rest; the strong level is right and 0.99 sure on all: both paths keep every item
    passed = [[True, True]] * 100 + [[True, True], [False, True]] * 50
    confidence = [[0.95, 0.99]] * 100 + [[0.6, 0.99]] * 100
    labels = [True] * 200
    assert fit_cascade(passed, confidence, labels).thresholds == (0.61, 0.61)  # a tie
    # cheap at 1, strong at 10: (100 * 1 + 100 * 11) / 200 = 6 a verdict, against 10
    assert fit_cascade(passed, confidence, labels, costs=[1, 10]).thresholds == (0.61, 0.61)
    # cheap at 9: (100 * 9 + 100 * 19) / 200 = 14 a verdict: the strong level alone is cheaper
    assert fit_cascade(passed, confidence, labels, costs=[9, 10]).thresholds == (None, 0.5)


@pytest.mark.parametrize(
    ("costs", "error", "match"),
    [
        ([1], ValueError, "one entry per level"),
        ([1, -1], ValueError, "costs"),
        (5, TypeError, "list"),
    ],
)
def test_bad_costs_are_a_typed_error(costs: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        fit_cascade([[True, True]] * 30, [[0.9, 0.9]] * 30, [True] * 30, costs=costs)  # type: ignore[arg-type]
