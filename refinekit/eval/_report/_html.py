"""The pieces every report is made of: escaped text, numbers, badges, the page and its style.

Every piece of user and model text (questions, answers, feedback, errors, row values, file
paths, target and judge names) passes through `esc` (`html.escape(..., quote=True)`);
attributes carry only numbers and fixed words, and no user text goes into the style sheet,
which is the package's `report.css`. Long texts are shortened so a run of thousands of cases
still makes a file of reasonable size.
"""

from __future__ import annotations

import functools
import html
import json
import re
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from ..._core.package import version
from .._store import CaseRecord, RunInfo, RunStore

__all__ = [
    "ANSWER_LIMIT",
    "CELL_LIMIT",
    "CSP",
    "disclosure",
    "DETAILED_LIMIT",
    "HISTORY_LIMIT",
    "LISTED_LIMIT",
    "NOTE_LIMIT",
    "OUTCOMES",
    "TEXT_LIMIT",
    "VALUE_LIMIT",
    "badge",
    "bar",
    "count",
    "counted",
    "esc",
    "fmt3",
    "fmt_p",
    "incomplete_note",
    "meta",
    "not_listed",
    "number",
    "one_line",
    "outcome_class",
    "page",
    "pre",
    "prose",
    "recent",
    "run_meta",
    "section",
    "shorten",
    "stored_run",
    "style",
    "toc",
    "value_text",
    "when",
    "whole",
]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
ANSWER_LIMIT = 1500  # characters of an answer shown in a case's details
TEXT_LIMIT = 1500  # characters of a question shown in a case's details
NOTE_LIMIT = 2000  # characters of feedback or an error
VALUE_LIMIT = 300  # characters of a row value
CELL_LIMIT = 120  # characters of a text in the all-cases table
DETAILED_LIMIT = 200  # cases shown in full in a list of failing cases or disagreements
LISTED_LIMIT = 200  # rows of a list of regressions, improvements, flips
HISTORY_LIMIT = 60  # stored runs in a history chart


def not_listed(rows: int) -> str:
    """The note under a list of `rows` rows cut at `LISTED_LIMIT` ('' when none is cut)."""
    if rows <= LISTED_LIMIT:
        return ""
    return f'<p class="muted">{rows - LISTED_LIMIT} more not listed.</p>'


def stored_run(
    store: RunStore, run_id: int, kind: str
) -> tuple[RunInfo, list[CaseRecord], list[RunInfo]]:
    """A stored run a report is of, its cases, and the history it is charted in.

    The history is the complete runs of its kind over the same file, and the run itself.

    Raises:
        RunStoreError: No run has this id.
        ValueError: The run is not of `kind`.
    """
    run = store.run(run_id)
    if run.kind != kind:
        raise ValueError(
            f"run {run_id} is a {run.kind} run, not a{'n' if kind == 'eval' else ''} {kind} run"
        )
    history = [
        r
        for r in store.runs(kind=kind, dataset=run.dataset)
        if r.status == "complete" or r.id == run.id
    ]
    return run, store.cases(run_id), history


OUTCOMES = ("passed", "failed", "raised", "unavailable", "inconclusive")
_STATUSES = ("complete", "incomplete", "running")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@functools.cache
def style() -> str:
    """The reports' style sheet, `report.css` (package data)."""
    return resources.files(__package__).joinpath("report.css").read_text(encoding="utf-8")


# text


def esc(value: object) -> str:
    """`value` as HTML text: quotes escaped, control characters and lone surrogates made safe."""
    text = value if isinstance(value, str) else str(value)
    text = _CONTROL.sub("\ufffd", text)
    text = text.encode("utf-8", "replace").decode("utf-8")
    return html.escape(text, quote=True)


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def prose(value: object) -> str:
    """A message as HTML text (escaped as `esc` does), its `code` spans set in `<code>`.

    refinekit's messages (warnings, errors) name commands and options between backticks, as
    its terminal output does; a report shows them as code, not as raw backticks. The spans are
    found in the escaped text, so their content is escaped like the rest.
    """
    return _CODE_SPAN.sub(r"<code>\1</code>", esc(value))


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 [{len(text) - limit:,} more characters]"


def one_line(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(1, limit - 1)] + "\u2026"


def fmt3(value: float | None) -> str:
    """A number to 3 decimals, or n/a."""
    return "n/a" if value is None else f"{value:.3f}"


def fmt_p(value: float) -> str:
    """A p-value to 3 decimals."""
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def whole(value: int) -> str:
    return f"{value:,}"


