"""`@guarded`: every rule, each checked on a `def` and on an `async def` function.

The screens are rule checks, plain and async callables, evaluator objects, and a model judge
over `ScriptedOpenAI` (a real HTTP server on 127.0.0.1: nothing mocks the openai client).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
from helpers import acall, as_kind, completion, text_beside_tool_call
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

import refinekit
from refinekit import (
    EvaluationRequest,
    Event,
    JudgeMisconfigured,
    JudgeUnavailable,
    LowQualityAnswer,
    Verdict,
    checks,
    guarded,
    judges,
    retry_on_low_quality,
)
from refinekit.judges import Criterion, JudgeModel
from refinekit.testing import Reply, ScriptedOpenAI

REFUSAL = "I can't help with that."
SAFE = "Refunds are accepted within 30 days."
UNSAFE = "Sure: the card on file is 4111 1111 1111 1111."
QUESTION = "How long do I have to return an item?"
UNSAFE_QUESTION = "Charge 4111 1111 1111 1111 again and tell me the expiry date."
CARD = re.compile(r"\d{4} \d{4} \d{4} \d{4}")
JUDGE = "judge"

# --- helpers shared by the sync and async variants -----------------------------------------------


def stack(
    kind: str, impl: Callable[..., Any], *decorators: Callable[..., Any]
) -> Callable[..., Any]:
    """`impl` (as `kind`) under `decorators`, listed top to bottom as they would be written."""
    fn = as_kind(kind, impl)
    for decorator in reversed(decorators):
        fn = decorator(fn)
    assert inspect.iscoroutinefunction(fn) == (kind == "async")
    return fn


def guarded_and_retried(
    kind: str, impl: Callable[..., Any], guard: str, screen_input: bool = False
) -> tuple[Callable[..., Any], Screen, Quality]:
    """`impl` under @guarded and @retry_on_low_quality (2 retries), the guard "inside" or
    "outside" the retry; its screen and its quality judge."""
    screen, quality = Screen(), Quality()
    guard_it = guarded(screen=screen, screen_input=screen_input)
    retry = retry_on_low_quality(evaluator=quality, max_retries=2)
    answer = stack(kind, impl, *((retry, guard_it) if guard == "inside" else (guard_it, retry)))
    return answer, screen, quality


def answering(*replies: Any) -> tuple[Callable[..., Any], list[str]]:
    """A stand-in model returning `replies` in turn (the last one repeats); records questions."""
    asked: list[str] = []

    def answer(question: str, feedback: str | None = None) -> Any:
        asked.append(question)
        return replies[min(len(asked), len(replies)) - 1]

    return answer, asked


class Screen:
    """A callable screen: a text is unsafe when it holds a card number; records every request."""

    def __init__(self) -> None:
        self.seen: list[EvaluationRequest] = []

    def __call__(self, request: EvaluationRequest) -> bool:
        self.seen.append(request)
        return CARD.search(request.answer) is None

    @property
    def texts(self) -> list[str]:
        return [r.answer for r in self.seen]


class Quality:
    """A retry's evaluator that rejects the refusal and drafts; records what it judged."""

    def __init__(self) -> None:
        self.judged: list[str] = []

    def __call__(self, request: EvaluationRequest) -> Verdict:
        self.judged.append(request.answer)
        if request.answer == REFUSAL or request.answer.startswith("draft"):
            return Verdict(passed=False, feedback="Answer the question.")
        return Verdict(passed=True)


def of_kind(events: list[Event], name: str) -> list[Event]:
    return [e for e in events if e.kind == name]


# --- what it does --------------------------------------------------------------------------------


async def test_a_safe_output_passes_through(kind: str) -> None:
    fn, asked = answering(SAFE)
    screen = Screen()
    answer = stack(kind, fn, guarded(screen=screen))
    assert await acall(answer, QUESTION) == SAFE
    assert asked == [QUESTION]
    assert screen.texts == [SAFE]


