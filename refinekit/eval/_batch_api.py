"""The providers' batch APIs, over a judge model's own client: submit, poll, read, find, cancel.

OpenAI's Batch API (a JSONL file of chat completion requests uploaded with `files.create`,
then `batches.create`; the results in an output and an error file) and Anthropic's Message
Batches (`messages.batches.create`; the results as a JSONL stream) answer the same requests
a judge sends directly, at half the price, within 24 hours. `batch_api(judge)` is the
adapter for a `JudgeModel`'s provider; it is sync (the async side runs it in a thread).

A failed HTTP call raises refinekit's `JudgeError` tree, as a direct judge call does, and no
message holds a credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from openai.types.chat import ChatCompletion

from .._core.redact import redact, redacted_logs
from ..judges._calls import judge_error
from ..judges._client import JudgeModel, secrets_of

__all__ = [
    "BATCH_SHARE",
    "BatchAPI",
    "BatchState",
    "BatchStatus",
    "ItemResult",
    "batch_api",
]

BatchState = Literal[
    "validating",
    "in_progress",
    "finalizing",
    "ended",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
]
"""Where a batch is: OpenAI's statuses ("completed" is "ended"), Anthropic's mapped to them."""

BATCH_SHARE: dict[str, float] = {"openai": 0.5, "anthropic": 0.5}
"""The providers' documented batch price as a share of the list price."""

CHAT_PATH = "/v1/chat/completions"
SUBMISSION_KEY = "refinekit_submission"
"""The OpenAI batch metadata key holding the submission token."""
CLOCK_SKEW = 60.0
"""Seconds a provider's clock may be behind this machine's, when finding a batch by time."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FINISHED = frozenset({"ended", "failed", "expired", "cancelled"})
_OPENAI_STATES: dict[str, BatchState] = {"completed": "ended"}
_ANTHROPIC_STATES: dict[str, BatchState] = {
    "in_progress": "in_progress",
    "canceling": "cancelling",
    "ended": "ended",
}
_CLIENT_OPTIONS = ("timeout", "extra_headers", "extra_query")  # not part of the request body
_NOT_RUN = {"batch_expired": "expired", "batch_cancelled": "cancelled"}
_T = TypeVar("_T")


@dataclass(frozen=True)
class BatchStatus:
    """Where a batch is, and how many of its items are done.

    Attributes:
        state: Where it is (`BatchState`).
        total: The items in the batch.
        done: The items finished so far, succeeded or not.
        failed: The items errored, expired or cancelled so far.
    """

    state: BatchState
    total: int
    done: int
    failed: int

    @property
    def finished(self) -> bool:
        """Whether nothing will change: the batch ended, failed, expired or was cancelled."""
        return self.state in _FINISHED


@dataclass(frozen=True)
class ItemResult:
    """One item's result in a finished batch.

    Attributes:
        key: The item's `custom_id`.
        reply: What the direct call returns: an `openai` `ChatCompletion` or an
            `anthropic` `Message`; None when the item has no reply.
        error: Why it has none (credentials redacted): the provider's error, "expired" or
            "cancelled"; None when it has a reply.
    """

    key: str
    reply: Any | None
    error: str | None


def _check_token(value: object, what: str) -> str:
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise ValueError(f"{what} is 1 to 64 characters of [A-Za-z0-9_-], not {value!r}")
    return value


def _request_body(kwargs: object, key: str) -> dict[str, Any]:
    """A request's kwargs as the body the API receives (client-only options dropped)."""
    if not isinstance(kwargs, dict):
        raise TypeError(f"item {key!r}: the request is a dict of kwargs, not {kwargs!r}")
    body = {k: v for k, v in kwargs.items() if k not in _CLIENT_OPTIONS and k != "extra_body"}
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict):
        body.update(extra)
    return body


