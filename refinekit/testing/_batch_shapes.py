"""The scripted batch endpoints' data and JSON shapes: a batch as each provider shows it.

`refinekit.testing._batches` keeps the state and serves the endpoints; here is what a batch
holds (`Batch`, its `Item`s, the `Plan` it runs by) and how it is written out: OpenAI's
`Batch` object and its output and error files' lines, Anthropic's `MessageBatch` and its
results' lines, the input file's requests, and the pages of the lists.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from . import _openai_wire
from ._wire import Response, Wire

__all__ = [
    "FINAL",
    "Batch",
    "Item",
    "Plan",
    "anthropic_results",
    "anthropic_view",
    "check_plan",
    "error_lines",
    "form_fields",
    "json_response",
    "no_route",
    "openai_lines",
    "openai_view",
    "page",
    "status_of",
]

Provider = Literal["openai", "anthropic"]
DAY = 24 * 3600
FINAL = frozenset({"ended", "expired", "cancelled", "failed"})
"""The states a batch never leaves."""
_EXPIRED = "This request could not be executed before the completion window expired."
_CANCELLED = "This request was not executed because the batch was cancelled."
# the states as each provider names them
_OPENAI_STATUS = {"ended": "completed"}
_ANTHROPIC_STATUS = {
    "validating": "in_progress",
    "finalizing": "in_progress",
    "cancelling": "canceling",
    "cancelled": "ended",
    "expired": "ended",
}


@dataclass(frozen=True)
class Plan:
    """How a batch runs (`ScriptedOpenAI.script_batches`)."""

    polls: int = 1
    fail: frozenset[int] = frozenset()
    expire: bool = False
    expire_after: int = 0


@dataclass
class Item:
    """One request of a batch and its answer, taken when the batch was created."""

    custom_id: str
    status: int  # the answer's HTTP status
    body: Any  # the answer's JSON body
    runs: bool  # False: never run (expired)


@dataclass
class Batch:
    """One batch: its items, its plan, and how far it got."""

    id: str
    provider: Provider
    created_at: float
    items: list[Item]
    plan: Plan
    end_at: int  # the poll that ends it
    metadata: dict[str, str] = field(default_factory=dict)
    input_file_id: str = ""
    state: str = "validating"
    done: int = 0  # the first `done` items are done
    polls: int = 0
    cancelled: bool = False
    times: dict[str, float] = field(default_factory=dict)
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def runs(self) -> int:
        """The items that run before it ends (all, unless it expires)."""
        return sum(item.runs for item in self.items)

    def failed_done(self) -> int:
        """The items done so far whose answer is an error."""
        return sum(item.status != 200 for item in self.items[: self.done])


def check_plan(polls: int, fail: Collection[int], expire: bool, expire_after: int) -> Plan:
    """`script_batches`' arguments as a plan, checked."""
    if isinstance(polls, bool) or not isinstance(polls, int) or polls < 1:
        raise ValueError(f"polls is a whole number of at least 1, not {polls!r}")
    if isinstance(fail, (str, bytes)) or not isinstance(fail, Collection):
        raise TypeError(f"fail is a collection of item positions (ints), not {fail!r}")
    for position in fail:
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"fail holds 0-based item positions (ints >= 0), not {position!r}")
    if not isinstance(expire, bool):
        raise TypeError(f"expire is a bool, not {expire!r}")
    if isinstance(expire_after, bool) or not isinstance(expire_after, int) or expire_after < 0:
        raise ValueError(f"expire_after is a number of items, 0 or more, not {expire_after!r}")
    return Plan(polls, frozenset(fail), expire, expire_after)


def status_of(batch: Batch) -> str:
    """The batch's status as its provider names it."""
    if batch.provider == "openai":
        return _OPENAI_STATUS.get(batch.state, batch.state)
    return _ANTHROPIC_STATUS.get(batch.state, batch.state)


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response."""
    return Response(status, json.dumps(data).encode())


def no_route(wire: Wire, method: str, path: str) -> Response:
    """The 404 of a path the endpoints do not serve."""
    return wire.error(404, f"scripted server: no route {method} {path}")


def _iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, timezone.utc).isoformat().replace("+00:00", "Z")


# OpenAI


def form_fields(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body's fields: name -> (file name or None, content)."""
    parser = email.parser.BytesParser(policy=email.policy.HTTP)
    form = parser.parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in form.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (part.get_filename(), payload)
    return fields


