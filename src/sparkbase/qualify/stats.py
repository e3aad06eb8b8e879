"""The A/B/A comparison's statistics: a Welch interval and a verdict judged against drift.

Candidate (A), previous release (B), candidate again (A') in one session. Per request the
runner measures one figure (decode throughput in tokens/s, or time to first token in s);
here those samples become a verdict:

- **drift**: A against A'. When the 95% interval of mean(A) - mean(A') excludes zero and
  the drift is more than `UNSTABLE_FRACTION` of the candidate's mean, the candidate did not
  agree with itself within the session: the verdict is `unstable`, and no comparison with B
  is made. A drift that is real but small stays the bar below: a 95% test alone would void
  one run in twenty of an unchanged build for a difference of a fraction of a percent.
- **difference**: A and A' pooled against B, with its 95% interval (Welch: unequal
  variances, Welch-Satterthwaite degrees of freedom).
- **the bar**: the drift actually seen, |mean(A) - mean(A')|. The candidate is `better`
  (or `worse`) only when the whole interval of the difference lies beyond the bar on that
  side; an interval that holds zero, or reaches into the bar, is `no difference`.

Why a few lines here and not scipy: the sums are the textbook's and can be checked by hand
(tests/unit/test_qualify_stats.py holds worked cases), and the only thing the standard
library lacks is Student's t quantile, which comes from the two-sided 95% table every
statistics text prints (`T95`), read at the next lower tabulated degrees of freedom (a
wider, conservative interval). scipy would add ~100 MB to the install a site puts on its
management host for one number.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

#: Student's t, two-sided 95% (0.975 quantile), by degrees of freedom (any statistics text)
T95: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}
#: the normal quantile, for more degrees of freedom than the table holds
Z95 = 1.960
#: a drift at most this fraction of the candidate's mean never voids a run (it is the bar).
#: sparkbase's default, not a site value: the site's notes say their comparison harness
#: alone moves results by ~10%, so a few percent of drift inside one session is the noise
#: this gate has to live with, not a broken session
UNSTABLE_FRACTION = 0.05
#: fewest samples per run: below this no interval is computed
MIN_SAMPLES = 2


class Verdict(StrEnum):
    """What the A/B/A comparison concludes about the candidate."""

    BETTER = "better"
    WORSE = "worse"
    NO_DIFFERENCE = "no difference"
    UNSTABLE = "unstable"


def t95(degrees_of_freedom: float) -> float:
    """Two-sided 95% t quantile at the next lower tabulated degrees of freedom."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {degrees_of_freedom}")
    if degrees_of_freedom > max(T95):
        return Z95
    tabulated = max(df for df in T95 if df <= degrees_of_freedom)
    return T95[tabulated]


@dataclass(frozen=True)
class Interval:
    """A difference of means with its 95% interval."""

    difference: float
    low: float
    high: float
    degrees_of_freedom: float

    def holds_zero(self) -> bool:
        """Whether zero lies in the interval (ends included)."""
        return self.low <= 0.0 <= self.high


def welch_interval(first: Sequence[float], second: Sequence[float]) -> Interval:
    """mean(first) - mean(second) with Welch's 95% interval."""
    for name, sample in (("first", first), ("second", second)):
        if len(sample) < MIN_SAMPLES:
            raise ValueError(f"{name} run has {len(sample)} samples; at least {MIN_SAMPLES} are needed")
    mean_1, mean_2 = statistics.fmean(first), statistics.fmean(second)
    share_1 = statistics.variance(first) / len(first)
    share_2 = statistics.variance(second) / len(second)
    spread = share_1 + share_2
    difference = mean_1 - mean_2
    if spread == 0.0:
        return Interval(difference, difference, difference, math.inf)
    degrees = spread**2 / (share_1**2 / (len(first) - 1) + share_2**2 / (len(second) - 1))
    half = t95(degrees) * math.sqrt(spread)
    return Interval(difference, difference - half, difference + half, degrees)


@dataclass(frozen=True)
class Comparison:
    """One figure compared across A, B and A'."""

    figure: str
    higher_is_better: bool
    drift: Interval  # A - A'
    difference: Interval  # (A + A') - B
    verdict: Verdict

    @property
    def bar(self) -> float:
        """The drift seen between the candidate's two runs (its own noise)."""
        return abs(self.drift.difference)


def compare(figure: str, candidate: Sequence[float], previous: Sequence[float],
            candidate_again: Sequence[float], higher_is_better: bool = True) -> Comparison:
    """The verdict for one figure (see the module text for the rules)."""
    drift = welch_interval(candidate, candidate_again)
    difference = welch_interval([*candidate, *candidate_again], previous)
    bar = abs(drift.difference)
    scale = abs(statistics.fmean([*candidate, *candidate_again]))
    if not drift.holds_zero() and bar > UNSTABLE_FRACTION * scale:
        verdict = Verdict.UNSTABLE
    elif difference.low > bar:
        verdict = Verdict.BETTER if higher_is_better else Verdict.WORSE
    elif difference.high < -bar:
        verdict = Verdict.WORSE if higher_is_better else Verdict.BETTER
    else:
        verdict = Verdict.NO_DIFFERENCE
    return Comparison(figure, higher_is_better, drift, difference, verdict)
