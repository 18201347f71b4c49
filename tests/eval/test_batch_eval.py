"""`refinekit eval --batch`: the run judge's requests through the provider's batch API.

Real runs against the scripted server and its batch endpoints, through the real openai and
anthropic clients: the answers first, then the judge's requests in one batch per round,
polled until it ends; only judge cache misses batched; failed and expired items sent
directly; `--max-cost` reserved at submission; a run stopped while it waits polls the same
batch when it is run again, and never submits a request twice.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import CRITERIA_JUDGE, SYNC_ANSWER, Cli, Workspace, answers, judge_replies

import refinekit.eval
from refinekit._engine import events
from refinekit.eval import BatchProgress, CostLimitReached, RunEvent, UsageProblem, _batch_rounds
from refinekit.eval._batch_calls import BatchInstrument
from refinekit.eval._money import load_prices, price_note
from refinekit.judges import Criterion, JudgeModel, cascade, criteria, panel
from refinekit.testing import ScriptedOpenAI

REPLIES = {"Refund window?": "Seven days.", "Shipping cost?": "Free.", "Gift cards?": "No."}
VERDICTS = {"Seven days.": 0.9, "Free.": 0.8, "No.": 0.1, "Nine to five.": 0.7}
ANTHROPIC_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def server(server: ScriptedOpenAI) -> ScriptedOpenAI:
    server.script("answer", answers(REPLIES), times=None)
    server.script("judge", judge_replies(VERDICTS), times=None)
    return server


def answer(question: str) -> str:
    return REPLIES[question]


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps({"question": q}) + "\n" for q in REPLIES))
    return path


@pytest.fixture
def judge(server: ScriptedOpenAI) -> Iterator[Any]:
    with server.client() as client:
        yield criteria(JudgeModel(client, "judge"), [Criterion("correct", "Is it right?")])


def run(golden: Path, judge: Any, **options: Any) -> refinekit.eval.EvalResult:
    options.setdefault("db", golden.parent / "runs.db")
    return refinekit.eval.run(golden, target=answer, judge=judge, batch=True, **options)


def judged(server: ScriptedOpenAI) -> list[Any]:
    return server.requests_for("judge")


def test_every_answer_is_judged_in_one_batch(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    server.script_batches(polls=3)
    told: list[RunEvent] = []
    result = run(golden, judge, on_event=told.append)

    assert [b.provider for b in server.batches] == ["openai"]
    batch = server.batches[0]
    assert len(batch.custom_ids) == 3
    assert len(judged(server)) == 3
    assert {r.batch_id for r in judged(server)} == {batch.id}  # none asked directly
    assert result.summary.passed == 2
    assert result.summary.failed == 1
    assert result.run.summary["batch"] == {"batches": 1, "items": 3, "direct": 0, "saved": None}
    assert result.summary.usage["judge"]["model_calls"] == 3  # counted as the direct replies
    waits = [e for e in told if isinstance(e, BatchProgress)]
    assert [(w.state, w.done, w.total) for w in waits[:3]] == [
        ("answering", 1, 3),
        ("answering", 2, 3),
        ("answering", 3, 3),
    ]
    waits = waits[3:]
    assert [w.state for w in waits] == ["in_progress", "finalizing", "ended"]
    assert waits[-1].total == 3
    # the batching instrument is gone with the run: other calls pay nothing for it
    assert not any(isinstance(i, BatchInstrument) for i in events.instruments)


def test_an_anthropic_judge_is_batched_through_message_batches(
    server: ScriptedOpenAI, golden: Path
) -> None:
    server.script_batches(polls=2)
    with server.anthropic_client(api_key=ANTHROPIC_KEY) as client:
        judge = criteria(
            JudgeModel(client, "judge", temperature=None), [Criterion("correct", "Is it right?")]
        )
        result = run(golden, judge)
    assert [b.provider for b in server.batches] == ["anthropic"]
    assert len(judged(server)) == 3
    assert all(r.batch_id == server.batches[0].id for r in judged(server))
    assert result.summary.passed == 2
    assert result.summary.failed == 1


def test_the_judge_cost_is_the_batch_price(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    prices = {"judge": [1.0, 2.0]}
    batched = run(golden, judge, prices=prices)
    listed = refinekit.eval.run(
        golden,
        target=answer,
        judge=judge,
        db=golden.parent / "runs.db",
        prices=prices,
        resume=False,
    )
    assert listed.summary.cost is not None
    assert batched.summary.cost is not None
    assert batched.summary.cost["judge"] == pytest.approx(listed.summary.cost["judge"] / 2)
    assert batched.run.summary["batch"]["saved"] == pytest.approx(batched.summary.cost["judge"])
    report = refinekit.eval.html_report(batched)
    assert "provider's batch API, <b>3</b> requests in 1 batch;" in report
    assert "the batch price saved" in report
    own = refinekit.Prices({"judge": (1.0, 2.0)}, batch_share={"judge": 0.25})
    cheaper = run(golden, judge, prices=own, resume=False)
    assert cheaper.summary.cost is not None
    assert cheaper.summary.cost["judge"] == pytest.approx(listed.summary.cost["judge"] / 4)


def test_only_the_judge_cache_misses_are_batched(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    first = refinekit.eval.run(
        golden, target=answer, judge=judge, db=golden.parent / "runs.db", cache=True
    )
    assert first.judge_cache == {"hits": 0, "misses": 3}
    golden.write_text(golden.read_text() + json.dumps({"question": "Opening hours?"}) + "\n")
    REPLIES["Opening hours?"] = "Nine to five."
    try:
        again = run(golden, judge, cache=True, resume=False)
        assert len(server.batches) == 1
        assert len(server.batches[0].custom_ids) == 1  # the three hits never went out
        assert again.judge_cache == {"hits": 3, "misses": 1}
        assert again.summary.cases == 4
        # the batch's reply is in the cache now, as a direct reply would be
        third = run(golden, judge, cache=True, resume=False)
    finally:
        del REPLIES["Opening hours?"]
    assert third.judge_cache == {"hits": 4, "misses": 0}
    assert len(server.batches) == 1
    assert len(server.batches) == 1


def test_items_the_batch_could_not_answer_are_asked_directly(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    server.script_batches(fail=[1])
    result = run(golden, judge)
    assert len(server.batches) == 1
    direct = [r for r in judged(server) if r.batch_id is None]
    assert len(direct) == 1
    assert result.run.summary["batch"]["direct"] == 1
    assert result.summary.passed == 2
    assert result.summary.unavailable == 0


def test_an_expired_batch_s_unfinished_items_are_asked_directly(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    server.script_batches(polls=2, expire=True, expire_after=1)
    result = run(golden, judge)
    assert len(server.batches) == 1
    assert len([r for r in judged(server) if r.batch_id is None]) == 2
    assert result.run.summary["batch"]["direct"] == 2
    assert result.summary.passed + result.summary.failed == 3


def test_max_cost_is_reserved_when_the_batch_is_submitted(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    prices = {"judge": [1000.0, 1000.0]}
    with pytest.raises(CostLimitReached, match="would take it over, so it was not submitted"):
        run(golden, judge, prices=prices, max_cost=0.01)
    assert server.batches == []
    assert judged(server) == []
    run_ = refinekit.eval.runs(db=golden.parent / "runs.db")[-1]
    assert run_.status == "incomplete"
    # with room for it, the same call resumes: the answers are not asked again
    done = run(golden, judge, prices=prices, max_cost=100.0)
    assert done.run.id == run_.id
    assert len(server.batches) == 1
    assert done.summary.cases == 3


def test_a_run_stopped_while_its_batch_runs_polls_the_same_batch_again(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    server.script_batches(polls=50)

    def stop(event: RunEvent) -> None:
        if isinstance(event, BatchProgress) and event.state == "in_progress":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(golden, judge, on_event=stop)
    assert len(server.batches) == 1
    stopped = refinekit.eval.runs(db=golden.parent / "runs.db")[-1]
    assert stopped.status == "incomplete"
    server.end_batches()
    done = run(golden, judge)
    assert done.run.id == stopped.id
    assert len(server.batches) == 1  # never submitted twice
    assert len(judged(server)) == 3  # no judge request asked twice
    assert done.summary.passed == 2
    assert done.summary.failed == 1


def test_batch_needs_a_judge_with_a_provider(golden: Path) -> None:
    with pytest.raises(UsageProblem, match="--batch sends the judge's requests"):
        refinekit.eval.run(golden, target=answer, batch=True, db=golden.parent / "r.db")

    def by_hand(request: Any) -> bool:
        return True

    with pytest.raises(UsageProblem, match="asks no OpenAI or Anthropic model"):
        run(golden, by_hand)


def test_the_cli_says_the_run_was_batched(ws: Workspace, server: ScriptedOpenAI, cli: Cli) -> None:
    ws.module(SYNC_ANSWER, stem="answer")
    ws.module(CRITERIA_JUDGE, stem="judge")
    ws.csv("golden.csv", [{"question": q} for q in REPLIES])
    target, judge = ws.modules
    result = cli(
        "eval",
        "golden.csv",
        "--target",
        f"{target}:answer",
        "--judge",
        f"{judge}:judge",
        "--batch",
    )
    assert result.code == 0, result.err
    assert "batched: 1 batch at the provider, 3 judge requests in them" in result.out


def test_a_judge_that_asks_again_after_a_reply_gets_a_round_for_each_request(
    server: ScriptedOpenAI, golden: Path
) -> None:
    """A panel asks its second member once the first has voted: a second batch, a round
    later, holding the second member's requests only."""
    server.script("judge2", judge_replies(VERDICTS), times=None)
    with server.client() as client:
        members = [
            criteria(JudgeModel(client, model), [Criterion("correct", "Is it right?")])
            for model in ("judge", "judge2")
        ]
        result = run(golden, panel(members, "all", order="given"))
    assert len(server.batches) == 2
    first, second = server.batches
    assert {r.body["model"] for r in judged_by(server, first.id)} == {"judge"}
    # the first member passed two answers; the panel asks the second about those only
    assert {r.body["model"] for r in judged_by(server, second.id)} == {"judge2"}
    assert len(second.custom_ids) == 2
    assert result.summary.passed == 2
    assert result.summary.failed == 1