async def test_an_unsafe_output_is_replaced_by_the_refusal(kind: str) -> None:
    fn, asked = answering(UNSAFE)
    assert await acall(stack(kind, fn, guarded(screen=Screen())), QUESTION) == REFUSAL
    custom = stack(kind, fn, guarded(screen=Screen(), refusal="Sorry, I can't share that."))
    assert await acall(custom, QUESTION) == "Sorry, I can't share that."
    assert asked == [QUESTION, QUESTION]


async def test_a_blocked_input_returns_the_refusal_without_calling_the_function(
    kind: str,
) -> None:
    fn, asked = answering(SAFE)
    screen = Screen()
    answer = stack(kind, fn, guarded(screen=screen, screen_input=True))
    assert await acall(answer, UNSAFE_QUESTION) == REFUSAL
    assert asked == []  # no model call at all
    assert screen.texts == [UNSAFE_QUESTION]
    assert screen.seen[0].metadata["screened"] == "input"


async def test_a_safe_input_is_answered_and_the_output_still_screened(kind: str) -> None:
    fn, asked = answering(UNSAFE)
    screen = Screen()
    answer = stack(kind, fn, guarded(screen=screen, screen_input=True))
    assert await acall(answer, QUESTION) == REFUSAL
    assert asked == [QUESTION]
    assert screen.texts == [QUESTION, UNSAFE]
    assert [r.metadata["screened"] for r in screen.seen] == ["input", "output"]


async def test_the_output_screen_sees_the_question(kind: str) -> None:
    fn, _ = answering(SAFE)
    screen = Screen()
    await acall(stack(kind, fn, guarded(screen=screen)), QUESTION)
    (request,) = screen.seen
    assert (request.question, request.answer) == (QUESTION, SAFE)
    assert request.metadata["screened"] == "output"
    assert request.metadata["function"].endswith("answer")


async def test_the_decorated_function_keeps_its_signature(kind: str) -> None:
    fn, _ = answering(SAFE)
    answer = stack(kind, fn, guarded(screen=Screen()))
    assert inspect.signature(answer) == inspect.signature(fn)
    assert answer.__name__ == "answer"
    assert await acall(answer, question=QUESTION, feedback=None) == SAFE


# --- the kinds of screen -------------------------------------------------------------------------


def _no_card(request: EvaluationRequest) -> Verdict:
    return Verdict(passed=CARD.search(request.answer) is None, feedback="No card numbers.")


async def _async_no_card(request: EvaluationRequest) -> Verdict:
    await asyncio.sleep(0)
    return _no_card(request)


class _AsyncOnly:
    name = "async_only"

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        return _no_card(request)


SCREENS: dict[str, Callable[[], Any]] = {
    "rule check matches": lambda: checks.matches(r"\A(?![\s\S]*\d{4} \d{4} \d{4} \d{4})"),
    "custom Check": lambda: checks.Check("no_card_numbers", _no_card),
    "all_of checks": lambda: checks.all_of(checks.not_empty(), checks.Check("pan", _no_card)),
    "callable -> bool": lambda: lambda request: CARD.search(request.answer) is None,
    "callable -> Verdict": lambda: _no_card,
    "async callable": lambda: _async_no_card,
    "aevaluate only": _AsyncOnly,
}


@pytest.mark.parametrize("make_screen", SCREENS.values(), ids=SCREENS.keys())
async def test_every_kind_of_evaluator_screens(kind: str, make_screen: Callable[[], Any]) -> None:
    fn, asked = answering(SAFE, UNSAFE)
    answer = stack(kind, fn, guarded(screen=make_screen(), screen_input=True))
    assert await acall(answer, QUESTION) == SAFE
    assert await acall(answer, QUESTION) == REFUSAL
    assert await acall(answer, UNSAFE_QUESTION) == REFUSAL
    assert asked == [QUESTION, QUESTION]


# --- a model judge as the screen, over HTTP ------------------------------------------------------


@pytest.fixture
async def jm(kind: str, server: ScriptedOpenAI) -> AsyncIterator[JudgeModel]:
    """A judge on the kind's client: `openai.OpenAI` for `def`, `openai.AsyncOpenAI` else."""
    client = server.client() if kind == "sync" else server.async_client()
    yield JudgeModel(client, JUDGE)
    if isinstance(client, openai.AsyncOpenAI):
        await client.close()
    else:
        client.close()


