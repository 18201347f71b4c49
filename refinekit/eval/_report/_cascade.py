"""The fitted cascade's section of a calibration's report."""

from __future__ import annotations

from typing import Any

from ..._core.numbers import usd
from .._cascade_runs import CascadeCalibration
from ._html import esc, fmt3, whole

__all__ = ["cascade_section", "levels_section"]


def cascade_section(k: CascadeCalibration) -> str:
    """The fitted cascade's section of a calibration's report.

    Each level's fitted threshold, the share it decides, its guaranteed and observed
    agreement; the abstained share; the cost per verdict against the strongest level alone.
    """
    rows = "".join(
        f"<tr><td>{esc(level.name)}</td>"
        f'<td class="n">{"never" if level.threshold is None else f"{level.threshold:.3f}"}</td>'
        f'<td class="n">{whole(level.decided)}</td><td class="n">{level.share:.3f}</td>'
        f'<td class="n">{"-" if level.guaranteed is None else f"&ge; {level.guaranteed:.3f}"}'
        f'</td><td class="n">{fmt3(level.agreement)}</td><td class="n">{fmt3(level.alone)}</td>'
        f'<td class="n">{"?" if level.calls is None else f"{level.calls:g}"}</td></tr>'
        for level in k.levels
    )
    cost = ""
    if k.calls_per_verdict is not None and k.strongest_calls is not None:
        money = ""
        if k.cost_per_verdict is not None and k.strongest_cost is not None:
            money = (
                f", {esc(usd(k.cost_per_verdict))} against {esc(usd(k.strongest_cost))} "
                "(at the calibration's mean price of a judge's model call)"
            )
        cost = (
            f"<p>Cost per verdict: <b>{k.calls_per_verdict:.2f}</b> model calls, against "
            f"{k.strongest_calls:g} for the strongest level alone{money}.</p>"
        )
    return (
        f"<p>The levels' thresholds, fitted on {whole(k.items)} labelled items: each level's "
        f"kept verdicts agree with people at {k.target:.3f} or better, with probability "
        f"{1 - k.risk:.3f} (<code>--target-agreement {k.target:g} --risk {k.risk:g}</code>). "
        "A level's verdict is kept when its confidence reaches its threshold, else the next "
        "level judges; below the last level's threshold the cascade abstains. "
        "<code>refinekit eval --calibration RUN</code> judges with this fit. <em>observed</em>: "
        "the agreement of the verdicts the level kept here; <em>alone</em>: the level's "
        "agreement on every item it voted on.</p>"
        '<table><tr><th>level</th><th class="n">threshold</th><th class="n">decided</th>'
        '<th class="n">share</th><th class="n">guaranteed</th><th class="n">observed</th>'
        '<th class="n">alone</th><th class="n">model calls</th></tr>'
        + rows
        + "</table>"
        + f'<div class="figures"><div class="figure"><div class="value">'
        f'{k.abstained_share:.3f}</div><div class="label">abstained ({whole(k.abstained)} '
        f"of {whole(k.items)} items)</div></div>"
        f'<div class="figure"><div class="value">{fmt3(k.agreement)}</div>'
        f'<div class="label">agreement on the decided items<br>kappa {fmt3(k.kappa)}</div>'
        "</div></div>" + cost
    )


def levels_section(shares: dict[str, Any], fit: dict[str, Any] | None) -> str:
    """An eval's cascade: the fit it judged with (`--calibration`), the share of each level."""
    rows = "".join(
        f"<tr><td>{esc(str(x.get('name') or x.get('level')))}</td>"
        f'<td class="n">{whole(x["decided"])}</td><td class="n">{x["share"]:.3f}</td></tr>'
        for x in shares["levels"]
    )
    rows += (
        f'<tr><td>abstained (no level sure enough)</td><td class="n">'
        f'{whole(shares["abstained"])}</td><td class="n">{shares["abstained_share"]:.3f}</td></tr>'
    )
    if fit is not None:
        shown = ", ".join("never" if t is None else f"{t:.3f}" for t in fit["thresholds"])
        intro = (
            f"<p>The cascade judged with the fit of calibration run "
            f"<code>{esc(str(fit.get('calibration_run')))}</code>: agreement with people of at "
            f"least {fit['target']:.3f}, with probability {1 - fit['risk']:.3f}, on the answers "
            f"it decided; thresholds {esc(shown)}.</p>"
        )
    else:
        intro = (
            "<p>No calibration's fit was applied (no <code>--calibration</code>): the cascade "
            "judged with the thresholds it was made with.</p>"
        )
    return (
        intro
        + f"<p>Which level decided each of the {whole(shares['items'])} verdicts.</p>"
        + '<table><tr><th>level</th><th class="n">decided</th><th class="n">share</th></tr>'
        + rows
        + "</table>"
    )
