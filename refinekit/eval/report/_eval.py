"""The report of an eval run (`refinekit eval --report`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from .._money import total as total_cost
from .._money import usd
from .._stats import wilson_interval
from .._summary import CONFIDENCE, Comparison, Summary, no_context_advice, summarise
from ..store import CaseRecord, RunInfo, RunStore
from ._cases import case_article
from ._charts import Point, history_svg
from ._html import (
    ANSWER_LIMIT,
    CELL_LIMIT,
    DETAILED_LIMIT,
    LISTED_LIMIT,
    OUTCOMES,
    badge,
    bar,
    count,
    esc,
    fmt3,
    fmt_p,
    gate_results,
    incomplete_note,
    number,
    one_line,
    page,
    recent,
    run_meta,
    section,
    toc,
    when,
    whole,
)

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
    run = store.run(run_id)
    if run.kind != "eval":
        raise ValueError(f"run {run_id} is a {run.kind} run, not an eval run")
    cases = store.cases(run_id)
    summary = summarise(cases)
    history = [
        r
        for r in store.runs(kind="eval", dataset=run.dataset)
        if r.status == "complete" or r.id == run.id
    ]
    failing = [(i, c) for i, c in enumerate(cases) if c.outcome != "passed"]
    setup_failed = bool(run.summary.get("setup_failed"))
    verdict, gates = _gates(summary, setup_failed, min_pass_rate, comparison, alpha)
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
        ("pass-rate", "Pass rate", _pass_rate(summary, setup_failed)),
        ("history", "Pass rate over the stored runs", _eval_history(run, summary, history)),
    ]
    if summary.repeated:
        sections.append(("consistency", "Judge consistency", _consistency(summary, cases)))
    sections += [
        ("criteria", "Per-criterion pass rates", _criteria(summary)),
        ("attempts", "Attempts and corrections per answer", _attempts(summary, cases)),
        ("cost", "Cost", _cost(run, summary, cases)),
    ]
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
        f"{whole(stored)} cases",
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
    if not s.no_context:
        return ""
    advice = no_context_advice(s.no_context, s.cases)
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
            f'<td class="text">{esc(one_line(note or "", CELL_LIMIT))}</td></tr>'
        )
    more = len(failing) - _FIRST_LIMIT
    return (
        '<table class="wide first"><tr><th class="n">#</th><th>outcome</th><th>question</th>'
        f"<th>feedback / error</th></tr>{''.join(rows)}</table>"
        + (f'<p class="muted">{whole(more)} more; each' if more > 0 else '<p class="muted">Each')
        + ' with its answer, criteria and row in <a href="#failing-cases">'
        "the failing cases in full</a>.</p>"
    )


def _how(summary: str, body: str) -> str:
    """A section's definitions, behind a disclosure."""
    return f'<details class="how"><summary>{summary}</summary>{body}</details>'


