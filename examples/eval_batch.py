"""Batched judging: `refinekit.eval.run(..., batch=True)` at the batch price, and its resume.

The help-centre application of eval_python.py (examples/_workflow_app.py) evaluated on
examples/golden_docs.csv twice: once with every judge request sent directly, once with
`batch=True`, where the cases are answered first and their judge requests go to the
provider's batch API in one batch (OpenAI's Files and Batches API here: the judge's client is
an `openai.OpenAI`). Both runs are priced at list prices; the batched one pays the batch
price for its judge. The verdicts are the same: the same requests got the same replies.

A third run shows the exactly-once promise: a batched run that stopped while its batch was
still running at the provider (a `KeyboardInterrupt` from the progress callback stands for
Ctrl-C) is resumed by the same call, which polls the same batch instead of submitting
another, and takes its replies.

A refinekit.testing.ScriptedOpenAI server on 127.0.0.1 plays the answering model, the judge
and the provider's batch endpoints (offline, nothing leaves the machine; a batch ends at its
third poll): this shows the API, not a model's quality. The testing switch makes the polls
wait nothing. It exits 0 only when every outcome is the expected one.

Run: python examples/eval_batch.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from _workflow_models import answering_model, judge_model

import refinekit.eval
from refinekit import Prices
from refinekit.testing import ScriptedOpenAI, set_testing

HERE = Path(__file__).resolve().parent
PRICES = Prices({"shop-model": (0.15, 0.60), "judge": (2.50, 10.00)})
"""List prices, dollars per million input and output tokens."""


def main() -> int:
    print("offline: a ScriptedOpenAI server on 127.0.0.1 plays the models and the batch API;")
    print("its replies are scripted, so this shows the API, not a model's quality")
    problems: list[str] = []

    def expect(what: str, got: object, wanted: object) -> None:
        if got != wanted:
            problems.append(f"{what}: {got!r}, expected {wanted!r}")

    with ScriptedOpenAI() as server, set_testing(), tempfile.TemporaryDirectory() as tmp:
        server.script("shop-model", answering_model, times=None)
        server.script("judge", judge_model, times=None)
        server.script_batches(polls=3)  # validating, in progress, then ended
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted-key"
        from _workflow_app import answer, grounded

        db = Path(tmp) / "runs.db"
        golden = HERE / "golden_docs.csv"
        direct = refinekit.eval.run(golden, target=answer, judge=grounded, db=db, prices=PRICES)
        seen: list[str] = []

        def progress(event: refinekit.eval.RunEvent) -> None:
            """What the progress display shows of a batched run."""
            if isinstance(event, refinekit.eval.BatchProgress) and event.state != "answering":
                seen.append(f"{event.state} {event.done}/{event.total}")

        batched = refinekit.eval.run(
            golden,
            target=answer,
            judge=grounded,
            db=db,
            prices=PRICES,
            batch=True,
            resume=False,  # a new run beside the direct one
            on_event=progress,
        )
        print(f"the batch, as polled: {', '.join(seen)}")
        for name, result in (("direct", direct), ("batched", batched)):
            s = result.summary
            assert s.cost is not None
            print(
                f"{name}: {s.passed}/{s.counted} passed, judge cost ${s.cost['judge']:.6f}, "
                f"answers ${s.cost['answer']:.6f}"
            )
        batch = batched.run.summary["batch"]
        print(f"batched: {batch['batches']} batch, {batch['items']} judge requests in it")
        assert direct.summary.cost is not None
        assert batched.summary.cost is not None
        ratio = batched.summary.cost["judge"] / direct.summary.cost["judge"]
        print(f"judge cost batched / direct: {ratio:.2f}")
        expect(
            "the same verdicts",
            [c.outcome for c in batched.cases],
            [c.outcome for c in direct.cases],
        )
        expect("half the judge's price", round(ratio, 2), 0.5)

        # A batched run stopped while its batch runs (Ctrl-C), then resumed by the same call.
        server.script_batches(polls=1_000)  # the next batch runs until told to end

        def interrupt(event: refinekit.eval.RunEvent) -> None:
            if isinstance(event, refinekit.eval.BatchProgress) and event.state == "in_progress":
                raise KeyboardInterrupt  # Ctrl-C while the batch runs at the provider

        try:
            refinekit.eval.run(
                golden,
                target=answer,
                judge=grounded,
                db=db,
                batch=True,
                resume=False,
                on_event=interrupt,
            )
        except KeyboardInterrupt:
            print(f"stopped with {len(server.batches)} batches submitted so far; resuming")
        submitted = len(server.batches)
        server.end_batches()  # the provider finishes the batch meanwhile
        resumed = refinekit.eval.run(golden, target=answer, judge=grounded, db=db, batch=True)
        print(
            f"resumed run {resumed.run_id}: {resumed.summary.passed}/{resumed.summary.counted} "
            f"passed, batches submitted in all: {len(server.batches)}"
        )
        expect("no batch submitted twice", len(server.batches), submitted)
        expect(
            "the same verdicts again",
            [c.outcome for c in resumed.cases],
            [c.outcome for c in direct.cases],
        )

    for problem in problems:
        print(f"UNEXPECTED {problem}")
    print("every outcome as expected" if not problems else f"{len(problems)} unexpected")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
