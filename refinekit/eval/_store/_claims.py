"""Workers and their claims: several processes (or machines) answering one run's cases.

Each worker holds a lease on the run (`workers`), renewed every third of `LEASE_SECONDS`;
the cases still to answer are the run's `claims`, each held by at most one live worker. A
claim is taken with the database's row locks (PostgreSQL's `FOR UPDATE SKIP LOCKED`; SQLite's
write lock), and a gone worker's claims are freed before anyone claims.

Under a spend cap (`--max-cost`) a claim carries its case's reservation (`claim_within`):
the claims of a run are taken one at a time (its row locked), and one is refused when the
run's stored spend, what every case in flight reserved and this case's estimate would pass
the cap. A reservation ends with its claim: settled when the case is stored (its cost then
counts instead, in the same transaction), released when its worker leaves or is gone.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from ._records import CappedClaim
from ._sqlbase import SQLBase

__all__ = ["HOST", "LEASE_SECONDS", "Claims", "alive", "new_worker"]

LEASE_SECONDS = 30.0
"""How long a worker's claim on its cases lasts without a heartbeat (it renews every third of it).

A worker that stops renewing (its machine died, its network went) loses its claims when the
lease expires, and another worker takes them over. A worker on the same machine whose process
is gone loses them at once."""

HOST = socket.gethostname()


def new_worker() -> str:
    """A worker id, unique across machines: `host:pid:random`."""
    return f"{HOST}:{os.getpid()}:{os.urandom(3).hex()}"


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


class Claims(SQLBase):
    """A run's workers and the cases they claim, over a store's hooks."""

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
            "UPDATE claims SET worker = NULL, reserved = NULL WHERE run_id = ? AND worker = ?",
            (run_id, worker),
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
            self._free_gone(run_id, worker)
            return self._take(run_id, worker, limit, None)

    def claim_within(self, run_id: int, worker: str, max_cost: float) -> CappedClaim:
        """Claim the run's next case if its expected cost fits under `max_cost`, reserving it.

        The run's claims under a cap are taken one at a time (the run's row is locked), so
        what this one reads stays true until it is made. The case's estimate is the largest
        cost of a stored case of the run (see `CappedClaim.estimate`); the claim is refused
        when the stored spend, plus what the cases in flight reserved (a case claimed without
        a reservation counts at the estimate), plus the estimate would pass `max_cost`.
        Until a stored case of the run has cost something the estimate is unknown: a case is
        claimed only when none is in flight, so the run's first case runs alone (and the
        next, when it cost nothing: it raised before any model call). After that, no more
        cases are in flight than the run has priced cases stored (1, 2, 4, ... as they come
        in): an estimate from few cases is likelier to be low, and fewer cases lean on it.
        Gone workers are taken out first, as `claim` does, releasing their reservations.
        """
        with self._transaction():
            self._one(f"SELECT id FROM runs WHERE id = ?{self._FOR_CLAIM}", (run_id,))
            self._free_gone(run_id, worker)
            # the stored costs and the reservations in one statement, so as of one moment
            # (PostgreSQL's READ COMMITTED gives each statement its own): a case stored in
            # between would otherwise be counted in neither
            row = self._one(
                f"SELECT c.priced, c.total, c.largest, f.n, f.counted, f.reserved FROM "
                f"({self._costs_query()}) AS c, "
                "(SELECT count(*) AS n, count(reserved) AS counted, "
                "coalesce(sum(reserved), 0) AS reserved FROM claims "
                "WHERE run_id = ? AND worker IS NOT NULL) AS f",
                (run_id, run_id),
            )
            assert row is not None
            priced, spent, largest = int(row["priced"]), float(row["total"]), row["largest"]
            estimate = float(largest) if largest > 0 else None
            in_flight = int(row["n"])
            reserved = float(row["reserved"]) + (in_flight - int(row["counted"])) * (
                estimate or 0.0
            )
            if estimate is None:
                fits = in_flight == 0
            else:  # (a hair of tolerance: ten cases of 0.01 fit in 0.1, whatever the sum's bits)
                fits = in_flight < priced and spent + reserved + estimate <= max_cost * (1 + 1e-9)
            keys = self._take(run_id, worker, 1, estimate) if fits else []
        return CappedClaim(keys, fits, spent, priced, estimate, reserved, in_flight)

    def _free_gone(self, run_id: int, worker: str) -> None:
        """Inside a claim's transaction: take the run's gone workers out, freeing their claims."""
        now = self._now()
        gone = [
            r["worker"]
            for r in self._all("SELECT * FROM workers WHERE run_id = ?", (run_id,))
            if r["worker"] != worker and self._gone(r, now)
        ]
        for other in gone:  # its claims are free again
            self._forget(run_id, other)

    def _take(self, run_id: int, worker: str, limit: int, reserve: float | None) -> list[str]:
        """Inside a claim's transaction: up to `limit` free cases for `worker`.

        Each claim reserves `reserve` (None: nothing).
        """
        # (a plain condition on the row locked: PostgreSQL re-checks it on the row's newest
        # version when another worker claimed it meanwhile; a join's other side it does not)
        rows = self._all(
            "SELECT key FROM claims WHERE run_id = ? AND worker IS NULL "
            f"ORDER BY position, key LIMIT ?{self._SKIP_LOCKED}",
            (run_id, limit),
        )
        keys = [str(r["key"]) for r in rows]
        self._many(
            "UPDATE claims SET worker = ?, reserved = ? WHERE run_id = ? AND key = ?",
            ((worker, reserve, run_id, key) for key in keys),
        )
        return keys

    @staticmethod
    def _cost_of(part: str) -> str:
        """SQL for a number in a case's `cost` JSON (0 when it is absent)."""
        return f"coalesce(json_extract(cost, '$.{part}'), 0)"

    def _costs_query(self) -> str:
        """SQL of a run's stored cases with a cost (one parameter: the run).

        How many (`priced`), their sum (`total`) and the largest (`largest`); 0 without any.
        """
        # a case stored before schema 4 has no total_cost: its cost JSON is read (COALESCE
        # reads it only then)
        parts = " + ".join(self._cost_of(part) for part in ("answer", "answer_judge", "judge"))
        cost = f"coalesce(total_cost, {parts})"
        # a case answered and waiting for its verdict (`--batch`) counts with its answer's cost
        return (
            "SELECT count(*) AS priced, coalesce(sum(c), 0) AS total, "
            "coalesce(max(c), 0) AS largest FROM ("
            f"SELECT run_id, {cost} AS c FROM cases "
            "WHERE total_cost IS NOT NULL OR cost <> '{}' "
            "UNION ALL SELECT run_id, total_cost AS c FROM answered "
            "WHERE total_cost IS NOT NULL) AS priced_cases WHERE run_id = ?"
        )

    def _costs(self, run_id: int) -> tuple[int, float]:
        """How many of a run's stored cases have a cost, and what they cost in all.

        Summed by the database.
        """
        row = self._one(self._costs_query(), (run_id,))
        return (0, 0.0) if row is None else (int(row["priced"]), float(row["total"]))

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
