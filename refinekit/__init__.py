"""refinekit: make LLM answer functions trustworthy by decoration.

`@retry_on_low_quality` judges each answer, feeds the defect back and tries again within a hard
cap; `@self_correct` parses and validates a reply and turns a failure into a correction turn.
See https://github.com/refinekit/refinekit (docs/ in the repository) for the guide.
"""

from __future__ import annotations

from . import checks, evidence
from ._core.errors import (
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
    StreamInterrupted,
)
from ._core.package import rehome, version
from ._core.stream_items import Final, Partial, Reset, ResetCause, ToolCallChunk
from ._core.tiers import Escalation, EscalationUnaffordable, ModelRefused, Tier
from ._core.types import (
    Attempt,
    AttemptInfo,
    ContextDocument,
    Cost,
    CriterionResult,
    EvaluationRequest,
    TierReport,
    ToolCall,
    Usage,
    ValueEvidence,
    Verdict,
    VerdictStatus,
)
from ._decorators.correct import self_correct
from ._decorators.guard import guarded
from ._decorators.retry import retry_on_low_quality
from ._decorators.retry_prompt import retry_prompt
from ._decorators.review import reviewed
from ._decorators.revisers import RevisionRequest
from ._decorators.tools import tool
from ._engine.evaluators import AsyncEvaluator, Evaluator, EvaluatorLike, all_of, any_of, weighted
from ._engine.events import Event, EventKind, Subscription, subscribe
from ._engine.grounded import response_format
from ._engine.job import Job, current_attempt, current_job, job, record_context, record_usage
from ._engine.ladder import set_learner
from ._engine.outcome import Outcome
from ._engine.prices import Budget, Prices
from ._structure.corrections import CorrectionRequest
from ._structure.diagnose import FailureKind, ReplyProblem
from ._structure.formats import Dialect
from ._structure.grounding import InSource, in_source, provenance
from ._structure.template import schema_prompt

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
    "Escalation",
    "EscalationUnaffordable",
    "EvaluationRequest",
    "Evaluator",
    "EvaluatorLike",
    "Event",
    "EventKind",
    "FailureKind",
    "Final",
    "InSource",
    "Job",
    "JsonParseError",
    "JudgeError",
    "JudgeMisconfigured",
    "JudgeReplyError",
    "JudgeUnavailable",
    "LowQualityAnswer",
    "MissingPrice",
    "ModelRefused",
    "Outcome",
    "Partial",
    "Prices",
    "RefinekitError",
    "RefinekitWarning",
    "ReplyProblem",
    "Reset",
    "ResetCause",
    "ResponseValidationError",
    "RevisionRequest",
    "StreamInterrupted",
    "Subscription",
    "Tier",
    "TierReport",
    "ToolCall",
    "ToolCallChunk",
    "Usage",
    "ValueEvidence",
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
    "provenance",
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

rehome(globals(), __all__, __name__)  # `refinekit.Verdict`, not `refinekit._core.types.Verdict`
del rehome, version


def _learned_start(function: str, escalation: Escalation) -> int:
    """`start="learned"`: where the run store says a function's ladder should start.

    `refinekit.eval` is imported at the first such call, not with the package.
    """
    from .eval._learned import learned_start

    return learned_start(function, escalation)


set_learner(_learned_start)
del set_learner
