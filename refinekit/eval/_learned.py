"""The learned start of an escalation ladder (`Escalation(start="learned")`).

Where a call of a function with `start="learned"` starts its ladder: past a cheap tier whose
measured success rate for this function, in the run store, makes it not worth its cost.

The rule. For each tier i below the last, from the stored cases of this function (eval runs
whose target is the function, each case's tiers the ladder's tiers in order) in which tier i
was called: n_i such cases, s_i of them answered at tier i (the call stopped there), c_i the
mean of what tier i's own calls took per case, and C_i the mean of what the tiers after it
took in the cases it did not answer. Trying tier i costs c_i always and saves C_i when it
answers: with a success rate p it is worth trying when p * C_i > c_i. Tier i is skipped when
n_i >= `MIN_CASES` and the 95% Wilson upper bound of s_i / n_i is below c_i / C_i, so a tier
is skipped only when even its best plausible success rate does not pay for it. What a tier
takes is its cost when every one of its cases (and those after it) was priced (`--prices`),
else its answer tokens. The ladder starts at the first tier not skipped, counting from the
first (the last tier is never skipped); a tier never failed (no C_i) is never skipped.

A skipped tier is no longer called, so its figures stay as they were stored: run the eval
with `start="first"` (the default) to measure it again.

The store is read once per function and ladder for `TTL_SECONDS` in a process (a call then
starts where the last read said). A store that cannot be read (a broken file, a server that is
down, a schema from a newer refinekit) starts the ladder at its first tier, with one warning
per store and process; a store that does not exist yet has nothing to learn from, and starts
it there silently.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.redact import redact
from .._core.tiers import Escalation
from ._stats import wilson_interval
from ._store import StoreURL, open_store, store_location

__all__ = ["MIN_CASES", "TTL_SECONDS", "TierRecord", "forget", "learned_start", "start_index"]

MIN_CASES = 20
"""The fewest stored cases in which a tier was called before it may be skipped."""

TTL_SECONDS = 300.0
"""How long a process keeps what it read of the store for one function's ladder."""

_CONFIDENCE = 0.95

_cache: dict[tuple[str, tuple[str, ...], str], tuple[float, int]] = {}
_warned: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class TierRecord:
    """A tier's measured figures for one function (what the rule weighs).

    Attributes:
        name: The tier's name.
        tried: n: the stored cases in which it was called.
        answered: s: of those, the cases it answered (the call stopped there).
        cost: c: the mean of what its own calls took per case (cost, or tokens).
        after: C: the mean of what the tiers after it took in the cases it did not answer;
            None when it answered every case.
    """

    name: str
    tried: int
    answered: int
    cost: float
    after: float | None

    @property
    def skipped(self) -> bool:
        """Whether the rule skips this tier (see the module's docstring)."""
        if self.tried < MIN_CASES or self.after is None or self.after <= 0:
            return False
        _, upper = wilson_interval(self.answered, self.tried, _CONFIDENCE)
        return upper < self.cost / self.after


def start_index(records: Sequence[TierRecord]) -> int:
    """The tier to start at: the first not skipped, the last never skipped."""
    start = 0
    while start < len(records) - 1 and records[start].skipped:
        start += 1
    return start


def _tried(tier: Mapping[str, Any]) -> bool:
    return tier.get("ended") not in ("skipped", "unaffordable")


def tier_records(
    names: Sequence[str], ladders: Iterable[Sequence[Mapping[str, Any]]]
) -> list[TierRecord]:
    """Each tier's figures from stored cases' tiers (`CaseRecord.tiers`) of this ladder.

    Only cases whose tiers are the ladder's, in order (a prefix of them: the call stopped at
    the one that answered), count.
    """
    cases = [
        list(tiers)
        for tiers in ladders
        if tiers and [t.get("name") for t in tiers] == list(names[: len(tiers)])
    ]
    priced = all(t.get("cost") is not None for tiers in cases for t in tiers if _tried(t))

    def took(tier: Mapping[str, Any]) -> float:
        if not _tried(tier):
            return 0.0
        if priced:
            return float(tier["cost"])
        return float(int(tier.get("prompt_tokens", 0)) + int(tier.get("completion_tokens", 0)))

    records = []
    for i, name in enumerate(names):
        reached = [tiers for tiers in cases if len(tiers) > i and _tried(tiers[i])]
        answered = [tiers for tiers in reached if tiers[i].get("ended") == "answered"]
        failed = [tiers for tiers in reached if tiers[i].get("ended") != "answered"]
        records.append(
            TierRecord(
                name=name,
                tried=len(reached),
                answered=len(answered),
                cost=sum(took(tiers[i]) for tiers in reached) / len(reached) if reached else 0.0,
                after=(
                    sum(sum(took(t) for t in tiers[i + 1 :]) for tiers in failed) / len(failed)
                    if failed
                    else None
                ),
            )
        )
    return records


def _stored_ladders(where: Path | StoreURL, function: str) -> list[list[dict[str, Any]]]:
    """Every stored case's tiers, of the eval runs whose target is `function`."""
    with open_store(where) as store:
        ladders = []
        for run in store.runs(kind="eval"):
            if (run.target or "").rpartition(":")[2] != function:
                continue
            ladders += [case.tiers for case in store.cases(run.id) if case.tiers]
    return ladders


def _read(function: str, escalation: Escalation) -> int:
    where = store_location(escalation.db)
    if isinstance(where, Path) and not where.exists():
        return 0  # nothing stored yet: nothing to learn from
    names = [tier.name for tier in escalation.tiers]
    return start_index(tier_records(names, _stored_ladders(where, function)))


def learned_start(function: str, escalation: Escalation) -> int:
    """The tier index a call of `function` starts its ladder at (`start="learned"`).

    See the module's docstring for the rule. Never raises: a store that cannot be read
    starts at the first tier, with a warning once per store and process.

    Args:
        function: The decorated function's qualified name (an eval run's target is
            `module:function`).
        escalation: The function's ladder; its `db` names the run store (None: as
            `refinekit eval --db` defaults: `$REFINEKIT_DB`, else `.refinekit/runs.db`).

    Returns:
        The index of the first tier to call.
    """
    names = tuple(tier.name for tier in escalation.tiers)
    key = (function, names, escalation.db or "")
    now = time.monotonic()
    with _lock:
        cached = _cache.get(key)
    if cached is not None and now - cached[0] < TTL_SECONDS:
        return cached[1]
    try:
        start = _read(function, escalation)
    except Exception as error:
        start = 0
        shown = _shown(escalation.db)
        with _lock:
            first = shown not in _warned
            _warned.add(shown)
        if first:
            warnings.warn(
                f"refinekit: the learned start of {function} could not read the run store "
                f"{shown} ({redact(str(error)) or type(error).__name__}); its calls start at "
                "the first tier",
                RuntimeWarning,
                stacklevel=2,
            )
    with _lock:
        _cache[key] = (now, start)
    return start


def _shown(db: str | None) -> str:
    try:
        return str(store_location(db))
    except Exception:
        return "given as db=" if db else "(the default)"


def forget() -> None:
    """Drop what this process read of run stores (the next call reads them again)."""
    with _lock:
        _cache.clear()
        _warned.clear()
