"""Money in `refinekit eval`: `--prices`, each case's cost, `--max-cost`, the summary and report.

Model traffic goes over real HTTP to the scripted server, whose replies carry the token
counts the costs are computed from by hand here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CRITERIA_JUDGE, Cli, Workspace, table

import refinekit.eval
from refinekit import Prices
from refinekit.eval import CostLimitReached, RunAborted, UsageProblem
from refinekit.eval._store._sqlite import SQLiteStore
from refinekit.testing import Reply, ScriptedOpenAI

ANSWER = """
import os
import openai

def answer(question):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        return client.chat.completions.create(
            model=os.environ.get("RK_ANSWER_MODEL", "answer"),
            messages=[{"role": "user", "content": question}],
        )
"""

SELF_CORRECTING = """
import os
import openai
import pydantic
import refinekit

class Said(pydantic.BaseModel):
    text: str

@refinekit.self_correct(schema=Said)
def extract(messages):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        return client.chat.completions.create(model="answer", messages=messages)

def answer(question):
    return extract([{"role": "user", "content": question}]).text
"""

JUDGE = CRITERIA_JUDGE

ROWS = [
    {"question": "Refund window?", "must_mention": "seven days"},
    {"question": "Shipping cost?", "must_mention": "free"},
    {"question": "Gift cards?", "must_mention": "never"},
]
SAID = {
    "Refund window?": "Within seven days.",
    "Shipping cost?": "It is free.",
    "Gift cards?": "Never refunded.",
}
PRICES = {"answer": [2.0, 8.0], "judge": [1.0, 4.0]}
# every answer reply: 1000 prompt + 200 completion tokens; every judge reply 500 + 1
ANSWER_COST = (1000 * 2.0 + 200 * 8.0) / 1e6  # 0.0036
JUDGE_COST = (500 * 1.0 + 1 * 4.0) / 1e6  # 0.000504


def script_answers(server: ScriptedOpenAI, n: int | None = 3, said: dict[str, str] = SAID) -> None:
    """Script `n` answer replies (None: for ever), each 1000 prompt + 200 completion tokens."""
    server.script(
        "answer",
        lambda request: Reply.text(
            said[str((request.body or {})["messages"][-1]["content"])],
            prompt_tokens=1000,
            completion_tokens=200,
        ),
        times=n,
    )


def script_judge(server: ScriptedOpenAI, n: int = 3) -> None:
    server.script(
        "judge",
        Reply.text("Yes", {"Yes": 0.9, "No": 0.1}, prompt_tokens=500, completion_tokens=1),
        times=n,
    )


def priced_eval(ws: Workspace, target: str, prices: str | Path) -> tuple[str | Path, ...]:
    """The arguments of `refinekit eval` on ROWS, answered by `target`, priced by `prices`."""
    return ("eval", ws.csv("golden.csv", ROWS), "--target", f"{target}:answer", "--prices", prices)


def prices_file(ws: Workspace, prices: object = PRICES) -> Path:
    path = ws.path / "prices.json"
    path.write_text(json.dumps(prices), encoding="utf-8")
    return path


# --- each case's cost -----------------------------------------------------------------------


def test_each_case_costs_its_priced_answer_and_judge_calls(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    script_answers(server)
    script_judge(server)
    target, judge = ws.module(ANSWER), ws.module(JUDGE, "judge")

    result = refinekit.eval.run(
        ws.csv("golden.csv", ROWS),
        target=f"{target}:answer",
        judge=f"{judge}:judge",
        concurrency=1,
        prices=Prices({"answer": (2.0, 8.0), "judge": (1.0, 4.0)}),
    )

    assert [c.outcome for c in result.cases] == ["passed"] * 3
    for case in result.cases:
        assert case.cost == pytest.approx(
            {"answer": ANSWER_COST, "answer_judge": 0.0, "judge": JUDGE_COST, "extra": 0.0}
        )
    money = result.summary.cost
    assert money is not None
    assert money["total"] == pytest.approx(3 * (ANSWER_COST + JUDGE_COST))
    assert money["per_case"] == pytest.approx(ANSWER_COST + JUDGE_COST)
    assert (money["answer"], money["judge"]) == pytest.approx((3 * ANSWER_COST, 3 * JUDGE_COST))
    assert money["extra"] == 0.0
    # the stored run keeps the figures and the prices it was priced with
    assert result.run.summary["cost"] == pytest.approx(money)
    assert result.run.options["prices"] == PRICES
    with SQLiteStore(result.db) as store:  # type: ignore[arg-type]
        assert [c.cost for c in store.cases(result.run_id)] == [c.cost for c in result.cases]


def test_a_correction_is_the_extra_cost_of_its_case(ws: Workspace, server: ScriptedOpenAI) -> None:
    # the first reply is no JSON: @self_correct pays for a second call; that call is `extra`
    server.script(
        "answer",
        [
            Reply.text("not json at all", prompt_tokens=100, completion_tokens=10),
            Reply.text('{"text": "Within seven days."}', prompt_tokens=300, completion_tokens=20),
        ],
    )
    target = ws.module(SELF_CORRECTING)

    result = refinekit.eval.run(
        ws.csv("golden.csv", ROWS[:1]),
        target=f"{target}:answer",
        prices={"answer": [2.0, 8.0]},
    )

    [case] = result.cases
    assert (case.outcome, case.corrections) == ("passed", 1)
    first = (100 * 2.0 + 10 * 8.0) / 1e6
    second = (300 * 2.0 + 20 * 8.0) / 1e6
    assert case.cost == pytest.approx(
        {"answer": first + second, "answer_judge": 0.0, "judge": 0.0, "extra": second}
    )
    assert result.summary.cost is not None
    assert result.summary.cost["extra"] == pytest.approx(second)


def test_a_model_without_a_price_stops_the_run_at_its_first_case_naming_it(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    script_answers(server, 1)
    target = ws.module(ANSWER)

    with pytest.raises(RunAborted, match="no price for model 'answer'") as stopped:
        refinekit.eval.run(
            ws.csv("golden.csv", ROWS),
            target=f"{target}:answer",
            concurrency=1,
            prices={"judge": [1.0, 4.0]},
        )

    assert (stopped.value.stored, stopped.value.cases) == (0, 3)
    assert len(server.requests_for("answer")) == 1  # stopped at the first case


def test_without_prices_a_case_has_no_cost_and_the_summary_no_money(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    script_answers(server)
    target = ws.module(ANSWER)

    result = cli("eval", ws.csv("golden.csv", ROWS), "--target", f"{target}:answer")

    assert result.code == 0, result.err
    assert not [line for line in result.out.splitlines() if line.startswith(("cost", "  answer"))]
    assert "retries and corrections" not in result.out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        assert "cost" not in run.summary
        assert run.options["prices"] is None
        assert all(c.cost == {} for c in store.cases(run.id))


# --- the command line: --prices, the summary, the report --------------------------------------


def test_the_summary_and_report_show_total_per_case_answer_judge_and_extra(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    script_answers(server)
    script_judge(server)
    target, judge = ws.module(ANSWER), ws.module(JUDGE, "judge")
    report = ws.path / "report.html"

    result = cli(
        "eval",
        ws.csv("golden.csv", ROWS),
        "--target",
        f"{target}:answer",
        "--judge",
        f"{judge}:judge",
        "--prices",
        prices_file(ws),
        "--report",
        report,
    )

    assert result.code == 0, result.err
    total, per_case = 3 * (ANSWER_COST + JUDGE_COST), ANSWER_COST + JUDGE_COST
    assert f"cost: {total:.6g} in all, {per_case:.6g} per case (mean over 3 priced)" in result.out
    assert (
        f"  answer {3 * ANSWER_COST:.6g} (judges inside the function included), the run's "
        f"judge {3 * JUDGE_COST:.6g}" in result.out
    )
    assert "  retries and corrections: 0 (the answer calls after each case's first" in result.out
    html = report.read_text(encoding="utf-8")
    assert f"<b>{total:.6g}</b>" in html
    assert "Retries and corrections" in html
    assert '<th class="n">cost</th>' in html  # the per-case column of every case
    assert f'<td class="n">{per_case:.6g}</td>' in html
    assert (
        "Priced with <code>{&quot;answer&quot;: [2.0, 8.0], &quot;judge&quot;: [1.0, 4.0]}" in html
    )


def test_a_report_without_prices_has_no_money(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    script_answers(server)
    target = ws.module(ANSWER)
    report = ws.path / "report.html"

    result = cli(
        "eval", ws.csv("golden.csv", ROWS), "--target", f"{target}:answer", "--report", report
    )

    assert result.code == 0, result.err
    html = report.read_text(encoding="utf-8")
    assert "Retries and corrections" not in html
    assert '<th class="n">cost</th>' not in html


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ("[1, 2]", "must be a JSON object of prices"),
        ('{"answer": [1.0]}', "must be a pair (input, output)"),
        ('{"answer": [1.0, -2]}', "must be a finite number >= 0"),
        ('{"answer": ["1", 2]}', "must be a number"),
    ],
)
def test_a_bad_prices_file_is_a_usage_error_before_anything_runs(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, content: str | None, says: str
) -> None:
    target = ws.module(ANSWER)
    path = ws.path / "prices.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")

    result = cli(*priced_eval(ws, target, path))

    assert result.code == 2
    assert says in result.err
    assert "--prices" in result.err
    assert server.requests_for("answer") == []


def test_prices_naming_something_that_is_not_prices_is_a_usage_error(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    target = ws.module(ANSWER)
    prices = ws.module("PRICES = {'answer': (1.0, 2.0)}\n", "prices")

    result = cli(*priced_eval(ws, target, f"{prices}:PRICES"))

    assert result.code == 2
    assert "names a dict, not a refinekit.Prices" in result.err


def test_prices_as_a_prices_object_by_module_name(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    script_answers(server)
    target = ws.module(ANSWER)
    prices = ws.module(
        "import refinekit\nPRICES = refinekit.Prices({}, default=(2.0, 8.0))\n", "prices"
    )

    result = cli(*priced_eval(ws, target, f"{prices}:PRICES"))

    assert result.code == 0, result.err
    assert f"cost: {3 * ANSWER_COST:.6g} in all" in result.out


def test_max_cost_without_prices_is_a_usage_error(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    target = ws.module(ANSWER)

    result = cli(
        "eval", ws.csv("golden.csv", ROWS), "--target", f"{target}:answer", "--max-cost", "1"
    )

    assert result.code == 2
    assert "--max-cost needs --prices" in result.err
    with pytest.raises(UsageProblem, match="max_cost must be a number above 0"):
        refinekit.eval.run(ws.path / "golden.csv", target=f"{target}:answer", max_cost=0)


def test_calibrate_prices_the_judge(ws: Workspace, server: ScriptedOpenAI, cli: Cli) -> None:
    script_judge(server, 2)
    judge = ws.module(JUDGE, "judge")
    labelled = ws.csv(
        "labelled.csv",
        [
            {"question": "Refund window?", "answer": "Seven days.", "label": "pass"},
            {"question": "Gift cards?", "answer": "Never.", "label": "pass"},
        ],
    )

    result = cli("calibrate", labelled, "--judge", f"{judge}:judge", "--prices", prices_file(ws))

    assert result.code == 0, result.err
    assert (
        f"judge cost: {2 * JUDGE_COST:.6g} in all, {JUDGE_COST:.6g} per item (mean over 2 "
        "priced)" in result.out
    )


# --- --max-cost -------------------------------------------------------------------------------


def test_max_cost_stops_starting_cases_when_one_more_would_go_over_and_a_higher_resumes(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    rows = [*ROWS, *({"question": f"Question {i}?", "must_mention": "answer"} for i in range(3))]
    said = SAID | {f"Question {i}?": "An answer." for i in range(3)}
    script_answers(server, None, said)
    target = ws.module(ANSWER)
    golden = ws.csv("golden.csv", rows)
    prices = prices_file(ws)
    # each case costs 0.0036: after 2 cases (0.0072) a third would make 0.0108 > 0.01
    args = ("eval", golden, "--target", f"{target}:answer", "--prices", prices)
    args += ("--concurrency", "1")

    stopped = cli(*args, "--max-cost", "0.01")

    assert stopped.code == 3
    assert "--max-cost 0.01: the run has spent 0.0072 on 2 stored cases" in stopped.err
    assert "higher --max-cost" in stopped.err
    assert (
        "run 1 is incomplete: 2 of 6 cases stored. Run the same command with a higher "
        "--max-cost to finish it" in stopped.out
    )
    assert len(server.requests_for("answer")) == 2
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        assert store.run(1).status == "incomplete"

    # the same limit again starts nothing: the run has spent what it may
    again = cli(*args, "--max-cost", "0.01")
    assert again.code == 3
    assert len(server.requests_for("answer")) == 2

    # a higher limit resumes where it stopped: 0.0072 + 3 more cases = 0.018 <= 0.02, and
    # a fourth would make 0.0216
    more = cli(*args, "--max-cost", "0.02")
    assert more.code == 3
    assert "run 1 is incomplete: 5 of 6 cases stored" in more.out
    assert len(server.requests_for("answer")) == 5

    done = cli(*args, "--max-cost", "1")
    assert done.code == 0, done.err
    assert table(done.out) == {i: "pass" for i in range(1, 7)}
    assert f"cost: {6 * ANSWER_COST:.6g} in all" in done.out
    assert len(server.requests_for("answer")) == 6


def test_max_cost_counts_what_earlier_sessions_spent(ws: Workspace, server: ScriptedOpenAI) -> None:
    script_answers(server, 3)
    target = ws.module(ANSWER)
    golden = ws.csv("golden.csv", ROWS)
    with pytest.raises(RunAborted):  # one case, then stopped by the limit
        refinekit.eval.run(
            golden,
            target=f"{target}:answer",
            prices=PRICES,
            max_cost=0.005,
            concurrency=1,
        )

    # a second session: the stored case (0.0036) and one more fit in 0.008, a third not
    with pytest.raises(RunAborted, match=r"spent 0\.0072 on 2 stored cases"):
        refinekit.eval.run(
            golden, target=f"{target}:answer", prices=PRICES, max_cost=0.008, concurrency=1
        )
    assert len(server.requests_for("answer")) == 2


# --- PostgreSQL ---------------------------------------------------------------------------------


def test_postgres_stores_each_case_cost_and_the_limit_reads_it(
    ws: Workspace, server: ScriptedOpenAI, postgres_url: str
) -> None:
    script_answers(server)
    target = ws.module(ANSWER)
    golden = ws.csv("golden.csv", ROWS)

    with pytest.raises(RunAborted, match=r"spent 0\.0072 on 2 stored cases"):
        refinekit.eval.run(
            golden,
            target=f"{target}:answer",
            prices=PRICES,
            max_cost=0.01,
            concurrency=1,
            db=postgres_url,
        )
    result = refinekit.eval.run(
        golden, target=f"{target}:answer", prices=PRICES, db=postgres_url, concurrency=1
    )

    assert [c.cost["answer"] for c in result.cases] == pytest.approx([ANSWER_COST] * 3)
    assert result.summary.cost is not None
    assert result.summary.cost["total"] == pytest.approx(3 * ANSWER_COST)
    assert result.run.summary["cost"]["total"] == pytest.approx(3 * ANSWER_COST)


def test_cases_in_flight_count_against_the_limit(ws: Workspace, server: ScriptedOpenAI) -> None:
    script_answers(server, 3)
    target = ws.module(ANSWER)

    # three slots, but nothing is known of a case's cost before one is stored: the first case
    # runs alone (0.0036); the next reserves 0.0036, the most a stored case cost (0.0072 in
    # all); a third would make 0.0108 > 0.01, so none starts, and once the second is stored
    # nothing is in flight and the run stops (before the fix: 3 at once, 0.0108)
    with pytest.raises(CostLimitReached, match=r"spent 0\.0072 on 2 stored cases") as stopped:
        refinekit.eval.run(
            ws.csv("golden.csv", ROWS),
            target=f"{target}:answer",
            prices=PRICES,
            max_cost=0.01,
            concurrency=3,
        )

    assert "another case (reserving 0.0036, the most a stored case cost)" in str(stopped.value)
    assert stopped.value.stored == 2
    assert (stopped.value.max_cost, stopped.value.spent) == pytest.approx((0.01, 0.0072))
    assert len(server.requests_for("answer")) == 2  # not 3: no case started at an estimate of 0


def test_a_case_run_again_adds_its_new_cost_to_what_it_cost_before(
    ws: Workspace, server: ScriptedOpenAI
) -> None:
    # every reply unparsable: the first call and 2 corrections, then the case raises
    server.script("answer", Reply.text("no json", prompt_tokens=100, completion_tokens=10), times=3)
    target = ws.module(SELF_CORRECTING)
    golden = ws.csv("golden.csv", ROWS[:1])
    first = refinekit.eval.run(golden, target=f"{target}:answer", prices=PRICES)
    [raised] = first.cases
    call = (100 * 2.0 + 10 * 8.0) / 1e6
    assert raised.outcome == "raised"
    assert raised.cost == pytest.approx(
        {"answer": 3 * call, "answer_judge": 0.0, "judge": 0.0, "extra": 2 * call}
    )

    # a complete run is never resumed: store it incomplete, so that the same call resumes it
    # and runs its raised case again (--retry raised)
    server.script(
        "answer",
        Reply.text('{"text": "Within seven days."}', prompt_tokens=300, completion_tokens=20),
    )
    with SQLiteStore(first.db) as store:  # type: ignore[arg-type]
        store.finish_run(first.run_id, "incomplete", {})
    again = refinekit.eval.run(golden, target=f"{target}:answer", prices=PRICES, retry="raised")

    [case] = again.cases
    second = (300 * 2.0 + 20 * 8.0) / 1e6
    assert (again.run_id, case.outcome) == (first.run_id, "passed")
    assert case.cost == pytest.approx(
        {"answer": 3 * call + second, "answer_judge": 0.0, "judge": 0.0, "extra": 2 * call}
    )
