"""Running a run's cases: concurrently, each in a job of its own, each stored as it finishes.

Cases run concurrently on one event loop (a sync answer function or judge in a worker thread),
each inside a refinekit job of its own, so its corrections, attempts and tokens are its own.
A rate-limited model call (HTTP 429) is backed off and tried again, and while one case waits
the others hold off too; every other error is recorded on its case and the run goes on, except
a misconfigured judge or a bug in the judge, which stops the run (it would fail every case).
Each finished case is stored at once, so an interrupted run keeps what it paid for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import openai

from .._core.errors import (
    CostLimitReached,
    JudgeMisconfigured,
    LowQualityAnswer,
    MissingPrice,
    RunAborted,
    RunStoreError,
)
from .._core.numbers import usd
from .._core.redact import redact
from .._core.types import AttemptInfo, ContextDocument, EvaluationRequest, Usage
from .._engine.events import Event, subscribe
from .._engine.job import enter_attempt, job, leave_attempt
from .._engine.ledger import count, first_answer, mark, per_model
from .._engine.prices import Prices
from .._providers.replies import answer_text
from ..judges._cache_backends import JudgeCache
from ._cases import Case, context_of, merged
from ._deferred import answered, calibration_request, labelled
from ._judging import (
    Deferred,
    Judgement,
    Judging,
    decide,
    error_text,
    probability_of,
    verdict_dump,
)
from ._money import added, case_cost
from ._plans import RunPlan
from ._ratelimit import RateLimiter
from ._resume import Started
from ._store import CappedClaim, CaseOutcome, CaseRecord, RunStore
from ._store._claims import LEASE_SECONDS
from ._target import Target
from ._tiers import call_target, ended_at, tier_dicts, tier_reports

__all__ = ["Progress", "alongside", "renewing", "run_cases"]

_CONFIGURATION_ERRORS = (
    JudgeMisconfigured,
    openai.AuthenticationError,
    openai.PermissionDeniedError,
    openai.NotFoundError,
)


class _Attempts:
    """The attempts `@retry_on_low_quality` made in each job, from its events."""

    def __init__(self) -> None:
        self.by_job: dict[str, int] = {}

    def __call__(self, event: Event) -> None:
        if event.kind == "attempt" and event.decorator == "retry_on_low_quality":
            self.by_job[event.job_id] = max(self.by_job.get(event.job_id, 0), event.attempt)


@dataclass
class Progress:
    """Counts while the run goes; `on_case` is told of each finished case."""

    total: int
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    on_case: Callable[[Progress, CaseRecord], None] | None = None
    retried: int = 0  # stored cases run again (`--retry`) whose new outcome replaced the old
    answered: int = 0  # cases answered and waiting for their verdicts (`--batch`)
    on_answer: Callable[[Progress], None] | None = None

    def answer(self) -> None:
        """Count a case answered, its judging to come (`--batch`), and say so."""
        self.answered += 1
        if self.on_answer is not None:
            self.on_answer(self)

    def add(self, record: CaseRecord) -> None:
        """Count a finished case, and say so."""
        self.done += 1
        self.counts[record.outcome] = self.counts.get(record.outcome, 0) + 1
        if self.on_case is not None:
            self.on_case(self, record)


def _request_of(result: Any, case: Case, context: tuple[ContextDocument, ...]) -> EvaluationRequest:
    """What the judge sees: the function's own request (a `JudgingState`), or one built here.

    Its metadata has the golden row (`row`), for judges that read a column of it (a
    reference answer: `Pairwise.against`); a request the function made keeps its own.
    """
    if isinstance(result, EvaluationRequest):
        return result.model_copy(
            update={
                "question": result.question or case.question,
                "context": result.context or context,
                "metadata": {"row": dict(case.row)} | result.metadata,
            }
        )
    return EvaluationRequest(
        question=case.question,
        answer=answer_text(result),
        context=context,
        metadata={"row": dict(case.row)},
    )


def _models(
    answer_models: Mapping[tuple[bool, str | None], Usage],
    judge_models: Mapping[tuple[bool, str | None], Usage],
) -> dict[str, list[str]]:
    """The models that answered and that judged a case, as their replies name them."""
    answer = sorted({m for (judge, m) in answer_models if not judge and m})
    judge = sorted({m for (judge, m) in judge_models if judge and m})
    return {k: v for k, v in (("answer", answer), ("judge", judge)) if v}


async def _eval_case(
    case: Case,
    target: Target,
    judging: Judging,
    attempts: _Attempts,
    prices: Prices | None,
    trials: int = 1,
) -> CaseRecord:
    """The case answered and judged; with `trials` above 1, answered that many times.

    Each trial is a call of the answer function in a job of its own, judged on its own
    (`judging.repeat` times); the case's record is then made of its trials (`_of_trials`).
    """
    done = []
    for _ in range(trials):
        record = await _answer_once(case, target, judging, attempts, prices)
        assert isinstance(record, CaseRecord)
        done.append(record)
    return done[0] if trials <= 1 else _of_trials(done)


_FIRST_OF = ("failed", "raised", "unavailable", "inconclusive")
"""A case's outcome over its trials: the first of these any trial had, else passed."""


