"""`@reviewed`: review a final text answer and revise the text, never re-running the work."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, ParamSpec, Protocol, TypeAlias, overload

from .._core.errors import AnswerRejected, JudgeError, ReviserFailed, TimedOut
from .._core.numbers import is_number, is_real, shown
from .._core.stream_items import ToolCallChunk
from .._core.types import Attempt, AttemptInfo, EvaluationRequest, Verdict
from .._engine import budget as _budget
from .._engine.attempt import attempt_step
from .._engine.budget import without_attempts
from .._engine.decorated import AsyncStreamingFunction, StreamingFunction
from .._engine.evaluators import Adapted, EvaluatorLike, as_evaluator
from .._engine.events import Event, EventKind, emit, make_event, wants_debug_events
from .._engine.flow import Call, Evaluate, Flow, Timed
from .._engine.job import Job, current_attempt
from .._engine.options import Args, Fn, Kwargs, Options, signature_of
from .._engine.outcome import Record
from .._engine.policy import OnInconclusive, check_budget, check_on_inconclusive, judge_failure
from .._engine.prices import Budget
from .._engine.request import QuestionSelector, RequestMaker
from .._engine.stream_commands import (
    StreamLike,
    SyncStreamLike,
    arguments_chars,
    is_streamed,
    listening,
)
from .._engine.text_answers import TextRead, publish, read_text, replay
from .._engine.wrapper import wrap
from .._providers.replies import is_reply, message_of, message_text, tool_call_names
from .revisers import (
    AnyReviser,
    CustomReviser,
    Revise,
    Revised,
    Reviser,
    RevisionRequest,
    model_reviser,
)

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

__all__ = ["MAX_REVISIONS_LIMIT", "RevisionRequest", "reviewed"]

P = ParamSpec("P")

MAX_REVISIONS_LIMIT = 10
"""The largest `max_revisions` accepted."""

Mode = Literal["off", "shadow", "enforce"]

Answer: TypeAlias = "str | ChatCompletion"
"""What a function decorated with `@reviewed` returns: the final answer's text (or the reply)."""


class Reviewing(Protocol):
    """The decorator `reviewed(...)` returns; the decorated call returns the answer's text.

    `fn.stream(...)` yields the answer's pieces (`str`; a tool-call round's parts as
    `refinekit.ToolCallChunk`s, after its text once reviewed), see docs/streaming.md.
    """

    @overload
    def __call__(
        self, fn: Callable[P, Awaitable[Answer | StreamLike]], /
    ) -> AsyncStreamingFunction[P, str, str | ToolCallChunk]: ...

    @overload
    def __call__(
        self, fn: Callable[P, AsyncIterator[Any]], /
    ) -> AsyncStreamingFunction[P, str, str | ToolCallChunk]: ...

    @overload
    def __call__(
        self, fn: Callable[P, Answer | SyncStreamLike], /
    ) -> StreamingFunction[P, str, str | ToolCallChunk]: ...


# --- the review flow -----------------------------------------------------------------------------


def answer_of(function: str, value: Any) -> str:
    """The final answer's text: a `str` as is, else a model reply's message text.

    A model reply is an OpenAI `ChatCompletion` or LiteLLM `ModelResponse`, an Anthropic
    `Message` or a LangChain `AIMessage` (or their dict forms).
    """
    if isinstance(value, str):
        return value
    if is_reply(value):
        message = message_of(value)
        if message is not None and not tool_call_names(message):
            return message_text(message)
        raise TypeError(
            f"{function} returned a reply that "
            + ("calls tools" if message is not None else "has no choices")
            + "; a function decorated with @reviewed returns the final text answer"
        )
    raise TypeError(
        f"a function decorated with @reviewed returns the final answer's text (a str or a "
        f"model reply: OpenAI, LiteLLM, Anthropic, LangChain); {function} returned "
        f"{type(value).__name__}"
    )


class _ReviewConfig:
    """One function's configuration: which of its arguments is the question, and its options."""

    def __init__(self, fn: Callable[..., Any], options: _ReviewOptions) -> None:
        # The question and evidence are found exactly as `@retry_on_low_quality` finds them.
        self.requests = RequestMaker(fn, question=options.question)
        self.function = self.requests.function
        self.options = options


