"""Every exception refinekit defines, in one tree.

Errors (something went wrong and the caller must handle it)::

    RefinekitError
    ├── AnswerRejected               @reviewed (enforce) found no answer it may publish: the
    │                                draft failed review and no revision passed in budget
    ├── BudgetExceeded               the job's `refinekit.Budget` (tokens, cost, model calls)
    │                                is spent, or cannot cover the next call refinekit makes
    │   └── EscalationUnaffordable   ... and the next tier of an `escalate=` ladder is the
    │                                call it cannot cover (defined in `tiers`)
    ├── MissingPrice                 a model call to price, under prices that name no price
    │                                for its model (and no default); also a LookupError
    ├── CorrectionExhausted          @self_correct ran out of corrections
    │   ├── JsonParseError           ... and the last reply was not JSON
    │   └── ResponseValidationError  ... and the last reply was JSON that failed validation
    ├── JudgeError                   a model judge could not judge
    │   ├── JudgeUnavailable         connection error, timeout, HTTP 408/429/5xx, a malformed
    │   │                            body (after the client's own retries): an outage
    │   ├── JudgeMisconfigured       HTTP 400/401/403/404/422: a bad key, model or request;
    │   │                            always raised, whatever the error policy
    │   └── JudgeReplyError          the judge answered something that is not a verdict
    ├── ModelRefused                 the model declined to answer (a typed refusal): under
    │                                `escalate=` the next tier is tried (defined in `tiers`)
    ├── StreamInterrupted            a streamed reply broke before its end (the connection
    │                                dropped, a chunk was not JSON, an error event): raised
    │                                by a decorator that judges or screens text; @self_correct
    │                                corrects it as a reply cut off (`cut_off`)
    ├── LocalModelError              refinekit.local: the `local` extra is missing, or the
    │                                local model's server did not come up or died
    ├── DataFileError                refinekit.eval: a golden or labelled file that cannot be
    │                                used: missing, unreadable, wrong shape (also a ValueError)
    ├── RunAborted                   refinekit.eval: a run stopped before its end (a
    │   │                            misconfigured or broken judge); its finished cases are stored
    │   └── CostLimitReached         `max_cost` (`--max-cost`): another case would take the
    │                                run's cost over it
    ├── RunStoreError                refinekit.eval: the run store cannot be used: not a refinekit
    │                                database, a newer schema, a missing run
    ├── UsageProblem                 refinekit.eval: a run that cannot start: a bad target, judge
    │                                or option, a file without the columns it needs (a ValueError)
    └── DemoConfigError              `refinekit demo`: the options name a real endpoint only in
                                     part (also a ValueError)

    RefinekitWarning (a UserWarning)  something went wrong that must not break the job

Control-flow signals (not errors, kept out of the tree above)::

    LowQualityAnswer   raised by your function to ask @retry_on_low_quality for another
                       attempt; raised to the caller, the same object, when attempts run out
    ReaderGone         (a BaseException) the `refinekit` command's standard output lost its
                       reader (`| head`) while printing was its work: it stops, quietly

Internal signals (private: each is caught inside refinekit and never reaches a caller as it
is)::

    ReplyShapeError (ValueError)    a reply holds no single text to parse (two tool calls):
                                    @self_correct corrects it like bad JSON
    TimedOut (TimeoutError)         a time-limited step gave no result in time: @reviewed
                                    turns it into a `judge_timeout` or `budget` rejection
    DeadlinePassed (TimeoutError)   a judge request not sent, its time limit already past
    ReviserFailed                   the default reviser's model call failed: the review ends
                                    with `AnswerRejected`
    GoldenFileError                 the pytest plugin: a golden file that cannot be used,
                                    reported as the test module's collection error

`judge_error_policy="fail_open"` (the default of `@retry_on_low_quality`) lets an answer
through unjudged on `JudgeUnavailable` and `JudgeReplyError`; `"fail_closed"` raises them
(see `refinekit._engine.policy`, where every decorator and judge applies its policy).
An exception raised inside a rule check or a code criterion is a bug in the check: it is not
a `JudgeError` and always propagates.

Configuration mistakes (a bad `max_retries`, an unknown `on_exhausted`, a schema pydantic
cannot handle) raise `ValueError` or `TypeError` when the decorator is applied, not when the
function is called. Any exception your function raises that is not `LowQualityAnswer`
propagates unchanged and is never retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from .redact import redact, redacted_str
from .signals import DeadlinePassed as DeadlinePassed
from .signals import GoldenFileError as GoldenFileError
from .signals import ReplyShapeError as ReplyShapeError
from .signals import ReviserFailed as ReviserFailed
from .signals import TimedOut as TimedOut
from .types import Attempt, Cost, TierReport, Usage, Verdict

__all__ = [
    "AnswerRejected",
    "BudgetExceeded",
    "CorrectionExhausted",
    "JsonParseError",
    "JudgeError",
    "JudgeMisconfigured",
    "JudgeReplyError",
    "JudgeUnavailable",
    "LocalModelError",
    "LowQualityAnswer",
    "MissingPrice",
    "RefinekitError",
    "RefinekitWarning",
    "ResponseValidationError",
    "StreamInterrupted",
]


class RefinekitError(Exception):
    """The base of every error refinekit raises.

    Its message is redacted (`refinekit._core.redact.redact`), whichever subclass writes it:
    a subclass's own `__str__` is wrapped when the class is made.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls).get("__str__")
        if own is not None:
            cls.__str__ = redacted_str(own)  # type: ignore[method-assign]

    def __init__(self, *args: Any) -> None:
        # Redacted when made, so `args` (what `repr` and pickling show) holds no secret either.
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))

    def __str__(self) -> str:
        return redact(super().__str__())


