"""The SQLite run store: every `refinekit eval` and `refinekit calibrate` run in one file.

The first implementation of the store interface (`_store.RunStore`).

One row per run, one per case (committed as soon as the case finishes, so an interrupted run
keeps what it paid for), and the model calls and tokens of each case by role. A run that did
not finish stays `incomplete` (or `running` when its process died) and can be resumed: the
cases already stored are not run again.

Stored text is the user's and the model's own (questions, answers, feedback); error
messages pass through `redact` (refinekit._redact) first, so an API key, an auth header or
a URL's password that an exception happened to quote never lands in the file.

The schema is versioned: `schema_version` holds the version a store is at (also written to
`PRAGMA user_version`, which refinekit 0.1 read), and opening a store applies the steps of
`_MIGRATIONS` it lacks, in one transaction. A store from before the table is version 1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import RunStoreError
from .._model import Usage
from .._redact import redact
from ._store import CaseRecord, Outcome, RunInfo, RunKind, RunStatus

__all__ = [
    "DEFAULT_DB",
    "CaseRecord",
    "Outcome",
    "RunInfo",
    "RunStoreError",
    "SQLiteStore",
    "redact",
    "schema_version",
]

DEFAULT_DB = Path(".refinekit") / "runs.db"

_V1 = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    dataset TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL,
    target TEXT,
    judge TEXT,
    options TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    version TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    pid INTEGER,
    summary TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_by_fingerprint ON runs (fingerprint, id);
CREATE TABLE IF NOT EXISTS cases (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    question TEXT NOT NULL,
    row TEXT NOT NULL,
    outcome TEXT NOT NULL,
    answer TEXT,
    error TEXT,
    feedback TEXT NOT NULL,
    score REAL,
    probability REAL,
    label TEXT,
    verdicts TEXT NOT NULL,
    passes INTEGER NOT NULL,
    judgements INTEGER NOT NULL,
    flipped INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    corrections INTEGER NOT NULL,
    answer_seconds REAL NOT NULL,
    judge_seconds REAL NOT NULL,
    finished_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS calls (
    run_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    role TEXT NOT NULL,
    model_calls INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    PRIMARY KEY (run_id, key, role),
    FOREIGN KEY (run_id, key) REFERENCES cases (run_id, key) ON DELETE CASCADE
);
"""

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    tuple(statement.strip() for statement in _V1.split(";") if statement.strip()),
)
"""The schema's steps: `_MIGRATIONS[n - 1]` takes a store from version n - 1 to n (version 0:
an empty file). A change to the schema is a step appended here and to the PostgreSQL store's
list, never an edit of an old step: a store is at the version of the steps it has had."""

_ROLES = ("answer", "answer_judge", "judge")


