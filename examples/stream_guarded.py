"""@guarded over a streamed answer, offline: screened before anything is shown.

A ScriptedOpenAI server on 127.0.0.1 streams the answers over real HTTP. `@guarded` buffers a
stream: nothing reaches the consumer unscreened. A screen that can reject a part of the text
(`checks.excludes(...)`) closes the stream as soon as the forbidden text arrives, and the
refusal is published instead; a safe answer is published once screened, as it streamed.
Run: python examples/stream_guarded.py
"""

from __future__ import annotations

from typing import Any

from refinekit import checks, guarded
from refinekit.testing import Reply, ScriptedOpenAI

SAFE = "Refunds are accepted within 30 days."
UNSAFE = "Sure, the card number on file is 4111 1111 1111 1111, and more follows."


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the answers)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:

        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": question}],
                stream=True,
            )

        safe = guarded(screen=checks.excludes("card number"), refusal="Sorry, I can't share that.")(
            answer
        )
        # the server holds the unsafe stream after six chunks (" card", " number" are the 3rd
        # and 4th): only a client that closes it there gets on
        server.script("m", [Reply.text(SAFE), Reply.hang(after=6, then=Reply.text(UNSAFE))])
        print("safe answer:", list(safe.stream("Can I get a refund?")))
        print("unsafe answer:", list(safe.stream("What card do you have on file?")))
        unsafe = server.streamed("m")[1]
        print(
            f"unsafe stream: {unsafe.sent} of {unsafe.chunks} chunks sent; closed early: "
            f"{unsafe.client_closed}"
        )


if __name__ == "__main__":
    main()
