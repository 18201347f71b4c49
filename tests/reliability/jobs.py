"""The jobs of a fault mix, and their checks.

A job runs one decorated call (sync or async) against its own model names on one shared
`ScriptedOpenAI`, and is checked against `oracle.py`'s prediction and the invariants:

- it ends with a value or an exception of a documented type, in the predicted way;
- its model calls, counted from the server's recorded requests, are within its budget;
- an outage is never counted as a pass (no unjudged verdict is `passed`);
- no planted secret reaches an exception refinekit raised, an event, a log record or a warning;
- no request of the job is still running on the server after the job returned.

`run_mix(seed, jobs)` runs a mix and returns a `MixReport` (figures and violations).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import gc
import itertools
import logging
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import openai
from faultmix import (
    CONTEXT,
    DECORATORS,
    FAULT_KINDS,
    HANG_TIMEOUT,
    JOB_DEADLINE,
    MODES,
    QUESTION,
    USER_TURN,
    Invoice,
    Mix,
    Secrets,
    Step,
)
from openai.types.chat import ChatCompletion
from oracle import (
    ALLOWED,
    PASS_THROUGH,
    Outcome,
    is_pass_through,
    predict_retry,
    predict_reviewed,
    predict_self_correct,
)

import refinekit
from refinekit import (
    AnswerRejected,
    LowQualityAnswer,
    RefinekitError,
    judges,
    record_context,
    retry_on_low_quality,
    reviewed,
    self_correct,
)
from refinekit._structure.corrections import CHECK_MARKER
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

# --- capturing what refinekit says ---------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Capture:
    """Every event, log record (logger `refinekit`, DEBUG) and warning of a run."""

    events: list[refinekit.Event] = field(default_factory=list)
    records: list[logging.LogRecord] = field(default_factory=list)
    warned: list[warnings.WarningMessage] = field(default_factory=list)

    @contextlib.contextmanager
    def active(self) -> Iterator[Capture]:
        logger = logging.getLogger("refinekit")
        handler = _Records()
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)  # every event is logged, DEBUG ones too
        logger.propagate = False  # kept here: hundreds of jobs' lines are not the test's output
        try:
            with (
                warnings.catch_warnings(record=True) as warned,
                refinekit.subscribe(self.events.append),
            ):
                warnings.simplefilter("always")
                try:
                    yield self
                finally:
                    gc.collect()  # unclosed clients and sockets warn when collected
                    self.warned.extend(warned)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
            self.records.extend(handler.records)

    def of(self, function: str) -> list[refinekit.Event]:
        return [e for e in self.events if e.function == function]

    def texts(self) -> Iterator[tuple[str, str]]:
        """(where, text) of everything refinekit said in the run."""
        formatter = logging.Formatter()
        for r in self.records:
            text = r.getMessage()
            if r.exc_info:
                text += formatter.formatException(r.exc_info)
            yield f"log record {r.name}:{r.levelname}", text
        for e in self.events:
            yield f"{e.kind} event of {e.function}", repr(e)
        for w in self.warned:
            yield f"warning {w.category.__name__}", str(w.message)


def exception_text(exc: BaseException) -> str:
    """What a caller (or a log) can see of an exception: its traceback text and its fields."""
    # Not the chain: a cause that is the user's client's own error (the default reviser's
    # `openai` error under AnswerRejected) is that client's text, as when it passes through.
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False))
    with contextlib.suppress(TypeError):
        text += repr(vars(exc))
    return text + repr(exc)


# --- jobs ----------------------------------------------------------------------------------------


@dataclass
class JobResult:
    """One job: what it was, what it was served, how it ended, and what went wrong."""

    name: str
    decorator: str
    mode: str
    served: list[str]
    outcome: str
    calls: tuple[int, ...]
    budget: tuple[int, ...]
    violations: list[str] = field(default_factory=list)


@dataclass
class Clients:
    """The clients of a run, sync and async: the answering model's and the judges'.

    Every one has the planted password in its base URL and a planted key.
    """

    answer_sync: openai.OpenAI
    answer_async: openai.AsyncOpenAI
    judge_sync: list[openai.OpenAI]
    judge_async: list[openai.AsyncOpenAI]

    @classmethod
    def open(cls, server: ScriptedOpenAI, secrets: Secrets, timeout: float) -> Clients:
        url = secrets.url(server.base_url)
        options: dict[str, Any] = {"base_url": url, "max_retries": 0, "timeout": timeout}
        return cls(
            openai.OpenAI(api_key=secrets.answer_key, **options),
            openai.AsyncOpenAI(api_key=secrets.answer_key, **options),
            [openai.OpenAI(api_key=k, **options) for k in secrets.judge_keys],
            [openai.AsyncOpenAI(api_key=k, **options) for k in secrets.judge_keys],
        )

    def answer(self, mode: str) -> openai.OpenAI | openai.AsyncOpenAI:
        return self.answer_sync if mode == "sync" else self.answer_async

    def close_sync(self) -> None:
        for client in [self.answer_sync, *self.judge_sync]:
            client.close()

    async def close_async(self) -> None:
        for client in [self.answer_async, *self.judge_async]:
            await client.close()


class Job:
    """One decorated call against its own model names, and its check."""

    decorator = ""

    def __init__(self, mix: Mix, number: int, mode: str) -> None:
        self.mix = mix
        self.mode = mode
        self.name = f"{self.decorator}_{mode}_{mix.seed}_{number}"
        self.rate = mix.fault_rate()
        self.hangs = mix.rng.random() < 0.25  # only these jobs may meet a Reply.hang()
        self.judge_key = mix.rng.randrange(len(mix.secrets.judge_keys))  # its judge's client
        self.steps: dict[str, list[Step]] = {}
        self.outcome: Any = None
        self.error: BaseException | None = None

    # set up by subclasses
    def prepare(self, server: ScriptedOpenAI, clients: Clients) -> None:
        raise NotImplementedError

    def call(self) -> Any:
        raise NotImplementedError

    async def acall(self) -> Any:
        raise NotImplementedError

    def check(self, server: ScriptedOpenAI, capture: Capture) -> JobResult:
        raise NotImplementedError

    @property
    def has_hang(self) -> bool:
        return any(s.hangs for steps in self.steps.values() for s in steps)

    # helpers for subclasses

    def model(self, role: str) -> str:
        return f"{self.name}-{role}"

    def script(self, server: ScriptedOpenAI, role: str, steps: list[Step]) -> None:
        self.steps[role] = steps
        server.script(self.model(role), [s.reply for s in steps])

    def judge_streams(self, n: int) -> list[list[Step]]:
        """`n` replies of the job's judge (self.judge_kind) for each of its requests a turn
        makes: two for a criteria judge, one for the others."""
        mix = self.mix
        width = 2 if self.judge_kind == "criteria" else 1
        return [
            [
                mix.verdict(
                    self.judge_kind,
                    self.rate,
                    key=mix.secrets.judge_keys[self.judge_key],
                    hangs=self.hangs,
                    misconfigured=True,
                )
                for _ in range(n)
            ]
            for _ in range(width)
        ]

    def served(self, server: ScriptedOpenAI, role: str) -> list[Step]:
        n = len(server.requests_for(self.model(role)))
        return self.steps[role][:n]

    def timeout_for(self, role: str, call: int) -> float | openai.NotGiven:
        """The per-request timeout of the answering function's call number `call` (0-based)."""
        steps = self.steps.get(role, [])
        if call < len(steps) and steps[call].hangs:
            return HANG_TIMEOUT
        return openai.NOT_GIVEN

    def outcome_name(self) -> str:
        if self.error is None:
            return "value"
        if isinstance(self.error, AnswerRejected):
            return f"AnswerRejected:{self.error.reason}"
        return type(self.error).__name__

    def result(
        self,
        server: ScriptedOpenAI,
        capture: Capture,
        roles: Sequence[str],
        outcome: str,
        calls: tuple[int, ...],
        budget: tuple[int, ...],
        predicted: set[Outcome],
    ) -> JobResult:
        """The common checks: type, prediction, budget, secrets, outages never passed."""
        served = [s.kind for role in roles for s in self.served(server, role)]
        job = JobResult(self.name, self.decorator, self.mode, served, outcome, calls, budget)
        v = job.violations
        error = self.error
        if error is not None:
            if not isinstance(error, ALLOWED[self.decorator]):
                v.append(f"raised an undocumented {type(error).__name__}: {_short(error)}")
            elif isinstance(error, PASS_THROUGH) and not is_pass_through(error):
                v.append(f"raised {type(error).__name__} not from the client: {_short(error)}")
        if any(c > b for c, b in zip(calls, budget, strict=True)):
            v.append(f"model calls {calls} over the budget {budget} (answer, judge, reviser)")
        if (outcome, calls) not in predicted:
            expected = ", ".join(f"{o} after {c}" for o, c in sorted(predicted))
            said = f" ({_short(error)})" if error is not None else ""
            v.append(
                f"ended {outcome}{said} after {calls} calls, served {served}; "
                f"expected one of: {expected}"
            )
        for event in capture.of(self.name):
            verdict = event.verdict
            if verdict is not None and verdict.status != "judged" and verdict.passed:
                v.append(f"a {verdict.status} verdict counted as passed ({event.kind} event)")
        texts = [("exception", exception_text(error))] if _refinekit_made(error) else []
        if isinstance(self.outcome, str):
            texts.append(("returned value", self.outcome))
        for where, text in texts:
            leaked = self.mix.secrets.leaked(text)
            if leaked:
                excerpt = _excerpt(text, leaked, self.mix.secrets)
                v.append(f"secret {', '.join(leaked)} in the {where}: {excerpt}")
        return job


