"""The local_model tier: refinekit against a real model (llama.cpp + SmolLM2-135M) on 127.0.0.1.

Run with `pytest -m local_model --local-model` (`.ci/run` does). Nothing here asserts a
wording or a quality: a 135M model is weak. What holds for any model is asserted: a valid
typed value or a typed error, never a hole; corrections carry the real problems and an
instance template, never the schema; logprob probabilities parsed from a real reply and marked
as such; the server's quirks mapped to the right refinekit error; no server process outliving
its block.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import openai
import pytest
from pydantic import BaseModel

import refinekit
from refinekit import (
    ContextDocument,
    CorrectionExhausted,
    EvaluationRequest,
    InSource,
    JudgeMisconfigured,
    JudgeReplyError,
    LowQualityAnswer,
    Verdict,
    in_source,
    provenance,
    response_format,
    retry_on_low_quality,
    self_correct,
)
from refinekit._decorators.correct import CHECK_MARKER
from refinekit.judges import Criterion, JudgeModel, criteria, rating
from refinekit.local import LocalModel, LocalModelError

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalModel]:
    with LocalModel() as model:
        yield model


@pytest.fixture(autouse=True)
def _server_still_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the shared server: if the server died, say so (how, its log, the fix).

    The test itself only sees its client's `APIConnectionError`; this turns a crash into a
    `LocalModelError` at teardown, with the end of the server's log.
    """
    yield
    if "local" in request.fixturenames:
        model: LocalModel = request.getfixturevalue("local")
        model.check(wait=2.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped by its parent counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# --- the server's lifecycle -------------------------------------------------------------------


def test_the_server_answers_and_is_gone_after_the_block() -> None:
    with LocalModel() as model:
        assert model.running
        # start() returned after a test completion: the model computes on this CPU
        assert "POST /v1/chat/completions" in model.log_tail()
        assert model.base_url.startswith("http://127.0.0.1:")
        with model.client() as client:
            listed = client.models.list()
        assert [m.id for m in listed.data] == [model.model]
        process = model._process
        assert process is not None
        pid = process.pid
    assert not model.running
    assert not _alive(pid)
    with pytest.raises(RuntimeError, match="not running"):
        _ = model.base_url


def test_the_server_is_stopped_when_the_block_raises_or_is_interrupted() -> None:
    for error in (ValueError("boom"), KeyboardInterrupt()):
        model = LocalModel()
        pids: list[int] = []

        def body(
            model: LocalModel = model, error: BaseException = error, pids: list[int] = pids
        ) -> None:
            with model:
                assert model._process is not None
                pids.append(model._process.pid)
                raise error

        with pytest.raises(type(error)):
            body()
        assert not _alive(pids[0])


async def test_async_context_manager_and_client() -> None:
    async with LocalModel() as model:
        assert model._process is not None
        pid = model._process.pid
        async with model.async_client() as client:
            reply = await client.chat.completions.create(
                model=model.model,
                messages=[{"role": "user", "content": "Say hi."}],
                max_tokens=5,
            )
        assert reply.usage is not None
        assert reply.usage.completion_tokens >= 1
    assert not _alive(pid)


def test_a_server_that_does_not_come_up_is_a_clear_error_with_its_log(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file")
    with pytest.raises(LocalModelError, match="exited with status") as caught:
        LocalModel(bogus, startup_timeout=60).start()
    assert "log ends" in str(caught.value)
    assert len(str(caught.value)) > len("log ends") + 40  # the tail of a real log


def test_a_server_that_crashes_is_a_local_model_error_not_a_connection_error() -> None:
    # What a llama-cpp-python built for another CPU's instructions does on its first
    # completion (seen: SIGSEGV in libggml-cpu.so on an Intel Xeon with AVX-512/AMX),
    # played here by sending the real server the signal.
    model = LocalModel()

    def crash_then_call() -> None:
        with model, model.client() as client:
            assert model._process is not None
            pid = model._process.pid
            resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))  # no core file
            os.kill(pid, signal.SIGSEGV)
            with pytest.raises(openai.APIConnectionError):  # all the client can say
                client.chat.completions.create(
                    model=model.model, messages=[{"role": "user", "content": "Hi"}]
                )
            with pytest.raises(LocalModelError, match="died from signal SIGSEGV") as caught:
                model.check(wait=30)
            assert "GGML_NATIVE=OFF" in str(caught.value)
            assert "pip install --force-reinstall --no-cache-dir" in str(caught.value)
            client.models.list()  # the block fails on the dead server...

    with pytest.raises(LocalModelError, match="died from signal SIGSEGV") as caught:
        crash_then_call()  # ...and its exit says why
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)
    assert not model.running


