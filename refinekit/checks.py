"""Rule checks: deterministic, free evaluators to run before any model judge.

Every check is an evaluator (it has `evaluate` and `aevaluate`), runs in microseconds, and
writes feedback that tells the model what to do, in words it can act on ("Cite the source as
[policies/warranty-1.md].", "Mention '10 months' in the answer.")::

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

from ._core.errtext import error_lines
from ._core.jsonload import MAX_DEPTH
from ._core.numbers import Number, read_numbers, read_word_numbers
from ._core.schema import require_type
from ._core.types import EvaluationRequest, Verdict
from ._engine.evaluators import all_of, any_of, weighted
from .evidence import stated_values

__all__ = [
    "Check",
    "all_of",
    "any_of",
    "cites_source",
    "contains",
    "excludes",
    "json_schema",
    "matches",
    "max_length",
    "not_empty",
    "numbers_supported",
    "values_supported",
    "weighted",
]


class Check:
    """A rule check: a named, synchronous, side-effect-free evaluator.

    Subclass it (or use `Check(name, function)`) for rules of your own; `aevaluate` runs the
    rule inline, since a rule never waits on I/O.

    A rule that can reject an answer from a part of it (a forbidden phrase, a length) can say
    so with `prefix`: then a decorator reading a streamed answer stops the stream as soon as
    what came so far fails, whatever follows (docs/streaming.md).

    Args:
        name: The check's name, shown in criteria and messages.
        rule: A function `(request) -> Verdict`.
        prefix: Makes a prefix checker for one stream: a function fed each text delta in turn
            that returns a failing `Verdict` once the text so far fails whatever follows, else
            None. It must never reject a text the rule would pass. None: the check waits for
            the whole answer.
    """

    def __init__(
        self,
        name: str,
        rule: Callable[[EvaluationRequest], Verdict],
        *,
        prefix: Callable[[], Callable[[str], Verdict | None]] | None = None,
    ) -> None:
        self.name = name
        self._rule = rule
        self._prefix = prefix

    def prefix_checker(self) -> Callable[[str], Verdict | None] | None:
        """A fresh prefix checker for one streamed answer (see `prefix`); None: none."""
        return None if self._prefix is None else self._prefix()

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


def _bracketed(sources: list[str]) -> str:
    """`[a.md]`, `[a.md] or [b.md]`, `[a.md], [b.md] or [c.md]`, ... (at most five)."""
    shown = [f"[{s}]" for s in sources[:5]]
    listing = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    if len(sources) > 5:
        listing += f" (or another of the {len(sources)} sources given)"
    return listing


def _partials(source: str) -> list[str]:
    """The tails of a source after each `/`: what a model writes when it shortens the path.

    `policies/warranty-1.md` -> `warranty-1.md`; `https://x.test/faq/7` -> `x.test/faq/7`,
    `faq/7` (not `7`: a bare word or number is no sign of a shortened citation).
    """
    parts = source.rstrip("/").split("/")
    tails = ["/".join(parts[i:]) for i in range(1, len(parts))]
    # a file name or a shorter path, not a bare word or number that any answer may contain
    return [t for t in tails if not t.startswith("/") and ("." in t or "/" in t)]


_NO_SOURCE = (
    "No context document with a source was available to cite; "
    "the answer cannot be checked for citations."
)
"""`cites_source()`'s feedback when no document has a source (`refinekit eval` counts them)."""


