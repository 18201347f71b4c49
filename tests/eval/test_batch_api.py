"""The batch API adapters over the real `openai` and `anthropic` clients, against the scripted
server's batch endpoints: submit, status, results, find and cancel, for both providers and for
judge models built on sync and async clients; failures are refinekit's typed errors, keyless.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion

from refinekit import JudgeMisconfigured, JudgeUnavailable
from refinekit.eval._batch_api import (
    BATCH_SHARE,
    BatchAPI,
    BatchStatus,
    ItemResult,
    batch_api,
)
from refinekit.judges import JudgeModel
from refinekit.testing import Reply, ScriptedOpenAI

MODEL = "batch-judge"
KEY = "sk-test-batchkey0123456789abcdefghijklmnopqrstuv"


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_client(server: ScriptedOpenAI, provider: str, kind: str, **options: Any) -> Any:
    if provider == "openai":
        if kind == "sync":
            return server.client(api_key=KEY, **options)
        return server.async_client(api_key=KEY, **options)
    if kind == "sync":
        return server.anthropic_client(api_key=KEY, **options)
    return server.async_anthropic_client(api_key=KEY, **options)


@pytest.fixture
async def judge(server: ScriptedOpenAI, provider: str, kind: str) -> AsyncIterator[JudgeModel]:
    """A JudgeModel of the provider on the kind's client (sync, or async)."""
    client = make_client(server, provider, kind)
    model = JudgeModel(client, MODEL)
    try:
        yield model
    finally:
        await model.aclose()
        closed = client.close()
        if asyncio.iscoroutine(closed):
            await closed


def kwargs(provider: str, n: int) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Is answer {n} right?"}],
        "temperature": 0.0,
        "timeout": 30.0,  # a client option: not sent in the batch
    }
    if provider == "anthropic":
        request["max_tokens"] = 8
    return request