def test_a_killed_parent_leaves_no_server_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        "import os, sys, time\n"
        "from refinekit.local import LocalModel\n"
        "m = LocalModel().start()\n"
        f"open({str(pid_file)!r}, 'w').write(str(m._process.pid))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert done.returncode == -9
    server = int(pid_file.read_text())
    try:  # wait for its end as an event (a pidfd turns readable), not by sleeping
        handle = os.pidfd_open(server)
    except ProcessLookupError:
        return  # already gone
    try:
        ready, _, _ = select.select([handle], [], [], 30)
    finally:
        os.close(handle)
    assert ready, "the server outlived its killed parent"
    assert not _alive(server)


# --- @self_correct on a real model --------------------------------------------------------------


class Invoice(BaseModel):
    number: str
    total_cents: int
    currency: str


INVOICES = [
    "Invoice INV-0042 from Acme Ltd. Total due: EUR 12.50.",
    "Bill no. 7731, amount payable $1,204.00 (USD).",
    "Rechnung R-19: Gesamtbetrag 89,90 EUR.",
    "Invoice #A-7 - total GBP 3.00",
    "Our ref 2024/118. Please pay USD 45 within 30 days.",
]

SYSTEM = (
    "Extract the invoice as JSON with exactly these keys: number (a string), total_cents (an "
    "integer: the total in cents), currency (a 3-letter code). Reply with the JSON only."
)


def _filled(template: str) -> str:
    """A template with its placeholders filled with null: JSON, to read its keys."""
    return re.sub(r'"<[^"]*>"|<[^>]*>', "null", template)


def test_self_correct_gives_a_typed_invoice_or_a_typed_error(local: LocalModel) -> None:
    conversations: list[list[dict[str, Any]]] = []
    outcomes: list[object] = []
    with local.client() as client:

        @self_correct(schema=Invoice)
        def extract(messages: list[dict[str, Any]]) -> Any:
            conversations.append(messages)
            return client.chat.completions.create(
                model=local.model, messages=messages, max_tokens=80, temperature=0
            )

        for text in INVOICES[:4]:  # enough to see corrections; CI time is the limit
            with refinekit.job() as current:
                try:
                    outcomes.append(extract([
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": text},
                    ]))  # fmt: skip
                except CorrectionExhausted as e:
                    outcomes.append(e)
                assert current.usage.model_calls >= 1  # real replies, counted
                assert current.usage.completion_tokens >= 1

    for outcome in outcomes:  # never a hole: a whole Invoice, or a typed refusal
        if isinstance(outcome, Invoice):
            assert isinstance(outcome.total_cents, int)
            assert outcome.number
            assert outcome.currency
        else:
            assert isinstance(
                outcome, (refinekit.JsonParseError, refinekit.ResponseValidationError)
            )
    corrections = [
        m["content"]
        for conversation in conversations
        for m in conversation
        if m["role"] == "user" and str(m["content"]).startswith(CHECK_MARKER)
    ]
    assert corrections, "the tiny model got every invoice right first time: no correction seen"
    for conversation in conversations[1:]:  # a correction is one turn, never compounded
        if str(conversation[-1]["content"]).startswith(CHECK_MARKER):
            assert len(conversation) == 3
    for text in corrections:  # the real problems, then the instance template, never the schema
        assert '"properties"' not in text
        lines = text.splitlines()
        assert lines[-2].startswith("Reply with only a JSON object like this one")
        assert json.loads(_filled(lines[-1])).keys() == {"number", "total_cents", "currency"}


