"""What the SQLite and PostgreSQL run stores share: every query, written once.

`SQLStore` implements the store interface (`_records.RunStore`) over the hooks a database
gives it (`_sqlbase.SQLBase`), with the workers and claims of `_claims`. Its SQL uses `?`
placeholders (the PostgreSQL store turns them into psycopg's) and the SQL both databases
speak; the one difference, how a NULL judge matches a NULL judge, is `_IS`.

Stored text is the user's and the model's own (questions, answers, feedback); error
messages pass through `redact` (refinekit._core.redact) first, so an API key, an auth header or
a URL's password that an exception happened to quote never lands in a store.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._core.errors import RunStoreError
from ..._core.redact import redact
from ..._core.types import Usage
from ._batches import Batches
from ._records import CaseRecord, RunInfo, RunKind, RunStatus

__all__ = ["SQLStore", "storable"]

_ROLES = ("answer", "answer_judge", "judge")

_CASE_COLUMNS = (
    "run_id, key, position, question, row, outcome, answer, error, feedback, score, "
    "probability, label, verdicts, passes, judgements, flipped, attempts, corrections, "
    "answer_seconds, judge_seconds, finished_at, cost, judge_cache, total_cost, models, trials, "
    "tier, tiers"
)


def storable(text: str) -> str:
    """Text a store can hold: a lone UTF-16 surrogate (from a model or a file) becomes `?`."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _dumps(value: Any) -> str:
    return storable(json.dumps(value, ensure_ascii=False, default=str))


