"""@reviewed over a streamed draft, offline: enforce publishes approved text; shadow passes it.

A ScriptedOpenAI server on 127.0.0.1 streams the drafts over real HTTP. In "enforce" mode the
draft is buffered and reviewed whole; only an approved draft reaches the consumer, as deltas
(a rejected one never does). In "shadow" mode the stream goes through as it comes and the
complete draft is reviewed aside: its verdict is an event, the consumer's text is unchanged.
Run: python examples/stream_reviewed.py
"""

from __future__ import annotations

from typing import Any

import refinekit
from refinekit import EvaluationRequest, reviewed
from refinekit.testing import Reply, ScriptedOpenAI

CITED = "Refunds are accepted within 30 days [policies/refunds.md]."
UNCITED = "Refunds are always accepted."


def cites_the_policy(request: EvaluationRequest) -> bool:
    return "[policies/refunds.md]" in request.answer


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the drafts)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:

        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": question}],
                stream=True,
            )

        server.script("m", [Reply.text(CITED), Reply.text(UNCITED), Reply.text(UNCITED)])
        enforce = reviewed(judge=cites_the_policy, max_revisions=0)(answer)
        print("enforce, approved:", list(enforce.stream("Can I get a refund?")))
        try:
            list(enforce.stream("Can I get a refund?"))
        except refinekit.AnswerRejected as e:
            print(f"enforce, rejected: nothing published ({type(e).__name__})")
        reviews: list[refinekit.Event] = []
        shadow = reviewed(judge=cites_the_policy, mode="shadow")(answer)
        with refinekit.subscribe(lambda e: reviews.append(e) if e.kind == "review" else None):
            print("shadow, passed through:", list(shadow.stream("Can I get a refund?")))
        (review,) = reviews
        assert review.verdict is not None
        print(f"shadow's review, aside: passed={review.verdict.passed}: {review.verdict.feedback}")


if __name__ == "__main__":
    main()
