"""The report of a calibrate run (`refinekit calibrate --report`)."""

from __future__ import annotations

from collections.abc import Sequence

from .._calibration import Calibration
from .._stats import wilson_interval
from .._store import CaseRecord, RunInfo, RunStore
from .._summary import CONFIDENCE
from ._cascade import cascade_section
from ._cases import case_article
from ._charts import Point, history_svg, reliability_svg
from ._html import (
    CELL_LIMIT,
    DETAILED_LIMIT,
    LISTED_LIMIT,
    OUTCOMES,
    badge,
    count,
    counted,
    esc,
    fmt3,
    gate_results,
    incomplete_note,
    not_listed,
    number,
    one_line,
    page,
    prose,
    recent,
    run_meta,
    section,
    stored_run,
    toc,
    when,
    whole,
)

__all__ = ["calibration_report"]


def calibration_report(
    store: RunStore,
    run_id: int,
    calibration: Calibration,
    *,
    min_kappa: float | None = None,
) -> str:
    """The HTML report of a stored `refinekit calibrate` run.

    Args:
        store: The run store holding the run.
        run_id: The run's id.
        calibration: The run's figures, as `calibrate` computed them.
        min_kappa: The kappa gate (`--min-kappa`), when one was asked for.

    Returns:
        One self-contained HTML5 document.

    Raises:
        RunStoreError: No run has this id.
        ValueError: The run is not a calibrate run.
    """
    run, cases, history = stored_run(store, run_id, "calibrate")
    c = calibration
    judged = [
        (i, case)
        for i, case in enumerate(cases)
        if case.outcome in ("passed", "failed") and case.label is not None
    ]
    wrong_pass = [(i, x) for i, x in judged if x.outcome == "passed" and x.label != "pass"]
    wrong_fail = [(i, x) for i, x in judged if x.outcome == "failed" and x.label == "pass"]
    left_out = [x for x in cases if x.outcome not in ("passed", "failed")]
    setup_failed = bool(run.summary.get("setup_failed"))
    verdict, gates = _gates(c, setup_failed, min_kappa)
    sections = [
        ("gates", "Gates", gates),
        ("agreement", "Agreement with people", _agreement(c)),
        *([("panel", "Panel members", _panel(c))] if c.panel is not None else []),
        *(
            [("cascade", "Cascade levels", cascade_section(c.cascade))]
            if c.cascade is not None
            else []
        ),
        ("bias", "Bias checks", _bias(c)),
        ("reliability", "Reliability diagram", _reliability(c)),
        ("thresholds", "Recommended thresholds", _thresholds(c)),
        ("history", "Kappa over the stored runs", _kappa_history(run, c, history)),
        (
            "disagreements",
            f"Disagreements ({len(wrong_pass) + len(wrong_fail)})",
            _disagreements(wrong_pass, wrong_fail),
        ),
    ]
    if left_out:
        sections.append(("not-judged", f"Not judged ({len(left_out)})", _not_judged(left_out)))
    heading = (
        f"<header><h1>refinekit calibrate \u2014 run {run.id}</h1>"
        + run_meta(
            run,
            [
                (
                    "Items",
                    f"{whole(len(cases))} stored, {whole(c.items)} judged and labelled"
                    + (
                        f" ({whole(c.unavailable)} unavailable and {whole(c.inconclusive)} "
                        "inconclusive left out of every figure)"
                        if c.unavailable or c.inconclusive
                        else ""
                    ),
                )
            ],
        )
        + incomplete_note(run, len(cases))
        + verdict
        + toc([(anchor, title) for anchor, title, _ in sections])
        + "</header>"
    )
    body = "\n".join(section(anchor, title, content) for anchor, title, content in sections)
    return page(f"refinekit calibrate, run {run.id}", heading, body)


