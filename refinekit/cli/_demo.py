"""`refinekit demo`: both decorators end to end over HTTP, with the real `openai` client.

Two scenarios, each a plain function that calls a model with `client.chat.completions.create`:

1. Refund answer. `@retry_on_low_quality(evaluator=all_of(not_empty(), criteria(judge, ...)))`
   over a function answering from a policy document. The first draft promises an unconditional
   refund; the criteria judge rejects it ("drops the conditions"); the feedback goes back in the
   prompt; the second draft keeps "unused, within seven days" and passes.
2. Invoice extraction. `@self_correct(schema=Invoice)` over a function sending the conversation
   to the model. The first reply is not JSON, the second misses a required field, the third is
   valid: two corrections, then a typed `Invoice`.

Without an endpoint, a `ScriptedOpenAI` server on 127.0.0.1 plays the answering model
(`demo-answer`) and the judge (`demo-judge`). Its replies are callables that read each request
(the judge reads the criterion and the answer it is asked about, the answering model whether the
feedback or a correction turn arrived), so the run is deterministic whatever the order of the
judge's concurrent requests, and it proves the wiring, not a model's quality. With an `Endpoint`
the same functions and decorators run against a real OpenAI-compatible server.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, cast

import openai
from pydantic import BaseModel

from .. import checks, judges
from .._correct import CHECK_MARKER, self_correct
from .._errors import CorrectionExhausted, LowQualityAnswer, RefinekitError
from .._hooks import Event, subscribe
from .._job import current_attempt, job, record_context
from .._model import ContextDocument, Usage, Verdict
from .._retry import retry_on_low_quality
from ..judges._base import safe_url
from ..testing import RecordedRequest, Reply, ScriptedOpenAI
from ._pipe import PipeSafe

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

__all__ = [
    "CRITERIA",
    "EXPECTED_INVOICE",
    "POLICY",
    "QUESTION",
    "RETRY_WAIT",
    "SCRIPTED_JUDGE",
    "SCRIPTED_MODEL",
    "DemoConfigError",
    "Endpoint",
    "Invoice",
    "endpoint_from_options",
    "invoice_extractor",
    "invoice_messages",
    "refund_answerer",
    "refund_messages",
    "run_demo",
    "script_demo",
    "scripted_answer",
    "scripted_judge",
]

SCRIPTED_MODEL = "demo-answer"
"""The answering model's name on the scripted server."""

SCRIPTED_JUDGE = "demo-judge"
"""The judge model's name on the scripted server."""

RETRY_WAIT = 0.1
"""Seconds between quality retries, the decorator's own `wait=`.

The demo keeps the wait short this way rather than with `refinekit.testing.set_testing()`, so
the wait it reports is the wait it takes, on the scripted server and on a real endpoint alike.
"""

QUESTION = "Can I get a refund for my order?"

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)

CRITERIA = (
    judges.Criterion(
        "answers_question",
        "Does the answer tell the customer whether they can get a refund?",
        when_false="Answer the question: say whether the customer can get a refund.",
    ),
    judges.Criterion(
        "keeps_conditions",
        "Does the answer keep every condition the context puts on a refund: that the order "
        "is unused, and that the refund is asked for within seven days?",
        when_false="The answer drops the conditions of the refund policy: keep 'unused' and "
        "'within seven days'.",
    ),
)

INVOICE_TEXT = "Invoice INV-7 from Acme Audio GmbH, issued 3 March 2025. Total due: 12.50 EUR."


class Invoice(BaseModel):
    """What the extraction scenario asks for."""

    number: str
    total_cents: int
    currency: str


EXPECTED_INVOICE = Invoice(number="INV-7", total_cents=1250, currency="EUR")

_WIDTH = 100


# --- the two functions, the same on the scripted server and on a real endpoint ------------------


def _ignore(reply: ChatCompletion) -> None:
    """The default `on_reply`: show nothing."""


def refund_messages(
    question: str, policy: ContextDocument, feedback: str | None
) -> list[ChatCompletionMessageParam]:
    """The answering model's prompt: the policy, the question and, on a retry, the feedback.

    Args:
        question: The customer's question.
        policy: The policy document to answer from.
        feedback: The latest rejection's feedback, or None on the first attempt.

    Returns:
        The chat messages.
    """
    user = f"Policy [{policy.source}]:\n{policy.text}\n\nQuestion: {question}"
    if feedback is not None:
        user += f"\n\nA reviewer rejected your previous answer: {feedback}\nAnswer again."
    return [
        {
            "role": "system",
            "content": "You answer customers' questions from the policy given, in one or two "
            "sentences, and end with the policy's source path in square brackets.",
        },
        {"role": "user", "content": user},
    ]