class RefinekitWarning(UserWarning):
    """Something went wrong that must not break the job (e.g. an event hook raised)."""


class LowQualityAnswer(Exception):
    """The answer is not good enough: raise it to ask for another attempt.

    Raise it from a function decorated with `@retry_on_low_quality` when you can tell the
    answer is poor yourself; the decorator raises it too, on your behalf, when its evaluator
    rejects an answer. When attempts run out the caller receives the last one, with the
    history filled in.

    Args:
        feedback: What is wrong, written for the model: it is passed to the next attempt.
        verdict: The verdict behind the rejection, if there is one.
        answer: The rejected answer, if there is one (it can then be returned as the best).

    Attributes:
        feedback: What is wrong with the answer.
        verdict: The verdict (one is made from `feedback` when none was given).
        answer: The rejected answer, or None.
        attempts: Every attempt of the decorated call, filled in on exhaustion.
        best: The best attempt (most criteria passed net of failed, the later on a tie).
        usage: Token usage of the answering model in the job when it surfaced.
        judge_usage: Token usage of model judges in the job when it surfaced.
        job_id: The id of the job it surfaced in (None until it surfaces).
        tiers: With `escalate=`, what each tier of the ladder did (`refinekit.TierReport`),
            in order; empty otherwise.
    """

    def __init__(
        self, feedback: str, *, verdict: Verdict | None = None, answer: Any = None
    ) -> None:
        super().__init__(feedback)
        self.feedback = feedback
        self.verdict = verdict if verdict is not None else Verdict(passed=False, feedback=feedback)
        self.answer = answer
        self.attempts: tuple[Attempt, ...] = ()
        self.best: Attempt | None = None
        self.usage: Usage = Usage()
        self.judge_usage: Usage = Usage()
        self.job_id: str | None = None
        self.tiers: tuple[TierReport, ...] = ()

    def __str__(self) -> str:
        base = f"answer rejected: {self.feedback}" if self.feedback else "answer rejected"
        if self.attempts:
            base += f" (after {len(self.attempts)} attempt{'s' if len(self.attempts) > 1 else ''})"
        return base

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.feedback,), self.__dict__))


