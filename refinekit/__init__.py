"""refinekit: make LLM answer functions trustworthy by decoration.

`@retry_on_low_quality` judges each answer, feeds the defect back and tries again within a hard
cap; `@self_correct` parses and validates a reply and turns a failure into a correction turn.
See https://github.com/refinekit/refinekit (docs/ in the repository) for the guide.
"""

from __future__ import annotations

from . import checks, evidence
from ._correct import self_correct
from ._corrections import CorrectionRequest
from ._diagnose import FailureKind, ReplyProblem
from ._errors import (
    AnswerRejected,
    BudgetExceeded,
    CorrectionExhausted,
    JsonParseError,
    JudgeError,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    LowQualityAnswer,
    MissingPrice,
    RefinekitError,
    RefinekitWarning,
    ResponseValidationError,
)
from ._evaluators import AsyncEvaluator, Evaluator, EvaluatorLike, all_of, any_of, weighted
from ._formats import Dialect, response_format
from ._grounding import InSource, in_source
from ._guard import guarded
from ._hooks import Event, EventKind, Subscription, subscribe
from ._job import Job, current_attempt, current_job, job, record_context, record_usage
from ._model import (
    Attempt,
    AttemptInfo,
    ContextDocument,
    Cost,
    CriterionResult,
    EvaluationRequest,
    ToolCall,
    Usage,
    Verdict,
    VerdictStatus,
)
from ._outcome import Outcome
from ._package import rehome, version
from ._prices import Budget, Prices
from ._retry import retry_on_low_quality
from ._retry_prompt import retry_prompt
from ._review import reviewed
from ._revisers import RevisionRequest
from ._template import schema_prompt
from ._tools import tool

__all__ = [
    "AnswerRejected",
    "AsyncEvaluator",
    "Attempt",
    "AttemptInfo",
    "Budget",
    "BudgetExceeded",
    "ContextDocument",
    "CorrectionExhausted",
    "CorrectionRequest",
    "Cost",
    "CriterionResult",
    "Dialect",
    "EvaluationRequest",
    "Evaluator",
    "EvaluatorLike",
    "Event",
    "EventKind",
    "FailureKind",
    "InSource",
    "Job",
    "JsonParseError",
    "JudgeError",
    "JudgeMisconfigured",
    "JudgeReplyError",
    "JudgeUnavailable",
    "LowQualityAnswer",
    "MissingPrice",
    "Outcome",
    "Prices",
    "RefinekitError",
    "RefinekitWarning",
    "ReplyProblem",
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
    "in_source",
    "job",
    "record_context",
    "record_usage",
    "response_format",
    "retry_on_low_quality",
    "retry_prompt",
    "reviewed",
    "schema_prompt",
    "self_correct",
    "subscribe",
    "tool",
    "weighted",
]

__version__ = version()
"""refinekit's version (from the installed package's metadata)."""

rehome(globals(), __all__, __name__)  # `refinekit.Verdict`, not `refinekit._model.Verdict`
del rehome, version
