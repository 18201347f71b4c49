"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import typing
from typing import Any

import pytest

import refinekit
import refinekit.checks
import refinekit.eval
import refinekit.evidence
import refinekit.judges
import refinekit.local
import refinekit.otel
import refinekit.testing
from refinekit._decorators import correct, guard, retry, review

PUBLIC = {
    "AnswerRejected",
    "Escalation",
    "EscalationUnaffordable",
    "ModelRefused",
    "StreamInterrupted",
    "Tier",
    "TierReport",
    "Budget",
    "BudgetExceeded",
    "Cost",
    "MissingPrice",
    "Prices",
    "AsyncEvaluator",
    "Attempt",
    "AttemptInfo",
    "ContextDocument",
    "CorrectionExhausted",
    "CorrectionRequest",
    "CriterionResult",
    "Dialect",
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
    "Outcome",
    "Partial",
    "RefinekitError",
    "RefinekitWarning",
    "ReplyProblem",
    "Reset",
    "ResetCause",
    "ResponseValidationError",
    "RevisionRequest",
    "Subscription",
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
        "excludes",
        "json_schema",
        "matches",
        "max_length",
        "not_empty",
        "numbers_supported",
        "values_supported",
        "weighted",
    }


def test_judges_names() -> None:
    assert set(refinekit.judges.__all__) == {
        "Cascade",
        "Criterion",
        "Judge",
        "JudgeCache",
        "JudgeErrorPolicy",
        "JudgeModel",
        "MemoryCache",
        "Pairwise",
        "Panel",
        "PanelRule",
        "PostgresCache",
        "SQLiteCache",
        "Sampled",
        "Winner",
        "cache_salt",
        "cascade",
        "confidence_of",
        "criteria",
        "fact_check",
        "pairwise",
        "panel",
        "rating",
        "relevancy",
        "sampled",
        "use_cache",
    }
    for name in (
        "cascade",
        "Cascade",
        "confidence_of",
        "sampled",
        "Sampled",
        "criteria",
        "fact_check",
        "pairwise",
        "panel",
        "Panel",
        "rating",
        "relevancy",
        "JudgeModel",
        "JudgeCache",
        "MemoryCache",
        "PostgresCache",
        "SQLiteCache",
        "cache_salt",
        "use_cache",
    ):
        assert getattr(refinekit.judges, name).__doc__


def test_evidence_names() -> None:
    assert set(refinekit.evidence.__all__) == {
        "JudgingState",
        "called",
        "from_messages",
        "stated_values",
    }
    for name in refinekit.evidence.__all__:
        assert getattr(refinekit.evidence, name).__doc__, name
    assert issubclass(refinekit.evidence.JudgingState, refinekit.EvaluationRequest)


def test_testing_names() -> None:
    assert set(refinekit.testing.__all__) == {
        "FakeJudge",
        "FakeStream",
        "RecordedBatch",
        "RecordedRequest",
        "RecordedStream",
        "Reply",
        "ScriptedOpenAI",
        "is_testing",
        "set_testing",
    }
    for method in ("script", "reset", "requests_for", "streamed"):
        assert getattr(refinekit.testing.ScriptedOpenAI, method).__doc__, method
    options = inspect.signature(refinekit.testing.ScriptedOpenAI).parameters
    assert {name: (p.kind, p.default) for name, p in options.items()} == {
        "host": (inspect.Parameter.KEYWORD_ONLY, "127.0.0.1"),
        "port": (inspect.Parameter.KEYWORD_ONLY, 0),
    }


def test_plugin_fixtures() -> None:
    import _refinekit_pytest_plugin as plugin

    fixtures = {
        "fake_judge",
        "fake_stream",
        "refinekit_testing",
        "scripted_openai",
        "scripted_openai_session",
    }
    assert fixtures <= set(plugin.__all__)
    for name in fixtures:
        assert getattr(plugin, name).__doc__, name


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


def test_otel_names() -> None:
    # importable without the `otel` extra: only instrument() needs opentelemetry
    assert set(refinekit.otel.__all__) == {"instrument", "is_instrumented", "uninstrument"}
    for name in refinekit.otel.__all__:
        assert getattr(refinekit.otel, name).__doc__, name