def refund_answerer(
    client: openai.OpenAI,
    model: str,
    judge: judges.JudgeModel,
    on_reply: Callable[[ChatCompletion], None] = _ignore,
) -> Callable[..., ChatCompletion]:
    """The refund scenario's function, decorated with `@retry_on_low_quality`.

    Args:
        client: The `openai` client of the answering model.
        model: The answering model's name.
        judge: The judge of the `criteria` evaluator.
        on_reply: Called with each reply, to show it.

    Returns:
        `answer(question, feedback=None)`, returning the `ChatCompletion` that passed.
    """
    evaluator = checks.all_of(checks.not_empty(), judges.criteria(judge, CRITERIA))

    @retry_on_low_quality(evaluator=evaluator, max_retries=2, wait=RETRY_WAIT)
    def answer(question: str, feedback: str | None = None) -> ChatCompletion:
        record_context(POLICY)  # what the judge checks the answer against
        reply = client.chat.completions.create(
            model=model, messages=refund_messages(question, POLICY, feedback), temperature=0
        )
        on_reply(reply)
        return reply  # a ChatCompletion: the job counts its tokens

    return answer


def invoice_messages(text: str) -> list[dict[str, Any]]:
    """The extraction request: a system message with the format, then the invoice.

    Args:
        text: The invoice's text.

    Returns:
        The conversation to pass to the extraction function.
    """
    return [
        {
            "role": "system",
            "content": "Extract the invoice's number, its total in cents and its ISO currency "
            'code. Reply with JSON only: {"number": str, "total_cents": int, "currency": str}.',
        },
        {"role": "user", "content": f"Extract the invoice: {text}"},
    ]


def invoice_extractor(
    client: openai.OpenAI,
    model: str,
    on_reply: Callable[[list[dict[str, Any]], ChatCompletion], None] = lambda m, r: None,
) -> Callable[[list[dict[str, Any]]], Invoice]:
    """The extraction scenario's function, decorated with `@self_correct(schema=Invoice)`.

    Args:
        client: The `openai` client of the answering model.
        model: The answering model's name.
        on_reply: Called with the messages sent and each reply, to show them.

    Returns:
        `extract(messages)`, returning a validated `Invoice`.
    """

    @self_correct(schema=Invoice)
    def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
        reply = client.chat.completions.create(
            model=model, messages=cast("list[ChatCompletionMessageParam]", messages), temperature=0
        )
        on_reply(messages, reply)
        return reply

    return extract


# --- the scripted server's replies ---------------------------------------------------------------

_DRAFTS = (
    "Yes, you can get a full refund for your order, no questions asked. [policies/refunds.md]",
    "Yes, if the order is unused: an unused order may be refunded within seven days of "
    "delivery. [policies/refunds.md]",
)
_EXTRACTIONS = (
    "Sure! The invoice number is INV-7 and the total is 12.50 EUR.",
    '{"number": "INV-7", "currency": "EUR"}',
    '{"number": "INV-7", "total_cents": 1250, "currency": "EUR"}',
)
_SCRIPTED_CHECKS: dict[str, Callable[[str], bool]] = {
    "answers_question": lambda answer: "refund" in answer.lower(),
    "keeps_conditions": lambda answer: "unused" in answer and "seven days" in answer,
}
_YES = {"YES": 0.97, "NO": 0.03}
_NO = {"NO": 0.96, "YES": 0.04}


def _texts(request: RecordedRequest) -> list[tuple[str, str]]:
    messages = (request.body or {}).get("messages") or []
    return [
        (str(m.get("role")), m["content"])
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    ]


def scripted_answer(request: RecordedRequest) -> str:
    """The scripted answering model: its reply depends on what the request carries.

    An extraction request gets the reply for the number of correction turns it carries (prose,
    then JSON missing `total_cents`, then valid JSON); a refund request gets the unconditional
    draft, or the conditional one when the judge's feedback arrived in the prompt.

    Args:
        request: The request the server received.

    Returns:
        The reply's text.
    """
    texts = _texts(request)
    if any("Extract the invoice" in content for _, content in texts):
        corrections = sum(
            1 for role, content in texts if role == "user" and content.startswith(CHECK_MARKER)
        )
        return _EXTRACTIONS[corrections]
    feedback = CRITERIA[1].when_false
    return _DRAFTS[1] if feedback in texts[-1][1] else _DRAFTS[0]


