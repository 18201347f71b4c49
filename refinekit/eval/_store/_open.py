"""Which store a `db` argument names, and the store opened: above the stores it opens.

`store_location` reads a `db` argument (or `$REFINEKIT_DB`, or the default file) as a SQLite
file or a PostgreSQL URL, refusing other schemes and malformed URLs without showing their
user info; `open_store` opens the store it names.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..._core.errors import UsageProblem
from ..._core.redact import safe_url, url_problem
from ._postgres import SCHEMES, PostgresStore, is_postgres_url
from ._records import RunStore, StoreURL
from ._sqlite import DEFAULT_DB, SQLiteStore

__all__ = ["STORE_FORMS", "open_store", "store_location", "store_path"]


def store_path(db: str | os.PathLike[str] | None = None) -> Path:
    """The SQLite run store a `db` argument means.

    `db`, else `$REFINEKIT_DB`, else `.refinekit/runs.db`.

    Args:
        db: A path, or None for the default.

    Returns:
        The store's file (it may not exist yet).

    Raises:
        UsageProblem: `db` (or `$REFINEKIT_DB`) is a PostgreSQL URL, which has no file:
            `store_location` says which store any `db` means.
    """
    where = store_location(db)
    if isinstance(where, StoreURL):
        raise UsageProblem(
            f"the run store {where} is a PostgreSQL database, not a file: "
            "refinekit.eval.store_location(db) names either kind"
        )
    return where


def store_location(db: str | os.PathLike[str] | None = None) -> Path | StoreURL:
    """The store a `db` argument means: a SQLite file, or a PostgreSQL URL.

    `db`, else `$REFINEKIT_DB`, else `.refinekit/runs.db`; a `postgresql://` (or
    `postgres://`) one is a PostgreSQL store, kept as a `StoreURL` (shown without its
    credentials; the `db=` of every `refinekit.eval` function takes it as it is). Any other
    text is a file's path, unless it starts like a URL (`scheme://`, a scheme of two
    characters or more: `C://` is a Windows path), which is refused.

    Args:
        db: A path or URL, or None for the default.

    Returns:
        The SQLite file (it may not exist yet), or the PostgreSQL store's URL.

    Raises:
        UsageProblem: `db` (or `$REFINEKIT_DB`) is a URL of another scheme, or a malformed
            PostgreSQL URL (a password holding `#`, `/`, `?` or `@` must be percent-encoded);
            the message shows no part of the URL's user info. Or a path that is a folder.
    """
    given = db or os.environ.get("REFINEKIT_DB") or DEFAULT_DB
    source = "" if db or not os.environ.get("REFINEKIT_DB") else " ($REFINEKIT_DB)"
    if isinstance(given, StoreURL):
        _check_url(given._url, source)
        return given
    if isinstance(given, str) and _URL.match(given):
        _check_url(given, source)
        return StoreURL(given)
    path = Path(given)
    if path.is_dir():
        raise UsageProblem(
            f"the run store {given}{source} is a folder; give a SQLite file's path (e.g. "
            f"{path / 'runs.db'})"
        )
    return path


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+://")
"""Text that starts like a URL: a scheme of two characters or more (`C://x` is a path)."""

STORE_FORMS = (
    "give a SQLite file's path (runs.db, /data/evals/runs.db) or a PostgreSQL URL "
    "(postgresql://host:5432/database, or postgres://, with user:password@ before the host)"
)


def _check_url(url: str, source: str) -> None:
    """Raise the `UsageProblem` of a `db` URL refinekit cannot use (none for a sound one)."""
    shown = safe_url(url)
    if not url.startswith(SCHEMES):
        scheme = url.partition("://")[0]
        sqlite = (
            " (a SQLite store is named by its file's path, not a sqlite:// URL)"
            if scheme.lower() == "sqlite"
            else ""
        )
        raise UsageProblem(
            f"the run store {shown}{source}: refinekit keeps runs in SQLite files and "
            f"PostgreSQL databases, not in {scheme}:// ones{sqlite}; {STORE_FORMS}"
        )
    problem = url_problem(url)
    if problem is not None:
        raise UsageProblem(
            f"the run store {shown}{source} is not a valid PostgreSQL URL (user info not "
            f"shown): {problem}"
        )


def open_store(db: Path | str) -> RunStore:
    """Open (or make) the store `db` names.

    Args:
        db: The SQLite file, or a `postgresql://` URL (`refinekit[postgres]`).

    Raises:
        RunStoreError: The store cannot be opened, or is not a refinekit run store.
    """
    if isinstance(db, StoreURL):
        return PostgresStore(db._url)
    if is_postgres_url(db):
        assert isinstance(db, str)
        return PostgresStore(db)
    return SQLiteStore(db)
