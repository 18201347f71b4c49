"""A run's progress: the live bar on a terminal, the plain line elsewhere, every worker counted.

The display is driven by a fake clock (nothing sleeps); the terminal is a `rich` console
forced to be one, writing into a string.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import refinekit.eval
from refinekit.cli._progress import PLAIN_SECONDS, ProgressDisplay, duration, figures
from refinekit.eval import CaseFinished, CaseRecord, EvalOptions, RunEvent, RunProgress
from refinekit.eval._cases import load_cases
from refinekit.eval._plans import EvalPlan
from refinekit.eval._session import Session
from refinekit.eval._store._sqlite import SQLiteStore

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def plain_display(done: int, total: int) -> tuple[Clock, io.StringIO, ProgressDisplay]:
    """A display of plain lines into a StringIO, on a clock of its own, started at `done`."""
    clock = Clock()
    stream = io.StringIO()
    display = ProgressDisplay(stream, "eval", clock=clock)
    display.start(done, total)
    return clock, stream, display


def test_duration_and_the_figures() -> None:
    assert duration(72) == "0:01:12"
    assert duration(3723.9) == "1:02:03"
    assert figures(0, 300, 0, 0.0) == (None, None)  # nothing known yet
    assert figures(121, 300, 0, 72.0) == ("1.7 cases/s", "0:01:46 left")
    # resumed cases are no speed: 100 were stored before the command started
    assert figures(110, 300, 100, 20.0) == ("2.0 s/case", "0:06:20 left")
    assert figures(300, 300, 0, 60.0) == ("5.0 cases/s", None)


def test_piped_progress_is_a_plain_line_every_n_seconds() -> None:
    assert PLAIN_SECONDS == 10.0  # the period docs/workflow.md states
    clock, stream, display = plain_display(0, 300)

    clock.now += 4
    display.update(10, 300, None, {"passed": 10})
    assert stream.getvalue() == ""  # not yet 10 s
    clock.now += 8  # 12 s in
    display.update(24, 300, None, {"passed": 20, "failed": 4})
    clock.now += 3  # 15 s: 3 s since the last line
    display.update(30, 300, None, {"passed": 25, "failed": 5})
    clock.now += 10  # 25 s
    display.update(50, 300, None, {"passed": 40, "failed": 10})
    clock.now += 5
    display.close()
    display.update(60, 300, None, {"passed": 50})  # after the end: nothing more

    assert stream.getvalue().splitlines() == [
        "refinekit eval: 24/300 cases (8%), 0:00:12 elapsed, 2.0 cases/s, 0:02:18 left; "
        "passed 20, failed 4",
        "refinekit eval: 50/300 cases (16%), 0:00:25 elapsed, 2.0 cases/s, 0:02:05 left; "
        "passed 40, failed 10",
        # the last line, as the run ends: the time is the end's
        "refinekit eval: 50/300 cases (16%), 0:00:30 elapsed, 1.7 cases/s, 0:02:30 left; "
        "passed 40, failed 10",
    ]


def test_the_plain_line_shows_the_cost_so_far_with_prices_and_resumed_cases_as_done() -> None:
    clock, stream, display = plain_display(200, 300)  # 200 resumed: done, but no speed
    clock.now += 10
    display.update(220, 300, 0.0123456, {"failed": 20})
    assert stream.getvalue().splitlines() == [
        "refinekit eval: 220/300 cases (73%), 0:00:10 elapsed, 2.0 cases/s, 0:00:40 left, "
        "cost 0.0123456 so far; failed 20"
    ]


def test_a_fast_piped_run_writes_no_progress() -> None:
    clock, stream, display = plain_display(0, 3)
    clock.now += 1
    display.update(3, 3, None, {"passed": 3})
    display.close()
    assert stream.getvalue() == ""


def terminal() -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=140, color_system=None), screen


def frames(screen: io.StringIO) -> list[str]:
    """What the terminal showed, frame by frame (each redraw starts with a carriage return)."""
    text = ANSI.sub("", screen.getvalue())
    return [f.strip() for f in re.split(r"[\r\n]", text) if f.strip()]


def test_on_a_terminal_a_live_bar_with_elapsed_rate_left_cost_and_outcomes() -> None:
    clock = Clock()
    console, screen = terminal()
    display = ProgressDisplay(io.StringIO(), "eval", clock=clock, console=console)
    display.start(0, 300)
    clock.now += 72
    display.update(121, 300, 0.42, {"passed": 100, "failed": 21})

    last = frames(screen)[-1]
    assert re.fullmatch(
        r"eval ━+\S* +121/300 0:01:12 1\.7 cases/s · 0:01:46 left · cost 0\.42 · "
        r"passed 100, failed 21",
        last,
    ), last
    display.close()
    # the bar is transient: its line is erased at the end (the summary follows on stdout)
    assert screen.getvalue().endswith("\x1b[2K")


def test_on_a_narrow_terminal_the_figures_are_cut_not_the_count_or_the_time() -> None:
    clock = Clock()
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80, color_system=None)
    display = ProgressDisplay(io.StringIO(), "eval", clock=clock, console=console)
    display.start(0, 300)
    clock.now += 72
    display.update(121, 300, 0.42, {"passed": 100, "failed": 21})
    last = frames(screen)[-1]
    assert len(last) <= 80
    assert re.fullmatch(
        r"eval ━+ +121/300 0:01:12 1\.7 cases/s · 0:01:46 left · cost 0\.42 .*…", last
    )
    display.close()


def test_a_note_goes_above_the_bar_as_plain_text() -> None:
    clock = Clock()
    console, screen = terminal()
    display = ProgressDisplay(io.StringIO(), "eval", clock=clock, console=console)
    display.start(0, 2)
    display.note("case [bold]1[/bold]\x1b[31m\nred")  # hostile: markup and escapes stay text
    display.close()
    raw = screen.getvalue()
    assert "case [bold]1[/bold]?[31m red" in raw
    assert "\x1b[31m" not in raw


# --- every worker's cases count ----------------------------------------------------------------


def golden(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "golden.csv"
    path.write_text("question,must_mention\n" + "".join(f"q{i},ok\n" for i in range(1, n + 1)))
    return path


def store_as_another_worker(db: Path, data: Path, run_id: int, n: int) -> None:
    """Another worker of the run (another process, a Ray task) claims n cases and stores them."""
    cases = {c.key: c for c in load_cases(data)}
    with SQLiteStore(db) as store:
        store.join(run_id, "other")
        for key in store.claim(run_id, "other", limit=n):
            case = cases[key]
            record = CaseRecord(key, case.position, case.question, case.row, "passed", "ok")
            assert store.save_case(run_id, record, worker="other")
        store.leave(run_id, "other")


def test_cases_another_worker_stored_count_in_the_progress(tmp_path: Path) -> None:
    data, db = golden(tmp_path, 4), tmp_path / "runs.db"
    events: list[RunEvent] = []

    def answer(question: str) -> str:
        if question == "q1":  # while this worker answers q1, another stores q2 and q3
            store_as_another_worker(db, data, run_id=1, n=2)
        return "ok"

    result = refinekit.eval.run(data, target=answer, db=db, concurrency=1, on_event=events.append)

    finished = [e for e in events if isinstance(e, CaseFinished)]
    assert [e.record.question for e in finished] == ["q1", "q4"]  # this worker's cases
    assert [(e.done, e.total) for e in finished] == [(3, 4), (4, 4)]  # every worker's
    assert finished[-1].counts == {"passed": 2}  # the outcomes are this worker's
    assert result.summary.passed == 4


def test_the_cost_so_far_is_every_workers(tmp_path: Path) -> None:
    from refinekit import record_usage

    data, db = golden(tmp_path, 2), tmp_path / "runs.db"
    events: list[RunEvent] = []

    def answer(question: str) -> str:
        record_usage(1_000_000, 0, model="m")  # one million input tokens: 2.0
        return "ok"

    refinekit.eval.run(
        data, target=answer, db=db, concurrency=1, prices={"m": (2.0, 4.0)}, on_event=events.append
    )
    costs = [e.cost for e in events if isinstance(e, CaseFinished)]
    assert costs == [pytest.approx(2.0), pytest.approx(4.0)]


def test_a_run_answered_here_alone_tells_no_run_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the store is looked at every turn of the loop, before, between and after the cases:
    # nothing moved but through this process's own cases, told by their CaseFinished
    monkeypatch.setattr(refinekit.eval._results, "PROGRESS_SECONDS", 0)
    events: list[RunEvent] = []

    async def answer(question: str) -> str:
        for _ in range(5):
            await asyncio.sleep(0)
        return "ok"

    refinekit.eval.run(
        golden(tmp_path, 3), target=answer, db=tmp_path / "r.db", on_event=events.append
    )
    assert [type(e).__name__ for e in events] == ["RunStarted"] + ["CaseFinished"] * 3


def test_run_progress_is_told_while_other_workers_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the driver of a Ray run answers nothing itself: it learns of the cases from the store
    monkeypatch.setattr(refinekit.eval._results, "PROGRESS_SECONDS", 0)  # look at every turn
    data, db = golden(tmp_path, 3), tmp_path / "runs.db"
    events: list[Any] = []
    plan = EvalPlan(
        EvalOptions(
            data, target=lambda question: "ok", concurrency=1, db=db, on_event=events.append
        )
    )

    async def elsewhere() -> None:
        for _ in range(3):
            await asyncio.sleep(0)  # a turn of the loop: the watcher looks
            store_as_another_worker(db, data, session.run.id, 1)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    with SQLiteStore(db) as store:
        session = Session(store, plan)
        asyncio.run(session.execute(elsewhere))

    told = [(e.done, e.total) for e in events if isinstance(e, RunProgress)]
    assert told == [(1, 3), (2, 3), (3, 3)]  # each change once