def scripted_judge(request: RecordedRequest) -> Reply:
    """The scripted judge: YES or NO, with logprobs, for the criterion the request asks about.

    It finds the criterion by its question and reads the answer between the `<answer>` tags,
    so the verdict does not depend on the order in which concurrent requests arrive.

    Args:
        request: The request the server received.

    Returns:
        The reply, with the probabilities of its first token.

    Raises:
        ValueError: The request asks about no criterion of the demo (the server answers 500).
    """
    prompt = _texts(request)[-1][1]
    answer = prompt.partition("<answer>\n")[2].partition("\n</answer>")[0]
    for criterion in CRITERIA:
        if isinstance(criterion.question, str) and criterion.question in prompt:
            holds = _SCRIPTED_CHECKS[criterion.name](answer)
            return Reply.text("YES", _YES) if holds else Reply.text("NO", _NO)
    raise ValueError("the request asks about no criterion of the demo")


def script_demo(
    server: ScriptedOpenAI, model: str = SCRIPTED_MODEL, judge_model: str = SCRIPTED_JUDGE
) -> None:
    """Script `server` with the demo's replies, exactly as many as the demo makes requests.

    The answering model gets 5 requests (2 refund drafts, 3 extraction replies), the judge 4
    (2 model criteria for each draft); one more request would get an HTTP 500 naming the model.

    Args:
        server: A running scripted server.
        model: The answering model's name.
        judge_model: The judge model's name.
    """
    server.script(model, [scripted_answer] * 5)
    server.script(judge_model, [scripted_judge] * 4)


# --- configuration -----------------------------------------------------------------------------


class DemoConfigError(ValueError):
    """The options name a real endpoint only in part."""


@dataclass(frozen=True)
class Endpoint:
    """A real OpenAI-compatible endpoint to run the demo against.

    Attributes:
        base_url: The API's base URL, e.g. `http://localhost:11434/v1`.
        model: The answering model's name.
        judge_model: The judge model's name.
        api_key: The key sent (never shown): `OPENAI_API_KEY`, else "not-needed".
        key_from_env: Whether `api_key` came from `OPENAI_API_KEY`.
    """

    base_url: str
    model: str
    judge_model: str
    api_key: str = field(default="not-needed", repr=False)
    key_from_env: bool = False


def endpoint_from_options(
    base_url: str | None,
    model: str | None,
    judge_model: str | None,
    environ: Mapping[str, str],
) -> Endpoint | None:
    """The endpoint the options name, or None to run on the scripted server.

    Args:
        base_url: `--base-url`; `OPENAI_BASE_URL` when not given.
        model: `--model`.
        judge_model: `--judge-model`.
        environ: The environment (`OPENAI_BASE_URL`, `OPENAI_API_KEY`).

    Returns:
        The endpoint, or None when none of the three is given.

    Raises:
        DemoConfigError: Only some of the three are given, or the base URL is not http(s).
    """
    env_url = environ.get("OPENAI_BASE_URL") or None
    url = base_url or env_url
    given = {"--base-url": url, "--model": model, "--judge-model": judge_model}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if not value]
    if missing:
        message = (
            "a real endpoint needs --base-url (or OPENAI_BASE_URL), --model and --judge-model; "
            f"missing: {', '.join(missing)}."
        )
        if env_url and not base_url:
            message += " (OPENAI_BASE_URL is set: unset it to run the scripted demo.)"
        message += " The API key, if the endpoint needs one, is read from OPENAI_API_KEY."
        raise DemoConfigError(message)
    assert url is not None
    assert model is not None
    assert judge_model is not None
    if not url.startswith(("http://", "https://")):
        raise DemoConfigError(
            f"--base-url must be an http:// or https:// URL, got {safe_url(url)!r} "
            "(e.g. http://localhost:11434/v1)"
        )
    key = environ.get("OPENAI_API_KEY") or None
    return Endpoint(url, model, judge_model, key or "not-needed", key is not None)


# --- output ------------------------------------------------------------------------------------


