"""The demo's two scenarios, run: each shown as it happens, and whether it ended as expected."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import openai

from ... import judges
from ..._core.errors import CorrectionExhausted, LowQualityAnswer, RefinekitError
from ..._core.types import Usage, Verdict
from ..._engine.events import Event, subscribe
from ..._engine.job import Job, current_attempt, job
from ._output import Output, text_of, usage_line
from ._scenarios import (
    EXPECTED_INVOICE,
    INVOICE_TEXT,
    POLICY,
    QUESTION,
    Invoice,
    invoice_extractor,
    invoice_messages,
    refund_answerer,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["Setting", "invoice", "refund"]

_KINDS = {
    "empty": "an empty reply",
    "cut_off": "cut off at the token limit",
    "schema_echo": "the schema echoed back",
    "not_json": "not JSON",
    "invalid": "JSON that fails validation",
    "placeholder": "a copied placeholder",
    "tool_calls": "several tool calls",
}
"""What each `FailureKind` is, in words."""


@dataclass(frozen=True)
class Setting:
    """Where the demo runs, and what "as expected" means there.

    Attributes:
        say: Where the demo writes.
        client: The `openai` client of both models.
        model: The answering model's name.
        judge_model: The judge model's name.
        scripted: On the scripted server: "as expected" is the scripted story.
        local: On the tiny local model: "as expected" is a typed outcome.
        check: Raises when the local model's server died (`--local`).
    """

    say: Output
    client: openai.OpenAI
    model: str
    judge_model: str
    scripted: bool
    local: bool = False
    check: Callable[[BaseException], None] | None = None


class _Scene:
    """One scenario's job as it goes: its events and replies shown, its verdicts kept."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.say = setting.say
        self.model = setting.model
        self.gave_up = False
        self.job_id: str | None = None
        self.verdicts: list[Verdict] = []
        self.calls = 0
        self.last_reply = ""
        self.drafts: list[str] = []
        self.correction: tuple[int, str | None, str] | None = None  # number, kind, text

    # events

    def on_event(self, event: Event) -> None:
        if event.job_id != self.job_id:
            return
        say = self.say
        if event.kind == "verdict" and event.verdict is not None:
            self.verdicts.append(event.verdict)
            self.show_verdict(event.verdict)
            self.after_verdict(event.verdict, event.attempt)
        elif event.kind == "retry":
            say(
                f"   feedback sent back (attempt {event.attempt + 1} follows, after a "
                f"{event.wait or 0.0:.2f} s wait):"
            )
            say.quoted(event.feedback or "")
        elif event.kind == "unjudged" and event.verdict is not None:
            self.verdicts.append(event.verdict)
            say.wrapped(
                f"   verdict: {say.bad('UNJUDGED')} (returned unjudged, never counted as passed): ",
                event.verdict.reason or "",
                6,
            )
        elif event.kind == "correction":
            self.after_correction(valid=False, failure=event.failure)
            kind = _KINDS.get(event.failure or "", event.failure)
            number = f"{event.attempt}/{event.max_attempts}"
            say(f"   correction {number} ({kind}) goes back as a user turn:")
            say.quoted(event.detail or "")
            self.correction = (event.attempt, event.failure, event.detail or "")

    def after_correction(self, *, valid: bool, failure: str | None) -> None:
        """Say whether the model acted on the last correction, from the reply that followed."""
        if self.correction is None:
            return
        number, before, text = self.correction
        self.correction = None
        said = [line for line in text.splitlines()[1:] if len(line) > 20]
        copied = any(line in self.last_reply for line in said)
        now = _KINDS.get(failure or "", failure)
        if valid:
            line = self.say.good(f"the model acted on correction {number}: its reply is valid")
        elif copied:
            line = self.say.bad(
                f"the model did not act on correction {number}: it copied the correction's "
                "text back instead of answering"
            )
        elif failure != before:
            line = f"the model acted on correction {number} in part: its reply is {now} now"
        else:
            line = self.say.bad(
                f"the model did not act on correction {number}: its reply is {now} again"
            )
        self.say(f"   -> {line}")

    def after_verdict(self, verdict: Verdict, attempt: int) -> None:
        """Say what a verdict means: a retry that paid off, or a judge that could not decide."""
        if verdict.passed:
            if attempt > 1:
                line = f"the model acted on the feedback: attempt {attempt} passed"
                self.say(f"   -> {self.say.good(line)}")
            return
        failed = [c for c in verdict.criteria if c.outcome not in ("pass", "skipped")]
        if failed and all(c.outcome == "uncertain" for c in failed):
            self.say.wrapped(
                "   -> ",
                "the judge could not decide (its p is between the thresholds); an uncertain "
                "verdict counts as a rejection",
                6,
            )

    def show_verdict(self, verdict: Verdict) -> None:
        say = self.say
        word = say.good("passed") if verdict.passed else say.bad("rejected")
        say(f"   verdict: {word}")
        width = max((len(c.name) for c in verdict.criteria), default=0)
        outcomes = max((len(c.outcome) for c in verdict.criteria), default=0)
        for c in verdict.criteria:
            outcome = f"{c.outcome:<{outcomes}}"
            if c.outcome == "pass":
                outcome = say.good(outcome)
            elif c.outcome != "skipped":
                outcome = say.bad(outcome)
            p = "p=n/a " if c.probability is None else f"p={c.probability:.2f}"
            source = f"from {c.source}" if c.source else ""
            say(f"     {c.name:<{width}}  {outcome}  {p}  {source}".rstrip())

    def show_reply(self, head: str, reply: ChatCompletion) -> None:
        self.say(f"   {head}, {self.model} replied:")
        self.say.quoted(text_of(reply))

    def show_draft(self, reply: ChatCompletion) -> None:
        attempt = current_attempt()
        self.show_reply(
            f"attempt {attempt.number}/{attempt.max_attempts}" if attempt else "answer", reply
        )
        text = text_of(reply)
        if self.drafts and text == self.drafts[-1]:
            line = (
                "the model did not act on the feedback: the same answer as attempt "
                f"{len(self.drafts)}"
            )
            self.say(f"   -> {self.say.bad(line)}")
        elif self.drafts:
            self.say("   -> the answer changed after the feedback")
        self.drafts.append(text)

    def show_extraction(self, messages: list[dict[str, Any]], reply: ChatCompletion) -> None:
        self.calls += 1
        self.last_reply = text_of(reply)
        self.show_reply(f"reply {self.calls} ({len(messages)} messages sent)", reply)

    def show_usage(self, usage: Usage, judge_usage: Usage) -> None:
        self.say(f"   {usage_line(f'answer model ({self.model})', usage)}")
        self.say(f"   {usage_line(f'judge model ({self.setting.judge_model})', judge_usage)}")

    def outcome(self, expected: bool, text: str) -> bool:
        word = self.say.good("as expected") if expected else self.say.bad("NOT as expected")
        self.say.wrapped(f"   outcome: {word}: ", text, 6)
        return expected

    def typed_outcome(self, got: bool, success: str, refusal: str) -> bool:
        """On the tiny local model: as expected when the caller got a value or a typed error."""
        if got:
            return self.outcome(True, f"the caller got {success}.")
        if self.gave_up:
            self.gave_up = False
            return self.outcome(
                True,
                f"the caller got {refusal}: a typed refusal, never a value with a hole in it "
                "(expected often from a 135M model).",
            )
        return self.outcome(False, "the run failed outside the decorators' promise (see above).")

    def failed(self, exc: BaseException) -> None:
        if self.setting.check is not None:
            self.setting.check(
                exc
            )  # a dead server: its LocalModelError, not a bare connection error
        self.say.wrapped(f"   {self.say.bad('failed')}: ", f"{type(exc).__name__}: {exc}", 6)


