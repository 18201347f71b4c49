"""The run store's interface, and the records it keeps.

What the runner, resume, compare, calibrate, `refinekit runs` and the reports need of a store.

`RunStore` is the interface (a `typing.Protocol`); `open_store` (`_open`) opens the store a
`db` argument names. The SQLite file (`_sqlite.SQLiteStore`) is its first implementation.
Whatever implements it keeps the same rows with the same meaning: a run, its cases (each
committed as soon as it finishes), and each case's model calls and tokens by role; error text
redacted before it is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..._core.redact import safe_url
from ..._core.types import Usage
from ...checks import _NO_SOURCE

__all__ = [
    "CappedClaim",
    "CaseRecord",
    "StoreURL",
    "CaseOutcome",
    "RunInfo",
    "RunKind",
    "RunStatus",
    "RunStore",
]

CaseOutcome = Literal["passed", "failed", "raised", "unavailable", "inconclusive"]
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
        status: `complete`; `incomplete` (interrupted, stopped by an error, or its workers
            died); `running` (a worker is at it: its lease is live).
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
        outcome: See `CaseOutcome`.
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
        cost: What the case's model calls cost, with prices given: `answer`, `answer_judge`,
            `judge` (as the usages), and `extra` (the answer calls after the first: retries
            and corrections); empty without prices.
        judge_cache: With `--cache`: the run judge's requests answered from the judge cache
            (`hits`) and sent to the model (`misses`); empty without it.
        models: The models whose replies were counted: `answer` (the answer function's,
            as the replies name them) and `judge` (the run's judge's); what the
            self-preference warning compares. Empty for a case stored before schema 5.
        trials: With `trials` above 1, each trial of the case, in order: its `outcome`,
            `answer`, `passes`, `judgements`, `error` and `feedback`; the case's own fields
            are then its figures over the trials (see `refinekit.eval.EvalOptions.trials`).
            Empty otherwise.
        tier: With an escalating target (`escalate=`), the tier the call ended at: the one
            whose answer was returned, else the last one tried (the function raised); None
            for a target without a ladder, and for a case stored before schema 6.
        tiers: With an escalating target, what each tier did, in order, as JSON-ready dicts:
            `name`, `model`, `calls`, `answered`, `ended` (`"answered"`, `"exhausted"`,
            `"refused"`, `"error"`, `"skipped"`, `"unaffordable"`), `model_calls`,
            `prompt_tokens`, `completion_tokens` (its answer calls), `judge_tokens` (judges
            inside the function) and `cost` (with prices: its answer calls priced as its
            model, or None when they cannot be). With `trials` above 1, those of the trial
            the case shows. Empty otherwise.
    """

    key: str
    position: int
    question: str
    row: dict[str, Any]
    outcome: CaseOutcome
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
    cost: dict[str, float] = field(default_factory=dict)
    judge_cache: dict[str, int] = field(default_factory=dict)
    models: dict[str, list[str]] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    tier: str | None = None
    tiers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def criteria(self) -> list[dict[str, Any]]:
        """The per-criterion results of the first verdict (empty when it has none)."""
        if not self.verdicts:
            return []
        criteria = self.verdicts[0].get("criteria") or []
        return [c for c in criteria if isinstance(c, dict)]

    @property
    def lacks_context(self) -> bool:
        """Whether a check failed for want of a context document with a source.

        `checks.cites_source()` says so in its feedback when no document has a source,
        whether it is the run's judge (or part of it) or the answer function's own (its
        `LowQualityAnswer`): the answer function recorded no context and the row gave none.
        """
        texts: list[Any] = [self.feedback]
        for verdict in self.verdicts:
            texts.append(verdict.get("feedback"))
            texts += [
                c.get("feedback") for c in verdict.get("criteria") or () if isinstance(c, dict)
            ]
        return any(isinstance(text, str) and _NO_SOURCE in text for text in texts)


@dataclass(frozen=True)
class CappedClaim:
    """What a claim under a spend cap (`--max-cost`) found, and the case it got.

    Attributes:
        keys: The case claimed (its key), or none.
        fits: Whether one more case could start: its estimate fitted under the cap, and
            fewer cases were in flight than the run has priced cases stored (or, with no
            estimate, none); when not, nothing was claimed.
        spent: What the run's stored cases cost, every session's and worker's.
        priced: How many of the run's stored cases have a cost.
        estimate: What the case claimed reserves until it is stored: the largest cost of a
            stored case of the run (a case that costs more takes the run over the cap by
            its difference at most); None while no stored case of the run has cost
            anything, when a case is claimed only if none is in flight, so the first runs
            alone.
        reserved: What the run's cases in flight reserve, every worker's (this claim's not
            included; one claimed without a reservation counts at the estimate).
        in_flight: How many of the run's cases are in flight (claimed by a live worker),
            this claim's not included.
    """

    keys: list[str]
    fits: bool
    spent: float
    priced: int
    estimate: float | None
    reserved: float
    in_flight: int


