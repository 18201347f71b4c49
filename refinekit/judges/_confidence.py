"""How sure a verdict is of its own pass or fail, and judges asked several times to find out.

`confidence_of(verdict)` reads a number from 0.5 (a coin toss) to 1.0 (certain) from what the
verdict carries, or None when it carries nothing to go by; a cascade (`cascade()`) keeps a
level's verdict when that number clears the level's threshold. `sampled(judge, n)` asks a
judge `n` times and gives the majority verdict, whose samples' agreement is its confidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._core.numbers import is_number, is_real
from .._core.types import EvaluationRequest, Verdict
from .._engine.evaluators import Adapted, EvaluatorLike, FlowEvaluator, as_evaluator
from .._engine.flow import Evaluate, Flow, Gather
from ._cache import cache_salt
from ._panel import _abstention, expected_calls

__all__ = ["ConfidenceFn", "Sampled", "confidence_of", "sampled"]

ConfidenceFn = Callable[[Verdict], "float | None"]
"""A function giving a verdict's confidence, 0.5 to 1, or None when it cannot tell."""


def _unit(value: object) -> float | None:
    """`value` as a float from 0 to 1, or None when it is not one."""
    if isinstance(value, bool) or not is_number(value) or not is_real(value):
        return None
    number = float(value)
    return number if 0.0 <= number <= 1.0 else None


def _directed(verdict: Verdict, p: float) -> float:
    """The confidence in the verdict's own direction, from the probability it passes.

    A verdict that goes against its own probability (a criterion counted as a fail while
    its probability leans to pass) is as unsure as a verdict can be: 0.5.
    """
    return max(0.5, p if verdict.passed else 1.0 - p)


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _samples(record: Mapping[str, Any]) -> float | None:
    passes, fails, n = (_whole(record.get(k)) for k in ("passes", "fails", "n"))
    if passes is None or fails is None or n is None:
        return None
    if n <= 0 or passes + fails == 0:
        return None
    return max(0.5, max(passes, fails) / n)


def _panel(verdict: Verdict, record: Mapping[str, Any]) -> float | None:
    members = record.get("members")
    if not isinstance(members, list) or not members:
        return None
    side = "pass" if verdict.passed else "fail"
    agreeing = sum(1 for m in members if isinstance(m, Mapping) and m.get("vote") == side)
    return max(0.5, agreeing / len(members))


def _rating(verdict: Verdict, metadata: Mapping[str, Any]) -> float | None:
    rating, scale, passing = (_whole(metadata.get(k)) for k in ("rating", "scale", "passing"))
    if rating is None or scale is None or passing is None:
        return None
    if not 1 <= passing <= scale or not 1 <= rating <= scale:
        return None
    if rating >= passing:  # steps above the cut, of the most there are on the passing side
        steps, most = rating - passing + 1, scale - passing + 1
    else:
        steps, most = passing - rating, passing - 1
    return 0.5 + 0.5 * steps / (most + 1)


def _code_failed(verdict: Verdict) -> bool:
    if verdict.passed:
        return False
    if verdict.metadata.get("source") == "code":
        return True
    return any(c.source == "code" and c.outcome == "fail" for c in verdict.criteria)


def confidence_of(verdict: Verdict) -> float | None:
    """How sure a verdict is of its own pass or fail: 0.5 to 1, or None when unknown.

    The first of these the verdict carries decides:

    1. A verdict that is not judged (unjudged, inconclusive): None.
    2. A cascade's verdict: the confidence of the level that decided it (`cascade`).
    3. Repeated samples (`sampled()`): the share of the samples that agree with the verdict.
    4. A failed rule check: 1.0. A rule check that fails (its verdict's `source` is
       `"code"`, or one of its criteria is a failed `"code"` criterion: `numbers_supported`
       found a number the context does not hold) is a certain fail; a rule check that passes
       is no evidence the answer is right, and gives None (nothing else to go by).
    5. A criteria judge's token log-probabilities: with `p` the probability it passes (its
       weakest criterion's, as every criterion must hold), `p` for a pass and `1 - p` for a
       fail.
    6. A `probability` in the verdict's metadata (the probability it passes), read the same
       way.
    7. A panel's margin: the share of its members voting for its decision (members that
       abstained or were not run count against it, so a panel stopped early is never surer
       than the same panel with every member run).
    8. A rating's distance from its cut-point: `0.5 + 0.5 * k / (m + 1)`, with `k` the
       rating's steps from the cut on its side and `m` the most steps that side has (a
       4-point rating passing at 3: 4 gives 0.83, 3 and 2 give 0.67, 1 gives 0.83). Never 1:
       a rating is not a certainty.

    Anything else (a function returning a bool, a judge read from its reply's text): None.
    Whatever the source, a verdict that goes against its own probability gives 0.5.

    Args:
        verdict: A verdict.

    Returns:
        The confidence, from 0.5 to 1, or None.
    """
    if not verdict.judged:
        return None
    metadata = verdict.metadata
    record = metadata.get("cascade")
    if isinstance(record, Mapping) and "level" in record:
        return _unit(record.get("confidence"))
    samples = metadata.get("samples")
    if isinstance(samples, Mapping):
        return _samples(samples)
    if _code_failed(verdict):
        return 1.0
    if any(c.source == "logprobs" for c in verdict.criteria):
        known = [c.probability for c in verdict.criteria if c.probability is not None]
        return _directed(verdict, min(known)) if known else None
    probability = _unit(metadata.get("probability"))
    if probability is not None:
        return _directed(verdict, probability)
    panel = metadata.get("panel")
    if isinstance(panel, Mapping):
        return _panel(verdict, panel)
    return _rating(verdict, metadata)