def test_eval_names() -> None:
    assert set(refinekit.eval.__all__) == {
        "BatchProgress",
        "CalibrateOptions",
        "Calibration",
        "CalibrationResult",
        "CaseFinished",
        "CascadeFit",
        "CaseOutcome",
        "CaseRecord",
        "Comparison",
        "CorrectedRate",
        "CostLimitReached",
        "DataFileError",
        "EvalOptions",
        "EvalResult",
        "JudgeCalibration",
        "LengthBand",
        "MemberAgreement",
        "PairAgreement",
        "PanelAgreement",
        "PositionConsistency",
        "ReliabilityBin",
        "RunAborted",
        "RunEvent",
        "RunInfo",
        "RunOptions",
        "RunProgress",
        "RunStarted",
        "RunStopped",
        "RunStoreError",
        "StoreURL",
        "Summary",
        "Thresholds",
        "UsageProblem",
        "acalibrate",
        "arun",
        "calibrate",
        "case_slug",
        "column_for",
        "compare",
        "fit_cascade",
        "html_report",
        "read_golden",
        "run",
        "runs",
        "store_location",
        "store_path",
        "wilson_interval",
    }
    for name in refinekit.eval.__all__:
        obj = getattr(refinekit.eval, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"refinekit.eval.{name} has no docstring"
    for error in ("DataFileError", "RunAborted", "RunStoreError", "UsageProblem"):
        assert issubclass(getattr(refinekit.eval, error), refinekit.RefinekitError)
    assert issubclass(refinekit.eval.CostLimitReached, refinekit.eval.RunAborted)
    # the HTML report's package and the function that writes a report are apart
    assert callable(refinekit.eval.html_report)


def test_the_eval_options_are_the_signatures_of_run_and_calibrate() -> None:
    # one definition of the options: each function's parameters are its options class's fields
    for functions, options, first in (
        ((refinekit.eval.run, refinekit.eval.arun), refinekit.eval.EvalOptions, "golden"),
        (
            (refinekit.eval.calibrate, refinekit.eval.acalibrate),
            refinekit.eval.CalibrateOptions,
            "labelled",
        ),
    ):
        fields = [field.name for field in dataclasses.fields(options)]
        assert issubclass(options, refinekit.eval.RunOptions)
        assert dataclasses.fields(refinekit.eval.RunOptions)[0].name in fields
        for function in functions:
            parameters = inspect.signature(function).parameters
            assert sorted(parameters) == sorted(fields), function.__name__
            assert next(iter(parameters)) == first
            assert parameters[first].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            others = [p for name, p in parameters.items() if name != first]
            assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in others)
    made = refinekit.eval.EvalOptions("golden.csv", target="app:answer")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.concurrency = 2  # type: ignore[misc]
    assert dataclasses.replace(made, concurrency=2).concurrency == 2
    assert made.concurrency == 4


def test_each_decorators_options_are_its_signature() -> None:
    # one definition of a decorator's options: its keyword arguments are its options' fields
    # (and the keywords its typed overloads take, `returns` apart)
    for decorator, options, keywords in (
        (refinekit.retry_on_low_quality, retry._RetryOptions, retry._RetryKeywords),
        (refinekit.guarded, guard._GuardOptions, guard._GuardKeywords),
        (refinekit.reviewed, review._ReviewOptions, None),
        (refinekit.self_correct, correct._CorrectOptions, None),
    ):
        fields = {f.name: f.default for f in dataclasses.fields(options) if f.init}
        parameters = inspect.signature(decorator).parameters
        assert {name: p.default for name, p in parameters.items()} == {
            name: inspect.Parameter.empty if default is dataclasses.MISSING else default
            for name, default in fields.items()
        }, decorator.__name__
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
        if keywords is not None:
            assert {*keywords.__annotations__, "returns"} == set(fields), decorator.__name__


def test_the_eval_outcome_type_has_its_own_name_and_the_old_one_warns() -> None:
    assert typing.get_args(refinekit.eval.CaseOutcome) == (
        "passed",
        "failed",
        "raised",
        "unavailable",
        "inconclusive",
    )
    with pytest.warns(DeprecationWarning, match=r"refinekit\.eval\.CaseOutcome"):
        old = refinekit.eval.Outcome  # type: ignore[attr-defined]
    assert old is refinekit.eval.CaseOutcome
    assert refinekit.Outcome is not old  # the decorated call's outcome, a class
    with pytest.raises(AttributeError):
        refinekit.eval.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


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
    private = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("refinekit.")
        and any(part.startswith("_") for part in name.split(".")[1:])
    ]
    for name in refinekit.__all__:
        obj = getattr(refinekit, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert any(vars(m).get(name) is obj for m in private), name


PUBLIC_MODULES = [refinekit, refinekit.checks, refinekit.evidence, refinekit.judges]
PUBLIC_MODULES += [refinekit.local, refinekit.otel, refinekit.testing, refinekit.eval]


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_public_names_show_their_public_module(module: Any) -> None:
    # as httpx does: `refinekit.Verdict`, not `refinekit._core.types.Verdict`, in reprs, tracebacks,
    # pickles and docs; a name re-exported from the top-level package shows that one
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            home = "refinekit" if getattr(refinekit, name, None) is obj else module.__name__
            assert obj.__module__ == home, f"{module.__name__}.{name}"
            assert getattr(importlib.import_module(home), name) is obj