def _refinekit_made(error: BaseException | None) -> bool:
    return isinstance(error, (RefinekitError, LowQualityAnswer)) or (
        error is not None and not is_pass_through(error)
    )


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:160] + ("..." if len(text) > 160 else "")


def _excerpt(text: str, leaked: list[str], secrets: Secrets) -> str:
    secret = secrets.values()[leaked[0]]
    at = max(text.find(secret), text.find(secret[-16:]))
    return repr(text[max(0, at - 80) : at + 40])


class SelfCorrectJob(Job):
    decorator = "self_correct"

    def prepare(self, server: ScriptedOpenAI, clients: Clients) -> None:
        self.max_corrections = self.mix.pick([0, 1, 2, 2, 3])
        steps = [
            self.mix.invoice(self.rate, hangs=self.hangs) for _ in range(self.max_corrections + 1)
        ]
        self.script(server, "answer", steps)
        client = clients.answer(self.mode)
        model = self.model("answer")
        calls = itertools.count()
        job = self

        if self.mode == "sync":
            assert isinstance(client, openai.OpenAI)

            def extract(messages: list[dict[str, Any]]) -> ChatCompletion:
                timeout = job.timeout_for("answer", next(calls))
                return client.chat.completions.create(
                    model=model,
                    messages=messages,
                    timeout=timeout,  # type: ignore[arg-type]
                )

            fn: Callable[..., Any] = extract
        else:
            assert isinstance(client, openai.AsyncOpenAI)

            async def aextract(messages: list[dict[str, Any]]) -> ChatCompletion:
                timeout = job.timeout_for("answer", next(calls))
                return await client.chat.completions.create(
                    model=model,
                    messages=messages,
                    timeout=timeout,  # type: ignore[arg-type]
                )

            fn = aextract
        fn.__qualname__ = self.name
        self.fn = self_correct(schema=Invoice, max_corrections=self.max_corrections)(fn)
        self.messages = copy.deepcopy(USER_TURN)

    def call(self) -> Any:
        return self.fn(self.messages)

    async def acall(self) -> Any:
        return await self.fn(self.messages)

    def check(self, server: ScriptedOpenAI, capture: Capture) -> JobResult:
        served = self.served(server, "answer")
        calls = (len(server.requests_for(self.model("answer"))),)
        predicted = predict_self_correct(self.steps["answer"], self.max_corrections)
        job = self.result(
            server,
            capture,
            ["answer"],
            self.outcome_name(),
            calls,
            (self.max_corrections + 1,),
            predicted,
        )
        v = job.violations
        if self.messages != USER_TURN:
            v.append("the caller's conversation was mutated")
        if self.error is None:
            if not isinstance(self.outcome, Invoice):
                v.append(f"returned {type(self.outcome).__name__}, not an Invoice")
            elif served and served[-1].value is not None and self.outcome != served[-1].value:
                v.append(f"returned {self.outcome!r}, not the reply's {served[-1].value!r}")
        for k, request in enumerate(server.requests_for(self.model("answer"))):
            sent = (request.body or {}).get("messages", [])
            # the original turn, then (after a failure) one correction turn: never more
            expected = len(USER_TURN) + (1 if k else 0)
            if len(sent) != expected:
                v.append(f"call {k + 1} sent {len(sent)} messages, not {expected}")
            elif sent[: len(USER_TURN)] != USER_TURN:
                v.append(f"call {k + 1} did not start from the original conversation")
            elif k and not str(sent[-1].get("content", "")).startswith(CHECK_MARKER):
                v.append(f"call {k + 1}'s last message is not a marked correction turn")
        return job


