"""Where a judge cache keeps its entries: the `JudgeCache` protocol and the built-in backends.

JSON text by key, sync: `MemoryCache` (this process), `SQLiteCache` (a file, shared by
processes), `PostgresCache` (a database, shared by machines; the run store's table). What a
key is made of and how a judge uses a cache is `_cache`'s.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from .._core.numbers import is_number, is_real, shown
from .._core.redact import redact, register_secrets, safe_url, url_problem, url_secrets

__all__ = ["SCHEMA_LOCK", "Counters", "JudgeCache", "MemoryCache", "PostgresCache", "SQLiteCache"]

SCHEMA_LOCK = 0x726B5F736368
"""The PostgreSQL advisory lock taken to change the schema ("rk_sch"): a run store's
migration, and a `PostgresCache` making its table, which is the store's too."""


@runtime_checkable
class JudgeCache(Protocol):
    """Where a judge cache keeps its entries: JSON text by key, sync.

    A key is a 64-character hex SHA-256 digest; a value is JSON text that refinekit wrote and
    reads back. Both methods may be called from several threads at once (a `criteria` judge
    asks its criteria concurrently). An async judge calls a backend in a worker thread
    (`asyncio.to_thread`), so a backend that waits (a database lock, a network round trip)
    never blocks the event loop; `MemoryCache` is called directly.

    A backend that raises does not fail the judgement: the error is logged (WARNING, on the
    `refinekit` logger) and the judge asks the model as it would without a cache.
    """

    def get(self, key: str) -> str | None:
        """The value stored under `key`, or None."""
        ...

    def set(self, key: str, value: str) -> None:
        """Store `value` under `key`, replacing any value there."""
        ...


class Counters:
    """`hits` and `misses` of a built-in backend's `get`, thread-safe."""

    def __init__(self) -> None:
        self._count_lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _counted(self, value: str | None) -> str | None:
        with self._count_lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return value

    def _unreadable(self) -> None:
        """A hit whose value could not be read back: it counts as the miss it was."""
        with self._count_lock:
            self.hits -= 1
            self.misses += 1


_D = TypeVar("_D", bound="_Database")