def _gates(c: Calibration, setup_failed: bool, min_kappa: float | None) -> tuple[str, str]:
    rows: list[tuple[str, str, bool]] = []
    if setup_failed or c.items == 0:
        why = (
            "the judge gave no verdict on any item (a failure of the setup)"
            if setup_failed
            else "no item got a pass or fail verdict, so there is no agreement to measure"
        )
        rows.append(("the run measured something", why, False))
    if min_kappa is not None and not setup_failed:
        kappa = c.kappa
        if kappa is None:
            figures = "no kappa: no item was judged"
        else:
            sign = ">=" if kappa >= min_kappa else "&lt;"
            figures = (
                f"Cohen&#x27;s kappa {kappa:.3f} {sign} {min_kappa:.3f}, over {whole(c.items)} "
                "items"
            )
        rows.append(
            (
                f"<code>--min-kappa {min_kappa:.3f}</code>: the judge agrees with people at "
                "least this far, beyond chance",
                figures,
                kappa is not None and kappa >= min_kappa,
            )
        )
    return gate_results(rows, "calibrate", "--min-kappa", status=4 if setup_failed else 1)


def _rate_figure(value: float | None, label: str, hits: int, total: int) -> str:
    interval = ""
    if value is not None and total:
        lower, upper = wilson_interval(hits, total, CONFIDENCE)
        interval = f"<br>{hits}/{total}, 95% {lower:.3f} to {upper:.3f}"
    return (
        f'<div class="figure"><div class="value">{fmt3(value)}</div>'
        f'<div class="label">{label}{interval}</div></div>'
    )


def _agreement(c: Calibration) -> str:
    judge_fails = c.both_fail + c.judge_fail_only
    human_fails = c.both_fail + c.human_fail_only
    matrix = (
        '<table><tr><th></th><th class="n">people pass</th><th class="n">people fail</th>'
        '<th class="n">all</th></tr>'
        f'<tr><th>judge pass</th><td class="n agree">{whole(c.both_pass)}</td>'
        f'<td class="n disagree">{whole(c.human_fail_only)}</td>'
        f'<td class="n">{whole(c.both_pass + c.human_fail_only)}</td></tr>'
        f'<tr><th>judge fail</th><td class="n disagree">{whole(c.judge_fail_only)}</td>'
        f'<td class="n agree">{whole(c.both_fail)}</td><td class="n">{whole(judge_fails)}</td></tr>'
        f'<tr><th>all</th><td class="n">{whole(c.both_pass + c.judge_fail_only)}</td>'
        f'<td class="n">{whole(human_fails)}</td><td class="n">{whole(c.items)}</td></tr></table>'
    )
    figures = (
        '<div class="figures">'
        + _rate_figure(c.accuracy, "accuracy (agreement)", c.both_fail + c.both_pass, c.items)
        + _rate_figure(c.precision_fail, "precision on failures", c.both_fail, judge_fails)
        + _rate_figure(c.recall_fail, "recall on failures", c.both_fail, human_fails)
        + f'<div class="figure"><div class="value">{fmt3(c.kappa)}</div>'
        '<div class="label">Cohen\'s kappa<br>agreement corrected for chance'
        + (
            f"<br>95% {c.kappa_lower:.3f} to {c.kappa_upper:.3f}"
            if c.kappa_lower is not None and c.kappa_upper is not None
            else ""
        )
        + "</div></div>"
        + _rate_figure(
            c.sensitivity,
            "sensitivity<br>of people's passes, the judge's",
            c.both_pass,
            c.both_pass + c.judge_fail_only,
        )
        + _rate_figure(
            c.specificity,
            "specificity<br>of people's failures, the judge's",
            c.both_fail,
            c.both_fail + c.human_fail_only,
        )
        + "</div>"
    )
    return (
        "<p>Failures are the positive class: precision on failures is the share of the "
        "judge's failures that people failed too; recall on failures, the share of people's "
        "failures the judge caught.</p>" + matrix + figures
    )


_ADDS_NOTHING = '<span class="badge fail">adds nothing</span>'
_WARNING = '<span class="badge fail">warning</span>'


