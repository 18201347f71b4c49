"""`refinekit eval`: `refinekit.eval.run` with its arguments parsed and its result printed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from .._core.config import is_testing
from .._core.numbers import usd
from ..eval import CaseRecord, Comparison, EvalOptions, EvalResult, run
from ._output import (
    EXIT_GATE,
    EXIT_USAGE,
    Io,
    batch_line,
    cases,
    clean,
    cost_line,
    pct,
    setup_failed,
    streams,
    watched_run,
    write_report,
)

__all__ = ["eval_command"]


def eval_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit eval`; `args` are the parsed options. Returns the exit status."""
    io = streams(out, err)
    result = watched_run(io, "eval", args, run, EvalOptions)
    if isinstance(result, int):
        return result
    _print_cases(io, result.cases)
    if result.setup_failed:  # no gate, no comparison: nothing was measured
        return setup_failed(io, "eval", args.report, result, "no answer was judged")
    status = _print_summary(io, result, args.judge)
    if args.compare is not None:
        comparison = result.comparison
        if comparison is None:
            io.say(
                "compare: no earlier complete run of this golden file with the same judge in "
                "the store; nothing to compare with"
            )
        else:
            if comparison.before.dataset != result.run.dataset:
                io.say(
                    f"compare: run {comparison.before.id} is of another file "
                    f"({clean(comparison.before.dataset)}); comparing the questions both share"
                )
            _print_comparison(io, comparison, result.alpha)
            if result.regressed:
                status = EXIT_GATE
    if args.report is not None and not write_report(io, "eval", args.report, result):
        return EXIT_USAGE
    return status


_MARK = {
    "passed": "pass",
    "failed": "FAIL",
    "raised": "RAISED",
    "unavailable": "unavail",
    "inconclusive": "inconcl",
}


def _print_cases(io: Io, records: Sequence[CaseRecord]) -> None:
    io.say()
    # with --trials the count is of the case's trials passed, one row per case
    column = "trials" if any(r.trials for r in records) else "verdicts"
    io.say(f"{'#':>4}  {'outcome':<8} {column:>8} {'att':>3} {'corr':>4}  question / note")
    for r in records:
        verdicts = f"{r.passes}/{r.judgements}" if r.judgements else "-"
        io.say(
            f"{r.position:>4}  {_MARK[r.outcome]:<8} {verdicts:>8} {r.attempts:>3} "
            f"{r.corrections:>4}  {clean(r.question, 60)}"
        )
        note = r.error if r.outcome in ("raised", "unavailable", "inconclusive") else r.feedback
        if r.outcome != "passed" and note:
            io.say(f"{'':>33}-> {clean(note, 90)}")


