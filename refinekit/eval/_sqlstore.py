"""What the SQLite and PostgreSQL run stores share: every query, written once.

`SQLStore` implements the store interface (`_store.RunStore`) over four hooks a database
gives it: rows of a query, a statement run, a new run's id, and a transaction. Its SQL uses
`?` placeholders (the PostgreSQL store turns them into psycopg's) and the SQL both databases
speak; the one difference, how a NULL judge matches a NULL judge, is `_IS`.

Stored text is the user's and the model's own (questions, answers, feedback); error
messages pass through `redact` (refinekit._redact) first, so an API key, an auth header or
a URL's password that an exception happened to quote never lands in a store.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import RunStoreError
from .._model import Usage
from .._redact import redact
from ._store import CaseRecord, RunInfo, RunKind, RunStatus

__all__ = ["LEASE_SECONDS", "SQLStore", "alive", "new_worker", "schema_steps", "storable"]

_ROLES = ("answer", "answer_judge", "judge")

_CASE_COLUMNS = (
    "run_id, key, position, question, row, outcome, answer, error, feedback, score, "
    "probability, label, verdicts, passes, judgements, flipped, attempts, corrections, "
    "answer_seconds, judge_seconds, finished_at, cost, judge_cache"
)


_LATER_STEPS = (
    # 2: who runs a run (workers, each with a lease) and the cases it still has to answer
    """
