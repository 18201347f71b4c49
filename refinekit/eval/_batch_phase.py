"""A batched run's judging phase: every answered case judged, its requests in batches.

With `--batch` the cases are answered first and each is kept waiting for its verdict (the
run store's `answered`); then each worker judges every waiting case of the run: each
(case, repeat) is its own task running the run's judge as without `--batch` (the row's
checks, the judge cache, a panel's members), while the judge's chat requests wait for the
provider's batch API (`_batch_calls`, `_batch_rounds`). Each case is stored with its
verdicts as soon as they are all in, and leaves the wait in the same transaction, so a
restart judges only what is still waiting; a reply a batch already gave is read from the
store, never asked again. A batched reply's tokens count in the case's judge usage, priced
at the batch price (`Prices.batch_share`); what that saved against the list price is kept in
the case's cost (`batch_saved`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._core.errors import MissingPrice, RunAborted
from .._core.types import EvaluationRequest, Usage, Verdict
from .._engine.events import subscribe
from .._engine.job import job
from .._engine.ledger import per_model
from .._engine.prices import Prices
from ..judges._cache import cache_salt, use_cache
from ..judges._panel import every_member
from ._batch_api import BATCH_SHARE
from ._batch_calls import Collector, Tracker, batch_judges, batching, installed
from ._batch_rounds import BatchNews, Rounds
from ._cases import Case
from ._column_checks import column_checks
from ._deferred import record_fields
from ._judging import Judging, combine
from ._money import added, case_cost
from ._options import RETRYABLE
from ._plans import RunPlan
from ._runner import Progress, _models, _record
from ._store import CaseRecord, RunStore
from ._store._batches import Answered
from ._store._sql import SQLStore

__all__ = ["BatchTally", "judge_answered", "record_of"]

logger = logging.getLogger("refinekit")

_WAIT_SECONDS = 0.5
"""How often a worker whose waiting cases are all judged looks again while other workers are
still answering cases."""


@dataclass
class BatchTally:
    """What one worker's batch phase did: batches and items submitted, requests sent directly."""

    batches: int = 0
    items: int = 0
    direct: int = 0


def record_of(data: Mapping[str, Any]) -> CaseRecord:
    """A stored record so far (`Batches.answered`) as a `CaseRecord`."""
    fields = dict(data)
    for name in ("answer_usage", "answer_judge_usage", "judge_usage"):
        fields[name] = Usage(**fields[name])
    return CaseRecord(**fields)


async def judge_answered(
    store: RunStore,
    plan: RunPlan,
    run_id: int,
    *,
    worker: str,
    progress: Progress,
    judging: Judging,
    on_news: Callable[[BatchNews], None] | None = None,
    wait_for_others: bool = True,
    batched: bool = True,
) -> BatchTally:
    """Judge every case of the run waiting for its verdict, storing each; until none waits.

    With `wait_for_others`, while other workers are still answering cases (the run's queue
    is not empty) this worker waits for their answers and judges them too. Without
    `batched` (a batched run resumed without `--batch`) the judge asks the model directly.

    Raises:
        RunAborted: The judge is misconfigured or raised a bug, or a model has no price.
        CostLimitReached: A batch would take the run over `plan.max_cost`.
    """
    assert isinstance(store, SQLStore)  # every store is one
    cases = {c.key: c for c in plan.cases}
    tally = BatchTally()
    with installed():
        while True:
            waiting = [a for a in store.answered(run_id) if a.key in cases]
            if not waiting:
                if not wait_for_others or store.pending(run_id) == 0:
                    return tally
                await asyncio.sleep(_WAIT_SECONDS)
                continue
            await _judge_all(
                store, plan, run_id, worker, progress, judging, waiting, on_news, tally, batched
            )


