"""@self_correct over a streamed reply, end to end and offline: fields as they complete.

A ScriptedOpenAI server on 127.0.0.1 streams the replies over real HTTP (server-sent events,
as OpenAI sends them). The first reply writes a currency outside the schema's choices: the
stream is closed at that field, before the rest of the reply is generated, the consumer gets a
Reset (clear the form), and the correction's stream fills the form again.
Run: python examples/stream_self_correct.py
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from refinekit import Final, Partial, Reset, self_correct
from refinekit.testing import Reply, ScriptedOpenAI


class Invoice(BaseModel):
    number: str
    currency: Literal["EUR", "USD"]
    total_cents: int


BAD = ['{"number": "INV-7", ', '"currency": "GBP", ', '"total_cents": 1250, ', '"note": "..."}']
GOOD = '{"number": "INV-7", "currency": "EUR", "total_cents": 1250}'


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the replies)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:
        # the server holds the first stream after its second chunk, as a slow model would:
        # only a client that closes it there gets on
        bad = Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD))
        server.script("m", [bad, Reply.text(GOOD, chunks=6), Reply.text(GOOD)])

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )

        conversation = [{"role": "user", "content": "Extract the invoice: INV-7, 12.50 EUR"}]
        for item in extract.stream(conversation):
            if isinstance(item, Partial):
                print(f"form (attempt {item.attempt}): {item.value}")
            elif isinstance(item, Reset):
                print(f"reset (stream closed early: {item.aborted}): {item.reason}")
            elif isinstance(item, Final):
                print(f"final (attempt {item.attempt}): {item.value!r}")
        first = server.streamed("m")[0]
        sent, closed = f"{first.sent} of {first.chunks}", first.client_closed
        print(f"first stream: {sent} chunks sent; closed: {closed}")
        print("the plain call returns the value:", repr(extract(conversation)))


if __name__ == "__main__":
    main()
