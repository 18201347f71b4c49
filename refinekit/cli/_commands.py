"""`refinekit eval`, `refinekit calibrate` and `refinekit runs`: what they print and return.

Exit statuses: 0 done (and every gate held); 1 a gate failed (the pass rate's lower bound
under `--min-pass-rate`, or a significant regression against `--compare`); 2 a usage error
(nothing was run); 3 the run stopped early (the judge is misconfigured or raised a bug; the
finished cases are stored, and the same command resumes); 4 the run is complete but no answer
was judged (every case raised an error other than a refused answer, or found the judge
unavailable): a failure of the setup, not a measurement; 130 interrupted (likewise
resumable).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

from .._config import is_testing
from ..eval._calibration import Calibration, calibrate
from ..eval._runner import (
    CONFIDENCE,
    Case,
    Comparison,
    EvalOptions,
    Progress,
    RateLimiter,
    RunAborted,
    Summary,
    Target,
    UsageProblem,
    compare_runs,
    has_column_checks,
    labels_of,
    load_cases,
    load_judge,
    measured,
    run_eval,
    start,
    summarise,
)
from ..eval._runstore import DEFAULT_DB, CaseRecord, RunInfo, RunStore, RunStoreError, redact
from ..eval._stats import wilson_interval
from ._pipe import PipeSafe

__all__ = [
    "EXIT_ABORTED",
    "EXIT_GATE",
    "EXIT_SETUP",
    "EXIT_USAGE",
    "calibrate_command",
    "eval_command",
]

EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_ABORTED = 3
EXIT_SETUP = 4
EXIT_INTERRUPTED = 130

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def clean(text: str, width: int | None = None) -> str:
    """Model or user text made safe for a terminal: one line, no control characters."""
    text = _CONTROL.sub("?", " ".join(str(text).split()))
    if width is not None and len(text) > width:
        text = text[: max(1, width - 1)] + "\u2026"
    return text


def db_path(option: str | None) -> Path:
    """The run store: `--db`, else `$REFINEKIT_DB`, else `.refinekit/runs.db`."""
    return Path(option or os.environ.get("REFINEKIT_DB") or DEFAULT_DB)


def _version() -> str:
    from .. import __version__

    return __version__


class _Bar:
    """A progress line on a terminal (stderr); nothing otherwise."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.on = stream.isatty() and os.environ.get("TERM") != "dumb"
        self.last = 0.0

    def __call__(self, progress: Progress, record: CaseRecord) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if progress.done < progress.total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        filled = width * progress.done // max(1, progress.total)
        counts = "  ".join(f"{k} {v}" for k, v in sorted(progress.counts.items()))
        self.stream.write(
            f"\r[{'#' * filled}{'-' * (width - filled)}] {progress.done}/{progress.total}  {counts}"
            "\x1b[K"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@dataclass
class _Io:
    out: TextIO
    err: TextIO

    def say(self, text: str = "") -> None:
        print(text, file=self.out)

    def error(self, command: str, text: str) -> None:
        # an error may quote a server's or a model's text: no credential, no control character
        print(f"refinekit {command}: error: {clean(redact(text))}", file=self.err)


def _pct(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _run_cases(
    io: _Io,
    command: str,
    store: RunStore,
    options: EvalOptions,
    cases: list[Case],
    *,
    fresh: bool,
    target: Target | None,
    judge: Any,
    labels: dict[str, str] | None = None,
) -> tuple[RunInfo, RateLimiter | None, int | None, int]:
    """Start or resume the run, run what is left.

    Returns:
        The run, its rate limiter, the exit status when it stopped early, and how many
        stored cases `--retry` has run again over the run's life.
    """
    started = start(store, options, cases, fresh=fresh, version=_version())
    run = started.run
    io.say(
        f"refinekit {command}: {options.dataset} ({len(cases)} cases) -> run {run.id} in "
        f"{store.path}"
    )
    again = sum(started.retried.values())
    if started.resumed or again:
        io.say(
            f"resuming run {run.id}: {started.resumed + again} of {len(cases)} cases already "
            "stored "
            + (
                f"({started.resumed} not run again; --fresh starts over)"
                if again
                else "(not run again; --fresh starts over)"
            )
        )
    if again:
        which = ", ".join(f"{n} {outcome}" for outcome, n in sorted(started.retried.items()))
        io.say(
            f"  running again {_cases(again)} that ended {which} (--retry); the new outcome "
            "replaces the stored one"
        )
    elif options.retry and started.resuming:
        io.say(f"  --retry: no stored case ended {' or '.join(sorted(options.retry))}")
    elif options.retry:
        io.say(
            "  --retry: no unfinished run of this command to resume (a complete run is never "
            "resumed): every case runs"
        )
    if started.dropped:
        io.say(f"  {started.dropped} stored cases are no longer in the file: dropped from the run")
    bar = _Bar(io.err, len(cases))
    progress = Progress(total=len(cases), done=started.resumed, on_case=bar)
    limiter: RateLimiter | None = None
    status: int | None = None
    try:
        limiter = asyncio.run(
            run_eval(
                store,
                run,
                started.todo,
                target=target,
                judge=judge,
                judge_name=options.judge,
                options=options,
                progress=progress,
                labels=labels,
                earlier=started.earlier,
            )
        )
    except RunAborted as e:
        bar.close()
        io.error(command, f"{e}")
        status = EXIT_ABORTED
    except KeyboardInterrupt:
        bar.close()
        io.error(command, "interrupted")
        status = EXIT_INTERRUPTED
    else:
        bar.close()
    retried = started.retried_before + progress.retried
    if status is not None:
        stored = len(store.case_keys(run.id))
        store.finish_run(
            run.id, "incomplete", {"stored": stored, "cases": len(cases), "retried": retried}
        )
        io.say(
            f"run {run.id} is incomplete: {stored} of {len(cases)} cases stored. Run the same "
            "command again to finish it without paying again for those."
        )
    return store.run(run.id), limiter, status, retried


def _setup_failure(records: Sequence[CaseRecord], what: str) -> str:
    """The one line saying that no case reached a verdict, with the commonest error."""
    counts = Counter(r.outcome for r in records)
    how = " and ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    errors = Counter(r.error or r.outcome for r in records)
    error, times = errors.most_common(1)[0]
    often = "every time" if times == len(records) else f"{times} times"
    return (
        f"{what}: {how} of {_cases(len(records))} (the commonest error, {often}: "
        f"{clean(error, 200)}); a failure of the setup (an endpoint, a key, the function), "
        "not a measurement: fix it and run again"
    )


def _streams(out: TextIO | None, err: TextIO | None) -> _Io:
    """Where a command prints: standard output and error unless given.

    Once a stream's reader went away (`| head`) nothing more is written to it, without an
    error: the command's work goes on.
    """
    return _Io(cast(TextIO, PipeSafe(out or sys.stdout)), cast(TextIO, PipeSafe(err or sys.stderr)))


# eval


def eval_command(
    args: Any,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`refinekit eval`; `args` are the parsed options. Returns the exit status."""
    io = _streams(out, err)
    try:
        cases = load_cases(Path(args.golden))
        columns = sorted({c for case in cases for c in case.row})
        target = Target.load(args.target, columns)
        target.check(cases)
        judge = None if args.judge is None else load_judge(args.judge)
        if judge is None and not has_column_checks(columns):
            raise UsageProblem(
                "nothing to judge the answers by: give --judge, or a golden file with a "
                f"must_mention or expected_source column (columns: {columns})"
            )
        if judge is None and args.repeat > 1:
            raise UsageProblem(
                "--repeat measures a judge's consistency; without --judge the column checks "
                "always agree with themselves"
            )
        with RunStore(db_path(args.db)) as store:
            before = (
                _before(store, args.compare) if args.compare not in (None, "previous") else None
            )
            options = EvalOptions(
                dataset=Path(args.golden),
                target=args.target,
                judge=args.judge,
                concurrency=args.concurrency,
                repeat=args.repeat,
                retry=args.retry,
            )
            run, limiter, stopped, retried = _run_cases(
                io, "eval", store, options, cases, fresh=args.fresh, target=target, judge=judge
            )
            if stopped is not None:
                return stopped
            records = store.cases(run.id)
            summary = summarise(records)
            setup_failed = not any(measured(r) for r in records)
            store.finish_run(
                run.id,
                "complete",
                summary.as_dict()
                | {
                    "rate_limit_waits": limiter.waits if limiter else 0,
                    "cases_in_file": len(cases),
                    "retried": retried,
                    "setup_failed": setup_failed,
                },
            )
            run = store.run(run.id)
            _print_cases(io, records)
            if setup_failed:  # no gate, no comparison: nothing was measured
                io.error("eval", _setup_failure(records, "no answer was judged"))
                if args.report is not None:
                    from ..eval.report._report import eval_report

                    _write_report(io, "eval", args.report, eval_report(store, run.id, None))
                return EXIT_SETUP
            status = _print_summary(io, summary, args.min_pass_rate, limiter, args.judge)
            comparison = None
            if args.compare is not None:
                if before is None:
                    before = _previous(store, run)
                if before is None:
                    io.say(
                        "compare: no earlier complete run of this golden file with the same "
                        "judge in the store; nothing to compare with"
                    )
                else:
                    if before.dataset != run.dataset:
                        io.say(
                            f"compare: run {before.id} is of another file "
                            f"({clean(before.dataset)}); comparing the questions both share"
                        )
                    comparison = compare_runs(before, store.cases(before.id), run, records)
                    if _print_comparison(io, comparison, args.alpha):
                        status = EXIT_GATE
            if args.report is not None:
                from ..eval.report._report import eval_report

                if not _write_report(
                    io, "eval", args.report, eval_report(store, run.id, comparison)
                ):
                    return EXIT_USAGE
            return status
    except (UsageProblem, RunStoreError) as e:
        io.error("eval", str(e))
        return EXIT_USAGE


def _before(store: RunStore, which: str) -> RunInfo:
    try:
        number = int(which)
    except ValueError:
        raise UsageProblem(
            f"--compare takes 'previous' or a run id (see `refinekit runs`), not {which!r}"
        ) from None
    run = store.run(number)
    if run.kind != "eval":
        raise UsageProblem(f"--compare {number}: run {number} is a {run.kind} run, not an eval")
    if run.summary.get("setup_failed"):
        raise UsageProblem(
            f"--compare {number}: run {number} measured nothing (no answer was judged: a "
            "failure of the setup); compare with another run"
        )
    return run


def _previous(store: RunStore, run: RunInfo) -> RunInfo | None:
    """The run `--compare previous` means: the newest earlier one that measured something."""
    before = store.previous(run)
    while before is not None and before.summary.get("setup_failed"):
        before = store.previous(before)
    return before


def _cases(n: int) -> str:
    return "1 case" if n == 1 else f"{n} cases"


def _write_report(io: _Io, command: str, path: str, html: str) -> bool:
    try:
        Path(path).write_text(html, encoding="utf-8")
    except OSError as e:
        io.error(command, f"cannot write the report to {path}: {e.strerror or e}")
        return False
    io.say(f"report: {path}")
    return True


_MARK = {
    "passed": "pass",
    "failed": "FAIL",
    "raised": "RAISED",
    "unavailable": "unavail",
    "inconclusive": "inconcl",
}


def _print_cases(io: _Io, records: Sequence[CaseRecord]) -> None:
    io.say()
    io.say(f"{'#':>4}  {'outcome':<8} {'verdicts':>8} {'att':>3} {'corr':>4}  question / note")
    for r in records:
        verdicts = f"{r.passes}/{r.judgements}" if r.judgements else "-"
        io.say(
            f"{r.position:>4}  {_MARK[r.outcome]:<8} {verdicts:>8} {r.attempts:>3} "
            f"{r.corrections:>4}  {clean(r.question, 60)}"
        )
        note = r.error if r.outcome in ("raised", "unavailable", "inconclusive") else r.feedback
        if r.outcome != "passed" and note:
            io.say(f"{'':>33}-> {clean(note, 90)}")


def _print_summary(
    io: _Io,
    s: Summary,
    min_pass_rate: float | None,
    limiter: RateLimiter | None,
    judge: str | None,
) -> int:
    io.say()
    if s.rate is None:
        io.say(f"pass rate: n/a (none of the {s.cases} cases was judged)")
    else:
        io.say(
            f"pass rate {s.rate:.3f} ({s.passed}/{s.counted}), 95% Wilson interval "
            f"{s.lower:.3f} to {s.upper:.3f}, over {_cases(s.counted)} ({s.passed} passed, "
            f"{s.failed} failed, {s.raised} raised: a function that raised counts as failed)"
        )
    io.say(
        f"not counted: {s.unavailable} unavailable (the judge could not judge), "
        f"{s.inconclusive} inconclusive"
    )
    if s.repeated:
        lo, hi = wilson_interval(s.flipped, s.repeated, CONFIDENCE)
        io.say(
            f"judge consistency: {s.flipped} of {s.repeated} answers judged more than once got "
            f"differing verdicts (flip rate {s.flipped / s.repeated:.3f}, 95% {lo:.3f} to {hi:.3f})"
        )
    if s.criteria:
        parts = []
        for name, c in s.criteria.items():
            decided = c.get("pass", 0) + c.get("fail", 0) + c.get("uncertain", 0)
            parts.append(f"{name} {c.get('pass', 0)}/{decided}")
        io.say("criteria passed: " + ", ".join(parts))
    io.say(
        f"attempts per answer: mean {s.attempts_mean:.2f}, max {s.attempts_max}; corrections: "
        f"{s.corrections_total} in all, max {s.corrections_max} per answer"
    )
    roles = (
        ("answer model", s.usage["answer"]),
        ("judges inside the function", s.usage["answer_judge"]),
        ("the run's judge", s.usage["judge"]),
    )
    spent = [f"{name} {_usage(u)}" for name, u in roles if u["model_calls"]]
    io.say(
        "model calls seen: " + ("; ".join(spent) if spent else "none")
        if judge or spent
        else "model calls seen: none (column checks only)"
    )
    if limiter is not None and limiter.waits:
        slept = "not slept: testing switch on" if is_testing() else "in all"
        times = "once" if limiter.waits == 1 else f"{limiter.waits} times"
        io.say(f"rate limited: backed off {times} ({limiter.waited:.1f} s {slept})")
    if s.rate is None:
        io.say("gate: no case has a pass or fail outcome, so the run measured nothing: FAIL")
        return EXIT_GATE
    if min_pass_rate is None:
        return 0
    if s.lower < min_pass_rate:
        io.say(
            f"gate: lower bound {s.lower:.3f} is under --min-pass-rate {min_pass_rate:.3f}: FAIL"
        )
        return EXIT_GATE
    io.say(f"gate: lower bound {s.lower:.3f} >= --min-pass-rate {min_pass_rate:.3f}: pass")
    return 0


def _usage(u: dict[str, int]) -> str:
    tokens = u["prompt_tokens"] + u["completion_tokens"]
    return (
        f"{u['model_calls']} calls, {tokens:,} tokens "
        f"({u['prompt_tokens']:,} prompt + {u['completion_tokens']:,} completion)"
    )


def _print_comparison(io: _Io, c: Comparison, alpha: float) -> bool:
    io.say()
    io.say(
        f"compare with run {c.before.id}: {c.shared} questions judged in both runs; "
        f"{len(c.regressed)} regressed, {len(c.improved)} improved; exact McNemar p = "
        f"{c.p_value:.4f}"
        + (
            f" ({c.not_comparable} shared questions not judged in one run)"
            if c.not_comparable
            else ""
        )
    )
    for title, pairs in (("regressed", c.regressed), ("improved", c.improved)):
        for _, now in pairs:
            note = now.error or now.feedback if title == "regressed" else ""
            io.say(
                f"  {title}: #{now.position} {clean(now.question, 60)}"
                + (f" -> {clean(note, 60)}" if note else "")
            )
    failing = c.significant_regression(alpha)
    if failing:
        io.say(f"gate: significant regression (p {c.p_value:.4f} < --alpha {alpha}): FAIL")
    return failing


# calibrate


def calibrate_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit calibrate`; `args` are the parsed options. Returns the exit status."""
    io = _streams(out, err)
    try:
        cases = load_cases(Path(args.labelled))
        labels = labels_of(cases)
        judge = load_judge(args.judge)
        with RunStore(db_path(args.db)) as store:
            options = EvalOptions(
                dataset=Path(args.labelled),
                target=None,
                judge=args.judge,
                concurrency=args.concurrency,
                kind="calibrate",
                retry=args.retry,
            )
            run, _, stopped, retried = _run_cases(
                io,
                "calibrate",
                store,
                options,
                cases,
                fresh=args.fresh,
                target=None,
                judge=judge,
                labels=labels,
            )
            if stopped is not None:
                return stopped
            records = store.cases(run.id)
            result = calibrate(records, target_error=args.target_error, bins=args.bins)
            setup_failed = not any(measured(r) for r in records)
            store.finish_run(
                run.id,
                "complete",
                _calibration_summary(result) | {"retried": retried, "setup_failed": setup_failed},
            )
            if setup_failed:  # no figure, no gate: the judge never judged
                io.error("calibrate", _setup_failure(records, "the judge gave no verdict"))
                if args.report is not None:
                    from ..eval.report._report import calibration_report

                    html = calibration_report(store, run.id, result)
                    _write_report(io, "calibrate", args.report, html)
                return EXIT_SETUP
            _print_calibration(io, result)
            if args.report is not None:
                from ..eval.report._report import calibration_report

                html = calibration_report(store, run.id, result)
                if not _write_report(io, "calibrate", args.report, html):
                    return EXIT_USAGE
            if args.min_kappa is not None:
                kappa = result.kappa
                if kappa is None or kappa < args.min_kappa:
                    io.say(
                        f"gate: Cohen's kappa {_pct(kappa)} is under --min-kappa "
                        f"{args.min_kappa:.3f}: FAIL"
                    )
                    return EXIT_GATE
                io.say(f"gate: Cohen's kappa {kappa:.3f} >= --min-kappa {args.min_kappa:.3f}: pass")
            return 0
    except (UsageProblem, RunStoreError) as e:
        io.error("calibrate", str(e))
        return EXIT_USAGE


def _calibration_summary(c: Calibration) -> dict[str, Any]:
    summary = c.as_dict()
    return summary


def _print_calibration(io: _Io, c: Calibration) -> None:
    io.say()
    left = c.unavailable + c.inconclusive
    io.say(
        f"judged {c.items} items"
        + (
            f" ({c.unavailable} unavailable and {c.inconclusive} inconclusive left out)"
            if left
            else ""
        )
    )
    io.say(f"{'':>12}{'people pass':>13}{'people fail':>13}")
    io.say(f"{'judge pass':>12}{c.both_pass:>13}{c.human_fail_only:>13}")
    io.say(f"{'judge fail':>12}{c.judge_fail_only:>13}{c.both_fail:>13}")
    io.say(
        f"accuracy {_pct(c.accuracy)}, precision on failures {_pct(c.precision_fail)}, "
        f"recall on failures {_pct(c.recall_fail)}, Cohen's kappa {_pct(c.kappa)}"
    )
    if c.reliability is None or c.thresholds is None:
        io.say(
            f"probabilities: {c.with_probability} of {c.items} verdicts carried one; a "
            "reliability table and thresholds need one on every verdict (a criteria judge on "
            "an endpoint that returns logprobs gives them)"
        )
        return
    io.say(f"reliability ({c.items} items):")
    io.say(f"  {'bin':<11}{'items':>6}{'mean p':>9}{'passed':>9}")
    for b in c.reliability:
        io.say(
            f"  {b.lower:.2f}-{b.upper:.2f}{'':<2}{b.count:>6}{b.mean_probability:>9.3f}"
            f"{b.observed_rate:>9.3f}"
        )
    io.say(f"expected calibration error {_pct(c.ece)}")
    t = c.thresholds
    io.say(f"recommended thresholds, at most {t.target_error:.0%} wrong on each side:")
    if t.pass_at is None:
        io.say("  pass: no threshold keeps wrong passes that low")
    else:
        io.say(
            f"  pass at p >= {t.pass_at:.3f}: {t.passes} items, {t.wrong_passes} failed by "
            f"people (95% upper bound {_pct(t.pass_error_upper)})"
        )
    if t.fail_at is None:
        io.say("  fail: no threshold keeps wrong fails that low")
    else:
        io.say(
            f"  fail at p <= {t.fail_at:.3f}: {t.fails} items, {t.wrong_fails} passed by "
            f"people (95% upper bound {_pct(t.fail_error_upper)})"
        )
    share = t.uncertain / c.items if c.items else 0.0
    io.say(f"  uncertain (for a person to look at): {t.uncertain} items ({share:.0%})")
    if t.pass_at is not None and t.fail_at is not None:
        io.say(
            f"  as a criterion: Criterion(..., pass_at={t.pass_at:.3f}, fail_at={t.fail_at:.3f})"
        )


# runs


def runs_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit runs`: the stored runs, oldest first."""
    io = _streams(out, err)
    path = db_path(args.db)
    if not path.exists():
        io.say(f"no run store at {path}")
        return 0
    try:
        with RunStore(path) as store:
            runs = store.runs(kind=args.kind)
    except RunStoreError as e:
        io.error("runs", str(e))
        return EXIT_USAGE
    io.say(f"{'id':>4}  {'kind':<9} {'status':<10} {'started':<16} {'figure':<22} data file")
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at))
        figure = ""
        if r.summary.get("setup_failed"):
            figure = "nothing (setup failed)"
        elif r.kind == "eval" and r.summary.get("rate") is not None:
            figure = f"pass {r.summary['rate']:.3f} (>= {r.summary['lower']:.3f})"
        elif r.kind == "calibrate" and r.summary.get("kappa") is not None:
            figure = f"kappa {r.summary['kappa']:.3f}"
        io.say(
            f"{r.id:>4}  {r.kind:<9} {r.status:<10} {started:<16} {figure:<22} {clean(r.dataset)}"
        )
    return 0
