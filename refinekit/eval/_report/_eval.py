"""The report of an eval run (`refinekit eval --report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._core.numbers import usd
from .._money import total as total_cost
from .._store import CaseRecord, RunInfo, RunStore
from .._summary import Comparison, Summary, summarise
from ._cascade import levels_section
from ._cases import case_article
from ._figures import (
    attempts_section,
    consistency_section,
    cost_section,
    criteria_section,
    eval_history_section,
    pass_rate_section,
)
from ._html import (
    ANSWER_LIMIT,
    CELL_LIMIT,
    DETAILED_LIMIT,
    LISTED_LIMIT,
    OUTCOMES,
    badge,
    count,
    counted,
    esc,
    fmt3,
    fmt_p,
    gate_results,
    incomplete_note,
    not_listed,
    number,
    one_line,
    page,
    prose,
    run_meta,
    section,
    stored_run,
    toc,
    when,
    whole,
)
from ._tiers import spend_line, tiers_section

__all__ = ["eval_report"]

_DOT = " \u00b7 "
_ROLES = (
    ("answer", "answer model"),
    ("answer_judge", "judges inside the function"),
    ("judge", "the run's judge"),
)


def eval_report(
    store: RunStore,
    run_id: int,
    comparison: Comparison | None = None,
    *,
    min_pass_rate: float | None = None,
    alpha: float = 0.05,
) -> str:
    """The HTML report of a stored `refinekit eval` run.

    Args:
        store: The run store holding the run.
        run_id: The run's id.
        comparison: The comparison with an earlier run, when `--compare` made one.
        min_pass_rate: The pass-rate gate (`--min-pass-rate`), when one was asked for.
        alpha: The comparison's gate (`--alpha`).

    Returns:
        One self-contained HTML5 document.

    Raises:
        RunStoreError: No run has this id.
        ValueError: The run is not an eval run.
    """
    run, cases, history = stored_run(store, run_id, "eval")
    summary = summarise(cases)
    failing = [(i, c) for i, c in enumerate(cases) if c.outcome != "passed"]
    setup_failed = bool(run.summary.get("setup_failed"))
    corrected = run.summary.get("corrected")
    verdict, gates = _gates(
        summary,
        setup_failed,
        min_pass_rate,
        comparison,
        alpha,
        corrected if isinstance(corrected, dict) else None,
        run.summary.get("judge_warning"),
    )
    # What a reviewer acts on comes first, on the first screen: the gates, the regressions,
    # the failing cases (each a line, linked to its card below); then the figures, each
    # section's definitions behind a disclosure.
    first = [("gates", "Gates", _no_context(summary) + gates + _glance(summary, setup_failed))]
    if comparison is not None:
        first.append(
            (
                "regressions",
                f"Regressed since run {comparison.before.id} ({len(comparison.regressed)})",
                _regressions(comparison),
            )
        )
    first.append(("failing", f"Failing cases ({len(failing)})", _failing_list(failing)))
    sections = [
        ("pass-rate", "Pass rate", pass_rate_section(summary, setup_failed)),
        ("history", "Pass rate over the stored runs", eval_history_section(run, summary, history)),
    ]
    if summary.trials is not None:
        sections.append(("trials", "Trials: pass^k and pass@k", _trials(summary.trials)))
    elif summary.repeated:
        sections.append(("consistency", "Judge consistency", consistency_section(summary, cases)))
    sections += [
        ("criteria", "Per-criterion pass rates", criteria_section(summary)),
        ("attempts", "Attempts and corrections per answer", attempts_section(summary, cases)),
        ("cost", "Cost", cost_section(run, summary, cases)),
    ]
    if summary.tiers is not None:
        sections.append(("tiers", "Tiers of the escalation ladder", tiers_section(summary.tiers)))
    if summary.cascade is not None:
        fit = run.summary.get("cascade_fit")
        shares = levels_section(summary.cascade, fit if isinstance(fit, dict) else None)
        sections.append(("cascade", "Cascade levels", shares))
    if comparison is not None:
        title = f"Compared with run {comparison.before.id}"
        sections.append(("comparison", title, _comparison(comparison)))
    sections += [
        ("failing-cases", f"Failing cases in full ({len(failing)})", _failing(failing)),
        ("cases", f"All cases ({len(cases)})", _all_cases(cases, failing)),
    ]
    cases_in_file = count(run.summary.get("cases_in_file"))
    details = run_meta(
        run,
        [
            (
                "Cases",
                f"{whole(len(cases))} stored"
                + (f" ({whole(cases_in_file)} rows in the file)" if cases_in_file else ""),
            )
        ],
    )
    heading = (
        f"<header><h1>refinekit eval \u2014 run {run.id}</h1>"
        + _run_line(run, len(cases))
        + incomplete_note(run, len(cases))
        + verdict
        + "</header>"
    )
    body = "\n".join(
        [
            *(section(anchor, title, content) for anchor, title, content in first),
            toc([(anchor, title) for anchor, title, _ in first + sections]),
            f'<details class="run"><summary>Run details</summary>{details}</details>',
            *(section(anchor, title, content) for anchor, title, content in sections),
        ]
    )
    return page(f"refinekit eval, run {run.id}", heading, body)


def _run_line(run: RunInfo, stored: int) -> str:
    """The run in one line: its file, target, judge, status and cases (the rest in details)."""
    name = run.dataset.replace("\\", "/").rsplit("/", 1)[-1]
    parts = [
        f'<code title="{esc(run.dataset)}">{esc(name)}</code>',
        f"target <code>{esc(run.target or '')}</code>",
        f"judge <code>{esc(run.judge or 'column checks')}</code>",
        badge(run.status, ("complete", "incomplete", "running")),
        counted(stored, "case"),
        esc(when(run.started_at)),
    ]
    return f'<p class="run-line">{_DOT.join(parts)}</p>'


def _glance(s: Summary, setup_failed: bool) -> str:
    """The figures behind the gates in one line: the pass rate, what was left out, the cost."""
    if setup_failed or s.rate is None:
        rate = "no pass rate"
    else:
        rate = (
            f"pass rate <b>{s.rate:.3f}</b> ({whole(s.passed)}/{whole(s.counted)}), 95% "
            f"{s.lower:.3f} to {s.upper:.3f}"
        )
    parts = [
        f'<a href="#pass-rate">{rate}</a>',
        f"not counted: {whole(s.unavailable)} unavailable, {whole(s.inconclusive)} inconclusive",
    ]
    if s.cost is not None:
        parts.append(
            f'<a href="#cost">cost <b>{usd(s.cost["total"])}</b></a> '
            f"({usd(s.cost['per_case'])} per case)"
        )
    return f'<p class="glance">{_DOT.join(parts)}</p>'


def _no_context(s: Summary) -> str:
    """The note when cases failed `cites_source` for want of context (nothing otherwise)."""
    advice = s.no_context_advice
    if advice is None:
        return ""
    return f'<p class="warn">{esc(advice[0].upper() + advice[1:])}.</p>'


_FIRST_LIMIT = 10  # rows of the regressions and failing cases on the first screen


def _regressions(c: Comparison) -> str:
    """The regressed questions, a line each (the comparison in full is further down)."""
    if not c.regressed:
        return (
            f'<p class="muted">None: no question that passed in run {c.before.id} fails now. '
            '<a href="#comparison">The comparison</a></p>'
        )
    rows = "".join(
        f'<tr><td class="n">{now.position}</td><td>{badge(was.outcome, OUTCOMES)} \u2192 '
        f'{badge(now.outcome, OUTCOMES)}</td><td class="text">'
        f"{esc(one_line(now.question, CELL_LIMIT))}</td>"
        f'<td class="text">{esc(one_line(now.error or now.feedback, CELL_LIMIT))}</td></tr>'
        for was, now in c.regressed[:_FIRST_LIMIT]
    )
    more = len(c.regressed) - _FIRST_LIMIT
    return (
        '<table class="wide first"><tr><th class="n">#</th><th>then \u2192 now</th>'
        f"<th>question</th><th>feedback / error now</th></tr>{rows}</table>"
        + (
            f'<p class="muted">{whole(more)} more in <a href="#comparison">the comparison</a>.</p>'
            if more > 0
            else ""
        )
    )


def _failing_list(failing: Sequence[tuple[int, CaseRecord]]) -> str:
    """The cases that did not pass, a line each, linked to their cards further down."""
    if not failing:
        return '<p class="muted">None: every case passed.</p>'
    rows = []
    for i, c in failing[:_FIRST_LIMIT]:
        note = c.error if c.outcome in ("raised", "unavailable", "inconclusive") else c.feedback
        link = f'<a href="#case-{i}">{c.position}</a>'  # the first ones all have a card
        rows.append(
            f'<tr><td class="n">{link}</td><td>{badge(c.outcome, OUTCOMES)}</td>'
            f'<td class="text">{esc(one_line(c.question, CELL_LIMIT))}</td>'
            f'<td class="text">{prose(one_line(note or "", CELL_LIMIT))}</td></tr>'
        )
    more = len(failing) - _FIRST_LIMIT
    return (
        '<table class="wide first"><tr><th class="n">#</th><th>outcome</th><th>question</th>'
        f"<th>feedback / error</th></tr>{''.join(rows)}</table>"
        + (f'<p class="muted">{whole(more)} more; each' if more > 0 else '<p class="muted">Each')
        + ' with its answer, criteria and row in <a href="#failing-cases">'
        "the failing cases in full</a>.</p>"
    )


def _gates(
    s: Summary,
    setup_failed: bool,
    min_pass_rate: float | None,
    comparison: Comparison | None,
    alpha: float,
    corrected: dict[str, Any] | None = None,
    judge_warning: object = None,
) -> tuple[str, str]:
    """The gates the run was held to and whether each held: the exit status's reasons.

    With `corrected` (the run's `--calibration` figures) the pass-rate gate is held against
    the corrected lower bound, as the run was. Returns the one-line verdict for the page's
    header and the section's body.
    """
    rows: list[tuple[str, str, bool]] = []  # (gate, the figures against it, held)
    measured = not setup_failed and s.rate is not None
    if setup_failed:
        rows.append(
            (
                "the run measured something",
                "no answer was judged (a failure of the setup); no other gate applies",
                False,
            )
        )
    elif not measured:
        rows.append(
            (
                "the run measured something",
                "no case has a pass or fail outcome, so there is no pass rate",
                False,
            )
        )
    lower = number(corrected.get("lower")) if corrected is not None else None
    if min_pass_rate is not None and not setup_failed and lower is not None:
        assert corrected is not None
        rate = number(corrected.get("rate"))
        rows.append(
            (
                f"<code>--min-pass-rate {min_pass_rate:.3f}</code> with <code>--calibration "
                f"{esc(str(corrected.get('calibration_run')))}</code>: the pass rate corrected "
                "for the judge's errors has a 95% lower bound (the judge's uncertainty "
                "included) of at least this",
                f"corrected lower bound {lower:.3f} (corrected rate {fmt3(rate)}, observed "
                f"{fmt3(s.rate)}; judge sensitivity {fmt3(number(corrected.get('sensitivity')))}"
                f", specificity {fmt3(number(corrected.get('specificity')))}) "
                + (">=" if lower >= min_pass_rate else "&lt;")
                + f" {min_pass_rate:.3f}",
                measured and lower >= min_pass_rate,
            )
        )
    elif min_pass_rate is not None and not setup_failed:
        figures = (
            f"95% Wilson lower bound {s.lower:.3f} (pass rate {s.rate:.3f}, "
            f"{whole(s.passed)}/{whole(s.counted)}) "
            + (">=" if s.lower >= min_pass_rate else "&lt;")
            + f" {min_pass_rate:.3f}"
            if s.rate is not None
            else "no pass rate to hold against it"
        )
        rows.append(
            (
                f"<code>--min-pass-rate {min_pass_rate:.3f}</code>: the pass rate's 95% Wilson "
                "lower bound is at least this",
                figures,
                measured and s.lower >= min_pass_rate,
            )
        )
    if comparison is not None:
        c = comparison
        regressed = c.significant_regression(alpha)
        rows.append(
            (
                f"<code>--compare</code> run {c.before.id}, <code>--alpha {alpha:g}</code>: no "
                "significant regression (more regressions than improvements with exact "
                "McNemar p under alpha)",
                f"{whole(len(c.regressed))} regressed, {whole(len(c.improved))} improved; "
                f"p = {fmt_p(c.p_value)}",
                not regressed,
            )
        )
    warning = (
        f'<p class="warning"><b>Warning:</b> {prose(judge_warning)}</p>'
        if isinstance(judge_warning, str) and judge_warning
        else ""
    )
    verdict, body = gate_results(
        rows,
        "eval",
        "--min-pass-rate</code>, <code>--compare",
        status=4 if setup_failed else 1,
        intro=False,  # the verdict above the table says why the command exited as it did
    )
    return verdict, body + warning


def _trials(t: dict[str, Any]) -> str:
    """pass^k, pass@k, the rate per trial and the flips of a run with `--trials`."""
    k = t.get("k")

    def row(name: str, what: str, part: Any) -> str:
        part = part if isinstance(part, dict) else {}
        return (
            f'<tr><td>{name}</td><td>{what}</td><td class="n">{whole(part.get("cases") or 0)}'
            f'/{whole(t.get("counted") or 0)}</td><td class="n"><b>{fmt3(number(part.get("rate")))}'
            f'</b></td><td class="n">{fmt3(number(part.get("lower")))} to '
            f"{fmt3(number(part.get('upper')))}</td></tr>"
        )

    return (
        f"<p>The answer function ran {esc(str(k))} times per case, each answer judged on its "
        "own; a case passed only when every trial passed (pass^k), so the pass rate and the "
        "gate are pass^k's. One row per case below; its trials passed / counted in the "
        "<em>verdicts</em> column.</p>"
        '<table><tr><th></th><th>the case passed</th><th class="n">cases</th>'
        '<th class="n">rate</th><th class="n">95% interval</th></tr>'
        + row(f"pass^{esc(str(k))}", "every trial", t.get("pass_all"))
        + row(f"pass@{esc(str(k))}", "at least one trial", t.get("pass_any"))
        + "</table>"
        f"<p>Per trial: {fmt3(number(t.get('per_trial')))} of "
        f"{whole(t.get('trials_counted') or 0)} trials passed. "
        f"{whole(t.get('flipped') or 0)} of {counted(t.get('counted') or 0, 'case')} flipped "
        f"between trials; mean flip rate {fmt3(number(t.get('flip_rate')))} (the chance that "
        "two trials of a case disagree).</p>"
    )


def _comparison(c: Comparison) -> str:
    before = c.before

    def pairs(items: Sequence[tuple[CaseRecord, CaseRecord]], notes: bool) -> str:
        if not items:
            return '<p class="muted">None.</p>'
        rows = "".join(
            f'<tr><td class="n">{now.position}</td><td>{badge(was.outcome, OUTCOMES)}</td>'
            f'<td>{badge(now.outcome, OUTCOMES)}</td><td class="text">'
            f"{esc(one_line(now.question, CELL_LIMIT))}</td>"
            + (
                f'<td class="text">{esc(one_line(now.error or now.feedback, CELL_LIMIT * 2))}</td>'
                if notes
                else ""
            )
            + "</tr>"
            for was, now in items[:LISTED_LIMIT]
        )
        more = not_listed(len(items))
        head = (
            f'<tr><th class="n">#</th><th>run {before.id}</th><th>this run</th><th>question</th>'
            + ("<th>feedback / error now</th>" if notes else "")
            + "</tr>"
        )
        return f'<table class="wide">{head}{rows}</table>{more}'

    return (
        f"<p>Run {before.id} (started {esc(when(before.started_at))}, target "
        f"<code>{esc(before.target or '')}</code>, judge "
        f"<code>{esc(before.judge or 'column checks')}</code>), paired with this run by "
        "question.</p>"
        '<div class="figures">'
        f'<div class="figure"><div class="value">{whole(c.shared)}</div>'
        '<div class="label">questions judged in both runs</div></div>'
        f'<div class="figure"><div class="value">{whole(len(c.regressed))}</div>'
        '<div class="label">regressed (passed, now not)</div></div>'
        f'<div class="figure"><div class="value">{whole(len(c.improved))}</div>'
        '<div class="label">improved (failed, now passes)</div></div>'
        f'<div class="figure"><div class="value">{fmt_p(c.p_value)}</div>'
        '<div class="label">exact McNemar p</div></div></div>'
        + spend_line(c)
        + (
            f'<p class="muted">{whole(c.not_comparable)} shared questions were unavailable or '
            "inconclusive in one of the runs and are not compared.</p>"
            if c.not_comparable
            else ""
        )
        + "<h3>Regressed</h3>"
        + pairs(c.regressed, True)
        + "<h3>Improved</h3>"
        + pairs(c.improved, False)
    )


def _failing(failing: Sequence[tuple[int, CaseRecord]]) -> str:
    if not failing:
        return '<p class="muted">None: every case passed.</p>'
    shown = "".join(case_article(i, c) for i, c in failing[:DETAILED_LIMIT])
    more = (
        f'<p class="warn">{whole(len(failing) - DETAILED_LIMIT)} more failing cases are not '
        "shown in full here; all of them are in the table below.</p>"
        if len(failing) > DETAILED_LIMIT
        else ""
    )
    return (
        '<p class="muted">Cases that failed, raised, or could not be judged (unavailable, '
        f"inconclusive), with the answer (first {ANSWER_LIMIT:,} characters) and why.</p>"
        + shown
        + more
    )


def _all_cases(cases: Sequence[CaseRecord], failing: Sequence[tuple[int, CaseRecord]]) -> str:
    if not cases:
        return '<p class="muted">No case is stored.</p>'
    detailed = {i for i, _ in failing[:DETAILED_LIMIT]}
    rows = []
    priced = any(c.cost for c in cases)
    for i, c in enumerate(cases):
        number = f'<a href="#case-{i}">{c.position}</a>' if i in detailed else str(c.position)
        cost = f'<td class="n">{usd(total_cost(c.cost)) if c.cost else "-"}</td>' if priced else ""
        note = c.error if c.outcome in ("raised", "unavailable", "inconclusive") else c.feedback
        if c.outcome == "passed":
            note = ""
        rows.append(
            f'<tr><td class="n">{number}</td><td>{badge(c.outcome, OUTCOMES)}</td>'
            f'<td class="n">{f"{c.passes}/{c.judgements}" if c.judgements else "-"}</td>'
            f'<td class="n">{c.attempts}</td><td class="n">{c.corrections}</td>{cost}'
            f'<td class="text">{esc(one_line(c.question, CELL_LIMIT))}</td>'
            f'<td class="text">{esc(one_line(c.answer or "", CELL_LIMIT))}</td>'
            f'<td class="text">{prose(one_line(note or "", CELL_LIMIT))}</td></tr>'
        )
    return (
        f'<p class="muted small">Texts cut to {CELL_LIMIT} characters.</p>'
        '<table class="wide cases"><tr><th class="n">#</th><th>outcome</th>'
        '<th class="n">verdicts</th><th class="n">attempts</th><th class="n">corr.</th>'
        + ('<th class="n">cost</th>' if priced else "")
        + f"<th>question</th><th>answer</th><th>feedback / error</th></tr>{''.join(rows)}</table>"
    )