class QuestionJob(Job):
    """A job whose decorated function is asked QUESTION."""

    fn: Any

    def call(self) -> Any:
        return self.fn(QUESTION)

    async def acall(self) -> Any:
        return await self.fn(QUESTION)


class RetryJob(QuestionJob):
    decorator = "retry_on_low_quality"

    def prepare(self, server: ScriptedOpenAI, clients: Clients) -> None:
        mix = self.mix
        self.max_retries = mix.pick([0, 1, 2])
        self.judge_kind = mix.pick(["relevancy", "criteria", "rating"])
        self.outer_policy = mix.pick(["fail_open", "fail_closed"])
        self.judge_policy = mix.pick([None, None, "fail_open", "fail_closed"])
        self.on_exhausted = mix.pick(["raise", "return_best"])
        attempts = self.max_retries + 1
        answers = [mix.text(self.rate, hangs=self.hangs) for _ in range(attempts)]
        self.script(server, "answer", answers)
        self.streams = self.judge_streams(attempts)
        judge = make_judge(self, server, clients, self.judge_kind, self.streams, self.judge_policy)
        client = clients.answer(self.mode)
        model = self.model("answer")
        calls = itertools.count()
        job = self

        def messages(feedback: str | None) -> list[dict[str, str]]:
            prompt = f"{CONTEXT}\n\nQuestion: {QUESTION}"
            if feedback:
                prompt += f"\nYour last answer was rejected: {feedback}"
            return [{"role": "user", "content": prompt}]

        if self.mode == "sync":
            assert isinstance(client, openai.OpenAI)

            def answer(question: str, feedback: str | None = None) -> ChatCompletion:
                record_context([CONTEXT])
                timeout = job.timeout_for("answer", next(calls))
                return client.chat.completions.create(
                    model=model,
                    messages=messages(feedback),
                    timeout=timeout,  # type: ignore[arg-type]
                )

            fn: Callable[..., Any] = answer
        else:
            assert isinstance(client, openai.AsyncOpenAI)

            async def aanswer(question: str, feedback: str | None = None) -> ChatCompletion:
                record_context([CONTEXT])
                timeout = job.timeout_for("answer", next(calls))
                return await client.chat.completions.create(
                    model=model,
                    messages=messages(feedback),
                    timeout=timeout,  # type: ignore[arg-type]
                )

            fn = aanswer
        fn.__qualname__ = self.name
        self.fn = retry_on_low_quality(
            evaluator=judge,
            max_retries=self.max_retries,
            judge_error_policy=self.outer_policy,  # type: ignore[arg-type]
            on_exhausted=self.on_exhausted,  # type: ignore[arg-type]
        )(fn)

    def outcome_name(self) -> str:
        if self.error is not None:
            return super().outcome_name()
        return "value:" + self._how_returned()

    def _how_returned(self) -> str:
        events = self.capture.of(self.name)
        kinds = [e.kind for e in events]
        if "unjudged" in kinds:
            return "unjudged"
        if "exhausted" in kinds:
            return "best"
        return "passed"

    def check(self, server: ScriptedOpenAI, capture: Capture) -> JobResult:
        self.capture = capture
        width = len(self.streams)
        calls = (
            len(server.requests_for(self.model("answer"))),
            len(server.requests_for(self.model("judge"))),
        )
        attempts = self.max_retries + 1
        predicted = predict_retry(
            self.steps["answer"],
            self.streams,
            self.max_retries,
            self.outer_policy,
            self.judge_policy,
            self.on_exhausted,
        )
        job = self.result(
            server,
            capture,
            ["answer", "judge"],
            self.outcome_name(),
            calls,
            (attempts, attempts * width),
            predicted,
        )
        v = job.violations
        if self.error is None:
            texts = {s.value for s in self.served(server, "answer") if s.value is not None}
            if not isinstance(self.outcome, ChatCompletion):
                v.append(f"returned {type(self.outcome).__name__}, not the model's reply")
            elif self.outcome.choices and self.outcome.choices[0].message.content not in texts:
                v.append("returned a reply the model did not send")
            if job.outcome == "value:passed":
                verdicts = [e.verdict for e in capture.of(self.name) if e.kind == "verdict"]
                if not verdicts or not verdicts[-1] or not verdicts[-1].passed:
                    v.append("returned as passed without a passing verdict")
        return job