def _of_trials(records: Sequence[CaseRecord]) -> CaseRecord:
    """One record of a case's trials: passed only when every trial passed (pass^k).

    A trial that failed fails the case; else one that raised makes it raised (the user got
    no answer that time); else one the judge could not judge, or left inconclusive, makes it
    that. `passes` and `judgements` count the trials passed and the trials counted (passed,
    failed or raised), `flipped` says whether they disagreed; the record shows the first
    trial that did not pass (its answer, error and feedback), or else the first trial;
    `trials` keeps each.
    """
    outcomes = [r.outcome for r in records]
    outcome: CaseOutcome = next((o for o in _FIRST_OF if o in outcomes), "passed")
    shown = next((r for r in records if r.outcome == outcome), records[0])
    counted = [r for r in records if r.outcome in ("passed", "failed", "raised")]
    passes = sum(r.outcome == "passed" for r in counted)
    models: dict[str, list[str]] = {}
    for r in records:
        for role, names in r.models.items():
            models[role] = sorted({*models.get(role, ()), *names})
    cost: dict[str, float] = {}
    for r in records:
        cost = added(cost, r.cost)
    scores = [r.score for r in records if r.score is not None]
    probabilities = [r.probability for r in records if r.probability is not None]
    return replace(
        shown,
        outcome=outcome,
        score=sum(scores) / len(scores) if scores else None,
        probability=sum(probabilities) / len(probabilities) if probabilities else None,
        verdicts=[v for r in records for v in r.verdicts],
        passes=passes,
        judgements=len(counted),
        flipped=0 < passes < len(counted),
        attempts=max(r.attempts for r in records),
        corrections=sum(r.corrections for r in records),
        answer_usage=sum((r.answer_usage for r in records), Usage()),
        answer_judge_usage=sum((r.answer_judge_usage for r in records), Usage()),
        judge_usage=sum((r.judge_usage for r in records), Usage()),
        answer_seconds=sum(r.answer_seconds for r in records),
        judge_seconds=sum(r.judge_seconds for r in records),
        cost=cost,
        judge_cache={
            k: sum(r.judge_cache.get(k, 0) for r in records)
            for k in {k for r in records for k in r.judge_cache}
        },
        models=models,
        trials=[
            {
                "outcome": r.outcome,
                "answer": r.answer,
                "passes": r.passes,
                "judgements": r.judgements,
                "flipped": r.flipped,
                "error": r.error,
                "feedback": r.feedback,
                "attempts": r.attempts,
            }
            for r in records
        ],
    )


