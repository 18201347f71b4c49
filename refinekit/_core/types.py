"""The data model every part of refinekit shares: requests, verdicts, attempts, usage.

This module imports nothing from the rest of refinekit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Attempt",
    "AttemptInfo",
    "ContextDocument",
    "Cost",
    "CriterionResult",
    "EvaluationRequest",
    "Outcome",
    "TierReport",
    "ToolCall",
    "Usage",
    "ValueEvidence",
    "Verdict",
    "VerdictStatus",
]

Outcome = Literal["pass", "fail", "uncertain", "skipped"]
"""The outcome of one criterion."""

VerdictStatus = Literal["judged", "unjudged", "inconclusive"]
"""Whether a verdict is a real judgement."""


class ContextDocument(BaseModel):
    """One document the answer was supposed to be built from.

    The text may be given first, positionally (or as `text=`); the other fields are
    keyword-only: `ContextDocument("Refunds within 30 days.", source="policies/refunds.md")`.

    Attributes:
        text: The document's text.
        source: Where it came from (a path, a URL, an id); what `checks.cites_source()` looks for.
        metadata: Anything else worth keeping with the document (None: none).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def __init__(
        self,
        text: str,
        *,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        # The text may be positional; extra keywords still reach pydantic, which refuses them.
        super().__init__(
            text=text, source=source, metadata={} if metadata is None else metadata, **extra
        )

    @classmethod
    def coerce(cls, value: ContextDocument | str | Mapping[str, Any]) -> ContextDocument:
        """Turn a `str`, a mapping or a `ContextDocument` into a `ContextDocument`.

        A mapping needs a `text` key (or `page_content`, as LangChain documents have); a
        `source` key, or a `source`/`source_path` entry in its `metadata`, becomes the source.

        Raises:
            TypeError: The value is none of the accepted shapes.
        """
        if isinstance(value, ContextDocument):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, Mapping):
            metadata = dict(value.get("metadata") or {})
            text = value.get("text", value.get("page_content"))
            if not isinstance(text, str):
                raise TypeError(
                    "a context document given as a mapping needs a 'text' string, "
                    f"got keys {sorted(map(str, value))}"
                )
            source = value.get("source") or metadata.get("source") or metadata.get("source_path")
            return cls(text=text, source=None if source is None else str(source), metadata=metadata)
        raise TypeError(
            "a context document must be a str, a mapping with 'text' (and optionally 'source'), "
            f"or a refinekit.ContextDocument, not {type(value).__name__}"
        )