def make_judge(
    job: Job,
    server: ScriptedOpenAI,
    clients: Clients,
    kind: str,
    streams: list[list[Step]],
    policy: str | None,
) -> judges.Judge:
    """A judge over its own model name; a criteria judge's two questions each read a stream."""
    mix = job.mix
    use_async = mix.rng.random() < 0.5
    key = job.judge_key
    client = clients.judge_async[key] if use_async else clients.judge_sync[key]
    hangs = any(s.hangs for stream in streams for s in stream)
    judge_model = judges.JudgeModel(
        client, job.model("judge"), timeout=HANG_TIMEOUT if hangs else None
    )
    job.steps["judge"] = [s for pair in zip(*streams, strict=True) for s in pair]
    if kind != "criteria":
        server.script(job.model("judge"), [s.reply for s in streams[0]])
        if kind == "relevancy":
            return judges.relevancy(judge_model, judge_error_policy=policy)  # type: ignore[arg-type]
        return judges.rating(judge_model, max_retries=0, judge_error_policy=policy)  # type: ignore[arg-type]
    questions = ["Is the answer supported by the context?", "Does the answer address the question?"]
    asked = [0, 0]
    lock = threading.Lock()

    def route(request: RecordedRequest) -> Reply | str:
        prompt = str((request.body or {})["messages"][-1]["content"])
        i = 0 if questions[0] in prompt else 1
        with lock:
            n = asked[i]
            asked[i] += 1
        return streams[i][n].reply if n < len(streams[i]) else Reply.error(500, "over budget")

    server.script(job.model("judge"), [route] * sum(len(s) for s in streams))
    return judges.criteria(
        judge_model,
        [judges.Criterion("supported", questions[0]), judges.Criterion("on_topic", questions[1])],
        judge_error_policy=policy,  # type: ignore[arg-type]
    )