def _print_summary(io: Io, result: EvalResult, judge: str | None) -> int:
    s = result.summary
    io.say()
    if s.no_context_advice is not None:  # once, before the figure it explains
        io.say(f"context: {s.no_context_advice}")
    if s.rate is None:
        io.say(f"pass rate: n/a (none of the {cases(s.cases)} was judged)")
    else:
        io.say(
            f"pass rate {s.rate:.3f} ({s.passed}/{s.counted}), 95% Wilson interval "
            f"{s.lower:.3f} to {s.upper:.3f}, over {cases(s.counted)} ({s.passed} passed, "
            f"{s.failed} failed, {s.raised} raised: a function that raised counts as failed)"
        )
    io.say(
        f"not counted: {s.unavailable} unavailable (the judge could not judge), "
        f"{s.inconclusive} inconclusive"
    )
    if s.trials is not None:
        _print_trials(io, s.trials)
    elif s.repeated:
        lo, hi = s.flip_interval
        io.say(
            f"judge consistency: {s.flipped} of {s.repeated} answers judged more than once got "
            f"differing verdicts (flip rate {s.flipped / s.repeated:.3f}, 95% {lo:.3f} to {hi:.3f})"
        )
    if result.corrected is not None:
        _print_corrected(io, result)
    if result.judge_warning:
        io.say(f"warning: {result.judge_warning}")
    if s.criteria:
        parts = []
        for name, c in s.criteria.items():
            decided = c.get("pass", 0) + c.get("fail", 0) + c.get("uncertain", 0)
            parts.append(f"{name} {c.get('pass', 0)}/{decided}")
        io.say("criteria passed: " + ", ".join(parts))
    io.say(
        f"attempts per answer: mean {s.attempts_mean:.2f}, max {s.attempts_max}; corrections: "
        f"{s.corrections_total} in all, max {s.corrections_max} per answer"
    )
    roles = (
        ("answer model", s.usage["answer"]),
        ("judges inside the function", s.usage["answer_judge"]),
        ("the run's judge", s.usage["judge"]),
    )
    spent = [f"{name} {_usage(u)}" for name, u in roles if u["model_calls"]]
    io.say(
        "model calls seen: " + ("; ".join(spent) if spent else "none")
        if judge or spent
        else "model calls seen: none (column checks only)"
    )
    batched = batch_line(result.run.summary)
    if batched is not None:
        io.say(batched)
    cached = result.judge_cache
    if cached is not None:
        io.say(
            f"judge cache: {cached['hits']} of {cached['hits'] + cached['misses']} judge "
            f"requests answered from the store ({cached['misses']} sent to the model)"
        )
    if s.cost is not None:
        _print_cost(io, s.cost)
    if s.tiers is not None:
        _print_tiers(io, s.tiers)
    if s.cascade is not None or result.cascade_fit is not None:
        _print_cascade(io, s.cascade, result.cascade_fit)
    if result.rate_limit_waits:
        slept = "not slept: testing switch on" if is_testing() else "in all"
        waits = result.rate_limit_waits
        times = "once" if waits == 1 else f"{waits} times"
        io.say(f"rate limited: backed off {times} ({result.rate_limit_seconds:.1f} s {slept})")
    if not result.measured:
        io.say("gate: no case has a pass or fail outcome, so the run measured nothing: FAIL")
        return EXIT_GATE
    floor = result.min_pass_rate
    if floor is None:
        return 0
    bound = "corrected lower bound" if result.corrected is not None else "lower bound"
    lower = result.gate_lower
    if not result.pass_rate_held:
        io.say(f"gate: {bound} {lower:.3f} is under --min-pass-rate {floor:.3f}: FAIL")
        return EXIT_GATE
    io.say(f"gate: {bound} {lower:.3f} >= --min-pass-rate {floor:.3f}: pass")
    return 0


def _print_trials(io: Io, t: dict[str, Any]) -> None:
    """pass^k, pass@k, the rate per trial and the flip rates of a run with --trials."""
    k, every, some = t["k"], t["pass_all"], t["pass_any"]

    def rate(part: dict[str, Any]) -> str:
        if part["rate"] is None:
            return "n/a"
        return (
            f"{part['rate']:.3f} ({part['cases']}/{t['counted']}, 95% {part['lower']:.3f} to "
            f"{part['upper']:.3f})"
        )

    io.say(
        f"trials: {k} per case; pass^{k} {rate(every)}: every trial passed (the pass rate); "
        f"pass@{k} {rate(some)}: at least one passed"
    )
    per = "n/a" if t["per_trial"] is None else f"{t['per_trial']:.3f}"
    flip = "n/a" if t["flip_rate"] is None else f"{t['flip_rate']:.3f}"
    io.say(
        f"  per trial {per} ({t['trials_counted']} trials); {t['flipped']} of {t['counted']} "
        f"cases flipped between trials (mean flip rate {flip}: the chance two trials of a "
        "case disagree)"
    )


def _print_corrected(io: Io, result: EvalResult) -> None:
    c = result.corrected
    assert c is not None
    j = c.calibration
    se_lo, se_hi = c.sensitivity_interval
    sp_lo, sp_hi = c.specificity_interval
    rate = "n/a (the judge is no better than chance)" if c.rate is None else f"{c.rate:.3f}"
    io.say(
        f"corrected for the judge (calibration run {j.run}: sensitivity {j.sensitivity:.3f}, "
        f"95% {se_lo:.3f} to {se_hi:.3f}; specificity {j.specificity:.3f}, 95% {sp_lo:.3f} to "
        f"{sp_hi:.3f}; kappa {pct(j.kappa)}, lower bound {pct(j.kappa_lower)}): pass rate "
        f"{rate}, 95% {c.lower:.3f} to {c.upper:.3f} (the judge's uncertainty included)"
    )


def _print_cost(io: Io, c: dict[str, Any]) -> None:
    """The money lines: total and per case, answer and judge apart, and retries' share."""
    io.say(cost_line("cost", c, "case"))
    io.say(
        f"  answer {usd(c['answer'])} (judges inside the function included), "
        f"the run's judge {usd(c['judge'])}"
    )
    io.say(
        f"  retries and corrections: {usd(c['extra'])} (the answer calls after each case's "
        "first, part of the answer's cost)"
    )
    per_pass = c.get("per_pass")
    io.say(
        "  per passing case: "
        + ("n/a (no priced case passed)" if per_pass is None else usd(per_pass))
        + " (the run's cost over the cases that passed)"
    )


