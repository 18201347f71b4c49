"""One run from start to finish, its events told as it goes.

The run is started or resumed in an open store, its cases are run, and it is stored complete,
or incomplete (resumable) when it stops early.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._core.errors import CostLimitReached, RunAborted, RunStoreError
from .._core.package import version
from ..judges._cache_backends import JudgeCache
from . import _results
from ._batch_phase import judge_answered
from ._batch_rounds import BatchNews
from ._judging import Judging
from ._plans import RunPlan
from ._ratelimit import RateLimiter
from ._results import BatchProgress, CaseFinished, RunEvent, RunProgress, RunStarted, RunStopped
from ._resume import start
from ._runner import Progress, alongside, renewing, run_cases
from ._store import CaseRecord, RunInfo, RunStore
from ._store._claims import new_worker
from ._store._sql import SQLStore

__all__ = ["Session"]


class Session:
    """A run of `plan` in `store`, started, resumed or joined when made: `RunStarted` is told.

    `await execute()` runs its cases; then `complete` stores it complete.
    """

    def __init__(self, store: RunStore, plan: RunPlan) -> None:
        self.store = store
        self.db = plan.db
        self.plan = plan
        self.cases = plan.cases
        self.on_event: Callable[[RunEvent], None] | None = plan.options.on_event
        self.limiter = RateLimiter()
        self.worker = new_worker()
        self.started = start(store, plan, version=version(), worker=self.worker)
        self.run = self.started.run
        total = len(self.cases)
        self.progress = Progress(
            total=total, done=self.started.resumed, on_case=self._done, on_answer=self._answered
        )
        self._told: tuple[int, float | None] | None = None  # the last position told
        self._tell(
            RunStarted(
                run=self.run,
                db=self.db,
                dataset=plan.dataset,
                cases=total,
                resuming=self.started.resuming,
                joined=self.started.joined,
                resumed=self.started.resumed,
                retried=dict(self.started.retried),
                dropped=self.started.dropped,
                retry=plan.retry,
            )
        )

    def _tell(self, event: RunEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _done(self, progress: Progress, record: CaseRecord) -> None:
        if self.on_event is None:  # nobody to tell: no need to count
            return
        done, cost = self._told = self._position()
        self._tell(CaseFinished(record, done, progress.total, dict(progress.counts), cost))

    def _answered(self, progress: Progress) -> None:
        if self.on_event is not None:  # this worker's answers, those stored before included
            done = progress.done + progress.answered
            self._tell(BatchProgress("answering", done, progress.total, 0))

    def _position(self) -> tuple[int, float | None]:
        """The run's cases stored by every worker, and their cost so far (with prices)."""
        done = len(self.cases) - self.store.pending(self.run.id)
        if self.plan.options.batch:  # an answer waiting for its verdict is not done yet
            done -= len(self.store.answered_keys(self.run.id))
        cost = self.store.spent(self.run.id)[1] if self.plan.prices is not None else None
        return done, cost

    @contextlib.asynccontextmanager
    async def _watching(self) -> AsyncIterator[None]:
        """While the block runs, tell `RunProgress` when other workers stored cases."""
        if self.on_event is None:
            yield
            return
        if self._told is None:  # where the run starts: nothing to tell until it moves
            self._told = self._position()

        async def watch() -> None:
            while True:
                await asyncio.sleep(_results.PROGRESS_SECONDS)
                try:
                    position = self._position()
                except RunStoreError:
                    return  # the run meets the store's failure itself; the watching stops
                if position != self._told:
                    self._told = position
                    self._tell(RunProgress(position[0], len(self.cases), position[1]))

        async with alongside(watch()) as watching:
            yield
        error = None if watching.cancelled() else watching.exception()
        if error is not None:
            raise error  # on_event raised, as it may from a CaseFinished

    @property
    def retried(self) -> int:
        """Stored cases run again (`retry=`) over the run's life."""
        return self.started.retried_before + self.progress.retried

    async def _cases(self) -> None:
        cache = self.store.judge_cache() if self.plan.options.cache else None
        try:
            stopped: CostLimitReached | None = None
            try:
                await run_cases(
                    self.store,
                    self.plan,
                    self.started,
                    worker=self.worker,
                    progress=self.progress,
                    limiter=self.limiter,
                    cache=cache,
                )
            except CostLimitReached as e:
                if not self.plan.options.batch:
                    raise
                stopped = e  # the cases answered are judged first: they were paid for
            # a batched run resumed without --batch judges its waiting answers directly
            batched = self.plan.options.batch
            if batched or self.store.answered_keys(self.run.id):
                await self._judge_answered(cache, wait_for_others=stopped is None, batched=batched)
            if stopped is not None:
                raise stopped
        finally:
            if cache is not None:
                cache.close()

    async def _judge_answered(
        self, cache: JudgeCache | None, *, wait_for_others: bool, batched: bool
    ) -> None:
        """The batch phase: every answered case of the run judged, its requests batched."""
        plan = self.plan
        judging = Judging(
            plan.judge,
            plan.judge_name,
            plan.repeat,
            self.limiter,
            cache,
            every_member=plan.kind == "calibrate",
        )

        def news(news: BatchNews) -> None:
            self._tell(BatchProgress(news.state, news.done, news.total, news.batches))

        async with renewing(self.store, self.run.id, self.worker):
            await judge_answered(
                self.store,
                plan,
                self.run.id,
                worker=self.worker,
                progress=self.progress,
                judging=judging,
                on_news=news,
                wait_for_others=wait_for_others,
                batched=batched,
            )

    async def execute(self, elsewhere: Callable[[], Awaitable[object]] | None = None) -> None:
        """Run the cases still to do with any other workers of the run, until none is left.

        The cases run on the running event loop.

        `elsewhere` runs them instead (Ray workers joining the run): this worker holds its
        lease (the run reads `running`) and claims nothing while it waits for it.

        Raises:
            RunAborted: The run stopped early; it is stored incomplete (unless other workers
                are still at it).
            BaseException: Whatever else stopped it (an interruption, a cancellation...),
                likewise.
        """
        try:
            async with self._watching():
                if elsewhere is None:
                    await self._cases()
                else:
                    async with renewing(self.store, self.run.id, self.worker):
                        await elsewhere()
        except BaseException as e:
            self._stop(e)
            raise
        self.store.leave(self.run.id, self.worker)

    def _stop(self, error: BaseException) -> None:
        """Leave the run; store it incomplete (resumable) unless others are at it; say so.

        When the store itself failed, nothing more can be stored: its workers' leases lapse
        and the run reads `incomplete`, and the store's error is what the caller sees.
        """
        total = len(self.cases)
        try:
            stored = len(self.store.case_keys(self.run.id))
            if self.store.leave(self.run.id, self.worker) == 0:
                self.store.finish_run(
                    self.run.id,
                    "incomplete",
                    {"stored": stored, "cases": total, "retried": self.retried},
                )
            run = self.store.run(self.run.id)
        except RunStoreError:
            if isinstance(error, RunStoreError):
                return
            raise
        if isinstance(error, RunAborted):  # what the caller needs to resume it
            error.run_id, error.stored, error.cases = self.run.id, stored, total
        self._tell(RunStopped(run, stored, total, error))

    def batch_summary(self, records: Sequence[CaseRecord]) -> dict[str, Any]:
        """A batched run's batches (`Batches.batch_summary`), and what they saved.

        `saved`: what the batch price saved against the list price (None without prices).
        """
        store = self.store
        assert isinstance(store, SQLStore)
        saved = [r.cost["batch_saved"] for r in records if "batch_saved" in r.cost]
        return store.batch_summary(self.run.id) | {"saved": sum(saved) if saved else None}

    def records(self) -> list[CaseRecord]:
        """Every stored case of the run, in file order."""
        return self.store.cases(self.run.id)

    def complete(self, summary: Mapping[str, Any]) -> RunInfo:
        """Store the run complete, with its figures."""
        self.store.finish_run(self.run.id, "complete", summary)
        self.run = self.store.run(self.run.id)
        return self.run