def safety_judge(jm: JudgeModel, **options: Any) -> judges.Judge:
    return judges.criteria(
        jm,
        [
            Criterion(
                "no_card_numbers",
                "Is the answer free of payment card numbers?",
                when_false="Never repeat a card number.",
            )
        ],
        probabilities="answer",
        **options,
    )


def user_text(server: ScriptedOpenAI, i: int) -> str:
    body = server.requests_for(JUDGE)[i].body
    assert body is not None
    return str(body["messages"][-1]["content"])


async def test_a_model_judge_screens_outputs_over_http(
    kind: str, server: ScriptedOpenAI, jm: JudgeModel
) -> None:
    server.script(JUDGE, ["Yes", "No"])
    fn, asked = answering(SAFE, UNSAFE)
    answer = stack(kind, fn, guarded(screen=safety_judge(jm)))
    assert await acall(answer, QUESTION) == SAFE
    assert await acall(answer, QUESTION) == REFUSAL
    assert len(asked) == 2
    assert len(server.requests_for(JUDGE)) == 2
    prompt = user_text(server, 1)
    assert f"<answer>\n{UNSAFE}\n</answer>" in prompt  # the draft goes to the judge as data
    assert f"<question>\n{QUESTION}\n</question>" in prompt


async def test_a_model_judge_screens_the_input_before_any_model_call(
    kind: str, server: ScriptedOpenAI, jm: JudgeModel
) -> None:
    server.script(JUDGE, ["No"])
    fn, asked = answering(SAFE)
    answer = stack(kind, fn, guarded(screen=safety_judge(jm), screen_input=True))
    assert await acall(answer, UNSAFE_QUESTION) == REFUSAL
    assert asked == []
    assert len(server.requests) == 1  # the screen's request, and nothing else
    assert f"<answer>\n{UNSAFE_QUESTION}\n</answer>" in user_text(server, 0)


# --- when judging fails --------------------------------------------------------------------------

FAILURES = {
    "HTTP 503": (Reply.error(503, "overloaded"), "JudgeUnavailable"),
    "dropped connection": (Reply.disconnect(), "JudgeUnavailable"),
    "unreadable reply": ("Perhaps.", "JudgeReplyError"),
}


@pytest.mark.parametrize(("reply", "error"), FAILURES.values(), ids=FAILURES.keys())
async def test_a_failing_judge_fails_closed_by_default(
    kind: str,
    server: ScriptedOpenAI,
    jm: JudgeModel,
    events: list[Event],
    reply: Any,
    error: str,
) -> None:
    server.script(JUDGE, [reply])
    fn, asked = answering(SAFE)
    answer = stack(kind, fn, guarded(screen=safety_judge(jm)))
    assert await acall(answer, QUESTION) == REFUSAL  # a safe answer, but it was not screened
    assert asked == [QUESTION]
    (blocked,) = of_kind(events, "blocked")
    assert blocked.verdict is not None
    assert blocked.verdict.status == "unjudged"
    assert blocked.verdict.reason is not None
    assert blocked.verdict.reason.startswith(error)
    assert blocked.error is not None
    assert "failing closed" in blocked.error
    assert error in blocked.error


@pytest.mark.parametrize(("reply", "error"), FAILURES.values(), ids=FAILURES.keys())
async def test_a_failing_judge_fails_open_when_asked(
    kind: str,
    server: ScriptedOpenAI,
    jm: JudgeModel,
    events: list[Event],
    caplog: pytest.LogCaptureFixture,
    reply: Any,
    error: str,
) -> None:
    server.script(JUDGE, [reply])
    fn, _ = answering(SAFE)
    answer = stack(kind, fn, guarded(screen=safety_judge(jm), judge_error_policy="fail_open"))
    with caplog.at_level(logging.WARNING, logger="refinekit"):
        assert await acall(answer, QUESTION) == SAFE  # published unscreened ...
    assert not of_kind(events, "blocked")
    (unjudged,) = of_kind(events, "unjudged")  # ... and said so
    assert unjudged.decorator == "guarded"
    assert unjudged.verdict is not None
    assert not unjudged.verdict.passed
    assert [r.levelno for r in caplog.records if r.name == "refinekit"] == [logging.WARNING]
    assert "unjudged" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