def _gates(
    s: Summary,
    setup_failed: bool,
    min_pass_rate: float | None,
    comparison: Comparison | None,
    alpha: float,
) -> tuple[str, str]:
    """The gates the run was held to and whether each held: the exit status's reasons.

    Returns the one-line verdict for the page's header and the section's body.
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
    if min_pass_rate is not None and not setup_failed:
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
    return gate_results(
        rows,
        "eval",
        "--min-pass-rate</code>, <code>--compare",
        status=4 if setup_failed else 1,
        intro=False,  # the verdict above the table says why the command exited as it did
    )


def _pass_rate(s: Summary, setup_failed: bool) -> str:
    if setup_failed:  # its rate of 0 would measure the setup, not the answers
        headline = (
            '<div class="headline"><span class="big">n/a</span><span class="interval muted">'
            f"No answer was judged: none of the {whole(s.cases)} cases reached a verdict"
            "</span></div>"
            '<p class="warn">Every case raised an error that is not a refused answer (a '
            "connection error, a timeout, a bug in the function) or found the judge "
            "unavailable: a failure of the setup, not a measurement. The run has no pass rate "
            "and no gate applied; the cases below say why. Fix the setup and run again.</p>"
        )
    elif s.rate is None:
        headline = (
            '<div class="headline"><span class="big">n/a</span><span class="interval muted">'
            f"none of the {whole(s.cases)} cases was answered and judged</span></div>"
        )
    else:
        headline = (
            f'<div class="headline"><span class="big">{s.rate:.3f}</span>'
            f'<span class="interval">95% Wilson interval <b>{s.lower:.3f}</b> to '
            f"<b>{s.upper:.3f}</b></span></div>"
        )
    how = (
        ""
        if setup_failed
        else _how(
            "How the pass rate is computed",
            f"<p>Pass rate = passed / (passed + failed + raised) = {whole(s.passed)} / "
            f"{whole(s.counted)}. A case whose answer function raised counts as failed: the user "
            "got no answer. The interval is the 95% Wilson score interval; a gate "
            "(<code>--min-pass-rate</code>) is held against its lower bound.</p>"
            f"<p>Not counted: {whole(s.unavailable)} unavailable (the judge could not judge) and "
            f"{whole(s.inconclusive)} inconclusive (the evidence could not support a verdict, or "
            "repeated verdicts split evenly): nothing was learnt about those answers.</p>",
        )
    )
    counts = {o: getattr(s, o) for o in OUTCOMES}
    total = max(1, s.cases)
    stack = "".join(
        f'<span class="{o}" style="width:{counts[o] / total * 100:.2f}%"></span>'
        for o in OUTCOMES
        if counts[o]
    )
    rows = "".join(
        f'<tr><td><span class="key {o}"></span>{o}</td><td class="n">{whole(counts[o])}</td>'
        f'<td class="n">{counts[o] / total:.3f}</td>'
        f"<td>{'counted' if o in ('passed', 'failed', 'raised') else 'not counted'}</td></tr>"
        for o in OUTCOMES
    )
    table = (
        '<table><tr><th>outcome</th><th class="n">cases</th><th class="n">share</th>'
        f"<th>in the pass rate</th></tr>{rows}"
        f'<tr><th>all</th><th class="n">{whole(s.cases)}</th><th></th><th></th></tr></table>'
    )
    return headline + f'<div class="stack">{stack}</div>' + table + how


def _eval_history(run: RunInfo, summary: Summary, history: Sequence[RunInfo]) -> str:
    shown = recent(history, run.id)
    points: list[Point] = []
    rows = []
    for r in shown:
        current = r.id == run.id
        lower: float | None
        upper: float | None
        if current:
            rate, lower, upper = summary.rate, summary.lower, summary.upper
            counted, passed = summary.counted, summary.passed
        else:
            rate = number(r.summary.get("rate"))
            lower = number(r.summary.get("lower"))
            upper = number(r.summary.get("upper"))
            passed = count(r.summary.get("passed"))
            counted = passed + count(r.summary.get("failed")) + count(r.summary.get("raised"))
        measured_nothing = bool(r.summary.get("setup_failed"))
        if measured_nothing:  # a failed setup: its stored rate of 0 measured no answer
            rate = None
        if rate is None:
            lower = upper = None
        interval = (
            f"{lower:.3f} to {upper:.3f}" if lower is not None and upper is not None else "n/a"
        )
        if rate is not None:
            points.append(
                Point(
                    r.id,
                    rate,
                    lower,
                    upper,
                    current,
                    f"run {r.id}: pass rate {rate:.3f} ({passed}/{counted}), 95% {interval}; "
                    f"target {r.target or '-'}, judge {r.judge or 'column checks'}",
                )
            )
        rows.append(
            f'<tr class="{"current" if current else "other"}"><td class="n">{r.id}'
            f"{' (this run)' if current else ''}</td><td>{esc(when(r.started_at))}</td>"
            f'<td class="n">{"nothing (setup failed)" if measured_nothing else fmt3(rate)}</td>'
            f'<td class="n">{interval}</td>'
            f'<td class="n">{passed}/{counted}</td><td class="text"><code>{esc(r.target or "")}'
            f'</code></td><td class="text"><code>{esc(r.judge or "column checks")}</code></td></tr>'
        )
    intro = _how(
        "What the chart shows",
        f"<p>Every complete eval run of this data file in the store ({whole(len(history))}"
        + (f", the last {len(shown)} shown" if len(shown) < len(history) else "")
        + "): the pass rate with its 95% interval; this run is marked in blue. Runs with "
        "another target or judge measure something else; the table says which is which.</p>",
    )
    chart = (
        history_svg(points, 0.0, 1.0, "pass rate")
        if points
        else '<p class="muted">No run has a pass rate yet.</p>'
    )
    table = (
        '<table class="wide"><tr><th class="n">run</th><th>started</th><th class="n">pass rate'
        '</th><th class="n">95% interval</th><th class="n">passed</th><th>target</th>'
        f"<th>judge</th></tr>{''.join(reversed(rows))}</table>"
    )
    return chart + intro + table


def _consistency(s: Summary, cases: Sequence[CaseRecord]) -> str:
    lower, upper = s.flip_interval
    flipped = [c for c in cases if c.judgements > 1 and c.flipped]
    rows = "".join(
        f'<tr><td class="n">{c.position}</td><td class="n">{c.passes}/{c.judgements}</td>'
        f'<td>{badge(c.outcome, OUTCOMES)}</td><td class="text">'
        f"{esc(one_line(c.question, CELL_LIMIT))}</td></tr>"
        for c in flipped[:LISTED_LIMIT]
    )
    more = (
        f'<p class="muted">{len(flipped) - LISTED_LIMIT} more not listed.</p>'
        if len(flipped) > LISTED_LIMIT
        else ""
    )
    table = (
        '<table><tr><th class="n">#</th><th class="n">verdicts passing</th><th>outcome</th>'
        f"<th>question</th></tr>{rows}</table>{more}"
        if flipped
        else ""
    )
    return (
        f'<div class="headline"><span class="big">{s.flipped / s.repeated:.3f}</span>'
        f'<span class="interval">flip rate, 95% interval {lower:.3f} to {upper:.3f}</span></div>'
        f"<p>{whole(s.flipped)} of {whole(s.repeated)} answers judged more than once got "
        "differing verdicts; each answer's outcome is the majority of its verdicts (an even "
        "split is inconclusive).</p>" + table
    )


def _criteria(s: Summary) -> str:
    if not s.criteria:
        return '<p class="muted">The verdicts carried no per-criterion results.</p>'
    rows = []
    for name, counts in sorted(s.criteria.items()):
        passed, failed = counts.get("pass", 0), counts.get("fail", 0)
        uncertain, skipped = counts.get("uncertain", 0), counts.get("skipped", 0)
        decided = passed + failed + uncertain
        rate = passed / decided if decided else None
        lower, upper = wilson_interval(passed, decided, CONFIDENCE)
        rows.append(
            f'<tr><td class="text"><code>{esc(name)}</code></td><td class="n">{whole(passed)}</td>'
            f'<td class="n">{whole(failed)}</td><td class="n">{whole(uncertain)}</td>'
            f'<td class="n">{whole(skipped)}</td><td class="n"><b>{fmt3(rate)}</b></td>'
            f'<td class="n">{fmt3(lower) if decided else "n/a"} to '
            f"{fmt3(upper) if decided else 'n/a'}</td><td>{bar(rate or 0.0)}</td></tr>"
        )
    return (
        '<table><tr><th>criterion</th><th class="n">pass</th><th class="n">fail</th>'
        '<th class="n">uncertain</th><th class="n">skipped</th><th class="n">pass rate</th>'
        f'<th class="n">95% interval</th><th></th></tr>{"".join(rows)}</table>'
        + _how(
            "How these are counted",
            "<p>From each case's first verdict. A criterion's pass rate counts the cases it was "
            "decided on (pass, fail or uncertain); skipped ones (not run, e.g. after an earlier "
            "failure) are left out.</p>",
        )
    )


def _distribution(values: Sequence[int], unit: str) -> str:
    counts = Counter(values)
    total = max(1, len(values))
    rows = "".join(
        f'<tr><td class="n">{k}</td><td class="n">{whole(n)}</td><td class="n">'
        f"{n / total:.3f}</td><td>{bar(n / total)}</td></tr>"
        for k, n in sorted(counts.items())
    )
    return (
        f'<table><tr><th class="n">{unit}</th><th class="n">answers</th><th class="n">share</th>'
        f"<th></th></tr>{rows}</table>"
    )


def _attempts(s: Summary, cases: Sequence[CaseRecord]) -> str:
    if not cases:
        return '<p class="muted">No case is stored.</p>'
    return (
        f"<p>Attempts: mean <b>{s.attempts_mean:.3f}</b>, max <b>{s.attempts_max}</b>.</p>"
        + _how(
            "What an attempt is",
            "<p>One attempt is an answer accepted at once (or a function without "
            "<code>@retry_on_low_quality</code>); each retry it made is one more.</p>",
        )
        + _distribution([c.attempts for c in cases], "attempts")
        + f"<p>Corrections (<code>@self_correct</code>): <b>{whole(s.corrections_total)}</b> in "
        f"all, max <b>{s.corrections_max}</b> per answer.</p>"
        + _distribution([c.corrections for c in cases], "corrections")
    )


def _cost(run: RunInfo, s: Summary, cases: Sequence[CaseRecord]) -> str:
    n = max(1, len(cases))
    rows = []
    total = {"model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for role, label in _ROLES:
        u = s.usage.get(role, {})
        for k in total:
            total[k] += u.get(k, 0)
        tokens = u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)
        rows.append(
            f'<tr><td>{label}</td><td class="n">{whole(u.get("model_calls", 0))}</td>'
            f'<td class="n">{whole(u.get("prompt_tokens", 0))}</td>'
            f'<td class="n">{whole(u.get("completion_tokens", 0))}</td>'
            f'<td class="n">{whole(tokens)}</td><td class="n">{tokens / n:.1f}</td></tr>'
        )
    all_tokens = total["prompt_tokens"] + total["completion_tokens"]
    rows.append(
        f'<tr><th>all</th><th class="n">{whole(total["model_calls"])}</th>'
        f'<th class="n">{whole(total["prompt_tokens"])}</th>'
        f'<th class="n">{whole(total["completion_tokens"])}</th><th class="n">{whole(all_tokens)}'
        f'</th><th class="n">{all_tokens / n:.1f}</th></tr>'
    )
    answer_s = sum(c.answer_seconds for c in cases)
    judge_s = sum(c.judge_seconds for c in cases)
    wall = (
        f"; the run itself took {run.finished_at - run.started_at:.3f} s from start to its last "
        "stop (including any pause before a resume)"
        if run.finished_at is not None
        else ""
    )
    waits = count(run.summary.get("rate_limit_waits"))
    return (
        _money(run, s)
        + "<p>Model calls and tokens as refinekit saw them (replies that carried usage).</p>"
        '<table><tr><th>role</th><th class="n">model calls</th><th class="n">prompt tokens</th>'
        '<th class="n">completion tokens</th><th class="n">tokens</th>'
        f'<th class="n">tokens per case</th></tr>{"".join(rows)}</table>'
        f"<p>Time: answer functions {answer_s:.3f} s, judging {judge_s:.3f} s, "
        f"<b>{s.seconds:.3f} s</b> in all over the cases (mean {s.seconds / n:.3f} s per case; "
        f"cases run concurrently, so this can exceed the run's wall time){wall}.</p>"
        + (f"<p>Rate limited: the run backed off {whole(waits)} times.</p>" if waits else "")
        + _judge_cache(cases)
    )


def _judge_cache(cases: Sequence[CaseRecord]) -> str:
    """What the judge cache saved (`--cache`), or nothing when the run did not use one."""
    counted = [c.judge_cache for c in cases if c.judge_cache]
    if not counted:
        return ""
    hits = sum(c.get("hits", 0) for c in counted)
    misses = sum(c.get("misses", 0) for c in counted)
    return (
        f"<p>Judge cache (<code>--cache</code>): <b>{whole(hits)}</b> of "
        f"{whole(hits + misses)} judge requests answered from the run store, "
        f"{whole(misses)} sent to the model.</p>"
    )


def _money(run: RunInfo, s: Summary) -> str:
    """What the run cost, with the prices it was given (nothing without prices)."""
    c = s.cost
    if c is None:
        return ""
    rows = [
        ("All", c["total"], "the answer function's calls and the run's judge"),
        ("Per case", c["per_case"], f"the mean over the {whole(c['priced'])} priced cases"),
        ("Answer", c["answer"], "the answer function's model calls, judges inside it included"),
        ("Judge", c["judge"], "the run's judge"),
        (
            "Retries and corrections",
            c["extra"],
            "the answer calls after each case's first (part of the answer's cost)",
        ),
    ]
    body = "".join(
        f'<tr><td>{label}</td><td class="n"><b>{usd(value)}</b></td><td>{note}</td></tr>'
        for label, value, note in rows
    )
    unpriced = count(c.get("unpriced"))
    prices = run.options.get("prices")
    priced_with = (
        "<p>Priced with <code>"
        + esc(json.dumps(prices, separators=(", ", ": ")))
        + "</code> (input, output per million tokens), the prices its latest session was "
        "given.</p>"
        if prices
        else ""
    )
    return (
        '<table><tr><th>cost</th><th class="n">amount</th><th></th></tr>'
        f"{body}</table>"
        + (
            f'<p class="muted">{whole(unpriced)} cases stored by a session without prices are '
            "not counted.</p>"
            if unpriced
            else ""
        )
        + priced_with
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
        more = (
            f'<p class="muted">{len(items) - LISTED_LIMIT} more not listed.</p>'
            if len(items) > LISTED_LIMIT
            else ""
        )
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
            f'<td class="text">{esc(one_line(note or "", CELL_LIMIT))}</td></tr>'
        )
    return (
        f'<p class="muted small">Texts cut to {CELL_LIMIT} characters.</p>'
        '<table class="wide cases"><tr><th class="n">#</th><th>outcome</th>'
        '<th class="n">verdicts</th><th class="n">attempts</th><th class="n">corr.</th>'
        + ('<th class="n">cost</th>' if priced else "")
        + f"<th>question</th><th>answer</th><th>feedback / error</th></tr>{''.join(rows)}</table>"
    )