def _wants_colour(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


class _Output:
    """Writes lines, with colour only on a terminal, and never an API key."""

    def __init__(self, out: TextIO, secret: str | None) -> None:
        # a reader that goes away (`| head`) stops the demo, quietly: its work is what it shows
        self.out = cast(TextIO, PipeSafe(out, stop=True))
        self.colour = _wants_colour(out)
        self.secret = secret

    def __call__(self, text: str = "") -> None:
        if self.secret:
            text = text.replace(self.secret, "***")
        print(text, file=self.out, flush=True)

    def wrapped(self, first: str, text: str, indent: int) -> None:
        lines = textwrap.wrap(
            text, _WIDTH, initial_indent=first, subsequent_indent=" " * indent
        ) or [first]
        for line in lines:
            self(line)

    def quoted(self, text: str) -> None:
        """Show a model's text (or a message sent) as an indented block."""
        for paragraph in text.strip().splitlines() or [""]:
            for line in textwrap.wrap(paragraph, _WIDTH - 7) or [""]:
                self(f"     | {line}".rstrip())

    def _paint(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def good(self, text: str) -> str:
        return self._paint("32", text)

    def bad(self, text: str) -> str:
        return self._paint("31", text)

    def head(self, text: str) -> str:
        return self._paint("1", text)


def _text_of(reply: ChatCompletion) -> str:
    return (reply.choices[0].message.content or "") if reply.choices else ""


def _usage_line(who: str, usage: Usage) -> str:
    return (
        f"{who} calls: {usage.model_calls}, tokens: {usage.total_tokens} "
        f"({usage.prompt_tokens} prompt + {usage.completion_tokens} completion)"
    )


class _Run:
    """One run of the demo: both scenarios, the events they emit, and what was expected."""

    def __init__(
        self,
        say: _Output,
        client: openai.OpenAI,
        model: str,
        judge_model: str,
        scripted: bool,
        local: bool = False,
        check: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.say = say
        self.local = local
        self.check = check  # raises when the local model's server died (--local)
        self.gave_up = False
        self.client = client
        self.model = model
        self.judge_model = judge_model
        self.scripted = scripted
        self.job_id: str | None = None
        self.verdicts: list[Verdict] = []
        self.calls = 0

    # events

    def on_event(self, event: Event) -> None:
        if event.job_id != self.job_id:
            return
        say = self.say
        if event.kind == "verdict" and event.verdict is not None:
            self.verdicts.append(event.verdict)
            self.show_verdict(event.verdict)
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
            say(f"   correction {event.attempt}/{event.max_attempts} goes back as a user turn:")
            explanation, _, request = (event.detail or "").partition("\n\n")
            say.quoted(explanation)
            say.quoted(request.partition("\n")[0])
            say.quoted("<the JSON schema>")

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
        self.say.quoted(_text_of(reply))

    def show_draft(self, reply: ChatCompletion) -> None:
        attempt = current_attempt()
        self.show_reply(
            f"attempt {attempt.number}/{attempt.max_attempts}" if attempt else "answer", reply
        )

    def show_extraction(self, messages: list[dict[str, Any]], reply: ChatCompletion) -> None:
        self.calls += 1
        self.show_reply(f"reply {self.calls} ({len(messages)} messages sent)", reply)

    def show_usage(self, usage: Usage, judge_usage: Usage) -> None:
        self.say(f"   {_usage_line(f'answer model ({self.model})', usage)}")
        self.say(f"   {_usage_line(f'judge model ({self.judge_model})', judge_usage)}")

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
        if self.check is not None:
            self.check(exc)  # a dead server: its LocalModelError, not a bare connection error
        self.say.wrapped(f"   {self.say.bad('failed')}: ", f"{type(exc).__name__}: {exc}", 6)

    # scenarios

    def refund(self) -> bool:
        say = self.say
        say(say.head("1. Refund answer: @retry_on_low_quality with a criteria judge"))
        say(
            "   evaluator: all_of(not_empty(), "
            "criteria(judge, [answers_question, keeps_conditions]))"
        )
        say(f"   question:  {QUESTION}")
        say(f"   context:   [{POLICY.source}] {POLICY.text}")
        judge = judges.JudgeModel(self.client, self.judge_model)
        answer = refund_answerer(self.client, self.model, judge, on_reply=self.show_draft)
        self.verdicts = []
        result: ChatCompletion | None = None
        with job() as current, subscribe(self.on_event):
            self.job_id = current.id
            try:
                result = answer(QUESTION)
            except LowQualityAnswer as e:
                self.gave_up = True
                say.wrapped(
                    f"   {say.bad('gave up')} after {len(e.attempts)} attempts; last feedback: ",
                    e.feedback,
                    6,
                )
            except (openai.OpenAIError, RefinekitError, ValueError) as e:
                self.failed(e)
        if result is not None:
            say("   caller got:")
            say.quoted(_text_of(result))
        self.show_usage(current.usage, current.judge_usage)
        passed = result is not None and bool(self.verdicts) and self.verdicts[-1].passed
        if self.local:
            return self.typed_outcome(
                passed,
                f"an answer that passed the judge, on attempt {len(self.verdicts)}",
                "LowQualityAnswer, with every attempt and its verdict",
            )
        if not self.scripted:
            if passed:
                return self.outcome(
                    True, f"the caller got an answer that passed, on attempt {len(self.verdicts)}."
                )
            return self.outcome(False, "the caller got no answer that passed the judge.")
        first = self.verdicts[0] if self.verdicts else None
        dropped = first is not None and any(
            c.name == "keeps_conditions" and c.outcome == "fail" for c in first.criteria
        )
        if passed and len(self.verdicts) == 2 and dropped:
            return self.outcome(
                True,
                "attempt 1 was rejected (keeps_conditions failed), its feedback went back in "
                "the prompt, attempt 2 kept the conditions and passed.",
            )
        return self.outcome(
            False, "expected attempt 1 rejected for dropping the conditions, then attempt 2 passed."
        )

    def invoice(self) -> bool:
        say = self.say
        say(say.head("2. Invoice extraction: @self_correct(schema=Invoice)"))
        say("   schema:    Invoice(number: str, total_cents: int, currency: str)")
        say(f"   invoice:   {INVOICE_TEXT}")
        extract = invoice_extractor(self.client, self.model, on_reply=self.show_extraction)
        self.calls = 0
        conversation = invoice_messages(INVOICE_TEXT)
        result: Invoice | None = None
        refusal = "CorrectionExhausted"
        with job() as current, subscribe(self.on_event):
            self.job_id = current.id
            try:
                result = extract(conversation)
            except CorrectionExhausted as e:
                self.gave_up, refusal = True, type(e).__name__
                say.wrapped(f"   {say.bad('gave up')}: ", f"{type(e).__name__}: {e}", 6)
            except (openai.OpenAIError, RefinekitError, ValueError) as e:
                self.failed(e)
        if result is not None:
            say(f"   caller got: {result!r}")
            say(
                f"   caller's conversation still has {len(conversation)} messages: the "
                "correction turns went into a copy"
            )
        self.show_usage(current.usage, current.judge_usage)
        used = current.corrections_used
        if self.local:
            return self.typed_outcome(
                result is not None,
                f"a typed Invoice after {used} correction(s)"
                + ("" if result == EXPECTED_INVOICE else " (not the one the text says)"),
                f"{refusal} after {used} correction(s)",
            )
        if not self.scripted:
            if result is None:
                return self.outcome(False, "the caller got no valid Invoice.")
            note = "" if result == EXPECTED_INVOICE else f" (the text says {EXPECTED_INVOICE!r})"
            return self.outcome(True, f"{used} correction(s), then a typed Invoice{note}.")
        if result == EXPECTED_INVOICE and used == 2:
            return self.outcome(
                True, "two corrections (not JSON, then a missing field), then a typed Invoice."
            )
        return self.outcome(False, "expected two corrections, then the Invoice of the text.")


def _header_scripted(say: _Output, server: ScriptedOpenAI) -> None:
    say(say.head("refinekit demo: SCRIPTED replies, over real HTTP"))
    for line in textwrap.wrap(
        f"A ScriptedOpenAI server on {server.base_url} plays the answering model "
        f"({SCRIPTED_MODEL}) and the judge ({SCRIPTED_JUDGE}); both are called with the real "
        "openai client. The replies are scripted, so this run proves the wiring (requests, "
        "the judge's verdicts with logprobs, feedback, correction turns, usage), not a "
        "model's quality.",
        _WIDTH - 2,
    ):
        say(f"  {line}")
    say("  Against a real endpoint: refinekit demo --base-url URL --model NAME --judge-model NAME")
    say("  (the API key, if the endpoint needs one, is read from OPENAI_API_KEY).")


def _header_real(say: _Output, endpoint: Endpoint) -> None:
    say(say.head(f"refinekit demo: a REAL endpoint, {safe_url(endpoint.base_url)}"))
    key = (
        "from OPENAI_API_KEY (not shown)"
        if endpoint.key_from_env
        else "OPENAI_API_KEY not set, sending 'not-needed' (for local servers that ignore it)"
    )
    say(f"  answer model: {endpoint.model}; judge model: {endpoint.judge_model}")
    say(f"  API key: {key}")
    say("  The replies come from the models: the path may differ from the scripted run (a first")
    say("  draft may already pass, a first extraction may already be valid).")


def _header_local(say: _Output, local: Any) -> None:
    say(say.head(f"refinekit demo: a REAL tiny model on this machine, {local.base_url}"))
    for line in textwrap.wrap(
        "llama.cpp's OpenAI-compatible server runs SmolLM2-135M-Instruct on the CPU, as both "
        "the answering model and the judge. A 135M-parameter model is a weak answerer and a "
        "weaker judge: its verdicts are close to noise, and its answers are often wrong. The "
        "point of this run is the real protocol and real failures (invalid JSON, wrong "
        "types, a judge disagreeing with itself), handled by the decorators: the caller gets "
        "an answer that passed or a typed error, never a value with a hole in it.",
        _WIDTH - 2,
    ):
        say(f"  {line}")


def run_demo(out: TextIO, endpoint: Endpoint | None = None, *, local: bool = False) -> int:
    """Run both scenarios, writing what happens to `out`; return the exit status.

    Args:
        out: Where to write; colour only when it is a terminal and `NO_COLOR` is not set.
        endpoint: A real endpoint, or None to start a scripted server on 127.0.0.1.
        local: Run against the tiny local model (`refinekit.local.LocalModel`, the `local`
            extra) instead; then "as expected" is a typed outcome in each scenario.

    Returns:
        0 when both scenarios ended as expected, else 1. On the scripted server "as expected"
        is the scripted story (one rejection then a pass; two corrections then the invoice of
        the text); on a real endpoint it is the decorators' promise (an answer that passed the
        judge; a typed `Invoice`).

    Raises:
        LocalModelError: With `local`: the local model could not start, or its server died
            during the run (the CLI prints it and exits 2).
    """
    say = _Output(out, endpoint.api_key if endpoint and endpoint.key_from_env else None)
    with ExitStack() as stack:
        server: ScriptedOpenAI | None = None
        if local:
            from ..local import LocalModel, LocalModelError, _lost_connection

            say("Starting the local model (llama.cpp server, SmolLM2-135M-Instruct)...")
            model = stack.enter_context(LocalModel())
            client = stack.enter_context(model.client())

            def check(exc: BaseException) -> None:
                try:
                    model.check(wait=2.0 if _lost_connection(exc) else 0.0)
                except LocalModelError as dead:
                    say.wrapped(
                        f"   {say.bad('failed')}: ",
                        f"{type(exc).__name__}: the local model's server died (see the error)",
                        6,
                    )
                    raise dead from exc

            run = _Run(say, client, model.model, model.model, False, local=True, check=check)
            _header_local(say, model)
        elif endpoint is None:
            server = stack.enter_context(ScriptedOpenAI())
            script_demo(server)
            client = stack.enter_context(server.client())
            run = _Run(say, client, SCRIPTED_MODEL, SCRIPTED_JUDGE, scripted=True)
            _header_scripted(say, server)
        else:
            client = stack.enter_context(
                openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=120.0)
            )
            run = _Run(say, client, endpoint.model, endpoint.judge_model, scripted=False)
            _header_real(say, endpoint)
        say()
        refund_ok = run.refund()
        say()
        invoice_ok = run.invoice()
        say()
        if server is not None:
            counts = {m: len(server.requests_for(m)) for m in (SCRIPTED_MODEL, SCRIPTED_JUDGE)}
            say(
                f"The scripted server answered {len(server.requests)} HTTP requests: "
                + ", ".join(f"{n} for {m}" for m, n in counts.items())
                + "."
            )
    ok = refund_ok and invoice_ok
    failed = (not refund_ok) + (not invoice_ok)
    say(
        say.good("Both scenarios ended as expected.")
        if ok
        else say.bad(f"{failed} of 2 scenarios did not end as expected.")
    )
    return 0 if ok else 1