def _storable(text: str) -> str:
    """Text SQLite can hold: a lone UTF-16 surrogate (from a model or a file) becomes `?`."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _dumps(value: Any) -> str:
    return _storable(json.dumps(value, ensure_ascii=False, default=str))


class SQLiteStore:
    """The SQLite file runs are stored in; a context manager that closes it.

    Args:
        path: The database file; its folder is created when missing.

    Raises:
        RunStoreError: The file is not a refinekit run store, or one of a newer refinekit.
    """

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as e:
            raise RunStoreError(f"cannot open the run store {self.path}: {e}") from None
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA foreign_keys = ON")
            # WAL with NORMAL sync: a commit per case stays durable against a killed process
            # (what resume needs) without an fsync per case
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._check_version(schema_version(self._db))
            if schema_version(self._db) < len(_MIGRATIONS) or not _versioned(self._db):
                self._migrate()
        except RunStoreError:
            self._db.close()
            raise
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise RunStoreError(
                f"{self.path} is not a refinekit run store ({e}); use another --db"
            ) from None

    def _check_version(self, version: int) -> None:
        if version > len(_MIGRATIONS):
            raise RunStoreError(
                f"the run store {self.path} was written by a newer refinekit (schema "
                f"{version}, this one reads {len(_MIGRATIONS)}); upgrade refinekit or use "
                "another --db"
            )

    def _migrate(self) -> None:
        """Apply the steps the store lacks, all or none (another process may be at it too)."""
        with self._transaction():
            version = schema_version(self._db)  # again, under the write lock
            self._check_version(version)
            for number, step in enumerate(_MIGRATIONS[version:], start=version + 1):
                try:
                    for statement in step:
                        self._db.execute(statement)
                except sqlite3.Error as e:
                    raise RunStoreError(
                        f"cannot bring the run store {self.path} from schema {version} to "
                        f"{number}: {e}; nothing was changed"
                    ) from None
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            self._db.execute("DELETE FROM schema_version")
            self._db.execute("INSERT INTO schema_version VALUES (?)", (len(_MIGRATIONS),))
            self._db.execute(f"PRAGMA user_version = {len(_MIGRATIONS)}")

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> SQLiteStore:
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
        cursor = self._db.execute(
            "INSERT INTO runs (kind, status, dataset, dataset_sha256, target, judge, options, "
            "fingerprint, version, started_at, pid) "
            "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                kind,
                str(dataset.resolve()),
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
        run_id = cursor.lastrowid
        assert run_id is not None
        return self.run(run_id)

    def resumable(self, fingerprint: str) -> RunInfo | None:
        """The newest run with this fingerprint, when it did not complete; else None.

        A run still `running` (its process is alive) is not resumable: two processes would
        run the same cases into one run.
        """
        row = self._db.execute(
            "SELECT * FROM runs WHERE fingerprint = ? ORDER BY id DESC LIMIT 1", (fingerprint,)
        ).fetchone()
        if row is None or row["status"] == "complete":
            return None
        run = self._run(row)
        return None if run.status == "running" else run

    def resume(self, run_id: int, dataset_sha256: str) -> RunInfo:
        """Mark a stored run `running` again, with the data file's current hash."""
        self._db.execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, dataset_sha256 = ?, pid = ? "
            "WHERE id = ?",
            (dataset_sha256, os.getpid(), run_id),
        )
        return self.run(run_id)

    def finish_run(self, run_id: int, status: RunStatus, summary: Mapping[str, Any]) -> None:
        """Record how a run stopped, and its figures."""
        self._db.execute(
            "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE id = ?",
            (status, time.time(), _dumps(dict(summary)), run_id),
        )

    def run(self, run_id: int) -> RunInfo:
        """One run.

        Raises:
            RunStoreError: No run has this id.
        """
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunStoreError(f"no run {run_id} in {self.path}; `refinekit runs` lists them")
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
            params.append(str(Path(dataset).resolve()))
        return [self._run(r) for r in self._db.execute(query + " ORDER BY id", params)]

    def previous(self, run: RunInfo) -> RunInfo | None:
        """The newest complete run of the same kind, data file and judge started before `run`.

        Verdicts of another judge (or of the column checks alone) measure something else, so
        they are not compared; the answer function may differ: that is what a comparison is
        for.
        """
        row = self._db.execute(
            "SELECT * FROM runs WHERE kind = ? AND dataset = ? AND judge IS ? "
            "AND status = 'complete' AND id < ? ORDER BY id DESC LIMIT 1",
            (run.kind, run.dataset, run.judge, run.id),
        ).fetchone()
        return None if row is None else self._run(row)

    @staticmethod
    def _run(row: sqlite3.Row) -> RunInfo:
        status = row["status"]
        if status == "running" and not _alive(row["pid"]):
            status = "incomplete"  # its process died before it could say so
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

    # cases

    def save_case(self, run_id: int, case: CaseRecord) -> None:
        """Store a finished case and its calls, in one transaction (replacing an older copy)."""
        usages = zip(
            _ROLES, (case.answer_usage, case.answer_judge_usage, case.judge_usage), strict=True
        )
        with self._transaction():
            self._db.execute("DELETE FROM calls WHERE run_id = ? AND key = ?", (run_id, case.key))
            self._db.execute(
                "INSERT OR REPLACE INTO cases VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    case.key,
                    case.position,
                    _storable(case.question),
                    _dumps(case.row),
                    case.outcome,
                    None if case.answer is None else _storable(case.answer),
                    None if case.error is None else _storable(redact(case.error)),
                    _storable(case.feedback),
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
                ),
            )
            self._db.executemany(
                "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        case.key,
                        role,
                        usage.model_calls,
                        usage.prompt_tokens,
                        usage.completion_tokens,
                    )
                    for role, usage in usages
                    if usage.model_calls or usage.total_tokens
                ],
            )

    def drop_cases(self, run_id: int, keys: set[str]) -> None:
        """Remove cases from a run (rows no longer in its data file, on resume)."""
        with self._transaction():
            for key in keys:
                self._db.execute("DELETE FROM calls WHERE run_id = ? AND key = ?", (run_id, key))
                self._db.execute("DELETE FROM cases WHERE run_id = ? AND key = ?", (run_id, key))

    def case_keys(self, run_id: int) -> set[str]:
        """The keys of the cases a run has stored."""
        return {r[0] for r in self._db.execute("SELECT key FROM cases WHERE run_id = ?", (run_id,))}

    def cases(self, run_id: int) -> list[CaseRecord]:
        """A run's cases, in file order."""
        usage: dict[tuple[str, str], Usage] = {}
        for r in self._db.execute("SELECT * FROM calls WHERE run_id = ?", (run_id,)):
            usage[(r["key"], r["role"])] = Usage(
                r["model_calls"], r["prompt_tokens"], r["completion_tokens"]
            )
        out = []
        for r in self._db.execute(
            "SELECT * FROM cases WHERE run_id = ? ORDER BY position, key", (run_id,)
        ):
            key = r["key"]
            out.append(
                CaseRecord(
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
                )
            )
        return out

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


def schema_version(db: sqlite3.Connection) -> int:
    """The schema version of an open SQLite store.

    `schema_version`'s row; a store from before that table is at its `PRAGMA user_version`
    (1 for refinekit's), or 1 when it has the tables but no version; an empty file is 0.
    """
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" in tables:
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        if row is not None and row[0] is not None:
            return int(row[0])
    user_version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if user_version:
        return user_version
    return 1 if "runs" in tables else 0


def _versioned(db: sqlite3.Connection) -> bool:
    return (
        db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        is not None
    )


def _alive(pid: int | None) -> bool:
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


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
