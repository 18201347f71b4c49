"""What the workflow commands print with: streams, safe text, a run's story and its progress.

Exit statuses: 0 done (and every gate held); 1 a gate failed (the pass rate's lower bound
under `--min-pass-rate`, or a significant regression against `--compare`); 2 a usage error
(nothing was run); 3 the run stopped early (the judge is misconfigured or raised a bug; the
finished cases are stored, and the same command resumes), a model without a price, or
`--max-cost` reached (resumable with a higher one); 4 the run is complete but no answer
was judged (every case raised an error other than a refused answer, or found the judge
unavailable): a failure of the setup, not a measurement; 130 interrupted (likewise
resumable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

from .._core.numbers import usd
from .._core.redact import redact
from ..eval import (
    BatchProgress,
    CalibrationResult,
    CaseFinished,
    CaseRecord,
    CostLimitReached,
    EvalResult,
    RunAborted,
    RunEvent,
    RunOptions,
    RunProgress,
    RunStarted,
    RunStopped,
    RunStoreError,
    UsageProblem,
    html_report,
)
from ._pipe import PipeSafe
from ._progress import ProgressDisplay
from ._text import REPORT_BESIDE_STORE, cases, clean, counted, pct

__all__ = [
    "EXIT_ABORTED",
    "EXIT_GATE",
    "EXIT_INTERRUPTED",
    "EXIT_SETUP",
    "EXIT_USAGE",
    "Io",
    "RunWatcher",
    "cases",
    "clean",
    "cost_line",
    "pct",
    "report_problem",
    "setup_failed",
    "streams",
    "write_report",
]

EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_ABORTED = 3
EXIT_SETUP = 4
EXIT_INTERRUPTED = 130


@dataclass
class Io:
    """Where a command prints: its output, and its errors."""

    out: TextIO
    err: TextIO

    def say(self, text: str = "") -> None:
        """Print a line of output."""
        print(text, file=self.out)

    def error(self, command: str, text: str) -> None:
        """Print `refinekit COMMAND: error: TEXT` to the error stream."""
        # an error may quote a server's or a model's text: no credential, no control character
        print(f"refinekit {command}: error: {clean(redact(text))}", file=self.err)


def streams(out: TextIO | None, err: TextIO | None) -> Io:
    """Where a command prints: standard output and error unless given.

    Once a stream's reader went away (`| head`) nothing more is written to it, without an
    error: the command's work goes on.
    """
    return Io(cast(TextIO, PipeSafe(out or sys.stdout)), cast(TextIO, PipeSafe(err or sys.stderr)))


class RunWatcher:
    """A run's story as it goes, told by its events: what is resumed, progress, a stop.

    Pass it as `on_event`; call `finished` when the run returns; when it raises instead,
    `stopped_early` or `interrupted` print the end of the story and give the exit status.
    """

    def __init__(self, io: Io, command: str, display: ProgressDisplay | None = None) -> None:
        self.io = io
        self.command = command
        self.display = display or ProgressDisplay(io.err, command)
        self.stopped: RunStopped | None = None
        self.batched = False  # the run waited for its judge's batches (`--batch`)
        self.no_context_told = False

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self._started(event)
            self.display.start(event.resumed, event.cases)
        elif isinstance(event, CaseFinished):
            self.display.update(event.done, event.total, event.cost, event.counts)
            if self.command == "eval" and not self.no_context_told and event.record.lacks_context:
                self.no_context_told = True
                self.display.note(
                    f"refinekit {self.command}: case #{event.record.position} failed "
                    "cites_source with no context document to cite: every case will, unless "
                    "the target calls refinekit.record_context(docs) or the golden file has a "
                    "context column (the summary says more)"
                )
        elif isinstance(event, RunProgress):
            self.display.update(event.done, event.total, event.cost)
        elif isinstance(event, BatchProgress):
            self.batched = self.batched or event.state != "answering"
            self.display.batch(event.state, event.done, event.total, event.batches)
        else:
            self.display.close()
            self.stopped = event

    def finished(self) -> None:
        """The run ended (or failed to start): the progress display goes."""
        self.display.close()

    def _started(self, event: RunStarted) -> None:
        io, run = self.io, event.run
        io.say(
            f"refinekit {self.command}: {event.dataset} ({cases(event.cases)}) -> run {run.id} "
            f"in {event.db}"
        )
        again = sum(event.retried.values())
        if event.joined:
            io.say(
                f"joining run {run.id}, which other workers are running: {event.resumed} of "
                f"{cases(event.cases)} already stored; the rest are shared out, each answered once"
            )
        elif event.resuming or again:
            io.say(
                f"resuming run {run.id}: {event.resumed + again} of {cases(event.cases)} already "
                "stored "
                + (
                    f"({event.resumed} not run again; --fresh starts over)"
                    if again
                    else "(not run again; --fresh starts over)"
                )
            )
        if again:
            which = ", ".join(f"{n} {outcome}" for outcome, n in sorted(event.retried.items()))
            io.say(
                f"  running again {cases(again)} that ended {which} (--retry); the new outcome "
                "replaces the stored one"
            )
        elif event.retry and event.resuming:
            io.say(f"  --retry: no stored case ended {' or '.join(sorted(event.retry))}")
        elif event.retry:
            io.say(
                "  --retry: no unfinished run of this command to resume (a complete run is never "
                "resumed): every case runs"
            )
        if event.dropped:
            io.say(
                f"  {counted(event.dropped, 'stored case')} "
                f"{'is' if event.dropped == 1 else 'are'} no longer in the file: dropped from "
                "the run"
            )

    def _incomplete(self, why: str, status: int, again: str = "again") -> int:
        self.io.error(self.command, why)
        stopped = self.stopped
        assert stopped is not None
        if stopped.run.status == "running":  # this worker left; others are still at it
            self.io.say(
                f"this worker left run {stopped.run.id}; other workers are still running it "
                f"({stopped.stored} of {cases(stopped.cases)} stored so far)."
            )
            return status
        self.io.say(
            f"run {stopped.run.id} is incomplete: {stopped.stored} of {cases(stopped.cases)} "
            f"stored. Run the same command {again} to finish it without paying again for those."
        )
        return status

    def stopped_early(self, error: RunAborted) -> int:
        """Say the run stopped early and is stored incomplete; exit status 3."""
        if isinstance(error, CostLimitReached):
            return self._incomplete(f"{error}", EXIT_ABORTED, "with a higher --max-cost")
        return self._incomplete(f"{error}", EXIT_ABORTED)

    def interrupted(self) -> int:
        """Say the run was interrupted and is stored incomplete; exit status 130."""
        if self.batched:
            self.io.say(
                "the judge's batches keep running at the provider (they are not cancelled): "
                "the same command polls them again and judges the answers with their replies"
            )
        return self._incomplete("interrupted", EXIT_INTERRUPTED)


def batch_line(summary: Mapping[str, Any]) -> str | None:
    """What a batched run's batches did, in one line; None for a run without `--batch`."""
    b = summary.get("batch")
    if not isinstance(b, dict):
        return None
    saved = b.get("saved")
    line = (
        f"batched: {counted(b['batches'], 'batch', 'batches')} at the provider, "
        f"{counted(b['items'], 'judge request')} in them"
    )
    if b["direct"]:
        line += f", {b['direct']} sent directly (their batch could not answer them)"
    if saved is not None:
        line += f"; the batch price saved {usd(saved)} against the list price"
    return line


