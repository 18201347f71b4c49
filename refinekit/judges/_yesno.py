"""Yes/no judges: relevancy and fact checking."""

from __future__ import annotations

from typing import Any, Literal

from .._core.types import EvaluationRequest, Verdict
from .._engine.flow import Flow
from .._engine.policy import JudgeErrorPolicy
from .._engine.prompts import DATA_RULE, context_text, delimit, tool_calls_block
from ._base import Judge, yes_no
from ._cache import Cached, cached
from ._calls import Complete, Structured, reply_text_of
from ._client import JudgeModel

RELEVANCY_TASK = (
    "Your task is to evaluate whether the answer to the question is in line with the context "
    "information provided. Reply with one word: YES if the answer is in line with the context "
    "for the question, otherwise NO."
)

FACT_CHECK_TASK = (
    "Your task is to evaluate whether the claim is supported by the document. Reply with one "
    "word: YES if the document supports every part of the claim, otherwise NO."
)


def _messages(task: str, *parts: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": DATA_RULE},
        {"role": "user", "content": task + "\n\n" + "\n\n".join(parts)},
    ]


class _YesNo(Judge):
    """A judge that asks one yes/no question: `failed` is a failing answer's feedback."""

    failed: str

    def _read(self, completion: Any) -> tuple[bool, str]:
        """Whether the reply says yes, and its text."""
        text = reply_text_of(self.judge_model, completion)
        return yes_no(self.judge_model, text), text

    def _ask(self, messages: list[dict[str, Any]]) -> Complete | Structured | Cached:
        """The question's command (a cached model call, an 8-token reply)."""
        return cached(
            self.name,
            Complete(self.judge_model, self.judge_model.request(messages, 8)),
            self._read,
        )

    def _verdict(self, completion: Any) -> Verdict:
        passed, text = self._read(completion)
        return Verdict(
            passed=passed,
            score=1.0 if passed else 0.0,
            feedback="" if passed else self.failed,
            metadata={"judge": self.name, "reply": text[:200]},
        )


class _Relevancy(_YesNo):
    name = "relevancy"
    failed = (
        "The answer is not in line with the context for the question: answer the question from "
        "the context given."
    )

    def __init__(
        self, judge_model: JudgeModel, strict: bool, policy: JudgeErrorPolicy | None
    ) -> None:
        super().__init__(judge_model, policy)
        self.strict = strict

    def _read(self, completion: Any) -> tuple[bool, str]:
        """Whether the reply says the answer passes, and its text."""
        text = reply_text_of(self.judge_model, completion)
        # strict is Spring AI's rule: the whole reply is "yes", nothing else
        passed = text.strip().lower() == "yes" if self.strict else yes_no(self.judge_model, text)
        return passed, text

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        messages = _messages(
            RELEVANCY_TASK,
            delimit("question", request.question),
            delimit("context", context_text(request)),
            *tool_calls_block(request),
            delimit("answer", request.answer),
        )
        completion = yield self._ask(messages)
        return self._verdict(completion)


class _FactCheck(_YesNo):
    name = "fact_check"
    failed = (
        "The answer states something the context does not support: keep to what the context says."
    )

    def __init__(
        self,
        judge_model: JudgeModel,
        prompt: Literal["default", "minicheck"],
        policy: JudgeErrorPolicy | None,
    ) -> None:
        super().__init__(judge_model, policy)
        if prompt not in ("default", "minicheck"):
            raise ValueError(f"prompt must be 'default' or 'minicheck', got {prompt!r}")
        self.prompt = prompt

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        document = "\n\n".join(d.text for d in request.context)
        if self.prompt == "minicheck":
            # The exact short prompt small fact-checking models (Bespoke-MiniCheck) are trained
            # on: its labels are the delimiters, and there is no room for instructions.
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": f"Document: {document}\nClaim: {request.answer}"}
            ]
        else:
            messages = _messages(
                FACT_CHECK_TASK,
                delimit("document", document),
                *tool_calls_block(request),
                delimit("claim", request.answer),
            )
        completion = yield self._ask(messages)
        return self._verdict(completion)


def relevancy(
    judge_model: JudgeModel,
    strict: bool = False,
    *,
    judge_error_policy: JudgeErrorPolicy | None = None,
) -> Judge:
    """Is the answer in line with the context for the question (a yes/no model judge).

    Args:
        judge_model: The judge.
        strict: True: pass only when the whole reply, stripped, is "yes" ignoring case (Spring
            AI's rule). False: read the reply's first word, so "Yes, it is." passes and "No."
            fails; a reply starting with neither is a `JudgeReplyError`.
        judge_error_policy: None (the caller's policy decides), "fail_open" or "fail_closed".

    Returns:
        The judge, an evaluator.
    """
    return _Relevancy(judge_model, strict, judge_error_policy)


def fact_check(
    judge_model: JudgeModel,
    prompt: Literal["default", "minicheck"] = "default",
    *,
    judge_error_policy: JudgeErrorPolicy | None = None,
) -> Judge:
    """Is the answer (the claim) supported by the context (the document).

    Args:
        judge_model: The judge.
        prompt: "default" asks the question with the document and claim inside delimiters;
            "minicheck" sends the short `Document: ... Claim: ...` prompt that small
            fact-checking models such as Bespoke-MiniCheck expect.
        judge_error_policy: None (the caller's policy decides), "fail_open" or "fail_closed".

    Returns:
        The judge, an evaluator.
    """
    return _FactCheck(judge_model, prompt, judge_error_policy)
