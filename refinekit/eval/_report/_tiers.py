"""The report's sections of an escalating target: its tiers, and a comparison's spend."""

from __future__ import annotations

from typing import Any

from ..._core.numbers import usd
from .._summary import Comparison
from ._html import disclosure, esc, fmt3, whole

__all__ = ["spend_line", "tiers_section"]


def _money(value: Any) -> str:
    return "\u2014" if value is None else usd(value)


def tiers_section(t: dict[str, Any]) -> str:
    """Per tier of an escalating target: the cases that ended there, their pass rate, cost."""
    rows = []
    for tier in t["tiers"]:
        interval = (
            "\u2014" if tier["rate"] is None else f"{fmt3(tier['lower'])} to {fmt3(tier['upper'])}"
        )
        rows.append(
            f"<tr><td><code>{esc(tier['name'])}</code></td>"
            f"<td><code>{esc(tier['model'] or '')}</code></td>"
            f'<td class="n"><b>{whole(tier["ended"])}</b></td>'
            f'<td class="n">{fmt3(tier["rate"])} ({whole(tier["passed"])}/'
            f"{whole(tier['counted'])})</td>"
            f'<td class="n">{interval}</td>'
            f'<td class="n">{_money(tier["cost"])}</td>'
            f'<td class="n">{whole(tier["tried"])}</td>'
            f'<td class="n">{whole(tier["answered"])}</td>'
            f'<td class="n">{whole(tier["model_calls"])}</td>'
            f'<td class="n">{whole(tier["tokens"])}</td>'
            f'<td class="n">{_money(tier["spent"])}</td></tr>'
        )
    head = (
        '<tr><th>tier</th><th>model</th><th class="n">cases ended here</th>'
        '<th class="n">pass rate</th><th class="n">95% Wilson</th>'
        '<th class="n">their cost</th><th class="n">tried in</th><th class="n">answered</th>'
        '<th class="n">calls</th><th class="n">tokens</th><th class="n">its calls cost</th></tr>'
    )
    how = disclosure(
        "What each column counts",
        "<p>A case ends at the tier whose answer was returned, or at the last tier tried when "
        "the function raised. <i>Pass rate</i> is over the cases that ended at the tier "
        "(passed / passed, failed or raised), with its 95% Wilson interval; <i>their cost</i> "
        "is what those cases cost in all, every tier they tried and their judging included. "
        "<i>Tried in</i>, <i>answered</i>, <i>calls</i>, <i>tokens</i> and <i>its calls "
        "cost</i> are the tier's own, over every case that reached it (its answer calls "
        "priced as its model).</p>",
    )
    return (
        f"<p>{whole(t['cases'])} cases ran on the escalation ladder, cheapest tier first.</p>"
        f'<table class="wide">{head}{"".join(rows)}</table>{how}'
    )


def spend_line(c: Comparison) -> str:
    """The two runs' spend on the questions both judged, and its ratio (empty when none)."""
    if c.cost_ratio is not None:
        return (
            f"<p>Cost on those questions: <b>{usd(c.after_cost or 0.0)}</b> in this run, "
            f"{usd(c.before_cost or 0.0)} in run {c.before.id}: ratio "
            f"<b>{c.cost_ratio:.3f}</b>.</p>"
        )
    if c.token_ratio is not None:
        return (
            f"<p>Answer tokens on those questions: <b>{whole(c.after_tokens)}</b> in this run, "
            f"{whole(c.before_tokens)} in run {c.before.id}: ratio "
            f"<b>{c.token_ratio:.3f}</b>.</p>"
        )
    return ""