class SQLStore(Batches):
    """The store interface over a SQL database; subclasses connect and give the hooks."""

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # runs

    def start_run(
        self,
        *,
        kind: RunKind,
        dataset: Path,
        dataset_sha256: str,
        target: str | None,
        judge: str | None,
        options: Mapping[str, Any],
        fingerprint: str,
        version: str,
    ) -> RunInfo:
        """Record a new run, `running`."""
        run_id = self._insert(
            "INSERT INTO runs (kind, status, dataset, dataset_sha256, target, judge, options, "
            "fingerprint, version, started_at, pid) "
            "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                kind,
                storable(str(dataset.resolve())),
                dataset_sha256,
                target,
                judge,
                _dumps(dict(options)),
                fingerprint,
                version,
                time.time(),
                os.getpid(),
            ),
        )
        return self.run(run_id)

    def unfinished(self, fingerprint: str) -> RunInfo | None:
        """The newest run with this fingerprint, unless it completed; else None.

        It is `running` (workers are at it: a new worker joins it) or `incomplete` (nobody
        is: it is resumed).
        """
        row = self._one(
            "SELECT * FROM runs WHERE fingerprint = ? ORDER BY id DESC LIMIT 1", (fingerprint,)
        )
        if row is None or row["status"] == "complete":
            return None
        return self._run(row)

    def resume(self, run_id: int, dataset_sha256: str) -> RunInfo:
        """Mark a stored run `running` again, with the data file's current hash."""
        self._exec(
            "UPDATE runs SET status = 'running', finished_at = NULL, dataset_sha256 = ?, pid = ? "
            "WHERE id = ?",
            (dataset_sha256, os.getpid(), run_id),
        )
        return self.run(run_id)

    def update_options(self, run_id: int, options: Mapping[str, Any]) -> None:
        """Set some of a run's options (the prices a resumed session uses), keeping the rest."""
        with self._transaction():
            row = self._one(f"SELECT options FROM runs WHERE id = ?{self._FOR_UPDATE}", (run_id,))
            if row is None:
                raise RunStoreError(f"no run {run_id} in {self.where}")
            merged = _json(row, "options", run_id) | dict(options)
            self._exec("UPDATE runs SET options = ? WHERE id = ?", (_dumps(merged), run_id))

    def finish_run(self, run_id: int, status: RunStatus, summary: Mapping[str, Any]) -> None:
        """Record how a run stopped, and its figures."""
        self._exec(
            "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE id = ?",
            (status, time.time(), _dumps(dict(summary)), run_id),
        )

    def run(self, run_id: int) -> RunInfo:
        """One run.

        Raises:
            RunStoreError: No run has this id.
        """
        row = self._one("SELECT * FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise RunStoreError(f"no run {run_id} in {self.where}; `refinekit runs` lists them")
        return self._run(row)

    def runs(
        self, *, kind: RunKind | None = None, dataset: str | Path | None = None
    ) -> list[RunInfo]:
        """The stored runs, oldest first, optionally of one kind and one data file."""
        query = "SELECT * FROM runs WHERE 1 = 1"
        params: list[Any] = []
        if kind is not None:
            query += " AND kind = ?"
            params.append(kind)
        if dataset is not None:
            query += " AND dataset = ?"
            params.append(storable(str(Path(dataset).resolve())))
        return [self._run(r) for r in self._all(query + " ORDER BY id", params)]

    def previous(self, run: RunInfo) -> RunInfo | None:
        """The newest complete run of the same kind, data file and judge started before `run`.

        Verdicts of another judge (or of the column checks alone) measure something else, so
        they are not compared; the answer function may differ: that is what a comparison is
        for.
        """
        row = self._one(
            f"SELECT * FROM runs WHERE kind = ? AND dataset = ? AND judge {self._IS} ? "
            "AND status = 'complete' AND id < ? ORDER BY id DESC LIMIT 1",
            (run.kind, run.dataset, run.judge, run.id),
        )
        return None if row is None else self._run(row)

    def _run(self, row: Mapping[str, Any]) -> RunInfo:
        status = row["status"]
        if status == "running" and not self._live(row["id"]):
            status = "incomplete"  # its workers died before they could say so
        return RunInfo(
            id=row["id"],
            kind=row["kind"],
            status=status,
            dataset=row["dataset"],
            dataset_sha256=row["dataset_sha256"],
            target=row["target"],
            judge=row["judge"],
            options=_json(row, "options", row["id"]),
            fingerprint=row["fingerprint"],
            version=row["version"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            summary=_json(row, "summary", row["id"]),
        )

    # cases

    def save_case(self, run_id: int, case: CaseRecord, *, worker: str | None = None) -> bool:
        """Store a finished case and its calls, in one transaction (replacing an older copy).

        Args:
            run_id: The run.
            case: The case.
            worker: The worker that claimed the case: it is stored only while the claim is
                still this worker's (else another worker took the case over, and its answer
                is the one kept). None stores it regardless.

        Returns:
            Whether the case was stored.
        """
        usages = zip(
            _ROLES, (case.answer_usage, case.answer_judge_usage, case.judge_usage), strict=True
        )
        with self._transaction():
            if worker is not None:
                row = self._one(
                    f"SELECT key FROM claims WHERE run_id = ? AND key = ? AND worker = ?"
                    f"{self._FOR_UPDATE}",
                    (run_id, case.key, worker),
                )
                if row is None:
                    return False
            self._exec("DELETE FROM claims WHERE run_id = ? AND key = ?", (run_id, case.key))
            self._delete(run_id, case.key)
            self._exec(
                f"INSERT INTO cases ({_CASE_COLUMNS}) VALUES ({', '.join('?' * 28)})",
                (
                    run_id,
                    case.key,
                    case.position,
                    storable(case.question),
                    _dumps(case.row),
                    case.outcome,
                    None if case.answer is None else storable(case.answer),
                    None if case.error is None else storable(redact(case.error)),
                    storable(case.feedback),
                    case.score,
                    case.probability,
                    case.label,
                    _dumps(case.verdicts),
                    case.passes,
                    case.judgements,
                    int(case.flipped),
                    case.attempts,
                    case.corrections,
                    case.answer_seconds,
                    case.judge_seconds,
                    time.time(),
                    _dumps(case.cost),
                    _dumps(case.judge_cache),
                    sum(float(case.cost.get(r, 0.0)) for r in _ROLES) if case.cost else None,
                    _dumps(case.models),
                    _dumps(case.trials),
                    None if case.tier is None else storable(case.tier),
                    _dumps(case.tiers),
                ),
            )
            for role, usage in usages:
                if usage.model_calls or usage.total_tokens:
                    self._exec(
                        "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            run_id,
                            case.key,
                            role,
                            usage.model_calls,
                            usage.prompt_tokens,
                            usage.completion_tokens,
                        ),
                    )
        return True

    def _delete(self, run_id: int, key: str) -> None:
        self._exec("DELETE FROM calls WHERE run_id = ? AND key = ?", (run_id, key))
        self._exec("DELETE FROM cases WHERE run_id = ? AND key = ?", (run_id, key))

    def drop_cases(self, run_id: int, keys: set[str]) -> None:
        """Remove cases from a run (rows no longer in its data file, on resume)."""
        with self._transaction():
            for key in keys:
                self._delete(run_id, key)

    def spent(self, run_id: int) -> tuple[int, float]:
        """How many of a run's stored cases have a cost, and what they cost in all.

        Summed by the database.
        """
        return self._costs(run_id)

    def case_keys(self, run_id: int) -> set[str]:
        """The keys of the cases a run has stored."""
        return {r["key"] for r in self._all("SELECT key FROM cases WHERE run_id = ?", (run_id,))}

    def cases(self, run_id: int, *, outcomes: Sequence[str] | None = None) -> list[CaseRecord]:
        """A run's cases, in file order; only those with one of `outcomes` when given."""
        where = "run_id = ?"
        params: list[Any] = [run_id]
        if outcomes is not None:
            where += f" AND outcome IN ({', '.join('?' for _ in outcomes) or 'NULL'})"
            params.extend(outcomes)
        usage: dict[tuple[str, str], Usage] = {}
        calls = (
            f"SELECT * FROM calls WHERE run_id = ? AND key IN (SELECT key FROM cases WHERE {where})"
        )
        for r in self._all(calls, [run_id, *params]):
            usage[(r["key"], r["role"])] = Usage(
                r["model_calls"], r["prompt_tokens"], r["completion_tokens"]
            )
        return [
            self._case(r, usage)
            for r in self._all(f"SELECT * FROM cases WHERE {where} ORDER BY position, key", params)
        ]

    @staticmethod
    def _case(r: Mapping[str, Any], usage: Mapping[tuple[str, str], Usage]) -> CaseRecord:
        key = r["key"]
        return CaseRecord(
            key=key,
            position=r["position"],
            question=r["question"],
            row=_json(r, "row", r["run_id"], r["position"]),
            outcome=r["outcome"],
            answer=r["answer"],
            error=r["error"],
            feedback=r["feedback"],
            score=r["score"],
            probability=r["probability"],
            label=r["label"],
            verdicts=_json(r, "verdicts", r["run_id"], r["position"]),
            passes=r["passes"],
            judgements=r["judgements"],
            flipped=bool(r["flipped"]),
            attempts=r["attempts"],
            corrections=r["corrections"],
            answer_usage=usage.get((key, "answer"), Usage()),
            answer_judge_usage=usage.get((key, "answer_judge"), Usage()),
            judge_usage=usage.get((key, "judge"), Usage()),
            answer_seconds=r["answer_seconds"],
            judge_seconds=r["judge_seconds"],
            cost=_json(r, "cost", r["run_id"], r["position"]),
            judge_cache=_json(r, "judge_cache", r["run_id"], r["position"]),
            models=_json(r, "models", r["run_id"], r["position"]),
            trials=_json(r, "trials", r["run_id"], r["position"]),
            tier=r["tier"],
            tiers=_json(r, "tiers", r["run_id"], r["position"]),
        )


def _json(row: Mapping[str, Any], column: str, run_id: int, position: int | None = None) -> Any:
    """A JSON column read back; one that is not readable JSON is a `RunStoreError`.

    refinekit writes none such, but a store edited by hand (or nested past what Python's json
    reads, a `RecursionError`) must fail as the store, not as a crash.
    """
    try:
        return json.loads(row[column])
    except (ValueError, TypeError, RecursionError) as e:
        what = f"run {run_id}" + ("" if position is None else f", case {position}")
        reason = "nested too deeply to read" if isinstance(e, RecursionError) else "not JSON"
        raise RunStoreError(
            f"the run store holds a {column} it cannot read ({what}: {reason}); it was not "
            "written by refinekit as it is: restore the store, or give another --db"
        ) from None