class ReviewedJob(QuestionJob):
    decorator = "reviewed"

    def prepare(self, server: ScriptedOpenAI, clients: Clients) -> None:
        mix = self.mix
        self.review_mode = mix.pick(["enforce", "enforce", "enforce", "shadow"])
        self.max_revisions = mix.pick([0, 1, 2])
        self.judge_kind = mix.pick(["relevancy", "criteria"])
        self.judge_policy = mix.pick([None, None, "fail_open", "fail_closed"])
        # A hang job either lets the judge's own request time out (a JudgeUnavailable), or
        # leaves it to judge_timeout (the request may outlive the job: it must not).
        by_judge_timeout = mix.rng.random() < 0.5
        drafts = 1 if self.review_mode == "shadow" else self.max_revisions + 1
        self.script(server, "answer", [mix.text(self.rate, hangs=self.hangs)])
        self.streams = self.judge_streams(drafts)
        judge_hangs = any(s.hangs for stream in self.streams for s in stream)
        self.by_judge_timeout = by_judge_timeout and judge_hangs
        if self.by_judge_timeout:  # a hang is then judge_timeout's to end
            self.streams = [[self._judge_step(s) for s in stream] for stream in self.streams]
        revisions = [mix.revision(self.rate, hangs=self.hangs) for _ in range(drafts - 1)]
        self.script(server, "reviser", revisions)
        judge = make_judge(self, server, clients, self.judge_kind, self.streams, self.judge_policy)
        if self.by_judge_timeout:
            judge.judge_model.timeout = None  # only judge_timeout bounds the request
        client = clients.answer(self.mode)
        reviser_client = mix.pick([clients.answer_sync, clients.answer_async])
        model = self.model("answer")
        job = self

        if self.mode == "sync":
            assert isinstance(client, openai.OpenAI)

            def answer(question: str) -> ChatCompletion:
                record_context([CONTEXT])
                return client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": question}],
                    timeout=job.timeout_for("answer", 0),  # type: ignore[arg-type]
                )

            fn: Callable[..., Any] = answer
        else:
            assert isinstance(client, openai.AsyncOpenAI)

            async def aanswer(question: str) -> ChatCompletion:
                record_context([CONTEXT])
                return await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": question}],
                    timeout=job.timeout_for("answer", 0),  # type: ignore[arg-type]
                )

            fn = aanswer
        fn.__qualname__ = self.name
        self.fn = reviewed(
            judge=judge,
            mode=self.review_mode,  # type: ignore[arg-type]
            max_revisions=self.max_revisions,
            judge_timeout=0.5 if self.by_judge_timeout else 5.0,
            budget=2.0 if self.has_hang else 30.0,
            client=reviser_client,
            model=self.model("reviser"),
        )(fn)

    def _judge_step(self, step: Step) -> Step:
        if step.hangs and self.by_judge_timeout:
            return dataclasses.replace(step, result=frozenset({"timeout"}))
        return step

    def outcome_name(self) -> str:
        if self.error is not None:
            return super().outcome_name()
        return "value:shadow" if self.review_mode == "shadow" else "value:passed"

    def check(self, server: ScriptedOpenAI, capture: Capture) -> JobResult:
        width = len(self.streams)
        drafts = len(self.streams[0])
        calls = (
            len(server.requests_for(self.model("answer"))),
            len(server.requests_for(self.model("judge"))),
            len(server.requests_for(self.model("reviser"))),
        )
        predicted = predict_reviewed(
            self.steps["answer"][0],
            self.streams,
            self.steps["reviser"],
            self.review_mode,
            self.max_revisions,
            self.judge_policy,
        )
        job = self.result(
            server,
            capture,
            ["answer", "judge", "reviser"],
            self.outcome_name(),
            calls,
            (1, drafts * width, drafts - 1),
            predicted,
        )
        v = job.violations
        reviews = [e.verdict for e in capture.of(self.name) if e.kind == "review"]
        original = self.steps["answer"][0].value
        if self.error is None and self.review_mode == "shadow" and self.outcome != original:
            v.append("shadow mode did not return the original answer")
        if self.error is None and self.review_mode == "enforce":
            last = reviews[-1] if reviews else None
            if last is None or not last.passed or last.status != "judged":
                v.append("enforce mode published an answer without a passing verdict")
        if isinstance(self.error, AnswerRejected) and len(self.error.verdicts) != len(reviews):
            v.append("AnswerRejected.verdicts differ from the review events")
        return job


