"""The evaluator protocol, the adapter every evaluator is run through, and composition."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from .._core.numbers import is_real, shown
from .._core.types import CriterionResult, EvaluationRequest, Verdict
from .bridge import in_thread, is_async_callable, run_blocking
from .flow import Evaluate, Flow, run_async, run_sync

__all__ = [
    "AsyncEvaluator",
    "Evaluator",
    "EvaluatorLike",
    "all_of",
    "any_of",
    "as_evaluator",
    "weighted",
]


@runtime_checkable
class Evaluator(Protocol):
    """Anything with `evaluate(request) -> Verdict` is an evaluator."""

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer."""
        ...


@runtime_checkable
class AsyncEvaluator(Protocol):
    """Anything with `async aevaluate(request) -> Verdict` is an evaluator too."""

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer without blocking the event loop."""
        ...


EvaluatorLike: TypeAlias = (
    Evaluator
    | AsyncEvaluator
    | Callable[[EvaluationRequest], Verdict | bool]
    | Callable[[EvaluationRequest], Awaitable[Verdict | bool]]
)
"""What the `evaluator=` arguments accept: an evaluator object or a plain (async) function."""


def evaluator_name(obj: Any) -> str:
    """A readable name for an evaluator, for criteria and messages."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and name != "<lambda>":
        return name
    return type(obj).__name__ if not callable(obj) or hasattr(obj, "evaluate") else "check"


def to_verdict(result: Any, name: str) -> Verdict:
    if isinstance(result, Verdict):
        return result
    if isinstance(result, bool):
        return Verdict(
            passed=result,
            score=1.0 if result else 0.0,
            feedback="" if result else f"The answer failed the check {name!r}.",
        )
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never awaited on purpose: no "never awaited" warning
        raise TypeError(
            f"evaluator {name!r} returned an awaitable from a plain call; declare it "
            "`async def` or give it an `aevaluate` method"
        )
    raise TypeError(
        f"evaluator {name!r} returned {type(result).__name__}; "
        "an evaluator must return a refinekit.Verdict or a bool"
    )


class Adapted:
    """Any accepted evaluator, with both `evaluate` and `aevaluate`.

    - an object with both methods is used as it is;
    - sync only (`evaluate` or a plain function): the async path runs it in a worker thread;
    - async only (`aevaluate`, an `async def evaluate`, an `async def` function or an object
      with an `async def __call__`): the sync path runs it on an event loop of its own (in a
      worker thread when this thread already runs one).
    """

    __slots__ = ("_async", "_sync", "name", "wrapped")

    def __init__(self, obj: Any) -> None:
        self.wrapped = obj
        self.name = evaluator_name(obj)
        evaluate = getattr(obj, "evaluate", None)
        aevaluate = getattr(obj, "aevaluate", None)
        self._sync: Callable[[EvaluationRequest], Any] | None = None
        self._async: Callable[[EvaluationRequest], Awaitable[Any]] | None = None
        if callable(evaluate) or callable(aevaluate):
            if callable(evaluate) and is_async_callable(evaluate):
                # `async def evaluate`: the async side, unless `aevaluate` is given too
                self._async = aevaluate if callable(aevaluate) else evaluate
            else:
                self._sync = evaluate if callable(evaluate) else None
                self._async = aevaluate if callable(aevaluate) else None
        elif is_async_callable(obj):
            self._async = obj
        elif callable(obj):
            self._sync = obj
        else:
            raise TypeError(
                f"{obj!r} is not an evaluator: pass an object with evaluate(request) or "
                "async aevaluate(request), or a function (request) -> Verdict | bool"
            )

    @property
    def is_async(self) -> bool:
        """Whether the evaluator has an async side of its own (else the sync one runs)."""
        return self._async is not None

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        if self._sync is not None:
            return to_verdict(self._sync(request), self.name)
        async_fn = self._async
        assert async_fn is not None
        return to_verdict(run_blocking(lambda: async_fn(request)), self.name)

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        if self._async is not None:
            return to_verdict(await self._async(request), self.name)
        assert self._sync is not None
        return to_verdict(await in_thread(self._sync, request), self.name)

    def __repr__(self) -> str:
        return f"<evaluator {self.name}>"


