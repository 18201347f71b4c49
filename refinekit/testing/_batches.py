"""The scripted server's batch endpoints: OpenAI's Files and Batches, Anthropic's Message Batches.

A batch's items are answered from the scripts when it is created, each as the direct
endpoint would answer it (`refinekit.testing._wire.answer_from`), and recorded as requests
carrying the batch's id. A batch advances only when it is polled (a GET of the batch):
`script_batches` says after how many polls it ends, which items fail, and whether it
expires; `end_batches` ends every open batch at its next poll. Nothing depends on time.

- OpenAI: `POST /v1/files` (multipart, the JSONL input), `GET /v1/files/{id}` and
  `/content`, `POST /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/batches` (newest first,
  `after`/`limit`), `POST /v1/batches/{id}/cancel`. An ended batch has an output file (the
  items answered with 200) and an error file (the others: the reply's error, or
  `batch_expired` / `batch_cancelled` for the items never run), each only when not empty.
- Anthropic: `POST /v1/messages/batches`, `GET /v1/messages/batches/{id}`, `GET
  /v1/messages/batches` (newest first, `after_id`/`before_id`/`limit`), `GET
  /v1/messages/batches/{id}/results` (JSONL; the batch's `results_url`), `POST
  /v1/messages/batches/{id}/cancel`. Request counts stay `processing` until the batch ends.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

from . import _anthropic_wire, _openai_wire
from ._batch_shapes import (
    FINAL,
    Batch,
    Item,
    Plan,
    anthropic_results,
    anthropic_view,
    error_lines,
    form_fields,
    json_response,
    no_route,
    openai_lines,
    openai_view,
    page,
    status_of,
)
from ._script import RecordedRequest, Scripts
from ._wire import Ids, Response, Wire, answer_from

__all__ = ["BATCH_PREFIXES", "Batches", "RecordedBatch"]

BATCH_PREFIXES = ("/v1/files", "/v1/batches", "/v1/messages/batches")
"""The paths the batch endpoints serve (and those under them)."""

_CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class RecordedBatch:
    """One batch the scripted server received, as a test sees it.

    Attributes:
        id: The batch's id ("batch_..." for OpenAI, "msgbatch_..." for Anthropic).
        provider: "openai" or "anthropic": which API created it.
        custom_ids: The items' `custom_id`s, in the order they were submitted.
        status: The batch's status as its API reports it now (OpenAI's `status`, e.g.
            "in_progress" or "completed"; Anthropic's `processing_status`).
        polls: How many times it was polled (a GET of the batch).
        cancelled: Whether it was asked to cancel.
        metadata: The metadata it was created with (OpenAI; empty for Anthropic).
        created_at: When it was created (Unix time).
    """

    id: str
    provider: Literal["openai", "anthropic"]
    custom_ids: tuple[str, ...]
    status: str
    polls: int
    cancelled: bool
    metadata: dict[str, str]
    created_at: float


class Batches:
    """The batch endpoints' state: files, batches, and the plans of the next batches.

    Thread-safe: every request holds the lock while it reads or changes the state.
    """

    def __init__(self, scripts: Scripts, ids: Ids, record: Callable[[RecordedRequest], None]):
        self._scripts = scripts
        self._ids = ids
        self._record = record
        self._lock = threading.RLock()
        self._counter = itertools.count(1)  # never reset: an id is never reused
        self._files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self._batches: dict[str, Batch] = {}
        self._plans: list[Plan] = []
        self._default = Plan()

    # scripting (the test's side)

    def script(self, plan: Plan, times: int | None) -> None:
        """The plan for the next `times` batches (None: every later one, after those queued)."""
        if times is not None and (type(times) is not int or times < 1):  # not a bool either
            raise ValueError(f"times is a whole number of at least 1, or None, not {times!r}")
        with self._lock:
            if times is None:
                self._default = plan
            else:
                self._plans.extend([plan] * times)

    def end_all(self) -> None:
        """Every open batch ends at its next poll."""
        with self._lock:
            for batch in self._batches.values():
                if batch.state not in FINAL:
                    batch.end_at = min(batch.end_at, batch.polls + 1)

    def recorded(self) -> list[RecordedBatch]:
        """Every batch, in the order they were created."""
        with self._lock:
            return [
                RecordedBatch(
                    b.id,
                    b.provider,
                    tuple(item.custom_id for item in b.items),
                    status_of(b),
                    b.polls,
                    b.cancelled,
                    dict(b.metadata),
                    b.created_at,
                )
                for b in self._batches.values()
            ]

    def clear(self) -> None:
        """Forget every file, batch and plan."""
        with self._lock:
            self._files.clear()
            self._batches.clear()
            self._plans.clear()
            self._default = Plan()

    # serving

    def handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, base_url: str
    ) -> Response | None:
        """The response of a batch endpoint, or None when `path` is not one."""
        route, _, query = path.partition("?")
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        parts = route.strip("/").split("/")[1:]  # without "v1"
        with self._lock:
            if parts[:2] == ["messages", "batches"]:
                return self._anthropic(method, parts[2:], params, headers, raw, base_url)
            if parts[:1] == ["files"]:
                return self._file_route(method, parts[1:], headers, raw)
            if parts[:1] == ["batches"]:
                return self._openai(method, parts[1:], params, headers, raw)
        return None

    def _new_plan(self) -> Plan:
        return self._plans.pop(0) if self._plans else self._default

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter):024d}"

    def _items(
        self,
        batch: Batch,
        wire: Wire,
        path: str,
        headers: dict[str, str],
        lines: list[tuple[str, dict[str, Any]]],
    ) -> None:
        """Record the items and take their answers from the scripts, in order."""
        plan = batch.plan
        for position, (custom_id, body) in enumerate(lines):
            model = body.get("model")
            request = RecordedRequest(
                "POST", path, headers, body, model if isinstance(model, str) else None, batch.id
            )
            self._record(request)
            if plan.expire and position >= plan.expire_after:
                batch.items.append(Item(custom_id, 0, None, runs=False))
                continue
            if position in plan.fail:
                failed = wire.error(500, "scripted server: this item failed (script_batches)")
                batch.items.append(Item(custom_id, 500, json.loads(failed.body), True))
                continue
            answer = answer_from(self._scripts, wire, request, self._ids, batch=True)
            assert isinstance(answer, Response)  # a batch item's answer is always one
            try:
                status, parsed = answer.status, json.loads(answer.body)
            except ValueError:
                bad = wire.error(500, "scripted server: the item's reply is not JSON")
                status, parsed = 500, json.loads(bad.body)
            batch.items.append(Item(custom_id, status, parsed, True))

    def _poll(self, batch: Batch) -> None:
        """A GET of the batch: it advances one step."""
        batch.polls += 1
        if batch.state in FINAL:
            return
        now = time.time()
        if batch.state == "cancelling":
            self._end(batch, "cancelled", now)
            return
        if batch.polls >= batch.end_at:
            batch.done = batch.runs
            self._end(batch, "expired" if batch.plan.expire else "ended", now)
            return
        steps = batch.end_at
        if steps >= 3 and batch.polls == steps - 1:
            batch.state, batch.done = "finalizing", batch.runs
            batch.times.setdefault("finalizing_at", now)
            return
        share = steps - 1 if steps >= 3 else steps
        batch.done = max(batch.done, batch.runs * batch.polls // share)
        batch.state = "in_progress"
        batch.times.setdefault("in_progress_at", now)

    def _end(self, batch: Batch, state: str, now: float) -> None:
        batch.state = state
        batch.times[{"ended": "completed_at"}.get(state, f"{state}_at")] = now
        batch.times.setdefault("ended_at", now)
        if batch.provider == "openai":
            self._output_files(batch)

    # OpenAI

    def _file_route(
        self, method: str, parts: list[str], headers: dict[str, str], raw: bytes
    ) -> Response:
        if method == "POST" and not parts:
            return self._upload(headers, raw)
        if method == "GET" and parts and parts[0] in self._files:
            info, content = self._files[parts[0]]
            if parts[1:] == []:
                return json_response(info)
            if parts[1:] == ["content"]:
                return Response(200, content, (("Content-Type", "application/octet-stream"),))
        if method == "GET" and len(parts) in (1, 2):
            message = f"No such File object: {parts[0]}"
            return _openai_wire.error(404, message, param="id")
        return no_route(_openai_wire, method, "/v1/files/" + "/".join(parts))

    def _upload(self, headers: dict[str, str], raw: bytes) -> Response:
        kind = headers.get("content-type", "")
        if not kind.startswith("multipart/form-data"):
            return _openai_wire.error(400, "scripted server: upload a file as multipart/form-data")
        fields = form_fields(kind, raw)
        purpose = fields.get("purpose", (None, b""))[1].decode()
        if "file" not in fields:
            return _openai_wire.error(400, "scripted server: no file in the upload", param="file")
        if purpose != "batch":
            message = f"scripted server: the purpose of a file is 'batch' here, not {purpose!r}"
            return _openai_wire.error(400, message, param="purpose")
        filename, content = fields["file"]
        return json_response(self._add_file(filename or "upload.jsonl", content, "batch"))

    def _add_file(self, filename: str, content: bytes, purpose: str) -> dict[str, Any]:
        file_id = self._new_id("file-")
        info = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self._files[file_id] = (info, content)
        return info

    def _openai(
        self,
        method: str,
        parts: list[str],
        params: dict[str, str],
        headers: dict[str, str],
        raw: bytes,
    ) -> Response:
        if method == "POST" and not parts:
            return self._openai_create(headers, raw)
        if method == "GET" and not parts:
            ordered = list(reversed(self._batches.values()))
            return json_response(
                page([b for b in ordered if b.provider == "openai"], params, openai_view, False)
            )
        batch = self._batches.get(parts[0]) if parts else None
        if batch is None or batch.provider != "openai":
            if len(parts) in (1, 2):
                return _openai_wire.error(404, f"No batch found with id '{parts[0]}'.")
            return no_route(_openai_wire, method, "/v1/batches/" + "/".join(parts))
        if method == "GET" and len(parts) == 1:
            self._poll(batch)
            return json_response(openai_view(batch))
        if method == "POST" and parts[1:] == ["cancel"]:
            if batch.state in FINAL:
                status = status_of(batch)
                message = f"Cannot cancel a batch with status '{status}'."
                return _openai_wire.error(409, message)
            self._cancel(batch)
            return json_response(openai_view(batch))
        return no_route(_openai_wire, method, "/v1/batches/" + "/".join(parts))

    def _cancel(self, batch: Batch) -> None:
        if batch.state != "cancelling":
            batch.cancelled = True
            batch.state = "cancelling"
            batch.times["cancelling_at"] = time.time()

    def _openai_create(self, headers: dict[str, str], raw: bytes) -> Response:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _openai_wire.error(400, "scripted server: the request body is not a JSON object")
        file_id = body.get("input_file_id")
        if file_id not in self._files:
            message = f"scripted server: no file {file_id!r}: upload it first (files.create)"
            return _openai_wire.error(400, message, param="input_file_id")
        endpoint = body.get("endpoint")
        if endpoint != _openai_wire.CHAT_PATH:
            message = f"scripted server: batches run {_openai_wire.CHAT_PATH!r}, not {endpoint!r}"
            return _openai_wire.error(400, message, param="endpoint")
        if body.get("completion_window") != "24h":
            return _openai_wire.error(400, "completion_window is '24h'", param="completion_window")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            return _openai_wire.error(400, "metadata maps str to str", param="metadata")
        now = time.time()
        batch = Batch(
            self._new_id("batch_"), "openai", now, [], self._new_plan(), 0, dict(metadata)
        )
        batch.input_file_id, batch.end_at = str(file_id), batch.plan.polls
        lines, errors = openai_lines(self._files[str(file_id)][1], endpoint)
        if errors:
            batch.state, batch.errors = "failed", errors
            batch.times["failed_at"] = now
        else:
            self._items(batch, _openai_wire, endpoint, headers, lines)
        self._batches[batch.id] = batch
        return json_response(openai_view(batch))

    def _output_files(self, batch: Batch) -> None:
        """Write an ended OpenAI batch's output and error files (each only when not empty)."""
        for lines, kind in zip(error_lines(batch), ("output", "error"), strict=True):
            if lines:
                content = "".join(json.dumps(line) + "\n" for line in lines).encode()
                info = self._add_file(f"batch_{batch.id}_{kind}.jsonl", content, "batch_output")
                setattr(batch, f"{kind}_file_id", info["id"])

    # Anthropic

    def _anthropic(
        self,
        method: str,
        parts: list[str],
        params: dict[str, str],
        headers: dict[str, str],
        raw: bytes,
        base_url: str,
    ) -> Response:
        where = "/v1/messages/batches/" + "/".join(parts)
        if method == "POST" and not parts:
            return self._anthropic_create(headers, raw, base_url)
        if method == "GET" and not parts:
            ordered = [b for b in reversed(self._batches.values()) if b.provider == "anthropic"]
            return json_response(page(ordered, params, lambda b: anthropic_view(b, base_url), True))
        batch = self._batches.get(parts[0]) if parts else None
        if batch is None or batch.provider != "anthropic":
            if len(parts) in (1, 2):
                return _anthropic_wire.error(404, f"Message batch {parts[0]!r} not found.")
            return no_route(_anthropic_wire, method, where)
        if method == "GET" and len(parts) == 1:
            self._poll(batch)
            return json_response(anthropic_view(batch, base_url))
        if method == "GET" and parts[1:] == ["results"]:
            if batch.state not in FINAL:
                message = f"Message batch {batch.id!r} has not ended: no results yet."
                return _anthropic_wire.error(400, message)
            lines = "".join(json.dumps(line) + "\n" for line in anthropic_results(batch))
            return Response(200, lines.encode(), (("Content-Type", "application/binary"),))
        if method == "POST" and parts[1:] == ["cancel"]:
            if batch.state in FINAL:
                message = f"Message batch {batch.id!r} has ended: it cannot be canceled."
                return _anthropic_wire.error(409, message)
            self._cancel(batch)
            return json_response(anthropic_view(batch, base_url))
        return no_route(_anthropic_wire, method, where)

    def _anthropic_create(self, headers: dict[str, str], raw: bytes, base_url: str) -> Response:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return _anthropic_wire.error(400, "requests: a non-empty list of requests")
        lines: list[tuple[str, dict[str, Any]]] = []
        for n, entry in enumerate(requests):
            custom_id = entry.get("custom_id") if isinstance(entry, dict) else None
            params = entry.get("params") if isinstance(entry, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
                message = f"requests.{n}.custom_id: 1 to 64 characters of [a-zA-Z0-9_-]"
                return _anthropic_wire.error(400, message)
            if not isinstance(params, dict):
                return _anthropic_wire.error(400, f"requests.{n}.params: an object")
            lines.append((custom_id, params))
        seen = [custom_id for custom_id, _ in lines]
        if len(set(seen)) != len(seen):
            return _anthropic_wire.error(400, "requests: every custom_id must be unique")
        plan = self._new_plan()
        batch = Batch(self._new_id("msgbatch_"), "anthropic", time.time(), [], plan, plan.polls)
        batch.state = "in_progress"
        self._items(batch, _anthropic_wire, _anthropic_wire.MESSAGES_PATH, headers, lines)
        self._batches[batch.id] = batch
        return json_response(anthropic_view(batch, base_url))