def _print_tiers(io: Io, t: dict[str, Any]) -> None:
    """Per tier of an escalating target: the cases that ended there, their pass rate, cost."""
    io.say(
        f"tiers ({t['cases']} cases on the ladder; a case ends at the tier that answered, or "
        "at the last one tried when the function raised):"
    )
    for tier in t["tiers"]:
        rate = (
            "pass rate n/a"
            if tier["rate"] is None
            else f"pass rate {tier['rate']:.3f} ({tier['passed']}/{tier['counted']}, 95% "
            f"{tier['lower']:.3f} to {tier['upper']:.3f})"
        )
        cost = "" if tier["cost"] is None else f", cost {usd(tier['cost'])}"
        io.say(
            f"  {clean(tier['name'], 40)}: ended {tier['ended']}, {rate}{cost}; tried in "
            f"{tier['tried']}, answered {tier['answered']}, {tier['model_calls']} calls, "
            f"{tier['tokens']:,} tokens"
        )


def _print_cascade(io: Io, shares: dict[str, Any] | None, fit: dict[str, Any] | None) -> None:
    """The cascade's fit (`--calibration`) and the share of the verdicts each level gave."""
    if fit is not None:
        shown = ", ".join("never" if t is None else f"{t:.3f}" for t in fit["thresholds"])
        io.say(
            f"cascade: the fit of calibration run {fit['calibration_run']} (agreement "
            f">= {fit['target']:.2f} at risk {fit['risk']:.2f}; thresholds {shown})"
        )
    if shares is not None:
        parts = [
            f"{clean(str(x.get('name') or x['level'] + 1), 40)} {x['decided']} ({x['share']:.2f})"
            for x in shares["levels"]
        ]
        parts.append(f"abstained {shares['abstained']} ({shares['abstained_share']:.2f})")
        io.say(f"cascade levels, of {cases(shares['items'])}: " + ", ".join(parts))


def _usage(u: dict[str, int]) -> str:
    tokens = u["prompt_tokens"] + u["completion_tokens"]
    return (
        f"{u['model_calls']} calls, {tokens:,} tokens "
        f"({u['prompt_tokens']:,} prompt + {u['completion_tokens']:,} completion)"
    )


def _print_comparison(io: Io, c: Comparison, alpha: float) -> None:
    io.say()
    io.say(
        f"compare with run {c.before.id}: {c.shared} questions judged in both runs; "
        f"{len(c.regressed)} regressed, {len(c.improved)} improved; exact McNemar p = "
        f"{c.p_value:.4f}"
        + (
            f" ({c.not_comparable} shared questions not judged in one run)"
            if c.not_comparable
            else ""
        )
    )
    spend = _spend(c)
    if spend:
        io.say(spend)
    for title, pairs in (("regressed", c.regressed), ("improved", c.improved)):
        for _, now in pairs:
            note = now.error or now.feedback if title == "regressed" else ""
            io.say(
                f"  {title}: #{now.position} {clean(now.question, 60)}"
                + (f" -> {clean(note, 60)}" if note else "")
            )
    if c.significant_regression(alpha):
        io.say(
            f"gate: significant regression ({len(c.regressed)} regressed > {len(c.improved)} "
            f"improved, p {c.p_value:.4f} < --alpha {alpha}): FAIL"
        )
    else:
        why = (
            f"p {c.p_value:.4f} >= --alpha {alpha}"
            if len(c.regressed) > len(c.improved)
            else f"{len(c.regressed)} regressed <= {len(c.improved)} improved"
        )
        io.say(f"gate: no significant regression ({why}): pass")


def _spend(c: Comparison) -> str:
    """The two runs' spend on the shared questions, and its ratio (empty when nothing to say)."""
    if c.cost_ratio is not None and c.before_cost is not None and c.after_cost is not None:
        return (
            f"  cost on those questions: {usd(c.after_cost)} in this run, "
            f"{usd(c.before_cost)} in run {c.before.id} (ratio {c.cost_ratio:.3f})"
        )
    if c.token_ratio is not None:
        return (
            f"  answer tokens on those questions: {c.after_tokens:,} in this run, "
            f"{c.before_tokens:,} in run {c.before.id} (ratio {c.token_ratio:.3f})"
        )
    return ""
