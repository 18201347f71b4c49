"""@self_correct over a dataset with Ray Data: one job (and correction budget) per row.

Each document is one row; a pool of Ray actors extracts an `Invoice` from each with a
decorated method, and `.outcome()` gives, per row, the value, the corrections it took and the
model's token usage, returned as columns. A row whose extraction fails gets its error in a
column instead of failing the batch. The driver then sums the usage.

Needs refinekit[ray]. Offline by default: a ScriptedOpenAI server on 127.0.0.1, started here,
plays the model and the workers reach it by its URL. With OPENAI_BASE_URL and REFINEKIT_MODEL
set, the workers call that endpoint instead (the API key is read from OPENAI_API_KEY in each
worker's environment: it is not shipped with the task). RAY_ADDRESS connects to a cluster.
Run: python examples/ray_extraction.py
"""

from __future__ import annotations

import os
import re
from contextlib import ExitStack
from typing import Any

import openai
import ray
import ray.data
from pydantic import BaseModel

from refinekit import JsonParseError, ResponseValidationError, self_correct
from refinekit.testing import RecordedRequest, ScriptedOpenAI

DOCUMENTS = [
    "Invoice 101 from Acme, total due 120 EUR.",
    "Invoice 102 from Globex: amount 75 EUR, payable in 30 days.",
    "Invoice 103 from Initech, total due 310 EUR.",
    "Invoice 104 from Umbrella, 42 EUR.",
    "Invoice 105 from Hooli, total due 99 EUR.",
    "Invoice 106 from Stark, amount 1200 EUR.",
    "A blurry scan: nothing legible.",
    "Invoice 108 from Wayne, total due 18 EUR.",
]


class Invoice(BaseModel):
    number: int
    total_eur: int


class Extractor:
    """One per Ray actor: its own client, and a decorated method the rows are extracted with."""

    def __init__(self, base_url: str, model: str) -> None:
        api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        self.model = model

    @self_correct(schema=Invoice, max_corrections=2)
    def extract(self, messages: list[dict[str, Any]]) -> Any:
        return self.client.chat.completions.create(model=self.model, messages=messages)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        columns: dict[str, list[Any]] = {
            key: []
            for key in ("text", "invoice", "total_eur", "corrections", "calls", "tokens", "error")
        }
        for text in batch["text"]:
            prompt = f"Extract the invoice number and total (EUR) as JSON from: {text}"
            try:  # each row its own call, so its own job and correction budget
                outcome = self.extract.outcome([{"role": "user", "content": prompt}])
            except (
                JsonParseError,
                ResponseValidationError,
            ) as e:  # this row failed; the others go on
                value, corrections, usage, error = None, e.corrections_used, e.usage, str(e)
            else:
                value, corrections, usage = outcome.value, outcome.corrections_used, outcome.usage
                error = None
            columns["text"].append(str(text))
            columns["invoice"].append(value.number if value else None)
            columns["total_eur"].append(value.total_eur if value else None)
            columns["corrections"].append(corrections)
            columns["calls"].append(usage.model_calls)
            columns["tokens"].append(usage.total_tokens)
            columns["error"].append(error)
        return columns


def scripted_model(request: RecordedRequest) -> str:
    """A stand-in model: odd invoices first answer in prose (a correction each)."""
    messages = (request.body or {})["messages"]
    found = re.search(r"Invoice (\d+)\D+?(\d+) EUR", str(messages[0]["content"]))
    if found is None:
        return "I cannot read this document."
    number, total = found.groups()
    if int(number) % 2 and len(messages) == 1:
        return f"Invoice {number}, total {total} euros."
    return f'{{"number": {number}, "total_eur": {total}}}'


def main() -> None:
    with ExitStack() as stack:
        base_url, model = os.environ.get("OPENAI_BASE_URL"), os.environ.get("REFINEKIT_MODEL")
        if not (base_url and model):
            server = stack.enter_context(ScriptedOpenAI())
            server.script("extractor", scripted_model, times=None)
            base_url, model = server.base_url, "extractor"
            print("offline: a ScriptedOpenAI server on 127.0.0.1 plays the model")
        if os.environ.get("RAY_ADDRESS"):
            ray.init()
        else:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        stack.callback(ray.shutdown)

        rows = (
            ray.data.from_items([{"text": text} for text in DOCUMENTS])
            .map_batches(
                Extractor,
                fn_constructor_kwargs={"base_url": base_url, "model": model},
                batch_size=4,
                compute=ray.data.ActorPoolStrategy(size=2),  # two actors
            )
            .take_all()
        )
        rows.sort(key=lambda row: row["text"])
        for row in rows:
            if row["error"] is None:
                print(
                    f"invoice {row['invoice']}: {row['total_eur']} EUR, "
                    f"{row['corrections']} correction(s), {row['calls']} call(s)"
                )
            else:
                print(f"failed after {row['corrections']} correction(s): {row['error'][:60]}")
        extracted = sum(row["error"] is None for row in rows)
        print(
            f"{extracted}/{len(rows)} extracted; model calls {sum(r['calls'] for r in rows)}, "
            f"tokens {sum(r['tokens'] for r in rows)}, "
            f"corrections {sum(r['corrections'] for r in rows)}"
        )


if __name__ == "__main__":
    main()