class ToolCall(BaseModel):
    """One tool call the answer may rest on: what was called, with what, and what came back.

    Attributes:
        name: The tool's name.
        arguments: The arguments, as the JSON text the model sent (or a JSON rendering).
        result: The tool's result as text; `error: <message>` when the tool raised; None when
            no result was ever paired with the call (a trace issue).
        id: The call's id, when the provider gave one.
        ok: False when the tool raised (its result is then the error) or, in a judging
            state built from messages, when the call never got a result.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str = "{}"
    result: str | None = None
    id: str | None = None
    ok: bool = True


class EvaluationRequest(BaseModel):
    """What an evaluator judges: the question, the answer and the context it was built from.

    Attributes:
        question: The question the answer is meant to answer ("" when the call has none).
        answer: The answer as text (a pydantic model is serialised as JSON).
        context: The documents the answer was supposed to rely on.
        metadata: Extra facts about the call (the function's name, the attempt number, ...).
        tool_calls: The tool calls the answer was built on, with their results.
        trace_issues: What is wrong with the evidence (a result with no call, a call with no
            result); a judge asked to judge with trace issues returns an `inconclusive`
            verdict instead of guessing.
        max_chars: The most characters the serialised request may have for a judge; above
            it a judge returns an `inconclusive` verdict instead of a truncated prompt.
    """

    model_config = ConfigDict(frozen=True)

    question: str = ""
    answer: str
    context: tuple[ContextDocument, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    tool_calls: tuple[ToolCall, ...] = ()
    trace_issues: tuple[str, ...] = ()
    max_chars: int | None = None


class ValueEvidence(BaseModel):
    """Where one value of an answer came from: the span of a source text that states it.

    `refinekit.provenance(value, source=...)` gives one for each grounded field of a validated
    object (offsets into the source text); `refinekit.evidence.stated_values(request)` and
    `checks.values_supported()` give one for each value an answer states (offsets into the
    context document that holds it).

    Attributes:
        path: Where the value is in the answer: a field path (`vendor`, `lines[0].sku`), or
            "" for a value stated in prose.
        value: The value as the answer states it (a number as JSON writes it).
        text: The span of the source that states it, as written there; None when no source
            does.
        start: Where `text` starts in the source (`source_text[start:end] == text`).
        end: Where it ends.
        source: Which source: the validation context's key (`"source"`), or the context
            document's `source` (its position, `"context[2]"`, when it has none).
    """

    model_config = ConfigDict(frozen=True)

    path: str
    value: str
    text: str | None = None
    start: int | None = None
    end: int | None = None
    source: str | None = None

    @property
    def found(self) -> bool:
        """Whether a source states the value."""
        return self.text is not None


class CriterionResult(BaseModel):
    """The result of one named criterion inside a verdict.

    Attributes:
        name: The criterion's name.
        outcome: `pass`, `fail`, `uncertain` or `skipped` (not run, e.g. after an earlier failure).
        probability: The probability that the criterion holds, when known.
        source: Where `probability` came from (`code` for rule checks; model judges say `logprobs`
            or `answer`).
        feedback: What to fix when the criterion did not pass.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    outcome: Outcome
    probability: float | None = None
    source: str | None = None
    feedback: str = ""


class Verdict(BaseModel):
    """An evaluator's judgement of one answer.

    Attributes:
        passed: Whether the answer is good enough.
        score: A number from 0 to 1, when the evaluator has one.
        feedback: What to fix, written for the model that produced the answer.
        criteria: Per-criterion results, when the evaluator judged several things.
        metadata: Anything else the evaluator wants to report.
        status: `judged` for a real judgement; `unjudged` when judging itself failed and the
            error policy let the answer through; `inconclusive` when the evidence could not
            support a judgement (`passed` is False for both: an answer that was not judged is
            never a passed one).
        reason: Why the verdict is not `judged` (e.g. `JudgeUnavailable: HTTP 503`,
            `INCOMPLETE_JUDGING_EVIDENCE`, `JUDGE_STATE_LIMIT`).
    """

    model_config = ConfigDict(frozen=True)

    passed: bool
    score: float | None = None
    feedback: str = ""
    criteria: tuple[CriterionResult, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: VerdictStatus = "judged"
    reason: str | None = None

    @classmethod
    def unjudged(cls, reason: str, **metadata: Any) -> Verdict:
        """The verdict for an answer that could not be judged: not passed, status `unjudged`."""
        return cls(passed=False, status="unjudged", reason=reason, metadata=metadata)

    @classmethod
    def inconclusive(cls, reason: str, **metadata: Any) -> Verdict:
        """The verdict when the evidence cannot support a judgement: not passed, `inconclusive`.

        Args:
            reason: `INCOMPLETE_JUDGING_EVIDENCE`, `JUDGE_STATE_LIMIT`, or your own code.
            **metadata: Details, such as the trace issues.
        """
        return cls(passed=False, status="inconclusive", reason=reason, metadata=metadata)

    @property
    def judged(self) -> bool:
        """Whether this is a real judgement (status `judged`)."""
        return self.status == "judged"

    def net_criteria(self) -> int:
        """Criteria passed net of criteria failed; a verdict without criteria counts as one.

        This is the measure `on_exhausted="return_best"` ranks attempts by.
        """
        if not self.criteria:
            return 1 if self.passed else -1
        passed = sum(1 for c in self.criteria if c.outcome == "pass")
        failed = sum(1 for c in self.criteria if c.outcome == "fail")
        return passed - failed


@dataclass(frozen=True)
class Usage:
    """Token usage and model calls added up over a job.

    Attributes:
        model_calls: Model replies seen (a completion, an Anthropic or LangChain message),
            and calls reported with `record_usage`.
        prompt_tokens: Prompt tokens over those replies.
        completion_tokens: Completion tokens over those replies.
        estimated_calls: Of `model_calls`, the calls whose tokens are refinekit's estimate
            (characters / 4) because the server reported none: a stream closed before its
            end (aborted, abandoned by its consumer, cancelled, stopped by the budget) or one
            sent without usage. Not compared: two usages with the same counts are equal.
    """

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_calls: int = field(default=0, compare=False)

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.model_calls + other.model_calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated_calls + other.estimated_calls,
        )

    def __sub__(self, other: Usage) -> Usage:
        """What was added between two readings of a job's usage (`other` the earlier)."""
        return Usage(
            self.model_calls - other.model_calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.estimated_calls - other.estimated_calls,
        )

    def __repr__(self) -> str:
        estimated = f", estimated_calls={self.estimated_calls}" if self.estimated_calls else ""
        return (
            f"Usage(model_calls={self.model_calls}, prompt_tokens={self.prompt_tokens}, "
            f"completion_tokens={self.completion_tokens}{estimated})"
        )


@dataclass(frozen=True)
class Cost:
    """What a job's model calls cost, in the currency of the prices given (`refinekit.Prices`).

    Attributes:
        answer: The answering model's calls (the function's own and revisions).
        judge: Model judges' calls.
    """

    answer: float = 0.0
    judge: float = 0.0

    @property
    def total(self) -> float:
        """Answer plus judge cost."""
        return self.answer + self.judge

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.answer + other.answer, self.judge + other.judge)

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.answer - other.answer, self.judge - other.judge)