JOB_TYPES: dict[str, type[Job]] = {
    "self_correct": SelfCorrectJob,
    "retry_on_low_quality": RetryJob,
    "reviewed": ReviewedJob,
}


# --- running a mix -------------------------------------------------------------------------------


@dataclass
class MixReport:
    """The figures and the violations of one run."""

    seed: int
    results: list[JobResult]
    run_violations: list[str]
    seconds: float

    @property
    def violations(self) -> list[str]:
        found = [f"{r.name}: {v}" for r in self.results for v in r.violations]
        return self.run_violations + found

    def figures(self) -> str:
        """Jobs by decorator and mode, faults by kind, outcomes by type, as text tables."""
        lines = [f"seed {self.seed}: {len(self.results)} jobs in {self.seconds:.1f} s"]
        jobs = Counter((r.decorator, r.mode) for r in self.results)
        lines.append("\njobs            " + "  ".join(f"{m:>6}" for m in MODES))
        for d in DECORATORS:
            if any(k[0] == d for k in jobs):
                lines.append(f"  {d:<22}" + "  ".join(f"{jobs[(d, m)]:>6}" for m in MODES))
        served = Counter(kind for r in self.results for kind in r.served)
        lines.append("\nreplies served, by kind (faults marked *)")
        for kind, n in sorted(served.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {'*' if kind in FAULT_KINDS else ' '} {kind:<22}{n:>6}")
        lines.append(
            f"  faults {sum(n for k, n in served.items() if k in FAULT_KINDS)} "
            f"of {sum(served.values())} replies"
        )
        lines.append("\noutcomes, by decorator")
        for d in DECORATORS:
            outcomes = Counter(r.outcome for r in self.results if r.decorator == d)
            if outcomes:
                lines.append(f"  {d}")
                for outcome, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
                    lines.append(f"    {outcome:<36}{n:>6}")
        lines.append(f"\nviolations: {len(self.violations)}")
        return "\n".join(lines)


def _warm_up(server: ScriptedOpenAI, clients: Clients) -> None:
    """Import what the clients import on their first request (a second or more, once).

    So that no job's time limit (a judge_timeout of half a second) pays for it.
    """
    import instructor  # noqa: F401 - the rating judge's first call imports it otherwise

    server.script("warm-up", ["ok", "ok"])
    clients.answer_sync.chat.completions.create(model="warm-up", messages=[])

    async def warm_async() -> None:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="-", max_retries=0) as c:
            await c.chat.completions.create(model="warm-up", messages=[])

    asyncio.run(warm_async())


