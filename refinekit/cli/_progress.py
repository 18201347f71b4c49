"""A run's progress on standard error: a live bar on a terminal, a plain line now and then.

On a terminal (standard error is one, and `TERM` is not `dumb`) the progress is a `rich`
live display, redrawn in place and gone when the run ends:

    eval ━━━━━━━━╸━━━━━━━━━━━ 121/300 0:01:12 1.7 cases/s · 0:01:45 left · cost 0.42 ·
    passed 100, failed 21   (one line, as wide as the terminal)

Elsewhere (a pipe, a CI log) it is a plain line every `PLAIN_SECONDS` while cases finish,
and one more when the run ends, when any was written:

    refinekit eval: 121/300 cases (40%), 0:01:12 elapsed, 1.7 cases/s, 0:01:45 left,
    cost 0.42 so far; passed 100, failed 21   (one line)

The count is the run's stored cases, every worker's (other processes, Ray tasks) and the
resumed ones; the rate and what is left are over the cases stored since this command
started; the cost (with `--prices`, in the prices' currency) is every worker's; the outcomes
are this process's cases. Nothing of it goes to standard output, whose summary it never touches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from .._core.numbers import usd
from ._text import clean

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["PLAIN_SECONDS", "ProgressDisplay", "batch_text", "duration", "figures"]

PLAIN_SECONDS = 10.0
"""How often, at most, the plain progress line is written when standard error is no terminal."""


def duration(seconds: float) -> str:
    """Seconds as `H:MM:SS` (as rich shows elapsed time)."""
    whole = max(0, int(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02}:{whole % 60:02}"


def figures(
    done: int, total: int, started_done: int, elapsed: float
) -> tuple[str | None, str | None]:
    """The rate and what is left, over the cases stored since the command started.

    The rate is `1.7 cases/s`, or `12.5 s/case` when slower than one a second; what is left
    `0:01:45 left` (if the rate holds). None for each while nothing is known yet.
    """
    here = done - started_done
    if here <= 0 or elapsed <= 0:
        return None, None
    rate = here / elapsed
    shown = f"{rate:.1f} cases/s" if rate >= 0.95 else f"{1 / rate:.1f} s/case"
    left = f"{duration((total - done) / rate)} left" if done < total else None
    return shown, left


_BATCH_STATES = {
    "validating": "validating",
    "in_progress": "in progress",
    "finalizing": "finalizing",
    "ended": "ended",
    "failed": "failed",
    "expired": "expired",
    "cancelling": "cancelling",
    "cancelled": "cancelled",
}


def batch_text(state: str, done: int, total: int, batches: int) -> str:
    """The judge's batches in words: `judge batch in progress, 12 of 40 requests done`.

    While the run answers its cases (`answering`): `answering first, 12 of 40 cases`.
    """
    if state == "answering":
        return f"answering first, {done} of {total} cases (judged in batches next)"
    what = "judge batch" if batches == 1 else f"{batches} judge batches"
    words = _BATCH_STATES.get(state, state)
    if state == "in_progress":
        return f"{what} {words}, {done} of {total} requests done"
    return f"{what} {words} ({total} requests)"


def _outcomes(counts: Mapping[str, int]) -> str:
    order = ("passed", "failed", "raised", "unavailable", "inconclusive")
    return ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))


def _is_terminal(stream: TextIO) -> bool:
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM") != "dumb"


class ProgressDisplay:
    """The progress of one run of `command` on `stream` (standard error).

    `start` when the run starts, `update` with each position (`done` of `total`, the cost
    so far, this process's outcome counts), `note` for a line to show above it, `close` when
    the run ends (however it ends; closing twice is harmless).

    Args:
        stream: Where to show it (the command's error stream).
        command: The command's name (`eval`, `calibrate`).
        clock: Seconds, monotonic (`time.monotonic`); tests give their own.
        console: A `rich` console to draw on (tests give one writing to a string); None
            draws on `stream` when it is a terminal.
        plain_every: The plain line's period, in seconds.
    """

    def __init__(
        self,
        stream: TextIO,
        command: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        console: Console | None = None,
        plain_every: float = PLAIN_SECONDS,
    ) -> None:
        self.stream = stream
        self.command = command
        self.clock = clock
        self.console = console
        self.live = console is not None or _is_terminal(stream)
        self.plain_every = plain_every
        self.progress: Progress | None = None
        self.task: Any = None
        self.began = 0.0
        self.started_done = 0
        self.total = 0
        self.done = 0
        self.cost: float | None = None
        self.counts: Mapping[str, int] = {}
        self.batch_state: str | None = None  # the judge's batches' state (`--batch`)
        self.batch_line = ""
        self.last_plain: float | None = None  # when the last plain line was written
        self.plain_lines = 0

    # the run's story

    def start(self, done: int, total: int) -> None:
        """The run starts with `done` of its `total` cases already stored."""
        self.began = self.clock()
        self.started_done = self.done = done
        self.total = total
        self.last_plain = self.began
        if self.live:
            self._start_live()

    def update(
        self, done: int, total: int, cost: float | None, counts: Mapping[str, int] | None = None
    ) -> None:
        """The run's position: `done` of `total` stored, `cost` so far; this process's counts."""
        self.done, self.total, self.cost = done, total, cost
        if counts is not None:
            self.counts = dict(counts)
        if self.progress is not None:
            self.progress.update(
                self.task, completed=done, total=max(1, total), figures=self._figures(" · ")
            )
            if self.console is not None:  # a console given (tests) is drawn on each update
                self.progress.refresh()
            return
        now = self.clock()
        if (
            not self.live
            and self.last_plain is not None
            and now - self.last_plain >= (self.plain_every)
        ):
            self._plain(now)

    def batch(self, state: str, done: int, total: int, batches: int) -> None:
        """The run waits for its judge's batches (`--batch`): their state and items done."""
        text = batch_text(state, done, total, batches)
        changed = state != self.batch_state
        self.batch_state, self.batch_line = state, text
        if self.progress is not None:
            self.update(self.done, self.total, self.cost)
        elif changed:  # a plain line each time the batches' state changes
            print(f"refinekit {self.command}: {text}", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A line for the user now, above the progress (`text` is made terminal-safe)."""
        line = clean(text)
        if self.progress is not None:
            from rich.text import Text

            self.progress.console.print(Text(line), soft_wrap=True)
        else:
            print(line, file=self.stream)

    def close(self) -> None:
        """The run ended: the live display goes; a plain progress ends on its last line."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        elif self.plain_lines and self.last_plain is not None:
            self._plain(self.clock())
        self.last_plain = None  # no more plain lines

    # drawing

    def _figures(self, sep: str, *, elapsed: bool = False) -> str:
        now = self.clock()
        rate, left = figures(self.done, self.total, self.started_done, now - self.began)
        parts = [f"{duration(now - self.began)} elapsed"] if elapsed else []
        parts += [p for p in (rate, left) if p]
        if self.cost is not None:
            parts.append(f"cost {usd(self.cost)}" + (" so far" if elapsed else ""))
        if self.batch_line:
            parts.append(self.batch_line)
        text = ", ".join(parts) if elapsed else sep.join(parts)
        outcomes = _outcomes(self.counts)
        if outcomes:
            text += ("; " if elapsed else sep) + outcomes
        return text

    def _plain(self, now: float) -> None:
        share = f" ({100 * self.done // max(1, self.total)}%)"
        print(
            f"refinekit {self.command}: {self.done}/{self.total} cases{share}, "
            + self._figures(", ", elapsed=True),
            file=self.stream,
            flush=True,
        )
        self.last_plain = now
        self.plain_lines += 1

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.table import Column

        console = self.console or Console(file=self.stream, highlight=False)
        # On a narrow terminal the figures are cut at their end (the outcomes first); the
        # name, a bar, the count and the elapsed time keep their room.
        total_width = 2 * len(str(self.total)) + 1
        kept = len(self.command) + 10 + total_width + 7 + 4  # four spaces between five columns
        self.progress = Progress(
            TextColumn(self.command, markup=False, table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=10, max_width=40)),
            MofNCompleteColumn(table_column=Column(no_wrap=True, min_width=total_width)),
            TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
            TextColumn(
                "{task.fields[figures]}",
                markup=False,
                table_column=Column(
                    no_wrap=True, overflow="ellipsis", max_width=max(10, console.width - kept)
                ),
            ),
            console=console,
            get_time=self.clock,
            transient=True,  # gone when the run ends: the summary follows on stdout
            auto_refresh=self.console is None,  # the elapsed time ticks on a real terminal
            refresh_per_second=4,
            redirect_stdout=False,  # standard output is the summary's: never drawn on
            redirect_stderr=True,  # a warning written meanwhile goes above the bar
        )
        self.progress.start()
        self.task = self.progress.add_task(
            self.command, total=max(1, self.total), completed=self.done, figures=""
        )
