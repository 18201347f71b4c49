"""The base of the model judges: its error policy, and reading its replies.

A judge's call and its prompt pieces live apart: `_client` (the judge model), `_calls` (its
requests as flow commands), `refinekit._engine.prompts` (delimiters, evidence text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .._core.errors import BudgetExceeded, JudgeError, JudgeMisconfigured, JudgeReplyError
from .._core.types import EvaluationRequest, Verdict
from .._engine.evaluators import FlowEvaluator
from .._engine.flow import Flow
from .._engine.policy import JudgeErrorPolicy, check_policy, judge_failure
from ._calls import REPLY_CHARS
from ._client import JudgeModel

__all__ = ["Judge", "JudgeErrorPolicy", "first_error", "first_word", "yes_no"]


def first_word(text: str) -> str:
    """The reply's first word, lower case, without punctuation ("Yes, it is." -> "yes")."""
    match = re.search(r"[A-Za-z]+", text)
    return match.group(0).lower() if match else ""


def yes_no(judge: JudgeModel, text: str) -> bool:
    """Read a yes/no reply by its first word; anything else is a `JudgeReplyError`."""
    word = first_word(text)
    if word in ("yes", "no"):
        return word == "yes"
    raise JudgeReplyError(
        f"judge model {judge.model!r} did not answer yes or no: {text[:REPLY_CHARS]!r}",
        model=judge.model,
        reply=text[:REPLY_CHARS],
    )


class Judge(FlowEvaluator):
    """Base of the model judges: an evaluator (`evaluate`, `aevaluate`) with an error policy.

    `judge_error_policy=None` (the default) raises judging failures for the caller's policy
    (`@retry_on_low_quality`'s `judge_error_policy`) to decide; `"fail_open"` makes the judge
    itself return an unjudged verdict on `JudgeUnavailable` and `JudgeReplyError`;
    `"fail_closed"` raises them past any outer policy. `JudgeMisconfigured` always raises.

    `expected_calls` is the model calls one verdict takes (at most, without instructor's
    retries): what a panel runs its cheapest members first by.
    """

    expected_calls: float = 1.0

    def __init__(
        self, judge_model: JudgeModel, judge_error_policy: JudgeErrorPolicy | None
    ) -> None:
        if not isinstance(judge_model, JudgeModel):
            raise TypeError(
                "a judge takes a refinekit.judges.JudgeModel as its first argument, "
                f"got {type(judge_model).__name__}"
            )
        if judge_error_policy is not None:
            check_policy(judge_error_policy)
        self.judge_model = judge_model
        self.judge_error_policy = judge_error_policy

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        raise NotImplementedError

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        # Evidence that cannot support a judgement gets an inconclusive verdict, not a guess,
        # and costs no model call.
        if request.trace_issues:
            return Verdict.inconclusive(
                "INCOMPLETE_JUDGING_EVIDENCE",
                judge=self.name,
                trace_issues=list(request.trace_issues),
            )
        if request.max_chars is not None:
            size = _serialised_chars(request)
            if size > request.max_chars:
                return Verdict.inconclusive(
                    "JUDGE_STATE_LIMIT", judge=self.name, chars=size, max_chars=request.max_chars
                )
        try:
            verdict = yield from self._judge(request)
        except JudgeError as exc:
            return judge_failure(exc, self.judge_error_policy, judge=self.name)
        return verdict


def _serialised_chars(request: EvaluationRequest) -> int:
    """The length of the request as compact JSON: what its `max_chars` limits.

    Written by `json` from pydantic's JSON-mode dump, not by pydantic's encoder, which refuses
    a lone surrogate (the prompt carries it as U+FFFD, one character for one).
    """
    return len(
        json.dumps(request.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
    )


def first_error(results: Sequence[Any]) -> Exception | None:
    """The failure that decides, among gathered results.

    A budget's stop first (it must reach the caller: a judge outage beside it would be let
    through unjudged by `fail_open`, and the stop lost), then a misconfiguration, then the
    first other failure.
    """
    errors = [r for r in results if isinstance(r, BaseException)]
    for kind in (BudgetExceeded, JudgeMisconfigured):
        for error in errors:
            if isinstance(error, kind):
                return error
    for error in errors:
        if isinstance(error, Exception):
            return error
    if errors:
        raise errors[0]
    return None
