"""The figures of an eval run's report, each with its definitions behind a disclosure.

The pass rate and its history, judge consistency, criteria, attempts, cost and the judge cache.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from ..._core.numbers import usd
from .._stats import wilson_interval
from .._store import CaseRecord, RunInfo
from .._summary import CONFIDENCE, Summary
from ._charts import Point, history_svg
from ._html import (
    CELL_LIMIT,
    LISTED_LIMIT,
    OUTCOMES,
    badge,
    bar,
    count,
    counted,
    disclosure,
    esc,
    fmt3,
    not_listed,
    number,
    one_line,
    recent,
    when,
    whole,
)

__all__ = [
    "attempts_section",
    "consistency_section",
    "cost_section",
    "criteria_section",
    "eval_history_section",
    "judge_cache_section",
    "money_section",
    "pass_rate_section",
]

_DOT = " \u00b7 "
_ROLES = (
    ("answer", "answer model"),
    ("answer_judge", "judges inside the function"),
    ("judge", "the run's judge"),
)


def pass_rate_section(s: Summary, setup_failed: bool) -> str:
    if setup_failed:  # its rate of 0 would measure the setup, not the answers
        headline = (
            '<div class="headline"><span class="big">n/a</span><span class="interval muted">'
            f"No answer was judged: none of the {counted(s.cases, 'case')} reached a verdict"
            "</span></div>"
            '<p class="warn">Every case raised an error that is not a refused answer (a '
            "connection error, a timeout, a bug in the function) or found the judge "
            "unavailable: a failure of the setup, not a measurement. The run has no pass rate "
            "and no gate applied; the cases below say why. Fix the setup and run again.</p>"
        )
    elif s.rate is None:
        headline = (
            '<div class="headline"><span class="big">n/a</span><span class="interval muted">'
            f"none of the {counted(s.cases, 'case')} was answered and judged</span></div>"
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
        else disclosure(
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


def eval_history_section(run: RunInfo, summary: Summary, history: Sequence[RunInfo]) -> str:
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
    intro = disclosure(
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


def consistency_section(s: Summary, cases: Sequence[CaseRecord]) -> str:
    lower, upper = s.flip_interval
    flipped = [c for c in cases if c.judgements > 1 and c.flipped]
    rows = "".join(
        f'<tr><td class="n">{c.position}</td><td class="n">{c.passes}/{c.judgements}</td>'
        f'<td>{badge(c.outcome, OUTCOMES)}</td><td class="text">'
        f"{esc(one_line(c.question, CELL_LIMIT))}</td></tr>"
        for c in flipped[:LISTED_LIMIT]
    )
    more = not_listed(len(flipped))
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


def criteria_section(s: Summary) -> str:
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
        + disclosure(
            "How these are counted",
            "<p>From each case's first verdict. A criterion's pass rate counts the cases it was "
            "decided on (pass, fail or uncertain); skipped ones (not run, e.g. after an earlier "
            "failure) are left out.</p>",
        )
    )


def distribution(values: Sequence[int], unit: str) -> str:
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


def attempts_section(s: Summary, cases: Sequence[CaseRecord]) -> str:
    if not cases:
        return '<p class="muted">No case is stored.</p>'
    return (
        f"<p>Attempts: mean <b>{s.attempts_mean:.3f}</b>, max <b>{s.attempts_max}</b>.</p>"
        + disclosure(
            "What an attempt is",
            "<p>One attempt is an answer accepted at once (or a function without "
            "<code>@retry_on_low_quality</code>); each retry it made is one more.</p>",
        )
        + distribution([c.attempts for c in cases], "attempts")
        + f"<p>Corrections (<code>@self_correct</code>): <b>{whole(s.corrections_total)}</b> in "
        f"all, max <b>{s.corrections_max}</b> per answer.</p>"
        + distribution([c.corrections for c in cases], "corrections")
    )


def cost_section(run: RunInfo, s: Summary, cases: Sequence[CaseRecord]) -> str:
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
        money_section(run, s)
        + "<p>Model calls and tokens as refinekit saw them (replies that carried usage).</p>"
        '<table><tr><th>role</th><th class="n">model calls</th><th class="n">prompt tokens</th>'
        '<th class="n">completion tokens</th><th class="n">tokens</th>'
        f'<th class="n">tokens per case</th></tr>{"".join(rows)}</table>'
        f"<p>Time: answer functions {answer_s:.3f} s, judging {judge_s:.3f} s, "
        f"<b>{s.seconds:.3f} s</b> in all over the cases (mean {s.seconds / n:.3f} s per case; "
        f"cases run concurrently, so this can exceed the run's wall time){wall}.</p>"
        + (f"<p>Rate limited: the run backed off {whole(waits)} times.</p>" if waits else "")
        + judge_cache_section(cases)
        + batch_section(run)
    )


def batch_section(run: RunInfo) -> str:
    """What the provider's batch API did for the run (`--batch`), or nothing without it."""
    b = run.summary.get("batch")
    if not isinstance(b, dict):
        return ""
    saved = b.get("saved")
    batches = count(b.get("batches"))
    return (
        f"<p>Batched (<code>--batch</code>): the run judge's requests went through the "
        f"provider's batch API, <b>{whole(count(b.get('items')))}</b> requests in "
        f"{whole(batches)} {'batch' if batches == 1 else 'batches'}; "
        f"{whole(count(b.get('direct')))} that a "
        "batch could not answer were sent directly"
        + ("" if not isinstance(saved, float) else f"; the batch price saved {usd(saved)}")
        + ".</p>"
    )


def judge_cache_section(cases: Sequence[CaseRecord]) -> str:
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


def money_section(run: RunInfo, s: Summary) -> str:
    """What the run cost, with the prices it was given (nothing without prices)."""
    c = s.cost
    if c is None:
        return ""
    rows = [
        ("All", c["total"], "the answer function's calls and the run's judge"),
        ("Per case", c["per_case"], f"the mean over the {whole(c['priced'])} priced cases"),
        ("Per passing case", c.get("per_pass"), "all over the priced cases that passed"),
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
        if value is not None
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
            f'<p class="muted">{counted(unpriced, "case")} stored by a session without prices '
            f"{'is' if unpriced == 1 else 'are'} not counted.</p>"
            if unpriced
            else ""
        )
        + priced_with
    )
