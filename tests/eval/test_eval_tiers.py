"""An escalating target in `refinekit eval`: each case's tier, the figures per tier, the
report's section, an older store migrated, and the ladder compared with its strong tier alone.

The model traffic goes over real HTTP to the scripted server: the cheap tier (`small`)
answers some questions well, says "dunno" to others (the ladder's check rejects that, and the
call moves up) and gets one wrong in a way the check lets through (the golden row's
`must_mention` fails it); the strong tier (`big`) answers what it is asked, but for one
question it does not know either.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Cli, Workspace

import refinekit.eval
from refinekit.eval import EvalResult
from refinekit.eval._stats import mcnemar_exact, wilson_interval
from refinekit.eval._store import _postgres as pgstore
from refinekit.eval._store import _sqlite as runstore
from refinekit.eval._store import open_store
from refinekit.eval._store._sql import SQLStore
from refinekit.testing import Reply, ScriptedOpenAI

LADDER = """
import os
import openai
import refinekit
from refinekit import checks

def ask(question, model):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        return client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}]
        )

@refinekit.retry_on_low_quality(
    evaluator=checks.excludes("dunno"),
    max_retries=0,
    returns="text",
    escalate=["small", "big"],
)
def answer(question, model="small"):
    return ask(question, model)

async def ask_async(question, model):
    client = openai.AsyncOpenAI(
        base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0
    )
    async with client:
        return await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}]
        )

@refinekit.retry_on_low_quality(
    evaluator=checks.excludes("dunno"),
    max_retries=0,
    returns="text",
    escalate=["small", "big"],
)
async def answer_async(question, model="small"):
    return await ask_async(question, model)

def strong(question):
    return ask(question, "big")

def plain(question):
    return ask(question, "small")