def openai_lines(
    content: bytes, endpoint: str
) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """An input file's requests (custom_id, body), and its errors (the batch then fails)."""
    lines: list[tuple[str, dict[str, Any]]] = []
    errors: list[dict[str, Any]] = []

    def bad(number: int, code: str, message: str) -> None:
        errors.append({"code": code, "message": message, "param": None, "line": number})

    for number, text in enumerate(content.decode(errors="replace").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError:
            bad(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        if not isinstance(line, dict):
            bad(number, "invalid_json_line", "This line is not a JSON object.")
            continue
        custom_id, body = line.get("custom_id"), line.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            bad(number, "missing_required_parameter", "custom_id is missing.")
        elif line.get("method") != "POST":
            bad(number, "invalid_method", "The method of every request is 'POST'.")
        elif line.get("url") != endpoint:
            bad(number, "mismatched_endpoint", f"The url of every request is {endpoint!r}.")
        elif not isinstance(body, dict):
            bad(number, "missing_required_parameter", "body is missing.")
        elif any(custom_id == seen for seen, _ in lines):
            bad(number, "duplicate_custom_id", "The custom_id for this request is a duplicate.")
        else:
            lines.append((custom_id, body))
    if not lines and not errors:
        bad(1, "empty_file", "The batch input file is empty.")
    return lines, errors


def error_lines(batch: Batch) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An ended OpenAI batch's (output file, error file) lines, in the items' order."""
    output: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for n, item in enumerate(batch.items):
        line: dict[str, Any] = {"id": f"batch_req_{batch.id[6:]}_{n}"}
        line["custom_id"] = item.custom_id
        if n < batch.done and item.runs:
            response = {"status_code": item.status, "request_id": f"req_{n}", "body": item.body}
            line.update(response=response, error=None)
            (output if item.status == 200 else errors).append(line)
        else:
            expired = batch.state == "expired"
            code = "batch_expired" if expired else "batch_cancelled"
            message = _EXPIRED if expired else _CANCELLED
            line.update(response=None, error={"code": code, "message": message})
            errors.append(line)
    return output, errors


def openai_view(batch: Batch) -> dict[str, Any]:
    """The batch as OpenAI's `Batch` object."""
    ended = batch.state in FINAL and batch.state != "failed"
    failed = batch.failed_done() + (len(batch.items) - batch.done if ended else 0)
    counts = {
        "total": len(batch.items),
        "completed": batch.done - batch.failed_done(),
        "failed": failed,
    }
    times = {k: int(v) for k, v in batch.times.items()}
    errors = None if batch.errors is None else {"object": "list", "data": batch.errors}
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": _openai_wire.CHAT_PATH,
        "errors": errors,
        "input_file_id": batch.input_file_id,
        "completion_window": "24h",
        "status": status_of(batch),
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": int(batch.created_at),
        "in_progress_at": times.get("in_progress_at"),
        "expires_at": int(batch.created_at) + DAY,
        "finalizing_at": times.get("finalizing_at"),
        "completed_at": times.get("completed_at"),
        "failed_at": times.get("failed_at"),
        "expired_at": times.get("expired_at"),
        "cancelling_at": times.get("cancelling_at"),
        "cancelled_at": times.get("cancelled_at"),
        "request_counts": counts,
        "metadata": dict(batch.metadata),
    }


# Anthropic


def anthropic_results(batch: Batch) -> list[dict[str, Any]]:
    """An ended Anthropic batch's result lines, in the items' order."""
    lines = []
    for n, item in enumerate(batch.items):
        result: dict[str, Any]
        if n < batch.done and item.runs and item.status == 200:
            result = {"type": "succeeded", "message": item.body}
        elif n < batch.done and item.runs:
            result = {"type": "errored", "error": {**item.body, "request_id": f"req_{n}"}}
        else:
            result = {"type": "expired" if batch.state == "expired" else "canceled"}
        lines.append({"custom_id": item.custom_id, "result": result})
    return lines


def anthropic_view(batch: Batch, base_url: str) -> dict[str, Any]:
    """The batch as Anthropic's `MessageBatch` (counts stay `processing` until it ends)."""
    ended = batch.state in FINAL
    kinds = [line["result"]["type"] for line in anthropic_results(batch)] if ended else []
    counts = {
        "processing": 0 if ended else len(batch.items),
        "succeeded": kinds.count("succeeded"),
        "errored": kinds.count("errored"),
        "canceled": kinds.count("canceled"),
        "expired": kinds.count("expired"),
    }
    url = f"{base_url}/messages/batches/{batch.id}/results" if ended else None
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status_of(batch),
        "request_counts": counts,
        "ended_at": _iso(batch.times.get("ended_at")),
        "created_at": _iso(batch.created_at),
        "expires_at": _iso(batch.created_at + DAY),
        "archived_at": None,
        "cancel_initiated_at": _iso(batch.times.get("cancelling_at")),
        "results_url": url,
    }


# lists


def page(
    ordered: list[Batch],
    params: dict[str, str],
    view: Callable[[Batch], dict[str, Any]],
    anthropic: bool,
) -> dict[str, Any]:
    """A page of a batch list (`ordered` newest first), from the query's cursor and limit.

    OpenAI's: `after` and `limit`, `{"object": "list", "data", "first_id", "last_id",
    "has_more"}`; Anthropic's: `after_id` or `before_id` and `limit`, without "object".
    """
    ids = [b.id for b in ordered]
    try:
        limit = max(1, min(100 if not anthropic else 1000, int(params.get("limit", "20"))))
    except ValueError:
        limit = 20
    before = params.get("before_id") if anthropic else None
    if before in ids:
        end = ids.index(str(before))
        start = max(0, end - limit)
        chosen, more = ordered[start:end], start > 0
    else:
        after = params.get("after_id" if anthropic else "after")
        start = ids.index(str(after)) + 1 if after in ids else 0
        chosen, more = ordered[start : start + limit], start + limit < len(ordered)
    listed: dict[str, Any] = {} if anthropic else {"object": "list"}
    listed.update(
        data=[view(b) for b in chosen],
        first_id=chosen[0].id if chosen else None,
        last_id=chosen[-1].id if chosen else None,
        has_more=more,
    )
    return listed