def cost_line(what: str, cost: Mapping[str, Any], unit: str) -> str:
    """A run's cost in one line: its total and mean per case (a `Summary.cost` dict)."""
    unpriced = cost.get("unpriced") or 0
    return (
        f"{what}: {usd(cost['total'])} in all, {usd(cost['per_case'])} per {unit} "
        f"(mean over {cost['priced']} priced)"
        + (f"; {unpriced} stored without prices not counted" if unpriced else "")
    )


def setup_failed(
    io: Io, command: str, report: str | None, result: EvalResult | CalibrationResult, what: str
) -> int:
    """Say that no case reached a verdict (`what` happened), write the report; exit status 4."""
    io.error(command, _setup_failure(result.cases, what))
    if report is not None:
        write_report(io, command, report, result)
    return EXIT_SETUP


def _setup_failure(records: Sequence[CaseRecord], what: str) -> str:
    """The one line saying that no case reached a verdict, with the commonest error."""
    counts = Counter(r.outcome for r in records)
    how = " and ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    errors = Counter(r.error or r.outcome for r in records)
    error, times = errors.most_common(1)[0]
    often = "every time" if times == len(records) else f"{times} times"
    return (
        f"{what}: {how} of {cases(len(records))} (the commonest error, {often}: "
        f"{clean(error, 200)}); a failure of the setup (an endpoint, a key, the function), "
        "not a measurement: fix it and run again"
    )