@dataclass(frozen=True)
class _ReviewOptions(Options):
    """`reviewed`'s options: its keyword arguments (documented there), checked once."""

    decorator: ClassVar[str] = "reviewed"
    config: ClassVar[type[_ReviewConfig]] = _ReviewConfig
    _: KW_ONLY
    judge: EvaluatorLike
    mode: Mode = "enforce"
    max_revisions: int = 1
    reviser: Reviser | None = None
    judge_timeout: float = 2.0
    budget: float | Budget = 10.0
    client: openai.OpenAI | openai.AsyncOpenAI | None = None
    model: str | None = None
    question: QuestionSelector | None = None
    on_inconclusive: OnInconclusive = "fail"
    # What the checks make of them:
    evaluator: Adapted = field(init=False, repr=False, compare=False)
    chosen: AnyReviser | None = field(init=False, repr=False, compare=False)
    timeout_s: float = field(init=False, repr=False, compare=False)
    budget_s: float = field(init=False, repr=False, compare=False)
    job_budget: Budget | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        mode, budget = self.mode, self.budget
        if mode not in ("off", "shadow", "enforce"):
            raise ValueError(f"mode must be 'off', 'shadow' or 'enforce', got {mode!r}")
        check_budget("max_revisions", self.max_revisions, MAX_REVISIONS_LIMIT)
        timeout_s = _seconds("judge_timeout", self.judge_timeout)
        job_budget = budget if isinstance(budget, Budget) else None
        if job_budget is None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float))
        ):
            raise TypeError(
                "budget must be a number of seconds or a refinekit.Budget, got "
                f"{type(budget).__name__}"
            )
        budget_s = 10.0 if job_budget is not None else _seconds("budget", budget)
        check_on_inconclusive(self.on_inconclusive)
        evaluator = as_evaluator(self.judge)
        question = self.question
        if question is not None and not callable(question) and not isinstance(question, str):
            raise TypeError(f"question= must be a parameter name or callable, got {question!r}")
        chosen: AnyReviser | None = None
        if self.reviser is not None:
            if not callable(self.reviser):
                raise TypeError(f"reviser= must be callable, got {type(self.reviser).__name__}")
            chosen = CustomReviser(self.reviser)
        elif self.client is not None or self.model is not None:
            chosen = model_reviser(self.client, self.model)
        elif mode == "enforce" and self.max_revisions > 0:
            raise ValueError(
                "enforce mode with max_revisions > 0 needs a reviser: pass reviser=, or client= "
                "(an openai.OpenAI or AsyncOpenAI) and model= for the default reviser"
            )
        self.keep(
            evaluator=evaluator,
            chosen=chosen,
            timeout_s=timeout_s,
            budget_s=budget_s,
            job_budget=job_budget,
        )

    def decorate(self, fn: Any) -> Any:
        return wrap(fn, _OFF_FLOW if self.mode == "off" else _REVIEW_FLOW, self)


def _event(
    cfg: _ReviewConfig, job: Job, kind: EventKind, number: int, maximum: int, **fields: Any
) -> Event:
    return make_event(kind, "reviewed", cfg.function, job, number, maximum, **fields)


def _tagged(verdict: Verdict, mode: Mode, number: int) -> Verdict:
    """The verdict, with what review it belongs to in `metadata["review"]`."""
    metadata = {**verdict.metadata, "review": {"mode": mode, "draft": number}}
    return verdict.model_copy(update={"metadata": metadata})


