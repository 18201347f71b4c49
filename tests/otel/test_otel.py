"""OpenTelemetry tracing (refinekit.otel): the span tree, the GenAI attributes, secrets, off.

Spans are read from the SDK's in-memory exporter; judge models answer over real HTTP from
the scripted server, so token counts are the ones its replies carry.
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import inspect
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import acall, call
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import refinekit.otel
import refinekit.otel._tracer
from refinekit import (
    AnswerRejected,
    Event,
    JudgeUnavailable,
    checks,
    guarded,
    retry_on_low_quality,
    reviewed,
    self_correct,
)
from refinekit._core import otel_names as names
from refinekit.judges import Criterion, JudgeModel, criteria, rating, relevancy
from refinekit.testing import Reply, ScriptedOpenAI

QUESTION = "How long do refunds take?"
ANSWER = "Refunds take 14 days."


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """Tracing on, into an in-memory exporter; off again after the test."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    refinekit.otel.instrument(tracer_provider=tracer_provider)
    try:
        yield tracer_provider, exporter
    finally:
        refinekit.otel.uninstrument()
        tracer_provider.shutdown()


@pytest.fixture
def exporter(provider: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    return provider[1]


@pytest.fixture
def tracer(provider: tuple[TracerProvider, InMemorySpanExporter]) -> trace.Tracer:
    """The application's own tracer, on the same provider."""
    return provider[0].get_tracer("app")


def judge_client(kind: str, server: ScriptedOpenAI, **kwargs: Any) -> Any:
    return server.client(**kwargs) if kind == "sync" else server.async_client(**kwargs)


async def close(client: Any) -> None:
    closed = client.close()
    if inspect.isawaitable(closed):  # an async client, openai's or anthropic's
        await closed


def answer_fn(kind: str, tracer: trace.Tracer | None = None) -> Any:
    """`answer(question, feedback=None)`, sync or async; in its own span when given a tracer."""

    def answer(question: str, feedback: str | None = None) -> str:
        if tracer is not None:
            with tracer.start_as_current_span("app.model_call"):
                return ANSWER
        return ANSWER

    async def aanswer(question: str, feedback: str | None = None) -> str:
        await asyncio.sleep(0)
        return answer(question, feedback)

    return answer if kind == "sync" else aanswer


class Tree:
    """The finished spans, by id, with their children."""

    def __init__(self, spans: Sequence[ReadableSpan]) -> None:
        self.spans = list(spans)
        self.by_id = {s.context.span_id: s for s in self.spans}

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans]
        return found[0]

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        return self.by_id.get(span.parent.span_id) if span.parent is not None else None

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        found = [
            s
            for s in self.spans
            if s.parent is not None and s.parent.span_id == span.context.span_id
        ]
        return sorted(found, key=lambda s: s.start_time or 0)

    def shape(self, span: ReadableSpan) -> Any:
        """The subtree as nested (name, [children]) tuples, children in start order."""
        return (span.name, [self.shape(c) for c in self.children(span)])


def evaluation_events(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == names.EVALUATION_RESULT]


# --- the span tree and the GenAI attributes, over real HTTP ----------------------------------


