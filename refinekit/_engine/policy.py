"""What a judging failure comes to: the one place every decorator and judge applies a policy.

A judge can fail to judge (`JudgeUnavailable`: an outage; `JudgeReplyError`: a reply that is
not a verdict). `judge_failure` turns such a failure and a policy into an `unjudged` verdict
or the error raised:

    ===================  ===========================================================
    the failure          what it comes to
    ===================  ===========================================================
    JudgeMisconfigured   raised, whatever the policy (a bad key, model or request must
                         never silently turn judging off)
    not a JudgeError     raised: a bug in a rule check or a code criterion
    fail_closed already  raised: a `"fail_closed"` policy decided it, so no outer policy
                         lets it through
    policy "fail_open"   `Verdict.unjudged("<Type>: <message>")`: never counted as passed
    policy "fail_closed" raised, marked `fail_closed` (a copy: the original is left alone)
    policy None          raised as it is, for an outer policy to decide
    ===================  ===========================================================

Who applies which policy:

- a judge (`refinekit.judges`) applies its own `judge_error_policy` (None by default);
- `@retry_on_low_quality` applies its `judge_error_policy`: an unjudged answer is returned;
- `@guarded` and `@reviewed` take every failure as an unjudged verdict (`"fail_open"` here)
  and then decide what an unjudged verdict means for them: `@guarded` blocks it or publishes
  it by its own `judge_error_policy`, `@reviewed` rejects the draft (reason `judge_error`);
- `refinekit eval` records every judge failure but a misconfiguration as an unavailable case
  (never counted as passed), one a judge's own `"fail_closed"` policy raised too: no answer
  goes through there (`refinekit.eval._judging`).

The checks of the policy arguments (and of every loop's cap) are here too, so each decorator
refuses a bad value with the same words.
"""

from __future__ import annotations

from typing import Any, Literal

from .._core.errors import JudgeReplyError, JudgeUnavailable, failed_closed
from .._core.types import Verdict

__all__ = [
    "JudgeErrorPolicy",
    "OnInconclusive",
    "check_budget",
    "check_on_inconclusive",
    "check_policy",
    "judge_failure",
]

JudgeErrorPolicy = Literal["fail_open", "fail_closed"]
"""What a judging failure does: `"fail_open"` lets the answer through unjudged, `"fail_closed"`
raises (in `@guarded`: blocks)."""

OnInconclusive = Literal["fail", "accept"]
"""What an `inconclusive` verdict does: `"fail"` counts it as a rejection, `"accept"` lets the
answer through unjudged."""


def judge_failure(
    error: BaseException, policy: JudgeErrorPolicy | None, **metadata: Any
) -> Verdict:
    """What a judge's failure comes to under `policy`: an `unjudged` verdict, or raised.

    Call it from an `except` clause around a judge or evaluator call.

    Args:
        error: What the judge (or evaluator) raised.
        policy: `"fail_open"`, `"fail_closed"`, or None to leave it to an outer policy.
        **metadata: The unjudged verdict's metadata (e.g. `judge=`, `screen=`).

    Returns:
        `Verdict.unjudged("<Type>: <message>", **metadata)`, when `policy` is `"fail_open"`
        and `error` is a `JudgeUnavailable` or `JudgeReplyError` no policy closed before.

    Raises:
        BaseException: `error` itself (or, under `"fail_closed"`, a copy of it marked
            `fail_closed`) in every other case: see the table in this module's docstring.
    """
    # A JudgeMisconfigured is neither of the two: it is raised here, as any other error is.
    if not isinstance(error, (JudgeUnavailable, JudgeReplyError)) or error.fail_closed:
        raise error
    if policy is None:
        raise error
    if policy == "fail_closed":
        raise failed_closed(error)
    return Verdict.unjudged(f"{type(error).__name__}: {error}", **metadata)


def check_budget(name: str, value: object, limit: int) -> int:
    """`value` when it is an int from 0 to `limit`; else `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ValueError(
            f"{name} must be an int from 0 to {limit}, got {value!r}: every refinekit loop is "
            "bounded, there is no 'retry until it passes'"
        )
    return value


def check_policy(policy: object) -> None:
    """`ValueError` unless `policy` is `"fail_open"` or `"fail_closed"`."""
    if policy not in ("fail_open", "fail_closed"):
        raise ValueError(f"judge_error_policy must be 'fail_open' or 'fail_closed', got {policy!r}")


def check_on_inconclusive(value: object) -> None:
    """`ValueError` unless `value` is `"fail"` or `"accept"`."""
    if value not in ("fail", "accept"):
        raise ValueError(f"on_inconclusive must be 'fail' or 'accept', got {value!r}")