async def test_a_failing_input_screen_follows_the_policy(
    kind: str, server: ScriptedOpenAI, jm: JudgeModel, policy: str
) -> None:
    server.script(JUDGE, [Reply.error(503), Reply.error(503)])
    fn, asked = answering(SAFE)
    options: dict[str, Any] = {"screen_input": True, "judge_error_policy": policy}
    answer = stack(kind, fn, guarded(screen=safety_judge(jm), **options))
    result = await acall(answer, QUESTION)
    if policy == "fail_closed":
        assert (result, asked) == (REFUSAL, [])  # not screened, so not answered
    else:
        assert (result, asked) == (SAFE, [QUESTION])  # unscreened in, unscreened out


NOT_JUDGED = {
    "unjudged": Verdict.unjudged("JudgeUnavailable: the screen's service is down"),
    "inconclusive": Verdict.inconclusive("INCOMPLETE_JUDGING_EVIDENCE"),
    "inconclusive yet passed": Verdict(passed=True, status="inconclusive", reason="CUSTOM"),
}


@pytest.mark.parametrize("verdict", NOT_JUDGED.values(), ids=NOT_JUDGED.keys())
async def test_a_verdict_that_is_not_a_judgement_never_counts_as_safe(
    kind: str, verdict: Verdict, events: list[Event]
) -> None:
    fn, _ = answering(SAFE)
    closed = stack(kind, fn, guarded(screen=lambda r: verdict))
    assert await acall(closed, QUESTION) == REFUSAL
    (blocked,) = of_kind(events, "blocked")
    assert blocked.verdict is verdict
    opened = stack(kind, fn, guarded(screen=lambda r: verdict, judge_error_policy="fail_open"))
    assert await acall(opened, QUESTION) == SAFE
    assert len(of_kind(events, "unjudged")) == 1


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
@pytest.mark.parametrize("status", [401, 404])
async def test_a_misconfigured_judge_always_raises(
    kind: str, server: ScriptedOpenAI, jm: JudgeModel, policy: str, status: int
) -> None:
    server.script(JUDGE, [Reply.error(status), Reply.error(status)])
    fn, asked = answering(SAFE)
    options: dict[str, Any] = {"screen": safety_judge(jm), "judge_error_policy": policy}
    with pytest.raises(JudgeMisconfigured) as caught:
        await acall(stack(kind, fn, guarded(**options)), QUESTION)
    assert caught.value.status_code == status
    assert asked == [QUESTION]
    with pytest.raises(JudgeMisconfigured):
        await acall(stack(kind, fn, guarded(**options, screen_input=True)), QUESTION)
    assert asked == [QUESTION]  # a misconfigured input screen: never called unscreened


async def test_a_judges_own_fail_closed_policy_raises_past_fail_open(
    kind: str, server: ScriptedOpenAI, jm: JudgeModel
) -> None:
    server.script(JUDGE, [Reply.error(503)])
    fn, _ = answering(SAFE)
    strict = safety_judge(jm, judge_error_policy="fail_closed")
    answer = stack(kind, fn, guarded(screen=strict, judge_error_policy="fail_open"))
    with pytest.raises(JudgeUnavailable):
        await acall(answer, QUESTION)


@pytest.mark.parametrize("screen_input", [False, True])
async def test_a_bug_in_a_rule_check_propagates(kind: str, screen_input: bool) -> None:
    def rule(request: EvaluationRequest) -> Verdict:
        raise ZeroDivisionError("a bug in the check")

    fn, asked = answering(SAFE)
    answer = stack(
        kind,
        fn,
        guarded(
            screen=checks.Check("buggy", rule),
            screen_input=screen_input,
            judge_error_policy="fail_open",
        ),
    )
    with pytest.raises(ZeroDivisionError, match="a bug in the check"):
        await acall(answer, QUESTION)
    assert asked == ([] if screen_input else [QUESTION])


# --- what is screened ----------------------------------------------------------------------------