def _panel(c: Calibration) -> str:
    """Each member's agreement with people, each pair's with each other, what adds nothing."""
    p = c.panel
    assert p is not None
    rows = "".join(
        f'<tr><td>{esc(m.name)}</td><td class="n">{whole(m.items)}</td>'
        f'<td class="n">{whole(m.abstained)}</td><td class="n">{fmt3(m.agreement)}</td>'
        f'<td class="n">{fmt3(m.kappa)}</td><td class="n">{fmt3(m.kappa_lower)}</td>'
        f'<td class="n">{fmt3(m.kappa_without)}</td>'
        f"<td>{_ADDS_NOTHING if m.adds_nothing else ''}</td></tr>"
        for m in p.members
    )
    pairs = "".join(
        f"<tr><td>{esc(x.first)}</td><td>{esc(x.second)}</td>"
        f'<td class="n">{whole(x.items)}</td><td class="n">{fmt3(x.agreement)}</td>'
        f'<td class="n">{fmt3(x.kappa)}</td></tr>'
        for x in p.pairs
    )
    nothing = (
        "<p>Members that add nothing (the panel agrees with people as well or better "
        f"without them): {esc(', '.join(p.adds_nothing))}.</p>"
        if p.adds_nothing
        else "<p>Every member adds agreement: without any one, the panel agrees with "
        "people less.</p>"
    )
    return (
        f"<p>The panel ({esc(p.rule)}, quorum {whole(p.quorum)}) has kappa {fmt3(p.kappa)}. "
        "Every member voted on every item (a calibration runs them all). "
        "<em>panel without it</em>: the panel's kappa when that member's votes are taken "
        "away and the rest decide by the same rule.</p>"
        '<table><tr><th>member</th><th class="n">votes</th><th class="n">abstained</th>'
        '<th class="n">agreement</th><th class="n">kappa</th><th class="n">95% lower</th>'
        '<th class="n">panel without it</th><th></th></tr>'
        + rows
        + "</table>"
        + (
            "<h3>Members against each other</h3><table><tr><th>member</th><th>member</th>"
            '<th class="n">items</th><th class="n">agreement</th><th class="n">kappa</th></tr>'
            + pairs
            + "</table>"
            if pairs
            else ""
        )
        + nothing
    )


def _bias(c: Calibration) -> str:
    """Agreement by answer length, position consistency, self-judged answers, the warnings."""
    parts: list[str] = []
    if c.length_bands:
        rows = "".join(
            f'<tr><td>{esc(b.band)}</td><td class="n">{whole(b.shortest)} to '
            f'{whole(b.longest)}</td><td class="n">{whole(b.items)}</td>'
            f'<td class="n">{b.people_pass:.3f}</td><td class="n">{b.judge_pass:.3f}</td>'
            f'<td class="n">{b.agreement:.3f}</td><td class="n">{fmt3(b.kappa)}</td></tr>'
            for b in c.length_bands
        )
        parts.append(
            "<h3>By answer length (verbosity)</h3>"
            '<table><tr><th>band</th><th class="n">characters</th><th class="n">items</th>'
            '<th class="n">people pass</th><th class="n">judge passes</th>'
            '<th class="n">agreement</th><th class="n">kappa</th></tr>' + rows + "</table>"
        )
    else:
        parts.append("<p>Agreement by answer length needs at least 9 judged items.</p>")
    for p in c.position:
        parts.append(
            f"<p>Position consistency of {esc(p.judge)}: {whole(p.consistent)} of "
            f"{whole(p.items)} votes survived swapping the two answers ({p.rate:.3f}, 95% "
            f"{p.lower:.3f} to {p.upper:.3f}).</p>"
        )
    parts.append(
        f"<p>Answers judged by the model that wrote them: {whole(c.self_judged)}"
        + (f" ({esc(', '.join(c.self_judge_models))})" if c.self_judge_models else "")
        + ".</p>"
    )
    if c.warnings:
        parts.append(
            '<ul class="warnings">'
            + "".join(f"<li>{_WARNING} {prose(w)}</li>" for w in c.warnings)
            + "</ul>"
        )
    else:
        parts.append("<p>No bias check warned.</p>")
    return "".join(parts)


