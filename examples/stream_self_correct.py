"""@self_correct over a streamed reply, end to end and offline: fields as they complete.

A ScriptedOpenAI server on 127.0.0.1 streams the replies over real HTTP (server-sent events,
as OpenAI sends them). The first reply writes a currency outside the schema's choices: the
stream is closed at that field, before the rest of the reply is generated. With
early_abort=True the model writes the whole object again: the consumer gets a Reset (clear
the form), and the correction's stream fills the form again (the default, "resume", keeps the
fields that passed: examples/stream_resume.py). With
early_abort=False the failed reply is read to its end instead, so its correction keeps the
total written after the bad currency (fewer corrections, more tokens generated).
Run: python examples/stream_self_correct.py
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from refinekit import Final, Partial, Reset, self_correct
from refinekit.testing import RecordedStream, Reply, ScriptedOpenAI


class Invoice(BaseModel):
    number: str
    currency: Literal["EUR", "USD"]
    total_cents: int


BAD = ['{"number": "INV-7", ', '"currency": "GBP", ', '"total_cents": 1250, ', '"note": "..."}']
GOOD = '{"number": "INV-7", "currency": "EUR", "total_cents": 1250}'


def first_stream(server: ScriptedOpenAI) -> RecordedStream:
    """The stream that answered the first request (`streamed()` lists them as they ended)."""
    request = server.requests[0]
    return next(s for s in server.streamed() if s.request == request)


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the replies)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:
        # the server holds the first stream after its second chunk, as a slow model would:
        # only a client that closes it there gets on
        bad = Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD))
        server.script("m", [bad, Reply.text(GOOD, chunks=6), Reply.text(GOOD)])

        def create(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )

        extract = self_correct(schema=Invoice, early_abort=True)(create)

        conversation = [{"role": "user", "content": "Extract the invoice: INV-7, 12.50 EUR"}]
        for item in extract.stream(conversation):
            if isinstance(item, Partial):
                print(f"form (attempt {item.attempt}): {item.value}")
            elif isinstance(item, Reset):
                print(f"reset (stream closed early: {item.aborted}): {item.reason}")
            elif isinstance(item, Final):
                print(f"final (attempt {item.attempt}): {item.value!r}")
        first = first_stream(server)
        sent, closed = f"{first.sent} of {first.chunks}", first.client_closed
        print(f"first stream: {sent} chunks sent; closed: {closed}")
        print("the plain call returns the value:", repr(extract(conversation)))

        server.reset()
        server.script("m", [Reply.text("".join(BAD), chunks=BAD), Reply.text(GOOD, chunks=6)])

        read_on = self_correct(schema=Invoice, early_abort=False)(create)
        items = list(read_on.stream(conversation))
        reset = next(item for item in items if isinstance(item, Reset))
        first = first_stream(server)
        print(f"early_abort=False: {first.sent} of {first.chunks} chunks read", end="; ")
        print(f"closed early: {reset.aborted}; final: {items[-1].value!r}")
        body = server.requests[1].body or {}
        print("the correction's template:", body["messages"][-1]["content"].splitlines()[-1])


if __name__ == "__main__":
    main()
