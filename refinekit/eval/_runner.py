"""The engine behind `refinekit eval` and `refinekit calibrate`.

Cases run concurrently on one event loop (a sync answer function or judge in a worker thread),
each inside a refinekit job of its own, so its corrections, attempts and tokens are its own.
A rate-limited model call (HTTP 429) is backed off and tried again, and while one case waits
the others hold off too; every other error is recorded on its case and the run goes on, except
a misconfigured judge or a bug in the judge, which stops the run (it would fail every case).
Each finished case is stored at once, so an interrupted run keeps what it paid for.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import importlib
import inspect
import json
import math
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import openai

from .._config import is_testing
from .._errors import JudgeError, JudgeMisconfigured, LowQualityAnswer, RefinekitError
from .._evaluators import as_evaluator
from .._hooks import Event, subscribe
from .._job import _ATTEMPT, job
from .._model import (
    AttemptInfo,
    ContextDocument,
    CriterionResult,
    EvaluationRequest,
    Usage,
    Verdict,
)
from .._replies import answer_text, usage_of
from ..checks import _cited
from ..judges._base import retry_after_of
from ._golden import DataFileError, column_for, read_rows, row_key
from ._runstore import CaseRecord, Outcome, RunInfo, RunStore, redact
from ._stats import mcnemar_exact, wilson_interval

__all__ = [
    "Case",
    "Comparison",
    "EvalOptions",
    "RunAborted",
    "Summary",
    "UsageProblem",
    "compare_runs",
    "load_cases",
    "load_judge",
    "load_object",
    "measured",
    "run_eval",
    "summarise",
]

CONFIDENCE = 0.95
_CONFIGURATION_ERRORS = (
    JudgeMisconfigured,
    openai.AuthenticationError,
    openai.PermissionDeniedError,
    openai.NotFoundError,
)
RATE_LIMIT_TRIES = 6
RATE_LIMIT_MAX_WAIT = 60.0


class UsageProblem(RefinekitError, ValueError):
    """A command line that cannot run: a bad target or judge, a file without needed columns."""


class RunAborted(RefinekitError):
    """The run stopped before its end; the cases finished so far are stored."""


# loading


def load_object(spec: str, what: str) -> Any:
    """The object a `package.module:attribute` names (the current folder is importable).

    Raises:
        UsageProblem: The spec is malformed, the module cannot be imported or lacks the name.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageProblem(
            f"{what} must look like package.module:name (e.g. myapp.answers:answer), got {spec!r}"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise UsageProblem(
                f"{what} {spec!r}: no module named {e.name!r} (run from the folder it is "
                "importable from, or install its package)"
            ) from None
        raise UsageProblem(f"{what} {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:
        raise UsageProblem(
            f"{what} {spec!r}: importing {module_name!r} raised {type(e).__name__}: {e}"
        ) from e
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageProblem(f"{what} {spec!r}: {module_name!r} has no {attribute!r}") from None
    return obj


def load_judge(spec: str) -> Any:
    """The `--judge` object, checked to be something that can judge (an evaluator).

    Raises:
        UsageProblem: As `load_object`, or the object is not an evaluator.
    """
    judge = load_object(spec, "--judge")
    try:
        as_evaluator(judge)
    except TypeError as e:
        raise UsageProblem(f"--judge {spec!r}: {e}") from None
    return judge


@dataclass(frozen=True)
class Case:
    """One row of a golden or labelled file."""

    key: str
    position: int
    question: str
    row: dict[str, Any]


def load_cases(path: Path) -> list[Case]:
    """The rows of a data file as cases; the same row twice is two cases.

    Raises:
        UsageProblem: The file is unusable or has no rows, or a context value is not a
            document.
    """
    try:
        rows = read_rows(path)
    except DataFileError as e:
        raise UsageProblem(str(e)) from None
    if not rows:
        raise UsageProblem(f"{path} has no rows")
    seen: dict[str, int] = {}
    cases = []
    for position, row in enumerate(rows, 1):
        key = row_key(row)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}-{seen[key]}"
        column = column_for("question", list(row), loose=True)
        first = next(iter(row.values()), "")
        question = row[column] if column is not None else first
        cases.append(Case(key, position, _as_text(question), row))
    for case in cases:  # a bad context is a usage error before anything runs, not midway
        _context_of(case)
    return cases


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def fingerprint(*parts: Any) -> str:
    """What a re-run must match to resume a stored run."""
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


# the answer function


_SKIPPED_PARAMETERS = {"self", "cls", "feedback"}


@dataclass(frozen=True)
class Target:
    """The answer function, and how a row becomes its arguments."""

    function: Callable[..., Any]
    spec: str
    columns: Mapping[str, str]  # parameter -> column
    question_parameter: str | None  # gets the question when no parameter names a column
    required: frozenset[str] = frozenset()  # parameters without a default

    @classmethod
    def load(cls, spec: str, columns: list[str]) -> Target:
        function = load_object(spec, "--target")
        if not callable(function):
            raise UsageProblem(f"--target {spec!r} is a {type(function).__name__}, not a function")
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return cls(function, spec, {}, None)
        mapping: dict[str, str] = {}
        required: set[str] = set()
        positional: list[str] = []
        missing: list[str] = []
        for name, parameter in signature.parameters.items():
            if name in _SKIPPED_PARAMETERS or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                continue
            column = column_for(name, columns, loose=True)
            if column is not None and parameter.kind != parameter.POSITIONAL_ONLY:
                mapping[name] = column
                if parameter.default is parameter.empty:
                    required.add(name)
            elif parameter.default is parameter.empty:
                if parameter.kind != parameter.KEYWORD_ONLY:
                    positional.append(name)
                missing.append(name)
        question = None
        if not mapping and len(positional) == 1 and missing == positional:
            question, missing = positional[0], []
        if missing:
            raise UsageProblem(
                f"--target {spec!r} needs {', '.join(repr(m) for m in missing)}, and the file "
                f"has no column of that name; columns: {columns}. Name the function's "
                "parameters after columns (or give it one parameter, which gets the question)."
            )
        return cls(function, spec, mapping, question, frozenset(required))

    def check(self, cases: Sequence[Case]) -> None:
        """Every row has a value for every parameter without a default (JSONL rows vary).

        Raises:
            UsageProblem: Rows lacking one, named.
        """
        for name in sorted(self.required):
            column = self.columns[name]
            lacking = [c.position for c in cases if column not in c.row]
            if lacking:
                rows = ", ".join(map(str, lacking[:10])) + (" ..." if len(lacking) > 10 else "")
                which = f"rows {rows} have" if len(lacking) > 1 else f"row {rows} has"
                raise UsageProblem(
                    f"--target {self.spec!r} needs {name!r}, and {which} no {column!r}; give "
                    "every row that field, or the parameter a default"
                )

    def arguments(self, case: Case) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments: a row's fields by parameter (a field it lacks: the default)."""
        if self.question_parameter is not None:
            return (case.question,), {}
        return (), {
            name: case.row[column] for name, column in self.columns.items() if column in case.row
        }


def _request_of(result: Any, case: Case, context: tuple[ContextDocument, ...]) -> EvaluationRequest:
    """What the judge sees: the function's own request (a `JudgingState`), or one built here."""
    if isinstance(result, EvaluationRequest):
        return result.model_copy(
            update={
                "question": result.question or case.question,
                "context": result.context or context,
            }
        )
    return EvaluationRequest(question=case.question, answer=answer_text(result), context=context)


def _merged(*groups: Sequence[ContextDocument]) -> tuple[ContextDocument, ...]:
    """The documents of all groups, in order, each (text, source) once."""
    seen: set[tuple[str, str | None]] = set()
    out = []
    for doc in (d for group in groups for d in group):
        if (doc.text, doc.source) not in seen:
            seen.add((doc.text, doc.source))
            out.append(doc)
    return tuple(out)


def _context_of(case: Case) -> tuple[ContextDocument, ...]:
    column = column_for("context", list(case.row), loose=True)
    if column is None:
        return ()
    value = case.row[column]
    items = value if isinstance(value, list) else [value]
    docs = []
    for item in items:
        if item is None or (isinstance(item, str) and not item.strip()):
            continue
        try:
            docs.append(
                ContextDocument.coerce(item if isinstance(item, (str, Mapping)) else str(item))
            )
        except TypeError as e:
            raise UsageProblem(f"row {case.position}: column {column!r}: {e}") from None
    return tuple(docs)


# column checks


def _phrases(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(v) for v in items if v is not None and str(v).strip()]


def column_checks(case: Case, answer: str) -> list[CriterionResult]:
    """The row's own checks, as criteria.

    `must_mention`: each phrase appears in the answer (case-insensitive); `expected_source`:
    each source is cited, as a whole token (`a.md` is not cited by `data.md`). A JSONL list
    value means every item.
    """
    results = []
    columns = list(case.row)
    mention = column_for("must_mention", columns, loose=True)
    if mention is not None and _phrases(case.row[mention]):
        folded = answer.casefold()
        absent = [p for p in _phrases(case.row[mention]) if p.casefold() not in folded]
        results.append(
            CriterionResult(
                name="must_mention",
                outcome="fail" if absent else "pass",
                probability=0.0 if absent else 1.0,
                source="code",
                feedback=f"Mention {', '.join(repr(p) for p in absent)}." if absent else "",
            )
        )
    source = column_for("expected_source", columns, loose=True)
    if source is not None and _phrases(case.row[source]):
        uncited = [s for s in _phrases(case.row[source]) if not _cited(s, answer)]
        results.append(
            CriterionResult(
                name="expected_source",
                outcome="fail" if uncited else "pass",
                probability=0.0 if uncited else 1.0,
                source="code",
                feedback=f"Cite {', '.join(uncited)}." if uncited else "",
            )
        )
    return results


def has_column_checks(columns: list[str]) -> bool:
    return any(column_for(c, columns, loose=True) for c in ("must_mention", "expected_source"))


# rate limits


def _is_rate_limit(exc: BaseException) -> bool:
    if isinstance(exc, openai.RateLimitError):
        return True
    if isinstance(exc, openai.APIStatusError) and exc.status_code == 429:
        return True
    return isinstance(exc, JudgeError) and exc.status_code == 429


def _retry_after(exc: BaseException) -> float | None:
    """The wait the server asked for, when it is a sane one (up to `RATE_LIMIT_MAX_WAIT`)."""
    told = getattr(exc, "retry_after", None)  # a JudgeUnavailable says what the server said
    if not isinstance(told, (int, float)):
        told = retry_after_of(exc)
    if told is not None and math.isfinite(told) and 0 <= told <= RATE_LIMIT_MAX_WAIT:
        return float(told)
    return None


class RateLimiter:
    """Backs off rate-limited calls; while one waits, every case holds off."""

    def __init__(self) -> None:
        self.resume_at = 0.0
        self.waits = 0
        self.waited = 0.0

    async def hold(self) -> None:
        delay = self.resume_at - time.monotonic()
        if delay > 0 and not is_testing():
            await asyncio.sleep(delay)

    async def call(self, make: Callable[[], Awaitable[Any]]) -> Any:
        for attempt in range(1, RATE_LIMIT_TRIES + 1):
            await self.hold()
            try:
                return await make()
            except Exception as e:
                if not _is_rate_limit(e) or attempt == RATE_LIMIT_TRIES:
                    raise
                wait = _retry_after(e)
                if wait is None:  # exponential, full jitter (tenacity's wait_random_exponential)
                    wait = random.uniform(0, min(RATE_LIMIT_MAX_WAIT, 2.0**attempt))
                self.waits += 1
                self.waited += wait
                self.resume_at = max(self.resume_at, time.monotonic() + wait)
        raise AssertionError("unreachable")  # pragma: no cover


# attempts seen through events


class _Attempts:
    """The attempts `@retry_on_low_quality` made in each job, from its events."""

    def __init__(self) -> None:
        self.by_job: dict[str, int] = {}

    def __call__(self, event: Event) -> None:
        if event.kind == "attempt" and event.decorator == "retry_on_low_quality":
            self.by_job[event.job_id] = max(self.by_job.get(event.job_id, 0), event.attempt)


# running


@dataclass(frozen=True)
class EvalOptions:
    """What `run_eval` needs besides the store."""

    dataset: Path
    target: str | None
    judge: str | None
    concurrency: int = 4
    repeat: int = 1
    kind: str = "eval"
    retry: frozenset[str] = frozenset()  # outcomes whose stored cases a resume runs again


@dataclass
class Progress:
    """Counts while the run goes; `on_case` is told of each finished case."""

    total: int
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    on_case: Callable[[Progress, CaseRecord], None] | None = None
    retried: int = 0  # stored cases run again (`--retry`) whose new outcome replaced the old

    def add(self, record: CaseRecord) -> None:
        self.done += 1
        self.counts[record.outcome] = self.counts.get(record.outcome, 0) + 1
        if self.on_case is not None:
            self.on_case(self, record)


def _verdict_dump(verdict: Verdict) -> dict[str, Any]:
    dump = verdict.model_dump(mode="json", exclude={"metadata"}) | {
        "metadata": json.loads(json.dumps(verdict.metadata, default=str))
    }
    # an unjudged verdict's reason quotes an error; feedback may quote one too (a
    # LowQualityAnswer's text, a judge reading an answer back)
    for part in (dump, *(dump.get("criteria") or ())):
        for name in ("reason", "feedback"):
            if isinstance(part.get(name), str):
                part[name] = redact(part[name])
    return dump


def _error_text(exc: BaseException) -> str:
    """An error's type and message, on one line, with credentials redacted."""
    text = redact(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


def probability_of(verdict: Verdict) -> float | None:
    """The judge's probability that the answer passes, when it gives one.

    A criteria judge's weakest criterion (all must hold), when at least one criterion's
    probability came from the model's token probabilities, and 0 when a code criterion failed
    so the model was not asked; else a `probability` the verdict carries in its metadata;
    else None.
    """
    if any(c.source == "logprobs" for c in verdict.criteria):
        known = [c.probability for c in verdict.criteria if c.probability is not None]
        return min(known) if known else None
    if any(c.source == "code" and c.outcome == "fail" for c in verdict.criteria) and any(
        c.outcome == "skipped" for c in verdict.criteria
    ):  # a code check failed, so the model criteria were not asked: a certain fail
        return 0.0
    value = verdict.metadata.get("probability")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return None


class _Judging:
    """The run's judge, called `repeat` times per answer, with the row's column checks."""

    def __init__(self, judge: Any | None, name: str | None, repeat: int, limiter: RateLimiter):
        self.evaluator = None if judge is None else as_evaluator(judge)
        self.name = name or (self.evaluator.name if self.evaluator is not None else "checks")
        self.repeat = repeat
        self.limiter = limiter

    async def judge_once(self, request: EvaluationRequest) -> Verdict:
        evaluator = self.evaluator
        assert evaluator is not None
        # A sync-only judge runs in a thread of its own, as a sync answer function does.
        judge_one: Callable[[], Awaitable[Verdict]] = (
            (lambda: evaluator.aevaluate(request))
            if evaluator._async is not None
            else (lambda: _in_thread(evaluator.evaluate, request))
        )
        try:
            verdict: Verdict = await self.limiter.call(judge_one)
            return verdict
        except JudgeMisconfigured as e:
            raise RunAborted(f"the judge is misconfigured: {redact(str(e))}") from e
        except JudgeError as e:
            return Verdict.unjudged(_error_text(e))
        except Exception as e:
            raise RunAborted(f"the judge raised {_error_text(e)} (a bug in the judge?)") from e

    async def judge(
        self, case: Case, request: EvaluationRequest
    ) -> tuple[list[CriterionResult], list[Verdict], Usage, float]:
        checks = column_checks(case, request.answer)
        started = time.perf_counter()
        verdicts: list[Verdict] = []
        async with job() as judging_job:
            if self.evaluator is None:
                verdicts.append(_combine(checks, None, self.name))
            else:
                for _ in range(self.repeat):
                    verdicts.append(_combine(checks, await self.judge_once(request), self.name))
        return checks, verdicts, judging_job.judge_usage, time.perf_counter() - started


def _combine(checks: list[CriterionResult], verdict: Verdict | None, name: str) -> Verdict:
    """The row's checks and the judge's verdict as one verdict."""
    failed = [c for c in checks if c.outcome == "fail"]
    if verdict is None:
        return Verdict(
            passed=not failed,
            score=1.0 if not failed else 0.0,
            feedback=" ".join(c.feedback for c in failed),
            criteria=tuple(checks),
        )
    if not verdict.judged:
        update: dict[str, Any] = {"criteria": (*checks, *verdict.criteria)}
        if failed:  # the row's checks fail the case anyway: their feedback says why
            update["feedback"] = " ".join(c.feedback for c in failed)
        return verdict.model_copy(update=update)
    own = verdict.criteria or (
        CriterionResult(
            name=name,
            outcome="pass" if verdict.passed else "fail",
            probability=probability_of(verdict),
            source="logprobs" if probability_of(verdict) is not None else None,
            feedback=verdict.feedback,
        ),
    )
    notes = [c.feedback for c in failed] + ([verdict.feedback] if not verdict.passed else [])
    return verdict.model_copy(
        update={
            "passed": verdict.passed and not failed,
            "criteria": (*checks, *own),
            "feedback": " ".join(notes).strip(),
        }
    )


def decide(
    verdicts: Sequence[Verdict],
    checks: Sequence[CriterionResult] = (),
    judged_by_model: bool = True,
) -> tuple[Outcome, int, int, bool, str | None]:
    """A case's outcome: the majority of the judged verdicts, unless the row's checks decide.

    A row check that failed fails the case whatever the judge said (or could not say); a row
    with nothing to check and no judge is inconclusive.

    Returns:
        The outcome, the passing verdicts, the judged verdicts, whether they disagreed, and
        the reason when the outcome is not a judgement.
    """
    judged = [v for v in verdicts if v.judged]
    passes = sum(v.passed for v in judged)
    flipped = 0 < passes < len(judged)
    if any(c.outcome == "fail" for c in checks):
        return "failed", passes, len(judged), flipped, None
    if not judged_by_model and not checks:
        return "inconclusive", 0, 0, False, "nothing to check: the row's check columns are empty"
    if not judged:
        if any(v.status == "inconclusive" for v in verdicts):
            reasons = [v.reason for v in verdicts if v.status == "inconclusive"]
            return "inconclusive", 0, 0, False, reasons[0]
        return "unavailable", 0, 0, False, verdicts[0].reason if verdicts else None
    if passes * 2 > len(judged):
        return "passed", passes, len(judged), flipped, None
    if passes * 2 < len(judged):
        return "failed", passes, len(judged), flipped, None
    return "inconclusive", passes, len(judged), flipped, f"the judge split {passes}/{len(judged)}"


async def _call(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(function):
        return await function(*args, **kwargs)
    result = await _in_thread(function, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def _in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` in a daemon thread of its own, in a copy of this context.

    Not `asyncio.to_thread`: the loop's default executor has min(32, CPUs + 4) threads, which
    would cap `--concurrency` for sync functions, and its threads are joined when the loop
    and the interpreter shut down, so an interrupted run would wait for (or hang on) every
    call still in flight. A daemon thread is left behind instead, as the process exits.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the case was cancelled meanwhile
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def run() -> None:
        try:
            result, error = context.run(function, *args, **kwargs), None
        except BaseException as e:  # handed to the awaiting case, whatever it is
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="refinekit-eval", daemon=True).start()
    return await future


async def _eval_case(
    case: Case, target: Target, judging: _Judging, attempts: _Attempts
) -> CaseRecord:
    args, kwargs = target.arguments(case)
    started = time.perf_counter()
    error: Exception | None = None
    # The case is attempt 1 of 1 of the answer function: `record_context()` inside it (or
    # the accepted attempt's, inside a `@retry_on_low_quality`) lands here, for the judge.
    attempt = AttemptInfo(1, 1)
    token = _ATTEMPT.set(attempt)

    def answer_once() -> Awaitable[Any]:
        attempt._context.clear()  # a rate-limited try gave no answer: drop what it recorded
        return _call(target.function, args, kwargs)

    try:
        async with job() as answer_job:
            counted = answer_job._replies_counted()
            try:
                result = await judging.limiter.call(answer_once)
            except Exception as e:
                error = e
            else:  # a reply returned as it came (no decorator counted it) was paid for too
                usage = usage_of(result)
                if usage is not None:
                    answer_job._add_usage(usage, result, counted)
    finally:
        _ATTEMPT.reset(token)
    if isinstance(error, _CONFIGURATION_ERRORS):
        raise RunAborted(
            f"the answer function raised {_error_text(error)}: a misconfiguration fails every "
            "case, so the run stops here"
        ) from error
    context = _merged(attempt._context, _context_of(case))
    tried = max(1, attempts.by_job.pop(answer_job.id, 1))
    cost: dict[str, Any] = {
        "corrections": answer_job.corrections_used,
        "answer_usage": answer_job.usage,
        "answer_judge_usage": answer_job.judge_usage,
        "answer_seconds": time.perf_counter() - started,
    }
    if error is not None:
        answer = feedback = None
        if isinstance(error, LowQualityAnswer):  # the rejected answer is kept, with why
            tried = max(tried, len(error.attempts))
            feedback = error.verdict.feedback
            answer = None if error.answer is None else answer_text(error.answer)
        return CaseRecord(
            key=case.key,
            position=case.position,
            question=case.question,
            row=case.row,
            outcome="raised",
            error=_error_text(error),
            answer=answer,
            feedback=redact(feedback or ""),
            attempts=tried,
            **cost,
        )
    request = _request_of(result, case, context)
    judgement = await judging.judge(case, request)
    return _record(
        case,
        request.answer,
        judgement,
        judging.evaluator is not None,
        attempts=tried,
        **cost,
    )


def _record(
    case: Case,
    answer: str,
    judgement: tuple[list[CriterionResult], list[Verdict], Usage, float],
    judged_by_model: bool,
    **fields: Any,
) -> CaseRecord:
    checks, verdicts, judge_usage, judge_seconds = judgement
    outcome, passes, judged, flipped, reason = decide(verdicts, checks, judged_by_model)
    failing = [v for v in verdicts if not v.passed and (v.judged or outcome == "failed")]
    scores = [v.score for v in verdicts if v.judged and v.score is not None]
    probabilities = [p for v in verdicts if v.judged and (p := probability_of(v)) is not None]
    return CaseRecord(
        key=case.key,
        position=case.position,
        question=case.question,
        row=case.row,
        outcome=outcome,
        answer=answer,
        error=reason if outcome in ("unavailable", "inconclusive") else None,
        feedback=redact(failing[0].feedback) if failing else "",
        score=sum(scores) / len(scores) if scores else None,
        probability=sum(probabilities) / len(probabilities) if probabilities else None,
        verdicts=[_verdict_dump(v) for v in verdicts],
        passes=passes,
        judgements=judged,
        flipped=flipped,
        judge_usage=judge_usage,
        judge_seconds=judge_seconds,
        **fields,
    )


async def _calibrate_case(case: Case, judging: _Judging, label: str) -> CaseRecord:
    answer_column = column_for("answer", list(case.row), loose=True)
    assert answer_column is not None
    request = EvaluationRequest(
        question=case.question,
        answer=_as_text(case.row[answer_column]),
        context=_context_of(case),
    )
    judgement = await judging.judge(case, request)
    return replace(_record(case, request.answer, judgement, True, answer_seconds=0.0), label=label)


LABELS = {
    "pass": "pass",
    "passed": "pass",
    "true": "pass",
    "yes": "pass",
    "1": "pass",
    "good": "pass",
    "fail": "fail",
    "failed": "fail",
    "false": "fail",
    "no": "fail",
    "0": "fail",
    "bad": "fail",
}


def labels_of(cases: Sequence[Case]) -> dict[str, str]:
    """Each labelled case's human label, `pass` or `fail`.

    Raises:
        UsageProblem: No label or answer column, or a label that is neither pass nor fail.
    """
    columns = list(cases[0].row)
    for case in cases:  # every row: a JSONL row may lack what the first one has
        if column_for("answer", list(case.row), loose=True) is None:
            where = "" if case.position == 1 else f" (row {case.position} has none)"
            raise UsageProblem(
                f"the labelled file needs an 'answer' column{where}; columns: {list(case.row)}"
            )
    column = next(
        (
            c
            for name in ("label", "human_label", "human", "expected")
            if (c := column_for(name, columns, loose=True)) is not None
        ),
        None,
    )
    if column is None:
        raise UsageProblem(
            f"the labelled file needs a 'label' column (pass or fail); columns: {columns}"
        )
    labels = {}
    for case in cases:
        raw = case.row.get(column)
        value = (
            LABELS.get(str(raw).strip().lower())
            if not isinstance(raw, bool)
            else ("pass" if raw else "fail")
        )
        if value is None:
            raise UsageProblem(
                f"row {case.position}: label {raw!r} is neither pass nor fail (accepted: "
                "pass/fail, true/false, yes/no, 1/0, good/bad)"
            )
        labels[case.key] = value
    return labels


async def _run_all(
    cases: Sequence[Case],
    work: Callable[[Case], Awaitable[CaseRecord]],
    concurrency: int,
    store: RunStore,
    run_id: int,
    progress: Progress,
) -> None:
    semaphore = asyncio.Semaphore(concurrency)
    stopping = False

    async def one(case: Case) -> None:
        nonlocal stopping
        async with semaphore:
            # A case that failed the run hands its slot on before the others are cancelled:
            # the next case must not start (and pay for a model call) in that moment.
            if stopping:
                return
            try:
                record = await work(case)
            except BaseException:
                stopping = True
                raise
        store.save_case(run_id, record)
        progress.add(record)

    tasks = [asyncio.ensure_future(one(case)) for case in cases]
    try:
        for task in asyncio.as_completed(tasks):
            await task
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


RETRYABLE = ("raised", "unavailable")
"""The outcomes `--retry` may run again: each says nothing about the answer, only that no
verdict was reached. A passed, failed or inconclusive case is a measurement, never re-run."""


@dataclass
class Started:
    """A run about to go: the stored run, the cases still to do, what was resumed.

    Attributes:
        resuming: Whether `run` is an unfinished run resumed (else a new one).
        resumed: Stored cases kept as they are (not run again).
        dropped: Stored cases no longer in the file, removed from the run.
        retried: Stored cases run again (`--retry`), by their stored outcome.
        earlier: The stored records of those cases: their model calls and tokens are added
            to the new record's, so the run's spend stays true.
        retried_before: Cases earlier sessions of this run had already run again.
    """

    run: RunInfo
    todo: list[Case]
    resuming: bool = False
    resumed: int = 0
    dropped: int = 0
    retried: dict[str, int] = field(default_factory=dict)
    earlier: dict[str, CaseRecord] = field(default_factory=dict)
    retried_before: int = 0


def start(
    store: RunStore, options: EvalOptions, cases: list[Case], *, fresh: bool, version: str
) -> Started:
    """Resume the newest unfinished run of the same command, or start a new one.

    On resume the stored cases are not run again, except those whose outcome is in
    `options.retry`: they are run again and their new record replaces the old one.
    """
    from ._golden import file_sha256

    sha = file_sha256(options.dataset)
    key = fingerprint(
        options.kind, str(options.dataset.resolve()), options.target, options.judge, options.repeat
    )
    previous = None if fresh else store.resumable(key)
    if previous is not None:
        run = store.resume(previous.id, sha)
        keys = {c.key for c in cases}
        stored = store.case_keys(run.id)
        dropped = stored - keys
        if dropped:
            store.drop_cases(run.id, dropped)
        earlier = (
            {r.key: r for r in store.cases(run.id) if r.outcome in options.retry and r.key in keys}
            if options.retry
            else {}
        )
        retried: dict[str, int] = {}
        for record in earlier.values():
            retried[record.outcome] = retried.get(record.outcome, 0) + 1
        todo = [c for c in cases if c.key not in stored or c.key in earlier]
        done_before = previous.summary.get("retried", 0)
        return Started(
            run,
            todo,
            resuming=True,
            resumed=len(stored & keys) - len(earlier),
            dropped=len(dropped),
            retried=retried,
            earlier=earlier,
            retried_before=done_before if isinstance(done_before, int) else 0,
        )
    run = store.start_run(
        kind=options.kind,  # type: ignore[arg-type]
        dataset=options.dataset,
        dataset_sha256=sha,
        target=options.target,
        judge=options.judge,
        options={"concurrency": options.concurrency, "repeat": options.repeat},
        fingerprint=key,
        version=version,
    )
    return Started(run, list(cases))


async def run_eval(
    store: RunStore,
    run: RunInfo,
    todo: Sequence[Case],
    *,
    target: Target | None,
    judge: Any | None,
    judge_name: str | None,
    options: EvalOptions,
    progress: Progress,
    labels: Mapping[str, str] | None = None,
    earlier: Mapping[str, CaseRecord] | None = None,
) -> RateLimiter:
    """Run the cases still to do, storing each as it finishes.

    A case in `earlier` (a stored case run again, `--retry`) replaces its stored record,
    with the earlier record's model calls and tokens added to its own: they were paid for.

    Raises:
        RunAborted: The judge is misconfigured or raised a bug; finished cases are stored.
    """
    limiter = RateLimiter()
    judging = _Judging(judge, judge_name, options.repeat, limiter)
    attempts = _Attempts()
    if target is not None:
        tgt = target

        async def once(case: Case) -> CaseRecord:
            return await _eval_case(case, tgt, judging, attempts)
    else:
        assert labels is not None
        lab = labels

        async def once(case: Case) -> CaseRecord:
            return await _calibrate_case(case, judging, lab[case.key])

    stored = earlier or {}

    async def work(case: Case) -> CaseRecord:
        record = await once(case)
        old = stored.get(case.key)
        if old is None:
            return record
        progress.retried += 1
        return replace(
            record,
            answer_usage=old.answer_usage + record.answer_usage,
            answer_judge_usage=old.answer_judge_usage + record.answer_judge_usage,
            judge_usage=old.judge_usage + record.judge_usage,
        )

    with subscribe(attempts):
        await _run_all(todo, work, options.concurrency, store, run.id, progress)
    return limiter


# figures


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
    repeated: int  # cases judged more than once
    flipped: int
    criteria: dict[str, dict[str, int]]
    attempts_mean: float
    attempts_max: int
    corrections_total: int
    corrections_max: int
    usage: dict[str, dict[str, int]]
    seconds: float

    @property
    def counted(self) -> int:
        """The cases the pass rate is computed over."""
        return self.passed + self.failed + self.raised

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


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
        **count,
    )


@dataclass(frozen=True)
class Comparison:
    """Two runs on the questions they share: what regressed, what improved, and McNemar's p."""

    before: RunInfo
    after: RunInfo
    shared: int  # questions judged (pass or fail) in both
    regressed: list[tuple[CaseRecord, CaseRecord]]
    improved: list[tuple[CaseRecord, CaseRecord]]
    p_value: float
    not_comparable: int  # shared questions unavailable or inconclusive in either run

    def significant_regression(self, alpha: float) -> bool:
        """More regressions than improvements, and unlikely to be chance at level `alpha`."""
        return len(self.regressed) > len(self.improved) and self.p_value < alpha


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
    """Pair the two runs' cases by question; a raised case counts as a failure."""
    old, new = _by_question(before_cases), _by_question(after_cases)
    regressed, improved = [], []
    shared = not_comparable = 0
    for key in old.keys() & new.keys():
        a, b = old[key], new[key]
        if a.outcome in ("unavailable", "inconclusive") or b.outcome in (
            "unavailable",
            "inconclusive",
        ):
            not_comparable += 1
            continue
        shared += 1
        was, now = a.outcome == "passed", b.outcome == "passed"
        if was and not now:
            regressed.append((a, b))
        elif now and not was:
            improved.append((a, b))
    regressed.sort(key=lambda p: p[1].position)
    improved.sort(key=lambda p: p[1].position)
    return Comparison(
        before=before,
        after=after,
        shared=shared,
        regressed=regressed,
        improved=improved,
        p_value=mcnemar_exact(len(regressed), len(improved)),
        not_comparable=not_comparable,
    )
