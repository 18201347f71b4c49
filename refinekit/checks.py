"""Rule checks: deterministic, free evaluators to run before any model judge.

Every check is an evaluator (it has `evaluate` and `aevaluate`), runs in microseconds, and
writes feedback that tells the model what to fix::

    from refinekit import checks, retry_on_low_quality

    @retry_on_low_quality(evaluator=checks.all_of(checks.not_empty(), checks.cites_source()))
    def answer(question: str, feedback: str | None = None) -> str: ...
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ._errtext import error_lines
from ._evaluators import all_of, any_of, weighted
from ._model import EvaluationRequest, Verdict
from ._schema import require_type

__all__ = [
    "Check",
    "all_of",
    "any_of",
    "cites_source",
    "contains",
    "json_schema",
    "matches",
    "max_length",
    "not_empty",
    "weighted",
]


class Check:
    """A rule check: a named, synchronous, side-effect-free evaluator.

    Subclass it (or use `Check(name, function)`) for rules of your own; `aevaluate` runs the
    rule inline, since a rule never waits on I/O.

    Args:
        name: The check's name, shown in criteria and messages.
        rule: A function `(request) -> Verdict`.
    """

    def __init__(self, name: str, rule: Callable[[EvaluationRequest], Verdict]) -> None:
        self.name = name
        self._rule = rule

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer."""
        return self._rule(request)

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        """Judge one answer (inline: rules do no I/O)."""
        return self.evaluate(request)

    def __repr__(self) -> str:
        return f"<check {self.name}>"


def _verdict(passed: bool, feedback: str, score: float | None = None, **metadata: Any) -> Verdict:
    return Verdict(
        passed=passed,
        score=(1.0 if passed else 0.0) if score is None else score,
        feedback="" if passed else feedback,
        metadata={"source": "code", **metadata},
    )


@functools.lru_cache(maxsize=1024)
def _citation(source: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w./\\-]){re.escape(source)}(?![\w/\\-]|\.\w)")


def _cited(source: str, answer: str) -> bool:
    # The substring test settles most answers; the pattern rules out `data.md` for `a.md`.
    return source in answer and _citation(source).search(answer) is not None


def cites_source() -> Check:
    """The answer cites the source of at least one context document.

    A document's source is `ContextDocument.source` (a path, URL or id); it counts as cited
    when it appears verbatim in the answer as a whole token: `a.md` is not cited by
    `data.md` or `docs/a.md`, but is by `(a.md)` or `a.md.` at the end of a sentence. The score
    is the share of distinct sources the answer cites. With no document carrying a source, the
    check fails and says so: there is nothing the answer could cite, which is a wiring problem
    worth seeing.

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        sources = list(dict.fromkeys(d.source for d in request.context if d.source))
        if not sources:
            return _verdict(
                False,
                "No context document with a source was available to cite; "
                "the answer cannot be checked for citations.",
                cited=[],
            )
        cited = [s for s in sources if _cited(s, request.answer)]
        listing = ", ".join(sources[:5]) + (", ..." if len(sources) > 5 else "")
        return _verdict(
            bool(cited),
            f"The answer cites none of the sources it was given; cite at least one of: {listing}.",
            score=len(cited) / len(sources),
            cited=cited,
        )

    return Check("cites_source", rule)


def contains(*phrases: str, case_sensitive: bool = False, all_required: bool = True) -> Check:
    """The answer contains the given phrases (all of them, or any one).

    Args:
        *phrases: The phrases to look for; at least one.
        case_sensitive: Match case exactly.
        all_required: True: every phrase must appear; False: one is enough.

    Returns:
        The check; its score is the share of phrases found.

    Raises:
        ValueError: No phrase, or an empty one.
    """
    if not phrases or any(not isinstance(p, str) or not p for p in phrases):
        raise ValueError("contains() needs one or more non-empty strings")

    def fold(text: str) -> str:
        return text if case_sensitive else text.casefold()

    def rule(request: EvaluationRequest) -> Verdict:
        answer = fold(request.answer)
        missing = [p for p in phrases if fold(p) not in answer]
        found = len(phrases) - len(missing)
        passed = not missing if all_required else found > 0
        if all_required:
            feedback = "The answer must mention " + ", ".join(repr(p) for p in missing) + "."
        else:
            feedback = (
                "The answer must mention at least one of "
                + ", ".join(repr(p) for p in phrases)
                + "."
            )
        return _verdict(passed, feedback, score=found / len(phrases), missing=missing)

    return Check("contains", rule)


def matches(pattern: str | re.Pattern[str], *, description: str | None = None) -> Check:
    """The answer matches a regular expression (searched anywhere in the answer).

    Args:
        pattern: The regular expression, as text or compiled.
        description: What the pattern means, for the feedback ("a date like 2026-01-31").

    Returns:
        The check.

    Raises:
        ValueError: The pattern does not compile.
    """
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    except re.error as e:
        raise ValueError(f"matches(): invalid regular expression {pattern!r}: {e}") from e
    what = description or f"text matching the pattern {compiled.pattern!r}"

    def rule(request: EvaluationRequest) -> Verdict:
        return _verdict(
            compiled.search(request.answer) is not None, f"The answer must contain {what}."
        )

    return Check("matches", rule)


def max_length(n: int) -> Check:
    """The answer has at most `n` characters.

    Args:
        n: The most characters allowed, at least 1.

    Returns:
        The check.

    Raises:
        ValueError: `n` is not a positive int.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_length() takes a positive int, got {n!r}")

    def rule(request: EvaluationRequest) -> Verdict:
        length = len(request.answer)
        return _verdict(
            length <= n,
            f"The answer is {length} characters long; shorten it to at most {n} characters.",
            length=length,
        )

    return Check("max_length", rule)


def not_empty() -> Check:
    """The answer has some non-whitespace text.

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        return _verdict(bool(request.answer.strip()), "The answer is empty; answer the question.")

    return Check("not_empty", rule)


def json_schema(schema: Any) -> Check:
    """The answer is JSON that validates against a pydantic model or type.

    Args:
        schema: A pydantic model, or any type `pydantic.TypeAdapter` accepts (`list[Item]`, a
            dataclass, a TypedDict, `Item | None`, ...): a type, not a function or an instance.

    Returns:
        The check; its feedback lists each error with its field path.

    Raises:
        TypeError: `schema` is not a type (a function, a method, an instance), or pydantic
            cannot validate it.
    """
    require_type(schema, "checks.json_schema()")
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(schema)
    except Exception as e:
        raise TypeError(f"json_schema(): pydantic cannot validate {schema!r}: {e}") from e

    def rule(request: EvaluationRequest) -> Verdict:
        try:
            adapter.validate_json(request.answer)
        except ValidationError as e:
            lines = error_lines(
                e.errors(include_url=False, include_context=False), max_items=5, max_chars=800
            )
            return _verdict(
                False, "The answer is not valid JSON for the schema:\n" + "\n".join(lines)
            )
        return _verdict(True, "")

    return Check("json_schema", rule)
