"""Panels: several evaluators voting on one answer, with abstentions counted and ties ruled.

A panel runs its members one after another, the cheapest first (rule checks, then model
judges by the calls they make), and stops as soon as no member still to run could change the
outcome. Each member's verdict is a vote: `pass`, `fail`, or an abstention (the member could
not judge: unjudged, inconclusive, or a `JudgeUnavailable` / `JudgeReplyError` it raised).
Abstentions are counted and shown, never dropped: the panel needs a quorum of votes, and
below it the panel is unjudged (its `judge_error_policy` decides, as any judge's does).

The outcome is a function of the votes alone (`outcome`), never of the members' order: the
early stop only saves the calls whose votes cannot matter, so the panel's verdict is the
same whichever order its members run in (`order=`), and the same as when every member runs
(what `refinekit calibrate` does, `every_member()`, so that each member is measured on every
item).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._core.errors import BudgetExceeded, JudgeError, JudgeMisconfigured, JudgeUnavailable
from .._core.numbers import is_number, is_real, shown
from .._core.redact import redact
from .._core.types import CriterionResult, EvaluationRequest, Verdict
from .._engine.evaluators import Adapted, EvaluatorLike, FlowEvaluator, as_evaluator
from .._engine.flow import Evaluate, Flow
from .._engine.policy import JudgeErrorPolicy, check_policy, judge_failure
from ..checks import Check

__all__ = [
    "Panel",
    "PanelRule",
    "Tie",
    "Vote",
    "every_member",
    "expected_calls",
    "named_evaluators",
    "outcome",
    "panel",
]

PanelRule = Literal["majority", "mean", "all", "any"]
"""How a panel's votes make its verdict (see `panel()`)."""

Tie = Literal["fail", "inconclusive"]
"""What a majority panel's tie comes to: a failed verdict, or an inconclusive one."""

Vote = Literal["pass", "fail", "abstain", "skipped"]
"""A member's part in a verdict: its vote, an abstention, or not run (its vote could not
change the outcome)."""

Decision = Literal["pass", "fail", "tie", "below_quorum"]

UNKNOWN_CALLS = 1.0
"""The model calls an evaluator of unknown cost is taken to make, for the running order."""

_EVERY_MEMBER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "refinekit_panel_every_member", default=False
)


@contextlib.contextmanager
def every_member() -> Iterator[None]:
    """Inside the block, panels run every member: no early stop.

    What `refinekit calibrate` does, so each member's agreement with people is measured on
    every item. The panels' verdicts are the same as with the early stop; only the calls
    differ. A context variable: it follows the code into the threads and tasks refinekit
    starts from the block.
    """
    token = _EVERY_MEMBER.set(True)
    try:
        yield
    finally:
        _EVERY_MEMBER.reset(token)


def expected_calls(evaluator: Any) -> float:
    """The model calls an evaluator is expected to make: what a panel's order goes by.

    An `expected_calls` attribute (a number) wins; a rule check (`refinekit.checks`) makes
    none; `all_of` / `any_of` / `weighted` and panels make their parts' (at most); anything
    else is taken to make `UNKNOWN_CALLS` (1).
    """
    obj = evaluator.wrapped if isinstance(evaluator, Adapted) else evaluator
    declared = getattr(obj, "expected_calls", None)
    if is_number(declared) and is_real(declared) and declared >= 0:
        return float(declared)
    if isinstance(obj, Check):
        return 0.0
    children = getattr(obj, "children", None)
    if isinstance(obj, FlowEvaluator) and isinstance(children, tuple):
        return sum(expected_calls(c) for c in children)
    return UNKNOWN_CALLS


def default_quorum(rule: PanelRule, members: int) -> int:
    """The quorum when none is given: a majority of the members, every member for all/any."""
    return members if rule in ("all", "any") else members // 2 + 1


