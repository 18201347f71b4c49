"""@retry_on_low_quality over a streamed text answer, offline: buffered and provisional.

A ScriptedOpenAI server on 127.0.0.1 streams the answers over real HTTP. The first answer
promises what the policy does not: `checks.excludes("guaranteed")` rejects it as soon as the
word arrives (a rule that can reject a part stops the stream there, no judge is asked), and
the retry's answer passes. Buffered (the default), the consumer sees only the answer that
passed; provisional, it sees the chunks as they come, a Reset, then the retry's chunks.
Run: python examples/stream_retry.py
"""

from __future__ import annotations

from typing import Any

from refinekit import Reset, checks, retry_on_low_quality
from refinekit.testing import Reply, ScriptedOpenAI

POOR = "Refunds are guaranteed, whatever happens to the order."
GOOD = "Refunds are accepted within 30 days (policies/refunds.md)."


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the answers)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:

        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": question}],
                stream=True,
            )

        for mode in ("buffered", "provisional"):
            server.script("m", [Reply.hang(after=3, then=Reply.text(POOR)), Reply.text(GOOD)])
            decorated = retry_on_low_quality(
                evaluator=checks.excludes("guaranteed"), max_retries=1, stream_mode=mode
            )(answer)
            shown: list[str] = []
            for item in decorated.stream("Can I get a refund?"):
                if isinstance(item, Reset):
                    shown.append(f"<reset: {item.cause}>")
                else:
                    shown.append(item)
            print(f"{mode}: {shown}")
            (first,) = [s for s in server.streamed("m") if s.fault == "hang"]  # the held one
            print(f"  first answer's stream closed early: {first.client_closed}")
            server.reset()


if __name__ == "__main__":
    main()