def as_evaluator(obj: EvaluatorLike) -> Adapted:
    """Check that `obj` can serve as an evaluator and wrap it so it runs sync and async.

    Raises:
        TypeError: `obj` is neither an evaluator nor a callable.
    """
    if isinstance(obj, Adapted):
        return obj
    return Adapted(obj)


class FlowEvaluator:
    """Base of evaluators whose logic is a flow: written once, run sync or async."""

    name: str = "evaluator"

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        raise NotImplementedError

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer."""
        return run_sync(self._flow(request))

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer without blocking the event loop."""
        return await run_async(self._flow(request))


def _criteria_of(name: str, verdict: Verdict) -> tuple[CriterionResult, ...]:
    if verdict.criteria:
        return verdict.criteria
    if not verdict.judged:
        return (CriterionResult(name=name, outcome="skipped", feedback=verdict.reason or ""),)
    score = verdict.score if verdict.score is not None else (1.0 if verdict.passed else 0.0)
    return (
        CriterionResult(
            name=name,
            outcome="pass" if verdict.passed else "fail",
            probability=score,
            source=verdict.metadata.get("source") if verdict.metadata else None,
            feedback=verdict.feedback,
        ),
    )


def _skipped(children: Sequence[Adapted]) -> tuple[CriterionResult, ...]:
    return tuple(CriterionResult(name=c.name, outcome="skipped") for c in children)


def _unjudged(
    verdict: Verdict, criteria: list[CriterionResult], rest: Sequence[Adapted]
) -> Verdict:
    """A composite cannot judge when one of its parts could not: it says so, it never guesses."""
    return Verdict(
        passed=False,
        status=verdict.status,
        reason=verdict.reason,
        criteria=(*criteria, *_skipped(rest)),
    )


def _score(verdict: Verdict) -> float:
    return verdict.score if verdict.score is not None else (1.0 if verdict.passed else 0.0)


class _AllOf(FlowEvaluator):
    def __init__(self, evaluators: Sequence[EvaluatorLike]) -> None:
        if not evaluators:
            raise ValueError("all_of() needs at least one evaluator")
        self.children = tuple(as_evaluator(e) for e in evaluators)
        self.name = "all_of(" + ", ".join(c.name for c in self.children) + ")"

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        criteria: list[CriterionResult] = []
        scores: list[float] = []
        for i, child in enumerate(self.children):
            verdict: Verdict = yield Evaluate(child, request)
            criteria.extend(_criteria_of(child.name, verdict))
            if not verdict.judged:
                return _unjudged(verdict, criteria, self.children[i + 1 :])
            scores.append(_score(verdict))
            if not verdict.passed:
                criteria.extend(_skipped(self.children[i + 1 :]))
                return Verdict(
                    passed=False,
                    score=min(scores),
                    feedback=verdict.feedback,
                    criteria=tuple(criteria),
                    metadata={"failed": child.name},
                )
        return Verdict(passed=True, score=min(scores), criteria=tuple(criteria))


class _AnyOf(FlowEvaluator):
    def __init__(self, evaluators: Sequence[EvaluatorLike]) -> None:
        if not evaluators:
            raise ValueError("any_of() needs at least one evaluator")
        self.children = tuple(as_evaluator(e) for e in evaluators)
        self.name = "any_of(" + ", ".join(c.name for c in self.children) + ")"

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        criteria: list[CriterionResult] = []
        feedback: list[str] = []
        scores: list[float] = []
        unjudged: Verdict | None = None
        for i, child in enumerate(self.children):
            verdict: Verdict = yield Evaluate(child, request)
            criteria.extend(_criteria_of(child.name, verdict))
            if not verdict.judged:  # another evaluator may still pass the answer
                unjudged = unjudged or verdict
                continue
            scores.append(_score(verdict))
            if verdict.passed:
                criteria.extend(_skipped(self.children[i + 1 :]))
                return Verdict(
                    passed=True,
                    score=max(scores),
                    criteria=tuple(criteria),
                    metadata={"passed": child.name},
                )
            if verdict.feedback:
                feedback.append(verdict.feedback)
        if unjudged is not None:
            return _unjudged(unjudged, criteria, ())
        text = feedback[0] if len(feedback) == 1 else "Fix at least one of: " + " | ".join(feedback)
        return Verdict(passed=False, score=max(scores), feedback=text, criteria=tuple(criteria))