def outcome(
    rule: PanelRule,
    scores: Sequence[float | None],
    *,
    quorum: int,
    threshold: float = 0.5,
) -> Decision:
    """A panel's decision from its members' votes, whatever their order.

    Args:
        rule: The panel's rule.
        scores: One entry per member that voted or abstained: the member's score (1.0 for a
            pass, 0.0 for a fail under the discrete rules; its score under `mean`), or None
            for an abstention. Skipped members are not in it.
        quorum: The fewest votes (not abstentions) the rule needs.
        threshold: The lowest passing mean (`mean` only).

    Returns:
        `pass`, `fail`, `tie` (a majority panel whose votes split evenly) or `below_quorum`.
    """
    votes = [s for s in scores if s is not None]
    passes = sum(1 for s in votes if s >= 0.5)
    fails = len(votes) - passes
    if rule == "all" and fails:
        return "fail"  # it cannot pass any more, whatever the others say
    if rule == "any" and passes:
        return "pass"
    if len(votes) < quorum:
        return "below_quorum"
    if rule == "all":
        return "pass"
    if rule == "any":
        return "fail"
    if rule == "mean":
        return "pass" if sum(votes) / len(votes) >= threshold else "fail"
    if passes > fails:
        return "pass"
    if fails > passes:
        return "fail"
    return "tie"


def _settled(
    rule: PanelRule, scores: Sequence[float | None], left: int, quorum: int, threshold: float
) -> bool:
    """Whether no vote of the `left` members still to run can change the decision."""
    if left == 0:
        return True
    if rule == "mean":
        votes = [s for s in scores if s is not None]
        if len(votes) < quorum:
            return False  # the rest may abstain (below quorum) or vote (a verdict)
        total, n = sum(votes), len(votes)
        lowest = total / (n + left)  # every other member votes 0
        highest = (total + left) / (n + left)  # every other member votes 1
        return lowest >= threshold or highest < threshold
    seen = set()
    for passes in range(left + 1):
        for fails in range(left - passes + 1):
            abstains = left - passes - fails
            more: list[float | None] = [1.0] * passes + [0.0] * fails + [None] * abstains
            seen.add(outcome(rule, [*scores, *more], quorum=quorum, threshold=threshold))
            if len(seen) > 1:
                return False
    return True


@dataclass(frozen=True)
class _Member:
    name: str
    evaluator: Adapted
    calls: float


def named_evaluators(items: Sequence[Any], what: str) -> list[tuple[str, Adapted, float]]:
    """Each item's name, evaluator and expected model calls: a panel's members, a cascade's levels.

    An item is an evaluator or a `(name, evaluator)` pair; unnamed items of the same kind are
    told apart by their place (`relevancy#2`). `what` names an item in errors ("panel
    member").

    Raises:
        TypeError: An item is a tuple that is not a (non-empty name, evaluator) pair.
        ValueError: Two items are given the same name.
    """
    made: list[tuple[str, Adapted, float]] = []
    names: dict[str, int] = {}
    for item in items:
        given = None
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not item[0]:
                raise TypeError(
                    f"a {what} is an evaluator or a (name, evaluator) pair, got {item!r}"
                )
            given, item = item
        adapted = as_evaluator(item)
        name = given or adapted.name
        if name in names:  # two of the same kind: told apart by their place
            names[name] += 1
            if given is not None:
                raise ValueError(f"two {what}s are named {given!r}: names must be unique")
            name = f"{name}#{names[name]}"
        names.setdefault(name, 1)
        made.append((name, adapted, expected_calls(adapted)))
    return made


def _members(members: Sequence[Any]) -> list[_Member]:
    return [_Member(*named) for named in named_evaluators(members, "panel member")]


def _vote_of(verdict: Verdict, rule: PanelRule) -> float:
    if rule == "mean":
        if is_number(verdict.score) and is_real(verdict.score):
            return min(1.0, max(0.0, float(verdict.score)))
        return 1.0 if verdict.passed else 0.0
    return 1.0 if verdict.passed else 0.0