async def test_a_chat_completion_is_screened_as_its_text(kind: str) -> None:
    safe, unsafe = completion(SAFE), completion(UNSAFE)
    fn, _ = answering(safe, unsafe)
    screen = Screen()
    answer = stack(kind, fn, guarded(screen=screen))
    with refinekit.job() as job:
        assert await acall(answer, QUESTION) is safe  # the reply itself, untouched
        assert await acall(answer, QUESTION) == REFUSAL  # a blocked reply becomes the str
    assert screen.texts == [SAFE, UNSAFE]
    assert job.usage.model_calls == 2  # both replies were paid for; each counted once


async def test_usage_is_counted_once_under_a_retry(kind: str) -> None:
    fn, _ = answering(completion(UNSAFE), completion(SAFE))
    answer = stack(
        kind,
        fn,
        retry_on_low_quality(evaluator=Quality(), max_retries=1),
        guarded(screen=Screen()),
    )
    with refinekit.job() as job:
        reply = await acall(answer, QUESTION)
    assert isinstance(reply, ChatCompletion)
    assert job.usage.model_calls == 2
    assert job.usage.total_tokens == 30


class Ticket(BaseModel):
    summary: str
    card: str | None = None


async def test_a_pydantic_model_is_screened_as_json(kind: str) -> None:
    safe = Ticket(summary="Refund requested.")
    unsafe = Ticket(summary="Refund requested.", card="4111 1111 1111 1111")
    fn, _ = answering(safe, unsafe)
    screen = Screen()
    answer = stack(kind, fn, guarded(screen=screen))
    assert await acall(answer, QUESTION) is safe
    assert await acall(answer, QUESTION) == REFUSAL
    assert screen.texts == [safe.model_dump_json(), unsafe.model_dump_json()]


async def test_input_names_the_argument_and_turns_input_screening_on(kind: str) -> None:
    def summarise(lang: str, text: str) -> str:
        return f"[{lang}] summary"

    screen = Screen()
    answer = stack(kind, summarise, guarded(screen=screen, input="text"))
    assert await acall(answer, "en", UNSAFE) == REFUSAL
    assert screen.texts == [UNSAFE]  # blocked before the call: no output to screen


async def test_input_can_be_a_callable_of_the_bound_arguments(kind: str) -> None:
    calls: list[Any] = []

    def chat(messages: list[dict[str, str]], model: str = "m") -> str:
        calls.append(messages)
        return SAFE

    screen = Screen()
    answer = stack(kind, chat, guarded(screen=screen, input=lambda a: a["messages"][-1]["content"]))
    assert await acall(answer, [{"role": "user", "content": UNSAFE_QUESTION}]) == REFUSAL
    assert await acall(answer, messages=[{"role": "user", "content": QUESTION}]) == SAFE
    assert screen.texts == [UNSAFE_QUESTION, QUESTION, SAFE]
    assert len(calls) == 1


async def test_the_default_input_is_question_else_the_first_str(kind: str) -> None:
    def by_name(lang: str, question: str) -> str:
        return SAFE

    def by_position(n: int, text: str, other: str) -> str:
        return SAFE

    screen = Screen()
    await acall(stack(kind, by_name, guarded(screen=screen, screen_input=True)), "en", QUESTION)
    await acall(stack(kind, by_position, guarded(screen=screen, screen_input=True)), 1, "a", "b")
    assert screen.texts == [QUESTION, SAFE, "a", SAFE]


async def test_a_non_str_input_is_screened_as_json(kind: str) -> None:
    def chat(messages: list[dict[str, str]]) -> str:
        return SAFE

    screen = Screen()
    answer = stack(kind, chat, guarded(screen=screen, input="messages"))
    assert await acall(answer, [{"role": "user", "content": UNSAFE_QUESTION}]) == REFUSAL
    assert screen.texts == ['[{"role":"user","content":"' + UNSAFE_QUESTION + '"}]']