CREATE TABLE workers (
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    worker TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires_at {real} NOT NULL,
    PRIMARY KEY (run_id, worker)
);
CREATE TABLE claims (
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    worker TEXT,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX claims_in_order ON claims (run_id, position, key)
""",
    # 3: the judge cache (`refinekit.judges.SQLiteCache`'s table), each case's cost and hits
    """
CREATE TABLE refinekit_judge_cache (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    stored_at {real} NOT NULL
);
ALTER TABLE cases ADD COLUMN cost TEXT NOT NULL DEFAULT '{{}}';
ALTER TABLE cases ADD COLUMN judge_cache TEXT NOT NULL DEFAULT '{{}}'
""",
)


def schema_steps(first: str, *, real: str, run_id: str) -> tuple[tuple[str, ...], ...]:
    """A store's schema steps: its own first one, then the shared later ones in its types.

    The dialects differ most in the first; the later ones take `real` for a float column and
    `run_id` for a run's id.

    `steps[n - 1]` takes a store from version n - 1 to n (0: an empty database). A change to
    the schema is a step appended to `_LATER_STEPS`, never an edit of an old step: a store is
    at the version of the steps it has had.
    """
    texts = (first, *(step.format(real=real, run_id=run_id) for step in _LATER_STEPS))
    return tuple(
        tuple(statement.strip() for statement in text.split(";") if statement.strip())
        for text in texts
    )


LEASE_SECONDS = 30.0
"""How long a worker's claim on its cases lasts without a heartbeat (it renews every third of it).

A worker that stops renewing (its machine died, its network went) loses its claims when the
lease expires, and another worker takes them over. A worker on the same machine whose process
is gone loses them at once."""

HOST = socket.gethostname()


def new_worker() -> str:
    """A worker id, unique across machines: `host:pid:random`."""
    return f"{HOST}:{os.getpid()}:{os.urandom(3).hex()}"


def storable(text: str) -> str:
    """Text a store can hold: a lone UTF-16 surrogate (from a model or a file) becomes `?`."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _dumps(value: Any) -> str:
    return storable(json.dumps(value, ensure_ascii=False, default=str))


def alive(pid: int | None) -> bool:
    """Whether the process `pid` (on this machine) is alive."""
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return False
    return True


class SQLStore:
    """The store interface over a SQL database; subclasses connect and give the hooks."""

    path: Path
    where: str
    """The store as messages name it (the file, or the URL without its credentials)."""

    _IS = "IS"
    """SQL's "the same value, NULL included" between a column and a parameter."""

    _IS_NOT = "IS NOT"
    """SQL's "another value, NULL included"."""

    _SKIP_LOCKED = ""
    """What makes a claim's SELECT lock the rows it picks and pass over rows others hold
    (PostgreSQL's `FOR UPDATE ... SKIP LOCKED`); SQLite's write transaction already holds the
    whole database."""

    _FOR_UPDATE = ""
    """What makes a SELECT lock the rows it reads until the transaction ends."""

    # the hooks

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Mapping[str, Any]]:
        raise NotImplementedError

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def _insert(self, sql: str, params: Sequence[Any]) -> int:
        """Run an INSERT into `runs`; the new row's id."""
        raise NotImplementedError

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per row."""
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _lock_runs(self) -> None:
        """Inside a transaction: hold the store's run lock until it ends (see `locked`)."""

    def _now(self) -> float:
        """The store's clock (Unix time): the one every worker's lease is measured by."""
        return time.time()

    def locked(self) -> AbstractContextManager[None]:
        """A transaction that holds the store's run lock.

        One process at a time starts, resumes or joins a run, so two never start the same run.
        """
        return self._locked()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._transaction():
            self._lock_runs()
            yield

    def close(self) -> None:
        """Close the store."""
        raise NotImplementedError

    def judge_cache(self) -> Any:
        """The judge cache kept in this store (see `_store.RunStore.judge_cache`)."""
        raise NotImplementedError

    # the schema: a store's steps, and the hooks its migration needs

    _step_errors: tuple[type[Exception], ...] = ()
    """The driver's errors a schema step may raise."""

    def _migrations(self) -> tuple[tuple[str, ...], ...]:
        """The store's schema steps (its module's `_MIGRATIONS`, read when used)."""
        raise NotImplementedError

    def _schema_version(self) -> int:
        """The version the store is at (0: an empty database)."""
        raise NotImplementedError

    def _run_step(self, statement: str) -> None:
        """Run one statement of a schema step, raising the driver's own error."""
        raise NotImplementedError

    def _step_error(self, error: Exception) -> str:
        """A failed step's error as a message may show it."""
        return str(error)

    def _lock_schema(self) -> None:
        """Inside the migration's transaction: keep other processes from migrating at once."""

    def _stamp(self, version: int) -> None:
        """Inside the migration's transaction: any other record of the version reached."""

    def _check_version(self, version: int) -> None:
        newest = len(self._migrations())
        if version > newest:
            raise RunStoreError(
                f"the run store {self.where} was written by a newer refinekit (schema "
                f"{version}, this one reads {newest}); upgrade refinekit or use another --db"
            )

    def _migrate(self) -> None:
        """Apply the steps the store lacks, all or none, one process at a time."""
        steps = self._migrations()
        with self._transaction():
            self._lock_schema()
            version = self._schema_version()  # again, under the lock
            self._check_version(version)
            for number, step in enumerate(steps[version:], start=version + 1):
                try:
                    for statement in step:
                        self._run_step(statement)
                except self._step_errors as e:
                    raise RunStoreError(
                        f"cannot bring the run store {self.where} from schema {version} to "
                        f"{number}: {self._step_error(e)}; nothing was changed"
                    ) from None
            self._exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            self._exec("DELETE FROM schema_version")
            self._exec("INSERT INTO schema_version VALUES (?)", (len(steps),))
            self._stamp(len(steps))

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Mapping[str, Any] | None:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
            merged = json.loads(row["options"]) | dict(options)
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
            options=json.loads(row["options"]),
            fingerprint=row["fingerprint"],
            version=row["version"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            summary=json.loads(row["summary"]),
        )

    # workers: who runs a run's cases, each holding a lease it renews

    @staticmethod
    def _gone(row: Mapping[str, Any], now: float) -> bool:
        """Whether a worker is gone: its lease expired, or its process on this machine died."""
        return bool(row["expires_at"] < now or (row["host"] == HOST and not alive(row["pid"])))

    def _live(self, run_id: int) -> list[str]:
        """The workers of a run that are alive."""
        now = self._now()
        rows = self._all("SELECT * FROM workers WHERE run_id = ?", (run_id,))
        return [r["worker"] for r in rows if not self._gone(r, now)]

    def join(self, run_id: int, worker: str) -> None:
        """Enter `worker` as one of the run's workers, its lease starting now."""
        self._exec(
            "INSERT INTO workers (run_id, worker, host, pid, expires_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, worker, HOST, os.getpid(), self._now() + LEASE_SECONDS),
        )

    def heartbeat(self, run_id: int, worker: str) -> None:
        """Renew the worker's lease (entering it again if it was taken for gone)."""
        with self._transaction():
            row = self._one(
                "SELECT worker FROM workers WHERE run_id = ? AND worker = ?", (run_id, worker)
            )
            if row is None:
                self.join(run_id, worker)
            else:
                self._exec(
                    "UPDATE workers SET expires_at = ? WHERE run_id = ? AND worker = ?",
                    (self._now() + LEASE_SECONDS, run_id, worker),
                )

    def leave(self, run_id: int, worker: str) -> int:
        """Take `worker` out of the run, releasing the cases it claimed.

        Returns:
            How many workers are still at the run.
        """
        with self._transaction():
            self._forget(run_id, worker)
        return len(self._live(run_id))

    def _forget(self, run_id: int, worker: str) -> None:
        """Take a worker out and free its claims (a claim's worker is always one entered)."""
        self._exec(
            "UPDATE claims SET worker = NULL WHERE run_id = ? AND worker = ?", (run_id, worker)
        )
        self._exec("DELETE FROM workers WHERE run_id = ? AND worker = ?", (run_id, worker))

    def queue(self, run_id: int, cases: Iterable[tuple[str, int]]) -> None:
        """Make `(key, position)` the cases of the run still to answer (nothing claimed)."""
        with self._transaction():
            self._exec("DELETE FROM claims WHERE run_id = ?", (run_id,))
            self._many(
                "INSERT INTO claims (run_id, key, position) VALUES (?, ?, ?)",
                ((run_id, key, position) for key, position in cases),
            )

    def claim(self, run_id: int, worker: str, limit: int = 1) -> list[str]:
        """Claim up to `limit` of the run's cases still to answer, in file order.

        A case is free when nobody claimed it or its worker is gone (the lease expired, or
        the process died on this machine: such a worker is taken out first, its claims
        freed); two workers claiming at once never get the same case. The claim lasts until
        the case is saved (`save_case(..., worker=)`), or the worker leaves or is gone.
        """
        with self._transaction():
            now = self._now()
            gone = [
                r["worker"]
                for r in self._all("SELECT * FROM workers WHERE run_id = ?", (run_id,))
                if r["worker"] != worker and self._gone(r, now)
            ]
            for other in gone:  # its claims are free again
                self._forget(run_id, other)
            # (a plain condition on the row locked: PostgreSQL re-checks it on the row's newest
            # version when another worker claimed it meanwhile; a join's other side it does not)
            rows = self._all(
                "SELECT key FROM claims WHERE run_id = ? AND worker IS NULL "
                f"ORDER BY position, key LIMIT ?{self._SKIP_LOCKED}",
                (run_id, limit),
            )
            keys = [str(r["key"]) for r in rows]
            self._many(
                "UPDATE claims SET worker = ? WHERE run_id = ? AND key = ?",
                ((worker, run_id, key) for key in keys),
            )
        return keys

    def pending(self, run_id: int, *, besides: str | None = None) -> int:
        """How many of the run's cases are still to answer (claimed or not).

        Those `besides` (a worker) holds are left out.
        """
        query = "SELECT count(*) AS n FROM claims WHERE run_id = ?"
        params: list[Any] = [run_id]
        if besides is not None:
            query += f" AND worker {self._IS_NOT} ?"
            params.append(besides)
        row = self._one(query, params)
        return 0 if row is None else int(row["n"])

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
                f"INSERT INTO cases ({_CASE_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    @staticmethod
    def _cost_of(part: str) -> str:
        """SQL for a number in a case's `cost` JSON (0 when it is absent)."""
        return f"coalesce(json_extract(cost, '$.{part}'), 0)"

    def spent(self, run_id: int) -> tuple[int, float]:
        """How many of a run's stored cases have a cost, and what they cost in all.

        Summed by the database: `--max-cost` asks before every case it starts.
        """
        total = " + ".join(self._cost_of(part) for part in ("answer", "answer_judge", "judge"))
        row = self._one(
            f"SELECT count(*) AS priced, coalesce(sum({total}), 0) AS total FROM cases "
            "WHERE run_id = ? AND cost <> '{}'",
            (run_id,),
        )
        return (0, 0.0) if row is None else (int(row["priced"]), float(row["total"]))

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
            row=json.loads(r["row"]),
            outcome=r["outcome"],
            answer=r["answer"],
            error=r["error"],
            feedback=r["feedback"],
            score=r["score"],
            probability=r["probability"],
            label=r["label"],
            verdicts=json.loads(r["verdicts"]),
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
            cost=json.loads(r["cost"]),
            judge_cache=json.loads(r["judge_cache"]),
        )
