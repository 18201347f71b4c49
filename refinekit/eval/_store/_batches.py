"""Judging through a provider's batch API: the answers waiting for verdicts, and the batches.

A batched run (`--batch`) answers its cases first and keeps each answer here, waiting for its
verdict (`answered`): its claim is gone, so no worker (nor a restart) answers it again. Its
judge's model requests then go to the provider's batch API: each request is an item keyed
by its request key, recorded with its body in the same transaction as the submission it
belongs to (`new_submission`), before the provider is asked; a key already recorded (by
another worker, or by a process that was killed) is never submitted again, its reply comes
from the batch it is in. A submission is kept with refinekit's token, then the provider's
batch id; its items get their reply (or why not) once the batch ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..._core.redact import redact
from ._claims import Claims
from ._records import CaseRecord

__all__ = ["Answered", "Batches", "Item", "Submission", "finished"]


@dataclass(frozen=True)
class Answered:
    """A case answered and waiting for its verdict: the judge's request and the record so far."""

    key: str
    request: dict[str, Any]
    record: dict[str, Any]


@dataclass(frozen=True)
class Item:
    """A batched judge request: the submission it is in, and its reply or error once known."""

    key: str
    token: str
    result: str | None
    error: str | None


@dataclass(frozen=True)
class Submission:
    """A batch submitted (or being submitted) to a provider.

    Attributes:
        token: refinekit's name for it, kept with the batch where the provider keeps one.
        provider: `"openai"` or `"anthropic"`.
        model: The judge model its requests are for.
        worker: The worker that submitted it.
        batch_id: The provider's batch id; None while it is being submitted (or when the
            process submitting it was killed before it could store the id).
        state: `"submitting"`, then the provider's state (`validating`, `in_progress`,
            `finalizing`, `ended`, `failed`, `expired`, `cancelling`, `cancelled`).
        done: Items the provider finished so far.
        total: Items in the batch.
        created_at: When it was recorded (Unix time).
    """

    token: str
    provider: str
    model: str
    worker: str
    batch_id: str | None
    state: str
    done: int
    total: int
    created_at: float


_FINISHED = ("ended", "failed", "expired", "cancelled")

_ROLES = ("answer", "answer_judge", "judge")
"""The parts of a case's cost its total is made of."""