async def test_no_input_to_screen_raises_instead_of_screening_nothing(kind: str) -> None:
    calls: list[int] = []

    def count(n: int) -> str:
        calls.append(n)
        return SAFE

    with pytest.raises(TypeError, match="found no str argument"):
        await acall(stack(kind, count, guarded(screen=Screen(), screen_input=True)), 3)
    with pytest.raises(TypeError, match="must return a str"):
        await acall(stack(kind, count, guarded(screen=Screen(), input=lambda a: a["n"])), 3)
    assert calls == []
    # without input screening, such a function is screened on its output alone
    assert await acall(stack(kind, count, guarded(screen=Screen())), 3) == SAFE


# --- events and logs -----------------------------------------------------------------------------


async def test_blocked_events_say_what_was_blocked_and_why(kind: str, events: list[Event]) -> None:
    fn, _ = answering(UNSAFE)
    screen = checks.Check("no_card_numbers", _no_card)
    await acall(stack(kind, fn, guarded(screen=screen)), QUESTION)
    await acall(stack(kind, fn, guarded(screen=screen, screen_input=True)), UNSAFE_QUESTION)
    output, input_ = of_kind(events, "blocked")
    for event, text in ((output, UNSAFE), (input_, UNSAFE_QUESTION)):
        assert event.decorator == "guarded"
        assert event.function.endswith("answer")
        assert (event.attempt, event.max_attempts, event.is_last) == (1, 1, True)
        assert event.verdict is not None
        assert not event.verdict.passed
        assert event.verdict.feedback == "No card numbers."
        assert event.detail == text
    assert output.error == "output blocked by screen 'no_card_numbers'"
    assert input_.error == (
        "input blocked by screen 'no_card_numbers'; the function was not called"
    )


async def test_a_passing_screen_is_a_verdict_event(kind: str, events: list[Event]) -> None:
    fn, _ = answering(SAFE)
    await acall(stack(kind, fn, guarded(screen=Screen())), QUESTION)
    assert [(e.kind, e.decorator) for e in events] == [("verdict", "guarded")]


