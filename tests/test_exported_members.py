"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import inspect

import refinekit
import refinekit.checks
import refinekit.evidence
import refinekit.judges
import refinekit.local
import refinekit.testing

PUBLIC = {
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
}


def test_top_level_names() -> None:
    assert set(refinekit.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(refinekit, name) is not None


def test_public_names_are_documented() -> None:
    for name in refinekit.__all__:
        obj = getattr(refinekit, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert getattr(obj, "__doc__", None), f"refinekit.{name} has no docstring"


def test_checks_names() -> None:
    assert set(refinekit.checks.__all__) == {
        "Check",
        "all_of",
        "any_of",
        "cites_source",
        "contains",
        "json_schema",
        "matches",
        "max_length",
        "not_empty",
        "numbers_supported",
        "weighted",
    }


def test_judges_names() -> None:
    assert set(refinekit.judges.__all__) == {
        "Criterion",
        "Judge",
        "JudgeErrorPolicy",
        "JudgeModel",
        "Pairwise",
        "Winner",
        "criteria",
        "fact_check",
        "pairwise",
        "rating",
        "relevancy",
    }
    for name in ("criteria", "fact_check", "pairwise", "rating", "relevancy", "JudgeModel"):
        assert getattr(refinekit.judges, name).__doc__


def test_evidence_names() -> None:
    assert set(refinekit.evidence.__all__) == {"JudgingState", "called", "from_messages"}
    for name in refinekit.evidence.__all__:
        assert getattr(refinekit.evidence, name).__doc__, name
    assert issubclass(refinekit.evidence.JudgingState, refinekit.EvaluationRequest)


def test_testing_names() -> None:
    assert set(refinekit.testing.__all__) == {
        "FakeJudge",
        "RecordedRequest",
        "Reply",
        "ScriptedOpenAI",
        "is_testing",
        "set_testing",
    }


def test_local_names() -> None:
    # importable without the `local` extra: the extra is needed only to start a server
    assert set(refinekit.local.__all__) == {
        "DEFAULT_MODEL",
        "LocalModel",
        "LocalModelError",
        "default_model_path",
    }
    for name in ("LocalModel", "LocalModelError", "default_model_path"):
        assert getattr(refinekit.local, name).__doc__, name
    assert issubclass(refinekit.local.LocalModelError, refinekit.RefinekitError)


def test_error_tree() -> None:
    assert issubclass(refinekit.CorrectionExhausted, refinekit.RefinekitError)
    assert issubclass(refinekit.AnswerRejected, refinekit.RefinekitError)
    assert issubclass(refinekit.JsonParseError, refinekit.CorrectionExhausted)
    assert issubclass(refinekit.ResponseValidationError, refinekit.CorrectionExhausted)
    assert issubclass(refinekit.JudgeError, refinekit.RefinekitError)
    for error in (
        refinekit.JudgeUnavailable,
        refinekit.JudgeMisconfigured,
        refinekit.JudgeReplyError,
    ):
        assert issubclass(error, refinekit.JudgeError)
    # a control-flow signal, kept apart from the errors
    assert not issubclass(refinekit.LowQualityAnswer, refinekit.RefinekitError)


def test_implementation_modules_are_private() -> None:
    for name in refinekit.__all__:
        obj = getattr(refinekit, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("refinekit._"), name
