"""The run store: every `refinekit eval` and `refinekit calibrate` run in one SQLite file.

One row per run, one per case (committed as soon as the case finishes, so an interrupted run
keeps what it paid for), and the model calls and tokens of each case by role. A run that did
not finish stays `incomplete` (or `running` when its process died) and can be resumed: the
cases already stored are not run again.

Stored text is the user's and the model's own (questions, answers, feedback); error
messages pass through `redact` (refinekit._redact) first, so an API key, an auth header or
a URL's password that an exception happened to quote never lands in the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from .._errors import RunStoreError
from .._model import Usage
from .._redact import redact

__all__ = [
    "DEFAULT_DB",
    "CaseRecord",
    "Outcome",
    "RunInfo",
    "RunStore",
    "RunStoreError",
    "redact",
]

DEFAULT_DB = Path(".refinekit") / "runs.db"
_SCHEMA_VERSION = 1

Outcome = Literal["passed", "failed", "raised", "unavailable", "inconclusive"]
"""What became of a case:

- `passed` / `failed`: the answer was judged;
- `raised`: the answer function raised (a `LowQualityAnswer`, a `CorrectionExhausted`, a
  bug...): no answer reached the judge;
- `unavailable`: the judge could not judge (an outage, an unreadable reply, a verdict
  `unjudged`);
- `inconclusive`: the judge said the evidence could not support a verdict, or (with
  `--repeat`) its verdicts split evenly.
"""

RunKind = Literal["eval", "calibrate"]
RunStatus = Literal["running", "complete", "incomplete"]


@dataclass(frozen=True)
class RunInfo:
    """One stored run.

    Attributes:
        id: The run's number in this store.
        kind: `eval` or `calibrate`.
        status: `complete`; `incomplete` (interrupted, stopped by an error, or its process
            died); `running` (its process is still at it).
        dataset: The golden or labelled file, as an absolute path.
        dataset_sha256: The file's SHA-256 when the run started.
        target: The answer function (`module:function`), for `eval`.
        judge: The judge (`module:object`), or None when the file's columns were the checks.
        options: The options the run was made with (concurrency, repeat, ...).
        fingerprint: What a re-run must match to resume this run.
        version: The refinekit version that made the run.
        started_at: When the run started (Unix time).
        finished_at: When it last stopped, or None while running.
        summary: The run's figures, filled in when it stops.
    """

    id: int
    kind: RunKind
    status: RunStatus
    dataset: str
    dataset_sha256: str
    target: str | None
    judge: str | None
    options: dict[str, Any]
    fingerprint: str
    version: str
    started_at: float
    finished_at: float | None
    summary: dict[str, Any]


@dataclass(frozen=True)
class CaseRecord:
    """One case of a run: the row, the answer, the verdicts, the cost.

    Attributes:
        key: The row's content key (a row edited is a new case).
        position: The row's number in the file, from 1.
        question: The question (or the row's first value when there is no question column).
        row: The whole row.
        outcome: See `Outcome`.
        answer: The answer as judged, or None when the function raised.
        error: The error's type and message (redacted) for `raised` and `unavailable`.
        feedback: The verdict's feedback (the first failing judgement's with `--repeat`).
        score: The verdict's score, when it has one.
        probability: The judge's probability that the answer passes, when it gives one.
        label: The human label (`pass`/`fail`) of a calibration case.
        verdicts: Every verdict given to this answer, as JSON-ready dicts.
        passes: How many of those verdicts passed.
        judgements: How many verdicts were given (the `--repeat` count, when all came back).
        flipped: Whether the verdicts on this one answer disagreed.
        attempts: Attempts `@retry_on_low_quality` made inside the answer function (1 when
            the function is not decorated).
        corrections: Corrections `@self_correct` spent inside the answer function.
        answer_usage: The answering model's calls and tokens, as refinekit saw them.
        answer_judge_usage: Calls and tokens of judges inside the answer function.
        judge_usage: Calls and tokens of the run's own judge.
        answer_seconds: Wall time of the answer function.
        judge_seconds: Wall time of judging (all repeats).
    """

    key: str
    position: int
    question: str
    row: dict[str, Any]
    outcome: Outcome
    answer: str | None = None
    error: str | None = None
    feedback: str = ""
    score: float | None = None
    probability: float | None = None
    label: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    passes: int = 0
    judgements: int = 0
    flipped: bool = False
    attempts: int = 1
    corrections: int = 0
    answer_usage: Usage = field(default_factory=Usage)
    answer_judge_usage: Usage = field(default_factory=Usage)
    judge_usage: Usage = field(default_factory=Usage)
    answer_seconds: float = 0.0
    judge_seconds: float = 0.0

    @property
    def criteria(self) -> list[dict[str, Any]]:
        """The per-criterion results of the first verdict (empty when it has none)."""
        if not self.verdicts:
            return []
        criteria = self.verdicts[0].get("criteria") or []
        return [c for c in criteria if isinstance(c, dict)]


_DDL = """
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

_ROLES = ("answer", "answer_judge", "judge")


def _storable(text: str) -> str:
    """Text SQLite can hold: a lone UTF-16 surrogate (from a model or a file) becomes `?`."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _dumps(value: Any) -> str:
    return _storable(json.dumps(value, ensure_ascii=False, default=str))


class RunStore:
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
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise RunStoreError(
                    f"the run store {self.path} was written by a newer refinekit (schema "
                    f"{version}, this one reads {_SCHEMA_VERSION}); upgrade refinekit or use "
                    "another --db"
                )
            self._db.executescript(_DDL)
            self._db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise RunStoreError(
                f"{self.path} is not a refinekit run store ({e}); use another --db"
            ) from None

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> RunStore:
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