def _judge(
    cfg: _ReviewConfig, request: EvaluationRequest, deadline: float
) -> Flow[tuple[Verdict | None, str | None]]:
    """Judge one draft within `min(judge_timeout, time left)`: (verdict, failure reason)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None, "budget"
    timeout = cfg.options.timeout_s
    limit = min(timeout, left)
    try:
        verdict: Verdict = yield Timed(Evaluate(cfg.options.evaluator, request), limit)
    except TimedOut:
        reason = "judge_timeout" if limit == timeout else "budget"
        return Verdict.unjudged(f"{reason}: no verdict within {limit:.3g} s"), reason
    except JudgeError as e:
        # An unjudged draft is rejected (reason "judge_error") in enforce mode; a misconfigured
        # judge, and a failure a judge's own "fail_closed" policy raised, propagate.
        return judge_failure(e, "fail_open"), "judge_error"
    return verdict, None


_REASONS = {
    "rejected": "the last draft still failed review",
    "budget": "the review budget ran out",
    "judge_timeout": "the judge did not answer within judge_timeout",
    "judge_error": "the judge could not judge the draft",
    "inconclusive": "the evidence could not support a verdict",
    "revision_used_tools": "the reviser's reply called tools",
    "reviser_error": "the reviser's model call failed",
}


def _rejected(
    cfg: _ReviewConfig,
    job: Job,
    reason: str,
    verdicts: list[Verdict],
    drafts: list[str],
    detail: str = "",
) -> AnswerRejected:
    summary = _REASONS[reason] + (f": {detail}" if detail else "")
    n = len(drafts)
    error = AnswerRejected(
        f"{cfg.function}: answer rejected ({reason}) after {n} draft{'' if n == 1 else 's'}: "
        f"{summary}",
        reason=reason,
        verdicts=verdicts,
        drafts=drafts,
        usage=job.usage,
        judge_usage=job.judge_usage,
        job_id=job.id,
    )
    last = verdicts[-1] if verdicts else None
    most = cfg.options.max_revisions + 1
    emit(_event(cfg, job, "rejected", n, most, verdict=last, error=f"{reason}: {summary}"))
    return error


def _review_flow(
    cfg: _ReviewConfig, fn: Fn, args: Args, kwargs: Kwargs, job: Job, record: Record | None
) -> Flow[str]:
    streamed: list[TextRead] = []  # the function's stream, when it returned one
    text = yield from _review_steps(cfg, fn, args, kwargs, job, record, streamed)
    # fn.stream(...): the approved text (shadow: the stream went through as it came)
    yield from publish(text, streamed[0] if streamed else None)
    return text


def _tool_round(cfg: _ReviewConfig, job: Job, read: TextRead) -> Flow[str]:
    """A streamed tool-call round without text: its tool-call parts passed on, not reviewed.

    Whitespace the round streamed beside its tool calls is not passed on. (A round with text
    is reviewed as a final answer is: its text is the draft, see `_review_steps`.)
    """
    if not read.shown:
        yield from replay([item for item in read.items if isinstance(item, ToolCallChunk)])
        read.shown = True
    emit(_event(cfg, job, "skipped", 1, 1))
    return read.text


def _review_steps(
    cfg: _ReviewConfig,
    fn: Fn,
    args: Args,
    kwargs: Kwargs,
    job: Job,
    record: Record | None,
    streamed: list[TextRead],
) -> Flow[str]:
    opts = cfg.options
    drafts_max = 1 if opts.mode == "shadow" else opts.max_revisions + 1  # shadow never revises
    # The one call of the function: its tool calls and recorded context are the evidence.
    # One model call reserved until its reply is counted (none left: stop).
    outer = current_attempt()  # inside @retry_on_low_quality: record_context goes to both
    info = outer if outer is not None else AttemptInfo(1, 1)
    call = Call(fn, args, kwargs)
    made = attempt_step(job, cfg.function, call, info=info, enter=outer is None, tools=True)
    with (yield from made) as step:
        started, value, recorder, mark = step.started, step.value, step.recorder, step.noted
        assert recorder is not None
        if is_streamed(value):  # shadow passes it through as it comes; enforce buffers it
            read = yield from read_text(
                value,
                job,
                emit=opts.mode == "shadow",
                decorator="reviewed",
                function=cfg.function,
                number=1,
                maximum=drafts_max,
                prompt_chars=arguments_chars(args, kwargs),
            )
            streamed.append(read)
    tool_round = bool(streamed) and streamed[0].tool_round
    if tool_round:
        if not listening():
            raise TypeError(
                f"{cfg.function} streamed a reply that calls tools; a function decorated with "
                "@reviewed returns the final text answer (fn.stream(...) passes a tool-call "
                "round on, its text reviewed first)"
            )
        if not streamed[0].text.strip():  # nothing to review: the tool-call parts go on
            return (yield from _tool_round(cfg, job, streamed[0]))
        # Its text is reviewed as a final answer's is (content checks cover it): in enforce
        # mode none of it is passed on before it is approved; the tool-call parts follow it.
    draft = streamed[0].text if streamed else answer_of(cfg.function, value)
    if wants_debug_events():
        emit(_event(cfg, job, "attempt", 1, drafts_max, duration=time.perf_counter() - started))
    if recorder.direct is not None:  # a return_direct tool's output: handed back, not judged
        if wants_debug_events():
            emit(_event(cfg, job, "skipped", 1, drafts_max))
        return draft
    arguments = cfg.requests.bind(args, kwargs) or {}
    evidence = cfg.requests.request(arguments, draft, info._context[mark:], 1, recorder.calls)
    base_metadata: dict[str, Any] = {"function": cfg.function}
    if tool_round:  # the text beside tool calls: a judge may tell it from a final answer
        base_metadata["tool_round"] = True
    request = evidence.model_copy(update={"metadata": {**base_metadata, "draft": 1}})

    verdicts: list[Verdict] = []
    drafts: list[str] = [draft]
    current = draft
    deadline = time.monotonic() + opts.budget_s  # covers the review and every revision
    number = 1
    revised_with: str | None = None  # the feedback the current draft was revised from
    draft_started = started
    while True:
        judged, failure = yield from _judge(cfg, request, deadline)
        if judged is None:
            raise _rejected(cfg, job, "budget", verdicts, drafts)
        verdict = _tagged(judged, opts.mode, number)
        verdicts.append(verdict)
        if record is not None:
            duration = time.perf_counter() - draft_started
            record.attempts.append(Attempt(number, current, verdict, duration, revised_with))
            record.verdicts.append(verdict)
        emit(
            _event(
                cfg,
                job,
                "review",
                number,
                drafts_max,
                verdict=verdict,
                feedback=verdict.feedback or None,
                error=failure,
            )
        )
        if opts.mode == "shadow":
            return draft  # recorded; the original goes out unchanged, whatever the verdict
        if failure is not None:
            raise _rejected(cfg, job, failure, verdicts, drafts, verdict.reason or "")
        if verdict.passed:
            return current
        if verdict.status == "inconclusive":
            if opts.on_inconclusive == "accept":
                return current
            raise _rejected(cfg, job, "inconclusive", verdicts, drafts, verdict.reason or "")
        if verdict.status == "unjudged":  # the judge's own fail_open policy said so
            raise _rejected(cfg, job, "judge_error", verdicts, drafts, verdict.reason or "")
        feedback = verdict.feedback or f"the answer was rejected by {opts.evaluator.name}"
        if number > opts.max_revisions:
            raise _rejected(cfg, job, "rejected", verdicts, drafts, feedback)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _rejected(cfg, job, "budget", verdicts, drafts)
        assert opts.chosen is not None  # checked when decorating
        emit(
            _event(
                cfg,
                job,
                "revision",
                number,
                opts.max_revisions,
                verdict=verdict,
                feedback=feedback,
            )
        )
        revision = RevisionRequest(
            draft=current,
            verdict=verdict,
            feedback=feedback,
            evidence=request,
            revision=number,
            max_revisions=opts.max_revisions,
        )
        # The revision must fit in the job's budget: its prompt (the draft, the feedback and
        # the question: characters / 4) and one call, reserved by `Revise` before it is
        # asked; its reply is counted there.
        ask = Revise(
            opts.chosen,
            revision,
            left,
            planned=f"revision {number} of {cfg.function}",
            tokens=_budget.estimate_tokens(
                len(current) + len(feedback) + len(request.question or "")
            ),
        )
        draft_started = time.perf_counter()
        try:
            revised: Revised = yield Timed(ask, left)
        except TimedOut:
            raise _rejected(cfg, job, "budget", verdicts, drafts) from None
        except ReviserFailed as e:
            raise _rejected(cfg, job, e.reason, verdicts, drafts, str(e)) from e.__cause__
        if revised.tools:
            raise _rejected(
                cfg,
                job,
                "revision_used_tools",
                verdicts,
                drafts,
                f"revision {number} called {', '.join(revised.tools)}",
            )
        current = revised.text
        drafts.append(current)
        revised_with = feedback
        number += 1
        request = evidence.model_copy(
            update={"answer": current, "metadata": {**base_metadata, "draft": number}}
        )


def _off_flow(
    cfg: _ReviewConfig, fn: Fn, args: Args, kwargs: Kwargs, job: Job, record: Record | None
) -> Flow[str]:
    """Mode "off": the function's answer as it is; nothing judged, recorded or counted.

    A stream goes through to `fn.stream(...)` as it comes (a tool-call round too).
    """
    value = yield Call(fn, args, kwargs)
    if not is_streamed(value):
        text = answer_of(cfg.function, value)
        yield from publish(text, None)
        return text
    read = yield from read_text(
        value,
        job,
        emit=True,
        decorator="reviewed",
        function=cfg.function,
        number=1,
        maximum=1,
        count=False,
    )
    if read.tool_round and not listening():
        raise TypeError(
            f"{cfg.function} streamed a reply that calls tools; a function decorated with "
            "@reviewed returns the final text answer"
        )
    return read.text


_REVIEW_FLOW = without_attempts(_review_flow, "reviewed")
_OFF_FLOW = without_attempts(_off_flow, "reviewed")


# --- the decorator -------------------------------------------------------------------------------


def _seconds(name: str, value: object) -> float:
    if not is_number(value):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not is_real(value) or value <= 0:  # also rejects NaN and 10**400
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {shown(value)}")
    return float(value)


@signature_of(_ReviewOptions)
def reviewed(**options: Any) -> Reviewing:  # noqa: D417
    """Review the final text answer of the decorated function; revise the text, never re-run.

    The function runs exactly once. Its answer (a `str`, or a `ChatCompletion`'s text) is
    judged with the evidence recorded while it ran: the question, the context recorded with
    `refinekit.record_context` and the tool calls recorded by `@refinekit.tool`. A revision
    is new text from the reviser; the function and its tools are never called again. Works on
    `def` and `async def` functions alike, and on methods (`self`/`cls` is bound, never the
    question); the call returns a `str`.

    - `"off"`: the function's answer is returned as it is; nothing is judged or recorded.
    - `"shadow"`: the answer is judged and the verdict recorded (a `review` event, an INFO log
      line, `verdict.metadata["review"]`), and the original is returned unchanged, whatever
      the verdict, even when the judge fails or times out.
    - `"enforce"`: a passing draft is returned; a failing one is sent to the reviser (up to
      `max_revisions` times) and only a revision that passes is returned. Otherwise
      `AnswerRejected` is raised: the rejected draft is never returned. No text reaches the
      caller or `fn.stream(...)` before it is approved: the text of a streamed tool-call
      round is reviewed too (`metadata["tool_round"]`), its tool-call parts passed on after it.

    Args:
        judge: What reviews the answer: a model judge, a rule check, `all_of(...)`, or any
            evaluator or function `(EvaluationRequest) -> Verdict | bool`, sync or async.
        mode: `"off"`, `"shadow"` or `"enforce"`.
        max_revisions: The most revisions per call, 0 to 10.
        reviser: A function `(RevisionRequest) -> str`, sync or async, that rewrites the
            draft's text and does nothing else. None: the default reviser, one chat
            completion on `client`/`model` with no tools offered; a reply that calls tools
            anyway ends the review (`AnswerRejected`, reason `"revision_used_tools"`).
        judge_timeout: Seconds each judge call may take (a judge that takes longer counts as a
            judge failure, reason `"judge_timeout"`).
        budget: Seconds for the review and all revisions together, from the first judge call;
            each judge and reviser call gets at most what is left (reason `"budget"`). Or a
            `refinekit.Budget` (tokens, cost, model calls of the job, judge and reviser calls
            included; the time budget then stays 10 s): the call raises
            `refinekit.BudgetExceeded` as soon as a call has taken the job over it, or before
            a judge or reviser call it cannot cover. See docs/budgets.md.
        client: The answering model's client (`openai.OpenAI` or `openai.AsyncOpenAI`), for
            the default reviser.
        model: The answering model's name, for the default reviser.
        question: Which argument is the question: a parameter name, or a callable of the bound
            arguments (a dict). Default: the parameter `question`, else the first `str` argument.
        on_inconclusive: What an `inconclusive` verdict does in enforce mode: `"fail"` (the
            default) raises `AnswerRejected` with reason `"inconclusive"` without asking for a
            revision (the evidence, not the text, is what is missing); `"accept"` publishes the
            draft.

    Returns:
        A decorator keeping the function's parameters; the call returns the answer's text.
        The decorated function has `.outcome(...)` and `.retry_with(**changes)`.

    Raises:
        ValueError: An unknown `mode` or `on_inconclusive`, `max_revisions` not an int from 0
            to 10, a `judge_timeout` or `budget` that is not positive, `question` naming no
            parameter, or enforce mode with revisions, no `reviser` and no `client` and
            `model` (all raised when decorating, not when calling).
        TypeError: `judge`, `reviser`, `client` or `question` cannot be used (also when
            decorating).
    """
    return _ReviewOptions.of(options).decorate
