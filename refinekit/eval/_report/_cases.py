"""One case of a run in full, as both reports show it: question, answer, why, criteria, row."""

from __future__ import annotations

from .._store import CaseRecord
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
_NONE = "\u2014"


_SCORE_TITLE = (
    "The evaluator's own score of the answer, 0 to 1 (the mean over the verdicts when judged "
    "more than once). What it measures is the evaluator's: a rating, a weighted mean, a "
    "check's 1 or 0. Whether the answer passed is the verdict's, not a threshold on this."
)
_PROBABILITY_TITLE = (
    "P(pass): the judge's probability that the answer passes (the mean over the verdicts). "
)
_PROBABILITY_SOURCE = {
    "logprobs": "read from the judge model's token probabilities (its weakest criterion)",
    "code": "0: a code check failed, so the model criteria were not asked (a certain fail)",
    "metadata": "the probability the judge's verdict carried",
}


def probability_source(case: CaseRecord) -> str:
    """Where the case's P(pass) came from: `logprobs`, `code` or `metadata`."""
    criteria = [c for v in case.verdicts for c in (v.get("criteria") or ()) if isinstance(c, dict)]
    if any(c.get("source") == "logprobs" for c in criteria):
        return "logprobs"
    if any(c.get("source") == "code" and c.get("outcome") == "fail" for c in criteria) and any(
        c.get("outcome") == "skipped" for c in criteria
    ):
        return "code"
    return "metadata"


def _model_probability(criterion: dict[str, object]) -> float | None:
    """A criterion's probability when a model's token probabilities gave it; else None."""
    if criterion.get("source") != "logprobs":
        return None
    return number(criterion.get("probability"))


def _decided_by(criterion: dict[str, object]) -> str:
    source = criterion.get("source")
    if source == "code":
        return "no probability: a code check decided this criterion"
    if source == "answer":
        return "no probability: the judge model's answer decided (no token probabilities)"
    return "no probability: the judge gave none"


def _criteria_table(case: CaseRecord) -> str:
    criteria = case.criteria
    if not criteria:
        return ""
    # only a model's token probabilities are a probability; a check's 1 or 0, a score or a
    # model's stated answer are not, and a column of them would show one that is not there
    with_probability = any(_model_probability(c) is not None for c in criteria)
    rows = []
    for c in criteria:
        outcome = str(c.get("outcome"))
        probability = _model_probability(c)
        cell = (
            f'<td class="n">{fmt3(probability)}</td>'
            if probability is not None
            else f'<td class="n" title="{esc(_decided_by(c))}">{_NONE}</td>'
        )
        rows.append(
            f'<tr><td class="text"><code>{esc(c.get("name"))}</code></td>'
            f"<td>{badge(outcome, _CRITERION_OUTCOMES)}</td>{cell if with_probability else ''}"
            f'<td class="text">{esc(shorten(str(c.get("feedback") or ""), NOTE_LIMIT))}</td></tr>'
        )
    head = (
        '<th class="n" title="the judge model\'s probability that this criterion holds, from '
        'its token probabilities">P(holds)</th>'
        if with_probability
        else ""
    )
    return (
        "<h4>Criteria</h4><table><tr><th>criterion</th><th>outcome</th>"
        f"{head}<th>feedback</th></tr>{''.join(rows)}</table>"
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
    legend = []
    if case.score is not None:
        facts.append(f'<span title="{esc(_SCORE_TITLE)}">score <b>{case.score:.3f}</b></span>')
        legend.append("score = the evaluator's own score of the answer (0 to 1)")
    if case.probability is not None:  # None: the judge gave none, and none is shown
        source = _PROBABILITY_SOURCE[probability_source(case)]
        facts.append(
            f'<span title="{esc(_PROBABILITY_TITLE + source)}">P(pass) '
            f"<b>{case.probability:.3f}</b></span>"
        )
        legend.append(f"P(pass) = the judge's probability that the answer passes, {source}")
    if case.flipped:
        facts.append("<b>verdicts disagreed</b>")
    parts = [
        f'<article class="case {outcome_class(case.outcome)}" id="case-{index}">',
        f"<h3>{badge(case.outcome, OUTCOMES)} Case {case.position}</h3>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        f'<p class="legend small muted">{esc("; ".join(legend))}.</p>' if legend else "",
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