async def test_retry_spans_nest_under_the_callers_span_with_judge_calls_as_genai_spans(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter, tracer: trace.Tracer
) -> None:
    server.script(
        "judge",
        [
            Reply.text("No", prompt_tokens=50, completion_tokens=1),
            Reply.text("Yes", prompt_tokens=60, completion_tokens=2),
        ],
    )
    client = judge_client(kind, server)
    judge = relevancy(JudgeModel(client, "judge"))
    decorated = retry_on_low_quality(evaluator=judge, max_retries=2)(answer_fn(kind, tracer))
    with tracer.start_as_current_span("request"):
        assert await acall(decorated, QUESTION) == ANSWER
    await close(client)

    tree = Tree(exporter.get_finished_spans())
    request = tree.one("request")
    evaluate = ("refinekit.evaluate relevancy", [("chat judge", [])])
    attempt = ("refinekit.attempt", [("app.model_call", []), evaluate])
    assert tree.shape(request) == (
        "request",
        [(f"refinekit.retry_on_low_quality {decorated.__qualname__}", [attempt, attempt])],
    )
    assert len({s.context.trace_id for s in tree.spans}) == 1

    chats = tree.named("chat judge")
    assert [(c.attributes or {})[names.USAGE_INPUT_TOKENS] for c in chats] == [50, 60]
    assert [(c.attributes or {})[names.USAGE_OUTPUT_TOKENS] for c in chats] == [1, 2]
    for chat in chats:
        attributes = dict(chat.attributes or {})
        assert chat.kind is trace.SpanKind.CLIENT
        assert attributes[names.OPERATION_NAME] == "chat"
        assert attributes[names.PROVIDER_NAME] == "openai"
        assert attributes[names.REQUEST_MODEL] == "judge"
        assert attributes[names.RESPONSE_MODEL] == "judge"
        assert attributes[names.SERVER_ADDRESS] == "127.0.0.1"
        assert attributes[names.RESPONSE_FINISH_REASONS] == ("stop",)

    call_span = tree.one(f"refinekit.retry_on_low_quality {decorated.__qualname__}")
    attributes = dict(call_span.attributes or {})
    assert attributes[names.DECORATOR] == "retry_on_low_quality"
    assert attributes[names.ATTEMPTS] == 2
    assert attributes[names.JUDGE_INPUT_TOKENS] == 110
    assert attributes[names.JUDGE_OUTPUT_TOKENS] == 3
    assert call_span.status.status_code is StatusCode.UNSET

    first, second = tree.children(call_span)
    assert [(s.attributes or {})[names.ATTEMPT_NUMBER] for s in (first, second)] == [1, 2]
    (rejected,) = evaluation_events(first)
    assert rejected[names.EVALUATION_NAME] == "relevancy"
    assert rejected[names.EVALUATION_SCORE_LABEL] == "fail"
    assert rejected[names.EVALUATION_SCORE_VALUE] == 0.0
    assert "not in line with the context" in rejected[names.EVALUATION_EXPLANATION]
    assert [e.name for e in first.events] == [names.EVALUATION_RESULT, "refinekit.retry"]
    (accepted,) = evaluation_events(second)
    assert accepted[names.EVALUATION_SCORE_LABEL] == "pass"
    assert accepted[names.EVALUATION_SCORE_VALUE] == 1.0
    # the attempt ends before the wait: the next attempt starts after it
    assert (first.end_time or 0) <= (second.start_time or 0)


