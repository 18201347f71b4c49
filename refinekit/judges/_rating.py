"""A point-wise rating with one sentence of feedback, parsed with instructor."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

from .._core.errors import JudgeMisconfigured
from .._core.types import EvaluationRequest, Verdict
from .._engine.flow import Flow
from .._engine.policy import JudgeErrorPolicy
from .._engine.prompts import DATA_RULE, context_text, delimit, tool_calls_block
from ._base import Judge
from ._cache import cached
from ._calls import Structured
from ._client import JudgeModel

DEFAULT_RUBRIC = (
    "1: wrong, off-topic or unsupported by the context. "
    "2: partly right, but misses or distorts something that matters. "
    "3: correct and supported, with minor gaps. "
    "4: correct, complete and fully supported by the context."
)

_MODES = ("JSON", "MD_JSON", "TOOLS", "JSON_SCHEMA")


class _Rating(Judge):
    name = "rating"

    def __init__(
        self,
        judge_model: JudgeModel,
        scale: int,
        passing: int,
        rubric: str | None,
        mode: str,
        max_retries: int,
        policy: JudgeErrorPolicy | None,
    ) -> None:
        super().__init__(judge_model, policy)
        if isinstance(scale, bool) or not isinstance(scale, int) or not 2 <= scale <= 100:
            raise ValueError(f"scale must be an int from 2 to 100, got {scale!r}")
        if isinstance(passing, bool) or not isinstance(passing, int) or not 1 <= passing <= scale:
            raise ValueError(f"passing must be an int from 1 to scale ({scale}), got {passing!r}")
        if rubric is None and scale != 4:
            raise ValueError("a rating on a scale other than 4 needs its own rubric=")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if judge_model.provider == "anthropic" and mode == "JSON_SCHEMA":
            raise JudgeMisconfigured(
                "rating(mode='JSON_SCHEMA') needs an OpenAI-compatible endpoint; with an "
                "Anthropic client use mode='JSON' (the default) or 'TOOLS'",
                model=judge_model.model,
            )
        if (
            isinstance(max_retries, bool)
            or not isinstance(max_retries, int)
            or not (0 <= max_retries <= 5)
        ):
            raise ValueError(f"max_retries must be an int from 0 to 5, got {max_retries!r}")
        self.scale = scale
        self.passing = passing
        self.rubric = rubric or DEFAULT_RUBRIC
        self.mode = mode
        self.max_retries = max_retries
        self.response_model: type[BaseModel] = create_model(
            "Rating",
            rating=(int, Field(ge=1, le=scale, description=f"the rating, 1 to {scale}")),
            feedback=(
                str,
                Field(description="one sentence: what is wrong or missing, or why it is good"),
            ),
        )

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        task = (
            f"Rate the answer to the question on a scale from 1 to {self.scale}, using the "
            f"context and this rubric: {self.rubric}\n"
            'Reply with JSON: {"rating": <1 to '
            f'{self.scale}>, "feedback": "<one sentence: what is wrong or missing>"}}.'
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": DATA_RULE},
            {
                "role": "user",
                "content": "\n\n".join(
                    [
                        task,
                        delimit("question", request.question),
                        delimit("context", context_text(request)),
                        *tool_calls_block(request),
                        delimit("answer", request.answer),
                    ]
                ),
            },
        ]
        kwargs = self.judge_model.request(messages, 200)
        result = yield cached(
            self.name,
            Structured(self.judge_model, self.response_model, kwargs, self.mode, self.max_retries),
        )
        rating: int = result.rating
        feedback: str = result.feedback
        passed = rating >= self.passing
        return Verdict(
            passed=passed,
            score=rating / self.scale,
            feedback=feedback,
            metadata={
                "judge": self.name,
                "rating": rating,
                "scale": self.scale,
                "passing": self.passing,
            },
        )


def rating(
    judge_model: JudgeModel,
    scale: int = 4,
    passing: int = 3,
    rubric: str | None = None,
    *,
    mode: str = "JSON",
    max_retries: int = 1,
    judge_error_policy: JudgeErrorPolicy | None = None,
) -> Judge:
    """A 1-to-`scale` rating with one sentence of feedback, read with `instructor`.

    The verdict's `score` is `rating / scale`, it passes at `passing` or above, and its
    `feedback` is the judge's sentence (what the next attempt is told).

    Args:
        judge_model: The judge.
        scale: The highest rating, 2 to 100.
        passing: The lowest passing rating.
        rubric: What each rating means; a 4-point rubric is built in (required for other
            scales).
        mode: instructor's mode: "JSON" (`response_format` JSON, the default), "MD_JSON" (JSON
            read from the text, for servers without JSON mode), "TOOLS" or "JSON_SCHEMA".
            With an Anthropic client, "TOOLS" is tool use and "JSON" and "MD_JSON" are JSON
            read from the reply's text (instructor's `ANTHROPIC_TOOLS` / `ANTHROPIC_JSON`);
            "JSON_SCHEMA" raises `JudgeMisconfigured`.
        max_retries: instructor's retries when the reply does not validate, 0 to 5; then
            `JudgeReplyError`.
        judge_error_policy: None (the caller's policy decides), "fail_open" or "fail_closed".

    Returns:
        The judge, an evaluator.
    """
    return _Rating(judge_model, scale, passing, rubric, mode, max_retries, judge_error_policy)
