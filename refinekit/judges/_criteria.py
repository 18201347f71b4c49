"""Named yes/no criteria, with the probability of each and where it came from."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._core.errors import JudgeMisconfigured, JudgeReplyError
from .._core.types import CriterionResult, EvaluationRequest, Outcome, Verdict
from .._engine.evaluators import to_verdict
from .._engine.flow import Flow, Gather
from .._engine.policy import JudgeErrorPolicy
from .._engine.prompts import DATA_RULE, context_text, delimit, tool_calls_block
from .._engine.reserve import Tickets, judge_calls
from .._providers.replies import get
from ._base import Judge, first_error, yes_no
from ._cache import cached
from ._calls import Complete, reply_text_of
from ._client import JudgeModel

CodeCheck = Callable[[EvaluationRequest], "bool | Verdict"]
Probabilities = Literal["auto", "logprobs", "answer"]
_TOP_LOGPROBS = 5


@dataclass(frozen=True)
class Criterion:
    """One named yes/no criterion: a question for the judge model, or a code check.

    Args:
        name: The criterion's name, shown in `verdict.criteria`.
        question: A yes/no question about the question, context and answer ("Does the answer
            keep every condition the context puts on the refund?"), where yes is good; or a
            code check: a callable of the `EvaluationRequest` returning a bool or a `Verdict`.
            Code checks run first, and when one fails no model call is made.
        when_false: What to tell the model when the criterion fails: the verdict's feedback.
        pass_at: The lowest probability of "yes" that passes.
        fail_at: The highest probability of "yes" that fails; in between is `uncertain`.
    """

    name: str
    question: str | CodeCheck
    when_false: str = ""
    pass_at: float = 0.8
    fail_at: float = 0.2

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a Criterion needs a non-empty name")
        if isinstance(self.question, str):
            if not self.question.strip():
                raise ValueError(f"criterion {self.name!r}: the question is empty")
        elif not callable(self.question):
            raise TypeError(
                f"criterion {self.name!r}: question must be a str or a callable of the request"
            )
        for field in ("pass_at", "fail_at"):
            value = getattr(self, field)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0.0 <= value <= 1.0)
            ):
                raise ValueError(f"criterion {self.name!r}: {field} must be from 0 to 1")
        if self.fail_at > self.pass_at:
            raise ValueError(f"criterion {self.name!r}: fail_at must not exceed pass_at")

    @property
    def is_code(self) -> bool:
        """Whether this criterion is a code check rather than a question."""
        return not isinstance(self.question, str)

    def feedback(self) -> str:
        """The text sent back when the criterion fails."""
        return self.when_false or f"The answer fails the criterion {self.name!r}."


def _word(token: str) -> str:
    return token.strip().strip(".,!:;*\"'`").lower()


def _yes_no_odds(candidates: Sequence[Any]) -> float | None:
    p_yes = sum(math.exp(c.logprob) for c in candidates if _word(c.token) == "yes")
    p_no = sum(math.exp(c.logprob) for c in candidates if _word(c.token) == "no")
    return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else None


def _probability_from_logprobs(completion: Any) -> float | None:
    """P(yes) from the reply's token probabilities, or None when they say nothing of it.

    The first token that is "yes" or "no" gives P(yes) from its alternatives. A reply that
    does not start with either (small models often open with "The answer...") is read at its
    first position: when "yes" or "no" is among that position's alternatives, their odds
    there are the probability the model would have answered yes.
    """
    choices = get(completion, "choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    content = get(get(first, "logprobs"), "content")
    if not isinstance(content, list) or not content:
        return None
    try:
        for token in content:
            if _word(token.token) in ("yes", "no"):
                return _yes_no_odds(token.top_logprobs or [token])
        return _yes_no_odds(content[0].top_logprobs or [])
    except (AttributeError, TypeError):  # not the shape of token probabilities: none said
        return None


class _Criteria(Judge):
    name = "criteria"

    def __init__(
        self,
        judge_model: JudgeModel,
        criteria: Sequence[Criterion],
        uncertain: Literal["fail", "pass"],
        probabilities: Probabilities,
        policy: JudgeErrorPolicy | None,
    ) -> None:
        super().__init__(judge_model, policy)
        criteria = list(criteria)
        if not criteria or not all(isinstance(c, Criterion) for c in criteria):
            raise TypeError("criteria() takes a non-empty list of refinekit.judges.Criterion")
        names = [c.name for c in criteria]
        if len(set(names)) != len(names):
            raise ValueError(f"criterion names must be unique, got {names}")
        if uncertain not in ("fail", "pass"):
            raise ValueError(f"uncertain must be 'fail' or 'pass', got {uncertain!r}")
        if probabilities not in ("auto", "logprobs", "answer"):
            raise ValueError(
                f"probabilities must be 'auto', 'logprobs' or 'answer', got {probabilities!r}"
            )
        if judge_model.provider == "anthropic" and probabilities == "logprobs":
            raise JudgeMisconfigured(
                f"judge model {judge_model.model!r}: Anthropic's Messages API returns no token "
                "probabilities (logprobs); use probabilities='auto' or 'answer' (each criterion "
                "is then read from the reply's text, source='answer')",
                model=judge_model.model,
            )
        self.criteria = tuple(criteria)
        self.expected_calls = float(sum(not c.is_code for c in criteria))
        self.uncertain = uncertain
        self.probabilities = probabilities

    def _messages(self, criterion: Criterion, request: EvaluationRequest) -> list[dict[str, Any]]:
        assert isinstance(criterion.question, str)
        content = "\n\n".join(
            [
                f"Answer this yes/no question about the data below: {criterion.question}",
                delimit("question", request.question),
                delimit("context", context_text(request)),
                *tool_calls_block(request),
                delimit("answer", request.answer),
                "Reply with one word: YES or NO.",
            ]
        )
        return [{"role": "system", "content": DATA_RULE}, {"role": "user", "content": content}]

    def _outcome(self, criterion: Criterion, p: float) -> Outcome:
        if p >= criterion.pass_at:
            return "pass"
        if p <= criterion.fail_at:
            return "fail"
        return "uncertain"

    def _read(self, criterion: Criterion, completion: Any) -> tuple[float, str, str]:
        text = reply_text_of(self.judge_model, completion)
        if self.probabilities != "answer":
            p = _probability_from_logprobs(completion)
            if p is not None:
                return p, "logprobs", text
            if self.probabilities == "logprobs":
                raise JudgeMisconfigured(
                    f"judge model {self.judge_model.model!r} at {self.judge_model.where} returned "
                    "no yes/no token probabilities (logprobs) for criterion "
                    f"{criterion.name!r}; use probabilities='auto' or 'answer' with this server",
                    model=self.judge_model.model,
                )
        try:
            return (1.0 if yes_no(self.judge_model, text) else 0.0), "answer", text
        except JudgeReplyError as e:
            raise JudgeReplyError(
                f"criterion {criterion.name!r}: {e}", model=e.model, reply=e.reply
            ) from None

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        results: dict[str, CriterionResult] = {}
        for criterion in self.criteria:  # code checks first: free, and they can spare the model
            if criterion.is_code:
                check = criterion.question
                assert callable(check)
                result = check(request)
                verdict = to_verdict(result, criterion.name)
                # A check returning a Verdict may say what is wrong (as evidence.called does);
                # the criterion's own when_false wins.
                own = result.feedback if isinstance(result, Verdict) else ""
                results[criterion.name] = CriterionResult(
                    name=criterion.name,
                    outcome="pass" if verdict.passed else "fail",
                    probability=1.0 if verdict.passed else 0.0,
                    source="code",
                    feedback=""
                    if verdict.passed
                    else criterion.when_false or own or criterion.feedback(),
                )
        model_criteria = [c for c in self.criteria if not c.is_code]
        replies: dict[str, str] = {}
        if any(r.outcome == "fail" for r in results.values()):
            for criterion in model_criteria:
                results[criterion.name] = CriterionResult(name=criterion.name, outcome="skipped")
        elif model_criteria:
            extra: dict[str, Any] = {}
            if self.probabilities != "answer" and self.judge_model.provider != "anthropic":
                extra = {"logprobs": True, "top_logprobs": _TOP_LOGPROBS}
            asks = [
                self.judge_model.request(self._messages(c, request), 4, **extra)
                for c in model_criteria
            ]
            # Reserved together, in order: a criterion whose request does not fit is not
            # sent, and the budget's stop decides the verdict (no policy lets it through).
            tickets = Tickets(judge_calls(self.judge_model.model, asks))
            with tickets:
                completions = yield Gather(
                    [
                        cached(
                            self.name,
                            Complete(self.judge_model, ask, ticket),
                            functools.partial(self._read, c),
                        )
                        for c, ask, ticket in zip(model_criteria, asks, tickets.held, strict=True)
                    ]
                )
            error = first_error(completions)
            if error is not None:
                raise error
            for criterion, completion in zip(model_criteria, completions, strict=True):
                p, source, text = self._read(criterion, completion)
                replies[criterion.name] = text[:200]
                outcome = self._outcome(criterion, p)
                results[criterion.name] = CriterionResult(
                    name=criterion.name,
                    outcome=outcome,
                    probability=p,
                    source=source,
                    feedback="" if outcome == "pass" else criterion.feedback(),
                )
        ordered = tuple(results[c.name] for c in self.criteria)
        failing = [
            c
            for c in ordered
            if c.outcome == "fail" or (c.outcome == "uncertain" and self.uncertain == "fail")
        ]
        judged = [c.probability for c in ordered if c.probability is not None]
        return Verdict(
            passed=not failing,
            score=sum(judged) / len(judged) if judged else 0.0,
            feedback=" ".join(c.feedback for c in failing),
            criteria=ordered,
            metadata={"judge": self.name, "replies": replies},
        )


def criteria(
    judge_model: JudgeModel,
    criteria: Sequence[Criterion],
    uncertain: Literal["fail", "pass"] = "fail",
    *,
    probabilities: Probabilities = "auto",
    judge_error_policy: JudgeErrorPolicy | None = None,
) -> Judge:
    """Named yes/no criteria, each with the probability that it holds.

    Code checks run first, in order; when one fails, the model criteria are `skipped` and no
    model call is made. The model criteria are asked concurrently (async tasks, or threads on
    the sync path), one request each. A criterion passes at `pass_at` or above, fails at
    `fail_at` or below, and is `uncertain` in between. The verdict passes when no criterion
    fails (uncertain ones count as failing with `uncertain="fail"`); its feedback is the
    `when_false` text of each failing criterion; its score is the mean probability.

    Each result's `source` says where its probability came from: `logprobs` (the judge's
    probabilities for its yes/no token, when the endpoint returns them), `answer` (1.0 or 0.0
    from the reply's text) or `code`.

    Args:
        judge_model: The judge.
        criteria: The criteria; names must be unique.
        uncertain: How an uncertain criterion counts: "fail" (the default) or "pass".
        probabilities: "auto" asks for logprobs and uses them when the endpoint returns them,
            else the reply's text (and says so in `source`); "logprobs" requires them (an
            endpoint without them raises `JudgeMisconfigured`); "answer" never asks for them.
            An Anthropic judge model has none: "auto" reads the text (`source="answer"`) and
            "logprobs" raises `JudgeMisconfigured` when the judge is made.
        judge_error_policy: None (the caller's policy decides), "fail_open" or "fail_closed".

    Returns:
        The judge, an evaluator.
    """
    return _Criteria(judge_model, criteria, uncertain, probabilities, judge_error_policy)


__all__ = ["Criterion", "criteria"]
