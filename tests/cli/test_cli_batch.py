"""`refinekit eval --batch` and `refinekit calibrate --batch` from the command line.

In process, against the scripted server and its batch endpoints: the flag, its usage
errors, what the progress says while the judge's batch runs, the summary's line, and an
interruption while the batch runs (the batch is left running; the same command finishes the
run with it).
"""

from __future__ import annotations

import io
import re

import pytest
from helpers import (
    CRITERIA_JUDGE,
    SYNC_ANSWER,
    Cli,
    Workspace,
    answers,
    judge_replies,
    table,
)
from rich.console import Console

from refinekit.cli._progress import ProgressDisplay
from refinekit.testing import ScriptedOpenAI

REPLIES = {"Refund window?": "Seven days.", "Shipping cost?": "Free.", "Gift cards?": "No."}
VERDICTS = {"Seven days.": 0.9, "Free.": 0.8, "No.": 0.1}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def server(server: ScriptedOpenAI) -> ScriptedOpenAI:
    server.script("answer", answers(REPLIES), times=None)
    server.script("judge", judge_replies(VERDICTS), times=None)
    return server


def eval_args(ws: Workspace, *extra: str, judge: bool = True) -> tuple[str, ...]:
    if not ws.modules:
        ws.module(SYNC_ANSWER, stem="answer")
        ws.module(CRITERIA_JUDGE, stem="judge")
        ws.csv("golden.csv", [{"question": q, "must_mention": "e"} for q in REPLIES])
    target, module = ws.modules
    judging = ("--judge", f"{module}:judge") if judge else ()
    return ("eval", "golden.csv", "--target", f"{target}:answer", *judging, "--batch", *extra)


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_the_flag_is_in_the_help(command: str, cli: Cli) -> None:
    result = cli(command, "--help")
    assert result.code == 0
    assert "--batch" in result.out
    assert "batch API" in " ".join(result.out.split())


def test_batch_without_a_judge_is_a_usage_error(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    result = cli(*eval_args(ws, judge=False))
    assert result.code == 2
    assert "--batch sends the judge's requests through its provider's batch API" in result.err
    assert server.requests == []  # nothing was answered


def test_batch_with_a_judge_of_no_provider_is_a_usage_error(ws: Workspace, cli: Cli) -> None:
    args = eval_args(ws, judge=False)
    module = ws.module("def judge(request):\n    return True\n", stem="byhand")
    result = cli(*args, "--judge", f"{module}:judge")
    assert result.code == 2
    assert "asks no OpenAI or Anthropic model" in result.err


def test_the_progress_says_what_the_batch_is_doing_and_the_summary_that_it_was_batched(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    server.script_batches(polls=3)
    result = cli(*eval_args(ws))
    assert result.code == 0, result.err
    assert result.err.splitlines() == [
        "refinekit eval: answering first, 1 of 3 cases (judged in batches next)",
        "refinekit eval: judge batch in progress, 1 of 3 requests done",
        "refinekit eval: judge batch finalizing (3 requests)",
        "refinekit eval: judge batch ended (3 requests)",
    ]
    assert "batched: 1 batch at the provider, 3 judge requests in them" in result.out
    assert table(result.out) == {1: "pass", 2: "pass", 3: "FAIL"}


def test_on_a_terminal_the_bar_shows_the_batch() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160, color_system=None)
    display = ProgressDisplay(io.StringIO(), "eval", clock=lambda: 0.0, console=console)
    display.start(0, 40)
    display.batch("in_progress", 12, 40, 1)
    last = ANSI.sub("", screen.getvalue()).split("\r")[-1]
    assert "judge batch in progress, 12 of 40 requests done" in last
    display.batch("finalizing", 40, 40, 2)
    last = ANSI.sub("", screen.getvalue()).split("\r")[-1]
    assert "2 judge batches finalizing (40 requests)" in last
    display.close()


def test_an_interrupted_batched_run_leaves_its_batch_running_and_resumes_with_it(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script_batches(polls=100)
    shown = ProgressDisplay.batch

    def interrupted(self: ProgressDisplay, state: str, *args: int) -> None:
        shown(self, state, *args)
        if state != "answering":
            raise KeyboardInterrupt  # Ctrl-C while the batch runs

    with monkeypatch.context() as patched:
        patched.setattr(ProgressDisplay, "batch", interrupted)
        stopped = cli(*eval_args(ws))

    assert stopped.code == 130
    assert "the judge's batches keep running at the provider" in stopped.out
    assert "run 1 is incomplete: 0 of 3 cases stored. Run the same command again" in stopped.out
    assert len(server.batches) == 1
    assert not server.batches[0].cancelled
    server.end_batches()
    again = cli(*eval_args(ws))
    assert again.code == 0, again.err
    assert "resuming run 1" in again.out
    assert len(server.batches) == 1
    assert len(server.requests_for("answer")) == 3  # the answers were kept
    assert table(again.out) == {1: "pass", 2: "pass", 3: "FAIL"}


def test_calibrate_batch_judges_the_labelled_answers_in_a_batch(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    server.script_batches(polls=1)
    judge = ws.module(CRITERIA_JUDGE, stem="judge")
    ws.csv(
        "labelled.csv",
        [
            {"question": q, "answer": a, "label": "pass" if VERDICTS[a] > 0.5 else "fail"}
            for q, a in REPLIES.items()
        ],
    )
    result = cli("calibrate", "labelled.csv", "--judge", f"{judge}:judge", "--batch")
    assert result.code == 0, result.err
    assert len(server.batches) == 1
    assert len(server.batches[0].custom_ids) == 3
    assert "batched: 1 batch at the provider, 3 judge requests in them" in result.out
