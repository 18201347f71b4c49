"""Statistics for evaluation runs: confidence bounds on pass rates and friends."""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["wilson_interval"]


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