class _Sample(Evaluate):
    """One sample: the evaluator asked with its judge requests keyed apart in a cache."""

    __slots__ = ("salt",)

    def __init__(self, evaluator: Any, request: EvaluationRequest, salt: str):
        super().__init__(evaluator, request)
        self.salt = salt

    def run_sync(self) -> Verdict:
        with cache_salt(self.salt):
            return super().run_sync()

    async def run_async(self) -> Verdict:
        with cache_salt(self.salt):
            return await super().run_async()


class Sampled(FlowEvaluator):
    """A judge asked several times, its majority verdict kept; see `sampled()`."""

    def __init__(self, judge: EvaluatorLike, n: int, name: str | None) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"n must be a whole number of samples, 2 or more, got {n!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        self.judge: Adapted = as_evaluator(judge)
        self.n = n
        self.children = (self.judge,)
        self.name = name or f"sampled({self.judge.name}, {n})"

    @property
    def expected_calls(self) -> float:
        """The model calls it makes: the judge's, `n` times."""
        return self.n * expected_calls(self.judge)

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        results = yield Gather([_Sample(self.judge, request, f"sample={i}") for i in range(self.n)])
        verdicts: list[Verdict] = []
        reasons: list[str] = []
        for result in results:
            if isinstance(result, BaseException):
                reason = _abstention(result) if isinstance(result, Exception) else None
                if reason is None:
                    raise result
                reasons.append(reason)
            elif not result.judged:
                reasons.append(f"{result.status}: {result.reason}")
            else:
                verdicts.append(result)
        passes = sum(1 for v in verdicts if v.passed)
        fails = len(verdicts) - passes
        record = {"n": self.n, "passes": passes, "fails": fails, "abstained": len(reasons)}
        if passes == fails:
            why = "every sample abstained" if not verdicts else f"{passes} pass, {fails} fail"
            return Verdict.inconclusive(f"SAMPLES_SPLIT: {why}", judge=self.name, samples=record)
        majority = passes > fails
        chosen = next(v for v in verdicts if v.passed is majority)
        return chosen.model_copy(
            update={"metadata": {**chosen.metadata, "judge": self.name, "samples": record}}
        )

    def __repr__(self) -> str:
        return f"<evaluator {self.name}>"


def sampled(judge: EvaluatorLike, n: int = 5, *, name: str | None = None) -> Sampled:
    """A judge asked `n` times on each answer: its majority verdict, and how much it agrees.

    The samples run at once. The verdict is the first sample that voted with the majority,
    with `metadata["samples"]` = `{"n", "passes", "fails", "abstained"}`; its confidence
    (`confidence_of`) is the majority's share of the `n` samples. A sample that could not
    judge (an unreadable reply, an outage, an unjudged or inconclusive verdict) abstains and
    counts against the majority; an even split, or every sample abstaining, is an
    inconclusive verdict (`SAMPLES_SPLIT`). An odd `n` avoids ties.

    The samples differ only when the judge samples: give its `JudgeModel` a temperature
    above 0. Each sample's requests are keyed apart in a judge cache (`cache_salt`), so a
    cache never answers the `n` samples with one reply.

    Args:
        judge: The evaluator to ask.
        n: How many times, 2 or more.
        name: The evaluator's name (default `sampled(<judge>, <n>)`).

    Returns:
        The evaluator (sync `evaluate`, async `aevaluate`).

    Raises:
        TypeError: `judge` is not an evaluator.
        ValueError: `n` below 2, or an empty name.
    """
    return Sampled(judge, n, name)