@dataclass(frozen=True)
class Attempt:
    """One call of a function wrapped by `@retry_on_low_quality`.

    Attributes:
        number: 1 for the first call, 2 for the first retry, and so on.
        answer: What the function returned (None when it raised `LowQualityAnswer` without one).
        verdict: The verdict on that answer.
        duration: Seconds spent on the call and its judging.
        feedback: The feedback this attempt was called with (None on the first).
        tier: With `escalate=`, the name of the tier the attempt was made at; else None.
    """

    number: int
    answer: Any
    verdict: Verdict
    duration: float
    feedback: str | None = None
    tier: str | None = None


@dataclass(frozen=True)
class AttemptInfo:
    """What `refinekit.current_attempt()` tells the function being retried.

    Attributes:
        number: 1 for the first call, 2 for the first retry, and so on.
        max_attempts: The most calls this decorated call can make (`max_retries + 1`).
        feedback: The latest rejection's feedback, None on the first attempt.
        previous_answer: The answer the latest rejection was about, None on the first attempt.
        tier: With `escalate=`, the name of the tier the call is made at (also inside an
            escalating `@self_correct`); else None.
        model: With `escalate=`, the tier's model name, when it has one; else None.
    """

    number: int
    max_attempts: int
    feedback: str | None = None
    previous_answer: Any = None
    tier: str | None = None
    model: str | None = None
    _context: list[ContextDocument] = field(default_factory=list, repr=False, compare=False)

    @property
    def is_last(self) -> bool:
        """Whether no retry follows this attempt."""
        return self.number >= self.max_attempts


@dataclass(frozen=True)
class TierReport:
    """What one tier of a ladder did during a call (`Outcome.tiers`, the errors' `tiers`).

    Attributes:
        name: The tier's name.
        model: Its model's name, when it has one.
        calls: Calls of the function (or the tier's callable) made at this tier.
        answered: Whether this tier's answer is the one returned.
        ended: Why the call left the tier: `"answered"`, `"exhausted"` (its budget spent),
            `"refused"`, `"error"` (an exception: one in `on_errors` moves up, any other
            propagates), `"skipped"` (the learned start) or `"unaffordable"` (the budget could
            not cover its first call, or stopped it midway).
        usage: The answering model's usage at this tier.
        judge_usage: Model judges' usage at this tier.
        cost: What this tier's calls cost, when the job's budget has prices; else None.
    """

    name: str
    model: str | None
    calls: int
    answered: bool
    ended: Literal["answered", "exhausted", "refused", "error", "skipped", "unaffordable"]
    usage: Usage = field(default_factory=Usage)
    judge_usage: Usage = field(default_factory=Usage)
    cost: Cost | None = None