async def _answer_once(
    case: Case,
    target: Target,
    judging: Judging,
    attempts: _Attempts,
    prices: Prices | None,
    defer: bool = False,
) -> CaseRecord | Deferred:
    args, kwargs = target.arguments(case)
    started = time.perf_counter()
    error: Exception | None = None
    outcome: Any = None
    # The case is attempt 1 of 1 of the answer function: `record_context()` inside it (or
    # the accepted attempt's, inside a `@retry_on_low_quality`) lands here, for the judge.
    attempt = AttemptInfo(1, 1)
    token = enter_attempt(attempt)

    def answer_once() -> Awaitable[tuple[Any, Any]]:
        attempt._context.clear()  # a rate-limited try gave no answer: drop what it recorded
        return call_target(target.function, args, kwargs)

    try:
        async with job() as answer_job:
            counted = mark(answer_job)
            try:
                result, outcome = await judging.limiter.call(answer_once)
            except Exception as e:
                error = e
            else:  # a reply returned as it came (no decorator counted it) was paid for too
                count(answer_job, result, counted)
    finally:
        leave_attempt(token)
    if isinstance(error, _CONFIGURATION_ERRORS):
        raise RunAborted(
            f"the answer function raised {error_text(error)}: a misconfiguration fails every "
            "case, so the run stops here"
        ) from error
    reports = tier_reports(outcome if error is None else error)
    context = merged(attempt._context, context_of(case))
    tried = max(1, attempts.by_job.pop(answer_job.id, 1))
    answered_by = per_model(answer_job)
    cost: dict[str, Any] = {
        "corrections": answer_job.corrections_used,
        "answer_usage": answer_job.usage,
        "answer_judge_usage": answer_job.judge_usage,
        "answer_seconds": time.perf_counter() - started,
        "tier": ended_at(reports),
        "tiers": tier_dicts(reports, prices),
    }
    if error is not None:
        answer = feedback = None
        if isinstance(error, LowQualityAnswer):  # the rejected answer is kept, with why
            tried = max(tried, len(error.attempts))
            feedback = error.verdict.feedback
            answer = None if error.answer is None else answer_text(error.answer)
        return CaseRecord(
            key=case.key,
            position=case.position,
            question=case.question,
            row=case.row,
            outcome="raised",
            error=error_text(error),
            answer=answer,
            feedback=redact(feedback or ""),
            attempts=tried,
            cost=_priced(answer_job, {}, prices),
            models=_models(answered_by, {}),
            **cost,
        )
    request = _request_of(result, case, context)
    if defer:  # judged in the run's batch phase
        priced = _priced(answer_job, {}, prices)
        return answered(case, request, tried, priced, _models(answered_by, {}), cost)
    judgement = await judging.judge(case, request)
    return _record(
        case,
        request.answer,
        judgement,
        judging.evaluator is not None,
        attempts=tried,
        cost=_priced(answer_job, judgement[5], prices),
        models=_models(answered_by, judgement[5]),
        **cost,
    )


def _priced(
    answer_job: Any, judge_models: dict[tuple[bool, str | None], Usage], prices: Prices | None
) -> dict[str, float]:
    """A case's `cost` (empty without prices): its answer job's and its judge's calls priced.

    Raises:
        MissingPrice: A model called has no price.
    """
    if prices is None:
        return {}
    models = {} if answer_job is None else per_model(answer_job)
    first = None if answer_job is None else first_answer(answer_job)
    return case_cost(models, first, judge_models, prices)


def _record(
    case: Case,
    answer: str,
    judgement: Judgement,
    judged_by_model: bool,
    **fields: Any,
) -> CaseRecord:
    checks, verdicts, judge_usage, judge_seconds, cached, _ = judgement
    outcome, passes, judged, flipped, reason = decide(verdicts, checks, judged_by_model)
    failing = [v for v in verdicts if not v.passed and (v.judged or outcome == "failed")]
    scores = [v.score for v in verdicts if v.judged and v.score is not None]
    probabilities = [p for v in verdicts if v.judged and (p := probability_of(v)) is not None]
    return CaseRecord(
        key=case.key,
        position=case.position,
        question=case.question,
        row=case.row,
        outcome=outcome,
        answer=answer,
        error=reason if outcome in ("unavailable", "inconclusive") else None,
        feedback=redact(failing[0].feedback) if failing else "",
        score=sum(scores) / len(scores) if scores else None,
        probability=sum(probabilities) / len(probabilities) if probabilities else None,
        verdicts=[verdict_dump(v) for v in verdicts],
        passes=passes,
        judgements=judged,
        flipped=flipped,
        judge_usage=judge_usage,
        judge_seconds=judge_seconds,
        judge_cache=cached,
        **fields,
    )