class CorrectionExhausted(RefinekitError):
    """`@self_correct` used its whole correction budget and the reply is still unusable.

    Attributes:
        raw_reply: The text of the last reply.
        errors: What was wrong with it: for a parse failure one entry with `msg` (and `line`,
            `column` and `pos` when the JSON decoder gave a position); for a validation failure
            pydantic's errors (`loc`, `msg`, `type`, `input`) without documentation URLs.
        conversation: The conversation as last sent, with the last reply appended.
        corrections_used: Corrections the job had used when this surfaced.
        usage: Token usage of the answering model in the job when it surfaced.
        judge_usage: Token usage of model judges in the job when it surfaced.
        job_id: The id of the job it surfaced in.
        replies: The text of every unusable reply of this call, in order (the last is
            `raw_reply`): earlier ones are not resent to the model, but kept here.
        failure: What was wrong with the last reply (a `refinekit.FailureKind`: `"cut_off"`,
            `"schema_echo"`, `"not_json"`, `"invalid"`, ...), or None when not known.
        tiers: With `escalate=`, what each tier of the ladder did (`refinekit.TierReport`),
            in order; empty otherwise. `replies` then holds every tier's replies.
    """

    problem = "reply was unusable"

    def __init__(
        self,
        summary: str,
        *,
        raw_reply: str,
        errors: Sequence[dict[str, Any]],
        conversation: Sequence[dict[str, Any]],
        corrections_used: int,
        usage: Usage | None = None,
        replies: Sequence[str] = (),
        failure: str | None = None,
        judge_usage: Usage | None = None,
        job_id: str | None = None,
    ) -> None:
        super().__init__(summary)
        self.summary = summary
        self.raw_reply = raw_reply
        self.errors = list(errors)
        self.conversation = list(conversation)
        self.corrections_used = corrections_used
        self.usage = usage if usage is not None else Usage()
        self.replies = list(replies) if replies else [raw_reply]
        self.failure = failure
        self.judge_usage = judge_usage if judge_usage is not None else Usage()
        self.job_id = job_id
        self.tiers: tuple[TierReport, ...] = ()

    def __str__(self) -> str:
        n = self.corrections_used
        return f"{self.problem} after {n} correction{'' if n == 1 else 's'}: {self.summary}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.summary,), self.__dict__))


