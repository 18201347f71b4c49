"""What one correction costs in prompt tokens, against a minimal hand-written loop.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_correction_cost.py          # the figures in docs
    .venv/bin/python benchmarks/bench_correction_cost.py --quick  # the same (it is fast)

Over HTTP to the scripted OpenAI-compatible server (`refinekit.testing.ScriptedOpenAI`), with
the real `openai` client, the same extraction conversation goes through two loops, each
getting the same unusable first reply and then a valid one:

- refinekit: `@self_correct(schema=Invoice)`, the default correction turn;
- minimal: what one writes by hand: the failed reply as an assistant turn, then
  "Invalid: <pydantic's error>. Reply with the corrected JSON." as a user turn.

Both requests carry the schema already (`response_format`, llama.cpp's dialect), as a
constrained request does. Prompt tokens are the server's count (words of the messages, plus
one per message), identical for both loops, so the ratio is exact, not a timing. Two prompt
sizes: the local-model benchmark's extraction conversation (system message, one worked
example, the invoice), and a one-line user message, the worst case for any fixed text a
correction adds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from _machine import machine
from pydantic import BaseModel, ValidationError

import refinekit
from refinekit import response_format, self_correct
from refinekit.testing import ScriptedOpenAI

TARGET = 1.05


class Invoice(BaseModel):
    number: str
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    total: Decimal


GOOD = '{"number": "FA32135", "vendor": "Beacon Security", "currency": "USD", "total": 954.88}'
INVOICE_TEXT = "Bill no. FA32135 | From: Beacon Security | Amount payable: USD 954.88"
SYSTEM = (
    "You extract data from invoices. Reply with only a JSON object with exactly these keys:\n"
    '- "number": the invoice number as written, a string\n'
    '- "vendor": the name of the company that issued the invoice, a string\n'
    '- "currency": "EUR", "USD" or "GBP"\n'
    '- "total": the total due, a number such as 1204.5'
)
PROMPTS: dict[str, list[dict[str, Any]]] = {
    "extraction (system, example, invoice)": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Invoice 2019-118 from Example Corp, total due GBP 1,020.50."},
        {
            "role": "assistant",
            "content": '{"number": "2019-118", "vendor": "Example Corp", "currency": "GBP", '
            '"total": 1020.50}',
        },
        {"role": "user", "content": INVOICE_TEXT},
    ],
    "one short user message": [{"role": "user", "content": f"Extract: {INVOICE_TEXT}"}],
}
FAILURES = {
    "a misnamed key": GOOD.replace('"total"', '"amount_paid"'),
    "a wrong value": GOOD.replace('"USD"', '"dollars"'),
    "words after a number": GOOD.replace("954.88", "954.88 USD"),
    "not JSON at all": "The invoice FA32135 is from Beacon Security, USD 954.88.",
}


def prompt_tokens(server: ScriptedOpenAI, model: str) -> int:
    total = 0
    for request in server.requests_for(model):
        assert request.body is not None
        messages: Sequence[Mapping[str, Any]] = request.body["messages"]
        total += sum(1 + len(str(m["content"]).split()) for m in messages)
    return total


def measure(prompt: list[dict[str, Any]], bad: str) -> tuple[int, int]:
    """(refinekit's, the minimal loop's) prompt tokens for one correction of `bad`."""
    constrained = response_format(Invoice, dialect="llama.cpp")
    with ScriptedOpenAI() as server, server.client() as client:
        for model in ("refinekit", "minimal"):
            server.script(model, [bad, GOOD])

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(
                model="refinekit", messages=messages, **constrained
            )

        with refinekit.job() as job:
            extract(prompt)
        messages = list(prompt)
        reply = client.chat.completions.create(model="minimal", messages=messages, **constrained)
        text = reply.choices[0].message.content or ""
        try:
            Invoice.model_validate_json(text)
        except ValidationError as e:
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"Invalid: {e}. Reply with the corrected JSON."},
            ]
        client.chat.completions.create(model="minimal", messages=messages, **constrained)
        ours, minimal = prompt_tokens(server, "refinekit"), prompt_tokens(server, "minimal")
        assert job.usage.prompt_tokens == ours  # refinekit counts what the wire carried
        assert job.corrections_used == 1
        return ours, minimal


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same run (it takes seconds)")
    parser.parse_args(argv)
    print("refinekit: prompt tokens of a one-correction job against a minimal hand-written loop")
    for line in machine(["refinekit", "openai", "pydantic"]):
        print(line)
    print(f"target     refinekit / minimal <= {TARGET} (the request already carries the schema)")
    print()
    print("| prompt | first reply | refinekit | minimal | ratio | result |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for prompt_name, prompt in PROMPTS.items():
        for failure, bad in FAILURES.items():
            ours, minimal = measure(prompt, bad)
            ratio = ours / minimal
            worst = max(worst, ratio) if prompt_name.startswith("extraction") else worst
            result = "ok" if ratio <= TARGET else "over"
            print(f"| {prompt_name} | {failure} | {ours} | {minimal} | {ratio:.3f} | {result} |")
    print()
    print(f"worst ratio on the extraction prompt: {worst:.3f}")
    print(json.dumps({"worst_extraction_ratio": round(worst, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