def judged_by(server: ScriptedOpenAI, batch_id: str) -> list[Any]:
    return [r for r in server.requests if r.batch_id == batch_id]


def test_a_batched_run_resumed_without_batch_judges_its_waiting_answers_directly(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    server.script_batches(polls=50)

    def stop(event: RunEvent) -> None:
        if isinstance(event, BatchProgress) and event.state != "answering":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(golden, judge, on_event=stop)
    done = refinekit.eval.run(golden, target=answer, judge=judge, db=golden.parent / "runs.db")
    assert done.run.status == "complete"
    assert done.summary.cases == 3
    assert done.summary.passed == 2
    assert len([r for r in judged(server) if r.batch_id is None]) == 3
    assert "batch" not in done.run.summary


def test_prices_take_a_batch_share_for_every_model_or_per_model(tmp_path: Path) -> None:
    one = refinekit.Prices({"judge": (1.0, 2.0)}, batch_share=0.4)
    assert one.batch_share("judge", 0.5) == 0.4
    per_model = refinekit.Prices({"judge": (1.0, 2.0)}, batch_share={"judge": 0.3})
    assert per_model.batch_share("judge-2025-01-01", 0.5) == 0.3  # a dated snapshot
    assert per_model.batch_share("other", 0.5) == 0.5  # its provider's
    assert refinekit.Prices({"judge": (1.0, 2.0)}).batch_share("judge", 0.5) == 0.5
    assert per_model != refinekit.Prices({"judge": (1.0, 2.0)})
    assert pickle.loads(pickle.dumps(per_model)) == per_model
    with pytest.raises(ValueError, match=r"batch_share must be from 0 to 1"):
        refinekit.Prices({"judge": (1.0, 2.0)}, batch_share=1.5)
    with pytest.raises(TypeError, match="must be a number from 0 to 1, not str"):
        refinekit.Prices({"judge": (1.0, 2.0)}, batch_share={"judge": "half"})  # type: ignore[dict-item]
    file = tmp_path / "prices.json"
    file.write_text(json.dumps({"judge": [1.0, 2.0], "batch_share": {"judge": 0.25}}))
    loaded = load_prices(file)
    assert loaded is not None
    assert loaded.batch_share("judge", 0.5) == 0.25
    assert price_note(loaded) == {"judge": [1.0, 2.0], "batch_share": {"judge": 0.25}}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_whose_id_was_never_stored_is_found_at_the_provider(
    provider: str, server: ScriptedOpenAI, golden: Path
) -> None:
    """As when a process is killed between the provider's answer and storing the id."""
    server.script_batches(polls=50)

    def stop(event: RunEvent) -> None:
        if isinstance(event, BatchProgress) and event.state != "answering":
            raise KeyboardInterrupt

    make = server.anthropic_client if provider == "anthropic" else server.client
    with make(api_key=ANTHROPIC_KEY) as client:
        model = JudgeModel(client, "judge", temperature=None)
        judge = criteria(model, [Criterion("correct", "Is it right?")])
        with pytest.raises(KeyboardInterrupt):
            run(golden, judge, on_event=stop)
        with sqlite3.connect(golden.parent / "runs.db") as db:
            db.execute("UPDATE batch_submissions SET batch_id = NULL, state = 'submitting'")
        db.close()
        server.end_batches()
        done = run(golden, judge)
    assert len(server.batches) == 1  # found, not submitted again
    assert len(judged(server)) == 3
    assert done.summary.passed == 2


def test_each_repeat_is_its_own_batched_request(
    server: ScriptedOpenAI, golden: Path, judge: Any
) -> None:
    result = run(golden, judge, repeat=2)
    assert len(server.batches) == 1
    assert len(set(server.batches[0].custom_ids)) == 6  # three cases, twice each
    assert len(judged(server)) == 6
    assert result.summary.passed == 2
    assert all(c.judgements == 2 for c in result.cases)


def test_a_round_of_more_requests_than_a_batch_holds_is_split(
    server: ScriptedOpenAI, golden: Path, judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_batch_rounds, "MAX_ITEMS", 2)
    result = run(golden, judge)
    assert [len(b.custom_ids) for b in server.batches] == [2, 1]
    assert result.run.summary["batch"]["batches"] == 2
    assert result.summary.passed == 2


def test_a_cascade_batches_each_level_it_asks_in_a_round_of_its_own(
    server: ScriptedOpenAI, golden: Path
) -> None:
    """The cheap level decides the answers it is sure of (0.9 and 0.1); the strong level is
    asked about the one it is not (0.8 < 0.85), a round later."""
    server.script("strong", judge_replies({"Free.": 0.95}), times=None)
    with server.client() as client:
        levels = [
            criteria(JudgeModel(client, model), [Criterion("correct", "Is it right?")])
            for model in ("judge", "strong")
        ]
        result = run(golden, cascade(*levels, thresholds=[0.85, 0.5]))
    assert [len(b.custom_ids) for b in server.batches] == [3, 1]
    assert {r.body["model"] for r in judged_by(server, server.batches[1].id)} == {"strong"}
    assert result.summary.passed == 2
    assert result.summary.failed == 1