def test_json_object_mode_constrains_the_reply_to_json(local: LocalModel) -> None:
    with local.client() as client:
        reply = client.chat.completions.create(
            model=local.model,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": INVOICES[0]},
            ],
            max_tokens=300,
            temperature=0,
            response_format={"type": "json_object"},
        )
    choice = reply.choices[0]
    if choice.finish_reason == "length":  # the grammar constrains, but a cut reply is cut
        return
    json.loads(choice.message.content or "")  # JSON, whatever its fields


class GroundedInvoice(BaseModel):
    number: Annotated[str, InSource]
    total: Annotated[Decimal, InSource]
    currency: Annotated[
        Literal["EUR", "USD", "GBP"],
        in_source(aliases={"EUR": ["€", "euro"], "USD": ["$", "dollar"], "GBP": ["£", "pound"]}),
    ]


def test_grounded_decoding_gives_only_values_of_the_text(local: LocalModel) -> None:
    """llama.cpp's grammar from the grounded schema: every reply validates against its text."""
    with local.client() as client:
        for text in INVOICES[:4]:
            reply = client.chat.completions.create(
                model=local.model,
                messages=[
                    {"role": "system", "content": "Extract the invoice as JSON."},
                    {"role": "user", "content": text},
                ],
                max_tokens=120,
                temperature=0,
                **response_format(GroundedInvoice, dialect="llama.cpp", source=text),
            )
            choice = reply.choices[0]
            if choice.finish_reason == "length":  # a grammar constrains; a cut reply is cut
                continue
            # no value the validator can refuse: each is a span, a number or a choice the
            # text states
            invoice = GroundedInvoice.model_validate_json(
                choice.message.content or "", context={"source": text}
            )
            spans = provenance(invoice, source=text)
            assert [s.path for s in spans] == ["number", "total", "currency"]
            assert all(s.found and text[s.start : s.end] == s.text for s in spans)


# --- judges on a real model ------------------------------------------------------------------


CORRECT = Criterion("correct", "Is the answer correct for the question?")
REQUESTS = [
    EvaluationRequest(question="What is 2 + 2?", answer="4"),
    EvaluationRequest(question="What is the capital of France?", answer="Paris"),
    EvaluationRequest(question="What is 2 + 2?", answer="Paris"),
    EvaluationRequest(
        question="How long is the refund window?",
        answer="30 days",
        context=(ContextDocument(text="Refunds are accepted within 30 days of delivery."),),
    ),
]


def test_criteria_probabilities_come_from_real_logprobs_and_say_so(local: LocalModel) -> None:
    with local.client() as client:
        judge = criteria(JudgeModel(client, local.model), [CORRECT])
        verdicts: list[Verdict] = []
        for request in REQUESTS:
            with contextlib.suppress(JudgeReplyError):  # no yes/no anywhere: a typed error
                verdicts.append(judge.evaluate(request))
    assert verdicts, "the judge never said yes or no"
    for verdict in verdicts:
        (result,) = verdict.criteria
        assert result.source == "logprobs"  # llama.cpp returns top_logprobs
        assert result.probability is not None
        assert 0.0 <= result.probability <= 1.0
        assert result.outcome in ("pass", "fail", "uncertain")
        assert verdict.passed == (result.outcome == "pass")


def test_a_refused_json_schema_request_is_judge_misconfigured(local: LocalModel) -> None:
    # llama.cpp's server answers response_format {"type": "json_schema"} with HTTP 500 and a
    # validation error: a misconfiguration (no retry helps), not an outage
    with local.client() as client:
        judge = rating(JudgeModel(client, local.model), mode="JSON_SCHEMA", max_retries=0)
        with pytest.raises(JudgeMisconfigured, match="HTTP 500") as caught:
            judge.evaluate(REQUESTS[0])
    assert caught.value.status_code == 500
    assert "response_format" in str(caught.value)


