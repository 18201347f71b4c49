"""`refinekit demo --local`: the batch, bare and decorated, and the figures it prints.

No extra needed: the local model is the stand-in server (tests/fake_llama_server.py), scripted
with replies for the batch's own items (the benchmark's generator, the demo's seed): some right,
some not JSON, some with a value the invoice does not hold, one never valid; an answer without
its citation until the feedback asks for it, one never right. The figures the demo prints are
then known, and so is which item a correction or a retry rescued.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import fake_llama_command

import refinekit.local
from refinekit._structure.corrections import CHECK_MARKER
from refinekit.cli import main
from refinekit.cli._demo._local import ITEMS, SEED
from refinekit.cli._demo._synthetic import InvoiceItem, citation_items, invoices
from refinekit.local import LocalModel

FORMS = {"EUR": ("€", "euro", "EUR"), "USD": ("$", "dollar", "USD"), "GBP": ("£", "pound", "GBP")}


def exact(item: InvoiceItem, **changes: Any) -> str:
    truth = item.truth
    reply = {
        "number": truth.number,
        "vendor": truth.vendor,
        "currency": truth.currency,
        "total": float(truth.total),
    }
    return json.dumps({**reply, **changes})


def unstated_currency(item: InvoiceItem) -> str:
    """A currency the invoice's text states in none of its forms."""
    return next(
        c
        for c, forms in FORMS.items()
        if c != item.truth.currency and not any(f.lower() in item.text.lower() for f in forms)
    )


def script() -> list[dict[str, Any]]:
    bills = invoices(ITEMS, SEED)
    questions = citation_items(ITEMS, SEED)
    rules: list[dict[str, Any]] = []
    # corrections: items 1 to 3 are put right by the correction turn; item 4 never is
    for i in (1, 2, 3):
        rules.append({"contains": [bills[i].text], "last": CHECK_MARKER, "reply": exact(bills[i])})
    first = {
        1: f"The invoice {bills[1].truth.number} is from {bills[1].truth.vendor}.",  # not JSON
        2: exact(bills[2], currency=unstated_currency(bills[2])),  # valid, the text says another
        3: exact(bills[3], vendor="Globex Corp"),  # a vendor the invoice does not name
        4: json.dumps({"number": bills[4].truth.number}),  # never valid
    }
    for item in bills:
        rules.append({"contains": [item.text], "reply": first.get(item.index, exact(item))})
    # citations: question 1 forgets its citation until the feedback asks; question 2 is wrong
    good = [f"It is {q.fact} [{q.source}]." for q in questions]
    rules.append({"contains": [questions[1].question], "last": "Cite the source", "reply": good[1]})
    rules.append({"contains": [questions[1].question], "reply": f"It is {questions[1].fact}."})
    rules.append({"contains": [questions[2].question], "reply": "I do not know."})
    for q, answer in zip(questions, good, strict=True):
        rules.append({"contains": [q.question], "reply": answer})
    return rules


class Scripted(LocalModel):
    """The stand-in server with the batch's script, recording each request it gets."""

    def __init__(self, folder: Path) -> None:
        super().__init__(startup_timeout=60)
        self.folder = folder
        (folder / "script.json").write_text(json.dumps(script()))

    def _server_command(self, port: int) -> list[str]:
        return fake_llama_command(
            port,
            self.model,
            "--crash-on",
            "0",
            "--script",
            str(self.folder / "script.json"),
            "--requests",
            str(self.folder / "requests.jsonl"),
        )


@pytest.fixture
def ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, list[dict[str, Any]]]:
    monkeypatch.setattr(refinekit.local, "LocalModel", lambda *a, **k: Scripted(tmp_path))
    code = main(["demo", "--local"])
    out = capsys.readouterr().out
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    return code, out, [json.loads(line) for line in lines]


def row(out: str, name: str) -> list[str]:
    """The figures on the table row of `name`."""
    (line,) = [
        line
        for line in out.splitlines()
        if line.strip().startswith(name) and line.strip()[len(name) :][:1] == " "
    ]
    return line.strip()[len(name) :].split()