def cites_source() -> Check:
    """The answer cites the source of at least one context document.

    A document's source is `ContextDocument.source` (a path, URL or id); it counts as cited
    when it appears verbatim in the answer as a whole token: `a.md` is not cited by
    `data.md` or `docs/a.md`, but is by `[a.md]`, `(a.md)` or `a.md.` at the end of a
    sentence. The score is the share of distinct sources the answer cites. With no document
    carrying a source, the check fails and says so: there is nothing the answer could cite,
    which is a wiring problem worth seeing.

    The feedback is an instruction naming the exact text to add: `Cite the source as
    [policies/warranty-1.md].` for one source; with several, `Cite the source you used as
    [a.md] or [b.md].` (the first five, then how many there are). When the answer cites a
    source by the end of its path only (`[warranty-1.md]`, which does not count), the feedback
    says so: `Cite the source as [policies/warranty-1.md], not warranty-1.md.`

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        sources = list(dict.fromkeys(d.source for d in request.context if d.source))
        if not sources:
            return _verdict(False, _NO_SOURCE, cited=[])
        cited = [s for s in sources if _cited(s, request.answer)]
        if len(sources) == 1:
            feedback = f"Cite the source as {_bracketed(sources)}"
        else:
            feedback = f"Cite the source you used as {_bracketed(sources)}"
        partial = [p for s in sources for p in _partials(s) if _cited(p, request.answer)]
        feedback += f", not {partial[0]}." if partial and not cited else "."
        return _verdict(bool(cited), feedback, score=len(cited) / len(sources), cited=cited)

    return Check("cites_source", rule)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _as_written(text: str) -> str:
    return text


def _phrase_fold(name: str, phrases: tuple[str, ...], case_sensitive: bool) -> Callable[[str], str]:
    """How the phrases of the check `name` and the answer are compared: as written or folded.

    Raises:
        ValueError: No phrase, or an empty one.
    """
    if not phrases or any(not isinstance(p, str) or not p for p in phrases):
        raise ValueError(f"{name}() needs one or more non-empty strings")
    return _as_written if case_sensitive else str.casefold


def _listed(phrases: list[str], conjunction: str) -> str:
    """`'a'`, `'a' and 'b'`, `'a', 'b' or 'c'`: each phrase quoted."""
    quoted = [repr(p) for p in phrases]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + f" {conjunction} " + quoted[-1]


def contains(*phrases: str, case_sensitive: bool = False, all_required: bool = True) -> Check:
    """The answer contains the given phrases (all of them, or any one).

    Args:
        *phrases: The phrases to look for; at least one.
        case_sensitive: Match case exactly.
        all_required: True: every phrase must appear; False: one is enough.

    Returns:
        The check; its score is the share of phrases found. Its feedback names what to add:
        `Mention '10 months' in the answer.` (the missing phrases, joined by "and"; with
        `all_required=False`, every phrase, joined by "or").

    Raises:
        ValueError: No phrase, or an empty one.
    """
    fold = _phrase_fold("contains", phrases, case_sensitive)

    def rule(request: EvaluationRequest) -> Verdict:
        answer = fold(request.answer)
        missing = [p for p in phrases if fold(p) not in answer]
        found = len(phrases) - len(missing)
        passed = not missing if all_required else found > 0
        if passed:
            feedback = ""
        elif all_required:
            feedback = f"Mention {_listed(missing, 'and')} in the answer."
        else:
            feedback = f"Mention {_listed(list(phrases), 'or')} in the answer."
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
            compiled.search(request.answer) is not None, f"Include {what} in the answer."
        )

    return Check("matches", rule)


def excludes(*phrases: str, case_sensitive: bool = False) -> Check:
    """The answer contains none of the given phrases (forbidden words, a competitor's name).

    A streamed answer is stopped as soon as one of them appears in it.

    Args:
        *phrases: The forbidden phrases; at least one.
        case_sensitive: Match case exactly.

    Returns:
        The check. Its feedback names what to leave out: `Do not mention 'guaranteed' in the
        answer.`

    Raises:
        ValueError: No phrase, or an empty one.
    """
    fold = _phrase_fold("excludes", phrases, case_sensitive)

    folded = [fold(p) for p in phrases]

    def verdict(found: list[str]) -> Verdict:
        if not found:
            return _verdict(True, "", found=found)
        return _verdict(False, f"Do not mention {_listed(found, 'or')} in the answer.", found=found)

    def rule(request: EvaluationRequest) -> Verdict:
        answer = fold(request.answer)
        return verdict([p for p, f in zip(phrases, folded, strict=True) if f in answer])

    keep = max(len(f) for f in folded) - 1  # a phrase may start in the text before a delta

    def prefix() -> Callable[[str], Verdict | None]:
        tail = ""

        def check(delta: str) -> Verdict | None:
            nonlocal tail
            window = tail + fold(delta)
            found = [p for p, f in zip(phrases, folded, strict=True) if f in window]
            tail = window[-keep:] if keep else ""
            return verdict(found) if found else None

        return check

    return Check("excludes", rule, prefix=prefix)


def max_length(n: int) -> Check:
    """The answer has at most `n` characters.

    A streamed answer is stopped as soon as it passes `n` characters.

    Args:
        n: The most characters allowed, at least 1.

    Returns:
        The check.

    Raises:
        ValueError: `n` is not a positive int.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_length() takes a positive int, got {n!r}")

    def verdict(length: int) -> Verdict:
        return _verdict(
            length <= n,
            f"Shorten the answer to at most {n} characters; it has {length}.",
            length=length,
        )

    def rule(request: EvaluationRequest) -> Verdict:
        return verdict(len(request.answer))

    def prefix() -> Callable[[str], Verdict | None]:
        length = 0

        def check(delta: str) -> Verdict | None:
            nonlocal length
            length += len(delta)
            return verdict(length) if length > n else None

        return check

    return Check("max_length", rule, prefix=prefix)


def not_empty() -> Check:
    """The answer has some non-whitespace text.

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        return _verdict(bool(request.answer.strip()), "Answer the question; the answer was empty.")

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
                False, "Reply with JSON that fits the schema; fix:\n" + "\n".join(lines)
            )
        return _verdict(True, "")

    return Check("json_schema", rule)


def _supporting(request: EvaluationRequest) -> set[Number]:
    """The numbers the answer may use: those of the context, the tools' results, the question.

    In the context and the tools' results, numbers written as words ("two", "twenty") count
    too, so "2 hours" is supported by "two hours". Each text is read whole, each number
    exactly as written (`_core.numbers.read_numbers`, as grounding reads a text).
    """
    texts = [d.text for d in request.context]
    texts += [c.result for c in request.tool_calls if c.ok and c.result is not None]
    numbers = {(n.value, n.percent) for text in texts for n in read_numbers(text)}
    numbers |= {(n.value, n.percent) for text in texts for n in read_word_numbers(text)}
    numbers |= {(n.value, n.percent) for n in read_numbers(request.question)}
    return numbers


def numbers_supported() -> Check:
    """Every number in the answer appears in the context.

    A free, deterministic check for the commonest way a grounded answer goes wrong: a figure
    that is not in the documents (a changed number, a guessed amount). Numbers are compared by
    exact value, as written in digits, over the whole of each text: `4` and `4.0` are the
    same number, and so are `1,020.50` and `1020.5` (commas only as thousands separators, in
    groups of three), but a 29-digit number is not its neighbour. A percentage (`15%`,
    `15 percent`, `15 per cent`) is supported only by a percentage of the same value, and a
    plain `15` only by a plain 15. Numbers that are part of a word or a code (`FA00731`, `v2`)
    are not numbers; a time or a date is read as its parts (`10:30` is 10 and 30).

    What counts as support: the context documents, the results of tool calls that succeeded,
    and the question (an answer may repeat the order number it was asked about). In those,
    numbers written as words from zero to twenty, the tens, hundred and thousand count too
    ("2 hours" is supported by "two hours"); in the answer, only digits are checked, so
    "one of them" is never flagged. An answer with no number passes.

    The score is the share of the answer's numbers that are supported; the feedback names the
    others, as written: `Use only numbers from the context: 5 and 12% are not in it.`
    `metadata["unsupported"]` lists them.

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        numbers = [(n.written, (n.value, n.percent)) for n in read_numbers(request.answer)]
        supported = _supporting(request)
        unsupported = list(dict.fromkeys(text for text, n in numbers if n not in supported))
        missing = sum(n not in supported for _, n in numbers)
        score = (len(numbers) - missing) / len(numbers) if numbers else 1.0
        verb = "is" if len(unsupported) == 1 else "are"
        feedback = (
            f"Use only numbers from the context: {_and(unsupported)} {verb} not in it."
            if unsupported
            else ""
        )
        return _verdict(not unsupported, feedback, score=score, unsupported=unsupported)

    return Check("numbers_supported", rule)


# --- values_supported: every value the answer states, found in a context document ------------


_WRITTEN_NUMBER = re.compile(
    r"-?[\d.,]+(?:[eE][+-]?\d+)?(?:\s?(?:%|per\s?cent|percent))?", re.IGNORECASE
)


def _shown_value(value: str, path: str) -> str:
    """A stated value for the feedback: a number as written, a name quoted, with its field."""
    shown = value if _WRITTEN_NUMBER.fullmatch(value) else repr(value)
    return f"{shown} ({path})" if path else shown


def values_supported() -> Check:
    """Every value the answer states (a number, a quoted name) is in a context document.

    The values are those `refinekit.evidence.stated_values(request)` reads: in a prose
    answer, each number written in digits and each quoted name (`"Acme Ltd"`, `'Acme Ltd'`,
    curly quotes, guillemets); in a JSON answer (an object or an array), every string and
    number at its field path. Each is looked up as grounding compares (`InSource`): a string
    case- and space-blind, a number by value (`12.5` is in `12.50 EUR`), a percentage only by
    a percentage, and in prose a number written as a word in a document counts ("two hours"
    supports 2). What counts as support: the context documents, the results of tool calls
    that succeeded, and the question. An answer that states no value passes.

    Where `numbers_supported()` checks figures only, this check also refuses a name the
    documents never state (`"Globex Corp"` in an answer built on a document about Acme).

    The score is the share of stated values that are supported; the feedback names the
    others, as the answer wrote them: `Use only values from the context: 'Globex Corp' and
    14 are not in it.` (a JSON answer's value with its field: `'USD' (currency)`).
    `metadata["unsupported"]` lists them as written, `metadata["values"]` holds one evidence
    record (`ValueEvidence.model_dump()`: path, value, and the span `text`, `start`, `end`
    and `source` of the document that states it, or None) per stated value. A JSON answer
    nested more than 200 levels deep is refused ("Reply with JSON nested at most 200 levels
    deep"), as refinekit reads JSON it did not write everywhere.

    Returns:
        The check.
    """

    def rule(request: EvaluationRequest) -> Verdict:
        try:
            records = stated_values(request)
        except ValueError:  # JSON nested deeper than refinekit reads (the only one it raises)
            return _verdict(
                False,
                f"Reply with JSON nested at most {MAX_DEPTH} levels deep; the answer's is "
                "nested deeper.",
                score=0.0,
                unsupported=[],
                values=[],
            )
        missing = [r for r in records if not r.found]
        shown = list(dict.fromkeys(_shown_value(r.value, r.path) for r in missing))
        verb = "is" if len(shown) == 1 else "are"
        feedback = (
            f"Use only values from the context: {_and(shown)} {verb} not in it." if shown else ""
        )
        score = (len(records) - len(missing)) / len(records) if records else 1.0
        return _verdict(
            not missing,
            feedback,
            score=score,
            unsupported=[r.value for r in missing],
            values=[r.model_dump() for r in records],
        )

    return Check("values_supported", rule)