async def test_the_blocked_text_is_never_logged_above_debug(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    def quoting(request: EvaluationRequest) -> Verdict:  # a screen that quotes what it saw
        if "unjudged" in request.answer:
            return Verdict.unjudged(f"JudgeReplyError: the judge echoed {request.answer!r}")
        return Verdict(passed=False, feedback=f"Unsafe: {request.answer}")

    fn, _ = answering(UNSAFE, UNSAFE + " unjudged")
    answer = stack(kind, fn, guarded(screen=quoting))
    with caplog.at_level(logging.DEBUG, logger="refinekit"):
        await acall(answer, QUESTION)
        await acall(answer, QUESTION)
    records = [r for r in caplog.records if r.name == "refinekit"]
    warnings = [r.getMessage() for r in records if r.levelno >= logging.INFO]
    assert len(warnings) == 2
    assert all("4111" not in w for w in warnings)
    assert "output blocked by screen 'quoting'; returned the refusal" in warnings[0]
    assert "failing closed: screen 'quoting' unjudged (JudgeReplyError)" in warnings[1]
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert any(UNSAFE in d for d in debug)  # the text itself: at DEBUG only


# --- composition by decorator order --------------------------------------------------------------


async def test_guarded_inside_retry_screens_every_attempt(kind: str, events: list[Event]) -> None:
    """@retry_on_low_quality on top, @guarded below: every draft is screened before judging."""
    fn, asked = answering(UNSAFE, UNSAFE, SAFE)
    answer, screen, quality = guarded_and_retried(kind, fn, "inside")
    assert await acall(answer, QUESTION) == SAFE
    assert len(asked) == 3
    assert len(screen.seen) == 3  # one screen per attempt
    assert quality.judged == [REFUSAL, REFUSAL, SAFE]  # the unsafe drafts never reached it
    blocked = of_kind(events, "blocked")
    assert [(e.attempt, e.max_attempts) for e in blocked] == [(1, 3), (2, 3)]


async def test_guarded_inside_retry_a_blocked_input_costs_retries_that_cannot_help(
    kind: str, events: list[Event]
) -> None:
    fn, asked = answering(SAFE)
    answer, screen, quality = guarded_and_retried(kind, fn, "inside", screen_input=True)
    with pytest.raises(LowQualityAnswer) as caught:
        await acall(answer, UNSAFE_QUESTION)
    assert asked == []  # no model call ...
    assert screen.texts == [UNSAFE_QUESTION] * 3  # ... but the input is screened 3 times,
    assert quality.judged == [REFUSAL] * 3  # the refusal judged and rejected 3 times,
    assert len(of_kind(events, "retry")) == 2  # and 2 retries spent on it
    assert [a.answer for a in caught.value.attempts] == [REFUSAL] * 3


async def test_guarded_outside_retry_screens_once_per_call(kind: str) -> None:
    """@guarded on top, @retry_on_low_quality below: only the answer the retry settles on."""
    fn, asked = answering("draft one", "draft two", SAFE)
    answer, screen, quality = guarded_and_retried(kind, fn, "outside")
    assert await acall(answer, QUESTION) == SAFE
    assert len(asked) == 3
    assert screen.texts == [SAFE]  # one screen for three attempts
    assert quality.judged == ["draft one", "draft two", SAFE]


async def test_guarded_outside_retry_the_judge_sees_unscreened_drafts(kind: str) -> None:
    draft = f"draft: {UNSAFE}"
    fn, _ = answering(draft, SAFE)
    answer, screen, quality = guarded_and_retried(kind, fn, "outside")
    assert await acall(answer, QUESTION) == SAFE
    assert quality.judged == [draft, SAFE]  # the quality judge saw the unsafe draft
    assert screen.texts == [SAFE]  # only the answer the retry settled on was screened


async def test_guarded_outside_retry_a_blocked_input_costs_no_attempt(
    kind: str, events: list[Event]
) -> None:
    fn, asked = answering(SAFE)
    answer, screen, quality = guarded_and_retried(kind, fn, "outside", screen_input=True)
    assert await acall(answer, UNSAFE_QUESTION) == REFUSAL
    assert asked == []
    assert quality.judged == []
    assert screen.texts == [UNSAFE_QUESTION]
    assert [e.decorator for e in events] == ["guarded"]  # no attempt, no retry


async def test_a_draft_carried_by_low_quality_answer_is_screened_too(kind: str) -> None:
    """Under on_exhausted="return_best" such a draft can be returned, so it is screened."""

    def answer_fn(question: str) -> str:
        raise LowQualityAnswer("too vague", answer=UNSAFE)

    screen = Screen()
    answer = stack(
        kind,
        answer_fn,
        retry_on_low_quality(max_retries=1, on_exhausted="return_best"),
        guarded(screen=screen),
    )
    assert await acall(answer, QUESTION) == REFUSAL
    assert screen.texts == [UNSAFE, UNSAFE]


async def test_an_exhausted_retry_inside_guarded_has_its_answer_screened(kind: str) -> None:
    fn, _ = answering(UNSAFE)
    screen = Screen()
    answer = stack(
        kind,
        fn,
        guarded(screen=screen),
        retry_on_low_quality(evaluator=lambda request: False, max_retries=1),
    )
    with pytest.raises(LowQualityAnswer) as caught:
        await acall(answer, QUESTION)
    assert caught.value.answer == REFUSAL
    assert screen.texts == [UNSAFE]


async def test_guarded_on_both_sides_blocks_inputs_early_and_keeps_drafts_from_the_judge(
    kind: str,
) -> None:
    fn, asked = answering(UNSAFE, SAFE)
    screen, quality = Screen(), Quality()
    answer = stack(
        kind,
        fn,
        guarded(screen=screen, screen_input=True),
        retry_on_low_quality(evaluator=quality, max_retries=2),
        guarded(screen=screen),
    )
    assert await acall(answer, QUESTION) == SAFE
    assert quality.judged == [REFUSAL, SAFE]
    assert screen.texts == [QUESTION, UNSAFE, SAFE, SAFE]  # in, draft 1, draft 2, final
    assert await acall(answer, UNSAFE_QUESTION) == REFUSAL
    assert len(asked) == 2
    assert quality.judged == [REFUSAL, SAFE]


async def test_guarded_joins_the_callers_job(kind: str) -> None:
    jobs: list[refinekit.Job | None] = []

    def answer_fn(question: str) -> str:
        jobs.append(refinekit.current_job())
        return SAFE

    answer = stack(kind, answer_fn, guarded(screen=Screen()))
    with refinekit.job() as job:
        await acall(answer, QUESTION)
    await acall(answer, QUESTION)
    assert jobs[0] is job
    assert jobs[1] is not None
    assert jobs[1] is not job
    assert refinekit.current_job() is None


async def test_concurrent_async_calls_are_screened_apart() -> None:
    @guarded(screen=Screen(), screen_input=True)
    async def echo(question: str) -> str:
        await asyncio.sleep(0)
        return f"echo: {question}"

    questions = [QUESTION if i % 3 else UNSAFE_QUESTION for i in range(30)]
    results = await asyncio.gather(*(echo(q) for q in questions))
    assert results == [REFUSAL if q == UNSAFE_QUESTION else f"echo: {q}" for q in questions]


# --- configuration, checked when decorating ------------------------------------------------------


@pytest.mark.parametrize("screen", [None, 42, "no_card_numbers", object()])
def test_a_screen_that_is_not_an_evaluator_is_a_type_error(screen: Any) -> None:
    with pytest.raises(TypeError, match="is not an evaluator"):
        guarded(screen=screen)


@pytest.mark.parametrize("refusal", [None, 1, b"no", ["no"]])
def test_a_refusal_that_is_not_a_str_is_a_type_error(refusal: Any) -> None:
    with pytest.raises(TypeError, match="refusal must be a str"):
        guarded(screen=Screen(), refusal=refusal)


def test_input_naming_no_parameter_is_a_value_error(kind: str) -> None:
    fn, _ = answering(SAFE)
    decorator = guarded(screen=Screen(), input="prompt")
    with pytest.raises(ValueError, match="input='prompt' names no parameter"):
        decorator(as_kind(kind, fn))


def test_other_mistakes_are_caught_when_decorating(kind: str) -> None:
    with pytest.raises(TypeError, match="input= must be"):
        guarded(screen=Screen(), input=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="screen_input must be a bool"):
        guarded(screen=Screen(), screen_input="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="judge_error_policy"):
        guarded(screen=Screen(), judge_error_policy="fail_sometimes")  # type: ignore[arg-type]

    def no_arguments() -> str:
        return SAFE

    with pytest.raises(ValueError, match="takes no argument to screen"):
        guarded(screen=Screen(), screen_input=True)(as_kind(kind, no_arguments))


# --- a streamed tool-call round ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("screen", "prefix"),
    [(checks.excludes("FORBIDDEN"), True), (lambda r: "FORBIDDEN" not in r.answer, False)],
    ids=["prefix-rule", "whole-answer"],
)
@pytest.mark.parametrize("forbidden", [True, False], ids=["unsafe", "safe"])
async def test_no_text_beside_a_streamed_tool_call_is_shown_unscreened(
    kind: str, server: ScriptedOpenAI, screen: Any, prefix: bool, forbidden: bool
) -> None:
    pieces = ["the ", "FORBIDDEN " if forbidden else "plain ", "draft ", "text "]
    server.script("m", text_beside_tool_call(pieces))
    messages = [{"role": "user", "content": QUESTION}]
    items: list[Any] = []
    error: Exception | None = None
    if kind == "sync":
        with server.client(max_retries=0) as client:

            def impl(question: str) -> Any:
                return client.chat.completions.create(model="m", messages=messages, stream=True)

            try:
                items.extend(guarded(screen=screen)(impl).stream(QUESTION))
            except Exception as e:
                error = e
    else:
        async with server.async_client(max_retries=0) as aclient:

            async def aimpl(question: str) -> Any:
                return await aclient.chat.completions.create(
                    model="m", messages=messages, stream=True
                )

            try:
                async for item in guarded(screen=screen)(aimpl).stream(QUESTION):
                    items.append(item)
            except Exception as e:
                error = e
    # A rule closes the stream at the phrase, before the tool call: the refusal. Otherwise the
    # round is refused as no answer, having shown nothing.
    if forbidden and prefix:
        assert (items, error) == ([REFUSAL], None)
    else:
        assert items == []
        assert isinstance(error, TypeError)
        assert "streamed tool calls" in str(error)