"""

ROWS = [
    {"question": "q1", "must_mention": "yes"},
    {"question": "q2", "must_mention": "yes"},
    {"question": "q3", "must_mention": "yes"},
    {"question": "q4", "must_mention": "yes"},
    {"question": "q5", "must_mention": "yes"},
    {"question": "q6", "must_mention": "yes"},
]
SMALL = {"q1": "yes", "q2": "yes", "q3": "dunno", "q4": "dunno", "q5": "no", "q6": "dunno"}
BIG = {"q1": "yes", "q2": "yes", "q3": "yes", "q4": "yes", "q5": "yes", "q6": "dunno"}
PRICES = {"small": [1.0, 2.0], "big": [10.0, 20.0]}
# every reply: 100 prompt + 10 completion tokens
SMALL_COST = (100 * 1.0 + 10 * 2.0) / 1e6
BIG_COST = (100 * 10.0 + 10 * 20.0) / 1e6


def script(server: ScriptedOpenAI) -> None:
    for model, said in (("small", SMALL), ("big", BIG)):
        server.script(
            model,
            lambda request, said=said: Reply.text(
                said[str((request.body or {})["messages"][-1]["content"])],
                prompt_tokens=100,
                completion_tokens=10,
            ),
            times=None,
        )


@pytest.fixture
def ladder(ws: Workspace, server: ScriptedOpenAI) -> str:
    script(server)
    return ws.module(LADDER, "ladder_target")


def run(ws: Workspace, target: str, **options: object) -> EvalResult:
    module = __import__(target)
    return refinekit.eval.run(
        ws.csv("golden.csv", ROWS),
        target=getattr(module, str(options.pop("function", "answer"))),
        db=ws.path / "runs.db",
        prices=PRICES,
        **options,  # type: ignore[arg-type]
    )


def test_each_case_keeps_the_tier_it_ended_at_and_what_each_tier_did(
    ws: Workspace, ladder: str
) -> None:
    result = run(ws, ladder)

    by_question = {c.question: c for c in result.cases}
    assert {q: c.tier for q, c in by_question.items()} == {
        "q1": "small",
        "q2": "small",
        "q3": "big",
        "q4": "big",
        "q5": "small",
        "q6": "big",
    }
    assert [c.outcome for c in result.cases] == [
        "passed",
        "passed",
        "passed",
        "passed",
        "failed",  # small's "no" passed the ladder's check, not the golden row's
        "raised",  # big said "dunno" too: the last tier's rejection is raised
    ]
    assert [(t["name"], t["ended"], t["calls"]) for t in by_question["q3"].tiers] == [
        ("small", "exhausted", 1),
        ("big", "answered", 1),
    ]
    assert [(t["name"], t["ended"]) for t in by_question["q6"].tiers] == [
        ("small", "exhausted"),
        ("big", "exhausted"),
    ]
    assert by_question["q1"].tiers[0] | {"cost": None} == {
        "name": "small",
        "model": "small",
        "calls": 1,
        "answered": True,
        "ended": "answered",
        "model_calls": 1,
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "judge_tokens": 0,
        "cost": None,
    }
    assert by_question["q1"].tiers[0]["cost"] == pytest.approx(SMALL_COST)
    assert by_question["q3"].tiers[1]["cost"] == pytest.approx(BIG_COST)
    with open_store(ws.path / "runs.db") as store:  # kept as they were
        stored = store.cases(result.run_id)
    assert [(c.tier, c.tiers) for c in stored] == [(c.tier, c.tiers) for c in result.cases]


def test_an_async_target_reports_its_tiers_too(ws: Workspace, ladder: str) -> None:
    result = run(ws, ladder, function="answer_async")

    assert [c.tier for c in result.cases] == ["small", "small", "big", "big", "small", "big"]
    tiers = result.summary.tiers
    assert tiers is not None
    assert [(t["name"], t["ended"], t["passed"]) for t in tiers["tiers"]] == [
        ("small", 3, 2),
        ("big", 3, 2),
    ]


def test_the_run_reports_per_tier_cases_pass_rate_and_cost(ws: Workspace, ladder: str) -> None:
    result = run(ws, ladder)

    tiers = result.summary.tiers
    assert tiers is not None
    small, big = tiers["tiers"]
    assert tiers["cases"] == 6
    assert (small["name"], small["ended"], small["passed"], small["counted"]) == (
        "small",
        3,
        2,
        3,
    )
    assert (big["name"], big["ended"], big["passed"], big["counted"]) == ("big", 3, 2, 3)
    assert (small["lower"], small["upper"]) == pytest.approx(wilson_interval(2, 3))
    assert small["rate"] == pytest.approx(2 / 3)
    assert small["cost"] == pytest.approx(3 * SMALL_COST)  # the cases that ended there
    assert big["cost"] == pytest.approx(3 * (SMALL_COST + BIG_COST))
    assert (small["tried"], small["answered"], small["model_calls"]) == (6, 3, 6)
    assert (big["tried"], big["answered"], big["model_calls"]) == (3, 2, 3)
    assert (small["tokens"], big["tokens"]) == (6 * 110, 3 * 110)
    assert small["spent"] == pytest.approx(6 * SMALL_COST)
    assert big["spent"] == pytest.approx(3 * BIG_COST)
    cost = result.summary.cost
    assert cost is not None
    total = 6 * SMALL_COST + 3 * BIG_COST
    assert cost["total"] == pytest.approx(total)
    assert cost["per_pass"] == pytest.approx(total / 4)  # 4 cases passed
    assert result.run.summary["tiers"] == tiers  # stored with the run's figures


def test_a_target_without_a_ladder_has_no_tiers_and_still_a_cost_per_passing_case(
    ws: Workspace, ladder: str
) -> None:
    result = run(ws, ladder, function="plain")

    assert result.summary.tiers is None
    assert "tiers" not in result.run.summary
    assert all(c.tier is None and c.tiers == [] for c in result.cases)
    cost = result.summary.cost
    assert cost is not None
    assert cost["per_pass"] == pytest.approx(6 * SMALL_COST / 2)  # q1 and q2 passed


def test_the_cli_prints_the_tiers_only_for_a_ladder(ws: Workspace, ladder: str, cli: Cli) -> None:
    golden = ws.csv("golden.csv", ROWS)
    prices = ws.path / "prices.json"
    prices.write_text('{"small": [1.0, 2.0], "big": [10.0, 20.0]}', encoding="utf-8")
    report = ws.path / "eval.html"
    laddered = cli(
        "eval", golden, "--target", f"{ladder}:answer", "--prices", prices, "--report", report
    )

    assert "tiers (6 cases on the ladder; a case ends at the tier that answered" in laddered.out
    assert "  small: ended 3, pass rate 0.667 (2/3, 95% " in laddered.out
    assert "  big: ended 3, pass rate 0.667 (2/3, 95% " in laddered.out
    assert "tried in 6, answered 3, 6 calls, 660 tokens" in laddered.out
    assert f"per passing case: {(6 * SMALL_COST + 3 * BIG_COST) / 4:.6g} " in laddered.out
    html = report.read_text(encoding="utf-8")
    assert 'id="tiers"' in html
    assert "Tiers of the escalation ladder" in html
    assert "<code>small</code>" in html
    assert "Per passing case" in html

    plain = cli(
        "eval", golden, "--target", f"{ladder}:plain", "--prices", prices, "--report", report
    )
    assert "tiers (" not in plain.out
    assert "Tiers of the escalation ladder" not in report.read_text(encoding="utf-8")


def test_the_ladder_compared_with_its_strong_tier_alone(ws: Workspace, ladder: str) -> None:
    strong = run(ws, ladder, function="strong")
    assert [c.outcome for c in strong.cases] == ["passed"] * 5 + ["failed"]

    laddered = run(ws, ladder, compare=strong.run_id)

    c = laddered.comparison
    assert c is not None
    assert c.before.id == strong.run_id
    assert c.shared == 6
    assert [now.question for _, now in c.regressed] == ["q5"]  # small's wrong answer
    assert c.improved == []
    assert c.p_value == mcnemar_exact(1, 0) == 1.0
    assert c.before_cost == pytest.approx(6 * BIG_COST)
    assert c.after_cost == pytest.approx(6 * SMALL_COST + 3 * BIG_COST)
    assert c.cost_ratio == pytest.approx((6 * SMALL_COST + 3 * BIG_COST) / (6 * BIG_COST))
    assert (c.before_tokens, c.after_tokens) == (6 * 110, 9 * 110)
    assert c.token_ratio == pytest.approx(1.5)
    assert not laddered.regressed  # one regression is no significant one
    # the same from the stored runs
    again = refinekit.eval.compare(strong.run_id, laddered.run_id, db=ws.path / "runs.db")
    assert (again.cost_ratio, again.p_value) == (c.cost_ratio, c.p_value)
    html = refinekit.eval.html_report(laddered)
    assert "Cost on those questions" in html
    assert f"ratio <b>{c.cost_ratio:.3f}</b>" in html


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_at_schema_5_gets_the_tier_columns_and_keeps_its_cases(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = runstore if kind == "sqlite" else pgstore
    where = (
        str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    )
    monkeypatch.setattr(module, "_MIGRATIONS", module._MIGRATIONS[:5])  # as refinekit made it
    with open_store(where) as old:
        assert isinstance(old, SQLStore)
        run = old.start_run(
            kind="eval",
            dataset=tmp_path / "golden.csv",
            dataset_sha256="0" * 64,
            target="m:f",
            judge=None,
            options={},
            fingerprint="f",
            version="0",
        )
        old._exec(
            "INSERT INTO cases (run_id, key, position, question, row, outcome, answer, error, "
            "feedback, verdicts, passes, judgements, flipped, attempts, corrections, "
            "answer_seconds, judge_seconds, finished_at) VALUES "
            "(?, 'k', 1, 'Q', '{}', 'passed', 'A', NULL, '', '[]', 1, 1, 0, 1, 0, 0.5, 0.1, 2.0)",
            (run.id,),
        )
    monkeypatch.undo()
    with open_store(where) as store:
        assert isinstance(store, SQLStore)
        versions = store._all("SELECT version FROM schema_version")
        assert [dict(r) for r in versions] == [{"version": 7}]
        [case] = store.cases(run.id)
        assert (case.answer, case.tier, case.tiers) == ("A", None, [])
        store.save_case(
            run.id,
            type(case)(
                key="k2",
                position=2,
                question="Q2?",
                row={},
                outcome="passed",
                tier="big",
                tiers=[{"name": "small", "ended": "exhausted"}, {"name": "big"}],
            ),
        )
        assert [(c.key, c.tier, c.tiers) for c in store.cases(run.id)] == [
            ("k", None, []),
            ("k2", "big", [{"name": "small", "ended": "exhausted"}, {"name": "big"}]),
        ]
