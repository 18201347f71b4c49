"""The figures of `refinekit calibrate`, on small examples computed by hand."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refinekit.eval._calibration import calibrate, recommend_thresholds
from refinekit.eval._stats import ReliabilityBin, wilson_interval
from refinekit.eval._store import CaseOutcome, CaseRecord
from refinekit.judges import Criterion

T, F = True, False  # the people's label: pass, fail


# --- recommend_thresholds ------------------------------------------------------------------------


def test_thresholds_widest_regions_within_the_target() -> None:
    # sorted: .95 T, .9 F, .85 T, .6 T | .3 F, .1 F
    # pass side, at 25%: >= .6 holds (1 wrong of 4); >= .3 has 2 of 5, >= .1 3 of 6: too many
    # fail side, below .6: <= .3 holds (0 of 2)
    t = recommend_thresholds([0.95, 0.85, 0.3, 0.1, 0.6, 0.9], [T, T, F, F, T, F], 0.25)
    assert (t.pass_at, t.passes, t.wrong_passes) == (0.6, 4, 1)
    assert (t.fail_at, t.fails, t.wrong_fails) == (0.3, 2, 0)
    assert t.uncertain == 0
    assert t.target_error == 0.25
    assert t.pass_error_upper == wilson_interval(1, 4)[1]
    assert t.fail_error_upper == wilson_interval(0, 2)[1]


def test_thresholds_leave_the_middle_uncertain() -> None:
    probabilities = [0.95, 0.90, 0.85, 0.70, 0.45, 0.35, 0.15, 0.05]
    labels = [T, T, F, T, F, T, F, F]
    # at 20%: >= .85 already has 1 wrong of 3; <= .35 has 1 of 3; so .9 and .15
    t = recommend_thresholds(probabilities, labels, 0.2)
    assert (t.pass_at, t.passes, t.wrong_passes) == (0.9, 2, 0)
    assert (t.fail_at, t.fails, t.wrong_fails) == (0.15, 2, 0)
    assert t.uncertain == 4
    # at 25%: >= .7 has 1 of 4, <= .45 has 1 of 4: nothing left in between
    t = recommend_thresholds(probabilities, labels, 0.25)
    assert (t.pass_at, t.passes, t.fail_at, t.fails, t.uncertain) == (0.7, 4, 0.45, 4, 0)


def test_zero_error_on_a_perfectly_separating_judge() -> None:
    t = recommend_thresholds([0.9, 0.8, 0.3, 0.2], [T, T, F, F], 0.0)
    assert (t.pass_at, t.passes, t.wrong_passes) == (0.8, 2, 0)
    assert (t.fail_at, t.fails, t.wrong_fails) == (0.3, 2, 0)
    assert t.uncertain == 0


def test_no_threshold_when_no_region_holds() -> None:
    # the most confident pass was failed by people; the least confident was passed
    t = recommend_thresholds([0.9, 0.2, 0.1], [F, F, T], 0.1)
    assert (t.pass_at, t.passes, t.wrong_passes, t.pass_error_upper) == (None, 0, 0, None)
    assert (t.fail_at, t.fails, t.wrong_fails, t.fail_error_upper) == (None, 0, 0, None)
    assert t.uncertain == 3


def test_equal_probabilities_fall_on_one_side() -> None:
    t = recommend_thresholds([0.7, 0.7, 0.7, 0.2], [T, F, T, F], 0.34)
    assert (t.pass_at, t.passes, t.wrong_passes) == (0.7, 3, 1)
    assert (t.fail_at, t.fails) == (0.2, 1)
    # a fail threshold never reaches the pass threshold
    t = recommend_thresholds([0.5, 0.5], [T, F], 0.5)
    assert (t.pass_at, t.passes, t.fail_at, t.fails, t.uncertain) == (0.5, 2, None, 0, 0)


@pytest.mark.parametrize(
    ("probabilities", "labels", "target", "message"),
    [
        ([0.5], [T, F], 0.1, "differ in length"),
        ([0.5], [T], 1.0, "from 0 to below 1"),
        ([0.5], [T], -0.1, "from 0 to below 1"),
    ],
)
def test_thresholds_refuse_bad_input(
    probabilities: list[float], labels: list[bool], target: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        recommend_thresholds(probabilities, labels, target)


def test_no_items_no_thresholds() -> None:
    t = recommend_thresholds([], [], 0.1)
    assert (t.pass_at, t.fail_at, t.uncertain) == (None, None, 0)


items = st.lists(
    st.tuples(st.sampled_from([i / 20 for i in range(21)]), st.booleans()), max_size=30
)


@settings(max_examples=150, deadline=None)
@given(items=items, target=st.sampled_from([0.0, 0.05, 0.1, 0.2, 1 / 3, 0.5, 0.9]))
def test_thresholds_keep_each_side_within_the_target_and_are_the_widest(
    items: list[tuple[float, bool]], target: float
) -> None:
    probabilities = [p for p, _ in items]
    labels = [label for _, label in items]
    t = recommend_thresholds(probabilities, labels, target)

    def side(chosen: list[bool], wrong_label: bool) -> tuple[int, int]:
        return len(chosen), sum(label == wrong_label for label in chosen)

    def passing(threshold: float) -> tuple[int, int]:
        return side([lb for p, lb in items if p >= threshold], False)

    def failing(threshold: float) -> tuple[int, int]:
        return side([lb for p, lb in items if p <= threshold], True)

    def holds(n: int, wrong: int) -> bool:
        return wrong <= target * n

    assert t.passes + t.fails + t.uncertain == len(items)
    if t.pass_at is None:
        assert (t.passes, t.wrong_passes) == (0, 0)
        assert not any(holds(*passing(p)) for p in probabilities)
    else:
        assert (t.passes, t.wrong_passes) == passing(t.pass_at)
        assert holds(t.passes, t.wrong_passes)
        assert not any(holds(*passing(p)) for p in probabilities if p < t.pass_at)
    below = [p for p in probabilities if t.pass_at is None or p < t.pass_at]
    if t.fail_at is None:
        assert (t.fails, t.wrong_fails) == (0, 0)
        assert not any(holds(*failing(p)) for p in below)
    else:
        assert t.fail_at in below
        assert (t.fails, t.wrong_fails) == failing(t.fail_at)
        assert holds(t.fails, t.wrong_fails)
        assert not any(holds(*failing(p)) for p in below if p > t.fail_at)
    if t.pass_at is not None and t.fail_at is not None:  # usable as a criterion as it is
        Criterion("c", "q?", pass_at=t.pass_at, fail_at=t.fail_at)


# --- calibrate ------------------------------------------------------------------------------------


def case(
    n: int, outcome: CaseOutcome, label: str | None, probability: float | None = None
) -> CaseRecord:
    return CaseRecord(
        key=f"k{n}",
        position=n,
        question=f"q{n}",
        row={},
        outcome=outcome,
        label=label,
        probability=probability,
    )


def test_calibrate_counts_agreement_with_failures_as_the_positive_class() -> None:
    cases = [
        case(1, "passed", "pass", 0.9),
        case(2, "passed", "fail", 0.7),  # people failed what the judge passed
        case(3, "failed", "pass", 0.4),  # the judge failed what people passed
        case(4, "failed", "fail", 0.2),
        case(5, "failed", "fail", 0.1),
        case(6, "unavailable", "pass"),
        case(7, "inconclusive", "fail"),
        case(8, "passed", None, 0.9),  # no label: not a calibration item
    ]
    c = calibrate(cases, target_error=0.1, bins=2)

    assert (c.items, c.unavailable, c.inconclusive) == (5, 1, 1)
    assert (c.both_pass, c.human_fail_only, c.judge_fail_only, c.both_fail) == (1, 1, 1, 2)
    assert c.accuracy == 3 / 5
    assert c.precision_fail == 2 / 3  # of the judge's 3 failures, people failed 2
    assert c.recall_fail == 2 / 3  # of people's 3 failures, the judge caught 2
    # p_o = 3/5; judge passes 2/5, people pass 2/5: p_e = 4/25 + 9/25 = 13/25
    assert c.kappa == pytest.approx((3 / 5 - 13 / 25) / (1 - 13 / 25))
    assert c.with_probability == 5
    # bins [0, .5): .4 T, .2 F, .1 F; [.5, 1]: .9 T, .7 F
    assert c.reliability == [
        ReliabilityBin(0.0, 0.5, 3, pytest.approx(0.7 / 3), pytest.approx(1 / 3)),  # type: ignore[arg-type]
        ReliabilityBin(0.5, 1.0, 2, pytest.approx(0.8), 0.5),  # type: ignore[arg-type]
    ]
    assert c.ece == pytest.approx(3 / 5 * abs(1 / 3 - 0.7 / 3) + 2 / 5 * 0.3)
    assert c.thresholds == recommend_thresholds([0.9, 0.7, 0.4, 0.2, 0.1], [T, F, T, F, F], 0.1)
    json.dumps(c.as_dict())  # what the run store keeps


def test_calibrate_without_failures_or_probabilities() -> None:
    all_pass = calibrate(
        [case(1, "passed", "pass"), case(2, "passed", "fail", 0.8)], target_error=0.1
    )
    assert all_pass.precision_fail is None  # the judge failed nothing
    assert all_pass.recall_fail == 0.0
    assert all_pass.with_probability == 1
    assert (all_pass.reliability, all_pass.ece, all_pass.thresholds) == (None, None, None)

    nothing_failed = calibrate([case(1, "failed", "pass", 0.1)], target_error=0.1)
    assert nothing_failed.recall_fail is None  # people failed nothing
    assert nothing_failed.precision_fail == 0.0
    assert nothing_failed.kappa == 0.0  # (0 - 0) / (1 - 0)

    none_judged = calibrate([case(1, "unavailable", "pass")], target_error=0.1)
    assert (none_judged.items, none_judged.accuracy, none_judged.kappa) == (0, None, None)
    assert none_judged.thresholds is None