class _Weighted(FlowEvaluator):
    def __init__(self, pairs: Sequence[tuple[EvaluatorLike, float]], threshold: float) -> None:
        if not pairs:
            raise ValueError("weighted() needs at least one (evaluator, weight) pair")
        children, weights = [], []
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"weighted() takes (evaluator, weight) pairs, got {pair!r}")
            evaluator, weight = pair
            if (
                isinstance(weight, bool)
                or not isinstance(weight, (int, float))
                or not is_real(weight)  # NaN, infinite, or too large for a float
                or weight <= 0
            ):
                raise ValueError(
                    f"weight of {evaluator_name(evaluator)} must be a finite number > 0, "
                    f"got {shown(weight)}"
                )
            children.append(as_evaluator(evaluator))
            weights.append(float(weight))
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not (0.0 <= threshold <= 1.0)
        ):
            raise ValueError(f"threshold must be a number from 0 to 1, got {threshold!r}")
        self.children = tuple(children)
        self.weights = tuple(weights)
        self.threshold = float(threshold)
        self.name = "weighted(" + ", ".join(c.name for c in self.children) + ")"

    def _flow(self, request: EvaluationRequest) -> Flow[Verdict]:
        criteria: list[CriterionResult] = []
        feedback: list[str] = []
        total = 0.0
        for i, (child, weight) in enumerate(zip(self.children, self.weights, strict=True)):
            verdict: Verdict = yield Evaluate(child, request)
            criteria.extend(_criteria_of(child.name, verdict))
            if not verdict.judged:
                return _unjudged(verdict, criteria, self.children[i + 1 :])
            total += weight * _score(verdict)
            if not verdict.passed and verdict.feedback:
                feedback.append(verdict.feedback)
        score = total / sum(self.weights)
        passed = score >= self.threshold
        return Verdict(
            passed=passed,
            score=score,
            feedback="" if passed else " ".join(feedback) or "The answer scored too low.",
            criteria=tuple(criteria),
            metadata={"threshold": self.threshold},
        )


def all_of(*evaluators: EvaluatorLike) -> FlowEvaluator:
    """Pass only when every evaluator passes; run them in order, stop at the first failure.

    Put cheap rule checks first: a model judge after them is never paid for when a rule
    already failed. Evaluators not run are listed in `verdict.criteria` as `skipped`.

    Args:
        *evaluators: The evaluators, in the order to run them.

    Returns:
        An evaluator whose verdict carries the failing evaluator's feedback.
    """
    return _AllOf(evaluators)


def any_of(*evaluators: EvaluatorLike) -> FlowEvaluator:
    """Pass when one evaluator passes; run them in order, stop at the first pass.

    Args:
        *evaluators: The evaluators, in the order to run them.

    Returns:
        An evaluator whose failing verdict carries every evaluator's feedback.
    """
    return _AnyOf(evaluators)


def weighted(*pairs: tuple[EvaluatorLike, float], threshold: float = 0.5) -> FlowEvaluator:
    """Weigh several evaluators into one verdict.

    Every evaluator runs; the score is the weighted mean of their scores (a verdict without a
    score counts 1 when passed, 0 when not), and the answer passes when it reaches `threshold`.

    Args:
        *pairs: `(evaluator, weight)` pairs; weights must be positive.
        threshold: The lowest passing score, from 0 to 1.

    Returns:
        An evaluator whose feedback joins the feedback of every evaluator that failed.

    Raises:
        ValueError: No pairs, a weight that is not positive, or a threshold outside 0..1.
    """
    return _Weighted(pairs, threshold)
