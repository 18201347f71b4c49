"""The judge model's calls, as flow commands: one completion, or a reply parsed by instructor.

Each call runs sync or async (the judge model's client for that side), is bounded by the
time limit around it, redacts what the libraries log, maps a failure to refinekit's
`JudgeError` tree and counts the reply's tokens in the job's `judge_usage` (under the model
the reply names, for pricing). Each request reserves its share of the job's budget before
it is sent and holds it until its reply is counted (`refinekit._engine.reserve.judge_call`; a
judge's concurrent requests are reserved together by the judge, `judge_calls`, and each
command gets its `ticket`): a request the budget cannot cover is not sent. A judge model
with an `anthropic` client sends Messages API requests and gets Anthropic `Message`s back;
the reply reader (`refinekit._providers.replies`) reads both.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .._core.errors import BudgetExceeded, JudgeError, JudgeReplyError
from .._core.redact import redacted_logs
from .._core.types import Usage
from .._engine.budget import request_tokens
from .._engine.job import current_job
from .._engine.ledger import add_judge_usage
from .._engine.reserve import Reservation, ensure, judge_call
from .._providers.anthropic_client import api_error as anthropic_api_error
from .._providers.anthropic_client import bounded as anthropic_bounded
from .._providers.openai_client import api_error, bounded
from .._providers.replies import get, is_completion, message_of, message_text, model_of, usage_of
from ._client import JudgeModel, secrets_of

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["REPLY_CHARS", "Complete", "Structured", "judge_error", "reply_text_of"]

REPLY_CHARS = 200
"""How much of a judge's reply an error or a verdict quotes."""


def judge_error(judge: JudgeModel, exc: BaseException) -> JudgeError | None:
    """The refinekit error for a failed judge request, or None when `exc` is not one.

    Its message never holds a credential (see `refinekit._providers.openai_client.api_error`).
    """
    mapping = anthropic_api_error if judge.provider == "anthropic" else api_error
    return mapping(
        exc,
        model=judge.model,
        where=f"judge model {judge.model!r} at {judge.where}",
        secrets=secrets_of(judge),
    )


def reply_text_of(judge: JudgeModel, completion: ChatCompletion | Any) -> str:
    """The text of a judge's reply: a chat completion's, or an Anthropic `Message`'s.

    A completion with no choice is a `JudgeReplyError`.
    """
    if is_completion(completion) and not get(completion, "choices"):
        raise JudgeReplyError(f"judge model {judge.model!r} returned no choices", model=judge.model)
    return message_text(message_of(completion))


def _record(completion: Any, reservation: Reservation | None = None) -> None:
    """Count a judge's reply in the current job's `judge_usage` (one call, its tokens).

    It settles `reservation`, the share the request held of the budget.
    """
    job = current_job()
    if job is not None:
        usage = usage_of(completion) or Usage(model_calls=1)
        add_judge_usage(job, usage, model_of(completion), reservation)


class Complete:
    """A flow command: one chat completion from the judge model; returns the `ChatCompletion`.

    `ticket`: the share of the budget the judge reserved for it with its other concurrent
    requests (`refinekit._engine.reserve.judge_calls`); without one it reserves its own when sent.
    """

    __slots__ = ("judge", "kwargs", "ticket")
    role = "model_request"  # see `refinekit._engine.flow.Command`

    def __init__(
        self, judge: JudgeModel, kwargs: dict[str, Any], ticket: Reservation | None = None
    ) -> None:
        self.judge = judge
        self.kwargs = kwargs
        self.ticket = ticket

    def run_sync(self) -> ChatCompletion:
        with judge_call(self.judge.model, self.kwargs, self.ticket) as held:  # it must fit
            try:
                with redacted_logs(secrets_of(self.judge)):
                    if self.judge.provider == "anthropic":
                        client = anthropic_bounded(self.judge.sync_client())
                        completion: ChatCompletion = client.messages.create(**self.kwargs)
                    else:
                        completion = bounded(self.judge.sync_client()).chat.completions.create(
                            **self.kwargs
                        )
            except Exception as exc:
                raise (judge_error(self.judge, exc) or exc) from None
            _record(completion, held)
            return completion

    async def run_async(self) -> ChatCompletion:
        with judge_call(self.judge.model, self.kwargs, self.ticket) as held:  # it must fit
            try:
                with redacted_logs(secrets_of(self.judge)):
                    if self.judge.provider == "anthropic":
                        client = anthropic_bounded(self.judge.async_client())
                        completion: ChatCompletion = await client.messages.create(**self.kwargs)
                    else:
                        completion = await bounded(
                            self.judge.async_client()
                        ).chat.completions.create(**self.kwargs)
            except Exception as exc:
                raise (judge_error(self.judge, exc) or exc) from None
            _record(completion, held)
            return completion


