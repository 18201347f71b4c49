"""`Event` and `EventKind`: what one event of a refinekit call says.

The event stream itself (subscriptions, `emit`, the instruments) is
`refinekit._engine.events`, which re-exports both; the `refinekit` logger's lines for each
kind are `refinekit._engine.eventlog`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .._core.redact import redact_fields
from .._core.types import Cost, TierReport, Usage, Verdict

__all__ = ["Event", "EventKind"]

_TEXT_FIELDS = ("feedback", "error", "detail", "aborted")


EventKind = Literal[
    "attempt",
    "verdict",
    "skipped",
    "unjudged",
    "retry",
    "correction",
    "exhausted",
    "blocked",
    "review",
    "revision",
    "rejected",
    "judge_cache",
    "budget",
    "stream",
    "reset",
    "grounding",
    "escalation",
]
"""What happened:

- `attempt`: the wrapped function returned (or raised `LowQualityAnswer`);
- `verdict`: an evaluator judged the answer;
- `skipped`: `skip=` said not to judge the answer, which is returned as it is;
- `unjudged`: judging failed and the error policy let the answer through unjudged;
- `retry`: another attempt follows, after `wait` seconds, with `feedback`;
- `correction`: `@self_correct` appended a correction turn (`error` says why);
- `exhausted`: the budget ran out; the error named in `error` is raised (or the best
  attempt returned);
- `blocked`: `@guarded`'s screen blocked an input or an output, and the refusal was returned
  in its place (`error` says which and why, `verdict` is the screen's, and `detail` holds the
  blocked text, which is logged at DEBUG only);
- `review`: `@reviewed` judged a draft (`attempt`: 1 for the original, 2 for the first
  revision); `verdict` is the verdict (`unjudged` when the judge failed or timed out, `error`
  then says why), and its `metadata["review"]` holds the mode and the draft number;
- `revision`: `@reviewed` asked the reviser for revision number `attempt`, with `feedback`;
- `rejected`: `@reviewed` raises `AnswerRejected`; `error` starts with its reason;
- `judge_cache`: a judge model with a cache looked a request up (`cache` is "hit" or "miss",
  `function` the judge's kind, `decorator` is "judge", `detail` the key, `attempt` and
  `max_attempts` 0; `job_id` and the usage are the job's the judge runs in, or "" and none
  outside a job). Like `attempt` and `verdict`, it is logged at DEBUG only.
- `budget`: the job's `refinekit.Budget` stopped the call: `BudgetExceeded` is raised, and
  `error` is its message (once per stop, from the innermost decorated call it left).
- `stream`: a stream the function returned ended (`attempt` is the attempt it was): `chunks`
  read, `first_chunk` (seconds to the first one), `aborted` (why it was closed early, or how
  it broke; None when it was read to its end), `estimated` (its usage is an estimate). Logged
  at INFO when it was aborted or broke, else at DEBUG only (and only built for a hook).
- `reset`: the consumer of `fn.stream(...)` was told that what it got is void (a
  `refinekit.Reset`); `error` says why, `attempt` is the voided attempt.
- `grounding`: `response_format(..., source=...)` left a grounded field unconstrained
  (`decorator` is "response_format", `function` the schema's name, `error` names the field
  and why: no source text, no candidate, over a cap); the validator checks it afterwards.
  `job_id` is the job it was called in, or "" outside one.
- `escalation`: an `escalate=` ladder moved up a tier: `tier` names the tier now tried,
  `attempt` is its place (2 for the second tier) and `max_attempts` the ladder's length,
  `failure` says why the tier below was left (`"exhausted"`, `"refused"`, `"error"`) and
  `error` what its last failure was.
"""


@dataclass(frozen=True)
class Event:
    """One thing that happened inside a refinekit call.

    Attributes:
        kind: What happened (see `EventKind`).
        decorator: `retry_on_low_quality`, `self_correct`, `guarded` or `reviewed` (`judge`
            for `judge_cache`, `response_format` for `grounding`).
        function: The qualified name of the decorated function.
        job_id: The id of the job the call belongs to.
        attempt: The attempt number (for `correction`: the number of the correction).
        max_attempts: The most attempts (for `correction`: the job's correction budget).
        is_last: Whether no further attempt (or correction) is possible after this one.
        usage: The job's usage of the answering model so far.
        judge_usage: The job's usage of model judges so far.
        cost: What the job's model calls cost so far (answer and judge apart), when its
            budget has prices (`refinekit.Budget(prices=...)`); None otherwise.
        verdict: The verdict, on `verdict` and on `retry`/`exhausted` after a rejection.
        feedback: The feedback passed on (retry) or the error explained (correction).
        wait: Seconds waited before the next attempt (`retry`; reported even in testing mode).
        duration: Seconds the attempt took (`attempt`).
        error: A short summary of what failed (`correction`, `exhausted`, `blocked`).
        detail: Long text for DEBUG logs only, such as the full correction message or the
            text `@guarded` blocked.
        repairs: The lossless repairs `@self_correct` made to the reply (`attempt`), e.g.
            `("code_fence", "trailing_comma")`; empty when the reply was strict JSON.
        failure: What was wrong with the reply (`correction`, `exhausted` of `@self_correct`):
            a `refinekit.FailureKind`.
        cache: "hit" or "miss" (`judge_cache`): whether the judge cache held the reply.
        chunks: The chunks a stream yielded before it ended or was closed (`stream`).
        first_chunk: Seconds from opening the stream to its first chunk (`stream`; None when
            none came).
        aborted: Why the stream was closed before its end (`"budget"`, a failed field, a rule
            check's rejection, `"closed"`: by its consumer, or its task was cancelled), or how
            it broke (`"interrupted: ..."`); None when it was read to its end (`stream`).
        estimated: Whether the stream's usage in `usage` is an estimate (characters / 4): the
            server reported none before the stream ended or was closed (`stream`).
        resumed: Whether the stream's request resumed a reply whose field failed from its
            validated fields (`stream`; `correction` of `@self_correct(early_abort="resume")`).
        kept: How many validated fields that request kept (`stream`, `correction`).
        tier: The tier an `escalate=` ladder moved to (`escalation`).
        left: What the tier it left did: its calls, usage and cost (`escalation`).
    """

    kind: EventKind
    decorator: str
    function: str
    job_id: str
    attempt: int
    max_attempts: int
    is_last: bool
    usage: Usage
    judge_usage: Usage = field(default_factory=Usage)
    cost: Cost | None = None
    verdict: Verdict | None = None
    feedback: str | None = None
    wait: float | None = None
    duration: float | None = None
    error: str | None = None
    detail: str | None = None
    repairs: tuple[str, ...] = ()
    failure: str | None = None
    cache: Literal["hit", "miss"] | None = None
    chunks: int | None = None
    first_chunk: float | None = None
    aborted: str | None = None
    estimated: bool = False
    resumed: bool = False
    kept: int | None = None
    tier: str | None = None
    left: TierReport | None = None

    def __post_init__(self) -> None:
        # Every text an event carries is redacted here, whoever made it: hooks, logs and
        # traces only ever see it so.
        redact_fields(self, _TEXT_FIELDS)
