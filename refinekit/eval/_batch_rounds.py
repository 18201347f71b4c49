"""The rounds of a batched run's judging: submit what waits, poll, hand the replies back.

When every judging of the run either ended or waits for a batch (`Collector.quiet`), a round
begins. Each request waiting is looked up in the run store by its key first:

- its reply (or its batch's error) is stored: it is given back at once (an error: the request
  is sent directly);
- it is in a submission already (this worker's, another worker's, or a killed process's): it
  waits for that batch;
- else it goes into a new submission, one per judge model, recorded with its items in one
  transaction before the provider is asked (a key recorded by another worker meanwhile is
  left to that worker's batch), then submitted (`BatchAPI.submit`), and the batch's id
  stored. A submission found without an id (its process was killed while submitting) is
  looked for at the provider (`BatchAPI.find`) before anything is submitted again; when the
  provider never received it, it is forgotten and its requests submitted anew.

The open batches are then polled (`BatchAPI.status`), at once at first and then less and
less often (`POLL_SECONDS`, never under `refinekit.testing.set_testing()`), each answer stored
for the progress display, until one ends: its items' replies and errors are stored
(`BatchAPI.results`) and handed back, and the judgings go on. Rounds repeat while judges
ask again (a criteria judge after a reply, a panel's next member).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._core.config import is_testing
from .._core.errors import CostLimitReached, JudgeError, MissingPrice, RunAborted
from .._core.numbers import usd
from .._engine.budget import request_tokens
from .._engine.prices import Prices
from ..judges._cache import completion_type
from ..judges._calls import Complete
from ..judges._client import JudgeModel
from ._batch_api import BATCH_SHARE, BatchAPI, BatchStatus, batch_api
from ._batch_calls import Collector
from ._judging import error_text
from ._store._batches import Batches, Submission

__all__ = ["MAX_ITEMS", "POLL_SECONDS", "BatchNews", "Rounds"]

logger = logging.getLogger("refinekit")

T = TypeVar("T")

POLL_SECONDS = (2.0, 60.0)
"""The first wait between polls of an open batch, and the longest: each wait doubles."""

MAX_ITEMS = 10_000
"""The most requests in one batch: under the providers' own limits (OpenAI: 50,000 requests
and a 200 MB file; Anthropic: 100,000 requests and 256 MB) with room for long prompts."""

_ORPHAN_SECONDS = 120.0
"""How long a submission may stay without a batch id while its worker lives, before it is
taken for a process killed while submitting."""


@dataclass(frozen=True)
class BatchNews:
    """What the run's batches are doing, for the progress display.

    Attributes:
        state: The state of the batch polled last (`validating`, `in_progress`, ...).
        done: Items finished in the run's open batches.
        total: Items in the run's open batches.
        batches: The run's open batches.
    """

    state: str
    done: int
    total: int
    batches: int


@dataclass
class Rounds:
    """The batch rounds of one worker's judging of a run.

    Attributes:
        collector: Where the requests wait.
        store: The run store.
        run_id: The run.
        worker: This worker.
        prices: The run's prices (a submission's cost is reserved at the batch price), or
            None.
        max_cost: The run's spend cap, or None.
        on_news: Told what the batches are doing after each poll.
        submitted: Batches this worker submitted.
        items: Requests it submitted in them.
    """

    collector: Collector
    store: Batches
    run_id: int
    worker: str
    prices: Prices | None = None
    max_cost: float | None = None
    on_news: Callable[[BatchNews], None] | None = None
    submitted: int = 0
    items: int = 0
    open: dict[str, Submission] = field(default_factory=dict)
    _apis: dict[int, BatchAPI] = field(default_factory=dict)
    _judges: dict[str, JudgeModel] = field(default_factory=dict)  # by submission token

    async def serve(self) -> None:
        """Run rounds until every judging ended."""
        collector = self.collector
        while True:
            await self._until_quiet()
            if collector.finished():
                return
            await self._round()

    async def _until_quiet(self) -> None:
        collector = self.collector
        while True:
            collector.changed.clear()
            if collector.quiet():
                # a judging's other requests (a gather) join on the loop's next turns
                for _ in range(3):
                    await asyncio.sleep(0)
                if collector.quiet() and not collector.changed.is_set():
                    return
                continue
            await collector.changed.wait()

    def _api(self, judge: JudgeModel) -> BatchAPI:
        api = self._apis.get(id(judge))
        if api is None:
            api = self._apis[id(judge)] = batch_api(judge)
        return api

    async def _round(self) -> None:
        waiting = dict(self.collector.waiting)
        stored = self.store.items(self.run_id, list(waiting))
        fresh: dict[int, list[tuple[str, Complete]]] = {}
        for key, entry in waiting.items():
            item = stored.get(key)
            if item is None:
                fresh.setdefault(id(entry.command.judge), []).append((key, entry.command))
            elif item.result is not None or item.error is not None:
                self._give(key, item.result, item.error, entry.command.judge)
            elif item.token not in self.open:
                found = self.store.submission(item.token)
                if found is not None:
                    self.open[item.token] = found
                    self._judges[item.token] = entry.command.judge
        for requests in fresh.values():
            for start in range(0, len(requests), MAX_ITEMS):
                await self._submit(requests[start : start + MAX_ITEMS])
        for submission in list(self.open.values()):
            if submission.batch_id is None:
                await self._recover(submission)
        if self.open:
            await self._poll()

    # submitting

    def _reserve(self, judge: JudgeModel, requests: list[tuple[str, Complete]]) -> float | None:
        """What the requests may cost at the batch price (their prompt, their output limit)."""
        if self.prices is None or self.max_cost is None:
            return None
        share = self.prices.batch_share(judge.model, BATCH_SHARE.get(judge.provider, 1.0))
        total = 0.0
        for _, command in requests:
            kwargs = command.kwargs
            out = kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or 0
            try:
                total += self.prices.cost(judge.model, request_tokens(kwargs), int(out)) * share
            except MissingPrice as e:
                raise RunAborted(
                    f"{e}. The judge's batch was not submitted; fix the prices and run the "
                    "same command again"
                ) from e
        return total

    async def _submit(self, requests: list[tuple[str, Complete]]) -> None:
        judge = requests[0][1].judge
        token = f"refinekit-{self.run_id}-{os.urandom(8).hex()}"
        reserve = self._reserve(judge, requests)
        keys, over = self.store.new_submission(
            self.run_id,
            token=token,
            provider=judge.provider,
            model=judge.model,
            worker=self.worker,
            items=[(key, _body(command)) for key, command in requests],
            reserve=reserve,
            max_cost=self.max_cost,
        )
        if over is not None:
            assert self.max_cost is not None
            spent, held = over
            raise CostLimitReached(
                f"--max-cost {usd(self.max_cost)}: the run has spent {usd(spent)}, its open "
                f"batches reserve {usd(held)}, and a batch of {len(requests)} judge requests "
                f"(reserving {usd(reserve or 0.0)} at the batch price) would take it over, so "
                "it was not submitted. Run the same command with a higher --max-cost "
                "(max_cost=) to go on where it stopped",
                max_cost=self.max_cost,
                spent=spent,
            )
        if not keys:  # another worker recorded every one of them first: the next round sees
            return
        bodies = self.store.bodies(token)
        batch_id = await _asked(self._api(judge).submit, bodies, submission=token)
        self.store.submitted(token, batch_id)
        self.submitted += 1
        self.items += len(keys)
        found = self.store.submission(token)
        assert found is not None
        self.open[token] = found
        self._judges[token] = judge

    async def _recover(self, submission: Submission) -> None:
        """A submission without a batch id: find its batch, or forget it (never sent)."""
        token = submission.token
        live = submission.worker != self.worker and submission.worker in self.store.workers_alive(
            self.run_id
        )
        if live and time.time() - submission.created_at < _ORPHAN_SECONDS:
            return  # its worker is submitting it now: it stores the id
        judge = self._judges[token]
        # recorded before it was sent: the batch was created after (the API allows for skew)
        since = submission.created_at
        found = await _asked(self._api(judge).find, token, max(submission.total, 1), since)
        if found is None:
            self.store.forget_submission(token)
            del self.open[token]
            logger.info("refinekit: batch submission %s never reached the provider", token)
            return
        self.store.submitted(token, found)
        refreshed = self.store.submission(token)
        assert refreshed is not None
        self.open[token] = refreshed

    # polling

    async def _poll(self) -> None:
        """Poll the open batches until one of them ends, and hand its replies back."""
        wait = POLL_SECONDS[0]
        while True:
            ended = False
            statuses: dict[str, BatchStatus] = {}
            for token, submission in list(self.open.items()):
                if submission.batch_id is None:
                    continue
                api = self._api(self._judges[token])
                status = await _asked(api.status, submission.batch_id)
                statuses[token] = status
                self.store.batch_progress(token, status.state, status.done, status.total)
                if status.finished:
                    await self._collect(token, submission, api, status.state)
                    ended = True
            self._tell(statuses)
            if ended:
                return
            if not any(s.batch_id for s in self.open.values()):
                # another worker is submitting the requests this one waits for: a while
                await asyncio.sleep(0 if is_testing() else POLL_SECONDS[0])
                return
            if not is_testing():
                await asyncio.sleep(wait)
            wait = min(wait * 2, POLL_SECONDS[1])

    def _tell(self, statuses: Mapping[str, BatchStatus]) -> None:
        if self.on_news is None or not statuses:
            return
        last = list(statuses.values())[-1]
        self.on_news(
            BatchNews(
                state=last.state,
                done=sum(s.done for s in statuses.values()),
                total=sum(s.total for s in statuses.values()),
                batches=len(statuses),
            )
        )

    async def _collect(self, token: str, submission: Submission, api: BatchAPI, state: str) -> None:
        assert submission.batch_id is not None
        results = await _asked(api.results, submission.batch_id)
        judge = self._judges[token]
        rows: list[tuple[str, str | None, str | None]] = []
        for result in results:
            if result.reply is not None and result.error is None:
                rows.append((result.key, result.reply.model_dump_json(), None))
            else:
                rows.append((result.key, None, result.error or "no reply"))
        given = {key for key, _, _ in rows}
        for key, _ in self.store.bodies(token):  # an item the results left out: not answered
            if key not in given:
                rows.append((key, None, f"the batch ended {state} without it"))
        self.store.batch_results(token, state, rows)
        del self.open[token]
        failed = 0
        for key, reply, error in rows:
            failed += error is not None
            self._give(key, reply, error, judge)
        if failed:
            logger.warning(
                "refinekit: %d of %d judge requests of batch %s got no reply (%s); they are "
                "sent directly",
                failed,
                len(rows),
                submission.batch_id,
                state,
            )

    def _give(self, key: str, reply: str | None, error: str | None, judge: JudgeModel) -> None:
        """Hand a stored reply back (an error, or a reply that cannot be read: sent directly)."""
        value = None
        if reply is not None and error is None:
            try:
                value = completion_type(judge).model_validate_json(reply)
            except ValueError:
                value = None
        self.collector.resolve(key, value)


async def _asked(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A batch API call, in a worker thread; its failure stops the run, resumable.

    Raises:
        RunAborted: The provider's batch API failed (the batches stay where they are: the
            same command polls them again).
    """
    try:
        return await asyncio.to_thread(call, *args, **kwargs)
    except JudgeError as e:
        raise RunAborted(
            f"the judge's batch API failed: {error_text(e)}. The run's batches are kept at "
            "the provider; run the same command again to go on with them"
        ) from e


def _body(command: Complete) -> dict[str, Any]:
    """A request's body as the batch sends it: its keyword arguments, without a time limit."""
    return {k: v for k, v in command.kwargs.items() if k != "timeout"}