async def test_a_priced_call_span_carries_its_jobs_cost(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    server.script("judge", Reply.text("Yes", prompt_tokens=500_000, completion_tokens=10))
    client = judge_client(kind, server)
    judge = relevancy(JudgeModel(client, "judge"))
    prices = refinekit.Prices({"judge": (2.0, 100_000.0)})
    priced = retry_on_low_quality(evaluator=judge, budget=refinekit.Budget(prices=prices))(
        answer_fn(kind)
    )
    unpriced = retry_on_low_quality(evaluator=lambda request: True)(answer_fn(kind))
    assert await acall(priced, QUESTION) == ANSWER
    assert await acall(unpriced, QUESTION) == ANSWER
    await close(client)
    tree = Tree(exporter.get_finished_spans())
    spans = tree.named(f"refinekit.retry_on_low_quality {priced.__qualname__}")
    with_cost = [
        dict(s.attributes or {}) for s in spans if names.JUDGE_COST in (s.attributes or {})
    ]
    assert len(spans) == 2
    assert len(with_cost) == 1  # the unpriced call's span has none
    assert with_cost[0][names.COST] == 0.0
    assert with_cost[0][names.JUDGE_COST] == pytest.approx(2.0)


async def test_an_anthropic_judges_requests_are_genai_spans_of_provider_anthropic(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    pytest.importorskip("anthropic")
    server.script("claude", Reply.text("Yes", prompt_tokens=70, completion_tokens=1))
    client = server.anthropic_client() if kind == "sync" else server.async_anthropic_client()
    judge = relevancy(JudgeModel(client, "claude"))
    decorated = retry_on_low_quality(evaluator=judge, max_retries=0)(answer_fn(kind))
    assert await acall(decorated, QUESTION) == ANSWER
    await close(client)

    (chat,) = Tree(exporter.get_finished_spans()).named("chat claude")
    attributes = dict(chat.attributes or {})
    assert attributes[names.PROVIDER_NAME] == "anthropic"
    assert attributes[names.OPERATION_NAME] == "chat"
    assert attributes[names.REQUEST_MODEL] == "claude"
    assert (attributes[names.USAGE_INPUT_TOKENS], attributes[names.USAGE_OUTPUT_TOKENS]) == (70, 1)


async def test_a_structured_judge_calls_usage_is_the_jobs_judge_usage(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    # instructor retries the invalid first reply: the one request span counts both replies
    server.script(
        "judge",
        [
            Reply.text('{"rating": "four"}', prompt_tokens=70, completion_tokens=5),
            Reply.text(
                '{"rating": 4, "feedback": "Complete."}', prompt_tokens=90, completion_tokens=9
            ),
        ],
    )
    client = judge_client(kind, server)
    judge = rating(JudgeModel(client, "judge"))
    decorated = retry_on_low_quality(evaluator=judge, max_retries=0)(answer_fn(kind))
    assert await acall(decorated, QUESTION) == ANSWER
    await close(client)

    tree = Tree(exporter.get_finished_spans())
    chat = dict(tree.one("chat judge").attributes or {})
    assert (chat[names.USAGE_INPUT_TOKENS], chat[names.USAGE_OUTPUT_TOKENS]) == (160, 14)
    (result,) = evaluation_events(tree.one("refinekit.attempt"))
    assert result[names.EVALUATION_SCORE_VALUE] == 1.0
    assert result[names.EVALUATION_SCORE_LABEL] == "pass"


class Invoice(BaseModel):
    number: str
    total_cents: int


async def test_self_correct_calls_and_corrections_are_attempts(
    kind: str, exporter: InMemorySpanExporter, events: list[Event]
) -> None:
    replies = iter(['{"number": "INV-1"', '{"number": "INV-1", "total_cents": 1200}'])

    def extract(messages: list[dict[str, Any]]) -> str:
        return next(replies)

    async def aextract(messages: list[dict[str, Any]]) -> str:
        return next(replies)

    decorated = self_correct(schema=Invoice)(extract if kind == "sync" else aextract)
    assert await acall(decorated, [{"role": "user", "content": "the invoice"}]) == Invoice(
        number="INV-1", total_cents=1200
    )
    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.self_correct {decorated.__qualname__}")
    first, second = tree.children(call_span)
    assert (first.name, second.name) == ("refinekit.attempt", "refinekit.attempt")
    (correction,) = [e for e in first.events if e.name == "refinekit.correction"]
    (sent,) = [e for e in events if e.kind == "correction"]
    assert sent.failure
    assert (correction.attributes or {})[names.FAILURE] == sent.failure
    assert (correction.attributes or {})[names.ERROR] == sent.error
    assert second.events == ()
    assert (call_span.attributes or {})[names.ATTEMPTS] == 2


def test_reviewed_drafts_are_attempts_and_its_judge_threads_nest(
    server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    # the sync @reviewed judges in a worker thread (its time limit): the judge's spans still
    # nest under the draft they judge
    server.script("judge", [Reply.text("No"), Reply.text("Yes")])
    with server.client() as client:
        judge = relevancy(JudgeModel(client, "judge"))
        decorated = reviewed(judge=judge, reviser=lambda request: "Refunds take 14 days, by law.")(
            answer_fn("sync")
        )
        assert call(decorated, QUESTION) == "Refunds take 14 days, by law."

    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.reviewed {decorated.__qualname__}")
    draft = ("refinekit.attempt", [("refinekit.evaluate relevancy", [("chat judge", [])])])
    assert tree.shape(call_span) == (call_span.name, [draft, draft])
    first, second = tree.children(call_span)
    assert [e[names.EVALUATION_SCORE_LABEL] for e in evaluation_events(first)] == ["fail"]
    assert "refinekit.revision" in [e.name for e in first.events]
    assert [e[names.EVALUATION_SCORE_LABEL] for e in evaluation_events(second)] == ["pass"]


async def test_nested_decorators_nest_their_spans(
    kind: str, exporter: InMemorySpanExporter
) -> None:
    inner = retry_on_low_quality(evaluator=checks.not_empty(), max_retries=0)(answer_fn(kind))
    outer = retry_on_low_quality(evaluator=checks.max_length(100), max_retries=0)(inner)
    assert await acall(outer, QUESTION) == ANSWER
    tree = Tree(exporter.get_finished_spans())
    name = f"refinekit.retry_on_low_quality {inner.__qualname__}"
    outer_span, inner_span = sorted(tree.named(name), key=lambda s: s.start_time or 0)
    assert tree.shape(outer_span) == (
        name,
        [
            (
                "refinekit.attempt",
                [
                    (name, [("refinekit.attempt", [("refinekit.evaluate not_empty", [])])]),
                    ("refinekit.evaluate max_length", []),
                ],
            )
        ],
    )
    # one job: the inner call joined the outer one
    assert (outer_span.attributes or {})[names.JOB_ID] == (inner_span.attributes or {})[
        names.JOB_ID
    ]


async def test_a_composites_children_and_guarded_screens_get_evaluation_spans(
    kind: str, exporter: InMemorySpanExporter
) -> None:
    screen = refinekit.all_of(checks.not_empty(), checks.max_length(100))
    decorated = guarded(screen=screen, screen_input=True)(answer_fn(kind))
    assert await acall(decorated, QUESTION) == ANSWER
    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.guarded {decorated.__qualname__}")
    composite = (
        "refinekit.evaluate all_of(not_empty, max_length)",
        [("refinekit.evaluate not_empty", []), ("refinekit.evaluate max_length", [])],
    )
    # the input screen runs before the one attempt; the output screen judges it
    assert tree.shape(call_span) == (
        call_span.name,
        [composite, ("refinekit.attempt", [composite])],
    )
    _, attempt = tree.children(call_span)
    assert [e[names.EVALUATION_NAME] for e in evaluation_events(call_span)] == [
        "not_empty",
        "max_length",
        "all_of(not_empty, max_length)",
    ]
    assert [e[names.EVALUATION_SCORE_LABEL] for e in evaluation_events(attempt)] == ["pass"] * 3


async def test_the_criteria_judges_concurrent_requests_are_sibling_spans(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    server.script("judge", [Reply.text("YES", {"YES": 0.9, "NO": 0.1}, prompt_tokens=30)] * 2)
    client = judge_client(kind, server)
    judge = criteria(
        JudgeModel(client, "judge"),
        [Criterion("answers", "Does it answer?"), Criterion("polite", "Is it polite?")],
    )
    decorated = retry_on_low_quality(evaluator=judge, max_retries=0)(answer_fn(kind))
    assert await acall(decorated, QUESTION) == ANSWER
    await close(client)
    tree = Tree(exporter.get_finished_spans())
    evaluate = tree.one("refinekit.evaluate criteria")
    assert tree.shape(evaluate) == (evaluate.name, [("chat judge", []), ("chat judge", [])])
    assert [(c.attributes or {})[names.USAGE_INPUT_TOKENS] for c in tree.children(evaluate)] == [
        30,
        30,
    ]


def test_a_timed_out_evaluation_is_the_attempts_result_and_its_late_verdict_stays_apart(
    provider: tuple[TracerProvider, InMemorySpanExporter], caplog: pytest.LogCaptureFixture
) -> None:
    # the sync @reviewed judges in a worker thread it abandons at the time limit: the worker's
    # verdict comes after the call (and its attempt's span) ended
    release, ended = threading.Event(), threading.Event()

    class Ended(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            if span.name == "refinekit.evaluate slow":
                ended.set()

    tracer_provider, exporter = provider
    tracer_provider.add_span_processor(Ended())

    def slow(request: Any) -> bool:
        release.wait(5)
        return True

    decorated = reviewed(judge=slow, judge_timeout=0.05, max_revisions=0)(answer_fn("sync"))
    with pytest.raises(AnswerRejected, match="judge_timeout"):
        decorated(QUESTION)
    release.set()
    assert ended.wait(5)

    tree = Tree(exporter.get_finished_spans())
    assert evaluation_events(tree.one("refinekit.attempt")) == [
        {names.EVALUATION_NAME: "slow", names.ERROR_TYPE: "TimedOut"}
    ]
    late = tree.one("refinekit.evaluate slow")
    assert [e[names.EVALUATION_SCORE_LABEL] for e in evaluation_events(late)] == ["pass"]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


# --- concurrency: each job's tree stays apart ------------------------------------------------


def assert_apart(tree: Tree, requests: list[ReadableSpan], attempts: int) -> None:
    for request in requests:
        (call_span,) = tree.children(request)
        assert call_span.context.trace_id == request.context.trace_id
        spans = [call_span]
        while spans:
            span = spans.pop()
            assert span.context.trace_id == request.context.trace_id
            spans.extend(tree.children(span))
        assert [s.name for s in tree.children(call_span)] == ["refinekit.attempt"] * attempts
        for attempt in tree.children(call_span):
            assert [s.name for s in tree.children(attempt)] == ["refinekit.evaluate cites"]


def flaky_answer(kind: str) -> Any:
    """Cites its source only once told to (a retry), yielding to other tasks in between."""

    async def aanswer(question: str, feedback: str | None = None) -> str:
        await asyncio.sleep(0)
        return ANSWER if feedback is None else ANSWER + " [refunds.md]"

    def answer(question: str, feedback: str | None = None) -> str:
        return ANSWER if feedback is None else ANSWER + " [refunds.md]"

    return answer if kind == "sync" else aanswer


def cites(request: Any) -> bool:
    return "[refunds.md]" in request.answer


async def test_concurrent_asyncio_jobs_keep_their_trees_apart(
    exporter: InMemorySpanExporter, tracer: trace.Tracer
) -> None:
    decorated = retry_on_low_quality(evaluator=cites, max_retries=1)(flaky_answer("async"))

    async def request(i: int) -> str:
        with tracer.start_as_current_span(f"request {i}"):
            result: str = await decorated(f"{QUESTION} #{i}")
            return result

    await asyncio.gather(*(request(i) for i in range(8)))
    tree = Tree(exporter.get_finished_spans())
    requests = [tree.one(f"request {i}") for i in range(8)]
    assert len({r.context.trace_id for r in requests}) == 8
    assert_apart(tree, requests, attempts=2)


def test_threads_keep_their_trees_apart(
    exporter: InMemorySpanExporter, tracer: trace.Tracer
) -> None:
    decorated = retry_on_low_quality(evaluator=cites, max_retries=1)(flaky_answer("sync"))

    def request(i: int) -> str:
        with tracer.start_as_current_span(f"request {i}"):
            result: str = decorated(f"{QUESTION} #{i}")
            return result

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(request, range(8)))
    tree = Tree(exporter.get_finished_spans())
    requests = [tree.one(f"request {i}") for i in range(8)]
    assert_apart(tree, requests, attempts=2)


def test_a_call_in_a_thread_nests_under_the_span_its_context_carries(
    exporter: InMemorySpanExporter, tracer: trace.Tracer
) -> None:
    decorated = retry_on_low_quality(evaluator=checks.not_empty(), max_retries=0)(answer_fn("sync"))
    with tracer.start_as_current_span("request") as request, ThreadPoolExecutor(1) as pool:
        context = contextvars.copy_context()
        pool.submit(context.run, decorated, QUESTION).result()
    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.retry_on_low_quality {decorated.__qualname__}")
    assert tree.parent(call_span) is not None
    assert tree.parent(call_span).context.span_id == request.get_span_context().span_id  # type: ignore[union-attr]


# --- errors: status set, exception recorded, no secret anywhere -------------------------------

SECRET_KEY = "sk-proj-" + "S3cr3tK3y" * 4
PASSWORD = "hunter2-very-secret"


def all_text(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute, event attribute and status text of the spans, as one text."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, span.status.description or ""]
        parts += [json.dumps(dict(span.attributes or {}), default=str)]
        for event in span.events:
            parts += [event.name, json.dumps(dict(event.attributes or {}), default=str)]
    return "\n".join(parts)


async def test_a_failed_call_sets_the_error_status_and_records_the_exception_redacted(
    kind: str, exporter: InMemorySpanExporter
) -> None:
    def answer(question: str, feedback: str | None = None) -> str:
        raise RuntimeError(
            f"upstream said no: Authorization: Bearer {SECRET_KEY} at "
            f"https://admin:{PASSWORD}@llm.internal/v1"
        )

    async def aanswer(question: str, feedback: str | None = None) -> str:
        return answer(question, feedback)

    decorated = retry_on_low_quality(evaluator=checks.not_empty(), max_retries=1)(
        answer if kind == "sync" else aanswer
    )
    with pytest.raises(RuntimeError, match="upstream said no"):
        await acall(decorated, QUESTION)

    spans = exporter.get_finished_spans()
    tree = Tree(spans)
    call_span = tree.one(f"refinekit.retry_on_low_quality {decorated.__qualname__}")
    assert call_span.status.status_code is StatusCode.ERROR
    assert (call_span.attributes or {})[names.ERROR_TYPE] == "RuntimeError"
    (exception,) = [e for e in call_span.events if e.name == names.EXCEPTION]
    attributes = dict(exception.attributes or {})
    assert attributes[names.EXCEPTION_TYPE] == "builtins.RuntimeError"
    assert "upstream said no" in attributes[names.EXCEPTION_MESSAGE]
    assert "llm.internal" in attributes[names.EXCEPTION_MESSAGE]
    assert "Traceback" in attributes[names.EXCEPTION_STACKTRACE]
    (attempt,) = tree.children(call_span)  # the error is not retried: one attempt
    assert attempt.status.status_code is StatusCode.ERROR
    text = all_text(spans)
    assert SECRET_KEY not in text
    assert PASSWORD not in text
    assert "S3cr3tK3y" not in text


async def test_a_failed_judge_request_is_an_error_span_with_no_secret(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    server.script("judge", Reply.error(503, f"overloaded; your key {SECRET_KEY} is fine"))
    client = judge_client(kind, server, api_key=SECRET_KEY)
    judge = relevancy(JudgeModel(client, "judge"))
    decorated = retry_on_low_quality(
        evaluator=judge, max_retries=0, judge_error_policy="fail_closed"
    )(answer_fn(kind))
    with pytest.raises(JudgeUnavailable):
        await acall(decorated, QUESTION)
    await close(client)

    spans = exporter.get_finished_spans()
    tree = Tree(spans)
    chat = tree.one("chat judge")
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})[names.ERROR_TYPE] == "JudgeUnavailable"
    (result,) = evaluation_events(tree.one("refinekit.attempt"))
    assert result == {names.EVALUATION_NAME: "relevancy", names.ERROR_TYPE: "JudgeUnavailable"}
    call_span = tree.one(f"refinekit.retry_on_low_quality {decorated.__qualname__}")
    assert call_span.status.status_code is StatusCode.ERROR
    assert SECRET_KEY not in all_text(spans)
    assert "S3cr3tK3y" not in all_text(spans)


# --- on and off --------------------------------------------------------------------------------


def test_uninstrument_stops_the_spans(exporter: InMemorySpanExporter) -> None:
    decorated = retry_on_low_quality(evaluator=checks.not_empty(), max_retries=0)(answer_fn("sync"))
    decorated(QUESTION)
    assert refinekit.otel.is_instrumented()
    assert len(exporter.get_finished_spans()) == 3  # the call, its attempt, the evaluation
    refinekit.otel.uninstrument()
    refinekit.otel.uninstrument()  # harmless twice
    assert not refinekit.otel.is_instrumented()
    exporter.clear()
    decorated(QUESTION)
    assert exporter.get_finished_spans() == ()


def test_instrument_uses_the_global_provider_by_default() -> None:
    # the API's global provider (a proxy until one is set): its spans are non-recording, and
    # a decorated call works the same
    refinekit.otel.instrument()
    try:
        decorated = retry_on_low_quality(evaluator=checks.not_empty(), max_retries=0)(
            answer_fn("sync")
        )
        assert decorated(QUESTION) == ANSWER
    finally:
        refinekit.otel.uninstrument()


def run_python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


CALL = (
    "import refinekit, refinekit.otel\n"
    "from refinekit import checks, retry_on_low_quality\n"
    "answer = retry_on_low_quality(evaluator=checks.not_empty())(lambda question: 'an answer')\n"
    "assert answer('q') == 'an answer'\n"
)


def test_tracing_off_imports_no_opentelemetry() -> None:
    # installed here (the dev extra), but never imported unless instrument() is called
    out = run_python(
        "import sys\n" + CALL + "print(sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] == 'opentelemetry' or m == 'refinekit.otel._tracer'))\n"
    )
    assert out == "[]"


def test_without_opentelemetry_calls_work_and_instrument_says_what_to_install() -> None:
    out = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed: importing it fails\n"
        + CALL
        + "try:\n"
        "    refinekit.otel.instrument()\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(type(exc).__name__, exc.name, '|', exc)\n"
        "print(refinekit.otel.is_instrumented())\n"
    )
    first, second = out.splitlines()
    assert first.startswith("ModuleNotFoundError opentelemetry |")
    assert 'pip install "refinekit[otel]"' in first
    assert second == "False"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_streamed_replys_attempt_span_says_how_its_stream_went(
    kind: str, exporter: InMemorySpanExporter
) -> None:
    from streaming_helpers import Source, StreamingModel, chunked, collect

    bad = '{"number": 7, "total_cents": "lots", "note": "' + "x" * 40 + '"}'
    good = '{"number": "INV-1", "total_cents": 1200}'
    model = StreamingModel(kind, Source(*chunked(bad, 4)), Source(*chunked(good, 4)))
    decorated = self_correct(schema=Invoice, early_abort=True)(model.function())
    items = collect(kind, decorated, [{"role": "user", "content": "the invoice"}])
    assert items[-1].value == Invoice(number="INV-1", total_cents=1200)
    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.self_correct {decorated.__qualname__}")
    first, second = tree.children(call_span)
    aborted = first.attributes or {}
    assert aborted[names.STREAM_CHUNKS] == model.sources[0].given  # type: ignore[union-attr]
    assert "total_cents" in str(aborted[names.STREAM_ABORTED])
    assert aborted[names.STREAM_USAGE_ESTIMATED] is True
    assert isinstance(aborted[names.STREAM_FIRST_CHUNK], float)
    assert [e.name for e in first.events] == [
        "refinekit.stream",
        "refinekit.reset",
        "refinekit.correction",
    ]
    complete = second.attributes or {}
    assert complete[names.STREAM_CHUNKS] == len(chunked(good, 4))
    assert names.STREAM_ABORTED not in complete


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_resumed_streams_attempt_span_says_it_resumed_and_what_it_kept(
    kind: str, exporter: InMemorySpanExporter
) -> None:
    from streaming_helpers import Source, StreamingModel, collect

    bad = ['{"number": "INV-1", ', '"total_cents": "lots", ', '"note": "x"}']
    model = StreamingModel(kind, Source(*bad), Source(" 1200}"))
    decorated = self_correct(schema=Invoice, early_abort="prefill")(model.function())
    items = collect(kind, decorated, [{"role": "user", "content": "the invoice"}])
    assert items[-1].value == Invoice(number="INV-1", total_cents=1200)
    tree = Tree(exporter.get_finished_spans())
    first, second = tree.children(tree.one(f"refinekit.self_correct {decorated.__qualname__}"))
    assert names.STREAM_RESUMED not in (first.attributes or {})
    resumed = second.attributes or {}
    assert resumed[names.STREAM_RESUMED] is True
    assert resumed[names.STREAM_KEPT] == 1
    assert "refinekit.reset" not in [e.name for e in first.events]  # the number stands


async def test_a_retried_text_streams_attempt_spans_say_how_each_stream_went_over_http(
    kind: str, server: ScriptedOpenAI, exporter: InMemorySpanExporter
) -> None:
    from refinekit import checks

    server.script(
        "m",
        [
            Reply.hang(after=3, then=Reply.text("Refunds are guaranteed, always.")),
            Reply.text("Refunds within 30 days.", prompt_tokens=21, completion_tokens=5),
        ],
    )
    client = judge_client(kind, server, timeout=2, max_retries=0)
    request = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}

    def answer(question: str) -> Any:
        messages = [{"role": "user", "content": question}]
        return client.chat.completions.create(messages=messages, **request)

    async def aanswer(question: str) -> Any:
        messages = [{"role": "user", "content": question}]
        return await client.chat.completions.create(messages=messages, **request)

    decorated = retry_on_low_quality(evaluator=checks.excludes("guaranteed"), max_retries=1)(
        answer if kind == "sync" else aanswer
    )
    assert await acall(decorated, QUESTION) == "Refunds within 30 days."
    await close(client)
    tree = Tree(exporter.get_finished_spans())
    call_span = tree.one(f"refinekit.retry_on_low_quality {decorated.__qualname__}")
    first, second = tree.children(call_span)
    aborted, complete = first.attributes or {}, second.attributes or {}
    assert str(aborted[names.STREAM_ABORTED]).startswith("rejected by a rule check")
    assert aborted[names.STREAM_USAGE_ESTIMATED] is True
    assert isinstance(aborted[names.STREAM_FIRST_CHUNK], float)
    assert names.STREAM_ABORTED not in complete
    assert complete[names.STREAM_USAGE_ESTIMATED] is False
    # the text chunks, the role chunk, the finish chunk and the usage chunk
    (sent,) = [s.sent for s in server.streamed("m") if s.fault is None]  # not the hung one
    assert complete[names.STREAM_CHUNKS] == sent + 3
    assert "refinekit.stream" in [e.name for e in first.events]


def test_the_tracer_learns_a_command_from_the_command_not_from_its_class() -> None:
    # the engine and the commands know nothing of OpenTelemetry, and the tracer imports no
    # decorator, judge or flow module: each command says what it is (its `role`)
    tree = ast.parse(inspect.getsource(refinekit.otel._tracer))
    imported = {
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0
    }
    assert not {m for m in imported if m.startswith(("_decorators", "judges", "_engine.flow"))}