def _abstention(error: Exception) -> str | None:
    """Why a member that raised abstains; None when the error must reach the caller.

    A budget's stop, a misconfigured judge, a failure a `"fail_closed"` policy raised, and
    anything that is not a `JudgeError` (a bug in a check) are raised; an outage or an
    unreadable reply is an abstention.
    """
    if isinstance(error, BudgetExceeded | JudgeMisconfigured):
        return None
    if isinstance(error, JudgeError) and not error.fail_closed:
        text = redact(" ".join(str(error).split()))[:300]
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return None


class Panel(FlowEvaluator):
    """Several evaluators voting on one answer; see `panel()`."""

    def __init__(
        self,
        members: Sequence[EvaluatorLike | tuple[str, EvaluatorLike]],
        rule: PanelRule,
        *,
        quorum: int | None,
        threshold: float,
        on_tie: Tie,
        order: Literal["cost", "given"],
        name: str | None,
        judge_error_policy: JudgeErrorPolicy | None,
    ) -> None:
        given: object = members
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError("panel() takes a list of evaluators")
        if not members:
            raise ValueError("a panel needs at least one member")
        if rule not in ("majority", "mean", "all", "any"):
            raise ValueError(f"rule must be 'majority', 'mean', 'all' or 'any', got {rule!r}")
        if on_tie not in ("fail", "inconclusive"):
            raise ValueError(f"on_tie must be 'fail' or 'inconclusive', got {on_tie!r}")
        if order not in ("cost", "given"):
            raise ValueError(f"order must be 'cost' or 'given', got {order!r}")
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0.0 <= threshold <= 1.0
        ):
            raise ValueError(f"threshold must be a number from 0 to 1, got {shown(threshold)}")
        if judge_error_policy is not None:
            check_policy(judge_error_policy)
        made = _members(members)
        n = len(made)
        if quorum is None:
            quorum = default_quorum(rule, n)
        elif isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= n:
            raise ValueError(
                f"quorum must be a whole number from 1 to the {n} members, got {quorum!r}"
            )
        self.rule: PanelRule = rule
        self.quorum = quorum
        self.threshold = float(threshold)
        self.on_tie: Tie = on_tie
        self.order = order
        self.judge_error_policy = judge_error_policy
        self.members = tuple(made)
        # stable: members of the same cost run in the order given
        self.running = (
            tuple(sorted(made, key=lambda m: m.calls)) if order == "cost" else tuple(made)
        )
        self.children = tuple(m.evaluator for m in made)
        self.name = name or f"panel({rule}: " + ", ".join(m.name for m in made) + ")"

    @property
    def expected_calls(self) -> float:
        """The most model calls the panel makes: every member's (the early stop may spare some)."""
        return sum(m.calls for m in self.members)

    @property
    def member_names(self) -> tuple[str, ...]:
        """The members' names, as their votes are recorded, in the order given."""
        return tuple(m.name for m in self.members)

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        exhaustive = _EVERY_MEMBER.get()
        results: dict[str, tuple[Vote, Verdict | None, str | None]] = {}
        scores: list[float | None] = []
        for i, member in enumerate(self.running):
            if not exhaustive and _settled(
                self.rule, scores, len(self.running) - i, self.quorum, self.threshold
            ):
                break
            try:
                verdict: Verdict = yield Evaluate(member.evaluator, request)
            except Exception as exc:
                reason = _abstention(exc)
                if reason is None:
                    raise
                results[member.name] = ("abstain", None, reason)
                scores.append(None)
                continue
            if not verdict.judged:
                why = verdict.reason or verdict.status
                results[member.name] = ("abstain", verdict, f"{verdict.status}: {why}")
                scores.append(None)
                continue
            results[member.name] = ("pass" if verdict.passed else "fail", verdict, None)
            scores.append(_vote_of(verdict, self.rule))
        decision = outcome(self.rule, scores, quorum=self.quorum, threshold=self.threshold)
        return self._verdict(decision, results, scores)

    def _record(
        self, results: dict[str, tuple[Vote, Verdict | None, str | None]]
    ) -> tuple[list[dict[str, Any]], list[CriterionResult]]:
        members: list[dict[str, Any]] = []
        criteria: list[CriterionResult] = []
        for member in self.members:
            vote, verdict, reason = results.get(member.name, ("skipped", None, None))
            entry: dict[str, Any] = {"name": member.name, "vote": vote}
            if verdict is not None:
                entry["score"] = verdict.score
                entry["status"] = verdict.status
                if verdict.feedback:
                    entry["feedback"] = verdict.feedback
                if verdict.metadata:
                    entry["metadata"] = dict(verdict.metadata)
            if reason is not None:
                entry["reason"] = reason
            members.append(entry)
            outcome_of = {"pass": "pass", "fail": "fail", "abstain": "uncertain"}
            criteria.append(
                CriterionResult(
                    name=member.name,
                    outcome=outcome_of.get(vote, "skipped"),  # type: ignore[arg-type]
                    probability=None,
                    source="panel",
                    feedback=(verdict.feedback if verdict is not None else "") or reason or "",
                )
            )
        return members, criteria

    def _verdict(
        self,
        decision: Decision,
        results: dict[str, tuple[Vote, Verdict | None, str | None]],
        scores: list[float | None],
    ) -> Verdict:
        members, criteria = self._record(results)
        votes = [s for s in scores if s is not None]
        passes = sum(1 for m in members if m["vote"] == "pass")
        fails = sum(1 for m in members if m["vote"] == "fail")
        abstained = sum(1 for m in members if m["vote"] == "abstain")
        record: dict[str, Any] = {
            "rule": self.rule,
            "quorum": self.quorum,
            "members": members,
            "passes": passes,
            "fails": fails,
            "abstained": abstained,
            "skipped": len(self.members) - len(results),
            "decision": decision,
        }
        if self.rule == "mean":
            record["threshold"] = self.threshold
        if self.rule == "majority":
            record["on_tie"] = self.on_tie
        metadata = {"judge": self.name, "panel": record}
        tally = f"{passes} pass, {fails} fail, {abstained} abstained of {len(self.members)}"
        if decision == "below_quorum":
            reason = f"PANEL_BELOW_QUORUM: {len(votes)} of {len(self.members)} members voted"
            if all(
                verdict is not None and verdict.status == "inconclusive"
                for vote, verdict, _ in results.values()
                if vote == "abstain"
            ):
                return Verdict.inconclusive(reason, **metadata)
            error = JudgeUnavailable(
                f"panel {self.name!r} is below its quorum of {self.quorum}: {tally}",
                model=self.name,
            )
            error.panel = record  # type: ignore[attr-defined]  # what a run records
            return judge_failure(error, self.judge_error_policy, **metadata)
        if decision == "tie" and self.on_tie == "inconclusive":
            return Verdict.inconclusive(f"PANEL_TIE: {tally}", **metadata)
        passed = decision == "pass"
        if self.rule == "mean":
            score = sum(votes) / len(votes)
        elif self.rule == "all":
            score = min(votes)
        elif self.rule == "any":
            score = max(votes)
        else:
            score = passes / len(votes)
        feedback = ""
        if not passed:
            notes = [m["feedback"] for m in members if m["vote"] == "fail" and m.get("feedback")]
            feedback = " ".join(dict.fromkeys(notes)) or (
                f"The panel split evenly ({tally})." if decision == "tie" else ""
            )
        return Verdict(
            passed=passed,
            score=score,
            feedback=feedback,
            criteria=tuple(criteria),
            metadata=metadata,
        )

    def __repr__(self) -> str:
        return f"<evaluator {self.name}>"


