"""Self-contained HTML reports of stored runs: `eval --report` and `calibrate --report`.

Each report is one HTML5 file that loads nothing: an inline style sheet, charts as inline
SVG, no script, no font or image by URL, and a Content-Security-Policy that forbids fetching
anything should a later edit try to. Every piece of user and model text (questions, answers,
feedback, errors, row values, file paths, target and judge names) passes through
`html.escape(..., quote=True)`; attributes carry only numbers and fixed words, and no user
text goes into the style sheet. Long texts are shortened so a run of thousands of cases still
makes a file of reasonable size.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._calibration import Calibration
from .._runner import CONFIDENCE, Comparison, Summary, summarise
from .._runstore import CaseRecord, RunInfo, RunStore
from .._stats import ReliabilityBin, wilson_interval

__all__ = ["calibration_report", "eval_report"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
ANSWER_LIMIT = 1500  # characters of an answer shown in a case's details
TEXT_LIMIT = 1500  # characters of a question shown in a case's details
NOTE_LIMIT = 2000  # characters of feedback or an error
VALUE_LIMIT = 300  # characters of a row value
CELL_LIMIT = 120  # characters of a text in the all-cases table
DETAILED_LIMIT = 200  # cases shown in full in a list of failing cases or disagreements
LISTED_LIMIT = 200  # rows of a list of regressions, improvements, flips
HISTORY_LIMIT = 60  # stored runs in a history chart

_ROLES = (
    ("answer", "answer model"),
    ("answer_judge", "judges inside the function"),
    ("judge", "the run's judge"),
)
_OUTCOMES = ("passed", "failed", "raised", "unavailable", "inconclusive")
_STATUSES = ("complete", "incomplete", "running")
_CRITERION_OUTCOMES = ("pass", "fail", "uncertain", "skipped")
_DOT = " \u00b7 "
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_STYLE = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d8dee4;--panel:#f6f8fa;--accent:#0969da;
--passed:#1a7f37;--failed:#cf222e;--raised:#bc4c00;--unavailable:#6e7781;--inconclusive:#8250df}
*{box-sizing:border-box}
html{background:#fff}
body{margin:0;color:var(--fg);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 32px 56px}
h1{font-size:1.65rem;margin:0 0 .2rem}
h2{font-size:1.2rem;margin:2.2rem 0 .7rem;padding-bottom:.3rem;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:0 0 .4rem}
h4{font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);
margin:.9rem 0 .25rem}
p{margin:.45rem 0}
code{font:13px ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;background:var(--panel);
padding:.05rem .3rem;border-radius:4px}
a{color:var(--accent);text-decoration:none}
.muted{color:var(--muted)}
.small{font-size:.85rem}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1.2rem;margin:1rem 0;
font-size:.9rem}
dl.meta dt{color:var(--muted)}
dl.meta dd{margin:0;overflow-wrap:anywhere}
nav.toc{display:flex;flex-wrap:wrap;gap:.15rem 1.1rem;font-size:.88rem;margin:.6rem 0 0}
nav.toc a{white-space:nowrap}
.headline{display:flex;align-items:baseline;gap:1.2rem;flex-wrap:wrap;margin:.3rem 0}
.big{font-size:2.7rem;font-weight:700;font-variant-numeric:tabular-nums;line-height:1.1}
.interval{font-size:1.1rem}
.figures{display:flex;flex-wrap:wrap;gap:.8rem;margin:.6rem 0}
.figure{border:1px solid var(--line);border-radius:8px;padding:.55rem .9rem;min-width:12rem}
.figure .value{font-size:1.6rem;font-weight:700;font-variant-numeric:tabular-nums}
.figure .label{font-size:.8rem;color:var(--muted)}
.warn{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:.5rem .8rem;
margin:.8rem 0}
table{border-collapse:collapse;margin:.5rem 0;font-size:.88rem}
th,td{padding:.3rem .6rem;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--panel);font-weight:600}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.wide{width:100%}
td.text{overflow-wrap:anywhere;min-width:9rem}
table.cases{font-size:.82rem}
table.cases td.text{width:30%}
tr.current td{background:#ddf4ff}
td.agree{background:#dafbe1}
td.disagree{background:#ffebe9}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;background:var(--panel);
border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem;
font:13px/1.45 ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace}
.badge{display:inline-block;padding:0 .5rem;border-radius:999px;font-size:.78rem;
font-weight:600;color:#fff;background:var(--unavailable);white-space:nowrap}
.badge.passed,.badge.complete,.badge.pass{background:var(--passed)}
.badge.failed,.badge.fail{background:var(--failed)}
.badge.raised,.badge.incomplete{background:var(--raised)}
.badge.inconclusive,.badge.uncertain{background:var(--inconclusive)}
.bar{display:inline-block;width:170px;height:.7rem;background:#eaeef2;border-radius:3px;
vertical-align:middle;overflow:hidden}
.bar>span{display:block;height:100%;background:var(--accent)}
.stack{display:flex;height:16px;border-radius:4px;overflow:hidden;margin:.7rem 0;max-width:680px;
background:#eaeef2}
.stack>span{display:block;height:100%}
.stack>.passed,.key.passed{background:var(--passed)}
.stack>.failed,.key.failed{background:var(--failed)}
.stack>.raised,.key.raised{background:var(--raised)}
.stack>.unavailable,.key.unavailable{background:var(--unavailable)}
.stack>.inconclusive,.key.inconclusive{background:var(--inconclusive)}
.key{display:inline-block;width:.7rem;height:.7rem;border-radius:2px;margin-right:.35rem}
article.case{border:1px solid var(--line);border-left:5px solid var(--failed);border-radius:6px;
padding:.8rem 1rem;margin:.9rem 0}
article.case.raised{border-left-color:var(--raised)}
article.case.unavailable{border-left-color:var(--unavailable)}
article.case.inconclusive{border-left-color:var(--inconclusive)}
article.case.passed{border-left-color:var(--passed)}
.facts{font-size:.85rem;color:var(--muted);margin:.1rem 0 .3rem}
.facts b{color:var(--fg);font-weight:600}
details{margin:.5rem 0}
summary{cursor:pointer;color:var(--muted);font-size:.85rem}
.side{display:flex;flex-wrap:wrap;gap:.5rem 2rem;align-items:flex-start}
.side>div{flex:1 1 20rem;min-width:0}
svg{display:block;max-width:100%;height:auto;margin:.4rem 0}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#59636e}
svg .grid{stroke:#e4e8ec;stroke-width:1}
svg .axis{stroke:#8c959f;stroke-width:1}
svg .trend{fill:none;stroke:#c2cad3;stroke-width:1.5}
svg .ci{stroke:#6e7781;stroke-width:1.5}
svg .pt{fill:#6e7781}
svg .cur .ci{stroke:#0969da;stroke-width:2.5}
svg .cur .pt{fill:#0969da}
svg .cur text{fill:#0969da;font-weight:700}
svg .diag{stroke:#8c959f;stroke-dasharray:5 4}
svg .bin{fill:#ddf4ff;stroke:#54aeff}
svg .gap{stroke:#cf222e;stroke-width:1.5}
svg .obs{fill:#0969da;stroke:#fff;stroke-width:1}
svg text.count{fill:#0550ae;font-weight:600}
footer{margin-top:3rem;padding-top:.6rem;border-top:1px solid var(--line);color:var(--muted);
font-size:.8rem}
@media print{main{max-width:none;padding:0}article.case{break-inside:avoid}}
"""


