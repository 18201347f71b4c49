"""`@self_correct`'s parts: the conversation checked, and what a correction is made of."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.errtext import correction_text, utf8_text
from .._structure.corrections import CorrectionRequest
from .._structure.diagnose import Diagnosis, diagnose
from .._structure.parse import CorrectionFailure, Parser, python_json
from .._structure.resume import ResumePoint

__all__ = [
    "conversation_of",
    "diagnosis_of",
    "placeholder_failure",
    "request_of",
    "resumed_turn",
    "sendable",
]


def conversation_of(messages: object, function: str) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"{function} is decorated with @self_correct, so its first argument must be the "
            "conversation: a list of message dicts such as {'role': 'user', 'content': '...'}; "
            f"got {type(messages).__name__}"
        )
    copied: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise TypeError(
                f"{function}: message {i} of the conversation must be a dict with a 'role', "
                f"got {type(m).__name__}"
            )
        copied.append(dict(m))
    return copied


def sendable(message: Mapping[str, Any]) -> dict[str, Any]:
    copied = dict(message)
    content = copied.get("content")
    if isinstance(content, str):
        copied["content"] = correction_text(content)
    return copied


def diagnosis_of(
    parser: Parser[Any],
    failure: CorrectionFailure,
    finish: str | None,
    context: Mapping[str, Any] | None,
) -> Diagnosis:
    """What was wrong with a failed reply, in plain words (`diagnose`)."""
    unrepaired = not failure.parsed and failure.value is not None
    return diagnose(
        failure.text,
        template=parser.template,
        adapter=parser.adapter,
        value=failure.value,
        parsed=failure.parsed or unrepaired,
        errors=failure.detailed if failure.parsed else (),
        prose=failure.prose,
        finish_reason=finish,
        placeholders=failure.placeholders,
        shape_error=failure.shape_error,
        unrepaired=failure.summary if unrepaired else None,
        detail=None if failure.parsed else failure.summary,
        context=context,
        grounded=parser.grounded,
    )


def request_of(
    parser: Parser[Any],
    number: int,
    max_corrections: int,
    diagnosis: Diagnosis,
    failure: CorrectionFailure,
    text: str,
    finish: str | None,
    conversation: list[dict[str, Any]],
    resume: ResumePoint | None = None,
) -> CorrectionRequest:
    """What the correction builder gets for a failed reply (`resume`: what the next keeps)."""
    template = None
    if parser.template is not None:
        keep = diagnosis.kept is not None and diagnosis.kind not in ("schema_echo", "placeholder")
        template = (
            parser.template.render(diagnosis.kept, diagnosis.bad, diagnosis.suggested)
            if keep
            else parser.template.render()
        )
    return CorrectionRequest(
        number=number,
        max_corrections=max_corrections,
        kind=diagnosis.kind,
        problems=diagnosis.problems,
        errors=tuple(failure.errors),
        reply=utf8_text(text),
        finish_reason=finish,
        schema=parser.schema,
        json_schema=parser.json_schema,
        template=None if template is None else utf8_text(template),
        messages=tuple(dict(m) for m in conversation),
        resume=None if resume is None else resume.way,
        kept={} if resume is None else {resume.keys[n]: v for n, v in resume.shown.items()},
        prefix=None if resume is None or resume.way != "prefill" else resume.prefix,
    )


def resumed_turn(turn: list[dict[str, Any]], resume: ResumePoint | None) -> list[dict[str, Any]]:
    """A correction's messages, then (prefill) the kept prefix as the assistant's reply's start.

    A builder whose turn already ends with an assistant message wrote its own prefill.
    """
    if resume is None or resume.way != "prefill" or (turn and turn[-1].get("role") == "assistant"):
        return turn
    return [*turn, {"role": "assistant", "content": utf8_text(resume.prefix)}]


def placeholder_failure(text: str, copied: tuple[str, ...]) -> CorrectionFailure:
    shown = ", ".join(json.dumps(p) for p in copied)
    summary = f"the reply copied the template's placeholder(s) {shown} instead of values"
    errors: list[dict[str, Any]] = [
        {"type": "placeholder", "loc": (), "msg": "a placeholder, not a value", "input": p}
        for p in copied
    ]
    _, value = python_json(text)
    return CorrectionFailure(
        summary, errors, text=text, parsed=True, value=value, placeholders=copied
    )
