"""`refinekit demo`: both decorators end to end over HTTP, with the real `openai` client.

Two scenarios, each a plain function that calls a model with `client.chat.completions.create`:

1. Refund answer. `@retry_on_low_quality(evaluator=all_of(not_empty(), criteria(judge, ...)))`
   over a function answering from a policy document. The first draft promises an unconditional
   refund; the criteria judge rejects it ("drops the conditions"); the feedback goes back in the
   prompt; the second draft keeps "unused, within seven days" and passes.
2. Invoice extraction. `@self_correct(schema=Invoice)` over a function sending the conversation
   to the model. The first reply is not JSON, the second misses a required field, the third is
   valid: two corrections, then a typed `Invoice`.

Without an endpoint, a `ScriptedOpenAI` server on 127.0.0.1 plays the answering model
(`demo-answer`) and the judge (`demo-judge`). Its replies are callables that read each request
(the judge reads the criterion and the answer it is asked about, the answering model whether the
feedback or a correction turn arrived), so the run is deterministic whatever the order of the
judge's concurrent requests, and it proves the wiring, not a model's quality. With an `Endpoint`
the same functions and decorators run against a real OpenAI-compatible server.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import TextIO

import openai

from ...testing import ScriptedOpenAI
from ._config import Endpoint, endpoint_from_options
from ._output import Output, header_local, header_real, header_scripted
from ._run import Setting, invoice, refund
from ._scenarios import (
    CRITERIA,
    EXPECTED_INVOICE,
    POLICY,
    QUESTION,
    RETRY_WAIT,
    SCRIPTED_JUDGE,
    SCRIPTED_MODEL,
    Invoice,
    invoice_extractor,
    invoice_messages,
    refund_answerer,
    refund_messages,
)
from ._script import script_demo, scripted_answer, scripted_judge

__all__ = [
    "CRITERIA",
    "EXPECTED_INVOICE",
    "POLICY",
    "QUESTION",
    "RETRY_WAIT",
    "SCRIPTED_JUDGE",
    "SCRIPTED_MODEL",
    "Endpoint",
    "Invoice",
    "endpoint_from_options",
    "invoice_extractor",
    "invoice_messages",
    "refund_answerer",
    "refund_messages",
    "run_demo",
    "script_demo",
    "scripted_answer",
    "scripted_judge",
]


def run_demo(out: TextIO, endpoint: Endpoint | None = None, *, local: bool = False) -> int:
    """Run both scenarios, writing what happens to `out`; return the exit status.

    Args:
        out: Where to write; colour only when it is a terminal and `NO_COLOR` is not set.
        endpoint: A real endpoint, or None to start a scripted server on 127.0.0.1.
        local: Instead of the two scenarios, run a small batch on the tiny local model
            (`refinekit.local.LocalModel`, the `local` extra), bare and decorated, and print
            its figures (`_local.run_batch`); then "as expected" is no item crashing.

    Returns:
        0 when both scenarios ended as expected, else 1. On the scripted server "as expected"
        is the scripted story (one rejection then a pass; two corrections then the invoice of
        the text); on a real endpoint it is the decorators' promise (an answer that passed the
        judge; a typed `Invoice`).

    Raises:
        LocalModelError: With `local`: the local model could not start, or its server died
            during the run (the CLI prints it and exits 2).
    """
    say = Output(out, endpoint.api_key if endpoint and endpoint.key_from_env else None)
    with ExitStack() as stack:
        server: ScriptedOpenAI | None = None
        if local:
            from ...local import LocalModel, LocalModelError
            from ._local import run_batch

            say("Starting the local model (llama.cpp server, SmolLM2-135M-Instruct)...")
            n = str(idle_cores())
            threads = ["--n_threads", n, "--n_threads_batch", n]
            model = stack.enter_context(LocalModel(server_args=threads))
            header_local(say, model)
            say()

            def check_server() -> None:
                try:
                    model.check(wait=2.0)
                except LocalModelError as dead:
                    say(f"   {say.bad('failed')}: the local model's server died (see the error)")
                    raise dead from None

            ok = run_batch(say, model, check_server)
            return 0 if ok else 1
        elif endpoint is None:
            server = stack.enter_context(ScriptedOpenAI())
            script_demo(server)
            client = stack.enter_context(server.client())
            setting = Setting(say, client, SCRIPTED_MODEL, SCRIPTED_JUDGE, scripted=True)
            header_scripted(say, server)
        else:
            client = stack.enter_context(
                openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=120.0)
            )
            setting = Setting(say, client, endpoint.model, endpoint.judge_model, scripted=False)
            header_real(say, endpoint)
        say()
        refund_ok = refund(setting)
        say()
        invoice_ok = invoice(setting)
        say()
        if server is not None:
            counts = {m: len(server.requests_for(m)) for m in (SCRIPTED_MODEL, SCRIPTED_JUDGE)}
            say(
                f"The scripted server answered {len(server.requests)} HTTP requests: "
                + ", ".join(f"{n} for {m}" for m, n in counts.items())
                + "."
            )
    ok = refund_ok and invoice_ok
    failed = (not refund_ok) + (not invoice_ok)
    say(
        say.good("Both scenarios ended as expected.")
        if ok
        else say.bad(f"{failed} of 2 scenarios did not end as expected.")
    )
    return 0 if ok else 1


def idle_cores() -> int:
    """The local model's threads: the cores other work is not using now, at least one.

    llama.cpp's threads spin while they wait for each other, so a thread on a core another
    process holds slows every token: on 2 cores the demo's batch took 71 s with 2 threads on
    an idle machine, 120 s with 1, and 322 s with 2 under a load average of about 3.
    """
    cores = os.cpu_count() or 1
    busy = round(os.getloadavg()[0])
    return max(1, min(cores, cores - busy))
