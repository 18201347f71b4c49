"""The learned start (`Escalation(start="learned")`): the rule, and calls that skip a tier the
run store measured as not worth its cost, or do not.

The store is filled by `refinekit.eval` runs of the same function with `start="first"`, over
the scripted server; the learned function is then called as an application calls it.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Workspace

import refinekit.eval
from refinekit.eval import _learned
from refinekit.eval._learned import MIN_CASES, TierRecord, start_index, tier_records
from refinekit.eval._stats import wilson_interval
from refinekit.testing import Reply, ScriptedOpenAI

TARGET = """
import os
import openai
import refinekit
from refinekit import checks

@refinekit.retry_on_low_quality(
    evaluator=checks.excludes("dunno"),
    max_retries=0,
    returns="text",
    escalate=refinekit.Escalation(["small", "big"], start={start!r}, db={db!r}),
)
def answer(question, model="small"):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        return client.chat.completions.create(
            model=model, messages=[{{"role": "user", "content": question}}]
        )
"""

# small costs half of big per call: trying small pays when it answers over half the time
PRICES = {"small": [5.0, 10.0], "big": [10.0, 20.0]}


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    _learned.forget()
    yield
    _learned.forget()


def script(server: ScriptedOpenAI, small_answers: int) -> None:
    """small answers questions q0 .. q{small_answers - 1} and says "dunno" to the rest."""

    def small(request: object) -> Reply:
        question = str((getattr(request, "body", None) or {})["messages"][-1]["content"])
        known = question.startswith("q") and int(question[1:]) < small_answers
        return Reply.text("yes" if known else "dunno", prompt_tokens=100, completion_tokens=10)

    server.script("small", small, times=None)
    server.script("big", Reply.text("yes", prompt_tokens=100, completion_tokens=10), times=None)


def measured(ws: Workspace, db: Path, cases: int = 20) -> None:
    """An eval run of `answer` with the ladder started at its first tier, stored in `db`."""
    name = ws.module(TARGET.format(start="first", db=None), "measured")
    refinekit.eval.run(
        ws.csv("golden.csv", [{"question": f"q{i}", "must_mention": "yes"} for i in range(cases)]),
        target=__import__(name).answer,
        db=db,
        prices=PRICES,
    )


def learned(ws: Workspace, db: Path | str) -> object:
    return __import__(ws.module(TARGET.format(start="learned", db=str(db)), "learned")).answer


def test_the_rule_skips_a_tier_whose_upper_bound_is_under_its_cost_ratio() -> None:
    # c / C = 0.3: tier 0 is worth trying when it answers more than 30% of the time
    def small(tried: int, answered: int) -> TierRecord:
        return TierRecord("small", tried, answered, cost=3.0, after=10.0)

    big = TierRecord("big", 0, 0, cost=10.0, after=None)
    assert wilson_interval(1, 20)[1] < 0.3 < wilson_interval(4, 20)[1]
    assert start_index([small(20, 1), big]) == 1  # upper bound 0.24 < 0.3: skipped
    assert start_index([small(20, 4), big]) == 0  # upper bound 0.42: it may pay
    assert start_index([small(MIN_CASES - 1, 0), big]) == 0  # too few cases to tell
    assert start_index([TierRecord("small", 50, 50, 3.0, None), big]) == 0  # never failed
    # the last tier is never skipped, a middle one is weighed on its own figures
    assert start_index([small(40, 0), TierRecord("mid", 40, 0, 3.0, 10.0), big]) == 2
    assert start_index([small(40, 0), TierRecord("mid", 40, 30, 3.0, 10.0), big]) == 1


def test_the_figures_come_from_the_stored_tiers_of_the_same_ladder() -> None:
    def tier(name: str, ended: str, cost: float | None, tokens: int = 10) -> dict[str, object]:
        return {"name": name, "ended": ended, "cost": cost, "prompt_tokens": tokens}

    ladders = [
        [tier("small", "answered", 1.0)],
        [tier("small", "exhausted", 1.0), tier("big", "answered", 6.0)],
        [tier("small", "refused", 1.0), tier("big", "exhausted", 4.0)],
        [tier("small", "skipped", None), tier("big", "answered", 5.0)],  # small not tried
        [tier("other", "answered", 9.0)],  # another ladder: not counted
    ]
    small, big = tier_records(["small", "big"], ladders)
    assert (small.tried, small.answered, small.cost, small.after) == (3, 1, 1.0, 5.0)
    assert (big.tried, big.answered, big.cost, big.after) == (3, 2, 5.0, 0.0)
    # one tier unpriced: every figure is in tokens
    ladders[0][0]["cost"] = None
    small, _ = tier_records(["small", "big"], ladders)
    assert (small.cost, small.after) == (10.0, 10.0)


def test_a_tier_that_rarely_answers_is_skipped(ws: Workspace, server: ScriptedOpenAI) -> None:
    db = ws.path / "runs.db"
    script(server, small_answers=1)  # 1 of 20: upper bound 0.24 < 0.5
    measured(ws, db)
    before = len(server.requests_for("small"))

    outcome = learned(ws, db).outcome("q7")  # type: ignore[attr-defined]

    assert outcome.value == "yes"
    assert outcome.tier == "big"
    assert [(t.name, t.ended, t.calls) for t in outcome.tiers] == [
        ("small", "skipped", 0),
        ("big", "answered", 1),
    ]
    assert len(server.requests_for("small")) == before  # not called


def test_a_tier_that_answers_often_enough_is_kept(ws: Workspace, server: ScriptedOpenAI) -> None:
    db = ws.path / "runs.db"
    script(server, small_answers=10)  # 10 of 20: upper bound 0.70 > 0.5
    measured(ws, db)

    outcome = learned(ws, db).outcome("q3")  # type: ignore[attr-defined]

    assert outcome.tier == "small"
    assert [t.ended for t in outcome.tiers] == ["answered"]


def test_too_few_stored_cases_start_at_the_first_tier(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    db = ws.path / "runs.db"
    script(server, small_answers=0)  # never answers, but over 19 cases only
    measured(ws, db, cases=MIN_CASES - 1)

    outcome = learned(ws, db).outcome("q3")  # type: ignore[attr-defined]

    assert [t.ended for t in outcome.tiers] == ["exhausted", "answered"]


def test_a_store_is_read_once_per_function_while_its_figures_are_fresh(
    ws: Workspace, server: ScriptedOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ws.path / "runs.db"
    script(server, small_answers=1)
    measured(ws, db)
    reads: list[str] = []
    read = _learned._read
    monkeypatch.setattr(_learned, "_read", lambda f, e: reads.append(f) or read(f, e))
    function = learned(ws, db)

    assert [function("q5"), function("q6")] == ["yes", "yes"]  # type: ignore[operator]
    assert reads == ["answer"]
    monkeypatch.setattr(_learned, "TTL_SECONDS", 0.0)  # stale at once: read again
    function("q8")  # type: ignore[operator]
    assert reads == ["answer", "answer"]


def test_a_store_that_cannot_be_read_starts_at_the_first_tier_with_one_warning(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    script(server, small_answers=5)
    broken = ws.path / "broken.db"
    broken.write_bytes(b"this is not a database, only some bytes" * 100)
    function = learned(ws, broken)

    with pytest.warns(RuntimeWarning, match="could not read the run store") as told:
        assert function("q1") == "yes"  # type: ignore[operator]
    assert len(told) == 1
    assert str(broken) in str(told[0].message)
    _learned._cache.clear()  # read again: no second warning for the same store
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcome = function.outcome("q2")  # type: ignore[attr-defined]
    assert outcome.tier == "small"  # started at the first tier


def test_a_store_not_made_yet_starts_at_the_first_tier_and_is_not_made(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    script(server, small_answers=5)
    missing = ws.path / "none" / "runs.db"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcome = learned(ws, missing).outcome("q1")  # type: ignore[attr-defined]

    assert outcome.tier == "small"
    assert not missing.parent.exists()


def test_importing_refinekit_does_not_import_the_eval_package() -> None:
    code = "import sys, refinekit; print(any(m.startswith('refinekit.eval') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