# scenarios


def refund(setting: Setting) -> bool:
    """The refund scenario, shown; whether it ended as expected."""
    say = setting.say
    say(say.head("1. Refund answer: @retry_on_low_quality with a criteria judge"))
    say("   evaluator: all_of(not_empty(), criteria(judge, [answers_question, keeps_conditions]))")
    say(f"   question:  {QUESTION}")
    say(f"   context:   [{POLICY.source}] {POLICY.text}")
    scene = _Scene(setting)
    judge = judges.JudgeModel(setting.client, setting.judge_model)
    answer = refund_answerer(setting.client, setting.model, judge, on_reply=scene.show_draft)
    result: ChatCompletion | None = None
    with job() as current, subscribe(scene.on_event):
        scene.job_id = current.id
        try:
            result = answer(QUESTION)
        except LowQualityAnswer as e:
            scene.gave_up = True
            say.wrapped(
                f"   {say.bad('gave up')} after {len(e.attempts)} attempts; last feedback: ",
                e.feedback,
                6,
            )
        except (openai.OpenAIError, RefinekitError, ValueError) as e:
            scene.failed(e)
    if result is not None:
        say("   caller got:")
        say.quoted(text_of(result))
    scene.show_usage(current.usage, current.judge_usage)
    return _refund_expected(setting, scene, result)