async def _calibrate_case(
    case: Case, judging: Judging, label: str, prices: Prices | None
) -> CaseRecord:
    request = calibration_request(case)
    judgement = await judging.judge(case, request)
    record = _record(
        case,
        request.answer,
        judgement,
        True,
        answer_seconds=0.0,
        cost=_priced(None, judgement[5], prices),
        models=_models({}, judgement[5]),
    )
    return replace(record, label=label)


_WAIT_SECONDS = 0.5
"""How often a worker with nothing left to claim looks again while other workers still hold
cases (one of them may die and its cases come free); and, under `--max-cost`, how often a
worker whose next case does not fit looks again while other workers' cases are in flight."""


async def _run_all(
    cases: Mapping[str, Case],
    work: Callable[[Case], Awaitable[CaseRecord | Deferred]],
    concurrency: int,
    store: RunStore,
    run_id: int,
    worker: str,
    progress: Progress,
    max_cost: float | None = None,
) -> tuple[str, float] | None:
    """Claim the run's cases one at a time in `concurrency` slots, answer and store each.

    Ends when no case of the run is left to answer, or held by a worker other than this one;
    or, with `max_cost`, when no case is in flight in any worker of the run and the next one
    does not fit (`RunStore.claim_within`: each claim reserves its case's expected cost in
    the store, so every worker's cases in flight count): why it stopped is returned. A slot
    whose case does not fit while cases are in flight waits for them to be stored (they may
    cost less than they reserved), then asks again.
    """
    stopping = False
    over: tuple[str, float] | None = None
    settled = asyncio.Event()  # set (and replaced) when one of this worker's cases ends

    async def slot() -> None:
        nonlocal stopping, over, settled
        while not stopping and over is None:
            if max_cost is None:
                claimed = store.claim(run_id, worker)
            else:
                got = store.claim_within(run_id, worker, max_cost)
                if not got.fits:
                    if got.in_flight == 0:
                        over = _over_budget(got, max_cost)
                        return  # no case starts; nothing is in flight anywhere
                    # this worker's case ends, or (another worker's) a while passes
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(settled.wait(), _WAIT_SECONDS)
                    continue
                claimed = got.keys
            if not claimed:
                if store.pending(run_id, besides=worker) == 0:
                    return  # what is left is this worker's own, in its other slots
                await asyncio.sleep(_WAIT_SECONDS)
                continue
            case = cases.get(claimed[0])
            if case is None:
                raise RunStoreError(
                    f"run {run_id} has a case this worker's data file lacks (key "
                    f"{claimed[0]}): give every worker the same file"
                )
            try:
                record = await work(case)
            except BaseException:
                # A case that failed the run stops the other slots claiming: no case must
                # start (and pay for a model call) in that moment. Its claim, and what it
                # reserved, go when the worker leaves the run.
                stopping = True
                raise
            if isinstance(record, Deferred):  # answered; judged in the batch phase
                if store.save_answered(run_id, record, worker=worker):
                    progress.answer()
            elif store.save_case(run_id, record, worker=worker):
                progress.add(record)
            settled.set()
            settled = asyncio.Event()

    async with renewing(store, run_id, worker):
        tasks = [asyncio.ensure_future(slot()) for _ in range(concurrency)]
        try:
            for task in asyncio.as_completed(tasks):
                await task
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return over


def _over_budget(got: CappedClaim, max_cost: float) -> tuple[str, float]:
    """Why no more cases start under `max_cost`, and the run's spend then."""
    return (
        f"--max-cost {usd(max_cost)}: the run has spent {usd(got.spent)} on {got.priced} "
        f"stored cases, and another case (reserving {usd(got.estimate or 0.0)}, the most a "
        "stored case cost) would take it over, so no more cases were started",
        got.spent,
    )