class Batches(Claims):
    """The answers waiting for verdicts and the batched judge requests, over a store's hooks."""

    # answers waiting for their verdicts

    def save_answered(self, run_id: int, deferred: Any, *, worker: str) -> bool:
        """Keep an answered case waiting for its verdict, its claim done with; one transaction.

        `deferred` is a `refinekit.eval._judging.Deferred`: the judge's request and the
        case's record so far (its answer's cost counts in the run's spend meanwhile).

        Returns:
            Whether it was kept (the claim was still `worker`'s).
        """
        record: CaseRecord = deferred.record
        key = record.key
        request = deferred.request.model_dump(mode="json")
        cost = record.cost
        total_cost = sum(float(cost.get(r, 0.0)) for r in _ROLES) if cost else None
        with self._transaction():
            row = self._one(
                f"SELECT key FROM claims WHERE run_id = ? AND key = ? AND worker = ?"
                f"{self._FOR_UPDATE}",
                (run_id, key, worker),
            )
            if row is None:
                return False
            self._exec("DELETE FROM claims WHERE run_id = ? AND key = ?", (run_id, key))
            self._exec(
                "INSERT INTO answered (run_id, key, request, record, total_cost, answered_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (run_id, key, _dumps(request), _dumps(asdict(record)), total_cost, time.time()),
            )
        return True

    def workers_alive(self, run_id: int) -> list[str]:
        """The run's workers that are alive."""
        return self._live(run_id)

    def answered(self, run_id: int) -> list[Answered]:
        """The run's cases answered and waiting for their verdicts."""
        rows = self._all(
            "SELECT key, request, record FROM answered WHERE run_id = ? ORDER BY key", (run_id,)
        )
        return [Answered(r["key"], json.loads(r["request"]), json.loads(r["record"])) for r in rows]

    def answered_keys(self, run_id: int) -> set[str]:
        """The keys of the run's cases waiting for their verdicts."""
        rows = self._all("SELECT key FROM answered WHERE run_id = ?", (run_id,))
        return {str(r["key"]) for r in rows}

    def save_judged(self, run_id: int, case: CaseRecord) -> bool:
        """Store a waiting case with its verdict, in one transaction with its leaving the wait.

        Returns:
            Whether it was stored (False: another worker stored it first).
        """
        with self._transaction():
            row = self._one(
                f"SELECT key FROM answered WHERE run_id = ? AND key = ?{self._FOR_UPDATE}",
                (run_id, case.key),
            )
            if row is None:
                return False
            self._exec("DELETE FROM answered WHERE run_id = ? AND key = ?", (run_id, case.key))
            self.save_case(run_id, case)
        return True

    def save_case(self, run_id: int, case: CaseRecord, *, worker: str | None = None) -> bool:
        """The store's own (`_sql.SQLStore.save_case`)."""
        raise NotImplementedError

    # batched requests

    def items(self, run_id: int, keys: Sequence[str]) -> dict[str, Item]:
        """The batched requests of the run among `keys`, by key."""
        found: dict[str, Item] = {}
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            rows = self._all(
                "SELECT key, token, result, error FROM batch_items WHERE run_id = ? AND key IN "
                f"({', '.join('?' for _ in part)})",
                (run_id, *part),
            )
            for r in rows:
                found[r["key"]] = Item(r["key"], r["token"], r["result"], r["error"])
        return found

    def new_submission(
        self,
        run_id: int,
        *,
        token: str,
        provider: str,
        model: str,
        worker: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        reserve: float | None = None,
        max_cost: float | None = None,
    ) -> tuple[list[str], tuple[float, float] | None]:
        """Record a submission and those of its items no other submission has; one transaction.

        With `max_cost`, the submission reserves `reserve` (its items at the batch price),
        and is recorded only when the run's spend (its stored cases, and its answered ones
        waiting for verdicts), what its open submissions reserve and `reserve` fit under
        `max_cost`; the run's row is locked meanwhile, so two workers never both fit.

        Returns:
            The keys recorded for this submission (none: nothing to submit; the submission
            is not kept); and, when it did not fit under `max_cost`, the run's spend and what
            its open submissions reserve (else None).
        """
        with self._transaction():
            if max_cost is not None:
                self._one(f"SELECT id FROM runs WHERE id = ?{self._FOR_CLAIM}", (run_id,))
                row = self._one(
                    "SELECT coalesce(sum(reserved), 0) AS held FROM batch_submissions "
                    "WHERE run_id = ? AND reserved IS NOT NULL",
                    (run_id,),
                )
                held = 0.0 if row is None else float(row["held"])
                spent = self._costs(run_id)[1]
                if spent + held + (reserve or 0.0) > max_cost * (1 + 1e-9):
                    return [], (spent, held)
            self._exec(
                "INSERT INTO batch_submissions (token, run_id, provider, model, worker, state, "
                "reserved, created_at) VALUES (?, ?, ?, ?, ?, 'submitting', ?, ?)",
                (token, run_id, provider, model, worker, reserve, self._now()),
            )
            self._many(
                "INSERT INTO batch_items (run_id, key, token, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                ((run_id, key, token, _dumps(body)) for key, body in items),
            )
            rows = self._all(
                "SELECT key FROM batch_items WHERE run_id = ? AND token = ? ORDER BY key",
                (run_id, token),
            )
            keys = [str(r["key"]) for r in rows]
            if not keys:
                self._exec("DELETE FROM batch_submissions WHERE token = ?", (token,))
            else:
                self._exec(
                    "UPDATE batch_submissions SET total = ? WHERE token = ?", (len(keys), token)
                )
        return keys, None

    def bodies(self, token: str) -> list[tuple[str, dict[str, Any]]]:
        """A submission's items, `(key, body)`, in key order."""
        rows = self._all("SELECT key, body FROM batch_items WHERE token = ? ORDER BY key", (token,))
        return [(str(r["key"]), json.loads(r["body"])) for r in rows]

    def submitted(self, token: str, batch_id: str) -> None:
        """Keep the provider's id of a submission."""
        self._exec(
            "UPDATE batch_submissions SET batch_id = ?, state = 'validating' WHERE token = ?",
            (batch_id, token),
        )

    def forget_submission(self, token: str) -> None:
        """Take out a submission the provider never received, and its items."""
        with self._transaction():
            self._exec("DELETE FROM batch_items WHERE token = ?", (token,))
            self._exec("DELETE FROM batch_submissions WHERE token = ?", (token,))

    def submission(self, token: str) -> Submission | None:
        """One submission, or None."""
        row = self._one("SELECT * FROM batch_submissions WHERE token = ?", (token,))
        return None if row is None else _submission(row)

    def submissions(self, run_id: int) -> list[Submission]:
        """Every submission of the run, oldest first."""
        rows = self._all(
            "SELECT * FROM batch_submissions WHERE run_id = ? ORDER BY created_at, token",
            (run_id,),
        )
        return [_submission(r) for r in rows]

    def batch_progress(self, token: str, state: str, done: int, total: int) -> None:
        """Keep what the provider last said of a submission's batch."""
        self._exec(
            "UPDATE batch_submissions SET state = ?, done = ?, total = ? WHERE token = ?",
            (state, done, total, token),
        )

    def batch_results(
        self, token: str, state: str, results: Sequence[tuple[str, str | None, str | None]]
    ) -> None:
        """Keep each item's reply (JSON) or error once its batch finished; one transaction.

        An item that has its result already keeps it. The submission no longer reserves
        anything of a `--max-cost`: its items' cost is counted as their cases are stored.
        """
        with self._transaction():
            self._many(
                "UPDATE batch_items SET result = ?, error = ? WHERE token = ? AND key = ? "
                "AND result IS NULL AND error IS NULL",
                (
                    (result, None if error is None else redact(error), token, key)
                    for key, result, error in results
                ),
            )
            self._exec(
                "UPDATE batch_submissions SET state = ?, reserved = NULL WHERE token = ?",
                (state, token),
            )

    def batch_summary(self, run_id: int) -> dict[str, int]:
        """The run's batches, in figures.

        `batches` sent to the provider, `items` (judge requests) in them, `direct` (items a
        batch could not answer, sent directly instead).
        """
        batches = self._one(
            "SELECT count(*) AS n FROM batch_submissions WHERE run_id = ? AND batch_id IS NOT NULL",
            (run_id,),
        )
        items = self._one(
            "SELECT count(*) AS n, count(error) AS failed FROM batch_items WHERE run_id = ?",
            (run_id,),
        )
        assert batches is not None
        assert items is not None
        return {
            "batches": int(batches["n"]),
            "items": int(items["n"]),
            "direct": int(items["failed"]),
        }


def _submission(row: Mapping[str, Any]) -> Submission:
    return Submission(
        token=row["token"],
        provider=row["provider"],
        model=row["model"],
        worker=row["worker"],
        batch_id=row["batch_id"],
        state=row["state"],
        done=int(row["done"]),
        total=int(row["total"]),
        created_at=float(row["created_at"]),
    )


def finished(state: str) -> bool:
    """Whether a batch in `state` will change no more."""
    return state in _FINISHED


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")
