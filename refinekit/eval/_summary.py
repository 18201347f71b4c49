"""What a run measured: its figures (`Summary`), and two runs compared (`Comparison`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._core.types import Usage
from ._cascade_runs import level_shares
from ._money import money
from ._money import total as total_cost
from ._stats import flip_rate, mcnemar_exact, wilson_interval
from ._store import CaseRecord, RunInfo
from ._tiers import tier_figures

__all__ = [
    "CONFIDENCE",
    "Comparison",
    "Summary",
    "compare_runs",
    "measured",
    "summarise",
    "trial_figures",
]

CONFIDENCE = 0.95
"""The confidence level of every interval a run reports."""

_REFUSALS = frozenset(
    {
        "LowQualityAnswer",
        "CorrectionExhausted",
        "JsonParseError",
        "ResponseValidationError",
        "AnswerRejected",
    }
)


def measured(record: CaseRecord) -> bool:
    """Whether a case says something about an answer, not only about the setup.

    A `passed`, `failed` or `inconclusive` case reached a verdict (or a row check). A `raised`
    case did when refinekit refused an answer the model gave (`LowQualityAnswer`,
    `CorrectionExhausted`, `AnswerRejected`): the model answered, not well enough. Any other
    error (a connection error, a timeout, a bug in the function) and an `unavailable` case
    (the judge could not judge) reached no verdict. A run in which no case is measured is a
    failure of the setup, not a measurement.
    """
    if record.outcome in ("passed", "failed", "inconclusive"):
        return True
    if record.outcome == "raised":  # the stored error reads "TypeName: message"
        return (record.error or "").split(":", 1)[0].strip() in _REFUSALS
    return False


@dataclass(frozen=True)
class Summary:
    """The figures of an eval run.

    The pass rate counts `raised` cases as failures (the user got no answer) and leaves out
    `unavailable` and `inconclusive` ones (nothing was learnt about the answer); both are
    counted apart.

    Attributes:
        cases: The run's cases.
        passed: Cases whose answer passed.
        failed: Cases whose answer failed (the judge, or a row check).
        raised: Cases whose answer function raised: no answer reached the judge.
        unavailable: Cases the judge could not judge.
        inconclusive: Cases with no verdict: the evidence could not support one, or the
            repeated verdicts split evenly.
        rate: passed / (passed + failed + raised), or None when that is 0 / 0.
        lower: The rate's 95% Wilson lower bound (0 when there is no rate).
        upper: Its upper bound (1 when there is no rate).
        repeated: Cases judged more than once (`repeat`).
        flipped: Of those, cases whose verdicts disagreed.
        criteria: Per criterion (the row checks' and the judge's), how many cases it passed,
            failed, left uncertain or skipped, from each case's first verdict.
        attempts_mean: The mean of the attempts `@retry_on_low_quality` made per answer.
        attempts_max: The most attempts one answer took.
        corrections_total: The corrections `@self_correct` spent, in all.
        corrections_max: The most corrections one answer took.
        usage: Model calls, prompt tokens and completion tokens, by role: `answer` (the
            answering model), `answer_judge` (judges inside the function), `judge` (the
            run's judge).
        seconds: The answer functions' and the judging's time, summed over the cases.
        cost: With prices (`prices=`, `--prices`), the money: `total`, `per_case` (the mean
            over the priced cases), `answer` (the answer function's calls, judges inside it
            included), `judge` (the run's judge), `extra` (the answer calls after each case's
            first: retries and corrections; part of `answer`), `per_pass` (`total` over the
            priced cases that passed: the cost of a passing case; None when none passed),
            `priced` and `unpriced` (cases stored by a session without prices). None when no
            case was priced.
        no_context: Cases a check failed because no context document with a source reached
            it (`CaseRecord.lacks_context`): the target recorded none and the row gave none.
            They count as failed (`no_context_advice` says the way out).
        trials: With `trials` above 1 (`trial_figures`): `k`; over the counted cases,
            `pass_all` (pass^k: every trial passed; the pass rate itself) and `pass_any`
            (pass@k: at least one passed), each with its rate and 95% Wilson `lower` and
            `upper`; `per_trial` (the share of counted trials that passed, pass^1);
            `flipped` (cases whose trials disagreed) and `flip_rate` (the mean over the
            cases of the chance that two of its trials disagree). None otherwise.
        cascade: With a cascade judge (`refinekit.judges.cascade`), the share of the
            verdicts each level decided, from the verdicts' `cascade` metadata: `items`,
            `levels` (each `level`, `name`, `decided`, `share`), `abstained`, `abstained_share`;
            None otherwise.
    """

    cases: int
    passed: int
    failed: int
    raised: int
    unavailable: int
    inconclusive: int
    rate: float | None
    lower: float
    upper: float
    repeated: int
    flipped: int
    criteria: dict[str, dict[str, int]]
    attempts_mean: float
    attempts_max: int
    corrections_total: int
    corrections_max: int
    usage: dict[str, dict[str, int]]
    seconds: float
    cost: dict[str, Any] | None = None
    no_context: int = 0
    trials: dict[str, Any] | None = None
    tiers: dict[str, Any] | None = None
    cascade: dict[str, Any] | None = None

    @property
    def counted(self) -> int:
        """The cases the pass rate is computed over."""
        return self.passed + self.failed + self.raised

    @property
    def flip_interval(self) -> tuple[float, float]:
        """The 95% Wilson interval of the flip rate, `flipped` out of `repeated`."""
        return wilson_interval(self.flipped, self.repeated, CONFIDENCE)

    @property
    def no_context_advice(self) -> str | None:
        """What to do when cases failed with no context document to cite (`no_context`).

        None when none did.
        """
        if not self.no_context:
            return None
        some = (
            "every case"
            if self.no_context == self.cases
            else f"{self.no_context} of {self.cases} cases"
        )
        return (
            f"{some} failed cites_source because no context document with a source reached it: "
            "the target recorded none and the golden file gave none. Call "
            "refinekit.record_context(docs) in the target with the documents it used (each with "
            "its source), or give them in the golden file's context column (in JSONL an object "
            '{"text": ..., "source": ...} or a list of them; a CSV cell is text without a source)'
        )

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict, as the run store keeps them (no `cost` unpriced)."""
        figures = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for optional in ("cost", "trials", "tiers", "cascade"):
            if figures[optional] is None:
                del figures[optional]
        return figures


def summarise(cases: Sequence[CaseRecord]) -> Summary:
    """The figures of a run's cases."""
    count = {o: 0 for o in ("passed", "failed", "raised", "unavailable", "inconclusive")}
    criteria: dict[str, dict[str, int]] = {}
    usage = {r: Usage() for r in ("answer", "answer_judge", "judge")}
    for case in cases:
        count[case.outcome] += 1
        for criterion in case.criteria:
            name = str(criterion.get("name"))
            outcome = str(criterion.get("outcome"))
            slot = criteria.setdefault(name, {"pass": 0, "fail": 0, "uncertain": 0, "skipped": 0})
            slot[outcome] = slot.get(outcome, 0) + 1
        usage["answer"] += case.answer_usage
        usage["answer_judge"] += case.answer_judge_usage
        usage["judge"] += case.judge_usage
    counted = count["passed"] + count["failed"] + count["raised"]
    lower, upper = wilson_interval(count["passed"], counted, CONFIDENCE)
    repeated = [c for c in cases if c.judgements > 1]
    return Summary(
        cases=len(cases),
        rate=count["passed"] / counted if counted else None,
        lower=lower,
        upper=upper,
        repeated=len(repeated),
        flipped=sum(c.flipped for c in repeated),
        criteria=criteria,
        attempts_mean=sum(c.attempts for c in cases) / len(cases) if cases else 0.0,
        attempts_max=max((c.attempts for c in cases), default=0),
        corrections_total=sum(c.corrections for c in cases),
        corrections_max=max((c.corrections for c in cases), default=0),
        usage={
            role: {
                "model_calls": u.model_calls,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
            }
            for role, u in usage.items()
        },
        seconds=sum(c.answer_seconds + c.judge_seconds for c in cases),
        cost=money(cases),
        no_context=sum(c.lacks_context for c in cases),
        trials=trial_figures(cases),
        tiers=tier_figures(cases),
        cascade=level_shares(cases),
        **count,
    )


_COUNTED = ("passed", "failed", "raised")


def trial_figures(cases: Sequence[CaseRecord]) -> dict[str, Any] | None:
    """pass@k, pass^k and the flip rates of a run whose cases had several trials.

    Over the cases the pass rate counts (passed, failed, raised): pass^k is the share whose
    every trial passed (the cases that passed), pass@k the share with at least one trial
    passed; each gets its 95% Wilson interval over those cases. A case's flip rate is the
    chance that two of its trials disagree (`flip_rate`), from its counted trials. None when
    no case had more than one trial.
    """
    tried = [c for c in cases if len(c.trials) > 1]
    if not tried:
        return None
    counted = [c for c in tried if c.outcome in _COUNTED]
    every = sum(c.outcome == "passed" for c in counted)
    some = sum(any(t.get("outcome") == "passed" for t in c.trials) for c in counted)
    runs = [[t.get("outcome") for t in c.trials if t.get("outcome") in _COUNTED] for c in counted]
    flips = (flip_rate(outcomes.count("passed"), len(outcomes)) for outcomes in runs)
    rates = [r for r in flips if r is not None]
    total_trials = sum(len(o) for o in runs)

    def share(hits: int) -> dict[str, Any]:
        lower, upper = wilson_interval(hits, len(counted), CONFIDENCE)
        rate = hits / len(counted) if counted else None
        return {"cases": hits, "rate": rate, "lower": lower, "upper": upper}

    return {
        "k": max(len(c.trials) for c in tried),
        "counted": len(counted),
        "pass_all": share(every),
        "pass_any": share(some),
        "per_trial": sum(o.count("passed") for o in runs) / total_trials if total_trials else None,
        "trials_counted": total_trials,
        "flipped": sum(c.flipped for c in counted),
        "flip_rate": sum(rates) / len(rates) if rates else None,
    }


@dataclass(frozen=True)
class Comparison:
    """Two runs on the questions they share: what regressed, what improved, and McNemar's p.

    With an escalating target compared with its strongest tier alone (docs/workflow.md,
    "Escalation in evaluation"), `p_value` is the paired test of "ladder vs strong tier
    alone" and `cost_ratio` what the ladder costs for what the strong tier alone cost.

    Attributes:
        before: The earlier run.
        after: The later run.
        shared: Questions judged (passed, failed or raised) in both runs.
        regressed: The pairs (before, after) that passed before and not after.
        improved: The pairs that passed after and not before.
        p_value: The exact McNemar p-value of regressed against improved.
        not_comparable: Shared questions unavailable or inconclusive in either run.
        before_cost: What the shared questions cost in the earlier run (answer and judging);
            None when one of them was stored without prices.
        after_cost: The same in the later run.
        before_tokens: The answer function's tokens (prompt and completion) on the shared
            questions in the earlier run.
        after_tokens: The same in the later run.
    """

    before: RunInfo
    after: RunInfo
    shared: int
    regressed: list[tuple[CaseRecord, CaseRecord]]
    improved: list[tuple[CaseRecord, CaseRecord]]
    p_value: float
    not_comparable: int
    before_cost: float | None = None
    after_cost: float | None = None
    before_tokens: int = 0
    after_tokens: int = 0

    @property
    def cost_ratio(self) -> float | None:
        """`after_cost / before_cost`; None when either is unknown or the earlier is 0."""
        if self.before_cost is None or self.after_cost is None or self.before_cost <= 0:
            return None
        return self.after_cost / self.before_cost

    @property
    def token_ratio(self) -> float | None:
        """`after_tokens / before_tokens`; None when the earlier run's are 0."""
        return self.after_tokens / self.before_tokens if self.before_tokens else None

    def significant_regression(self, alpha: float) -> bool:
        """More regressions than improvements, and unlikely to be chance at level `alpha`."""
        return len(self.regressed) > len(self.improved) and self.p_value < alpha


def _spent(cases: Sequence[CaseRecord]) -> tuple[float | None, int]:
    """What cases cost (None when one is unpriced) and their answer tokens."""
    tokens = sum(c.answer_usage.total_tokens for c in cases)
    if not all(c.cost for c in cases):
        return None, tokens
    return sum(total_cost(c.cost) for c in cases), tokens


def _by_question(cases: Sequence[CaseRecord]) -> dict[tuple[str, int], CaseRecord]:
    seen: dict[str, int] = {}
    out = {}
    for case in sorted(cases, key=lambda c: c.position):
        n = seen.get(case.question, 0)
        seen[case.question] = n + 1
        out[(case.question, n)] = case
    return out


def compare_runs(
    before: RunInfo,
    before_cases: Sequence[CaseRecord],
    after: RunInfo,
    after_cases: Sequence[CaseRecord],
) -> Comparison:
    """Pair the two runs' cases by question; a raised case counts as a failure.

    The costs and tokens compared are those of the pairs judged in both runs.
    """
    old, new = _by_question(before_cases), _by_question(after_cases)
    regressed, improved, pairs = [], [], []
    not_comparable = 0
    for key in old.keys() & new.keys():
        a, b = old[key], new[key]
        if a.outcome in ("unavailable", "inconclusive") or b.outcome in (
            "unavailable",
            "inconclusive",
        ):
            not_comparable += 1
            continue
        pairs.append((a, b))
        was, now = a.outcome == "passed", b.outcome == "passed"
        if was and not now:
            regressed.append((a, b))
        elif now and not was:
            improved.append((a, b))
    regressed.sort(key=lambda p: p[1].position)
    improved.sort(key=lambda p: p[1].position)
    before_cost, before_tokens = _spent([a for a, _ in pairs])
    after_cost, after_tokens = _spent([b for _, b in pairs])
    return Comparison(
        before=before,
        after=after,
        shared=len(pairs),
        regressed=regressed,
        improved=improved,
        p_value=mcnemar_exact(len(regressed), len(improved)),
        not_comparable=not_comparable,
        before_cost=before_cost,
        after_cost=after_cost,
        before_tokens=before_tokens,
        after_tokens=after_tokens,
    )