# text


def _e(value: object) -> str:
    """`value` as HTML text: quotes escaped, control characters and lone surrogates made safe."""
    text = value if isinstance(value, str) else str(value)
    text = _CONTROL.sub("\ufffd", text)
    text = text.encode("utf-8", "replace").decode("utf-8")
    return html.escape(text, quote=True)


def _short(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 [{len(text) - limit:,} more characters]"


def _line(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(1, limit - 1)] + "\u2026"


def _f(value: float | None) -> str:
    """A number to 3 decimals, or n/a."""
    return "n/a" if value is None else f"{value:.3f}"


def _p(value: float) -> str:
    """A p-value to 3 decimals."""
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _int(value: int) -> str:
    return f"{value:,}"


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "\u2014"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _number(value: Any) -> float | None:
    """A stored figure as a float; None when it is missing or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


# building blocks


def _outcome_class(outcome: str) -> str:
    return outcome if outcome in _OUTCOMES else "other"


def _badge(word: str, known: Iterable[str]) -> str:
    css = word if word in known else "other"
    return f'<span class="badge {css}">{_e(word)}</span>'


def _bar(share: float) -> str:
    width = min(100.0, max(0.0, share * 100))
    return f'<span class="bar"><span style="width:{width:.1f}%"></span></span>'


def _pre(text: str, limit: int) -> str:
    return f"<pre>{_e(_short(text, limit))}</pre>"


def _meta(items: Sequence[tuple[str, str]]) -> str:
    """A definition list; the labels are fixed words, the values already HTML."""
    rows = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in items)
    return f'<dl class="meta">{rows}</dl>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{title}</h2>{body}</section>'


def _toc(entries: Sequence[tuple[str, str]]) -> str:
    links = "".join(f'<a href="#{anchor}">{title}</a>' for anchor, title in entries)
    return f'<nav class="toc">{links}</nav>'


def _page(title: str, heading: str, body: str) -> str:
    from ... import __version__

    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n"
        f"{heading}\n{body}\n"
        f"<footer>Written by refinekit {_e(__version__)} on {_e(_when(time.time()))}. "
        "This file is self-contained: it loads nothing.</footer>\n"
        "</main>\n</body>\n</html>\n"
    )


def _run_meta(run: RunInfo, extra: Sequence[tuple[str, str]]) -> str:
    options = ", ".join(f"{_e(k)} {_e(_value_text(v))}" for k, v in sorted(run.options.items()))
    items: list[tuple[str, str]] = [
        ("Data file", f"<code>{_e(run.dataset)}</code>"),
        ("SHA-256", f'<code title="{_e(run.dataset_sha256)}">{_e(run.dataset_sha256[:16])}</code>'),
    ]
    if run.kind == "eval":
        items.append(("Target", f"<code>{_e(run.target or '')}</code>"))
    items.append(
        (
            "Judge",
            f"<code>{_e(run.judge)}</code>"
            if run.judge
            else "none: the file's own columns (must_mention, expected_source) are the checks",
        )
    )
    items += [
        ("Status", _badge(run.status, _STATUSES)),
        ("Started", _e(_when(run.started_at))),
        ("Finished", _e(_when(run.finished_at))),
        ("Options", options or "\u2014"),
        ("refinekit", f"{_e(run.version)} (the version that made the run)"),
        *extra,
    ]
    return _meta(items)


def _incomplete_note(run: RunInfo, stored: int) -> str:
    if run.status == "complete":
        return ""
    total = _count(run.summary.get("cases"))
    of = f" of {_int(total)}" if total else ""
    return (
        f'<p class="warn">This run is <b>{_e(run.status)}</b>: {_int(stored)}{of} cases are '
        "stored, and the figures below cover those only. Run the same command again to finish "
        "it.</p>"
    )


# charts


@dataclass(frozen=True)
class _Point:
    """One run in a history chart."""

    run_id: int
    value: float
    lower: float | None
    upper: float | None
    current: bool
    note: str  # plain text, for the tooltip


def _ticks(low: float, high: float) -> list[float]:
    step = 0.25 if high - low <= 1.0 else 0.5
    ticks = []
    value = low
    while value <= high + 1e-9:
        ticks.append(round(value, 6))
        value += step
    return ticks


def _history_svg(points: Sequence[_Point], low: float, high: float, y_label: str) -> str:
    """A chart of one figure per run (with its interval when known), the current run marked."""
    width, height = 880, 270
    left, right, top, bottom = 58, 18, 14, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / max(1, len(points))

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    def y(v: float) -> float:
        return top + (high - min(high, max(low, v))) / (high - low) * plot_h

    out = [
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{y_label} by run">'
    ]
    for tick in _ticks(low, high):
        out.append(
            f'<line class="grid" x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" '
            f'y2="{y(tick):.1f}"/><text x="{left - 8}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{tick:g}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>'
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - right}" '
        f'y2="{top + plot_h}"/>'
        f'<text x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">{y_label}</text>'
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">run</text>'
    )
    if len(points) > 1:
        path = " ".join(f"{x(i):.1f},{y(p.value):.1f}" for i, p in enumerate(points))
        out.append(f'<polyline class="trend" points="{path}"/>')
    every = max(1, -(-len(points) // 18))
    for i, p in enumerate(points):
        cx = x(i)
        group = ['<g class="cur">' if p.current else "<g>", f"<title>{_e(p.note)}</title>"]
        if p.lower is not None and p.upper is not None:
            y1, y2 = y(p.lower), y(p.upper)
            group.append(
                f'<line class="ci" x1="{cx:.1f}" y1="{y1:.1f}" x2="{cx:.1f}" y2="{y2:.1f}"/>'
                f'<line class="ci" x1="{cx - 5:.1f}" y1="{y1:.1f}" x2="{cx + 5:.1f}" '
                f'y2="{y1:.1f}"/><line class="ci" x1="{cx - 5:.1f}" y1="{y2:.1f}" '
                f'x2="{cx + 5:.1f}" y2="{y2:.1f}"/>'
            )
        group.append(
            f'<circle class="pt" cx="{cx:.1f}" cy="{y(p.value):.1f}" r="{6 if p.current else 4}"/>'
        )
        if p.current or i % every == 0 or i == len(points) - 1:
            group.append(
                f'<text x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{p.run_id}</text>'
            )
        if p.current:
            group.append(
                f'<text x="{cx:.1f}" y="{max(top + 10, y(p.upper or p.value) - 8):.1f}" '
                f'text-anchor="middle">{p.value:.3f}</text>'
            )
        group.append("</g>")
        out.append("".join(group))
    out.append("</svg>")
    return "".join(out)


def _reliability_svg(bins: Sequence[ReliabilityBin]) -> str:
    """The reliability diagram: observed pass rate against mean probability, per bin."""
    size, left, top, right, bottom = 400, 58, 30, 18, 46
    width, height = left + size + right, top + size + bottom

    def x(v: float) -> float:
        return left + v * size

    def y(v: float) -> float:
        return top + (1 - v) * size

    out = [
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" class="reliability" '
        'aria-label="reliability diagram">'
    ]
    for tick in _ticks(0.0, 1.0):
        out.append(
            f'<line class="grid" x1="{left}" y1="{y(tick):.1f}" x2="{left + size}" '
            f'y2="{y(tick):.1f}"/><line class="grid" x1="{x(tick):.1f}" y1="{top}" '
            f'x2="{x(tick):.1f}" y2="{top + size}"/>'
            f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>'
            f'<text x="{x(tick):.1f}" y="{top + size + 16}" text-anchor="middle">{tick:g}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + size}"/>'
        f'<line class="axis" x1="{left}" y1="{top + size}" x2="{left + size}" '
        f'y2="{top + size}"/>'
    )
    for b in bins:
        bar_x, bar_w = x(b.lower), (b.upper - b.lower) * size
        out.append(
            f"<g><title>{b.lower:.2f} to {b.upper:.2f}: {b.count} items, mean probability "
            f"{b.mean_probability:.3f}, people passed {b.observed_rate:.3f}</title>"
            f'<rect class="bin" x="{bar_x + 1:.1f}" y="{y(b.observed_rate):.1f}" '
            f'width="{max(1.0, bar_w - 2):.1f}" height="{b.observed_rate * size:.1f}"/></g>'
        )
    out.append(
        f'<line class="diag" x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(1):.1f}" y2="{y(1):.1f}"/>'
    )
    most = max((b.count for b in bins), default=1)
    for b in bins:
        cx, cy = x(b.mean_probability), y(b.observed_rate)
        radius = 3.5 + 5.5 * (b.count / most) ** 0.5
        out.append(
            f'<line class="gap" x1="{cx:.1f}" y1="{cy:.1f}" x2="{cx:.1f}" '
            f'y2="{y(b.mean_probability):.1f}"/>'
            f'<circle class="obs" cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}"/>'
        )
        if (b.upper - b.lower) * size >= 30:  # room for the count above its bin
            out.append(
                f'<text class="count" x="{x((b.lower + b.upper) / 2):.1f}" y="{top - 12}" '
                f'text-anchor="middle">n={b.count}</text>'
            )
    out.append(
        f'<text x="{left + size / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        "judge's probability of pass (mean per bin)</text>"
        f'<text x="14" y="{top + size / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + size / 2:.1f})">share people passed</text>'
        "</svg>"
    )
    return "".join(out)


def _recent(runs: Sequence[RunInfo], current: int) -> list[RunInfo]:
    """The last `HISTORY_LIMIT` runs, the current one always among them."""
    if len(runs) <= HISTORY_LIMIT:
        return list(runs)
    keep = list(runs[-HISTORY_LIMIT:])
    if all(r.id != current for r in keep):
        keep = [*runs[-(HISTORY_LIMIT - 1) :], *(r for r in runs if r.id == current)]
        keep.sort(key=lambda r: r.id)
    return keep


# eval


def eval_report(store: RunStore, run_id: int, comparison: Comparison | None = None) -> str:
    """The HTML report of a stored `refinekit eval` run.

    Args:
        store: The run store holding the run.
        run_id: The run's id.
        comparison: The comparison with an earlier run, when `--compare` made one.

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
    sections = [
        ("pass-rate", "Pass rate", _pass_rate(summary)),
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
        ("failing", f"Failing cases ({len(failing)})", _failing(failing)),
        ("cases", f"All cases ({len(cases)})", _all_cases(cases, failing)),
    ]
    cases_in_file = _count(run.summary.get("cases_in_file"))
    heading = (
        f"<header><h1>refinekit eval \u2014 run {run.id}</h1>"
        + _run_meta(
            run,
            [
                (
                    "Cases",
                    f"{_int(len(cases))} stored"
                    + (f" ({_int(cases_in_file)} rows in the file)" if cases_in_file else ""),
                )
            ],
        )
        + _incomplete_note(run, len(cases))
        + _toc([(anchor, title) for anchor, title, _ in sections])
        + "</header>"
    )
    body = "\n".join(_section(anchor, title, content) for anchor, title, content in sections)
    return _page(f"refinekit eval, run {run.id}", heading, body)


def _pass_rate(s: Summary) -> str:
    if s.rate is None:
        headline = (
            '<div class="headline"><span class="big">n/a</span><span class="interval muted">'
            f"none of the {_int(s.cases)} cases was answered and judged</span></div>"
        )
    else:
        headline = (
            f'<div class="headline"><span class="big">{s.rate:.3f}</span>'
            f'<span class="interval">95% Wilson interval <b>{s.lower:.3f}</b> to '
            f"<b>{s.upper:.3f}</b></span></div>"
        )
    how = (
        f"<p>Pass rate = passed / (passed + failed + raised) = {_int(s.passed)} / "
        f"{_int(s.counted)}. A case whose answer function raised counts as failed: the user got "
        "no answer. The interval is the 95% Wilson score interval; a gate "
        "(<code>--min-pass-rate</code>) is held against its lower bound.</p>"
        f"<p>Not counted: {_int(s.unavailable)} unavailable (the judge could not judge) and "
        f"{_int(s.inconclusive)} inconclusive (the evidence could not support a verdict, or "
        "repeated verdicts split evenly): nothing was learnt about those answers.</p>"
    )
    counts = {o: getattr(s, o) for o in _OUTCOMES}
    total = max(1, s.cases)
    stack = "".join(
        f'<span class="{o}" style="width:{counts[o] / total * 100:.2f}%"></span>'
        for o in _OUTCOMES
        if counts[o]
    )
    rows = "".join(
        f'<tr><td><span class="key {o}"></span>{o}</td><td class="n">{_int(counts[o])}</td>'
        f'<td class="n">{counts[o] / total:.3f}</td>'
        f"<td>{'counted' if o in ('passed', 'failed', 'raised') else 'not counted'}</td></tr>"
        for o in _OUTCOMES
    )
    table = (
        '<table><tr><th>outcome</th><th class="n">cases</th><th class="n">share</th>'
        f"<th>in the pass rate</th></tr>{rows}"
        f'<tr><th>all</th><th class="n">{_int(s.cases)}</th><th></th><th></th></tr></table>'
    )
    return headline + how + f'<div class="stack">{stack}</div>' + table


def _eval_history(run: RunInfo, summary: Summary, history: Sequence[RunInfo]) -> str:
    shown = _recent(history, run.id)
    points: list[_Point] = []
    rows = []
    for r in shown:
        current = r.id == run.id
        lower: float | None
        upper: float | None
        if current:
            rate, lower, upper = summary.rate, summary.lower, summary.upper
            counted, passed = summary.counted, summary.passed
        else:
            rate = _number(r.summary.get("rate"))
            lower = _number(r.summary.get("lower"))
            upper = _number(r.summary.get("upper"))
            passed = _count(r.summary.get("passed"))
            counted = passed + _count(r.summary.get("failed")) + _count(r.summary.get("raised"))
        if rate is None:
            lower = upper = None
        interval = (
            f"{lower:.3f} to {upper:.3f}" if lower is not None and upper is not None else "n/a"
        )
        if rate is not None:
            points.append(
                _Point(
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
            f"{' (this run)' if current else ''}</td><td>{_e(_when(r.started_at))}</td>"
            f'<td class="n">{_f(rate)}</td><td class="n">{interval}</td>'
            f'<td class="n">{passed}/{counted}</td><td class="text"><code>{_e(r.target or "")}'
            f'</code></td><td class="text"><code>{_e(r.judge or "column checks")}</code></td></tr>'
        )
    intro = (
        f"<p>Every complete eval run of this data file in the store ({_int(len(history))}"
        + (f", the last {len(shown)} shown" if len(shown) < len(history) else "")
        + "): the pass rate with its 95% interval; this run is marked in blue. Runs with "
        "another target or judge measure something else; the table says which is which.</p>"
    )
    chart = (
        _history_svg(points, 0.0, 1.0, "pass rate")
        if points
        else '<p class="muted">No run has a pass rate yet.</p>'
    )
    table = (
        '<table class="wide"><tr><th class="n">run</th><th>started</th><th class="n">pass rate'
        '</th><th class="n">95% interval</th><th class="n">passed</th><th>target</th>'
        f"<th>judge</th></tr>{''.join(reversed(rows))}</table>"
    )
    return intro + chart + table


def _consistency(s: Summary, cases: Sequence[CaseRecord]) -> str:
    lower, upper = wilson_interval(s.flipped, s.repeated, CONFIDENCE)
    flipped = [c for c in cases if c.judgements > 1 and c.flipped]
    rows = "".join(
        f'<tr><td class="n">{c.position}</td><td class="n">{c.passes}/{c.judgements}</td>'
        f'<td>{_badge(c.outcome, _OUTCOMES)}</td><td class="text">'
        f"{_e(_line(c.question, CELL_LIMIT))}</td></tr>"
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
        f"<p>{_int(s.flipped)} of {_int(s.repeated)} answers judged more than once got "
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
            f'<tr><td class="text"><code>{_e(name)}</code></td><td class="n">{_int(passed)}</td>'
            f'<td class="n">{_int(failed)}</td><td class="n">{_int(uncertain)}</td>'
            f'<td class="n">{_int(skipped)}</td><td class="n"><b>{_f(rate)}</b></td>'
            f'<td class="n">{_f(lower) if decided else "n/a"} to '
            f"{_f(upper) if decided else 'n/a'}</td><td>{_bar(rate or 0.0)}</td></tr>"
        )
    return (
        "<p>From each case's first verdict. A criterion's pass rate counts the cases it was "
        "decided on (pass, fail or uncertain); skipped ones (not run, e.g. after an earlier "
        "failure) are left out.</p>"
        '<table><tr><th>criterion</th><th class="n">pass</th><th class="n">fail</th>'
        '<th class="n">uncertain</th><th class="n">skipped</th><th class="n">pass rate</th>'
        f'<th class="n">95% interval</th><th></th></tr>{"".join(rows)}</table>'
    )


def _distribution(values: Sequence[int], unit: str) -> str:
    counts = Counter(values)
    total = max(1, len(values))
    rows = "".join(
        f'<tr><td class="n">{k}</td><td class="n">{_int(n)}</td><td class="n">'
        f"{n / total:.3f}</td><td>{_bar(n / total)}</td></tr>"
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
        f"<p>Attempts: mean <b>{s.attempts_mean:.3f}</b>, max <b>{s.attempts_max}</b>. "
        "One attempt is an answer accepted at once (or a function without "
        "<code>@retry_on_low_quality</code>).</p>"
        + _distribution([c.attempts for c in cases], "attempts")
        + f"<p>Corrections (<code>@self_correct</code>): <b>{_int(s.corrections_total)}</b> in "
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
            f'<tr><td>{label}</td><td class="n">{_int(u.get("model_calls", 0))}</td>'
            f'<td class="n">{_int(u.get("prompt_tokens", 0))}</td>'
            f'<td class="n">{_int(u.get("completion_tokens", 0))}</td>'
            f'<td class="n">{_int(tokens)}</td><td class="n">{tokens / n:.1f}</td></tr>'
        )
    all_tokens = total["prompt_tokens"] + total["completion_tokens"]
    rows.append(
        f'<tr><th>all</th><th class="n">{_int(total["model_calls"])}</th>'
        f'<th class="n">{_int(total["prompt_tokens"])}</th>'
        f'<th class="n">{_int(total["completion_tokens"])}</th><th class="n">{_int(all_tokens)}'
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
    waits = _count(run.summary.get("rate_limit_waits"))
    return (
        "<p>Model calls and tokens as refinekit saw them (replies that carried usage).</p>"
        '<table><tr><th>role</th><th class="n">model calls</th><th class="n">prompt tokens</th>'
        '<th class="n">completion tokens</th><th class="n">tokens</th>'
        f'<th class="n">tokens per case</th></tr>{"".join(rows)}</table>'
        f"<p>Time: answer functions {answer_s:.3f} s, judging {judge_s:.3f} s, "
        f"<b>{s.seconds:.3f} s</b> in all over the cases (mean {s.seconds / n:.3f} s per case; "
        f"cases run concurrently, so this can exceed the run's wall time){wall}.</p>"
        + (f"<p>Rate limited: the run backed off {_int(waits)} times.</p>" if waits else "")
    )


def _comparison(c: Comparison) -> str:
    before = c.before

    def pairs(items: Sequence[tuple[CaseRecord, CaseRecord]], notes: bool) -> str:
        if not items:
            return '<p class="muted">None.</p>'
        rows = "".join(
            f'<tr><td class="n">{now.position}</td><td>{_badge(was.outcome, _OUTCOMES)}</td>'
            f'<td>{_badge(now.outcome, _OUTCOMES)}</td><td class="text">'
            f"{_e(_line(now.question, CELL_LIMIT))}</td>"
            + (
                f'<td class="text">{_e(_line(now.error or now.feedback, CELL_LIMIT * 2))}</td>'
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
        f"<p>Run {before.id} (started {_e(_when(before.started_at))}, target "
        f"<code>{_e(before.target or '')}</code>, judge "
        f"<code>{_e(before.judge or 'column checks')}</code>), paired with this run by "
        "question.</p>"
        '<div class="figures">'
        f'<div class="figure"><div class="value">{_int(c.shared)}</div>'
        '<div class="label">questions judged in both runs</div></div>'
        f'<div class="figure"><div class="value">{_int(len(c.regressed))}</div>'
        '<div class="label">regressed (passed, now not)</div></div>'
        f'<div class="figure"><div class="value">{_int(len(c.improved))}</div>'
        '<div class="label">improved (failed, now passes)</div></div>'
        f'<div class="figure"><div class="value">{_p(c.p_value)}</div>'
        '<div class="label">exact McNemar p</div></div></div>'
        + (
            f'<p class="muted">{_int(c.not_comparable)} shared questions were unavailable or '
            "inconclusive in one of the runs and are not compared.</p>"
            if c.not_comparable
            else ""
        )
        + "<h3>Regressed</h3>"
        + pairs(c.regressed, True)
        + "<h3>Improved</h3>"
        + pairs(c.improved, False)
    )


def _criteria_table(case: CaseRecord) -> str:
    criteria = case.criteria
    if not criteria:
        return ""
    rows = []
    for c in criteria:
        outcome = str(c.get("outcome"))
        probability = _number(c.get("probability"))
        rows.append(
            f'<tr><td class="text"><code>{_e(c.get("name"))}</code></td>'
            f"<td>{_badge(outcome, _CRITERION_OUTCOMES)}</td>"
            f'<td class="n">{_f(probability)}</td>'
            f'<td class="text">{_e(_short(str(c.get("feedback") or ""), NOTE_LIMIT))}</td></tr>'
        )
    return (
        "<h4>Criteria</h4><table><tr><th>criterion</th><th>outcome</th>"
        f'<th class="n">probability</th><th>feedback</th></tr>{"".join(rows)}</table>'
    )


def _row_table(case: CaseRecord) -> str:
    rows = "".join(
        f'<tr><td><code>{_e(k)}</code></td><td class="text">'
        f"{_e(_short(_value_text(v), VALUE_LIMIT))}</td></tr>"
        for k, v in case.row.items()
    )
    return (
        f"<details><summary>The row ({len(case.row)} columns)</summary>"
        f"<table>{rows}</table></details>"
        if rows
        else ""
    )


def _case_article(index: int, case: CaseRecord, label: str | None = None) -> str:
    """One case in full; with `label`, a calibration item and its human label."""
    facts = [f"row <b>{case.position}</b>"]
    if label is not None:
        facts[:0] = [f"judge <b>{_e(case.outcome)}</b>", f"people <b>{_e(label)}</b>"]
    if case.judgements:
        facts.append(f"verdicts passing <b>{case.passes}/{case.judgements}</b>")
    if label is None:
        facts.append(f"attempts <b>{case.attempts}</b>")
        facts.append(f"corrections <b>{case.corrections}</b>")
    if case.score is not None:
        facts.append(f"score <b>{case.score:.3f}</b>")
    if case.probability is not None:
        facts.append(f"probability <b>{case.probability:.3f}</b>")
    if case.flipped:
        facts.append("<b>verdicts disagreed</b>")
    parts = [
        f'<article class="case {_outcome_class(case.outcome)}" id="case-{index}">',
        f"<h3>{_badge(case.outcome, _OUTCOMES)} Case {case.position}</h3>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        "<h4>Question</h4>",
        _pre(case.question, TEXT_LIMIT),
        "<h4>Answer</h4>",
        _pre(case.answer, ANSWER_LIMIT)
        if case.answer is not None
        else '<p class="muted">No answer: the function raised before giving one.</p>',
    ]
    if case.feedback:
        parts += ["<h4>Feedback</h4>", _pre(case.feedback, NOTE_LIMIT)]
    if case.error:
        title = "Error" if case.outcome == "raised" else "Why not judged"
        parts += [f"<h4>{title}</h4>", _pre(case.error, NOTE_LIMIT)]
    parts += [_criteria_table(case), _row_table(case), "</article>"]
    return "".join(parts)


def _failing(failing: Sequence[tuple[int, CaseRecord]]) -> str:
    if not failing:
        return '<p class="muted">None: every case passed.</p>'
    shown = "".join(_case_article(i, c) for i, c in failing[:DETAILED_LIMIT])
    more = (
        f'<p class="warn">{_int(len(failing) - DETAILED_LIMIT)} more failing cases are not '
        "shown in full here; all of them are in the table below.</p>"
        if len(failing) > DETAILED_LIMIT
        else ""
    )
    return (
        "<p>Cases that failed, raised, or could not be judged (unavailable, inconclusive), "
        f"with the answer (first {ANSWER_LIMIT:,} characters) and why.</p>" + shown + more
    )


def _all_cases(cases: Sequence[CaseRecord], failing: Sequence[tuple[int, CaseRecord]]) -> str:
    if not cases:
        return '<p class="muted">No case is stored.</p>'
    detailed = {i for i, _ in failing[:DETAILED_LIMIT]}
    rows = []
    for i, c in enumerate(cases):
        number = f'<a href="#case-{i}">{c.position}</a>' if i in detailed else str(c.position)
        note = c.error if c.outcome in ("raised", "unavailable", "inconclusive") else c.feedback
        if c.outcome == "passed":
            note = ""
        rows.append(
            f'<tr><td class="n">{number}</td><td>{_badge(c.outcome, _OUTCOMES)}</td>'
            f'<td class="n">{f"{c.passes}/{c.judgements}" if c.judgements else "-"}</td>'
            f'<td class="n">{c.attempts}</td><td class="n">{c.corrections}</td>'
            f'<td class="text">{_e(_line(c.question, CELL_LIMIT))}</td>'
            f'<td class="text">{_e(_line(c.answer or "", CELL_LIMIT))}</td>'
            f'<td class="text">{_e(_line(note or "", CELL_LIMIT))}</td></tr>'
        )
    return (
        f'<p class="muted small">Texts cut to {CELL_LIMIT} characters.</p>'
        '<table class="wide cases"><tr><th class="n">#</th><th>outcome</th>'
        '<th class="n">verdicts</th><th class="n">attempts</th><th class="n">corr.</th>'
        f"<th>question</th><th>answer</th><th>feedback / error</th></tr>{''.join(rows)}</table>"
    )


# calibrate


def calibration_report(store: RunStore, run_id: int, calibration: Calibration) -> str:
    """The HTML report of a stored `refinekit calibrate` run.

    Args:
        store: The run store holding the run.
        run_id: The run's id.
        calibration: The run's figures, as `calibrate` computed them.

    Returns:
        One self-contained HTML5 document.

    Raises:
        RunStoreError: No run has this id.
        ValueError: The run is not a calibrate run.
    """
    run = store.run(run_id)
    if run.kind != "calibrate":
        raise ValueError(f"run {run_id} is a {run.kind} run, not a calibrate run")
    cases = store.cases(run_id)
    history = [
        r
        for r in store.runs(kind="calibrate", dataset=run.dataset)
        if r.status == "complete" or r.id == run.id
    ]
    c = calibration
    judged = [
        (i, case)
        for i, case in enumerate(cases)
        if case.outcome in ("passed", "failed") and case.label is not None
    ]
    wrong_pass = [(i, x) for i, x in judged if x.outcome == "passed" and x.label != "pass"]
    wrong_fail = [(i, x) for i, x in judged if x.outcome == "failed" and x.label == "pass"]
    left_out = [x for x in cases if x.outcome not in ("passed", "failed")]
    sections = [
        ("agreement", "Agreement with people", _agreement(c)),
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
        + _run_meta(
            run,
            [
                (
                    "Items",
                    f"{_int(len(cases))} stored, {_int(c.items)} judged and labelled"
                    + (
                        f" ({_int(c.unavailable)} unavailable and {_int(c.inconclusive)} "
                        "inconclusive left out of every figure)"
                        if c.unavailable or c.inconclusive
                        else ""
                    ),
                )
            ],
        )
        + _incomplete_note(run, len(cases))
        + _toc([(anchor, title) for anchor, title, _ in sections])
        + "</header>"
    )
    body = "\n".join(_section(anchor, title, content) for anchor, title, content in sections)
    return _page(f"refinekit calibrate, run {run.id}", heading, body)


def _rate_figure(value: float | None, label: str, hits: int, total: int) -> str:
    interval = ""
    if value is not None and total:
        lower, upper = wilson_interval(hits, total, CONFIDENCE)
        interval = f"<br>{hits}/{total}, 95% {lower:.3f} to {upper:.3f}"
    return (
        f'<div class="figure"><div class="value">{_f(value)}</div>'
        f'<div class="label">{label}{interval}</div></div>'
    )


def _agreement(c: Calibration) -> str:
    judge_fails = c.both_fail + c.judge_fail_only
    human_fails = c.both_fail + c.human_fail_only
    matrix = (
        '<table><tr><th></th><th class="n">people pass</th><th class="n">people fail</th>'
        '<th class="n">all</th></tr>'
        f'<tr><th>judge pass</th><td class="n agree">{_int(c.both_pass)}</td>'
        f'<td class="n disagree">{_int(c.human_fail_only)}</td>'
        f'<td class="n">{_int(c.both_pass + c.human_fail_only)}</td></tr>'
        f'<tr><th>judge fail</th><td class="n disagree">{_int(c.judge_fail_only)}</td>'
        f'<td class="n agree">{_int(c.both_fail)}</td><td class="n">{_int(judge_fails)}</td></tr>'
        f'<tr><th>all</th><td class="n">{_int(c.both_pass + c.judge_fail_only)}</td>'
        f'<td class="n">{_int(human_fails)}</td><td class="n">{_int(c.items)}</td></tr></table>'
    )
    figures = (
        '<div class="figures">'
        + _rate_figure(c.accuracy, "accuracy (agreement)", c.both_fail + c.both_pass, c.items)
        + _rate_figure(c.precision_fail, "precision on failures", c.both_fail, judge_fails)
        + _rate_figure(c.recall_fail, "recall on failures", c.both_fail, human_fails)
        + f'<div class="figure"><div class="value">{_f(c.kappa)}</div>'
        '<div class="label">Cohen\'s kappa<br>agreement corrected for chance</div></div>'
        "</div>"
    )
    return (
        "<p>Failures are the positive class: precision on failures is the share of the "
        "judge's failures that people failed too; recall on failures, the share of people's "
        "failures the judge caught.</p>" + matrix + figures
    )


def _reliability(c: Calibration) -> str:
    if c.reliability is None:
        return (
            f"<p>The judge gave no probabilities: {_int(c.with_probability)} of "
            f"{_int(c.items)} verdicts carried one. A reliability diagram, the expected "
            "calibration error and thresholds need one on every verdict (a criteria judge on an "
            "endpoint that returns logprobs gives them).</p>"
        )
    rows = "".join(
        f'<tr><td class="n">{b.lower:.3f} to {b.upper:.3f}</td><td class="n">{_int(b.count)}'
        f'</td><td class="n">{b.mean_probability:.3f}</td><td class="n">{b.observed_rate:.3f}'
        f'</td><td class="n">{b.observed_rate - b.mean_probability:+.3f}</td></tr>'
        for b in c.reliability
    )
    return (
        "<p>Each bin of the judge's probability that an answer passes: the bar and the dot show "
        "the share people passed, the dot sits at the bin's mean probability and its size "
        "grows with the number of items. On the dashed diagonal the judge is perfectly "
        "calibrated; a red line is the gap.</p>"
        f'<div class="side">{_reliability_svg(c.reliability)}<div>'
        f"<p>Expected calibration error: <b>{_f(c.ece)}</b> (0 is perfect): the gaps, "
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
            f'<td class="n">{_int(t.passes)}</td><td class="n">{_int(t.wrong_passes)} failed by '
            f'people</td><td class="n">{_f(t.pass_error_upper)}</td></tr>'
        )
    if t.fail_at is None:
        rows.append(
            '<tr><th>fail</th><td colspan="4">no threshold keeps wrong fails that low</td></tr>'
        )
    else:
        rows.append(
            f'<tr><th>fail</th><td class="n">p &le; {t.fail_at:.3f}</td>'
            f'<td class="n">{_int(t.fails)}</td><td class="n">{_int(t.wrong_fails)} passed by '
            f'people</td><td class="n">{_f(t.fail_error_upper)}</td></tr>'
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
        f'<div class="figures"><div class="figure"><div class="value">{_int(t.uncertain)}</div>'
        f'<div class="label">uncertain items ({share:.3f} of {_int(c.items)})</div></div></div>'
        + criterion
    )


def _kappa_history(run: RunInfo, c: Calibration, history: Sequence[RunInfo]) -> str:
    shown = _recent(history, run.id)
    points: list[_Point] = []
    rows = []
    for r in shown:
        current = r.id == run.id
        if current:
            kappa, accuracy, ece, items = c.kappa, c.accuracy, c.ece, c.items
        else:
            kappa = _number(r.summary.get("kappa"))
            accuracy = _number(r.summary.get("accuracy"))
            ece = _number(r.summary.get("ece"))
            items = _count(r.summary.get("items"))
        if kappa is not None:
            points.append(
                _Point(
                    r.id,
                    kappa,
                    None,
                    None,
                    current,
                    f"run {r.id}: kappa {kappa:.3f} over {items} items; judge {r.judge or '-'}",
                )
            )
        rows.append(
            f'<tr class="{"current" if current else "other"}"><td class="n">{r.id}'
            f"{' (this run)' if current else ''}</td><td>{_e(_when(r.started_at))}</td>"
            f'<td class="n">{_int(items)}</td><td class="n">{_f(accuracy)}</td>'
            f'<td class="n">{_f(kappa)}</td><td class="n">{_f(ece)}</td>'
            f'<td class="text"><code>{_e(r.judge or "")}</code></td></tr>'
        )
    low = -1.0 if any(p.value < 0 for p in points) else 0.0
    chart = (
        _history_svg(points, low, 1.0, "Cohen's kappa")
        if points
        else '<p class="muted">No run has a kappa yet.</p>'
    )
    intro = (
        f"<p>Every complete calibrate run of this labelled file in the store "
        f"({_int(len(history))}"
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
        out.extend(_case_article(i, x, label) for i, x in items[:DETAILED_LIMIT])
        if len(items) > DETAILED_LIMIT:
            out.append(
                f'<p class="warn">{_int(len(items) - DETAILED_LIMIT)} more are not shown.</p>'
            )
    return "".join(out)


def _not_judged(cases: Sequence[CaseRecord]) -> str:
    rows = "".join(
        f'<tr><td class="n">{x.position}</td><td>{_badge(x.outcome, _OUTCOMES)}</td>'
        f'<td class="text">{_e(_line(x.question, CELL_LIMIT))}</td>'
        f'<td class="text">{_e(_line(x.error or "", CELL_LIMIT * 2))}</td></tr>'
        for x in cases[:LISTED_LIMIT]
    )
    more = (
        f'<p class="muted">{len(cases) - LISTED_LIMIT} more not listed.</p>'
        if len(cases) > LISTED_LIMIT
        else ""
    )
    return (
        "<p>Items the judge could not judge; they are left out of every figure.</p>"
        '<table class="wide"><tr><th class="n">#</th><th>outcome</th><th>question</th>'
        f"<th>why</th></tr>{rows}</table>{more}"
    )