R = TypeVar("R", EvalResult, CalibrationResult)


def watched_run(
    io: Io, command: str, args: Any, run: Callable[..., R], options: type[RunOptions]
) -> R | int:
    """`run` (`refinekit.eval.run` or `calibrate`) of the parsed `args`, told as it goes.

    The arguments are the fields of `options` (the parser's destinations are its field
    names: `--fresh` is `resume=False`, `--address` is `ray_address`, `--run` is `run_id`;
    a field no argument holds keeps its default), and the run's `on_event` is the watcher
    that tells its story. The report's path is checked first (nothing is paid for a report
    that cannot be kept); a usage or store problem is exit 2; a run that stopped early or
    was interrupted ends its story and gives its status.

    Returns:
        The run's result, or the exit status when there is none.
    """
    problem = report_problem(args.report)
    if problem is not None:
        io.error(command, problem)
        return EXIT_USAGE
    fields = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(options)
        if hasattr(args, field.name)
    }
    watcher = RunWatcher(io, command)
    try:
        result = run(**fields, on_event=watcher)
    except (UsageProblem, RunStoreError) as e:
        watcher.finished()
        io.error(command, str(e))
        return EXIT_USAGE
    except RunAborted as e:
        watcher.finished()
        return watcher.stopped_early(e)
    except KeyboardInterrupt:
        watcher.finished()
        if watcher.stopped is None:  # while loading, before a run exists to keep
            raise
        return watcher.interrupted()
    except BaseException:
        watcher.finished()
        raise
    watcher.finished()
    return result


def report_problem(path: str | None) -> str | None:
    """Why `--report PATH` could not be written, found before the run is paid for; or None.

    The file is really created (with the folders it needs), then removed again with every
    folder made for it: a permission check alone passes a path no file can be made at (a
    read-only or virtual file system such as /proc). A file that exists is opened for
    appending, and left as it is. `--report` alone (or `--report html`) goes next to the run
    store, which the run itself checks.
    """
    if path is None or path == REPORT_BESIDE_STORE:
        return None
    target = Path(path)
    if target.is_dir():
        example = target / "report.html"
        return f"--report {path}: is a folder; give a file name (e.g. {example}); nothing was run"
    folder = target.parent
    made = folder  # the nearest folder that exists: the missing ones are made in it
    while not made.exists() and made != made.parent:
        made = made.parent
    if not made.is_dir():
        return f"--report {path}: {made} is a file, not a folder; nothing was run"
    if not os.access(made, os.W_OK | os.X_OK):
        what = "the folder" if made == folder else "cannot make its folder: the folder"
        return f"--report {path}: {what} {made} is not writable; nothing was run"
    if target.exists() and not os.access(target, os.W_OK):
        return f"--report {path}: the file exists and is not writable; nothing was run"
    try:
        _probe(target)
    except OSError as e:
        return f"--report {path}: cannot create the file ({e.strerror or e}); nothing was run"
    return None


def _probe(target: Path) -> None:
    """Open `target` for writing as the report will, leaving no trace of the attempt."""
    missing = []
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        if target.exists():
            os.close(os.open(target, os.O_WRONLY | os.O_APPEND))
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            target.unlink()
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()


def report_file(path: str, result: EvalResult | CalibrationResult) -> str:
    """Where the report goes: `path`, or `report-run-ID.html` next to the run store.

    Next to its file; in the current folder for a PostgreSQL store.
    """
    if path != REPORT_BESIDE_STORE:
        return path
    folder = result.db.parent if isinstance(result.db, Path) else Path()
    return str(folder / f"report-run-{result.run.id}.html")


def write_report(io: Io, command: str, path: str, result: EvalResult | CalibrationResult) -> bool:
    """Write the run's HTML report to `path` and say so; say why not when it cannot.

    `path` is `--report`'s value: `html` (or `--report` alone) names the file after the run,
    next to the run store.
    """
    path = report_file(path, result)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as --db's folders are
        html_report(result, path)
    except OSError as e:
        io.error(command, f"cannot write the report to {path}: {e.strerror or e}")
        return False
    io.say(f"report: {path}")
    return True