def _refund_expected(setting: Setting, scene: _Scene, result: ChatCompletion | None) -> bool:
    verdicts = scene.verdicts
    passed = result is not None and bool(verdicts) and verdicts[-1].passed
    if setting.local:
        return scene.typed_outcome(
            passed,
            f"an answer that passed the judge, on attempt {len(verdicts)}",
            "LowQualityAnswer, with every attempt and its verdict",
        )
    if not setting.scripted:
        if passed:
            return scene.outcome(
                True, f"the caller got an answer that passed, on attempt {len(verdicts)}."
            )
        return scene.outcome(False, "the caller got no answer that passed the judge.")
    first = verdicts[0] if verdicts else None
    dropped = first is not None and any(
        c.name == "keeps_conditions" and c.outcome == "fail" for c in first.criteria
    )
    if passed and len(verdicts) == 2 and dropped:
        return scene.outcome(
            True,
            "attempt 1 was rejected (keeps_conditions failed), its feedback went back in "
            "the prompt, attempt 2 kept the conditions and passed.",
        )
    return scene.outcome(
        False, "expected attempt 1 rejected for dropping the conditions, then attempt 2 passed."
    )


def invoice(setting: Setting) -> bool:
    """The invoice scenario, shown; whether it ended as expected."""
    say = setting.say
    say(say.head("2. Invoice extraction: @self_correct(schema=Invoice)"))
    say("   schema:    Invoice(number: str, total_cents: int, currency: str)")
    say("   prompt:    the format from refinekit.schema_prompt(Invoice), then the invoice")
    say(f"   invoice:   {INVOICE_TEXT}")
    scene = _Scene(setting)
    extract = invoice_extractor(setting.client, setting.model, on_reply=scene.show_extraction)
    conversation = invoice_messages(INVOICE_TEXT)
    result: Invoice | None = None
    refusal = "CorrectionExhausted"
    with job() as current, subscribe(scene.on_event):
        scene.job_id = current.id
        try:
            result = extract(conversation)
        except CorrectionExhausted as e:
            scene.after_correction(valid=False, failure=e.failure)
            scene.gave_up, refusal = True, type(e).__name__
            say.wrapped(f"   {say.bad('gave up')}: ", f"{type(e).__name__}: {e}", 6)
        except (openai.OpenAIError, RefinekitError, ValueError) as e:
            scene.failed(e)
        else:
            scene.after_correction(valid=True, failure=None)
    if result is not None:
        say(f"   caller got: {result!r}")
        say(
            f"   caller's conversation still has {len(conversation)} messages: the "
            "correction turns went into a copy"
        )
    scene.show_usage(current.usage, current.judge_usage)
    return _invoice_expected(setting, scene, current, result, refusal)


def _invoice_expected(
    setting: Setting, scene: _Scene, current: Job, result: Invoice | None, refusal: str
) -> bool:
    used = current.corrections_used
    if setting.local:
        return scene.typed_outcome(
            result is not None,
            f"a typed Invoice after {used} correction(s)"
            + ("" if result == EXPECTED_INVOICE else " (not the one the text says)"),
            f"{refusal} after {used} correction(s)",
        )
    if not setting.scripted:
        if result is None:
            return scene.outcome(False, "the caller got no valid Invoice.")
        note = "" if result == EXPECTED_INVOICE else f" (the text says {EXPECTED_INVOICE!r})"
        return scene.outcome(True, f"{used} correction(s), then a typed Invoice{note}.")
    if result == EXPECTED_INVOICE and used == 2:
        return scene.outcome(
            True, "two corrections (not JSON, then a missing field), then a typed Invoice."
        )
    return scene.outcome(False, "expected two corrections, then the Invoice of the text.")
