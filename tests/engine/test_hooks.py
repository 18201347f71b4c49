"""Events, the hook API and logging, checked on a `def` and on an `async def` function."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any, get_args

import pytest
from helpers import as_kind, call, completion, passes_on, reject_all
from pydantic import BaseModel

import refinekit
from refinekit import (
    EvaluationRequest,
    Event,
    LowQualityAnswer,
    RefinekitWarning,
    ResponseValidationError,
    Usage,
    Verdict,
    retry_on_low_quality,
    self_correct,
)
from refinekit._engine import events as events_module
from refinekit._engine.eventlog import LINES
from refinekit._engine.events import EventKind

# --- helpers -------------------------------------------------------------------------------------


def answers(*replies: Any) -> Callable[..., Any]:
    """An answer function returning `replies` in turn (the last one over and over)."""
    count: list[int] = []

    def answer(question: str, feedback: str | None = None) -> Any:
        count.append(1)
        return replies[min(len(count), len(replies)) - 1]

    return answer


# --- events of @retry_on_low_quality -------------------------------------------------------------


def test_an_exhausted_call_emits_attempt_verdict_retry_and_exhausted(
    kind: str, events: list[Event]
) -> None:
    jobs: list[refinekit.Job | None] = []

    def answer(question: str) -> str:
        jobs.append(refinekit.current_job())
        return "a"

    fn = retry_on_low_quality(evaluator=reject_all, max_retries=2)(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer):
        call(fn, "q")
    assert [(e.kind, e.attempt) for e in events] == [
        ("attempt", 1),
        ("verdict", 1),
        ("retry", 1),
        ("attempt", 2),
        ("verdict", 2),
        ("retry", 2),
        ("attempt", 3),
        ("verdict", 3),
        ("exhausted", 3),
    ]
    job = jobs[0]
    assert job is not None
    for event in events:
        assert event.decorator == "retry_on_low_quality"
        assert event.function == answer.__qualname__
        assert event.job_id == job.id
        assert event.max_attempts == 3
        assert event.is_last == (event.attempt == 3)
        assert isinstance(event.usage, Usage)


def test_events_carry_what_happened(kind: str, events: list[Event]) -> None:
    fn = retry_on_low_quality(evaluator=reject_all, max_retries=1, wait=1.5)(
        as_kind(kind, answers("a"))
    )
    with pytest.raises(LowQualityAnswer) as exc_info:
        call(fn, "q")
    by_kind = {e.kind: e for e in events}  # the last event of each kind
    assert by_kind["attempt"].duration is not None
    assert by_kind["attempt"].duration >= 0
    assert by_kind["verdict"].verdict == exc_info.value.verdict
    assert by_kind["retry"].feedback == "fix #1"
    assert by_kind["retry"].wait == 1.5
    assert by_kind["retry"].verdict is not None
    assert not by_kind["retry"].verdict.passed
    assert by_kind["exhausted"].feedback == "fix #2"
    assert by_kind["exhausted"].error == "LowQualityAnswer: fix #2"


def test_a_passing_call_emits_no_retry_nor_exhausted(kind: str, events: list[Event]) -> None:
    fn = retry_on_low_quality(evaluator=passes_on(1))(as_kind(kind, answers("a")))
    call(fn, "q")
    assert [e.kind for e in events] == ["attempt", "verdict"]
    assert events[1].verdict is not None
    assert events[1].verdict.passed
    assert not any(e.is_last for e in events)


def test_a_low_quality_answer_raised_by_the_function_emits_retry_without_verdict(
    kind: str, events: list[Event]
) -> None:
    def answer(question: str) -> str:
        raise LowQualityAnswer("too vague")

    fn = retry_on_low_quality(max_retries=1)(as_kind(kind, answer))
    with pytest.raises(LowQualityAnswer):
        call(fn, "q")
    assert [e.kind for e in events] == ["attempt", "retry", "attempt", "exhausted"]
    assert events[1].feedback == "too vague"


def test_a_skipped_answer_emits_skipped(kind: str, events: list[Event]) -> None:
    fn = retry_on_low_quality(evaluator=reject_all, skip=lambda request: True)(
        as_kind(kind, answers("a"))
    )
    assert call(fn, "q") == "a"
    assert [(e.kind, e.attempt, e.is_last) for e in events] == [
        ("attempt", 1, False),
        ("skipped", 1, False),
    ]


def test_events_carry_the_usage_so_far(kind: str, events: list[Event]) -> None:
    replies = [completion("a", 10, 1), completion("b", 20, 2)]
    fn = retry_on_low_quality(evaluator=reject_all, max_retries=1)(as_kind(kind, answers(*replies)))
    with pytest.raises(LowQualityAnswer) as exc_info:
        call(fn, "q")
    assert [(e.kind, e.usage) for e in events] == [
        ("attempt", Usage(1, 10, 1)),
        ("verdict", Usage(1, 10, 1)),
        ("retry", Usage(1, 10, 1)),
        ("attempt", Usage(2, 30, 3)),
        ("verdict", Usage(2, 30, 3)),
        ("exhausted", Usage(2, 30, 3)),
    ]
    assert exc_info.value.usage == Usage(2, 30, 3)


def test_nested_calls_emit_events_of_one_job(kind: str, events: list[Event]) -> None:
    inner = retry_on_low_quality()(answers("inner"))

    def outer(question: str) -> str:
        return str(inner(question))

    call(retry_on_low_quality()(as_kind(kind, outer)), "q")
    assert [e.function for e in events] == [inner.__qualname__, outer.__qualname__]
    assert events[0].job_id == events[1].job_id


# --- events of @self_correct ---------------------------------------------------------------------


class Item(BaseModel):
    name: str
    qty: int


def replies(*texts: str) -> Callable[..., str]:
    """A @self_correct stand-in model: returns `texts` in turn, records nothing."""
    sent: list[int] = []

    def extract(messages: list[dict[str, str]]) -> str:
        sent.append(1)
        return texts[min(len(sent), len(texts)) - 1]

    return extract


def test_corrections_are_events(kind: str, events: list[Event]) -> None:
    extract = self_correct(schema=Item, max_corrections=2)(
        as_kind(kind, replies('{"name": "x"}', "not json", '{"name": "x", "qty": 1}'))
    )
    assert call(extract, [{"role": "user", "content": "extract"}]) == Item(name="x", qty=1)
    corrections = [e for e in events if e.kind == "correction"]
    assert [(e.attempt, e.max_attempts, e.is_last) for e in corrections] == [
        (1, 2, False),
        (2, 2, True),
    ]
    assert all(e.decorator == "self_correct" for e in corrections)
    assert "qty" in str(corrections[0].error)
    assert refinekit._decorators.correct.CHECK_MARKER in str(corrections[0].detail)
    assert len({e.job_id for e in events}) == 1


# --- hooks that raise, and unsubscribing ---------------------------------------------------------


def broken_hook(event: Event) -> None:
    raise RuntimeError(f"hook bug on {event.kind}")


def test_a_raising_hook_is_reported_and_does_not_break_the_job(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[Event] = []
    fn = retry_on_low_quality(evaluator=passes_on(2))(as_kind(kind, answers("a1", "a2")))
    with (
        refinekit.subscribe(broken_hook),
        refinekit.subscribe(received.append),
        pytest.warns(RefinekitWarning, match="broken_hook raised RuntimeError") as warned,
    ):
        assert call(fn, "q") == "a2"
    assert [e.kind for e in received] == ["attempt", "verdict", "retry", "attempt", "verdict"]
    errors = [r for r in caplog.records if r.name == "refinekit" and r.levelno == logging.ERROR]
    assert len(errors) == len(received) == len(warned)
    assert "broken_hook" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], RuntimeError)


def test_a_raising_hook_does_not_break_the_job_when_warnings_are_errors(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    fn = retry_on_low_quality(evaluator=passes_on(1))(as_kind(kind, answers("a")))
    with warnings.catch_warnings(), refinekit.subscribe(broken_hook):
        warnings.simplefilter("error")
        assert call(fn, "q") == "a"
    assert [r.levelno for r in caplog.records if r.name == "refinekit"] == [logging.ERROR] * 2


def test_closing_a_subscription_stops_the_hook(kind: str) -> None:
    received: list[Event] = []
    fn = retry_on_low_quality()(as_kind(kind, answers("a")))
    subscription = refinekit.subscribe(received.append)
    call(fn, "q")
    subscription.close()
    subscription.close()  # harmless
    call(fn, "q")
    assert len(received) == 1


def test_leaving_the_with_block_unsubscribes(kind: str) -> None:
    received: list[Event] = []
    fn = retry_on_low_quality()(as_kind(kind, answers("a")))
    with refinekit.subscribe(received.append) as subscription:
        call(fn, "q")
    call(fn, "q")
    assert isinstance(subscription, refinekit.Subscription)
    assert len(received) == 1


def test_subscribing_something_not_callable_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        refinekit.subscribe("print")  # type: ignore[arg-type]


# --- logging -------------------------------------------------------------------------------------


def refinekit_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "refinekit" and r.levelno == level]


def test_one_info_line_per_retry_and_one_warning_on_exhaustion(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="refinekit")
    fn = retry_on_low_quality(evaluator=reject_all, max_retries=3)(as_kind(kind, answers("a")))
    with pytest.raises(LowQualityAnswer):
        call(fn, "q")
    infos = [r.getMessage() for r in refinekit_records(caplog, logging.INFO)]
    assert len(infos) == 3
    assert "attempt 1/4" in infos[0]
    assert "fix #1" in infos[0]
    assert "attempt 3/4" in infos[2]
    warnings_ = [r.getMessage() for r in refinekit_records(caplog, logging.WARNING)]
    assert len(warnings_) == 1
    assert "out of attempts after 4" in warnings_[0]
    assert "fix #4" in warnings_[0]


def test_returning_the_best_attempt_says_so(kind: str, events: list[Event]) -> None:
    fn = retry_on_low_quality(evaluator=reject_all, max_retries=1, on_exhausted="return_best")(
        as_kind(kind, answers("first", "second"))
    )
    assert call(fn, "q") == "second"
    assert events[-1].kind == "exhausted"
    assert events[-1].error == "returned the best attempt (2); last feedback: fix #2"


def test_debug_logging_without_hooks_still_sees_attempts_and_verdicts(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="refinekit")
    fn = retry_on_low_quality(evaluator=passes_on(1))(as_kind(kind, answers("a")))
    call(fn, "q")
    debug = [r.getMessage() for r in refinekit_records(caplog, logging.DEBUG)]
    assert any("attempt 1/3" in m for m in debug)
    assert any("verdict 1/3 passed=True" in m for m in debug)


def test_a_passing_call_logs_nothing_above_debug(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="refinekit")
    fn = retry_on_low_quality(evaluator=passes_on(2))(as_kind(kind, answers("a")))
    call(fn, "q")
    above_debug = [r for r in caplog.records if r.name == "refinekit" and r.levelno > logging.DEBUG]
    assert [r.levelno for r in above_debug] == [logging.INFO]  # the one retry


LONG_PROMPT = "PROMPT-START " + "lorem ipsum dolor " * 100 + "PROMPT-END"


def test_no_retry_log_above_debug_holds_the_prompt(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="refinekit")

    def echo(question: str, feedback: str | None = None) -> str:
        return f"{question}\n{feedback or ''}"  # the worst case: the answer repeats the prompt

    def quoting(request: EvaluationRequest) -> Verdict:
        return Verdict(passed=False, feedback=f"You only repeated the prompt: {request.answer}")

    fn = retry_on_low_quality(evaluator=quoting, max_retries=1)(as_kind(kind, echo))
    with pytest.raises(LowQualityAnswer):
        call(fn, LONG_PROMPT)
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert len(above_debug) == 2
    for message in above_debug:
        assert "PROMPT-END" not in message
        assert len(message) < 500


def test_correction_lines_keep_the_prompt_and_message_at_debug(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="refinekit")
    extract = self_correct(schema=Item, max_corrections=1)(
        as_kind(kind, replies('{"name": "x"}', '{"qty": 1}'))
    )
    with pytest.raises(ResponseValidationError):
        call(extract, [{"role": "user", "content": LONG_PROMPT}])
    marker = refinekit._decorators.correct.CHECK_MARKER
    infos = [r.getMessage() for r in refinekit_records(caplog, logging.INFO)]
    assert len(infos) == 1
    assert "correction 1/1" in infos[0]
    assert "qty" in infos[0]
    assert len(refinekit_records(caplog, logging.WARNING)) == 1
    debug = [r.getMessage() for r in refinekit_records(caplog, logging.DEBUG)]
    assert any(marker in m and '{"name": "x", "qty": <integer>}' in m for m in debug)
    for record in caplog.records:
        message = record.getMessage()
        assert "PROMPT-END" not in message
        if record.levelno > logging.DEBUG:
            assert marker not in message
            assert "<integer>" not in message


def test_the_refinekit_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("refinekit").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
    assert all(isinstance(h, logging.NullHandler) for h in handlers)


def test_each_kind_of_event_has_its_log_lines_or_an_attempts() -> None:
    assert set(get_args(EventKind)) - set(LINES) == {"attempt", "verdict", "skipped"}


# --- instruments ---------------------------------------------------------------------------------


class Recorder:
    """An instrument writing down each call it is around and the role of each command."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @contextlib.contextmanager
    def call(self, flow: Any, cfg: Any, job: Any) -> Iterator[None]:
        self.seen.append("call")
        yield
        self.seen.append("end")

    def command(self, command: Any) -> Any:
        self.seen.append(getattr(command, "role", "") or type(command).__name__)
        return command


def test_an_instrument_sees_each_call_and_each_command(kind: str) -> None:
    recorder = Recorder()
    events_module.set_instruments([recorder])
    try:
        fn = retry_on_low_quality(evaluator=passes_on(2), max_retries=1)(
            as_kind(kind, answers("a"))
        )
        assert call(fn, "q") == "a"
    finally:
        events_module.set_instruments(())
    assert recorder.seen[0] == "call"
    assert recorder.seen[-1] == "end"
    assert recorder.seen.count("attempt") == 2
    assert recorder.seen.count("evaluation") == 2


def test_instruments_nest_the_first_innermost(kind: str) -> None:
    outer, inner = Recorder(), Recorder()
    order: list[str] = []
    outer.command = lambda command: order.append("outer") or command  # type: ignore[method-assign]
    inner.command = lambda command: order.append("inner") or command  # type: ignore[method-assign]
    events_module.set_instruments([inner, outer])
    try:
        fn = retry_on_low_quality()(as_kind(kind, answers("a")))
        assert call(fn, "q") == "a"
    finally:
        events_module.set_instruments(())
    assert order[:2] == ["inner", "outer"]
    assert inner.seen == outer.seen == ["call", "end"]
