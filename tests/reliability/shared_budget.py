"""Seeded runs of concurrent calls sharing one budget, counted at the scripted server.

A *job* here is one `refinekit.job(budget=...)` shared by several workers at once: threads
(each in a copy of the job's context) or asyncio tasks. Each worker makes refinekit calls,
one to three times: a relevancy judge's request; a criteria judge's 2 to 6 criteria at once;
a pairwise judge's two orders; a rating judge and instructor's retries of a reply that does
not validate; `@retry_on_low_quality` over a judge that rarely passes; `@self_correct` over
replies that need corrections. Each job has its own model names on one `ScriptedOpenAI`, which
answers with a known usage (a judge's prompt tokens are refinekit's estimate, its characters
/ 4, and its completion 1 to 3 tokens; an answer always the same 20 + 10 tokens), sometimes
a 503, after up to 8 ms, and counts what reaches it.

Checked per job (`SharedJob.check`), the guarantees docs/budgets.md states:

- calls: at no moment do the requests the server answered plus those in flight exceed
  `max_calls` (so the answered ones never do), and the job counts exactly the answered ones,
  each once (a 503 is no call);
- tokens and cost: the spend passes the limit by at most the estimate error of the calls in
  flight at once: each worker's most parallel requests times the largest error of one of its
  calls (a first answer's whole usage, whose estimate is nothing; a judge reply's completion);
- every worker ends in a value or a documented error (`BudgetExceeded` naming one of the
  budget's limits, a judge outage or unreadable reply, an exhausted retry or correction).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import openai
from faultmix import Invoice

import refinekit
from refinekit import (
    Budget,
    BudgetExceeded,
    ContextDocument,
    EvaluationRequest,
    JsonParseError,
    JudgeReplyError,
    JudgeUnavailable,
    LowQualityAnswer,
    Prices,
    ResponseValidationError,
    judges,
)
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

KINDS = ("relevancy", "criteria", "pairwise", "rating", "retry", "self_correct")
MODES = ("threads", "tasks")
LIMITS = ("max_calls", "max_tokens", "max_cost", "max_calls+max_tokens")
ANSWER_USAGE = (20, 10)
"""An answer's (and an extraction's) prompt and completion tokens."""
ANSWER_PRICE = (400.0, 1600.0)
JUDGE_PRICE = (150.0, 600.0)
"""Per million tokens: an answer costs 0.024, a judge call about 0.02-0.05."""
MAX_JUDGE_COMPLETION = 3
WORKER_TIMEOUT = 60.0
"""A worker that has not ended after this many seconds hangs: a violation."""
REQUEST = EvaluationRequest(
    question="Can I get a refund for my order?",
    answer="Yes: an unused order may be refunded within 30 days of delivery.",
    context=(ContextDocument(text="An unused order may be refunded within 30 days of delivery."),),
)
ALLOWED = (
    BudgetExceeded,
    ContextDocument,
    JudgeUnavailable,
    JudgeReplyError,
    LowQualityAnswer,
    JsonParseError,
    ResponseValidationError,
)


def price(model: str | None, prompt: int, completion: int) -> float:
    pair = (
        ANSWER_PRICE
        if model is not None and model.endswith(("-answer", "-extract"))
        else (JUDGE_PRICE)
    )
    return (prompt * pair[0] + completion * pair[1]) / 1_000_000


PRICES = Prices(price)


# --- the server side -------------------------------------------------------------------------


@dataclass
class Wire:
    """What reached the server for one job's models."""

    received: int = 0
    answered: int = 0  # with a reply (usage), not an error
    in_flight: int = 0
    most_in_flight: int = 0  # the most requests in flight at once
    peak: int = 0  # the most of answered + in flight at any arrival
    tokens: int = 0
    cost: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Served:
    """A scripted reply for one model of a job: after a short wait, a reply or a 503, counted."""

    def __init__(
        self,
        wire: Wire,
        rng: random.Random,
        reply: Callable[[RecordedRequest, random.Random], tuple[str, int, int]],
        faults: float,
    ) -> None:
        self.wire, self.rng, self.reply, self.faults = wire, rng, reply, faults

    def __call__(self, request: RecordedRequest) -> Reply:
        wire = self.wire
        with wire.lock:
            wire.received += 1
            wire.in_flight += 1
            wire.most_in_flight = max(wire.most_in_flight, wire.in_flight)
            wire.peak = max(wire.peak, wire.answered + wire.in_flight)
            fault = self.rng.random() < self.faults
            wait = self.rng.uniform(0, 0.008)
            text, prompt, completion = self.reply(request, self.rng)
        time.sleep(wait)  # the server's latency, in its connection thread: calls overlap
        with wire.lock:
            wire.in_flight -= 1
            if fault:
                return Reply.error(503)
            wire.answered += 1
            wire.tokens += prompt + completion
            wire.cost += price(request.model, prompt, completion)
        return Reply.text(text, prompt_tokens=prompt, completion_tokens=completion)