class BatchAPI:
    """One judge model's batch API (`batch_api(judge)` makes the provider's).

    Attributes:
        provider: "openai" or "anthropic".
    """

    provider: Literal["openai", "anthropic"]

    def __init__(self, judge: JudgeModel) -> None:
        self._judge = judge
        self.provider = judge.provider

    def _call(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """One HTTP call through the client; a failure as refinekit's `JudgeError`."""
        try:
            with redacted_logs(secrets_of(self._judge)):
                return call(*args, **kwargs)
        except Exception as exc:
            raise (judge_error(self._judge, exc) or exc) from None

    def _cancel(self, call: Callable[[str], object], batch_id: str) -> None:
        """Cancel; a batch already finished (the provider's 409) is left as it is."""
        try:
            with redacted_logs(secrets_of(self._judge)):
                call(batch_id)
        except Exception as exc:
            if getattr(exc, "status_code", None) == 409:
                return
            raise (judge_error(self._judge, exc) or exc) from None

    def _redacted(self, text: str) -> str:
        return redact(text, secrets_of(self._judge))

    def _items(
        self, items: Sequence[tuple[str, dict[str, Any]]], submission: str
    ) -> list[tuple[str, dict[str, Any]]]:
        _check_token(submission, "submission")
        checked: list[tuple[str, dict[str, Any]]] = []
        for item in items:
            if not isinstance(item, tuple) or len(item) != 2:
                raise TypeError(f"an item is (custom_id, kwargs), not {item!r}")
            key = _check_token(item[0], "an item's custom_id")
            checked.append((key, _request_body(item[1], key)))
        if not checked:
            raise ValueError("a batch needs at least one item")
        keys = [key for key, _ in checked]
        if len(set(keys)) != len(keys):
            raise ValueError("every item of a batch needs its own custom_id")
        return checked

    def submit(self, items: Sequence[tuple[str, dict[str, Any]]], *, submission: str) -> str:
        """Upload the items and create one batch; the provider's batch id.

        Args:
            items: (custom_id, kwargs): each request's kwargs as the direct call sends them
                (`chat.completions.create(**kwargs)` / `messages.create(**kwargs)`; a
                `timeout` is dropped). A custom_id is 1 to 64 characters of [A-Za-z0-9_-].
            submission: A token (1 to 64 characters of [A-Za-z0-9_-]) kept with the batch
                where the provider keeps one (OpenAI's metadata), for `find`.

        Returns:
            The batch's id.

        Raises:
            ValueError: A bad custom_id or token, no items, or a custom_id used twice.
            TypeError: An item that is not (custom_id, kwargs).
            JudgeError: The provider refused or could not be reached.
        """
        raise NotImplementedError  # pragma: no cover

    def find(self, submission: str, total: int, since: float) -> str | None:
        """The id of a batch already created under `submission`, or None.

        For a process stopped between the provider's answer and saving the id. OpenAI: the
        batch whose metadata holds the token. Anthropic (no metadata): the one batch created
        at or after `since` (Unix time, less a minute of clock skew) with `total` requests,
        when exactly one matches.
        """
        raise NotImplementedError  # pragma: no cover

    def status(self, batch_id: str) -> BatchStatus:
        """Where the batch is (one poll)."""
        raise NotImplementedError  # pragma: no cover

    def results(self, batch_id: str) -> list[ItemResult]:
        """Every item's result, once the batch is finished (items never run included).

        Raises:
            ValueError: The batch has not finished.
            JudgeError: The provider could not be reached.
        """
        raise NotImplementedError  # pragma: no cover

    def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel the batch (nothing happens to one already finished)."""
        raise NotImplementedError  # pragma: no cover


class _OpenAIBatches(BatchAPI):
    """OpenAI's Batch API: a JSONL input file, a batch, output and error files."""

    def submit(self, items: Sequence[tuple[str, dict[str, Any]]], *, submission: str) -> str:
        checked = self._items(items, submission)
        lines = [
            {"custom_id": key, "method": "POST", "url": CHAT_PATH, "body": body}
            for key, body in checked
        ]
        try:
            content = "".join(json.dumps(line) + "\n" for line in lines).encode()
        except (TypeError, ValueError) as exc:
            raise TypeError(f"a batch request must be JSON: {exc}") from None
        client = self._judge.sync_client()
        uploaded = self._call(
            client.files.create,
            file=(f"refinekit-{submission}.jsonl", content, "application/jsonl"),
            purpose="batch",
        )
        batch = self._call(
            client.batches.create,
            input_file_id=uploaded.id,
            endpoint=CHAT_PATH,
            completion_window="24h",
            metadata={SUBMISSION_KEY: submission},
        )
        return str(batch.id)

    def find(self, submission: str, total: int, since: float) -> str | None:
        _check_token(submission, "submission")
        client = self._judge.sync_client()
        for batch in self._call(lambda: list(_recent(client.batches.list(limit=100), since))):
            if (batch.metadata or {}).get(SUBMISSION_KEY) == submission:
                return str(batch.id)
        return None

    def _retrieve(self, batch_id: str) -> Any:
        return self._call(self._judge.sync_client().batches.retrieve, batch_id)

    def status(self, batch_id: str) -> BatchStatus:
        return _openai_status(self._retrieve(batch_id))

    def results(self, batch_id: str) -> list[ItemResult]:
        batch = self._retrieve(batch_id)
        state = _openai_status(batch).state
        if state not in _FINISHED:
            raise ValueError(f"batch {batch_id!r} has not finished ({state}): no results yet")
        results: dict[str, ItemResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            for line in self._lines(file_id):
                result = self._item(line)
                results.setdefault(result.key, result)
        if state == "failed":  # nothing ran: every item of the input, with the reason
            errors = getattr(batch.errors, "data", None) or []
            reason = "; ".join(str(e.message) for e in errors[:3] if e.message) or "no reason"
            for line in self._lines(batch.input_file_id):
                key = str(line.get("custom_id"))
                results.setdefault(key, ItemResult(key, None, self._redacted(f"failed: {reason}")))
        return list(results.values())

    def _lines(self, file_id: str | None) -> Iterator[dict[str, Any]]:
        if not file_id:
            return
        content = self._call(self._judge.sync_client().files.content, file_id)
        for text in content.text.splitlines():
            if text.strip():
                line = json.loads(text)
                if isinstance(line, dict):
                    yield line

    def _item(self, line: dict[str, Any]) -> ItemResult:
        key = str(line.get("custom_id"))
        response = line.get("response")
        if isinstance(response, dict) and response.get("status_code") == 200:
            try:
                return ItemResult(key, ChatCompletion.model_validate(response.get("body")), None)
            except ValueError as exc:
                reason = f"the reply is not a chat completion: {str(exc)[:200]}"
                return ItemResult(key, None, self._redacted(reason))
        error = line.get("error") if isinstance(line.get("error"), dict) else None
        if error is not None and error.get("code") in _NOT_RUN:
            return ItemResult(key, None, _NOT_RUN[str(error["code"])])
        if isinstance(response, dict):
            body = response.get("body")
            detail = body.get("error") if isinstance(body, dict) else None
            message = detail.get("message") if isinstance(detail, dict) else body
            reason = f"HTTP {response.get('status_code')}: {message}"
        elif error is not None:
            reason = f"{error.get('code')}: {error.get('message')}"
        else:
            reason = "no response"
        return ItemResult(key, None, self._redacted(reason))

    def cancel(self, batch_id: str) -> None:
        self._cancel(self._judge.sync_client().batches.cancel, batch_id)


def _recent(listed: Any, since: float) -> Iterator[Any]:
    """A list of batches (newest first), down to those created a minute before `since`."""
    for batch in listed:
        created = batch.created_at
        stamp = created.timestamp() if hasattr(created, "timestamp") else float(created)
        if stamp < since - CLOCK_SKEW:
            return
        yield batch


def _openai_status(batch: Any) -> BatchStatus:
    state: BatchState = _OPENAI_STATES.get(batch.status, batch.status)
    counts = batch.request_counts
    total = counts.total if counts is not None else 0
    completed = counts.completed if counts is not None else 0
    failed = counts.failed if counts is not None else 0
    if state in _FINISHED:  # nothing more runs: what did not complete failed
        return BatchStatus(state, total, total, total - completed)
    return BatchStatus(state, total, completed + failed, failed)


class _AnthropicBatches(BatchAPI):
    """Anthropic's Message Batches: the requests in the create call, results as JSONL."""

    def submit(self, items: Sequence[tuple[str, dict[str, Any]]], *, submission: str) -> str:
        checked = self._items(items, submission)
        requests = [{"custom_id": key, "params": body} for key, body in checked]
        client = self._judge.sync_client()
        batch = self._call(client.messages.batches.create, requests=requests)
        return str(batch.id)

    def find(self, submission: str, total: int, since: float) -> str | None:
        _check_token(submission, "submission")
        client = self._judge.sync_client()
        recent = self._call(lambda: list(_recent(client.messages.batches.list(limit=100), since)))
        matching = [b for b in recent if _anthropic_total(b) == total]
        return str(matching[0].id) if len(matching) == 1 else None

    def _retrieve(self, batch_id: str) -> Any:
        return self._call(self._judge.sync_client().messages.batches.retrieve, batch_id)

    def status(self, batch_id: str) -> BatchStatus:
        return _anthropic_status(self._retrieve(batch_id))

    def results(self, batch_id: str) -> list[ItemResult]:
        state = self.status(batch_id).state
        if state not in _FINISHED:
            raise ValueError(f"batch {batch_id!r} has not finished ({state}): no results yet")
        client = self._judge.sync_client()
        lines = self._call(lambda: list(client.messages.batches.results(batch_id)))
        return [self._item(line) for line in lines]

    def _item(self, line: Any) -> ItemResult:
        key, result = str(line.custom_id), line.result
        if result.type == "succeeded":
            return ItemResult(key, result.message, None)
        if result.type == "errored":
            error = result.error.error
            return ItemResult(key, None, self._redacted(f"{error.type}: {error.message}"))
        return ItemResult(key, None, "cancelled" if result.type == "canceled" else "expired")

    def cancel(self, batch_id: str) -> None:
        self._cancel(self._judge.sync_client().messages.batches.cancel, batch_id)


def _anthropic_total(batch: Any) -> int:
    counts = batch.request_counts
    return int(
        counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
    )


def _anthropic_status(batch: Any) -> BatchStatus:
    state = _ANTHROPIC_STATES.get(batch.processing_status, "in_progress")
    counts = batch.request_counts
    failed = counts.errored + counts.expired + counts.canceled
    total = _anthropic_total(batch)
    return BatchStatus(state, total, total - counts.processing, failed)


def batch_api(judge: JudgeModel) -> BatchAPI:
    """The batch API of a judge model's provider, over its sync client.

    Args:
        judge: The judge model (an `openai` or an `anthropic` client, sync or async).

    Returns:
        The adapter.
    """
    if not isinstance(judge, JudgeModel):
        raise TypeError(f"batch_api needs a JudgeModel, not {type(judge).__name__}")
    return _AnthropicBatches(judge) if judge.provider == "anthropic" else _OpenAIBatches(judge)
