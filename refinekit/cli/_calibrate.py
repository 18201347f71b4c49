"""`refinekit calibrate`: `refinekit.eval.calibrate`, its arguments parsed, its result printed."""

from __future__ import annotations

from typing import Any, TextIO

from .._core.numbers import usd
from ..eval import CalibrateOptions, Calibration, calibrate
from ..eval._cascade_runs import CascadeCalibration
from ._output import (
    EXIT_GATE,
    EXIT_USAGE,
    Io,
    batch_line,
    clean,
    cost_line,
    pct,
    setup_failed,
    streams,
    watched_run,
    write_report,
)
from ._text import counted, items

__all__ = ["calibrate_command"]


def calibrate_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit calibrate`; `args` are the parsed options. Returns the exit status."""
    io = streams(out, err)
    result = watched_run(io, "calibrate", args, calibrate, CalibrateOptions)
    if isinstance(result, int):
        return result
    if result.setup_failed:  # no figure, no gate: the judge never judged
        return setup_failed(io, "calibrate", args.report, result, "the judge gave no verdict")
    c = result.calibration
    if c.items == 0:  # every verdict inconclusive (or unavailable): nothing to compare
        io.say()
        io.say(f"judged 0 items ({c.unavailable} unavailable and {c.inconclusive} inconclusive)")
        io.error(
            "calibrate",
            "no item got a pass or fail verdict, so there is no agreement to measure: the "
            "judge said the evidence could not decide on every item; give it the context it "
            "needs, or label items it can judge",
        )
        if args.report is not None:
            write_report(io, "calibrate", args.report, result)
        return EXIT_GATE
    _print_calibration(io, c)
    spent = result.run.summary.get("cost")
    if isinstance(spent, dict):
        io.say(cost_line("judge cost", spent, "item"))
    batched = batch_line(result.run.summary)
    if batched is not None:
        io.say(batched)
    if args.report is not None and not write_report(io, "calibrate", args.report, result):
        return EXIT_USAGE
    if result.min_kappa is not None:
        kappa = result.calibration.kappa
        if not result.kappa_held:
            io.say(
                f"gate: Cohen's kappa {pct(kappa)} is under --min-kappa "
                f"{result.min_kappa:.3f}: FAIL"
            )
            return EXIT_GATE
        io.say(f"gate: Cohen's kappa {pct(kappa)} >= --min-kappa {result.min_kappa:.3f}: pass")
    return 0


def _print_agreement(io: Io, c: Calibration) -> None:
    """A panel's members, the length bands, position consistency and the warnings."""
    if c.panel is not None:
        p = c.panel
        io.say(f"panel ({p.rule}, quorum {p.quorum}), each member against people:")
        io.say(
            f"  {'member':<28}{'votes':>6}{'abst.':>6}{'agree':>7}{'kappa':>8}{'low':>8}"
            f"{'panel without it':>18}"
        )
        for m in p.members:
            io.say(
                f"  {clean(m.name, 27):<28}{m.items:>6}{m.abstained:>6}{pct(m.agreement, 2):>7}"
                f"{pct(m.kappa):>8}{pct(m.kappa_lower):>8}{pct(m.kappa_without):>18}"
                + ("  adds nothing" if m.adds_nothing else "")
            )
        for pair in p.pairs:
            io.say(
                f"  {clean(pair.first, 27)} and {clean(pair.second, 27)} agree on "
                f"{pct(pair.agreement, 2)} of {items(pair.items)} (kappa {pct(pair.kappa)})"
            )
    if c.length_bands:
        io.say("by answer length (verbosity):")
        for b in c.length_bands:
            io.say(
                f"  {b.band:<7}{b.shortest:>5}-{b.longest:<5} chars {items(b.items):>10}: people "
                f"pass {b.people_pass:.2f}, judge passes {b.judge_pass:.2f}, agree "
                f"{b.agreement:.2f}, kappa {pct(b.kappa)}"
            )
    for p_ in c.position:
        io.say(
            f"position consistency of {clean(p_.judge, 40)}: {p_.consistent} of {p_.items} "
            f"votes survived swapping the answers ({p_.rate:.3f}, 95% {p_.lower:.3f} to "
            f"{p_.upper:.3f})"
        )
    if c.cascade is not None:
        _print_cascade(io, c.cascade)
    for warning in c.warnings:
        io.say(f"warning: {warning}")


def _print_cascade(io: Io, k: CascadeCalibration) -> None:
    """The fitted cascade: each level's threshold, share, agreement, and the cost."""
    io.say(
        f"cascade fitted on {items(k.items)}: each level's kept verdicts agree with people "
        f"at {k.target:.2f} or better, with probability {1 - k.risk:.2f} (--target-agreement "
        f"{k.target:g}, --risk {k.risk:g}); `refinekit eval --calibration RUN` applies it"
    )
    io.say(
        f"  {'level':<28}{'threshold':>10}{'decided':>9}{'share':>7}{'guaranteed':>12}"
        f"{'observed':>10}{'alone':>7}{'calls':>7}"
    )
    for level in k.levels:
        threshold = "never" if level.threshold is None else f"{level.threshold:.3f}"
        guaranteed = "-" if level.guaranteed is None else f">={level.guaranteed:.2f}"
        calls = "?" if level.calls is None else f"{level.calls:g}"
        io.say(
            f"  {clean(level.name, 27):<28}{threshold:>10}{level.decided:>9}{level.share:>7.2f}"
            f"{guaranteed:>12}{pct(level.agreement, 2):>10}{pct(level.alone, 2):>7}{calls:>7}"
        )
    io.say(
        f"  abstained (no level sure enough): {items(k.abstained)} ({k.abstained_share:.2f}); "
        f"decided {k.coverage:.2f}, agreement {pct(k.agreement)}, kappa {pct(k.kappa)}"
    )
    if k.unguaranteed:
        io.say(
            f"  the last level decided {items(k.unguaranteed)} below its threshold "
            "(abstain=False): outside the guarantee"
        )
    if k.calls_per_verdict is not None and k.strongest_calls is not None:
        money = ""
        if k.cost_per_verdict is not None and k.strongest_cost is not None:
            money = f"; {usd(k.cost_per_verdict)} against {usd(k.strongest_cost)}"
        io.say(
            f"  cost per verdict: {k.calls_per_verdict:.2f} model calls, against "
            f"{k.strongest_calls:g} for the strongest level alone{money}"
        )


def _print_calibration(io: Io, c: Calibration) -> None:
    io.say()
    left = c.unavailable + c.inconclusive
    io.say(
        f"judged {items(c.items)}"
        + (
            f" ({c.unavailable} unavailable and {c.inconclusive} inconclusive left out)"
            if left
            else ""
        )
    )
    io.say(f"{'':>12}{'people pass':>13}{'people fail':>13}")
    io.say(f"{'judge pass':>12}{c.both_pass:>13}{c.human_fail_only:>13}")
    io.say(f"{'judge fail':>12}{c.judge_fail_only:>13}{c.both_fail:>13}")
    io.say(
        f"accuracy {pct(c.accuracy)}, precision on failures {pct(c.precision_fail)}, "
        f"recall on failures {pct(c.recall_fail)}, Cohen's kappa {pct(c.kappa)}"
        + (
            f" (95% {pct(c.kappa_lower)} to {pct(c.kappa_upper)})"
            if c.kappa_lower is not None
            else ""
        )
    )
    io.say(
        f"sensitivity {pct(c.sensitivity)} (of the answers people passed, the judge passed), "
        f"specificity {pct(c.specificity)} (of those people failed, the judge failed): "
        "what `refinekit eval --calibration` corrects the pass rate with"
    )
    _print_agreement(io, c)
    if c.reliability is None or c.thresholds is None:
        io.say(
            f"probabilities: {c.with_probability} of {counted(c.items, 'verdict')} carried one; a "
            "reliability table and thresholds need one on every verdict (a criteria judge on "
            "an endpoint that returns logprobs gives them)"
        )
        return
    io.say(f"reliability ({items(c.items)}):")
    io.say(f"  {'bin':<11}{'items':>6}{'mean p':>9}{'passed':>9}")
    for b in c.reliability:
        io.say(
            f"  {b.lower:.2f}-{b.upper:.2f}{'':<2}{b.count:>6}{b.mean_probability:>9.3f}"
            f"{b.observed_rate:>9.3f}"
        )
    io.say(f"expected calibration error {pct(c.ece)}")
    t = c.thresholds
    io.say(f"recommended thresholds, at most {t.target_error:.0%} wrong on each side:")
    if t.pass_at is None:
        io.say("  pass: no threshold keeps wrong passes that low")
    else:
        io.say(
            f"  pass at p >= {t.pass_at:.3f}: {items(t.passes)}, {t.wrong_passes} failed by "
            f"people (95% upper bound {pct(t.pass_error_upper)})"
        )
    if t.fail_at is None:
        io.say("  fail: no threshold keeps wrong fails that low")
    else:
        io.say(
            f"  fail at p <= {t.fail_at:.3f}: {items(t.fails)}, {t.wrong_fails} passed by "
            f"people (95% upper bound {pct(t.fail_error_upper)})"
        )
    share = t.uncertain / c.items if c.items else 0.0
    io.say(f"  uncertain (for a person to look at): {items(t.uncertain)} ({share:.0%})")
    if t.pass_at is not None and t.fail_at is not None:
        io.say(
            f"  as a criterion: Criterion(..., pass_at={t.pass_at:.3f}, fail_at={t.fail_at:.3f})"
        )