class RunStore(Protocol):
    """A run store: where runs, their cases and their calls are kept; a context manager.

    Every method commits what it writes before it returns (a killed process loses nothing
    it stored).
    """

    where: str
    """The store as messages name it: the SQLite file, or the URL without its credentials."""

    def close(self) -> None:
        """Close the store."""

    def __enter__(self) -> RunStore: ...

    def __exit__(self, *exc_info: object) -> None: ...

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
        ...

    def unfinished(self, fingerprint: str) -> RunInfo | None:
        """The newest run with this fingerprint, unless it completed; else None."""
        ...

    def locked(self) -> AbstractContextManager[None]:
        """A transaction holding the store's run lock.

        One process at a time starts, resumes or joins a run.
        """
        ...

    def resume(self, run_id: int, dataset_sha256: str) -> RunInfo:
        """Mark a stored run `running` again, with the data file's current hash."""
        ...

    def update_options(self, run_id: int, options: Mapping[str, Any]) -> None:
        """Set some of a run's options, keeping the rest."""
        ...

    def finish_run(self, run_id: int, status: RunStatus, summary: Mapping[str, Any]) -> None:
        """Record how a run stopped, and its figures."""
        ...

    def run(self, run_id: int) -> RunInfo:
        """One run; `RunStoreError` when no run has this id."""
        ...

    def runs(
        self, *, kind: RunKind | None = None, dataset: str | Path | None = None
    ) -> list[RunInfo]:
        """The stored runs, oldest first, optionally of one kind and one data file."""
        ...

    def previous(self, run: RunInfo) -> RunInfo | None:
        """The newest complete run of the same kind, data file and judge before `run`."""
        ...

    # workers and their claims: several processes (or machines) answering one run

    def join(self, run_id: int, worker: str) -> None:
        """Enter a worker of the run, its lease starting now."""
        ...

    def heartbeat(self, run_id: int, worker: str) -> None:
        """Renew the worker's lease."""
        ...

    def leave(self, run_id: int, worker: str) -> int:
        """Take the worker out, releasing its claims; how many workers are still at the run."""
        ...

    def queue(self, run_id: int, cases: Iterable[tuple[str, int]]) -> None:
        """Make `(key, position)` the run's cases still to answer."""
        ...

    def claim(self, run_id: int, worker: str, limit: int = 1) -> list[str]:
        """Claim up to `limit` free cases still to answer (each goes to one worker only)."""
        ...

    def claim_within(self, run_id: int, worker: str, max_cost: float) -> CappedClaim:
        """Claim the next free case if its expected cost fits under `max_cost`, reserving it.

        Atomically across workers: the stored spend, what every case in flight reserved and
        this case's estimate must fit; the reservation lasts as long as the claim.
        """
        ...

    def pending(self, run_id: int, *, besides: str | None = None) -> int:
        """How many of the run's cases are still to answer, but those `besides` holds."""
        ...

    def judge_cache(self) -> Any:
        """The judge cache kept in this store, for `refinekit eval --cache`.

        A `refinekit.judges.JudgeCache` with `hits`, `misses` and `close()`.
        """
        ...

    # cases

    def save_case(self, run_id: int, case: CaseRecord, *, worker: str | None = None) -> bool:
        """Store a finished case and its calls in one transaction (replacing an older copy).

        With `worker`, only while that worker's claim on it holds. Whether it was stored.
        """
        ...

    def save_answered(self, run_id: int, deferred: Any, *, worker: str) -> bool:
        """Keep an answered case waiting for its verdict (`--batch`), its claim done with.

        `deferred` is a `refinekit.eval._judging.Deferred`. Only while `worker`'s claim on
        it holds; whether it was kept.
        """
        ...

    def answered_keys(self, run_id: int) -> set[str]:
        """The keys of the run's cases answered and waiting for verdicts (`--batch`)."""
        ...

    def drop_cases(self, run_id: int, keys: set[str]) -> None:
        """Remove cases from a run (rows no longer in its data file, on resume)."""
        ...

    def spent(self, run_id: int) -> tuple[int, float]:
        """How many of a run's stored cases have a cost, and what they cost in all."""
        ...

    def case_keys(self, run_id: int) -> set[str]:
        """The keys of the cases a run has stored."""
        ...

    def cases(self, run_id: int, *, outcomes: Sequence[str] | None = None) -> list[CaseRecord]:
        """A run's cases, in file order; only those with one of `outcomes` when given."""
        ...


class StoreURL(str):
    """A PostgreSQL store's URL, as text without its credentials; it opens with them.

    What results and events carry as their `db`: printing, logging or formatting it shows
    `postgresql://host:port/database` (no user, password or query), and `open_store` opens it
    with the URL as it was given.
    """

    _url: str

    def __new__(cls, url: str) -> StoreURL:
        shown = super().__new__(cls, safe_url(url))
        shown._url = url
        return shown

    def __repr__(self) -> str:
        return f"StoreURL({str.__repr__(self)})"