def panel(
    members: Sequence[EvaluatorLike | tuple[str, EvaluatorLike]],
    rule: PanelRule = "majority",
    *,
    quorum: int | None = None,
    threshold: float = 0.5,
    on_tie: Tie = "fail",
    order: Literal["cost", "given"] = "cost",
    name: str | None = None,
    judge_error_policy: JudgeErrorPolicy | None = None,
) -> Panel:
    """A panel of evaluators that vote on each answer.

    Members are any evaluators: rule checks, model judges, functions, other panels; each may
    be given as a `(name, evaluator)` pair to name its vote (two members of the same kind
    are otherwise named `criteria` and `criteria#2`). Each member's verdict is a vote:
    `pass`, `fail`, or an **abstention** when it could not judge (its verdict is unjudged or
    inconclusive, or it raised `JudgeUnavailable` or `JudgeReplyError`). A misconfigured
    judge (`JudgeMisconfigured`), a budget's stop (`BudgetExceeded`), a failure a member's
    own `"fail_closed"` policy raised, and any other exception (a bug in a check) are raised,
    never counted as an abstention.

    The rules, over the votes (abstentions never count as either side):

    - `"majority"`: passes with more pass votes than fail votes, fails with more fail votes;
      an even split is a tie, and `on_tie` decides: `"fail"` (the default: a panel that does
      not agree has not passed the answer) or `"inconclusive"`. Never the members' order.
    - `"mean"`: the mean of the voters' scores (a verdict without a score counts 1 for a
      pass, 0 for a fail) passes at `threshold` or above.
    - `"all"`: passes when no voter fails; one failing vote fails the panel at once.
    - `"any"`: passes when a voter passes; one passing vote passes the panel at once.

    **Quorum.** The panel needs `quorum` votes (default: a majority of the members for
    `majority` and `mean`, every member for `all` and `any`), except where one vote already
    decides (a fail under `all`, a pass under `any`). Below it the panel cannot judge: with
    every abstention inconclusive its verdict is inconclusive (`PANEL_BELOW_QUORUM`), else
    it is a judge failure under `judge_error_policy`: None (the default) raises
    `JudgeUnavailable` for the caller's policy to decide (`@retry_on_low_quality`'s), as a
    model judge does; `"fail_open"` returns an unjudged verdict; `"fail_closed"` raises past
    any outer policy.

    **Cost.** Members run one at a time, cheapest first (`order="cost"`: rule checks, then
    by `expected_calls`, members of equal cost in the order given; `order="given"` keeps the
    list's order), and the panel stops as soon as no member still to run could change the
    outcome: a panel of a rule check and two model judges costs one model call whenever the
    check and the first judge agree. The members not run are recorded as `skipped`. The
    verdict is the same in any order, and the same as when every member runs. Each member's
    model calls go through its own judge model: they reserve the job's budget before they
    are sent, and its judge cache answers what it asked before.

    **The verdict.** `metadata["panel"]` holds the rule, the quorum, the decision (`pass`,
    `fail`, `tie`, `below_quorum`), the counts (`passes`, `fails`, `abstained`, `skipped`)
    and each member's entry (`name`, `vote`, `score`, `status`, `feedback`, `reason` for an
    abstention, and its verdict's own `metadata`); `criteria` has one result per member
    (`pass`, `fail`, `uncertain` for an abstention, `skipped`), source `"panel"`. The score
    is the share of pass votes (`majority`), the mean (`mean`), the lowest (`all`) or the
    highest (`any`) voter's score; a failing verdict's feedback joins the failing members'.

    Args:
        members: The evaluators, or `(name, evaluator)` pairs.
        rule: `"majority"`, `"mean"`, `"all"` or `"any"`.
        quorum: The fewest votes the panel needs, from 1 to the number of members.
        threshold: The lowest passing mean, from 0 to 1 (`"mean"` only).
        on_tie: What a majority panel's even split is: `"fail"` or `"inconclusive"`.
        order: `"cost"` (cheapest first) or `"given"`.
        name: The panel's name (default `panel(<rule>: <members>)`).
        judge_error_policy: What a panel below its quorum does: None, `"fail_open"` or
            `"fail_closed"`.

    Returns:
        The panel, an evaluator (sync `evaluate`, async `aevaluate`).

    Raises:
        TypeError: A member that is not an evaluator.
        ValueError: No member, two members given the same name, or a bad rule, quorum,
            threshold, tie rule, order or policy.
    """
    return Panel(
        members,
        rule,
        quorum=quorum,
        threshold=threshold,
        on_tie=on_tie,
        order=order,
        name=name,
        judge_error_policy=judge_error_policy,
    )
