"""Starting a run, or resuming the newest unfinished run of the same command."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import UsageProblem
from ._cases import Case
from ._golden import file_sha256
from ._options import RETRYABLE
from ._plans import RunPlan
from ._store import CaseRecord, RunInfo, RunStore

__all__ = ["Started", "fingerprint", "start"]


def fingerprint(*parts: Any) -> str:
    """What a re-run must match to resume a stored run."""
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


@dataclass
class Started:
    """A run about to go: the stored run, the cases still to do, what was resumed.

    Attributes:
        resuming: Whether `run` is an unfinished run resumed (else a new one).
        joined: Whether `run` was running on other workers, and this one joined them.
        resumed: Stored cases kept as they are (not run again).
        dropped: Stored cases no longer in the file, removed from the run.
        retried: Stored cases run again (`--retry`), by their stored outcome.
        earlier: The stored records of cases that may be run again: their model calls and
            tokens are added to the new record's, so the run's spend stays true.
        retried_before: Cases earlier sessions of this run had already run again.
    """

    run: RunInfo
    todo: list[Case]
    resuming: bool = False
    joined: bool = False
    resumed: int = 0
    dropped: int = 0
    retried: dict[str, int] = field(default_factory=dict)
    earlier: dict[str, CaseRecord] = field(default_factory=dict)
    retried_before: int = 0


def _named(store: RunStore, plan: RunPlan, run_id: int) -> RunInfo:
    """The run `run_id`, when it is a run of this plan that did not complete."""
    run = store.run(run_id)
    mismatch = [
        name
        for name, stored, given in (
            ("kind", run.kind, plan.kind),
            ("target", run.target, plan.target_name),
            ("judge", run.judge, plan.judge_name),
            ("repeat", run.options.get("repeat", 1), plan.repeat),
            ("trials", run.options.get("trials", 1), plan.trials),
        )
        if stored != given
    ]
    if mismatch:
        raise UsageProblem(
            f"run {run_id} was made with another {', '.join(mismatch)}; give the same "
            "command it was started with"
        )
    if run.status == "complete":
        raise UsageProblem(f"run {run_id} is complete; nothing is left to run in it")
    return run


def start(store: RunStore, plan: RunPlan, *, version: str, worker: str) -> Started:
    """Join the run other workers are running, resume an unfinished one, or start one.

    The run is of the same command (or the options' `run_id`'s; with `resume=False` a new
    one); `worker` enters it.

    On resume the stored cases are not run again, except those whose outcome is in
    `plan.retry`: they are run again and their new record replaces the old one. A run that
    other workers are running is joined as it is (`plan.retry` applies when a run is
    resumed, not joined). `run_id` names the run to join or resume (from another machine,
    where the data file's path differs); its file must be the same.

    Raises:
        UsageProblem: `run_id` names a run of another command, a complete run, or a run over
            another version of the data file.
    """
    sha = file_sha256(plan.dataset)
    # trials join the fingerprint only when asked for: the runs of before keep theirs
    trials = (plan.trials,) if plan.trials > 1 else ()
    # a cascade judging with a stored fit (`--calibration`) is another judge for each fit: a
    # run is never resumed under other thresholds than its first verdicts had
    fit = plan.cascade_fit
    fitted = () if fit is None else (f"cascade fit {list(fit.thresholds)}",)
    key = fingerprint(
        plan.kind,
        str(plan.dataset.resolve()),
        plan.target_name,
        plan.judge_name,
        plan.repeat,
        *trials,
        *fitted,
    )
    cases, run_id = plan.cases, plan.options.run_id
    keys = {c.key for c in cases}
    with store.locked():  # one process at a time decides, so two never start the same run
        if run_id is not None:
            previous: RunInfo | None = _named(store, plan, run_id)
        else:
            previous = store.unfinished(key) if plan.options.resume else None
        if previous is not None and previous.status == "running":
            if previous.dataset_sha256 != sha:
                raise UsageProblem(
                    f"run {previous.id} is running over another version of {plan.dataset} "
                    "(its SHA-256 differs): give every worker the same file"
                )
            store.join(previous.id, worker)
            store.update_options(previous.id, plan.priced_options())
            stored = store.case_keys(previous.id)
            return Started(
                store.run(previous.id),
                [c for c in cases if c.key not in stored],
                joined=True,
                resumed=len(stored & keys),
                earlier={r.key: r for r in store.cases(previous.id, outcomes=RETRYABLE)},
            )
        if previous is not None:
            started = _resume(store, plan, cases, previous, sha)
        else:
            run = store.start_run(
                kind=plan.kind,
                dataset=plan.dataset,
                dataset_sha256=sha,
                target=plan.target_name,
                judge=plan.judge_name,
                options={"concurrency": plan.options.concurrency, "repeat": plan.repeat}
                | ({"trials": plan.trials} if plan.trials > 1 else {})
                | plan.priced_options(),
                fingerprint=key,
                version=version,
            )
            started = Started(run, list(cases))
        store.join(started.run.id, worker)
        store.queue(started.run.id, ((c.key, c.position) for c in started.todo))
        started.run = store.run(started.run.id)
        return started


def _resume(
    store: RunStore, plan: RunPlan, cases: list[Case], previous: RunInfo, sha: str
) -> Started:
    store.resume(previous.id, sha)
    store.update_options(previous.id, plan.priced_options())
    run = store.run(previous.id)
    keys = {c.key for c in cases}
    stored = store.case_keys(run.id)
    dropped = stored - keys
    if dropped:
        store.drop_cases(run.id, dropped)
    earlier = (
        {r.key: r for r in store.cases(run.id, outcomes=sorted(plan.retry)) if r.key in keys}
        if plan.retry
        else {}
    )
    retried: dict[str, int] = {}
    for record in earlier.values():
        retried[record.outcome] = retried.get(record.outcome, 0) + 1
    waiting = store.answered_keys(run.id)  # answered, waiting for verdicts (`--batch`)
    todo = [c for c in cases if (c.key not in stored or c.key in earlier) and c.key not in waiting]
    done_before = previous.summary.get("retried", 0)
    return Started(
        run,
        todo,
        resuming=True,
        resumed=len(stored & keys) - len(earlier),
        dropped=len(dropped),
        retried=retried,
        earlier=earlier,
        retried_before=done_before if isinstance(done_before, int) else 0,
    )
