"""What a correction turn says: the request a correction builder gets, and the default builder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .diagnose import FailureKind, ReplyProblem
from .resume import ResumeWay

__all__ = ["CHECK_MARKER", "CorrectionRequest", "default_correction"]

CHECK_MARKER = "[Automated format check, not a message from the user]"
"""How every default correction turn begins, so the model (and a reader) can tell it from the
user."""


@dataclass(frozen=True)
class CorrectionRequest:
    """Everything a correction builder (`@self_correct(correction=...)`) needs to write a turn.

    Attributes:
        number: Which correction of the job this is (1 for the first).
        max_corrections: The job's correction budget.
        kind: What went wrong (see `refinekit.FailureKind`): `"empty"`, `"cut_off"`,
            `"schema_echo"`, `"not_json"`, `"invalid"`, `"placeholder"` or `"tool_calls"`.
        problems: The problems in plain words, field by field (at most six).
        errors: The raw errors, as `CorrectionExhausted.errors` would hold them (pydantic's
            dicts for a validation failure, one `msg` entry for a parse failure).
        reply: The failed reply's text (lone surrogates replaced, so it can be sent).
        finish_reason: Why the model stopped (`"length"`: cut off), when the reply says.
        schema: The schema type (`self_correct(schema=...)`).
        json_schema: Its JSON schema, for a builder that wants to show it (the default does
            not: small models copy it back), or None when pydantic cannot write one.
        template: The expected reply as a JSON instance with `<...>` placeholders, keeping the
            failed reply's values that nothing implicates (no error is about them, no
            validator's message names them, the source text holds them), or None when the
            type has no JSON schema.
        messages: The conversation the call started from (copies; never the caller's objects).
        resume: How the request after this correction keeps the failed reply's validated
            fields (`@self_correct(early_abort="resume")`): `"prefill"` (the reply's text up to
            the failed field, `prefix`, is sent after the turn as the start of the
            assistant's reply, which the model continues), `"restate"` (the turn states
            them, and the whole object is asked for), or None (no resume: the reply is
            written again).
        kept: The validated fields kept, by key (as the reply wrote it), each in its JSON
            form, in the reply's order (empty without a resume).
        prefix: Under prefill, the assistant message's text the model continues.
    """

    number: int
    max_corrections: int
    kind: FailureKind
    problems: tuple[ReplyProblem, ...]
    errors: tuple[Mapping[str, Any], ...]
    reply: str
    finish_reason: str | None
    schema: Any
    json_schema: Mapping[str, Any] | None
    template: str | None
    messages: tuple[Mapping[str, Any], ...] = field(repr=False)
    resume: ResumeWay | None = None
    kept: Mapping[str, Any] = field(default_factory=dict)
    prefix: str | None = field(default=None, repr=False)

    def default(self) -> str:
        """The text the default builder writes for this request (to extend rather than redo)."""
        return default_correction(self)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def default_correction(request: CorrectionRequest) -> str:
    """The default correction turn: the problems in plain words, then an instance template.

    The turn starts with `CHECK_MARKER`, lists each problem on its own line (`Use "total", not
    "amount_paid".`), and ends with the expected reply as a JSON instance to fill in, which keeps
    the failed reply's values that nothing implicates::

        [Automated format check, not a message from the user]
        Use "total", not "amount_paid".
        Reply with only a JSON object like this one, with the <...> placeholders filled in:
        {"number": "A-17", "vendor": "Acme Ltd", "currency": "EUR", "total": <number>}

    The JSON schema is never repeated: shown one, small models answer with the schema itself.
    """
    lines = [CHECK_MARKER, *(_sentence(p.message) for p in request.problems)]
    if request.kept:
        shown = ", ".join(
            f"{json.dumps(name)}: {json.dumps(value, ensure_ascii=False)}"
            for name, value in request.kept.items()
        )
        lines.append(f"These fields are right; keep them exactly as they are: {shown}.")
    if request.resume == "prefill":  # no template: its placeholders are what models copy
        lines.append("Continue your reply from where it stops, with the right value.")
        return "\n".join(lines)
    if request.template is None:
        lines.append("Reply with only the corrected JSON, no other text.")
    else:
        shape = request.template.lstrip()[:1]
        what = {"{": "a JSON object", "[": "a JSON list"}.get(shape, "a JSON value")
        lines.append(
            f"Reply with only {what} like this one, with the <...> placeholders filled in:"
        )
        lines.append(request.template)
    return "\n".join(lines)
