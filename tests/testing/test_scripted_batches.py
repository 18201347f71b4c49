"""The scripted server's batch endpoints, driven by the real `openai` and `anthropic` clients.

OpenAI's Files and Batches, Anthropic's Message Batches: every response parses in the real
client; a batch advances by polls only; its items are answered from the scripts, in order,
and recorded with the batch's id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.messages import MessageBatch
from openai.types import Batch
from openai.types.chat import ChatCompletion

from refinekit.testing import RecordedBatch, Reply, ScriptedOpenAI

CHAT = "/v1/chat/completions"


@pytest.fixture
def oa(server: ScriptedOpenAI) -> Iterator[openai.OpenAI]:
    with server.client() as client:
        yield client


@pytest.fixture
def an(server: ScriptedOpenAI) -> Iterator[anthropic.Anthropic]:
    with server.anthropic_client() as client:
        yield client


def jsonl(n: int, model: str = "judge", prefix: str = "k") -> bytes:
    lines = [
        {
            "custom_id": f"{prefix}{i}",
            "method": "POST",
            "url": CHAT,
            "body": {"model": model, "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(n)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def openai_batch(client: openai.OpenAI, content: bytes, **metadata: str) -> Batch:
    uploaded = client.files.create(file=("input.jsonl", content), purpose="batch")
    assert uploaded.purpose == "batch"
    assert uploaded.bytes == len(content)
    return client.batches.create(
        input_file_id=uploaded.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata=metadata or None,
    )


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def anthropic_requests(n: int, model: str = "claude") -> list[Any]:
    return [
        {
            "custom_id": f"c{i}",
            "params": {
                "model": model,
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"question {i}"}],
            },
        }
        for i in range(n)
    ]


# OpenAI


def test_openai_batch_runs_the_script_in_order_and_ends_at_its_poll(
    server: ScriptedOpenAI, oa: openai.OpenAI
) -> None:
    server.script("judge", ["one", "two", "three"])
    server.script_batches(polls=4)
    batch = openai_batch(oa, jsonl(3), refinekit_submission="tok")
    assert batch.id.startswith("batch_")
    assert batch.status == "validating"
    assert batch.metadata == {"refinekit_submission": "tok"}
    seen = [oa.batches.retrieve(batch.id) for _ in range(4)]
    assert [b.status for b in seen] == ["in_progress", "in_progress", "finalizing", "completed"]
    done = [b.request_counts.completed for b in seen if b.request_counts]
    assert done == [1, 2, 3, 3]  # counting up, poll by poll
    ended = seen[-1]
    assert ended.error_file_id is None
    assert ended.completed_at is not None
    output = lines_of(oa, ended.output_file_id)
    assert [line["custom_id"] for line in output] == ["k0", "k1", "k2"]
    replies = [ChatCompletion.model_validate(line["response"]["body"]) for line in output]
    assert [r.choices[0].message.content for r in replies] == ["one", "two", "three"]
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in output)
    # each item was a request of its own, recorded with the batch's id
    items = server.requests
    assert [r.batch_id for r in items] == [batch.id] * 3
    assert [r.path for r in items] == [CHAT] * 3
    assert items[1].body is not None
    assert items[1].body["messages"][0]["content"] == "question 1"
    assert items[0].headers["authorization"] == "Bearer ***"
    recorded = server.batches
    assert recorded == [
        RecordedBatch(
            batch.id,
            "openai",
            ("k0", "k1", "k2"),
            "completed",
            4,
            False,
            {"refinekit_submission": "tok"},
            recorded[0].created_at,
        )
    ]
    assert abs(recorded[0].created_at - batch.created_at) < 1


def test_a_batch_only_advances_when_polled(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", "yes", times=None)
    server.script_batches(polls=2)
    batch = openai_batch(oa, jsonl(2))
    listed = oa.batches.list()  # listing is not polling
    assert [b.status for b in listed.data] == ["validating"]
    assert server.batches[0].polls == 0
    assert oa.batches.retrieve(batch.id).status == "in_progress"
    assert oa.batches.retrieve(batch.id).status == "completed"
    assert oa.batches.retrieve(batch.id).status == "completed"  # it stays ended
    assert server.batches[0].polls == 3


def test_openai_partial_failures_go_to_the_error_file(
    server: ScriptedOpenAI, oa: openai.OpenAI
) -> None:
    server.script("judge", ["a", Reply.error(400, "too long"), "c"])
    server.script_batches(fail=[1])
    batch = openai_batch(oa, jsonl(4))
    ended = oa.batches.retrieve(batch.id)
    assert ended.status == "completed"
    assert ended.request_counts is not None
    assert (ended.request_counts.completed, ended.request_counts.failed) == (2, 2)
    output = lines_of(oa, ended.output_file_id)
    texts = [ChatCompletion.model_validate(line["response"]["body"]) for line in output]
    # the failing position takes no reply: items 0, 2 and 3 take "a", the error, "c"
    assert [line["custom_id"] for line in output] == ["k0", "k3"]
    assert [t.choices[0].message.content for t in texts] == ["a", "c"]
    errors = {line["custom_id"]: line for line in lines_of(oa, ended.error_file_id)}
    assert errors["k1"]["response"]["status_code"] == 500
    assert errors["k1"]["response"]["body"]["error"]["type"] == "server_error"
    assert errors["k2"]["response"]["status_code"] == 400
    assert errors["k2"]["response"]["body"]["error"]["message"] == "too long"


def test_openai_expiry_leaves_the_rest_expired(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", ["a"])  # only the item done before expiry takes a reply
    server.script_batches(expire=True, expire_after=1, polls=2)
    batch = openai_batch(oa, jsonl(3))
    assert oa.batches.retrieve(batch.id).status == "in_progress"
    ended = oa.batches.retrieve(batch.id)
    assert ended.status == "expired"
    assert ended.expired_at is not None
    assert [line["custom_id"] for line in lines_of(oa, ended.output_file_id)] == ["k0"]
    errors = lines_of(oa, ended.error_file_id)
    assert [(e["custom_id"], e["response"], e["error"]["code"]) for e in errors] == [
        ("k1", None, "batch_expired"),
        ("k2", None, "batch_expired"),
    ]


def test_openai_cancel_keeps_what_was_done(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", "yes", times=None)
    server.script_batches(polls=5)
    batch = openai_batch(oa, jsonl(4))
    assert oa.batches.retrieve(batch.id).request_counts == openai.types.BatchRequestCounts(
        completed=1, failed=0, total=4
    )
    cancelling = oa.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    assert cancelling.cancelling_at is not None
    cancelled = oa.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled"
    assert [line["custom_id"] for line in lines_of(oa, cancelled.output_file_id)] == ["k0"]
    errors = lines_of(oa, cancelled.error_file_id)
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    assert len(errors) == 3
    assert server.batches[0].cancelled
    with pytest.raises(openai.ConflictError, match="cancelled"):
        oa.batches.cancel(batch.id)


def test_end_batches_ends_every_open_batch_at_its_next_poll(
    server: ScriptedOpenAI, oa: openai.OpenAI
) -> None:
    server.script("judge", "yes", times=None)
    server.script_batches(polls=100)
    first, second = openai_batch(oa, jsonl(2)), openai_batch(oa, jsonl(2, prefix="j"))
    assert oa.batches.retrieve(first.id).status == "in_progress"
    server.end_batches()
    assert oa.batches.retrieve(first.id).status == "completed"
    assert oa.batches.retrieve(second.id).status == "completed"


def test_script_batches_times_then_the_default(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", "yes", times=None)
    server.script_batches(polls=3)  # every batch from now on...
    server.script_batches(fail=[0], times=1)  # ...after this one
    first, second = openai_batch(oa, jsonl(1)), openai_batch(oa, jsonl(1))
    ended = oa.batches.retrieve(first.id)
    assert ended.status == "completed"
    assert ended.output_file_id is None
    assert oa.batches.retrieve(second.id).status == "in_progress"


def test_openai_list_pages_newest_first(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", "yes", times=None)
    made = [openai_batch(oa, jsonl(1)).id for _ in range(5)]
    page = oa.batches.list(limit=2)
    assert [b.id for b in page.data] == made[::-1][:2]
    assert page.has_more
    assert [b.id for b in oa.batches.list(limit=2)] == made[::-1]  # auto-pagination
    assert [b.id for b in oa.batches.list(after=made[1]).data] == [made[0]]


def test_openai_bad_input_file_fails_the_batch(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    bad = jsonl(1) + b"not json\n" + jsonl(1)  # the last repeats custom_id k0
    batch = openai_batch(oa, bad)
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data
    codes = [(e.code, e.line) for e in batch.errors.data]
    assert codes == [("invalid_json_line", 2), ("duplicate_custom_id", 3)]
    assert server.requests == []  # nothing ran


def test_openai_refused_requests(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="upload it first"):
        oa.batches.create(input_file_id="file-x", endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.NotFoundError, match="No batch found"):
        oa.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError, match="No such File"):
        oa.files.retrieve("file-nope")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        oa.files.create(file=("a.jsonl", b"{}"), purpose="fine-tune")
    uploaded = oa.files.create(file=("a.jsonl", b"{}\n"), purpose="batch")
    assert oa.files.retrieve(uploaded.id) == uploaded
    with pytest.raises(openai.BadRequestError, match="batches run"):
        oa.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/embeddings",
            completion_window="24h",
        )


def test_batch_items_answer_as_the_direct_endpoint(
    server: ScriptedOpenAI, oa: openai.OpenAI
) -> None:
    server.script("judge", [Reply.tool_call("grade", {"score": 3}), Reply.hang()])
    server.script("other", [Reply.delay(60, "no wait in a batch")])
    content = jsonl(2) + jsonl(1, model="other", prefix="o") + jsonl(1, model="ghost", prefix="g")
    ended = oa.batches.retrieve(openai_batch(oa, content).id)
    output = {line["custom_id"]: line for line in lines_of(oa, ended.output_file_id)}
    call = ChatCompletion.model_validate(output["k0"]["response"]["body"])
    assert call.choices[0].message.tool_calls is not None
    assert output["o0"]["response"]["body"]["choices"][0]["message"]["content"] == (
        "no wait in a batch"
    )
    errors = {line["custom_id"]: line["response"] for line in lines_of(oa, ended.error_file_id)}
    assert "cannot answer a request in a batch" in errors["k1"]["body"]["error"]["message"]
    assert errors["g0"]["status_code"] == 404
    assert errors["g0"]["body"]["error"]["code"] == "model_not_found"


def test_reset_forgets_batches_files_and_counts(server: ScriptedOpenAI, oa: openai.OpenAI) -> None:
    server.script("judge", "yes", times=None)
    server.script_batches(polls=9)
    batch = openai_batch(oa, jsonl(1))
    assert server.http_requests == 2  # the upload, the create
    oa.batches.retrieve(batch.id)
    assert server.http_requests == 3
    server.reset()
    assert server.batches == []
    assert server.requests == []
    assert server.http_requests == 0
    with pytest.raises(openai.NotFoundError):
        oa.batches.retrieve(batch.id)
    server.script("judge", ["yes", "direct"])
    again = openai_batch(oa, jsonl(1))  # the plan was forgotten too: ends at its first poll
    assert again.id != batch.id
    assert oa.batches.retrieve(again.id).status == "completed"
    oa.chat.completions.create(model="judge", messages=[])
    assert [r.batch_id for r in server.requests] == [again.id, None]  # direct: no batch
    assert server.http_requests == 5  # every path counts, the 404 after reset() too


def test_script_batches_checks_its_arguments(server: ScriptedOpenAI) -> None:
    with pytest.raises(ValueError, match="polls"):
        server.script_batches(polls=0)
    with pytest.raises(ValueError, match="positions"):
        server.script_batches(fail=[-1])
    with pytest.raises(TypeError, match="collection"):
        server.script_batches(fail=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expire_after"):
        server.script_batches(expire=True, expire_after=-1)
    with pytest.raises(ValueError, match="times"):
        server.script_batches(times=0)


# Anthropic


def test_anthropic_batch_progress_and_results(
    server: ScriptedOpenAI, an: anthropic.Anthropic
) -> None:
    server.script("claude", ["first", Reply.error(529, "overloaded"), "third"])
    server.script_batches(polls=3)
    batch = an.messages.batches.create(requests=anthropic_requests(3))
    assert batch.id.startswith("msgbatch_")
    assert batch.processing_status == "in_progress"
    assert batch.results_url is None
    assert batch.ended_at is None
    polled = [an.messages.batches.retrieve(batch.id) for _ in range(3)]
    assert [b.processing_status for b in polled] == ["in_progress", "in_progress", "ended"]
    # Anthropic's counts stay "processing" until the whole batch has ended
    assert polled[1].request_counts.processing == 3
    ended = polled[-1]
    assert ended.ended_at is not None
    assert ended.results_url is not None
    assert ended.request_counts.model_dump() == {
        "processing": 0,
        "succeeded": 2,
        "errored": 1,
        "canceled": 0,
        "expired": 0,
    }
    results = {r.custom_id: r.result for r in an.messages.batches.results(batch.id)}
    assert results["c0"].type == "succeeded"
    assert results["c2"].type == "succeeded"
    assert [block.type for block in results["c0"].message.content] == ["text"]
    assert results["c2"].message.content[0].text == "third"  # type: ignore[union-attr]
    assert results["c1"].type == "errored"
    assert results["c1"].error.error.type == "overloaded_error"
    items = server.requests
    expected = [("/v1/messages", batch.id, "claude")] * 3
    assert [(r.path, r.batch_id, r.model) for r in items] == expected
    credential = items[0].headers.get("x-api-key") or items[0].headers.get("authorization")
    assert credential in ("***", "Bearer ***")  # the batch's headers, redacted
    assert server.batches[0].provider == "anthropic"
    assert server.batches[0].status == "ended"


def test_anthropic_failures_expiry_and_cancel(
    server: ScriptedOpenAI, an: anthropic.Anthropic
) -> None:
    server.script("claude", "ok", times=None)
    server.script_batches(fail=[0], expire=True, expire_after=2, times=1)
    expiring = an.messages.batches.create(requests=anthropic_requests(3))
    ended = an.messages.batches.retrieve(expiring.id)
    assert ended.processing_status == "ended"
    assert ended.request_counts.expired == 1
    kinds = [r.result.type for r in an.messages.batches.results(expiring.id)]
    assert kinds == ["errored", "succeeded", "expired"]

    server.script_batches(polls=4, times=1)
    cancelled = an.messages.batches.create(requests=anthropic_requests(2))
    canceling = an.messages.batches.cancel(cancelled.id)
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None
    assert an.messages.batches.retrieve(cancelled.id).processing_status == "ended"
    kinds = [r.result.type for r in an.messages.batches.results(cancelled.id)]
    assert kinds == ["canceled", "canceled"]


def test_anthropic_list_and_refusals(server: ScriptedOpenAI, an: anthropic.Anthropic) -> None:
    server.script("claude", "ok", times=None)
    made = [an.messages.batches.create(requests=anthropic_requests(1)).id for _ in range(3)]
    page = an.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == made[::-1][:2]
    assert page.has_more
    assert [b.id for b in an.messages.batches.list(limit=2)] == made[::-1]
    assert all(isinstance(b, MessageBatch) for b in page.data)
    with pytest.raises(anthropic.NotFoundError):
        an.messages.batches.retrieve("msgbatch_nope")
    duplicate = anthropic_requests(1) * 2
    with pytest.raises(anthropic.BadRequestError, match="unique"):
        an.messages.batches.create(requests=duplicate)
    server.script_batches(polls=3, times=1)
    open_batch = an.messages.batches.create(requests=anthropic_requests(1))
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        an.messages.batches.results(open_batch.id)


@pytest.mark.asyncio
async def test_async_clients_read_the_same_endpoints(server: ScriptedOpenAI) -> None:
    server.script("judge", "yes")
    server.script("claude", "yes")
    async with server.async_client() as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(1)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        assert (await client.batches.retrieve(batch.id)).status == "completed"
    async with server.async_anthropic_client() as aclient:
        made = await aclient.messages.batches.create(requests=anthropic_requests(1))
        assert (await aclient.messages.batches.retrieve(made.id)).processing_status == "ended"
        results = [r async for r in await aclient.messages.batches.results(made.id)]
        assert [r.result.type for r in results] == ["succeeded"]


def test_concurrent_batches_each_get_their_own_answers(server: ScriptedOpenAI) -> None:
    def echo(request: Any) -> str:
        return "re: " + request.body["messages"][0]["content"]

    server.script("judge", echo, times=None)
    server.script("claude", echo, times=None)

    def run(n: int) -> list[tuple[str, str]]:
        if n % 2:
            with server.anthropic_client() as client:
                made = client.messages.batches.create(requests=anthropic_requests(5))
                client.messages.batches.retrieve(made.id)
                return [
                    (r.custom_id, r.result.message.content[0].text)  # type: ignore[union-attr]
                    for r in client.messages.batches.results(made.id)
                ]
        with server.client() as client:
            batch = client.batches.retrieve(openai_batch(client, jsonl(5)).id)
            return [
                (line["custom_id"], line["response"]["body"]["choices"][0]["message"]["content"])
                for line in lines_of(client, batch.output_file_id)
            ]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(run, range(8)))
    for n, answered in enumerate(answers):
        prefix = "c" if n % 2 else "k"
        assert answered == [(f"{prefix}{i}", f"re: question {i}") for i in range(5)]
    assert len({b.id for b in server.batches}) == 8
    assert len(server.requests) == 40
    for batch in server.batches:
        mine = [r for r in server.requests if r.batch_id == batch.id]
        assert len(mine) == 5