def _reliability(c: Calibration) -> str:
    if c.reliability is None:
        return (
            f"<p>The judge gave no probabilities: {whole(c.with_probability)} of "
            f"{counted(c.items, 'verdict')} carried one. A reliability diagram, the expected "
            "calibration error and thresholds need one on every verdict (a criteria judge on an "
            "endpoint that returns logprobs gives them).</p>"
        )
    rows = "".join(
        f'<tr><td class="n">{b.lower:.3f} to {b.upper:.3f}</td><td class="n">{whole(b.count)}'
        f'</td><td class="n">{b.mean_probability:.3f}</td><td class="n">{b.observed_rate:.3f}'
        f'</td><td class="n">{b.observed_rate - b.mean_probability:+.3f}</td></tr>'
        for b in c.reliability
    )
    return (
        "<p>Each bin of the judge's probability that an answer passes: the bar and the dot show "
        "the share people passed, the dot sits at the bin's mean probability and its size "
        "grows with the number of items. On the dashed diagonal the judge is perfectly "
        "calibrated; a red line is the gap.</p>"
        f'<div class="side">{reliability_svg(c.reliability)}<div>'
        f"<p>Expected calibration error: <b>{fmt3(c.ece)}</b> (0 is perfect): the gaps, "
        "weighted by the bins' items.</p><table><tr><th "
        'class="n">bin</th><th class="n">items</th><th class="n">mean probability</th>'
        '<th class="n">people passed</th><th class="n">gap</th></tr>'
        f"{rows}</table></div></div>"
    )


def _thresholds(c: Calibration) -> str:
    t = c.thresholds
    if t is None:
        return (
            '<p class="muted">No thresholds: they need a probability on every verdict, and the '
            "judge gave none (or not on every verdict).</p>"
        )
    rows = []
    if t.pass_at is None:
        rows.append(
            '<tr><th>pass</th><td colspan="4">no threshold keeps wrong passes that low</td></tr>'
        )
    else:
        rows.append(
            f'<tr><th>pass</th><td class="n">p &ge; {t.pass_at:.3f}</td>'
            f'<td class="n">{whole(t.passes)}</td><td class="n">{whole(t.wrong_passes)} failed by '
            f'people</td><td class="n">{fmt3(t.pass_error_upper)}</td></tr>'
        )
    if t.fail_at is None:
        rows.append(
            '<tr><th>fail</th><td colspan="4">no threshold keeps wrong fails that low</td></tr>'
        )
    else:
        rows.append(
            f'<tr><th>fail</th><td class="n">p &le; {t.fail_at:.3f}</td>'
            f'<td class="n">{whole(t.fails)}</td><td class="n">{whole(t.wrong_fails)} passed by '
            f'people</td><td class="n">{fmt3(t.fail_error_upper)}</td></tr>'
        )
    share = t.uncertain / c.items if c.items else 0.0
    criterion = (
        f"<p>As a criterion: <code>Criterion(..., pass_at={t.pass_at:.3f}, "
        f"fail_at={t.fail_at:.3f})</code></p>"
        if t.pass_at is not None and t.fail_at is not None
        else ""
    )
    return (
        f"<p>At most {t.target_error:.3f} wrong decisions on each side "
        "(<code>--target-error</code>); in between, an answer is uncertain, for a person to "
        "look at.</p>"
        '<table><tr><th>side</th><th class="n">threshold</th><th class="n">items</th>'
        '<th class="n">wrong</th><th class="n">95% upper bound of the error</th></tr>'
        f"{''.join(rows)}</table>"
        f'<div class="figures"><div class="figure"><div class="value">{whole(t.uncertain)}</div>'
        f'<div class="label">uncertain items ({share:.3f} of {whole(c.items)})</div></div></div>'
        + criterion
    )


