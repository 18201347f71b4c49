"""The SQLite run store: every `refinekit eval` and `refinekit calibrate` run in one file.

The first implementation of the store interface (`_records.RunStore`); its queries are
`_sql.SQLStore`'s, which the PostgreSQL store shares.

One row per run, one per case (committed as soon as the case finishes, so an interrupted run
keeps what it paid for), and the model calls and tokens of each case by role. A run that did
not finish stays `incomplete` (or `running` when its process died) and can be resumed: the
cases already stored are not run again.

The schema is versioned: `schema_version` holds the version a store is at (also written to
`PRAGMA user_version`, which refinekit 0.1 read), and opening a store applies the steps of
`_MIGRATIONS` it lacks, in one transaction. A store from before the table is version 1.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..._core.errors import RunStoreError
from ..._core.redact import redact
from ...judges._cache_backends import SQLiteCache
from ._records import CaseOutcome, CaseRecord, RunInfo
from ._sql import SQLStore
from ._sqlbase import schema_steps

__all__ = [
    "DEFAULT_DB",
    "CaseRecord",
    "CaseOutcome",
    "RunInfo",
    "RunStoreError",
    "SQLiteStore",
    "redact",
    "schema_version",
]

DEFAULT_DB = Path(".refinekit") / "runs.db"

_MIGRATIONS = schema_steps(
    create="CREATE TABLE IF NOT EXISTS",
    index="CREATE INDEX IF NOT EXISTS",
    identity="INTEGER PRIMARY KEY AUTOINCREMENT",
    real="REAL",
    run_id="INTEGER",
    tokens="INTEGER",
)
"""The schema's steps: `_MIGRATIONS[n - 1]` takes a store from version n - 1 to n (version 0:
an empty file), the PostgreSQL store's in SQLite's words (`_sqlbase.schema_steps`):
a change to the schema is a step appended there, never an edit of an old step.

Version 1: runs, cases, calls. Version 2: workers (who runs a run, with a lease) and claims
(the cases a run has still to answer, and who is answering each). Version 3: the judge cache
(`refinekit_judge_cache`, the table `refinekit.judges.SQLiteCache` keeps, so that the store
file is the cache `refinekit eval --cache` uses; a cache opened on the file before made it
already, and it is kept with its entries), each case's cost and its judge cache hits and
misses."""


class SQLiteStore(SQLStore):
    """The SQLite file runs are stored in; a context manager that closes it.

    Args:
        path: The database file; its folder is created when missing.

    Raises:
        RunStoreError: The file is not a refinekit run store, or one of a newer refinekit.
    """

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        self.where = str(self.path)
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
            self._check_version(self._schema_version())
            if self._schema_version() < len(_MIGRATIONS) or not _versioned(self._db):
                self._migrate()
        except RunStoreError:
            self._db.close()
            raise
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise RunStoreError(
                f"{self.path} is not a refinekit run store ({e}); use another --db"
            ) from None

    _step_errors = (sqlite3.Error,)

    def _migrations(self) -> tuple[tuple[str, ...], ...]:
        return _MIGRATIONS

    def _schema_version(self) -> int:
        return schema_version(self._db)

    def _run_step(self, statement: str) -> None:
        self._db.execute(statement)

    def _stamp(self, version: int) -> None:
        self._db.execute(f"PRAGMA user_version = {version}")  # what refinekit 0.1 read

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def judge_cache(self) -> SQLiteCache:
        """The judge cache in this file (its table; its own connection: close it when done)."""
        return SQLiteCache(self.path)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """sqlite3's errors (a locked or unwritable file, a full disk) as `RunStoreError`s."""
        try:
            yield
        except sqlite3.Error as e:
            raise RunStoreError(f"the run store {self.path} failed: {e}") from None

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Mapping[str, Any]]:
        with self._failing():
            return self._db.execute(sql, params).fetchall()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._failing():
            self._db.execute(sql, params)

    def _insert(self, sql: str, params: Sequence[Any]) -> int:
        with self._failing():
            run_id = self._db.execute(sql, params).lastrowid
        assert run_id is not None
        return run_id

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._failing():
            self._db.executemany(sql, rows)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._failing(), self._steps():
            yield

    @contextmanager
    def _steps(self) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the write lock at once (two processes never both read, then
        # write); a transaction inside one is a savepoint of it
        if self._db.in_transaction:
            self._db.execute("SAVEPOINT inner_step")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK TO inner_step")
                self._db.execute("RELEASE inner_step")
                raise
            self._db.execute("RELEASE inner_step")
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


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
