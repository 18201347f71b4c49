"""What a calibration shows beyond the judge's kappa: its panel's members and its biases.

From a calibrate run's stored items (each verdict with its metadata) and their labels:

- a panel's members (`members_of`): each member's agreement with people, each pair's with
  each other, and which member adds nothing (the panel without it agrees with people as
  well or better);
- verbosity (`length_bands`): agreement by answer-length band;
- position (`position_consistency`): for a pairwise judge, how often swapping the order of
  the two answers changed its vote;
- self-preference (`self_judged`): answers written by the judge's own model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..judges._panel import PanelRule, outcome
from ._stats import cohen_kappa, kappa_interval, wilson_interval
from ._store import CaseRecord

__all__ = [
    "LengthBand",
    "MemberAgreement",
    "PairAgreement",
    "PanelAgreement",
    "PositionConsistency",
    "length_bands",
    "members_of",
    "position_consistency",
    "same_model",
    "self_judged",
]

VERBOSITY_GAP = 0.2
"""How much more often (than people) the judge may pass the longest answers than the
shortest before the calibration warns of verbosity bias."""

BAND_MINIMUM = 10
"""The fewest items a length band needs for the verbosity warning to weigh it."""


def _pairs_kappa(pairs: Sequence[tuple[bool, bool]]) -> tuple[float | None, float | None]:
    """Kappa of (rater, people) pairs and its 95% lower bound; (None, None) without pairs."""
    if not pairs:
        return None, None
    kappa = cohen_kappa(pairs)
    both_pass = sum(a and b for a, b in pairs)
    first_only = sum(a and not b for a, b in pairs)
    second_only = sum(b and not a for a, b in pairs)
    both_fail = sum(not a and not b for a, b in pairs)
    bounds = kappa_interval(both_pass, first_only, second_only, both_fail)
    return kappa, None if bounds is None else bounds[0]


@dataclass(frozen=True)
class MemberAgreement:
    """One panel member against people's labels.

    Attributes:
        name: The member's name, as its votes are recorded.
        items: Labelled items it voted on (pass or fail).
        abstained: Items it abstained on (could not judge).
        agreement: The share of its votes that agree with people; None without votes.
        kappa: Its Cohen's kappa with people; None without votes.
        kappa_lower: The kappa's 95% lower bound (Fleiss, Cohen and Everitt).
        kappa_without: The panel's kappa with people when this member's votes are taken
            away (the rest decide by the same rule), on the items both decide.
        adds_nothing: Whether the panel agrees with people as well or better without it.
    """

    name: str
    items: int
    abstained: int
    agreement: float | None
    kappa: float | None
    kappa_lower: float | None
    kappa_without: float | None
    adds_nothing: bool


@dataclass(frozen=True)
class PairAgreement:
    """Two panel members against each other, on the items both voted on.

    Attributes:
        first: One member's name.
        second: The other's.
        items: Items both voted on.
        agreement: The share of those they voted alike on.
        kappa: Their Cohen's kappa; None without items.
    """

    first: str
    second: str
    items: int
    agreement: float | None
    kappa: float | None


@dataclass(frozen=True)
class PanelAgreement:
    """A panel judge's members in a calibration.

    Attributes:
        rule: The panel's rule.
        quorum: Its quorum.
        kappa: The panel's kappa with people (as the calibration's).
        members: Each member, in the order given.
        pairs: Each pair of members.
        adds_nothing: The members whose removal does not lower the panel's kappa.
    """

    rule: str
    quorum: int
    kappa: float | None
    members: list[MemberAgreement]
    pairs: list[PairAgreement]
    adds_nothing: list[str]


def _panel_of(case: CaseRecord) -> Mapping[str, Any] | None:
    if not case.verdicts:
        return None
    record = (case.verdicts[0].get("metadata") or {}).get("panel")
    return record if isinstance(record, Mapping) else None


def _votes(record: Mapping[str, Any]) -> dict[str, tuple[str, float | None]]:
    members = record.get("members") or ()
    return {
        str(m.get("name")): (str(m.get("vote")), m.get("score"))
        for m in members
        if isinstance(m, Mapping)
    }


def _score(vote: str, score: Any, rule: str) -> float | None:
    if vote not in ("pass", "fail"):
        return None
    if rule == "mean" and isinstance(score, (int, float)) and not isinstance(score, bool):
        return min(1.0, max(0.0, float(score)))
    return 1.0 if vote == "pass" else 0.0


def _decided(
    record: Mapping[str, Any], votes: Mapping[str, tuple[str, Any]], leave_out: str | None
) -> bool | None:
    """The panel's verdict (True: pass) from its members' votes, one left out; None: none.

    The rule and the threshold are the panel's; the quorum is its own, or every member left
    when fewer are; a tie counts as the panel's `on_tie` says (a fail, or no verdict).
    """
    rule: PanelRule = record.get("rule", "majority")
    names = [n for n in votes if n != leave_out]
    if any(votes[n][0] == "skipped" for n in names):
        return None  # not every member ran: nothing to recompute from
    scores = [_score(*votes[n], rule) for n in names]
    quorum = min(int(record.get("quorum") or 1), len(names))
    threshold = float(record.get("threshold", 0.5))
    decision = outcome(rule, scores, quorum=max(1, quorum), threshold=threshold)
    if decision == "tie":
        return False if record.get("on_tie", "fail") == "fail" else None
    if decision == "below_quorum":
        return None
    return decision == "pass"


def members_of(cases: Sequence[CaseRecord], kappa: float | None) -> PanelAgreement | None:
    """The members of the panel that judged `cases` (labelled), or None for another judge."""
    labelled = [(c, r) for c in cases if c.label is not None and (r := _panel_of(c)) is not None]
    if not labelled:
        return None
    first = labelled[0][1]
    names = list(_votes(first))
    members: list[MemberAgreement] = []
    for name in names:
        pairs, abstained = [], 0
        full: list[tuple[bool, bool]] = []
        without: list[tuple[bool, bool]] = []
        for case, record in labelled:
            votes = _votes(record)
            vote = votes.get(name, ("skipped", None))[0]
            human = case.label == "pass"
            if vote in ("pass", "fail"):
                pairs.append((vote == "pass", human))
            elif vote == "abstain":
                abstained += 1
            whole, rest = _decided(record, votes, None), _decided(record, votes, name)
            if whole is not None and rest is not None:
                full.append((whole, human))
                without.append((rest, human))
        member_kappa, lower = _pairs_kappa(pairs)
        kappa_full = cohen_kappa(full) if full else None
        kappa_without = cohen_kappa(without) if without else None
        members.append(
            MemberAgreement(
                name=name,
                items=len(pairs),
                abstained=abstained,
                agreement=sum(a == b for a, b in pairs) / len(pairs) if pairs else None,
                kappa=member_kappa,
                kappa_lower=lower,
                kappa_without=kappa_without,
                adds_nothing=len(names) > 1
                and kappa_full is not None
                and kappa_without is not None
                and kappa_without >= kappa_full,
            )
        )
    pairs_of: list[PairAgreement] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = []
            for _, record in labelled:
                votes = _votes(record)
                va, vb = votes.get(a, ("", None))[0], votes.get(b, ("", None))[0]
                if va in ("pass", "fail") and vb in ("pass", "fail"):
                    both.append((va == "pass", vb == "pass"))
            pairs_of.append(
                PairAgreement(
                    first=a,
                    second=b,
                    items=len(both),
                    agreement=sum(x == y for x, y in both) / len(both) if both else None,
                    kappa=cohen_kappa(both) if both else None,
                )
            )
    return PanelAgreement(
        rule=str(first.get("rule")),
        quorum=int(first.get("quorum") or 1),
        kappa=kappa,
        members=members,
        pairs=pairs_of,
        adds_nothing=[m.name for m in members if m.adds_nothing],
    )


@dataclass(frozen=True)
class LengthBand:
    """Agreement with people on the answers of one length band.

    Attributes:
        band: `short`, `medium` or `long` (thirds of the judged items by answer length).
        shortest: The band's shortest answer, in characters.
        longest: Its longest.
        items: Judged and labelled items in the band.
        people_pass: The share people passed.
        judge_pass: The share the judge passed.
        agreement: The share judge and people agreed on.
        kappa: Their kappa in the band; None when it is undefined.
    """

    band: str
    shortest: int
    longest: int
    items: int
    people_pass: float
    judge_pass: float
    agreement: float
    kappa: float | None


def length_bands(cases: Sequence[CaseRecord]) -> list[LengthBand]:
    """Agreement by answer length, in thirds of the judged items (none under 9 items).

    A judge biased towards long answers passes more of the long ones than people do,
    compared with the short ones: `verbosity_warning` reads it from these bands.
    """
    judged = sorted(
        (
            (len(c.answer or ""), c.outcome == "passed", c.label == "pass")
            for c in cases
            if c.outcome in ("passed", "failed") and c.label is not None
        ),
        key=lambda item: item[0],
    )
    if len(judged) < 9:
        return []
    n = len(judged)
    cuts = [0, n // 3, 2 * n // 3, n]
    bands = []
    for name, start, end in zip(("short", "medium", "long"), cuts, cuts[1:], strict=False):
        items = judged[start:end]
        pairs = [(j, h) for _, j, h in items]
        kappa = cohen_kappa(pairs)
        defined = len({j for j, _ in pairs}) > 1 or len({h for _, h in pairs}) > 1
        bands.append(
            LengthBand(
                band=name,
                shortest=items[0][0],
                longest=items[-1][0],
                items=len(items),
                people_pass=sum(h for _, h in pairs) / len(pairs),
                judge_pass=sum(j for j, _ in pairs) / len(pairs),
                agreement=sum(j == h for j, h in pairs) / len(pairs),
                kappa=kappa if defined else None,
            )
        )
    return bands


def verbosity_warning(bands: Sequence[LengthBand]) -> str | None:
    """A warning when the judge favours long answers more than people do; else None.

    The judge's excess (its pass rate minus people's) in the long band is compared with the
    short band's; a difference of `VERBOSITY_GAP` or more, with `BAND_MINIMUM` items in each,
    is a warning. A heuristic, for a person to look at, not a test.
    """
    if len(bands) < 3 or min(bands[0].items, bands[-1].items) < BAND_MINIMUM:
        return None
    short, long = bands[0], bands[-1]
    gap = (long.judge_pass - long.people_pass) - (short.judge_pass - short.people_pass)
    if gap < VERBOSITY_GAP:
        return None
    return (
        f"verbosity bias: on the longest answers the judge passes {long.judge_pass:.2f} "
        f"where people pass {long.people_pass:.2f}, on the shortest {short.judge_pass:.2f} "
        f"where people pass {short.people_pass:.2f} (a gap of {gap:+.2f})"
    )


@dataclass(frozen=True)
class PositionConsistency:
    """How often a pairwise judge's vote survived swapping the two answers.

    Attributes:
        judge: The judge (or panel member) it is of.
        items: Items it compared in both orders.
        consistent: Items whose two orders agreed.
        rate: `consistent / items`.
        lower: The rate's 95% Wilson lower bound.
        upper: Its upper bound.
    """

    judge: str
    items: int
    consistent: int
    rate: float
    lower: float
    upper: float


def _orders(metadata: Mapping[str, Any], name: str) -> Iterable[tuple[str, bool]]:
    if isinstance(metadata.get("position_consistent"), bool):
        yield name, metadata["position_consistent"]
    record = metadata.get("panel")
    if isinstance(record, Mapping):
        for member in record.get("members") or ():
            if isinstance(member, Mapping) and isinstance(member.get("metadata"), Mapping):
                yield from _orders(member["metadata"], str(member.get("name")))


def position_consistency(cases: Sequence[CaseRecord], judge: str) -> list[PositionConsistency]:
    """For each pairwise judge (the run's, or a panel's member), its position consistency."""
    seen: dict[str, list[bool]] = {}
    for case in cases:
        for verdict in case.verdicts:
            metadata = verdict.get("metadata")
            if isinstance(metadata, Mapping):
                for name, consistent in _orders(metadata, judge):
                    seen.setdefault(name, []).append(consistent)
    out = []
    for name, flags in seen.items():
        lower, upper = wilson_interval(sum(flags), len(flags))
        out.append(
            PositionConsistency(name, len(flags), sum(flags), sum(flags) / len(flags), lower, upper)
        )
    return out


def same_model(a: str, b: str) -> bool:
    """Whether two model names are the same model: equal, or one a dated version of the other.

    `gpt-4o-mini` and `gpt-4o-mini-2024-07-18` are; `gpt-4o` and `gpt-4o-mini` are not.
    """
    a, b = a.strip().lower(), b.strip().lower()
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    rest = long[len(short) :]
    dated = rest[:1] in ("-", "@", ":") and any(ch.isdigit() for ch in rest)
    return long.startswith(short) and dated


_WRITER_COLUMNS = ("answer_model", "model")


def writers_of(case: CaseRecord) -> list[str]:
    """The models that wrote a case's answer.

    The answer function's replies' models, and a labelled row's `answer_model` (or `model`)
    column.
    """
    named = list(case.models.get("answer", []))
    for column in _WRITER_COLUMNS:
        value = case.row.get(column)
        if isinstance(value, str) and value.strip():
            named.append(value.strip())
    return named


def self_judged(cases: Sequence[CaseRecord]) -> tuple[int, list[str]]:
    """Cases whose answer was written by a model that also judged it, and those models."""
    count, models = 0, set()
    for case in cases:
        judges_ = case.models.get("judge", [])
        found = {j for j in judges_ for w in writers_of(case) if same_model(j, w)}
        if found:
            count += 1
            models |= found
    return count, sorted(models)
