"""@self_correct(early_abort="resume"): a failed stream resumed from its validated fields.

A ScriptedOpenAI server on 127.0.0.1 streams the replies over real HTTP. The first reply writes
a currency outside the schema's choices: the stream is closed at that field, and the next
request keeps the number that had already passed. The server is an OpenAI-compatible one
other than OpenAI's own (as llama.cpp's, vLLM's or Ollama's are), so the reply's text up to the
failed field is sent as the start of the assistant's reply (prefill) and the model writes only
the rest: the form keeps its number (no Reset), and the final value is validated whole. Over
OpenAI's own API the correction restates the kept fields instead (early_abort="restate"),
and `response_format` pins them in the strict schema.
Run: python examples/stream_resume.py
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from refinekit import Final, Partial, Reset, response_format, self_correct
from refinekit.testing import Reply, ScriptedOpenAI


class Invoice(BaseModel):
    number: str
    currency: Literal["EUR", "USD"]
    total_cents: int


BAD = ['{"number": "INV-7", ', '"currency": "GBP", ', '"total_cents": 1250}']
REST = ' "EUR", "total_cents": 1250}'  # what the model writes after the kept prefix
GOOD = '{"number": "INV-7", "currency": "EUR", "total_cents": 1250}'
CONVERSATION = [{"role": "user", "content": "Extract the invoice: INV-7, 12.50 EUR"}]


def main() -> None:
    print("(offline: a ScriptedOpenAI server on 127.0.0.1 streams the replies)")
    with ScriptedOpenAI() as server, server.client(timeout=5, max_retries=0) as client:
        # the server holds the first stream after its second chunk: only a client that
        # closes it there gets on
        bad = Reply.hang(after=2, then=Reply.text("".join(BAD), chunks=BAD))
        server.script("m", [bad, Reply.text(REST, chunks=3)])

        def create(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(
                model="m",
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                **response_format(Invoice),
            )

        extract = self_correct(schema=Invoice, early_abort="resume")(create)
        for item in extract.stream(CONVERSATION):
            if isinstance(item, Partial):
                print(f"form (attempt {item.attempt}): {item.value}")
            elif isinstance(item, Reset):
                print(f"reset: {item.reason}")
            elif isinstance(item, Final):
                print(f"final (attempt {item.attempt}): {item.value!r}")
        resumed = (server.requests[1].body or {})["messages"]
        print("the resumed request ends with:", resumed[-1])

        server.reset()
        server.script("m", [bad, Reply.text(GOOD, chunks=4)])
        restated = self_correct(schema=Invoice, early_abort="restate")(create)
        print("restate:", repr(restated(CONVERSATION)))
        body = server.requests[1].body or {}
        print("its correction says:", body["messages"][-1]["content"].splitlines()[2])
        schema = body["response_format"]["json_schema"]["schema"]
        print("its schema pins the number:", schema["properties"]["number"])


if __name__ == "__main__":
    main()