def counted(n: int, one: str) -> str:
    """`n` things in words, the word singular for one: "1 case", "2,048 cases"."""
    return f"{whole(n)} {one}" if n == 1 else f"{whole(n)} {one}s"


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return "\u2014"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def number(value: Any) -> float | None:
    """A stored figure as a float; None when it is missing or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def outcome_class(outcome: str) -> str:
    return outcome if outcome in OUTCOMES else "other"


def badge(word: str, known: Iterable[str]) -> str:
    css = word if word in known else "other"
    return f'<span class="badge {css}">{esc(word)}</span>'


def bar(share: float) -> str:
    width = min(100.0, max(0.0, share * 100))
    return f'<span class="bar"><span style="width:{width:.1f}%"></span></span>'


def pre(text: str, limit: int) -> str:
    return f"<pre>{esc(shorten(text, limit))}</pre>"


def meta(items: Sequence[tuple[str, str]]) -> str:
    """A definition list; the labels are fixed words, the values already HTML."""
    rows = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in items)
    return f'<dl class="meta">{rows}</dl>'


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{title}</h2>{body}</section>'


def toc(entries: Sequence[tuple[str, str]]) -> str:
    links = "".join(f'<a href="#{anchor}">{title}</a>' for anchor, title in entries)
    return f'<nav class="toc">{links}</nav>'


def page(title: str, heading: str, body: str) -> str:

    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{esc(title)}</title>\n<style>\n{style()}</style>\n</head>\n<body>\n<main>\n"
        f"{heading}\n{body}\n"
        f"<footer>Written by refinekit {esc(version())} on {esc(when(time.time()))}. "
        "This file is self-contained: it loads nothing.</footer>\n"
        "</main>\n</body>\n</html>\n"
    )


def run_meta(run: RunInfo, extra: Sequence[tuple[str, str]]) -> str:
    options = ", ".join(f"{esc(k)} {esc(value_text(v))}" for k, v in sorted(run.options.items()))
    items: list[tuple[str, str]] = [
        ("Data file", f"<code>{esc(run.dataset)}</code>"),
        (
            "SHA-256",
            f'<code title="{esc(run.dataset_sha256)}">{esc(run.dataset_sha256[:16])}</code>',
        ),
    ]
    if run.kind == "eval":
        items.append(("Target", f"<code>{esc(run.target or '')}</code>"))
    items.append(
        (
            "Judge",
            f"<code>{esc(run.judge)}</code>"
            if run.judge
            else "none: the file's own columns (must_mention, expected_source) are the checks",
        )
    )
    items += [
        ("Status", badge(run.status, _STATUSES)),
        ("Started", esc(when(run.started_at))),
        ("Finished", esc(when(run.finished_at))),
        ("Options", options or "\u2014"),
        ("refinekit", f"{esc(run.version)} (the version that made the run)"),
        *extra,
    ]
    return meta(items)


def incomplete_note(run: RunInfo, stored: int) -> str:
    if run.status == "complete":
        return ""
    total = count(run.summary.get("cases"))
    of = f" of {whole(total)}" if total else ""
    cases = "case is" if (total or stored) == 1 else "cases are"
    return (
        f'<p class="warn">This run is <b>{esc(run.status)}</b>: {whole(stored)}{of} {cases} '
        "stored, and the figures below cover those only. Run the same command again to finish "
        "it.</p>"
    )


def recent(runs: Sequence[RunInfo], current: int) -> list[RunInfo]:
    """The last `HISTORY_LIMIT` runs, the current one always among them."""
    if len(runs) <= HISTORY_LIMIT:
        return list(runs)
    keep = list(runs[-HISTORY_LIMIT:])
    if all(r.id != current for r in keep):
        keep = [*runs[-(HISTORY_LIMIT - 1) :], *(r for r in runs if r.id == current)]
        keep.sort(key=lambda r: r.id)
    return keep


def gate_results(
    rows: Sequence[tuple[str, str, bool]],
    command: str,
    options: str,
    *,
    status: int = 1,
    intro: bool = True,
) -> tuple[str, str]:
    """The gates a run was held to, each `(gate, this run's figures, held)` (HTML already).

    Returns the one-line verdict for the page's header and the gates section's body: what a
    CI artifact's reader needs to see why the job failed. `status` is the command's exit
    status when a gate failed (4 when the setup failed, not the answers); `intro=False`
    leaves out the sentence saying so above the table (the verdict says it already).
    """
    if not rows:
        return (
            '<p class="gate-verdict muted">No gate: the run was not held to a threshold.</p>',
            f'<p class="muted">No gate was asked for (<code>{options}</code>): '
            f"<code>refinekit {command}</code> exits 0 whatever the figures.</p>",
        )
    failed = [gate for gate, _, ok in rows if not ok]
    verdict = (
        '<p class="gate-verdict">Gates: '
        + (
            f'<span class="badge failed">failed</span> ({whole(len(failed))} of '
            f"{whole(len(rows))}; <code>refinekit {command}</code> exits {status})"
            if failed
            else '<span class="badge held">held</span>'
        )
        + ' <a href="#gates">why</a></p>'
    )
    table = "".join(
        f'<tr><td class="text">{gate}</td><td class="text">{figures}</td><td>'
        + (
            '<span class="badge held">held</span>'
            if ok
            else '<span class="badge failed">failed</span>'
        )
        + "</td></tr>"
        for gate, figures, ok in rows
    )
    return verdict, (
        (
            f"<p>What the run was held to; a gate that failed is why "
            f"<code>refinekit {command}</code> exited {status}.</p>"
            if intro
            else ""
        )
        + f'<table class="gates"><tr><th>gate</th><th>this run</th><th>result</th></tr>{table}'
        "</table>"
    )


def disclosure(summary: str, body: str) -> str:
    """A section's definitions, behind a disclosure."""
    return f'<details class="how"><summary>{summary}</summary>{body}</details>'