class AnswerRejected(RefinekitError):
    """`@reviewed` in enforce mode has no answer it may publish, so it publishes none.

    The draft failed review and no revision passed within `max_revisions` and the budget, or
    the review itself could not be completed. The rejected draft is never returned: handle
    this with an application message or a human review, never by republishing `drafts`.

    Attributes:
        reason: Why: `"rejected"` (the last draft still failed), `"budget"` (the time budget
            ran out), `"judge_timeout"` (a judge call took longer than `judge_timeout`),
            `"judge_error"` (the judge was unavailable or its reply unreadable),
            `"inconclusive"` (the evidence could not support a verdict),
            `"revision_used_tools"` (the reviser's reply called tools) or `"reviser_error"`
            (the default reviser's model call failed).
        verdicts: Every verdict of the call, in order (one per judged draft; a judge that
            failed or timed out gives an `unjudged` verdict).
        drafts: The original answer, then each revision's text, in order.
        usage: Token usage of the answering model in the job when it surfaced.
        judge_usage: Token usage of model judges in the job when it surfaced.
        job_id: The id of the job it surfaced in.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        verdicts: Sequence[Verdict] = (),
        drafts: Sequence[str] = (),
        usage: Usage | None = None,
        judge_usage: Usage | None = None,
        job_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.verdicts: tuple[Verdict, ...] = tuple(verdicts)
        self.drafts: tuple[str, ...] = tuple(drafts)
        self.usage = usage if usage is not None else Usage()
        self.judge_usage = judge_usage if judge_usage is not None else Usage()
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class BudgetExceeded(RefinekitError):
    """The job's budget is spent, or cannot cover the next call refinekit would make.

    Raised by the decorated call instead of its answer: as soon as a counted model call has
    taken the job over a limit, or before a call (a judge call, a revision, another attempt)
    that the remaining budget cannot cover (see docs/budgets.md). Nothing is truncated
    silently: what was spent and the best answer so far travel with it.

    Attributes:
        limit: Which limit: `"max_tokens"`, `"max_cost"` or `"max_calls"`.
        maximum: That limit's value.
        spent: What the job had spent against that limit when it stopped (tokens, cost or
            calls, answer and judge together).
        needed: For a call refinekit did not make: what it was estimated to need against
            that limit; None when a call already made took the job over.
        planned: The call that was not made (e.g. `"judge call to model 'gpt-4.1-mini'"`),
            or None.
        reserved: For a call refinekit did not make: what other calls in flight held
            against that limit when it was refused, reserved and not yet counted (0 with one
            call at a time). For a stream stopped mid-way: what the calls in flight held,
            its own text so far included.
        usage: Token usage of the answering model in the job when it stopped.
        judge_usage: Token usage of model judges in the job when it stopped.
        cost: What the job's calls cost when it stopped; None without prices.
        attempts: The finished attempts of the decorated call the caller made (each with its
            verdict), as `LowQualityAnswer.attempts`.
        best: The best of them (most criteria passed net of failed, the later on a tie), or
            None when no attempt finished.
        job_id: The id of the job.
        tiers: With `escalate=`, what each tier of the ladder did before it stopped
            (`refinekit.TierReport`); empty otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        maximum: float,
        spent: float,
        needed: float | None = None,
        planned: str | None = None,
        usage: Usage | None = None,
        judge_usage: Usage | None = None,
        cost: Cost | None = None,
        job_id: str | None = None,
        reserved: float = 0,
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum
        self.spent = spent
        self.needed = needed
        self.planned = planned
        self.reserved = reserved
        self.usage = usage if usage is not None else Usage()
        self.judge_usage = judge_usage if judge_usage is not None else Usage()
        self.cost = cost
        self.attempts: tuple[Attempt, ...] = ()
        self.best: Attempt | None = None
        self.job_id = job_id
        self.tiers: tuple[TierReport, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class MissingPrice(RefinekitError, LookupError):
    """A model call must be priced, and the prices name no price for its model.

    Raised when a job has prices (`refinekit.Budget(prices=...)`) and a call's model is not in
    them and they have no `default`: a cost limit could otherwise be overrun unseen. Add the
    model to the `Prices` mapping, or give `Prices(..., default=(input, output))`.

    Attributes:
        model: The model name that has no price (None: the call named no model).
    """

    def __init__(self, message: str, *, model: str | None) -> None:
        super().__init__(message)
        self.model = model

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class JsonParseError(CorrectionExhausted):
    """The last reply was not JSON (nor held a JSON value in a code block or in prose)."""

    problem = "model reply did not parse as JSON"


class ResponseValidationError(CorrectionExhausted):
    """The last reply was JSON but failed validation against the schema."""

    problem = "model reply failed validation"


class JudgeError(RefinekitError):
    """A model judge could not judge the answer.

    Attributes:
        model: The judge model's name.
        status_code: The HTTP status, when the endpoint answered with one.
        fail_closed: True when an error policy of `"fail_closed"` raised it (a judge's own
            `judge_error_policy`, or a decorator's): no outer policy lets it through.
    """

    _fail_closed = False

    def __init__(self, message: str, *, model: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code

    @property
    def fail_closed(self) -> bool:
        """True when a `"fail_closed"` error policy raised it: no outer policy lets it through."""
        return self._fail_closed

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class JudgeUnavailable(JudgeError):
    """The judge could not be reached or did not answer usably: an outage, not a verdict.

    Connection errors, timeouts, HTTP 408, 429 and 5xx, and bodies that are not a completion,
    after the `openai` client's own retries.

    Attributes:
        retry_after: The seconds the server asked to wait (its `Retry-After` header), if any.
    """

    retry_after: float | None = None


class JudgeMisconfigured(JudgeError):
    """The judge endpoint refused the request: HTTP 400, 401, 403, 404 or 422.

    A bad API key, a missing permission, an unknown model or an invalid request is a
    misconfiguration, so it is always raised: it can never silently turn judging off.
    """


class JudgeReplyError(JudgeError):
    """The judge answered, but its reply cannot be read as a verdict.

    Attributes:
        reply: The judge's reply text (shortened).
    """

    def __init__(self, message: str, *, model: str, reply: str = "") -> None:
        super().__init__(message, model=model)
        self.reply = reply


class StreamInterrupted(RefinekitError):
    """A streamed reply broke before its end; what ended it is its `__cause__`.

    Raised in place of the SDK's or the transport's error by the stream readers: a dropped
    connection, a chunk that is not JSON, an error event. `@retry_on_low_quality`,
    `@reviewed` and `@guarded` raise it to the caller as any error of the function (it is not
    retried); `@self_correct` corrects the reply as one cut off. Its `reason` (which may quote
    the server's error text) is redacted when it is made, so every text built from it (an
    event's `aborted`, a `Reset.reason`, a correction) is too.

    Attributes:
        reason: Why the stream broke, in a line.
        chunks: The chunks read before it broke.
    """

    def __init__(self, reason: str, chunks: int = 0) -> None:
        reason = redact(reason)
        super().__init__(reason)
        self.reason = reason
        self.chunks = chunks

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.reason,), self.__dict__))


