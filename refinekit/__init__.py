"""refinekit: make LLM answer functions trustworthy by decoration.

`@retry_on_low_quality` judges each answer, feeds the defect back and tries again within a hard
cap; `@self_correct` parses and validates a reply and turns a failure into a correction turn.
See https://github.com/refinekit/refinekit (docs/ in the repository) for the guide.
"""

from __future__ import annotations

from . import checks, evidence
from ._correct import self_correct
from ._errors import (
    AnswerRejected,
    CorrectionExhausted,
    JsonParseError,
    JudgeError,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    LowQualityAnswer,
    RefinekitError,
    RefinekitWarning,
    ResponseValidationError,
)
from ._evaluators import AsyncEvaluator, Evaluator, EvaluatorLike, all_of, any_of, weighted
from ._guard import guarded
from ._hooks import Event, EventKind, Subscription, subscribe
from ._job import Job, current_attempt, current_job, job, record_context
from ._model import (
    Attempt,
    AttemptInfo,
    ContextDocument,
    CriterionResult,
    EvaluationRequest,
    ToolCall,
    Usage,
    Verdict,
    VerdictStatus,
)
from ._retry import retry_on_low_quality
from ._retry_prompt import retry_prompt
from ._review import RevisionRequest, reviewed
from ._tools import tool

__version__ = "0.1.0.dev0"

__all__ = [
    "AnswerRejected",
    "AsyncEvaluator",
    "Attempt",
    "AttemptInfo",
    "ContextDocument",
    "CorrectionExhausted",
    "CriterionResult",
    "EvaluationRequest",
    "Evaluator",
    "EvaluatorLike",
    "Event",
    "EventKind",
    "Job",
    "JsonParseError",
    "JudgeError",
    "JudgeMisconfigured",
    "JudgeReplyError",
    "JudgeUnavailable",
    "LowQualityAnswer",
    "RefinekitError",
    "RefinekitWarning",
    "ResponseValidationError",
    "RevisionRequest",
    "Subscription",
    "ToolCall",
    "Usage",
    "Verdict",
    "VerdictStatus",
    "all_of",
    "any_of",
    "checks",
    "current_attempt",
    "current_job",
    "evidence",
    "guarded",
    "job",
    "record_context",
    "retry_on_low_quality",
    "retry_prompt",
    "reviewed",
    "self_correct",
    "subscribe",
    "tool",
    "weighted",
]