def _kappa_history(run: RunInfo, c: Calibration, history: Sequence[RunInfo]) -> str:
    shown = recent(history, run.id)
    points: list[Point] = []
    rows = []
    for r in shown:
        current = r.id == run.id
        if current:
            kappa, accuracy, ece, items = c.kappa, c.accuracy, c.ece, c.items
        else:
            kappa = number(r.summary.get("kappa"))
            accuracy = number(r.summary.get("accuracy"))
            ece = number(r.summary.get("ece"))
            items = count(r.summary.get("items"))
        if kappa is not None:
            points.append(
                Point(
                    r.id,
                    kappa,
                    None,
                    None,
                    current,
                    f"run {r.id}: kappa {kappa:.3f} over {counted(items, 'item')}; "
                    f"judge {r.judge or '-'}",
                )
            )
        rows.append(
            f'<tr class="{"current" if current else "other"}"><td class="n">{r.id}'
            f"{' (this run)' if current else ''}</td><td>{esc(when(r.started_at))}</td>"
            f'<td class="n">{whole(items)}</td><td class="n">{fmt3(accuracy)}</td>'
            f'<td class="n">{fmt3(kappa)}</td><td class="n">{fmt3(ece)}</td>'
            f'<td class="text"><code>{esc(r.judge or "")}</code></td></tr>'
        )
    low = -1.0 if any(p.value < 0 for p in points) else 0.0
    chart = (
        history_svg(points, low, 1.0, "Cohen's kappa")
        if points
        else '<p class="muted">No run has a kappa yet.</p>'
    )
    intro = (
        f"<p>Every complete calibrate run of this labelled file in the store "
        f"({whole(len(history))}"
        + (f", the last {len(shown)} shown" if len(shown) < len(history) else "")
        + "); this run is marked in blue.</p>"
    )
    table = (
        '<table class="wide"><tr><th class="n">run</th><th>started</th><th class="n">items</th>'
        '<th class="n">accuracy</th><th class="n">kappa</th><th class="n">ECE</th>'
        f"<th>judge</th></tr>{''.join(reversed(rows))}</table>"
    )
    return intro + chart + table


def _disagreements(
    wrong_pass: Sequence[tuple[int, CaseRecord]], wrong_fail: Sequence[tuple[int, CaseRecord]]
) -> str:
    if not wrong_pass and not wrong_fail:
        return '<p class="muted">None: the judge agreed with people on every judged item.</p>'
    out = []
    for title, items, label in (
        ("The judge passed, people failed", wrong_pass, "fail"),
        ("The judge failed, people passed", wrong_fail, "pass"),
    ):
        out.append(f"<h3>{title} ({len(items)})</h3>")
        if not items:
            out.append('<p class="muted">None.</p>')
            continue
        out.extend(case_article(i, x, label) for i, x in items[:DETAILED_LIMIT])
        if len(items) > DETAILED_LIMIT:
            out.append(
                f'<p class="warn">{whole(len(items) - DETAILED_LIMIT)} more are not shown.</p>'
            )
    return "".join(out)


def _not_judged(cases: Sequence[CaseRecord]) -> str:
    rows = "".join(
        f'<tr><td class="n">{x.position}</td><td>{badge(x.outcome, OUTCOMES)}</td>'
        f'<td class="text">{esc(one_line(x.question, CELL_LIMIT))}</td>'
        f'<td class="text">{esc(one_line(x.error or "", CELL_LIMIT * 2))}</td></tr>'
        for x in cases[:LISTED_LIMIT]
    )
    more = not_listed(len(cases))
    return (
        "<p>Items the judge could not judge; they are left out of every figure.</p>"
        '<table class="wide"><tr><th class="n">#</th><th>outcome</th><th>question</th>'
        f"<th>why</th></tr>{rows}</table>{more}"
    )
