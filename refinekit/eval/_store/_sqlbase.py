"""A SQL database a run store is kept in: the hooks each database gives, and its schema.

`SQLBase` is what the SQLite and PostgreSQL stores' shared code stands on: rows of a query, a
statement run, a new run's id, a statement run once per row, a transaction, the store's run
lock and clock, and the SQL that differs between them (`_IS`, row locks). Its schema steps are
written once, in each dialect's words (`schema_steps`), and so are the version check and the
migration, over a few more hooks.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ..._core.errors import RunStoreError

__all__ = ["SQLBase", "schema_steps"]

_FIRST_STEP = """
{create} runs (
    id {identity},
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    dataset TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL,
    target TEXT,
    judge TEXT,
    options TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    version TEXT NOT NULL,
    started_at {real} NOT NULL,
    finished_at {real},
    pid INTEGER,
    summary TEXT NOT NULL DEFAULT '{{}}'
);
{index} runs_by_fingerprint ON runs (fingerprint, id);
{create} cases (
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    question TEXT NOT NULL,
    row TEXT NOT NULL,
    outcome TEXT NOT NULL,
    answer TEXT,
    error TEXT,
    feedback TEXT NOT NULL,
    score {real},
    probability {real},
    label TEXT,
    verdicts TEXT NOT NULL,
    passes INTEGER NOT NULL,
    judgements INTEGER NOT NULL,
    flipped INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    corrections INTEGER NOT NULL,
    answer_seconds {real} NOT NULL,
    judge_seconds {real} NOT NULL,
    finished_at {real} NOT NULL,
    PRIMARY KEY (run_id, key)
);
{create} calls (
    run_id {run_id} NOT NULL,
    key TEXT NOT NULL,
    role TEXT NOT NULL,
    model_calls INTEGER NOT NULL,
    prompt_tokens {tokens} NOT NULL,
    completion_tokens {tokens} NOT NULL,
    PRIMARY KEY (run_id, key, role),
    FOREIGN KEY (run_id, key) REFERENCES cases (run_id, key) ON DELETE CASCADE
)
"""
"""Version 1: runs, cases, calls; in each dialect's words (`schema_steps`)."""

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
    # 3: the judge cache (`refinekit.judges.SQLiteCache`'s and `PostgresCache`'s table), each
    # case's cost and hits. The table is the caches' own: a cache opened on the database before
    # it was a run store (or before this step) made it already, with its entries, and the store
    # takes it as it is (IF NOT EXISTS: every store reaches the same schema); one of that name
    # without the cache's columns is not a judge cache, and the step fails on it (the SELECT)
    """
CREATE TABLE IF NOT EXISTS refinekit_judge_cache (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    stored_at {real} NOT NULL
);
SELECT key, value, stored_at FROM refinekit_judge_cache WHERE 1 = 0;
ALTER TABLE cases ADD COLUMN cost TEXT NOT NULL DEFAULT '{{}}';
ALTER TABLE cases ADD COLUMN judge_cache TEXT NOT NULL DEFAULT '{{}}'
""",
    # 4: what a claimed case reserves of a `--max-cost` while it is in flight (NULL: nothing
    # reserved, a claim made without a cap or before any case of the run cost anything); a
    # case's cost in all, as a number the claims sum (NULL: unpriced, or stored before 4,
    # when its `cost` JSON is read)
    """
ALTER TABLE claims ADD COLUMN reserved {real};
ALTER TABLE cases ADD COLUMN total_cost {real}
""",
    # 5: the models that answered and judged each case (self-preference), and with
    # `--trials` each trial of the case (its answer, outcome and verdicts)
    """
ALTER TABLE cases ADD COLUMN models TEXT NOT NULL DEFAULT '{{}}';
ALTER TABLE cases ADD COLUMN trials TEXT NOT NULL DEFAULT '[]'
""",
    # 6: with an escalating target (`escalate=`), the tier each case ended at and what each
    # tier tried did (its calls, tokens, cost, and why it was left)
    """
ALTER TABLE cases ADD COLUMN tier TEXT;
ALTER TABLE cases ADD COLUMN tiers TEXT NOT NULL DEFAULT '[]'
""",
    # 7: judging through a provider's batch API (`--batch`): the cases answered and waiting
    # for their verdicts (the judge's request, the answer's record so far, its cost so far),
    # the batches submitted (a token of refinekit's, the provider's batch id once it gave
    # one, what they reserve of a `--max-cost`) and each batched judge request by its key
    # (its body as sent, then its reply or why not)
    """
CREATE TABLE answered (
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    request TEXT NOT NULL,
    record TEXT NOT NULL,
    total_cost {real},
    answered_at {real} NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE batch_submissions (
    token TEXT PRIMARY KEY,
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    worker TEXT NOT NULL,
    batch_id TEXT,
    state TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0,
    reserved {real},
    created_at {real} NOT NULL
);
CREATE TABLE batch_items (
    run_id {run_id} NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    token TEXT NOT NULL,
    body TEXT NOT NULL,
    result TEXT,
    error TEXT,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX batch_items_by_token ON batch_items (token)
""",
)


def schema_steps(
    *, create: str, index: str, identity: str, real: str, run_id: str, tokens: str
) -> tuple[tuple[str, ...], ...]:
    """A store's schema steps, in its dialect's words.

    `create` and `index` begin the first step's `CREATE TABLE` and `CREATE INDEX`
    statements, `identity` is the type of a run's id column (a new run takes the next),
    `real` a float column's type, `run_id` the type of a column holding a run's id, `tokens`
    a token count's.

    `steps[n - 1]` takes a store from version n - 1 to n (0: an empty database, or one holding
    only a judge cache's table). A change to the schema is a step appended to `_LATER_STEPS`,
    never an edit of an old step: a store is at the version of the steps it has had. (Step
    3's `IF NOT EXISTS` is the one kind of edit that keeps this: it ends at the same schema,
    from one more starting point.)
    """
    words = {"real": real, "run_id": run_id}
    first = _FIRST_STEP.format(
        create=create, index=index, identity=identity, tokens=tokens, **words
    )
    texts = (first, *(step.format(**words) for step in _LATER_STEPS))
    return tuple(
        tuple(statement.strip() for statement in text.split(";") if statement.strip())
        for text in texts
    )


class SQLBase:
    """A SQL database a store is kept in; subclasses connect and give the hooks."""

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

    _FOR_CLAIM = ""
    """What makes a SELECT of a run's row hold off every other claim under a spend cap until
    the transaction ends, without holding off the writes that only refer to the run (a case
    stored): PostgreSQL's `FOR NO KEY UPDATE`; SQLite's write transaction already holds the
    whole database."""

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
        """The judge cache kept in this store (see `_records.RunStore.judge_cache`)."""
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