def test_the_batch_prints_each_way_s_figures(ran: tuple[int, str, list[dict[str, Any]]]) -> None:
    code, out, _ = ran
    assert code == 0, out
    assert f"10 invoices and 10 questions from the benchmark's generator (seed {SEED})," in out
    # valid, exact, calls, tokens (the stand-in counts 1 + 1 a call), time
    assert row(out, "bare (1 call)")[:4] == ["8/10", "6/10", "10", "10+10"]
    assert row(out, "@self_correct, checked schema")[:4] == ["9/10", "8/10", "14", "14+14"]
    assert row(out, "grounded decoding + @self_correct")[:4] == ["9/10", "9/10", "15", "15+15"]
    assert row(out, "bare (attempt 1 only)")[:3] == ["8/10", "10", "10+10"]
    assert row(out, "@retry_on_low_quality + retry_prompt")[:3] == ["9/10", "13", "13+13"]
    assert "extraction: valid 8 -> 9, exact 6 -> 9 of 10" in out
    assert "citations: passes 8 -> 9 of 10 (bare -> retries with feedback)" in out
    assert "items that crashed: 0" in out


def test_each_rescue_shows_the_correction_that_did_it(
    ran: tuple[int, str, list[dict[str, Any]]],
) -> None:
    _, out, _ = ran
    bills = invoices(ITEMS, SEED)
    checked = out[out.index("@self_correct, checked schema: ") :]
    grounded = out[out.index("grounded decoding + @self_correct: ") :]
    checked = checked[: checked.index("grounded decoding + @self_correct: ")]
    assert checked.startswith("@self_correct, checked schema: 2 item(s) rescued by a correction")
    assert "item 1 (bare: invalid) -> exact after 1 correction(s); the last said:" in checked
    assert "item 3 (bare: valid) -> exact after 1 correction(s); the last said:" in checked
    assert "'Globex Corp' does not appear in the text" in checked
    assert "1 item(s) ended in a typed refusal (CorrectionExhausted)" in checked
    # grounded: the currency the invoice does not state is refused too, and put right
    assert grounded.startswith("grounded decoding + @self_correct: 3 item(s) rescued")
    wrong = unstated_currency(bills[2])
    assert "item 2 (bare: valid) -> exact after 1 correction(s); the last said:" in grounded
    assert f"'{wrong}' is not what the text states" in grounded


def test_each_fixed_answer_shows_the_feedback_that_fixed_it(
    ran: tuple[int, str, list[dict[str, Any]]],
) -> None:
    _, out, _ = ran
    q = citation_items(ITEMS, SEED)[1]
    assert "@retry_on_low_quality + retry_prompt: 1 answer(s) fixed by a retry" in out
    fixed = out[out.index("question 1 -> passed at attempt 2; the feedback was:") :]
    assert f"Cite the source as [{q.source}]." in fixed
    assert f"answer: It is {q.fact} [{q.source}]." in fixed


def test_grounded_decoding_sends_each_invoice_s_own_spans(
    ran: tuple[int, str, list[dict[str, Any]]],
) -> None:
    _, _, requests = ran
    bills = invoices(ITEMS, SEED)
    grounded = [r for r in requests if "enum" in json.dumps(r.get("response_format") or {})]
    # one per call of the grounded way: 10 first calls and 5 corrections
    assert len(grounded) == 15
    for item in bills:
        asked = [r for r in grounded if r["messages"][3]["content"] == item.text]
        schema = asked[0]["response_format"]["schema"]["properties"]
        assert asked[0]["response_format"]["type"] == "json_object"
        assert item.truth.vendor in schema["vendor"]["enum"]
        assert item.truth.number in schema["number"]["enum"]
        assert float(item.truth.total) in schema["total"]["enum"]
        assert "Globex Corp" not in schema["vendor"]["enum"]
    # the bare and checked ways send no constraint
    assert sum("response_format" not in r for r in requests) == len(requests) - 15