def test_a_rating_judge_in_json_mode_gives_a_verdict_or_a_typed_error(local: LocalModel) -> None:
    with local.client() as client:
        judge = rating(JudgeModel(client, local.model), mode="JSON", max_retries=1)
        for request in REQUESTS[:2]:
            try:
                verdict = judge.evaluate(request)
            except JudgeReplyError:
                continue
            assert verdict.judged
            assert verdict.score is None or 0.0 <= verdict.score <= 1.0


def test_retry_on_low_quality_with_a_real_judge_returns_a_passed_answer_or_raises(
    local: LocalModel,
) -> None:
    with local.client() as client:
        judge = criteria(JudgeModel(client, local.model), [CORRECT], judge_error_policy="fail_open")

        @retry_on_low_quality(evaluator=judge, max_retries=1)
        def answer(question: str, feedback: str | None = None) -> str:
            prompt = question if feedback is None else f"{question}\n(Fix this: {feedback})"
            reply = client.chat.completions.create(
                model=local.model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=30,
                temperature=0,
            )
            return reply.choices[0].message.content or ""

        with refinekit.testing.set_testing():
            for question in ("What is 2 + 2?", "Name a primary colour."):
                outcome: str | LowQualityAnswer
                try:
                    outcome = answer(question)
                except LowQualityAnswer as e:  # every attempt rejected: the history comes along
                    outcome = e
                if isinstance(outcome, LowQualityAnswer):
                    assert 1 <= len(outcome.attempts) <= 2
                    assert all(not a.verdict.passed for a in outcome.attempts)
                else:
                    assert isinstance(outcome, str)


# --- the demo and the benchmark's smoke run ----------------------------------------------------


def test_demo_local_runs_against_the_real_model(capsys: pytest.CaptureFixture[str]) -> None:
    from refinekit.cli import main

    code = main(["demo", "--local"])
    out = capsys.readouterr().out
    assert "a REAL tiny model on this machine" in out
    for row in ("bare (1 call)", "grounded decoding + @self_correct", "bare (attempt 1 only)"):
        assert row in out
    assert "What the decorators changed on this batch" in out
    assert code == 0, out  # no item crashed: each a value, a pass or a typed refusal


def test_demo_local_refuses_an_endpoint_too(capsys: pytest.CaptureFixture[str]) -> None:
    from refinekit.cli import main

    assert main(["demo", "--local", "--model", "x"]) == 2
    assert "--local runs its own model" in capsys.readouterr().err


def run_benchmark(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A benchmark script run from the repository's root (up to ten minutes), its output kept."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )


def test_the_quality_benchmark_quick_run(tmp_path: Path) -> None:
    script = ROOT / "benchmarks" / "bench_local_quality.py"
    if not script.exists():
        pytest.fail("benchmarks/bench_local_quality.py is missing")
    done = run_benchmark(script, "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Wilson" in done.stdout or "wilson" in done.stdout


def test_the_streaming_benchmark_quick_run(tmp_path: Path) -> None:
    script = ROOT / "benchmarks" / "bench_local_streaming.py"
    dump = tmp_path / "items.jsonl"
    done = run_benchmark(script, "--quick", "--schema", "CheckedInvoice", "--dump", str(dump))
    assert done.returncode == 0, done.stderr[-3000:]
    resume = 'streamed, early_abort="resume"'
    for way in ("whole", "streamed, early abort", "streamed, early_abort=False", resume):
        assert f"| CheckedInvoice | {way} | " in done.stdout
    rows = [json.loads(line) for line in dump.read_text().splitlines()]
    assert sorted({r["way"] for r in rows}) == ["no-abort", "resume", "streamed", "whole"]
    assert len(rows) == 12


def test_openai_client_errors_are_not_swallowed(local: LocalModel) -> None:
    with local.client() as client, pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model=local.model,
            messages=[{"role": "user", "content": "x"}],
            response_format={  # type: ignore[typeddict-item]
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object"}},
            },
        )