class LocalModelError(RefinekitError):
    """The local model cannot run: the extra is missing, or the server did not come up or died."""


E = TypeVar("E", bound=JudgeError)


def failed_closed(error: E) -> E:
    """A copy of `error` that no outer error policy lets through (`fail_closed` is True).

    The original is left as it is: whoever else holds it (a gathered result, the caller's own
    evaluator) sees it unchanged. The copy keeps its message, attributes, cause and traceback.
    """
    if error.fail_closed:
        return error
    copy = _rebuild(type(error), error.args, {**error.__dict__, "_fail_closed": True})
    copy.__cause__ = error.__cause__
    copy.__suppress_context__ = True  # the original it copies is not a second error
    return copy.with_traceback(error.__traceback__)  # type: ignore[no-any-return]


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    obj = cls.__new__(cls)
    BaseException.__init__(obj, *args)
    obj.__dict__.update(state)
    return obj


# The evaluation workflow (refinekit.eval) and the command line (refinekit.cli).


class DataFileError(RefinekitError, ValueError):
    """A golden or labelled file that cannot be used: missing, unreadable, wrong shape."""


class UsageProblem(RefinekitError, ValueError):
    """An eval or calibrate run that cannot start; nothing was run.

    A target or judge that cannot be loaded or called with the file's columns, a data file
    that cannot be used or lacks a column the run needs, an option out of range, a
    comparison with a run that cannot be compared.
    """


class RunAborted(RefinekitError):
    """The run stopped before its end; the cases finished so far are stored.

    The judge is misconfigured or raised a bug, or the answer function raised a
    misconfiguration: each would fail every case. Running the same thing again resumes the
    run, without paying again for the stored cases.

    Attributes:
        run_id: The stopped run's id in its store (None until the run is stopped).
        stored: The cases the run has stored.
        cases: The cases of its data file.
    """

    def __init__(
        self, message: str, *, run_id: int | None = None, stored: int = 0, cases: int = 0
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.stored = stored
        self.cases = cases

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class CostLimitReached(RunAborted):
    """The run stopped starting cases: another one could take its cost over `max_cost`.

    The cases in flight finished and are stored; the run is stored incomplete. Running the
    same thing again with a higher `max_cost` goes on where it stopped.

    Attributes:
        max_cost: The limit.
        spent: What the run's stored cases cost when it stopped starting cases.
        run_id: As `RunAborted`'s.
        stored: As `RunAborted`'s.
        cases: As `RunAborted`'s.
    """

    def __init__(
        self,
        message: str,
        *,
        max_cost: float,
        spent: float,
        run_id: int | None = None,
        stored: int = 0,
        cases: int = 0,
    ) -> None:
        super().__init__(message, run_id=run_id, stored=stored, cases=cases)
        self.max_cost = max_cost
        self.spent = spent


class RunStoreError(RefinekitError):
    """The run store cannot be used: not a refinekit database, a newer schema, a missing run."""


class DemoConfigError(RefinekitError, ValueError):
    """`refinekit demo`'s options name a real endpoint only in part."""


class ReaderGone(BaseException):
    """Standard output's reader went away, and printing was the command's work: stop.

    A `BaseException`, as `KeyboardInterrupt` is, so that no `except Exception` on its way
    (an event hook's guard, a scenario's error handler) turns it into a message.
    """
