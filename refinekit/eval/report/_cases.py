"""One case of a run in full, as both reports show it: question, answer, why, criteria, row."""

from __future__ import annotations

from .._runstore import CaseRecord
from ._html import (
    ANSWER_LIMIT,
    NOTE_LIMIT,
    OUTCOMES,
    TEXT_LIMIT,
    VALUE_LIMIT,
    badge,
    esc,
    fmt3,
    number,
    outcome_class,
    pre,
    shorten,
    value_text,
)

__all__ = ["case_article"]

_CRITERION_OUTCOMES = ("pass", "fail", "uncertain", "skipped")
_DOT = " \u00b7 "


def _criteria_table(case: CaseRecord) -> str:
    criteria = case.criteria
    if not criteria:
        return ""
    rows = []
    for c in criteria:
        outcome = str(c.get("outcome"))
        probability = number(c.get("probability"))
        rows.append(
            f'<tr><td class="text"><code>{esc(c.get("name"))}</code></td>'
            f"<td>{badge(outcome, _CRITERION_OUTCOMES)}</td>"
            f'<td class="n">{fmt3(probability)}</td>'
            f'<td class="text">{esc(shorten(str(c.get("feedback") or ""), NOTE_LIMIT))}</td></tr>'
        )
    return (
        "<h4>Criteria</h4><table><tr><th>criterion</th><th>outcome</th>"
        f'<th class="n">probability</th><th>feedback</th></tr>{"".join(rows)}</table>'
    )


def _row_table(case: CaseRecord) -> str:
    rows = "".join(
        f'<tr><td><code>{esc(k)}</code></td><td class="text">'
        f"{esc(shorten(value_text(v), VALUE_LIMIT))}</td></tr>"
        for k, v in case.row.items()
    )
    return (
        f"<details><summary>The row ({len(case.row)} columns)</summary>"
        f"<table>{rows}</table></details>"
        if rows
        else ""
    )


def case_article(index: int, case: CaseRecord, label: str | None = None) -> str:
    """One case in full; with `label`, a calibration item and its human label."""
    facts = [f"row <b>{case.position}</b>"]
    if label is not None:
        facts[:0] = [f"judge <b>{esc(case.outcome)}</b>", f"people <b>{esc(label)}</b>"]
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
        f'<article class="case {outcome_class(case.outcome)}" id="case-{index}">',
        f"<h3>{badge(case.outcome, OUTCOMES)} Case {case.position}</h3>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        "<h4>Question</h4>",
        pre(case.question, TEXT_LIMIT),
        "<h4>Answer</h4>",
        pre(case.answer, ANSWER_LIMIT)
        if case.answer is not None
        else '<p class="muted">No answer: the function raised before giving one.</p>',
    ]
    if case.feedback:
        parts += ["<h4>Feedback</h4>", pre(case.feedback, NOTE_LIMIT)]
    if case.error:
        title = "Error" if case.outcome == "raised" else "Why not judged"
        parts += [f"<h4>{title}</h4>", pre(case.error, NOTE_LIMIT)]
    parts += [_criteria_table(case), _row_table(case), "</article>"]
    return "".join(parts)