class _Database(Counters):
    """A cache in a database: a context manager that closes its connection on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MemoryCache(Counters):
    """A judge cache in this process's memory: bounded, least recently used out first.

    Thread-safe. Entries live as long as the object; `clear()` drops them.

    Attributes:
        hits: Lookups that found a stored reply (each one a model call not made).
        misses: Lookups that found none.

    Args:
        max_entries: The most replies kept; storing one more drops the least recently used.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        super().__init__()
        self.max_entries = max_entries
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The value stored under `key` (now the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
        return self._counted(value)

    def set(self, key: str, value: str) -> None:
        """Store `value` under `key`; past `max_entries`, drop the least recently used."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"MemoryCache(entries={len(self)}, max_entries={self.max_entries})"


class SQLiteCache(_Database):
    """A judge cache in an SQLite file: one table, shared by threads and processes.

    The file is opened in WAL mode with a busy timeout, so several processes (parallel eval
    workers, a test run and a notebook) read and write one file safely. Each entry is kept
    until `clear()` (or the file is deleted). Close it with `close()` or `with`.

    Attributes:
        path: The database file.
        hits: Lookups through this object that found a stored reply.
        misses: Lookups through this object that found none.

    Args:
        path: The database file; created (with its table) if missing. Its folder must exist.
        timeout: Seconds to wait for another process's write lock before giving up.

    Raises:
        ValueError: The file cannot be opened as an SQLite database there.
    """

    _TABLE = "refinekit_judge_cache"

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        if not is_number(timeout) or not is_real(timeout) or timeout < 0:
            raise ValueError(
                f"timeout must be a finite number of seconds >= 0, got {shown(timeout)}"
            )
        super().__init__()
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise ValueError(
                f"SQLiteCache cannot open {str(self.path)!r} ({e}): give a file path in a "
                "folder that exists and that you can write"
            ) from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {self._TABLE} "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL, stored_at REAL NOT NULL)"
            )
        except sqlite3.Error as e:
            self._db.close()
            raise ValueError(
                f"SQLiteCache cannot use {str(self.path)!r} as an SQLite database ({e})"
            ) from None

    def get(self, key: str) -> str | None:
        """The value stored under `key`, or None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT value FROM {self._TABLE} WHERE key = ?", (key,)
            ).fetchone()
        return self._counted(None if row is None else str(row[0]))

    def set(self, key: str, value: str) -> None:
        """Store `value` under `key`, replacing any value there."""
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO {self._TABLE} (key, value, stored_at) VALUES (?, ?, ?)",
                (key, value, time.time()),
            )

    def clear(self) -> None:
        """Delete every entry from the file (for every process using it)."""
        with self._lock:
            self._db.execute(f"DELETE FROM {self._TABLE}")

    def __len__(self) -> int:
        with self._lock:
            row = self._db.execute(f"SELECT count(*) FROM {self._TABLE}").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the database connection. Closing twice is harmless."""
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteCache({str(self.path)!r})"


class PostgresCache(_Database):
    """A judge cache in a PostgreSQL database: one table, shared by every process and machine.

    The table is `refinekit_judge_cache` (key, value, the time stored), made if missing; a
    refinekit run store on PostgreSQL has it already, and `refinekit eval --cache` keeps its
    verdicts there, so an app and its evals can share one cache. Needs psycopg 3
    (`pip install 'refinekit[postgres]'`). Its own connection, in autocommit: psycopg's
    connections serve several threads, one statement at a time.

    Attributes:
        where: The database's URL without its credentials.
        hits: Lookups through this object that found a stored reply.
        misses: Lookups through this object that found none.

    Args:
        url: `postgresql://user:password@host:port/database` (libpq's URL). Its credentials
            are used to connect and appear in no message; a user name or password holding
            `@`, `/`, `?`, `#` or `%` is percent-encoded (`#` as `%23`, ...), as libpq
            requires.

    Raises:
        ValueError: The URL is malformed (the message says how, without its user info),
            psycopg is missing, or the database cannot be reached or used.
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        if not isinstance(url, str):
            raise TypeError(f"PostgresCache takes a postgresql:// URL, got {type(url).__name__}")
        self.where = safe_url(url)
        problem = url_problem(url)
        if problem is not None:
            raise ValueError(f"PostgresCache: {self.where} is not a valid URL: {problem}")
        secrets = url_secrets(url)
        register_secrets(self, secrets)
        try:
            import psycopg
        except ImportError:
            raise ValueError(
                "PostgresCache needs psycopg 3: pip install 'refinekit[postgres]'"
            ) from None
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.Error as e:
            raise ValueError(
                f"PostgresCache cannot use {self.where}: {redact(str(e).strip(), secrets)}"
            ) from None
        try:
            self._make_table()
        except psycopg.Error as e:
            self._db.close()
            raise ValueError(
                f"PostgresCache cannot use {self.where}: {redact(str(e).strip(), secrets)}"
            ) from None

    def _make_table(self) -> None:
        """Make the table unless it is there, under the run store's schema lock.

        A run store opened at the same moment makes the same table (`refinekit eval --db`
        on a new database): one at a time, else one of two `CREATE TABLE IF NOT EXISTS` fails
        on PostgreSQL's catalog. A table already there needs no lock, nor the right to create.
        """
        row = self._db.execute("SELECT to_regclass('refinekit_judge_cache')").fetchone()
        if row is not None and row[0] is not None:
            return
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS refinekit_judge_cache "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL, stored_at DOUBLE PRECISION NOT NULL)"
            )

    def get(self, key: str) -> str | None:
        """The value stored under `key`, or None."""
        row = self._db.execute(
            "SELECT value FROM refinekit_judge_cache WHERE key = %s", (key,)
        ).fetchone()
        return self._counted(None if row is None else str(row[0]))

    def set(self, key: str, value: str) -> None:
        """Store `value` under `key`, replacing any value there."""
        self._db.execute(
            "INSERT INTO refinekit_judge_cache (key, value, stored_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "stored_at = excluded.stored_at",
            (key, value.replace("\x00", "\ufffd"), time.time()),
        )

    def clear(self) -> None:
        """Delete every entry (for every process using the database)."""
        self._db.execute("DELETE FROM refinekit_judge_cache")

    def __len__(self) -> int:
        row = self._db.execute("SELECT count(*) FROM refinekit_judge_cache").fetchone()
        return int(row[0]) if row is not None else 0

    def close(self) -> None:
        """Close the connection. Closing twice is harmless."""
        self._db.close()

    def __repr__(self) -> str:
        return f"PostgresCache({self.where!r})"