async def _judge_all(
    store: SQLStore,
    plan: RunPlan,
    run_id: int,
    worker: str,
    progress: Progress,
    judging: Judging,
    waiting: list[Answered],
    on_news: Callable[[BatchNews], None] | None,
    tally: BatchTally,
    batched: bool,
) -> None:
    collector = Collector(asyncio.get_running_loop())
    rounds = Rounds(
        collector,
        store,
        run_id,
        worker,
        prices=plan.prices,
        max_cost=plan.max_cost,
        on_news=on_news,
    )
    earlier = {r.key: r for r in store.cases(run_id, outcomes=RETRYABLE)}
    # every judging is tracked before any starts: a round begins only when all wait
    jobs = [
        (item, [collector.track(item.key, n) for n in range(1, judging.repeat + 1)])
        for item in waiting
    ]

    cases = {c.key: c for c in plan.cases}
    shares = {m.model: BATCH_SHARE.get(m.provider, 1.0) for m in batch_judges(plan.judge)}

    async def one(item: Answered, trackers: list[Tracker]) -> None:
        case = cases[item.key]
        record = await _judged(
            case, item, judging, collector if batched else None, trackers, plan.prices, shares
        )
        old = earlier.get(item.key)
        if old is not None:  # a stored case run again (`--retry`): both were paid for
            record = replace(
                record,
                answer_usage=old.answer_usage + record.answer_usage,
                answer_judge_usage=old.answer_judge_usage + record.answer_judge_usage,
                judge_usage=old.judge_usage + record.judge_usage,
                cost=_with_saved(added(old.cost, record.cost), record.cost),
            )
        if store.save_judged(run_id, record):
            progress.retried += old is not None
            progress.add(record)

    with subscribe(judging.counts):
        tasks = [asyncio.ensure_future(one(item, trackers)) for item, trackers in jobs]
        if batched:  # the rounds end when every judging has
            tasks.append(asyncio.ensure_future(rounds.serve()))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a failure stops the phase
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    tally.batches += rounds.submitted
    tally.items += rounds.items
    tally.direct += sum(t.direct for _, trackers in jobs for t in trackers)
    structured = sum(t.structured for _, trackers in jobs for t in trackers)
    if structured:
        logger.warning(
            "refinekit: %d structured judge requests (parsed by instructor) were sent "
            "directly, at the list price: --batch batches a judge's chat requests only",
            structured,
        )


async def _judged(
    case: Case,
    item: Answered,
    judging: Judging,
    collector: Collector | None,
    trackers: list[Tracker],
    prices: Prices | None,
    shares: Mapping[str, float],
) -> CaseRecord:
    """A waiting case judged (`repeat` judgings at once), as its record.

    Its chat requests wait for the `collector`'s batches; without one they go directly.
    """
    request = EvaluationRequest.model_validate(item.request)
    before = record_of(item.record)
    checks = column_checks(case, request.answer)
    started = time.perf_counter()
    async with job() as judging_job:
        verdicts = await asyncio.gather(*(_once(judging, request, t, collector) for t in trackers))
    cached = judging.counts.by_job.pop(judging_job.id, {}) if judging.cache is not None else {}
    judge_models = per_model(judging_job)
    judgement = (
        checks,
        [combine(checks, v, judging.name) for v in verdicts],
        judging_job.judge_usage,
        time.perf_counter() - started,
        cached,
        judge_models,
    )
    cost: dict[str, float] = {}
    if prices is not None:
        batched = [b for t in trackers for b in t.batched]
        try:
            cost = _cost(before.cost, judge_models, batched, prices, shares)
        except MissingPrice as e:
            raise RunAborted(
                f"{e}. Case #{case.position} was judged but not stored (an unpriced case "
                "would make the run's cost wrong); fix the prices and run the same command "
                "again"
            ) from e
    models = _models({}, judge_models) | {k: v for k, v in before.models.items() if k != "judge"}
    record = _record(
        case,
        request.answer,
        judgement,
        judging.evaluator is not None,
        cost=cost,
        models=dict(sorted(models.items())),
        **record_fields(before),
    )
    return replace(record, label=before.label)


async def _once(
    judging: Judging, request: EvaluationRequest, tracker: Tracker, collector: Collector | None
) -> Verdict:
    """One repeat's verdict, its chat requests batched (with a `collector`)."""
    try:
        with contextlib.ExitStack() as scope:
            if judging.every_member:
                scope.enter_context(every_member())
            if judging.cache is not None:
                scope.enter_context(use_cache(judging.cache))
                if tracker.repeat > 1:  # each repeat its own verdict, never the first's
                    scope.enter_context(cache_salt(f"repeat={tracker.repeat}"))
            if collector is not None:
                scope.enter_context(batching(collector, tracker))
            return await judging.judge_once(request)
    finally:
        tracker.done = True
        if collector is not None:
            collector.ended(tracker)


def _cost(
    before: Mapping[str, float],
    judge_models: Mapping[tuple[bool, str | None], Usage],
    batched: list[tuple[str | None, Usage]],
    prices: Prices,
    shares: Mapping[str, float],
) -> dict[str, float]:
    """The case's cost: its answer's (stored), and its judge's with batched calls discounted.

    Raises:
        MissingPrice: A model called has no price.
    """
    judge = case_cost({}, None, judge_models, prices)["judge"]
    default = next(iter(shares.values()), 1.0)
    saved = 0.0
    for model, usage in batched:
        listed = prices.cost(model, usage.prompt_tokens, usage.completion_tokens)
        share = prices.batch_share(model, shares.get(model or "", default))
        saved += listed * (1.0 - share)
    base = dict(before) or {"answer": 0.0, "answer_judge": 0.0, "extra": 0.0}
    return base | {"judge": judge - saved, "batch_saved": saved}


def _with_saved(cost: dict[str, float], new: Mapping[str, float]) -> dict[str, float]:
    """`cost` (two costs added) with the batch saving of the new one kept."""
    if "batch_saved" in new:
        return cost | {"batch_saved": new["batch_saved"]}
    return cost