def items(provider: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{i:064x}", kwargs(provider, i)) for i in range(n)]


def text_of(reply: Any) -> str:
    if isinstance(reply, ChatCompletion):
        return str(reply.choices[0].message.content)
    assert isinstance(reply, anthropic.types.Message)
    block = reply.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    return block.text


async def test_submit_poll_and_read_every_reply(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    server.script(MODEL, ["yes", "no", "yes"])
    server.script_batches(polls=3)
    api = batch_api(judge)
    assert isinstance(api, BatchAPI)
    assert api.provider == provider
    sent = items(provider, 3)
    batch_id = api.submit(sent, submission="run-1")
    recorded = server.batches[0]
    assert recorded.id == batch_id
    assert recorded.custom_ids == tuple(key for key, _ in sent)
    if provider == "openai":
        assert recorded.metadata == {"refinekit_submission": "run-1"}
    # each item is the direct request, without the client option
    bodies = [request.body for request in server.requests]
    assert bodies == [{k: v for k, v in body.items() if k != "timeout"} for _, body in sent]
    first, second, third = (api.status(batch_id) for _ in range(3))
    assert first.state == "in_progress"
    assert not first.finished
    assert not second.finished
    assert third == BatchStatus("ended", 3, 3, 0)
    assert third.finished
    if provider == "openai":  # OpenAI counts items as they are done
        assert (first.done, second.state, second.done) == (1, "finalizing", 3)
    else:  # Anthropic's counts stay "processing" until the batch ends
        assert (first.done, second.state) == (0, "in_progress")
    results = api.results(batch_id)
    assert [r.key for r in results] == [key for key, _ in sent]
    assert [text_of(r.reply) for r in results] == ["yes", "no", "yes"]
    assert all(r.error is None for r in results)
    kind = ChatCompletion if provider == "openai" else anthropic.types.Message
    assert all(isinstance(r.reply, kind) for r in results)


async def test_partial_failures_and_expiry_are_item_errors_without_the_key(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    server.script(MODEL, ["yes", Reply.error(400, f"bad request from key {KEY}")])
    server.script_batches(fail=[1], expire=True, expire_after=3)
    api = batch_api(judge)
    sent = items(provider, 4)
    batch_id = api.submit(sent, submission="run-2")
    status = api.status(batch_id)
    assert status.finished
    assert (status.total, status.done, status.failed) == (4, 4, 3)
    assert status.state == ("expired" if provider == "openai" else "ended")
    by_key = {r.key: r for r in api.results(batch_id)}
    assert set(by_key) == {key for key, _ in sent}
    keys = [key for key, _ in sent]
    assert text_of(by_key[keys[0]].reply) == "yes"
    failed, refused, expired = by_key[keys[1]], by_key[keys[2]], by_key[keys[3]]
    assert failed.reply is None
    assert "this item failed" in str(failed.error)
    assert refused.reply is None
    assert "bad request from key" in str(refused.error)
    assert KEY not in str(refused.error)
    assert expired == ItemResult(keys[3], None, "expired")


async def test_cancel_keeps_the_done_items_and_cancels_the_rest(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    server.script(MODEL, "yes", times=None)
    server.script_batches(polls=3)
    api = batch_api(judge)
    sent = items(provider, 4)
    batch_id = api.submit(sent, submission="run-3")
    assert not api.status(batch_id).finished  # half of the items are done
    api.cancel(batch_id)  # "cancelling" until its next poll
    assert server.batches[0].cancelled
    assert server.batches[0].status == ("cancelling" if provider == "openai" else "canceling")
    status = api.status(batch_id)
    assert status.finished
    assert status.state == ("cancelled" if provider == "openai" else "ended")
    assert (status.total, status.done, status.failed) == (4, 4, 2)
    results = api.results(batch_id)
    assert [r.error for r in results] == [None, None, "cancelled", "cancelled"]
    assert [text_of(r.reply) for r in results[:2]] == ["yes", "yes"]
    api.cancel(batch_id)  # a finished batch: nothing to do, no error


async def test_results_before_the_end_is_refused(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    server.script(MODEL, "yes", times=None)
    server.script_batches(polls=5)
    api = batch_api(judge)
    batch_id = api.submit(items(provider, 1), submission="early")
    with pytest.raises(ValueError, match="has not finished"):
        api.results(batch_id)


async def test_find_a_batch_created_before_a_crash(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    server.script(MODEL, "yes", times=None)
    api = batch_api(judge)
    since = time.time()
    other = api.submit(items(provider, 2), submission="someone-else")
    mine = api.submit(items(provider, 3), submission="mine")
    assert api.find("mine", 3, since) == mine
    if provider == "openai":  # by its metadata
        assert api.find("someone-else", 2, since) == other
        assert api.find("never-made", 3, since) is None
    else:  # by its size and time: the only batch of 3 since then
        assert api.find("whatever", 2, since) == other
        api.submit(items(provider, 3), submission="again")
        assert api.find("mine", 3, since) is None  # two match: none is sure
    assert api.find("mine", 3, time.time() + 3600) is None  # all older than `since`


async def test_a_failed_http_call_is_a_typed_error_without_the_key(
    server: ScriptedOpenAI, judge: JudgeModel, provider: str
) -> None:
    api = batch_api(judge)
    unknown = f"batch_{KEY}"  # the server's message echoes the id, and so the key
    with pytest.raises(JudgeMisconfigured) as refused:
        api.status(unknown)
    assert refused.value.status_code == 404
    assert KEY not in str(refused.value)
    assert KEY[:12] not in str(refused.value)


@pytest.mark.parametrize("kind", ["sync"])
def test_an_unreachable_provider_is_unavailable(
    provider: str, server: ScriptedOpenAI, kind: str
) -> None:
    if provider == "openai":
        client: Any = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key=KEY, max_retries=0)
    else:
        client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key=KEY, max_retries=0)
    with client, JudgeModel(client, MODEL) as model:
        api = batch_api(model)
        with pytest.raises(JudgeUnavailable) as down:
            api.submit(items(provider, 1), submission="down")
        assert KEY not in str(down.value)
        assert down.value.model == MODEL


@pytest.mark.parametrize("kind", ["sync"])
def test_bad_items_are_refused_before_any_call(
    server: ScriptedOpenAI, provider: str, kind: str
) -> None:
    with make_client(server, provider, "sync") as client:
        api = batch_api(JudgeModel(client, MODEL))
        good = items(provider, 1)
        with pytest.raises(ValueError, match="custom_id"):
            api.submit([("not ok!", kwargs(provider, 0))], submission="x")
        with pytest.raises(ValueError, match="submission"):
            api.submit(good, submission="a" * 65)
        with pytest.raises(ValueError, match="at least one"):
            api.submit([], submission="x")
        with pytest.raises(ValueError, match="its own custom_id"):
            api.submit(good * 2, submission="x")
        with pytest.raises(TypeError, match="kwargs"):
            api.submit([(good[0][0], "model=x")], submission="x")  # type: ignore[list-item]
        assert server.http_requests == 0
        assert good[0][1]["timeout"] == 30.0  # the caller's kwargs are left as they were
    with pytest.raises(TypeError, match="JudgeModel"):
        batch_api(client)


def test_the_documented_discount() -> None:
    assert BATCH_SHARE == {"openai": 0.5, "anthropic": 0.5}