class Structured:
    """A flow command: a reply parsed into `response_model` with instructor (its retries)."""

    __slots__ = ("judge", "kwargs", "max_retries", "mode", "response_model")
    role = "model_request"  # see `refinekit._engine.flow.Command`

    def __init__(
        self,
        judge: JudgeModel,
        response_model: type[BaseModel],
        kwargs: dict[str, Any],
        mode: str,
        max_retries: int,
    ) -> None:
        self.judge = judge
        self.response_model = response_model
        self.kwargs = kwargs
        self.mode = mode
        self.max_retries = max_retries

    def _instructor(self, base: Any, held: Reservation, *, is_async: bool) -> Any:
        import instructor

        client = self._reserving(base, self._bounded(base), held, is_async=is_async)
        if self.judge.provider == "anthropic":
            patched = instructor.from_anthropic(client, mode=_anthropic_mode(self.mode))
        else:
            patched = instructor.from_openai(client, mode=instructor.Mode[self.mode])
        # Every reply that arrives is a judge call, including those instructor retries after.
        patched.on("completion:response", functools.partial(_record, reservation=held))
        return patched

    def _reserving(self, base: Any, client: Any, held: Reservation, *, is_async: bool) -> Any:
        """`client` whose requests each fit the budget: instructor's retries reserve too.

        Before each request instructor sends (its prompt as sent, the schema instruction in
        it; a retry after a reply that did not validate), `held` must hold one call and that
        prompt, or get what it lacks (`Reservation.ensure`), else the request is not sent and
        the judge raises `BudgetExceeded`. Without a budget: `client` itself.
        """
        if held.job is None:
            return client
        if client is base:  # not a copy made for a time limit: make one, ours to change
            client = client.with_options()
        anthropic = self.judge.provider == "anthropic"
        resource = client.messages if anthropic else client.chat.completions
        create = resource.create
        planned = f"judge call to model {self.judge.model!r}"

        def before(kwargs: dict[str, Any]) -> None:
            ensure(held, planned, self.judge.model, request_tokens(kwargs))

        if is_async:

            async def acreate(**kwargs: Any) -> Any:
                before(kwargs)
                return await create(**kwargs)

            setattr(resource, "create", acreate)  # noqa: B010 - on our own copy only
        else:

            def screate(**kwargs: Any) -> Any:
                before(kwargs)
                return create(**kwargs)

            setattr(resource, "create", screate)  # noqa: B010 - on our own copy only
        return client

    def _fail(self, exc: Exception) -> Exception:
        retry_error, incomplete_error = _instructor_errors()
        if isinstance(exc, (retry_error, incomplete_error)):
            cause = exc.__cause__
            if isinstance(cause, BudgetExceeded):  # a retry the budget could not cover
                return cause
            if isinstance(exc, retry_error) and isinstance(cause, Exception):
                mapped = judge_error(self.judge, cause)
                if mapped is not None:
                    return mapped
            text = message_text(message_of(getattr(exc, "last_completion", None)))
            problem = (
                f"was cut off at max_tokens={self.kwargs.get('max_tokens')} before its "
                f"{self.response_model.__name__} was complete"
                if isinstance(exc, incomplete_error)
                else f"gave no valid {self.response_model.__name__} after "
                f"{self.max_retries + 1} tries"
            )
            return JudgeReplyError(
                f"judge model {self.judge.model!r} {problem}",
                model=self.judge.model,
                reply=text[:REPLY_CHARS],
            )
        return judge_error(self.judge, exc) or exc

    def _bounded(self, client: Any) -> Any:
        return anthropic_bounded(client) if self.judge.provider == "anthropic" else bounded(client)

    def run_sync(self) -> BaseModel:
        with judge_call(self.judge.model, self.kwargs) as held:  # it must fit the budget
            client = self._instructor(self.judge.sync_client(), held, is_async=False)
            try:
                with redacted_logs(secrets_of(self.judge)):  # instructor logs the error text
                    parsed, _ = client.chat.completions.create_with_completion(
                        response_model=self.response_model,
                        max_retries=self.max_retries,
                        **self.kwargs,
                    )
            except Exception as exc:
                raise self._fail(exc) from None
            return parsed  # type: ignore[no-any-return]

    async def run_async(self) -> BaseModel:
        with judge_call(self.judge.model, self.kwargs) as held:  # it must fit the budget
            client = self._instructor(self.judge.async_client(), held, is_async=True)
            try:
                with redacted_logs(secrets_of(self.judge)):  # instructor logs the error text
                    parsed, _ = await client.chat.completions.create_with_completion(
                        response_model=self.response_model,
                        max_retries=self.max_retries,
                        **self.kwargs,
                    )
            except Exception as exc:
                raise self._fail(exc) from None
            return parsed  # type: ignore[no-any-return]


def _anthropic_mode(mode: str) -> Any:
    """The instructor mode for an Anthropic rating judge's `mode` ("TOOLS", "JSON", "MD_JSON").

    Tool use for "TOOLS"; JSON read from the reply's text for the others ("JSON_SCHEMA" is
    refused when the judge is made). instructor's provider-neutral modes where it has them
    (its v2 core, which deprecates the `ANTHROPIC_*` ones), else its `ANTHROPIC_*` modes.
    """
    import instructor

    tools = mode == "TOOLS"
    if hasattr(instructor.Mode, "warn_deprecated_mode"):
        return instructor.Mode.TOOLS if tools else instructor.Mode.JSON
    return instructor.Mode.ANTHROPIC_TOOLS if tools else instructor.Mode.ANTHROPIC_JSON


def _instructor_errors() -> tuple[type[Exception], type[Exception]]:
    """The errors instructor raises for "no reply validated" and "the reply was cut off".

    They moved to `instructor.core` in instructor 1.11 (importing `instructor.exceptions`
    there is deprecated and warns).
    """
    try:
        from instructor.core import IncompleteOutputException, InstructorRetryException
    except ImportError:  # instructor 1.10
        from instructor.exceptions import IncompleteOutputException, InstructorRetryException
    return InstructorRetryException, IncompleteOutputException
