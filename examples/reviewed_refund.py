"""@reviewed on the refund scenario: fix the answer's text, never re-run the work.

Retrieval has already happened, through a recorded tool (`lookup_policy`). The model's draft
promises an unconditional refund, dropping the policy's conditions. The reviewer (a criteria
judge with a "keeps_conditions" criterion) rejects it; the default reviser asks the same model
for one text-only revision, with no tools offered; the revision restores "unused and within
seven days", passes, and is published. The function and its tool ran once.

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL, REFINEKIT_MODEL and REFINEKIT_JUDGE_MODEL (and
OPENAI_API_KEY if the endpoint needs a key); the wording and the verdicts are then the models':

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_MODEL=qwen2.5 \
        REFINEKIT_JUDGE_MODEL=qwen2.5 python examples/reviewed_refund.py
"""

from __future__ import annotations

import os
import re
from contextlib import ExitStack

import openai

import refinekit
from refinekit import AnswerRejected, Event, judges, reviewed
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

POLICY = "An unused order may be refunded within seven days of delivery."
ORDER = "A-1001"
QUESTION = f"Can I get a refund for order {ORDER}?"
KEEPS_CONDITIONS = judges.Criterion(
    "keeps_conditions",
    "Does the answer keep every condition that the tool results put on a refund?",
    when_false="Keep the policy's conditions: the order must be unused and the refund asked "
    "for within seven days of delivery.",
)

calls = {"answer": 0, "lookup_policy": 0}


@refinekit.tool
def lookup_policy(order_id: str) -> str:
    """Retrieval: the refund policy for an order (recorded, so the judge sees its result)."""
    calls["lookup_policy"] += 1
    return POLICY


# --- what the scripted server answers (unused on a real endpoint) --------------------------------

DRAFT = f"Yes, you will get a full refund for order {ORDER}."
REVISION = f"Yes, order {ORDER} can be refunded if it is unused and within seven days of delivery."


def scripted_judge(request: RecordedRequest) -> Reply:
    """Stands in for the judge model: YES when the answer keeps both conditions."""
    prompt = request.body["messages"][-1]["content"] if request.body else ""
    match = re.search(r"<answer>\n(.*?)\n</answer>", prompt, re.DOTALL)
    answer = match.group(1) if match else prompt
    holds = "unused" in answer and "seven days" in answer
    return Reply.text("YES", {"YES": 0.95, "NO": 0.05}) if holds else Reply.text("NO")


SCRIPTED_MODEL = [DRAFT, REVISION]  # the draft, then the text-only revision
SCRIPTED_JUDGE = [scripted_judge, scripted_judge]  # the draft, then the revision


def endpoint(stack: ExitStack) -> tuple[openai.OpenAI, str, str, ScriptedOpenAI | None]:
    """The client, the model, the judge model, and the scripted server when there is one."""
    model = os.environ.get("REFINEKIT_MODEL")
    judge_model = os.environ.get("REFINEKIT_JUDGE_MODEL")
    if os.environ.get("OPENAI_BASE_URL") and model and judge_model:
        print(f"real endpoint (OPENAI_BASE_URL), model {model!r}, judge model {judge_model!r}")
        client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
        return stack.enter_context(client), model, judge_model, None
    server = stack.enter_context(ScriptedOpenAI())
    server.script("assistant", SCRIPTED_MODEL)
    server.script("judge", SCRIPTED_JUDGE)
    print("(offline: scripted: a ScriptedOpenAI server on 127.0.0.1 plays the assistant and the")
    print(" judge; its replies are scripted, so this shows the wiring, not a model's quality)")
    return stack.enter_context(server.client()), "assistant", "judge", server


def show(event: Event) -> None:
    """Print what the review did (a hook: refinekit.subscribe)."""
    if event.kind == "review" and event.verdict is not None:
        outcome = "passed" if event.verdict.passed else "failed"
        why = f": {event.feedback}" if event.feedback else ""
        print(f"  review of draft {event.attempt}: {outcome}{why}")
    elif event.kind == "revision":
        print(f"  revision {event.attempt} requested (text only, no tools offered)")


def main() -> None:
    with ExitStack() as stack:
        client, model, judge_model, server = endpoint(stack)
        reviewer = judges.criteria(judges.JudgeModel(client, judge_model), [KEEPS_CONDITIONS])

        @reviewed(
            judge=reviewer,
            mode="enforce",  # "shadow" while calibrating: judge and record, never rewrite
            max_revisions=1,
            client=client,  # the default reviser asks this model, with no tools
            model=model,
            judge_timeout=10.0,  # generous for a real endpoint; the scripted one answers at once
            budget=30.0,  # the review and every revision together
        )
        def answer(question: str, order_id: str) -> str:
            calls["answer"] += 1
            policy = lookup_policy(order_id)  # retrieval, done once: a revision never repeats it
            reply = client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "system", "content": "Answer the customer from the policy."},
                    {"role": "user", "content": f"Policy: {policy}\n\n{question}"},
                ],
            )
            draft = reply.choices[0].message.content or ""
            print(f"draft: {draft}")
            return draft

        print(f"question: {QUESTION}")
        with refinekit.subscribe(show):
            try:
                print(f"published: {answer(QUESTION, ORDER)}")
            except AnswerRejected as e:
                # An application message or a human review; never the rejected draft.
                print(f"not published ({e.reason}): the answer goes to a human for review")
        print(f"answer ran {calls['answer']} time, lookup_policy ran {calls['lookup_policy']} time")
        if server is not None:
            revision = server.requests_for(model)[-1].body or {}
            offered = "tools" in revision or "tool_choice" in revision
            print(f"the revision request offered tools: {'yes' if offered else 'no'}")


if __name__ == "__main__":
    main()
