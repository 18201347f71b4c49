"""What each decorator may end with, under a script of steps: its documented semantics as a
small simulator.

`predict_*` return every (outcome, calls) a job's script allows: the outcome is "value" (or
"value:passed", "value:unjudged", "value:best", "value:shadow") or an exception's name
("AnswerRejected:<reason>" for `@reviewed`), the calls a tuple of model calls by role. A job
that ends otherwise, or makes other calls, broke a promise.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence

import openai
from faultmix import Step

from refinekit import (
    AnswerRejected,
    JsonParseError,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    LowQualityAnswer,
    ResponseValidationError,
)

# --- what each decorator may end with ------------------------------------------------------------

PASS_THROUGH: tuple[type[BaseException], ...] = (openai.APIError, json.JSONDecodeError)
"""The user's own client's errors: they pass through every decorator unwrapped."""

ALLOWED: dict[str, tuple[type[BaseException], ...]] = {
    "self_correct": (JsonParseError, ResponseValidationError, *PASS_THROUGH),
    "retry_on_low_quality": (
        LowQualityAnswer,
        JudgeUnavailable,
        JudgeReplyError,
        JudgeMisconfigured,
        *PASS_THROUGH,
    ),
    "reviewed": (
        AnswerRejected,
        JudgeUnavailable,
        JudgeReplyError,
        JudgeMisconfigured,
        openai.APIError,
        json.JSONDecodeError,
    ),
}


def is_pass_through(exc: BaseException) -> bool:
    """An exception of the user's client itself (`openai`, or its undecoded JSON)."""
    return type(exc).__module__.startswith("openai") or type(exc) is json.JSONDecodeError


# An outcome: ("value" | "value:passed" | "value:unjudged" | ... | an exception's name, calls)
Outcome = tuple[str, tuple[int, ...]]


def _combine(results: Iterable[frozenset[str]]) -> frozenset[str]:
    """The possible results of one evaluation made of several requests (a criteria judge).

    A request left to `judge_timeout` holds the whole evaluation until the timer ends it; a
    misconfiguration decides over an outage, an outage over an unreadable reply.
    """
    possible = set()
    for picked in itertools.product(*results):
        for worst in ("timeout", "misconfigured", "unavailable", "reply_error", "fail"):
            if worst in picked:
                possible.add(worst)
                break
        else:
            possible.add("pass")
    return frozenset(possible)


def _judge_failure(result: str, judge_policy: str | None, outer_policy: str) -> str | None:
    """What a judging failure becomes under the policies: an exception name, or None (unjudged)."""
    if result == "misconfigured":
        return "JudgeMisconfigured"
    error = "JudgeUnavailable" if result in ("unavailable", "timeout") else "JudgeReplyError"
    policy = judge_policy or outer_policy
    return error if policy == "fail_closed" else None


def predict_self_correct(steps: Sequence[Step], max_corrections: int) -> set[Outcome]:
    """Every (outcome, (model calls,)) a @self_correct job may end with."""
    outcomes: set[Outcome] = set()
    for k, step in enumerate(steps[: max_corrections + 1]):
        calls = (k + 1,)
        if "raise" in step.result:
            assert step.raises is not None
            outcomes.add((step.raises.__name__, calls))
            return outcomes
        if "valid" in step.result:
            outcomes.add(("value", calls))
        invalid = step.result - {"valid"}
        if not invalid:
            return outcomes
        if k == max_corrections:
            for r in invalid:
                name = "JsonParseError" if r == "parse" else "ResponseValidationError"
                outcomes.add((name, calls))
    return outcomes


def predict_retry(
    answers: Sequence[Step],
    streams: Sequence[Sequence[Step]],
    max_retries: int,
    outer_policy: str,
    judge_policy: str | None,
    on_exhausted: str,
) -> set[Outcome]:
    """Every (outcome, (answer calls, judge calls)) a @retry_on_low_quality job may end with."""
    outcomes: set[Outcome] = set()
    width = len(streams)

    def attempt(a: int) -> None:  # a: 0-based attempt
        calls = (a + 1, a * width)
        step = answers[a]
        if "raise" in step.result:
            assert step.raises is not None
            outcomes.add((step.raises.__name__, calls))
            return
        judged = (a + 1, (a + 1) * width)
        for result in _combine(stream[a].result for stream in streams):
            if result == "pass":
                outcomes.add(("value:passed", judged))
            elif result == "fail":
                if a < max_retries:
                    attempt(a + 1)
                elif on_exhausted == "raise":
                    outcomes.add(("LowQualityAnswer", judged))
                else:
                    outcomes.add(("value:best", judged))
            else:
                failure = _judge_failure(result, judge_policy, outer_policy)
                outcomes.add((failure or "value:unjudged", judged))

    attempt(0)
    return outcomes


def predict_reviewed(
    answer: Step,
    streams: Sequence[Sequence[Step]],
    revisions: Sequence[Step],
    mode: str,
    max_revisions: int,
    judge_policy: str | None,
) -> set[Outcome]:
    """Every (outcome, (answer calls, judge calls, reviser calls)) a @reviewed job may end with."""
    outcomes: set[Outcome] = set()
    width = len(streams)
    if "raise" in answer.result:
        assert answer.raises is not None
        return {(answer.raises.__name__, (1, 0, 0))}

    def draft(d: int) -> None:  # d: 0-based draft; d revisions were made before it
        calls = (1, (d + 1) * width, d)
        for result in _combine(stream[d].result for stream in streams):
            if result in ("misconfigured", "unavailable", "timeout", "reply_error"):
                failure = _judge_failure(result, judge_policy, "fail_open")
                if failure is not None:
                    outcomes.add((failure, calls))
                elif mode == "shadow":
                    outcomes.add(("value:shadow", calls))
                else:
                    reason = "judge_timeout" if result == "timeout" else "judge_error"
                    outcomes.add((f"AnswerRejected:{reason}", calls))
            elif mode == "shadow":
                outcomes.add(("value:shadow", calls))
            elif result == "pass":
                outcomes.add(("value:passed", calls))
            elif d >= max_revisions:
                outcomes.add(("AnswerRejected:rejected", calls))
            else:
                revise(d)

    def revise(d: int) -> None:
        calls = (1, (d + 1) * width, d + 1)
        step = revisions[d]
        for result in step.result:
            if result == "text":
                draft(d + 1)
            elif result == "raise":
                assert step.raises is not None
                outcomes.add((step.raises.__name__, calls))
            else:
                name = {"tools": "revision_used_tools"}.get(result, result)
                outcomes.add((f"AnswerRejected:{name}", calls))

    draft(0)
    return outcomes


def explain_violations(
    violations: Sequence[str], mix: str, seed: int, selection: str, figures: str
) -> str:
    """A seeded mix's failure message: its first 40 violations, how to replay it, its figures."""
    shown = "\n".join(f"- {v}" for v in violations[:40])
    more = len(violations) - 40
    return (
        f"{len(violations)} violation(s) in the {mix} of seed {seed}; replay with "
        f"RK_FAULT_SEED={seed} python -m pytest -m reliability {selection}\n{shown}"
        + (f"\n... and {more} more" if more > 0 else "")
        + f"\n\n{figures}"
    )
