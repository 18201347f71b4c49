"""What the package says of itself: its version, its public names' home, and their pickles."""

from __future__ import annotations

import importlib.metadata
import pickle
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import refinekit
import refinekit.eval
import refinekit.judges
import refinekit.local
import refinekit.testing
from refinekit import (
    AnswerRejected,
    Attempt,
    AttemptInfo,
    ContextDocument,
    CriterionResult,
    EvaluationRequest,
    JsonParseError,
    JudgeMisconfigured,
    JudgeReplyError,
    JudgeUnavailable,
    LowQualityAnswer,
    ResponseValidationError,
    ToolCall,
    Usage,
    Verdict,
    retry_on_low_quality,
)


def test_the_version_is_the_installed_distributions() -> None:
    assert refinekit.__version__ == importlib.metadata.version("refinekit")


def test_a_source_checkout_reads_its_version_from_pyproject(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from refinekit._core.package import version

    installed = importlib.metadata.version("refinekit")  # the same pyproject.toml's

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert version() == installed


def test_classes_show_the_package_they_are_used_from() -> None:
    assert refinekit.Verdict.__module__ == "refinekit"
    assert repr(refinekit.Verdict) == "<class 'refinekit.Verdict'>"
    assert refinekit.judges.JudgeModel.__module__ == "refinekit.judges"
    assert refinekit.testing.ScriptedOpenAI.__module__ == "refinekit.testing"
    assert refinekit.local.LocalModelError.__module__ == "refinekit.local"
    assert refinekit.eval.EvalResult.__module__ == "refinekit.eval"
    assert refinekit.eval.RunAborted.__module__ == "refinekit.eval"


VERDICT = Verdict(
    passed=False,
    score=0.25,
    feedback="Cite a source.",
    criteria=(CriterionResult(name="cites", outcome="fail", probability=0.1),),
    metadata={"judge": "x"},
)


def errors() -> list[BaseException]:
    rejected = LowQualityAnswer("Cite a source.", verdict=VERDICT, answer="no source")
    rejected.attempts = (Attempt(1, "no source", VERDICT, 0.5, None),)
    rejected.usage = Usage(model_calls=1, prompt_tokens=3, completion_tokens=2)
    closed = judge_failing_closed()
    return [
        rejected,
        AnswerRejected("rejected", reason="budget", verdicts=[VERDICT], drafts=["d"]),
        JsonParseError(
            "not JSON", raw_reply="x", errors=[{"msg": "no"}], conversation=[], corrections_used=2
        ),
        ResponseValidationError(
            "bad", raw_reply="{}", errors=[], conversation=[], corrections_used=1
        ),
        JudgeUnavailable("judge 'j': HTTP 503", model="j", status_code=503),
        JudgeMisconfigured("judge 'j': HTTP 401", model="j", status_code=401),
        JudgeReplyError("unreadable", model="j", reply="maybe"),
        closed,
        refinekit.local.LocalModelError("the local model's server died"),
        refinekit.eval.RunAborted("the judge is misconfigured", run_id=3, stored=2, cases=5),
        refinekit.eval.UsageProblem("--target 'm:f' needs 'x'"),
        refinekit.eval.RunStoreError("no run 9 in runs.db"),
        refinekit.eval.DataFileError("golden.csv, line 2: 3 values"),
    ]


def judge_failing_closed() -> JudgeUnavailable:
    def judge(request: EvaluationRequest) -> Verdict:
        raise JudgeUnavailable("judge 'j': HTTP 503", model="j", status_code=503)

    fn = retry_on_low_quality(evaluator=judge, judge_error_policy="fail_closed")(lambda q: "a")
    with pytest.raises(JudgeUnavailable) as caught:
        fn("q")
    assert caught.value.fail_closed
    return caught.value


@pytest.mark.parametrize("error", errors(), ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_state(error: BaseException) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


@pytest.mark.parametrize(
    "value",
    [
        VERDICT,
        EvaluationRequest(
            question="q",
            answer="a",
            context=(ContextDocument(text="t", source="a.md"),),
            tool_calls=(ToolCall(name="lookup", arguments="{}", result="ok"),),
        ),
        Usage(model_calls=2, prompt_tokens=5, completion_tokens=1),
        Attempt(1, "a", VERDICT, 0.5, "feedback"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_models_pickle(value: Any) -> None:
    assert pickle.loads(pickle.dumps(value)) == value


def test_a_context_document_takes_its_text_positionally() -> None:
    # as people write it: ContextDocument("text", source=...)
    document = ContextDocument("Refunds within 30 days.", source="policies/refunds.md")
    assert document == ContextDocument(text="Refunds within 30 days.", source="policies/refunds.md")
    assert (document.text, document.source, document.metadata) == (
        "Refunds within 30 days.",
        "policies/refunds.md",
        {},
    )
    assert pickle.loads(pickle.dumps(document)) == document
    metadata = {"page": 3}
    with_metadata = ContextDocument("t", metadata=metadata)
    assert with_metadata.metadata == {"page": 3}
    with_metadata.metadata["page"] = 4
    assert metadata == {"page": 3}  # the caller's dict is not the document's
    # the other fields stay keyword-only, and the text is given once
    with pytest.raises(TypeError):
        ContextDocument("t", "a.md")
    with pytest.raises(TypeError, match="multiple values for argument 'text'"):
        ContextDocument("t", text="u")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ContextDocument("t", url="https://example.test")


def test_public_types_work_inside_a_users_pydantic_model() -> None:
    # pydantic reads a dataclass's (and a model's) type hints: they must resolve, though the
    # class now shows `refinekit` as its module
    class Stored(BaseModel):
        attempt: Attempt
        usage: Usage
        verdict: Verdict
        info: AttemptInfo | None = None

    stored = Stored(attempt=Attempt(1, "a", VERDICT, 0.5, None), usage=Usage(), verdict=VERDICT)
    assert Stored.model_validate_json(stored.model_dump_json()).verdict == VERDICT

    class Request(EvaluationRequest):
        ticket: int = 0

    assert Request(answer="a", ticket=3).ticket == 3
    assert typing.get_type_hints(Attempt)["answer"] is Any
