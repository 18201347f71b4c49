"""Enforce mode never shows text it has not approved, whatever else the streamed reply holds.

A streamed reply that holds text and a tool call (what a model writing "Let me look that up"
and calling a tool in one turn sends) used to reach the consumer of `fn.stream(...)` under
`@reviewed(mode="enforce")` unreviewed, forbidden phrase and all. Fuzzed here over real HTTP
(the openai clients, sync and async): the text split anywhere, a forbidden phrase anywhere in
it (whole or across pieces), a reviser that does or does not remove it. Every `str` the
consumer gets was approved by the judge before it got it; a rejected reply shows nothing.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import text_beside_tool_call
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import refinekit
from refinekit import AnswerRejected, EvaluationRequest, RevisionRequest, reviewed
from refinekit.testing import ScriptedOpenAI, set_testing

FORBIDDEN = "FORBIDDEN"

fuzz = settings(
    max_examples=30,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
names = itertools.count(1)
pieces = st.lists(
    st.one_of(
        st.sampled_from(["the ", "FORBIDDEN ", "FORBID", "DEN ", "draft ", "text ", "\n"]),
        st.text(max_size=12),
    ),
    max_size=8,
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI() as server, set_testing():
        yield server


approved: list[str] = []  # the drafts the judge has approved so far (this example's)


def check_shown(item: Any) -> None:
    if isinstance(item, str):
        assert any(item in text for text in approved), f"{item!r} shown before it was approved"


def judge(request: EvaluationRequest) -> bool:
    passed = FORBIDDEN not in request.answer
    if passed:
        approved.append(request.answer)
    return passed


def consume(
    server: ScriptedOpenAI, mode: str, model: str, decorator: Any, items: list[Any]
) -> None:
    """Each item of the decorated function's stream into `items`, checked as it comes."""
    messages = [{"role": "user", "content": "Where is order A-1?"}]
    if mode == "sync":
        with server.client(max_retries=0) as client:

            def impl(question: str) -> Any:
                return client.chat.completions.create(model=model, messages=messages, stream=True)

            for item in decorator(impl).stream("Where is order A-1?"):
                items.append(item)
                check_shown(item)
        return

    async def run() -> None:
        async with server.async_client(max_retries=0) as client:

            async def aimpl(question: str) -> Any:
                return await client.chat.completions.create(
                    model=model, messages=messages, stream=True
                )

            async for item in decorator(aimpl).stream("Where is order A-1?"):
                items.append(item)
                check_shown(item)

    asyncio.run(run())


@pytest.mark.reliability
@pytest.mark.parametrize("mode", ["sync", "async"])
@fuzz
@given(text=pieces, removes=st.booleans())
def test_enforce_shows_only_approved_text_beside_a_tool_call(
    server: ScriptedOpenAI, mode: str, text: list[str], removes: bool
) -> None:
    approved.clear()
    model = f"answer-{next(names)}"
    server.script(model, text_beside_tool_call(text))

    def reviser(request: RevisionRequest) -> str:
        return request.draft.replace(FORBIDDEN, "") if removes else request.draft

    decorator = reviewed(judge=judge, reviser=reviser, max_revisions=1)
    whole = "".join(text)
    items: list[Any] = []
    if FORBIDDEN in whole and not removes:
        with pytest.raises(AnswerRejected) as rejected:
            consume(server, mode, model, decorator, items)
        assert items == []
        assert rejected.value.drafts == (whole, whole)
        return
    consume(server, mode, model, decorator, items)
    shown = "".join(i for i in items if isinstance(i, str))
    calls = [i for i in items if isinstance(i, refinekit.ToolCallChunk)]
    assert FORBIDDEN not in shown
    assert shown == ("" if not whole.strip() else whole.replace(FORBIDDEN, ""))
    assert [c.name for c in calls] == ["lookup", None]  # the round's tool call, after the text
    assert items[-len(calls) :] == calls
