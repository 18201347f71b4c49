"""Every span, attribute and event name refinekit's OpenTelemetry tracing writes, in one place.

The `gen_ai.*` names follow OpenTelemetry's semantic conventions for generative AI, which are
in **development** status (not stable): a later version of the conventions may rename them,
and then this module is the one place to change. `refinekit.*` names are refinekit's own.
See docs/tracing.md for what each span carries.
"""

from __future__ import annotations

__all__ = [
    "ATTEMPT_NUMBER",
    "ATTEMPT_SPAN",
    "ATTEMPTS",
    "COST",
    "DECORATOR",
    "ERROR",
    "ERROR_TYPE",
    "EVALUATE_SPAN_PREFIX",
    "EVALUATION_EXPLANATION",
    "EVALUATION_NAME",
    "EVALUATION_RESULT",
    "EVALUATION_SCORE_LABEL",
    "EVALUATION_SCORE_VALUE",
    "EVALUATOR",
    "EVENT_PREFIX",
    "EXCEPTION",
    "EXCEPTION_MESSAGE",
    "EXCEPTION_STACKTRACE",
    "EXCEPTION_TYPE",
    "FAILURE",
    "TIER",
    "TIER_INDEX",
    "TIER_LEFT",
    "TIER_LEFT_CALLS",
    "TIER_LEFT_COST",
    "TIER_LEFT_INPUT_TOKENS",
    "TIER_LEFT_OUTPUT_TOKENS",
    "FUNCTION",
    "INPUT_TOKENS",
    "JOB_ID",
    "JUDGE_COST",
    "JUDGE_INPUT_TOKENS",
    "JUDGE_OUTPUT_TOKENS",
    "OPERATION_CHAT",
    "OPERATION_NAME",
    "OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "REQUEST_MAX_TOKENS",
    "REQUEST_MODEL",
    "REQUEST_TEMPERATURE",
    "RESPONSE_FINISH_REASONS",
    "RESPONSE_ID",
    "RESPONSE_MODEL",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "STREAM_ABORTED",
    "STREAM_CHUNKS",
    "STREAM_FIRST_CHUNK",
    "STREAM_KEPT",
    "STREAM_RESUMED",
    "STREAM_USAGE_ESTIMATED",
    "TRACER_NAME",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "VERDICT_PASSED",
    "VERDICT_STATUS",
    "WAIT",
]

TRACER_NAME = "refinekit"
"""The instrumentation scope of every span."""

# --- the GenAI semantic conventions (development status) -------------------------------------

OPERATION_NAME = "gen_ai.operation.name"
OPERATION_CHAT = "chat"
"""A judge model's request is a chat completion; its span is named `chat {model}`."""
PROVIDER_NAME = "gen_ai.provider.name"
"""`openai` (any endpoint the `openai` client reaches) or `anthropic`; the conventions
replaced `gen_ai.system` with it."""
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

EVALUATION_RESULT = "gen_ai.evaluation.result"
"""The event for one verdict, on the span of the attempt it judged."""
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
"""`pass` or `fail` for a judged verdict; `unjudged` or `inconclusive` otherwise."""
EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

# --- general semantic conventions (stable) ---------------------------------------------------

ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
EXCEPTION = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"

# --- refinekit's own --------------------------------------------------------------------------

ATTEMPT_SPAN = "refinekit.attempt"
"""One attempt: a call of the function (a retry's attempt, a `@self_correct` call or
correction, `@reviewed`'s first draft) or a revision (`@reviewed`'s later drafts)."""
EVALUATE_SPAN_PREFIX = "refinekit.evaluate"
"""An evaluator judging an answer: `refinekit.evaluate {evaluator}`."""
EVENT_PREFIX = "refinekit."
"""Span events for the event bus's kinds: `refinekit.retry`, `refinekit.correction`, ..."""

DECORATOR = "refinekit.decorator"
FUNCTION = "refinekit.function"
JOB_ID = "refinekit.job.id"
ATTEMPTS = "refinekit.attempts"
ATTEMPT_NUMBER = "refinekit.attempt.number"
EVALUATOR = "refinekit.evaluator"
VERDICT_PASSED = "refinekit.verdict.passed"
VERDICT_STATUS = "refinekit.verdict.status"
INPUT_TOKENS = "refinekit.usage.input_tokens"
"""The answering model's tokens in the call's job (the judges' apart), on a call's span."""
OUTPUT_TOKENS = "refinekit.usage.output_tokens"
JUDGE_INPUT_TOKENS = "refinekit.judge.usage.input_tokens"
JUDGE_OUTPUT_TOKENS = "refinekit.judge.usage.output_tokens"
COST = "refinekit.cost"
"""What the answering model's calls in the call's job cost, with the budget's prices."""
JUDGE_COST = "refinekit.judge.cost"
WAIT = "refinekit.wait"
ERROR = "refinekit.error"
FAILURE = "refinekit.failure"
TIER_INDEX = "refinekit.tier.index"
"""On an `escalation` span event: the place of the tier moved to (2 for the second)."""
TIER_LEFT = "refinekit.tier.left"
"""On an `escalation` span event: the tier left; the `refinekit.tier.left.*` attributes say what
its calls took (the answering tier's is the call's total less the tiers left)."""
TIER_LEFT_CALLS = "refinekit.tier.left.calls"
TIER_LEFT_INPUT_TOKENS = "refinekit.tier.left.input_tokens"
TIER_LEFT_OUTPUT_TOKENS = "refinekit.tier.left.output_tokens"
TIER_LEFT_COST = "refinekit.tier.left.cost"
TIER = "refinekit.tier"
"""The escalation tier (`escalate=`): on an attempt's span, the tier it was made at; on the
call's span, the last tier tried (the one that answered, when the call returned)."""
STREAM_CHUNKS = "refinekit.stream.chunks"
"""The chunks a streamed reply yielded before it ended or was closed (on its attempt's span)."""
STREAM_FIRST_CHUNK = "refinekit.stream.time_to_first_chunk"
"""Seconds from opening the stream to its first chunk."""
STREAM_ABORTED = "refinekit.stream.aborted"
"""Why the stream was closed before its end (a failed field, a rule check, `budget`), or how it
broke (`interrupted: ...`); absent when it was read to its end."""
STREAM_USAGE_ESTIMATED = "refinekit.stream.usage_estimated"
"""Whether the stream's usage was estimated (characters / 4): the server reported none."""
STREAM_RESUMED = "refinekit.stream.resumed"
"""Whether the stream's request resumed a failed reply from its validated fields."""
STREAM_KEPT = "refinekit.stream.kept_fields"
"""How many validated fields a resumed request kept (only on a resumed stream)."""