@contextlib.asynccontextmanager
async def alongside(work: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Future[None]]:
    """While the block runs, `work` runs as a task of its own; cancelled when the block ends.

    The task is what the block gets, to ask once it ended whether `work` raised.
    """
    task = asyncio.ensure_future(work)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def renewing(
    store: RunStore, run_id: int, worker: str
) -> contextlib.AbstractAsyncContextManager[object]:
    """While the block runs, renew the worker's lease every third of it."""

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            store.heartbeat(run_id, worker)

    return alongside(heartbeat())


async def run_cases(
    store: RunStore,
    plan: RunPlan,
    started: Started,
    *,
    worker: str,
    progress: Progress,
    limiter: RateLimiter,
    cache: JudgeCache | None = None,
) -> None:
    """Answer the cases still to do of the run `started`, as `worker`, storing each.

    The cases come from the store's queue of the run (`claim`), which other workers may be
    taking cases from too; the plan's cases are the data file's, by which a claimed key is
    answered. Without a `target` the cases are labelled answers (the plan's `labels`), judged
    as they are. A case in `started.earlier` (a stored case run again, `--retry`) replaces
    its stored record, with the earlier record's model calls and tokens added to its own:
    they were paid for. With a `cache`, the run's judge looks its requests up there first
    (`--cache`; each repeat under its own salt); the answer function's own judges do not.

    Raises:
        RunAborted: The judge is misconfigured or raised a bug, or a model called has no
            price; finished cases are stored.
        CostLimitReached: With `plan.max_cost`, another case could take the run's cost over
            it (by the reservations in the store: every worker's cases in flight count), and
            no case of the run was in flight: no more cases were started.
    """
    judging = Judging(
        plan.judge,
        plan.judge_name,
        plan.repeat,
        limiter,
        cache,
        every_member=plan.kind == "calibrate",
    )
    attempts = _Attempts()
    prices = plan.prices
    batch = plan.options.batch  # answers only: judged in the batch phase
    if plan.target is not None:
        tgt = plan.target

        async def once(case: Case) -> CaseRecord | Deferred:
            if batch:
                return await _answer_once(case, tgt, judging, attempts, prices, defer=True)
            return await _eval_case(case, tgt, judging, attempts, prices, plan.trials)
    else:
        assert plan.labels is not None
        lab = plan.labels

        async def once(case: Case) -> CaseRecord | Deferred:
            if batch:
                return labelled(case, lab[case.key], _priced(None, {}, prices))
            return await _calibrate_case(case, judging, lab[case.key], prices)

    stored = started.earlier

    async def work(case: Case) -> CaseRecord | Deferred:
        try:
            record = await once(case)
        except MissingPrice as e:
            raise RunAborted(
                f"{e}. Case #{case.position} was answered but not stored (an unpriced case "
                "would make the run's cost wrong); fix the prices and run the same command "
                "again"
            ) from e
        old = stored.get(case.key)
        if old is None or isinstance(record, Deferred):  # a deferred one: when judged
            return record
        progress.retried += 1
        return replace(
            record,
            answer_usage=old.answer_usage + record.answer_usage,
            answer_judge_usage=old.answer_judge_usage + record.answer_judge_usage,
            judge_usage=old.judge_usage + record.judge_usage,
            cost=added(old.cost, record.cost),
        )

    with subscribe(attempts), subscribe(judging.counts):
        over = await _run_all(
            {c.key: c for c in plan.cases},
            work,
            plan.options.concurrency,
            store,
            started.run.id,
            worker,
            progress,
            max_cost=plan.max_cost,
        )
    if over is not None and store.pending(started.run.id) > 0:
        why, spent = over
        assert plan.max_cost is not None
        raise CostLimitReached(
            f"{why}. Run the same command with a higher --max-cost (max_cost=) to go on "
            "where it stopped",
            max_cost=plan.max_cost,
            spent=spent,
        )
