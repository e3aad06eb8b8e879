"""The A/B/A statistics against cases worked by hand (the sums are in each docstring)."""

from __future__ import annotations

import math

import pytest

from sparkbase.qualify.stats import T95, Verdict, compare, t95, welch_interval


def test_welch_interval_worked_case() -> None:
    """first 10,12,14: mean 12, s² 4, s²/n 4/3; second 8,9,10: mean 9, s² 1, s²/n 1/3.
    spread 5/3, df = (5/3)² / ((4/3)²/2 + (1/3)²/2) = 2.94 -> t at df 2 = 4.303;
    half width 4.303 * sqrt(5/3) = 5.555; interval 3 ± 5.555."""
    interval = welch_interval([10, 12, 14], [8, 9, 10])
    assert interval.difference == pytest.approx(3.0)
    assert interval.degrees_of_freedom == pytest.approx(2.941, abs=1e-3)
    assert interval.low == pytest.approx(3 - 5.555, abs=1e-3)
    assert interval.high == pytest.approx(3 + 5.555, abs=1e-3)
    assert interval.holds_zero()


def test_t_quantile_reads_the_next_lower_row_and_the_normal_beyond() -> None:
    assert t95(2.94) == T95[2]
    assert t95(35) == T95[30]
    assert t95(500) == 1.960
    with pytest.raises(ValueError):
        t95(0.5)


def test_too_few_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        welch_interval([1.0], [1.0, 2.0])


def test_identical_runs_have_a_zero_width_interval() -> None:
    interval = welch_interval([5, 5, 5], [5, 5, 5])
    assert (interval.low, interval.high) == (0, 0)
    assert math.isinf(interval.degrees_of_freedom)


def test_a_clearly_faster_candidate_is_better() -> None:
    result = compare("decode tok/s", [100, 101, 99, 100], [90, 91, 89, 90], [100, 99, 101, 100])
    assert result.verdict is Verdict.BETTER
    assert result.bar == pytest.approx(0.0)


def test_a_slower_candidate_is_worse() -> None:
    result = compare("decode tok/s", [80, 81, 79, 80], [90, 91, 89, 90], [80, 79, 81, 80])
    assert result.verdict is Verdict.WORSE


def test_for_time_to_first_token_lower_is_better() -> None:
    result = compare("ttft s", [0.10, 0.11, 0.09], [0.20, 0.21, 0.19], [0.10, 0.09, 0.11],
                     higher_is_better=False)
    assert result.verdict is Verdict.BETTER


def test_a_candidate_that_disagrees_with_itself_is_unstable() -> None:
    """A 100 ± 0.1 and A' 90 ± 0.1: the drift's interval is far from zero."""
    result = compare("decode tok/s", [100, 100.1, 99.9], [50, 50.1, 49.9], [90, 90.1, 89.9])
    assert result.verdict is Verdict.UNSTABLE


def test_a_real_but_small_drift_is_the_bar_not_a_void_run() -> None:
    """A 100 ± 0.1 and A' 99 ± 0.1: the drift's interval excludes zero, but 1 is 1% of the
    mean (under UNSTABLE_FRACTION): the run stands, with the drift as its bar; B at 90 is
    10 below, far beyond the bar."""
    result = compare("decode tok/s", [100, 100.1, 99.9], [90, 90.1, 89.9], [99, 99.1, 98.9])
    assert not result.drift.holds_zero()
    assert result.bar == pytest.approx(1.0)
    assert result.verdict is Verdict.BETTER


def test_a_difference_inside_the_drift_is_no_difference() -> None:
    """A 100,102,98,100 (mean 100) and A' 101,103,99,101 (mean 101): drift -1, its interval
    (s²/n 2/3 each, df 6, t 2.447) is -1 ± 2.83, holds zero; bar 1. Pooled A: mean 100.5,
    s² 18/7; B 99 four times: difference 1.5 ± 2.365 * sqrt(18/56) = 1.5 ± 1.341, so
    [0.159, 2.841]: zero is outside but the low end is inside the bar."""
    result = compare("decode tok/s", [100, 102, 98, 100], [99, 99, 99, 99], [101, 103, 99, 101])
    assert result.drift.holds_zero()
    assert result.bar == pytest.approx(1.0)
    assert result.difference.low == pytest.approx(0.159, abs=1e-3)
    assert result.verdict is Verdict.NO_DIFFERENCE


def test_an_unchanged_build_is_no_difference() -> None:
    result = compare("decode tok/s", [100, 102, 98, 100], [101, 99, 100, 100], [99, 101, 100, 100])
    assert result.verdict is Verdict.NO_DIFFERENCE
