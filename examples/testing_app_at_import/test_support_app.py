"""Tests of an app whose client is built at import, on the session-wide scripted server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

YES = Reply.text("YES", {"YES": 0.95, "NO": 0.05})
NO = Reply.text("NO", {"NO": 0.9, "YES": 0.1})


def test_the_app_talks_to_the_scripted_server(
    support_app: ModuleType, server: ScriptedOpenAI
) -> None:
    server.script(support_app.ANSWER_MODEL, "Refunds take 5 days.")
    server.script(support_app.JUDGE_MODEL, YES)

    assert support_app.answer("How long do refunds take?") == "Refunds take 5 days."
    assert [r.model for r in server.requests] == [support_app.ANSWER_MODEL, support_app.JUDGE_MODEL]
    assert server.requests[0].headers["authorization"] == "Bearer ***"  # the key never stored


def test_a_retry_gets_the_judges_feedback(support_app: ModuleType, server: ScriptedOpenAI) -> None:
    # the requests of the test before are gone: this test sees its own
    server.script(support_app.ANSWER_MODEL, ["It depends.", "Refunds take 5 days."])
    server.script(support_app.JUDGE_MODEL, [NO, YES])

    assert support_app.answer("How long do refunds take?") == "Refunds take 5 days."
    retried = server.requests_for(support_app.ANSWER_MODEL)[1]
    assert "Answer the customer's question directly." in str(retried.body)


def test_many_concurrent_calls_share_one_reply_for_ever(
    support_app: ModuleType, server: ScriptedOpenAI
) -> None:
    def echo(request: RecordedRequest) -> str:  # one reply, built from each request
        question = str((request.body or {})["messages"][-1]["content"])
        return "You asked: " + question.removeprefix("Customer question: ")

    server.script(support_app.ANSWER_MODEL, echo, times=None)
    server.script(support_app.JUDGE_MODEL, YES, times=None)  # no [YES] * 40

    questions = [f"question {i}" for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(support_app.answer, questions))

    assert answers == [f"You asked: {q}" for q in questions]
    assert len(server.requests_for(support_app.JUDGE_MODEL)) == 40