def estimate(body: dict[str, Any]) -> int:
    """refinekit's documented estimate of a judge's prompt: its messages' characters / 4."""
    chars = 0
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(part.get("text") or "") for part in content)
    return -(-chars // 4)


def judge_reply(texts: tuple[str, ...]) -> Callable[[RecordedRequest, random.Random], Any]:
    """A judge's reply: one of `texts`; its prompt tokens are refinekit's estimate."""

    def reply(request: RecordedRequest, rng: random.Random) -> tuple[str, int, int]:
        prompt = estimate(request.body or {})
        return rng.choice(texts), prompt, rng.randint(1, MAX_JUDGE_COMPLETION)

    return reply


def answer_reply(texts: tuple[str, ...]) -> Callable[[RecordedRequest, random.Random], Any]:
    def reply(request: RecordedRequest, rng: random.Random) -> tuple[str, int, int]:
        return (rng.choice(texts), *ANSWER_USAGE)

    return reply


REPLIES = {
    "rel": judge_reply(("Yes.", "No.")),
    "crit": judge_reply(("Yes", "No")),
    "pair": judge_reply(("A", "B", "TIE")),
    "rate": judge_reply(('{"rating": 4, "feedback": "Fine."}', "not a rating")),
    "retryjudge": judge_reply(("No.", "No.", "Yes.")),
    "answer": answer_reply(("Refunds: within 30 days of delivery.",)),
    "extract": answer_reply(('{"number": "A-1", "total_cents": 1250}', "Sorry, no.")),
}
ANSWERING = {"answer", "extract"}


# --- a job -----------------------------------------------------------------------------------


@dataclass
class Worker:
    kind: str
    repeat: int
    width: int = 1  # how many requests it has in flight at once (criteria, pairwise)
    policy: str | None = None
    max_retries: int = 1
    outcomes: list[str] = field(default_factory=list)

    def largest_error(self) -> tuple[int, float]:
        """The largest (tokens, cost) one of its calls may use beyond its estimate."""
        judge = (MAX_JUDGE_COMPLETION, MAX_JUDGE_COMPLETION * JUDGE_PRICE[1] / 1_000_000)
        if self.kind in ("retry", "self_correct"):
            answer = (sum(ANSWER_USAGE), price("x-answer", *ANSWER_USAGE))
            return max(answer, judge)
        return judge


class SharedJob:
    """Workers sharing one job's budget: made from the mix, run, and checked."""

    def __init__(self, number: int, rng: random.Random) -> None:
        self.name = f"b{number}"
        self.mode = rng.choice(MODES)
        self.limit = rng.choice(LIMITS)
        self.workers: list[Worker] = []
        for _ in range(rng.randint(2, 12)):
            kind = rng.choice(KINDS)
            worker = Worker(kind, rng.randint(1, 3))
            if kind == "criteria":
                worker.width = rng.randint(2, 6)
            elif kind == "pairwise":
                worker.width = 2
            worker.policy = rng.choice([None, "fail_open"]) if kind == "relevancy" else None
            worker.max_retries = rng.randint(1, 3)
            self.workers.append(worker)
        n = len(self.workers)
        max_calls = rng.randint(1, 3 * n) if "max_calls" in self.limit else None
        max_tokens = rng.randint(60, 400 * n) if "max_tokens" in self.limit else None
        max_cost = round(rng.uniform(0.01, 0.06 * n), 4) if self.limit == "max_cost" else None
        self.budget = Budget(
            max_calls=max_calls, max_tokens=max_tokens, max_cost=max_cost, prices=PRICES
        )
        self.faults = rng.choice([0.0, 0.0, 0.1, 0.25])
        self.rng = random.Random(rng.random())
        self.wire = Wire()
        self.job: refinekit.Job | None = None
        self.violations: list[str] = []

    def model(self, role: str) -> str:
        return f"{self.name}-{role}"

    def script(self, server: ScriptedOpenAI) -> None:
        for role, reply in REPLIES.items():
            served = Served(self.wire, self.rng, reply, self.faults)
            server.script(self.model(role), served, times=None)

    # -- what each worker does, sync and async ----------------------------------------------

    def _make(self, worker: Worker, client: Any) -> Callable[[], Any]:
        """The worker's one operation, on `client`'s side (sync, or giving a coroutine)."""
        is_async = self.mode == "tasks"
        jm = lambda role: judges.JudgeModel(client, self.model(role))  # noqa: E731
        if worker.kind == "relevancy":
            judge: Any = judges.relevancy(jm("rel"), judge_error_policy=worker.policy)  # type: ignore[arg-type]
            return judge.aevaluate if is_async else judge.evaluate  # type: ignore[no-any-return]
        if worker.kind == "criteria":
            questions = [
                judges.Criterion(f"c{i}", f"Is point {i} right?") for i in range(worker.width)
            ]
            judge = judges.criteria(jm("crit"), questions, probabilities="answer")
            return judge.aevaluate if is_async else judge.evaluate  # type: ignore[no-any-return]
        if worker.kind == "rating":
            judge = judges.rating(jm("rate"), max_retries=worker.max_retries)
            return judge.aevaluate if is_async else judge.evaluate  # type: ignore[no-any-return]
        if worker.kind == "pairwise":
            pair = judges.pairwise(jm("pair"))
            args = ("Can I get a refund?", "Within 30 days.", "Never.")
            if is_async:
                return lambda _request: pair.acompare(*args)
            return lambda _request: pair.compare(*args)
        if worker.kind == "retry":
            model = self.model("answer")
            judge = judges.relevancy(jm("retryjudge"))

            def messages(question: str, feedback: str | None) -> list[dict[str, str]]:
                text = question if feedback is None else f"{question}\nFix: {feedback}"
                return [{"role": "user", "content": text}]

            if is_async:

                async def aanswer(question: str, feedback: str | None = None) -> Any:
                    return await client.chat.completions.create(
                        model=model, messages=messages(question, feedback)
                    )

                fn: Any = aanswer
            else:

                def answer(question: str, feedback: str | None = None) -> Any:
                    return client.chat.completions.create(
                        model=model, messages=messages(question, feedback)
                    )

                fn = answer
            decorated = refinekit.retry_on_low_quality(
                evaluator=judge, max_retries=worker.max_retries
            )(fn)
            return lambda request: decorated(request.question)
        model = self.model("extract")
        if is_async:

            async def aextract(messages: list[dict[str, Any]]) -> Any:
                return await client.chat.completions.create(model=model, messages=messages)

            extract: Any = aextract
        else:

            def sextract(messages: list[dict[str, Any]]) -> Any:
                return client.chat.completions.create(model=model, messages=messages)

            extract = sextract
        corrected = refinekit.self_correct(schema=Invoice, max_corrections=2)(extract)
        return lambda _request: corrected([{"role": "user", "content": "Extract: A-1, 12.50"}])

    @staticmethod
    def _outcome(worker: Worker, error: BaseException | None, budget: Budget) -> str | None:
        """The worker's outcome name; a violation's text when it is not a documented one."""
        if error is None:
            worker.outcomes.append("value")
            return None
        worker.outcomes.append(type(error).__name__)
        answering = worker.kind in ("retry", "self_correct")
        if answering and isinstance(error, openai.InternalServerError):
            return None  # the answering client's own error passes through, as documented
        if not isinstance(error, ALLOWED):
            return f"{worker.kind} raised {type(error).__name__}: {error}"
        if isinstance(error, BudgetExceeded) and getattr(budget, error.limit) is None:
            return f"{worker.kind} stopped by {error.limit}, which the budget does not set"
        return None

    def run_threads(self, server: ScriptedOpenAI) -> None:
        with server.client() as client:
            operations = [(w, self._make(w, client)) for w in self.workers]

            def work(worker: Worker, operation: Callable[[], Any]) -> list[str]:
                found = []
                for _ in range(worker.repeat):
                    try:
                        operation(REQUEST)  # type: ignore[call-arg]
                    except Exception as exc:
                        error: BaseException | None = exc
                    else:
                        error = None
                    problem = self._outcome(worker, error, self.budget)
                    if problem is not None:
                        found.append(problem)
                return found

            with (
                refinekit.job(budget=self.budget) as job,
                ThreadPoolExecutor(len(operations)) as pool,
            ):
                self.job = job
                futures = [
                    pool.submit(contextvars.copy_context().run, work, w, op) for w, op in operations
                ]
                for future in futures:
                    self.violations.extend(future.result(timeout=WORKER_TIMEOUT))

    def run_tasks(self, server: ScriptedOpenAI) -> None:
        async def main() -> None:
            async with server.async_client() as client:
                operations = [(w, self._make(w, client)) for w in self.workers]

                async def work(worker: Worker, operation: Callable[[], Any]) -> None:
                    for _ in range(worker.repeat):
                        try:
                            await operation(REQUEST)  # type: ignore[call-arg]
                        except Exception as exc:
                            error: BaseException | None = exc
                        else:
                            error = None
                        problem = self._outcome(worker, error, self.budget)
                        if problem is not None:
                            self.violations.append(problem)

                async with refinekit.job(budget=self.budget) as job:
                    self.job = job
                    await asyncio.wait_for(
                        asyncio.gather(*(work(w, op) for w, op in operations)), WORKER_TIMEOUT
                    )

        asyncio.run(main())

    def run(self, server: ScriptedOpenAI) -> None:
        self.script(server)
        try:
            if self.mode == "threads":
                self.run_threads(server)
            else:
                self.run_tasks(server)
        except TimeoutError:
            self.violations.append(f"a worker did not end within {WORKER_TIMEOUT:.0f} s")
        self.check()

    # -- the checks ----------------------------------------------------------------------

    def bound(self) -> tuple[int, float]:
        """The documented bound on tokens and cost past the limit: the estimate error of the
        calls in flight at once (each worker's width times its largest error)."""
        errors = [
            (w.width * w.largest_error()[0], w.width * w.largest_error()[1]) for w in self.workers
        ]
        return sum(e[0] for e in errors), sum(e[1] for e in errors)

    def overruns(self) -> dict[str, float]:
        """How far past each limit the job went, from what reached the server (0: within)."""
        wire, budget = self.wire, self.budget
        found: dict[str, float] = {}
        if budget.max_calls is not None:
            found["max_calls"] = max(0, wire.peak - budget.max_calls)
        if budget.max_tokens is not None:
            found["max_tokens"] = max(0, wire.tokens - budget.max_tokens)
        if budget.max_cost is not None:
            found["max_cost"] = max(0.0, wire.cost - budget.max_cost)
        return found

    def check(self) -> None:
        v, wire, job = self.violations, self.wire, self.job
        assert job is not None
        counted = job.usage + job.judge_usage
        if counted.model_calls != wire.answered:
            v.append(
                f"the job counted {counted.model_calls} calls, the server answered {wire.answered}"
            )
        if counted.total_tokens != wire.tokens:
            v.append(
                f"the job counted {counted.total_tokens} tokens, the server served {wire.tokens}"
            )
        tokens_bound, cost_bound = self.bound()
        over = self.overruns()
        if over.get("max_calls", 0) > 0:
            v.append(
                f"{wire.peak} calls answered or in flight at once under max_calls="
                f"{self.budget.max_calls}"
            )
        if over.get("max_tokens", 0) > tokens_bound:
            v.append(
                f"{wire.tokens} tokens under max_tokens={self.budget.max_tokens}: over by more "
                f"than the calls in flight could ({tokens_bound})"
            )
        if over.get("max_cost", 0) > cost_bound + 1e-9:
            v.append(
                f"cost {wire.cost:.6g} under max_cost={self.budget.max_cost}: over by more "
                f"than the calls in flight could ({cost_bound:.6g})"
            )


# --- a run -----------------------------------------------------------------------------------


@dataclass
class SharedReport:
    seed: int
    jobs: list[SharedJob]
    seconds: float

    @property
    def violations(self) -> list[str]:
        return [f"{j.name} ({j.mode}, {j.limit}): {v}" for j in self.jobs for v in j.violations]

    def figures(self) -> str:
        """What the run did and the largest overrun of each limit, as text."""
        modes = Counter(j.mode for j in self.jobs)
        workers = Counter(j.mode for j in self.jobs for _ in j.workers)
        kinds = Counter(w.kind for j in self.jobs for w in j.workers)
        outcomes = Counter(o for j in self.jobs for w in j.workers for o in w.outcomes)
        lines = [
            f"seed {self.seed}: {len(self.jobs)} jobs, each sharing one budget, "
            f"in {self.seconds:.1f} s",
            "  jobs     " + ", ".join(f"{modes[m]} on {m}" for m in MODES),
            "  workers  "
            + ", ".join(f"{workers[m]} {m}" for m in MODES)
            + f" ({max(len(j.workers) for j in self.jobs)} at most in a job)",
            "  kinds    " + ", ".join(f"{kinds[k]} {k}" for k in KINDS),
            f"  requests at the server: {sum(j.wire.received for j in self.jobs)} received, "
            f"{sum(j.wire.answered for j in self.jobs)} answered (counted by the jobs)",
            f"  in flight at once: up to {max(j.wire.most_in_flight for j in self.jobs)} "
            "requests of one job",
            "  outcomes " + ", ".join(f"{n} {o}" for o, n in outcomes.most_common()),
            "largest overrun seen, by limit (jobs with it; overrun past the limit, its bound)",
        ]
        for limit in ("max_calls", "max_tokens", "max_cost"):
            jobs = [j for j in self.jobs if getattr(j.budget, limit) is not None]
            if not jobs:
                continue
            worst = max(jobs, key=lambda j: j.overruns()[limit])
            over = worst.overruns()[limit]
            shown = f"{over:.4g}" if limit == "max_cost" else str(int(over))
            bound = worst.bound()
            limit_bound = (
                "0"
                if limit == "max_calls"
                else str(bound[0])
                if limit == "max_tokens"
                else f"{bound[1]:.4g}"
            )
            stopped = sum(
                1 for j in jobs for w in j.workers for o in w.outcomes if o == "BudgetExceeded"
            )
            lines.append(
                f"  {limit:<11}{len(jobs):>4} jobs: {shown} (bound {limit_bound}); "
                f"{stopped} stops in those jobs"
            )
            if limit == "max_calls":
                full = sum(1 for j in jobs if j.wire.peak == j.budget.max_calls)
                lines.append(
                    f"             calls answered or in flight reached max_calls exactly in "
                    f"{full} of them, never passed it"
                )
        lines.append(f"violations: {len(self.violations)}")
        return "\n".join(lines)


def run_shared(seed: int, jobs: int) -> SharedReport:
    """`jobs` seeded jobs, one after another, each with its workers at once."""
    rng = random.Random(f"shared-budget-{seed}")
    made = [SharedJob(n, rng) for n in range(jobs)]
    started = time.monotonic()
    with refinekit.testing.set_testing(), ScriptedOpenAI() as server:
        for job in made:
            job.run(server)
    return SharedReport(seed, made, time.monotonic() - started)