def _run_sync_job(job: Job) -> None:
    try:
        job.outcome = job.call()
    except BaseException as e:
        job.error = e


async def _run_async_job(job: Job) -> None:
    try:
        job.outcome = await asyncio.wait_for(job.acall(), JOB_DEADLINE)
    except BaseException as e:
        job.error = e


def _settle(server: ScriptedOpenAI, seconds: float = 3.0) -> int:
    """Wait (a bounded poll) for the server to finish every request; the number left."""
    deadline = time.monotonic() + seconds
    while server.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.in_flight


def run_mix(seed: int, jobs: Mapping[str, int], *, concurrency: int = 4) -> MixReport:
    """Run `jobs[decorator]` jobs of each decorator, half sync and half async, from `seed`.

    Jobs without a hanging step run concurrently (threads for sync, tasks for async); those
    with one run one at a time, each checked for requests it left running on the server.
    """
    secrets = Secrets.planted(seed)
    started = time.monotonic()
    planned: list[Job] = []
    for decorator, n in jobs.items():
        mix = Mix(seed, secrets, decorator)
        for i in range(n):
            planned.append(JOB_TYPES[decorator](mix, i + 1, MODES[i % 2]))
    capture = Capture()
    run_violations: list[str] = []
    lingering: dict[str, int] = {}
    with ScriptedOpenAI() as server, capture.active():
        clients = Clients.open(server, secrets, 10.0)
        _warm_up(server, clients)
        for job in planned:  # scripts are drawn in plan order: the seed decides them all
            job.prepare(server, clients)
        calm = [j for j in planned if not j.has_hang]
        hanging = [j for j in planned if j.has_hang]

        with ThreadPoolExecutor(concurrency, thread_name_prefix="faultmix") as pool:
            futures = [(j, pool.submit(_run_sync_job, j)) for j in calm if j.mode == "sync"]

            async def run_async_lane() -> None:
                gate = asyncio.Semaphore(concurrency * 2)

                async def one(job: Job) -> None:
                    async with gate:
                        await _run_async_job(job)

                try:
                    await asyncio.gather(*(one(j) for j in calm if j.mode == "async"))
                    for job in hanging:  # one at a time, and nothing else on the server
                        if job.mode == "async":
                            await _run_async_job(job)
                            lingering[job.name] = await asyncio.to_thread(_settle, server)
                finally:
                    await clients.close_async()

            for job, future in futures:
                try:
                    future.result(timeout=JOB_DEADLINE)
                except FutureTimeout:
                    job.error = TimeoutError(f"the job did not end within {JOB_DEADLINE} s")
            for job in hanging:
                if job.mode == "sync":
                    _run_sync_job(job)
                    lingering[job.name] = _settle(server)
            asyncio.run(run_async_lane())
        clients.close_sync()
        results = []
        for job in planned:
            result = job.check(server, capture)
            if lingering.get(job.name):
                result.violations.append(
                    f"{lingering[job.name]} request(s) still running on the server after the "
                    "job ended (a call it timed out kept going in the background)"
                )
            if isinstance(job.error, TimeoutError) and "did not end" in str(job.error):
                result.violations.append(str(job.error))
            results.append(result)
    for where, text in capture.texts():
        leaked = secrets.leaked(text)
        if leaked:
            run_violations.append(
                f"secret {', '.join(leaked)} in a {where}: {_excerpt(text, leaked, secrets)}"
            )
    for w in capture.warned:
        run_violations.append(f"warning {w.category.__name__}: {w.message}")
    return MixReport(seed, results, run_violations, time.monotonic() - started)
