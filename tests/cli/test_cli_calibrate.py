"""`refinekit calibrate` end to end, in process: a real criteria judge over HTTP against the
scripted server, whose probabilities come from the logprobs of its replies."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from helpers import JUDGE_CLIENT, Cli, Result, Workspace, judge_replies, yes_no

from refinekit.eval._stats import wilson_interval
from refinekit.eval._store._sqlite import SQLiteStore
from refinekit.testing import Reply, ScriptedOpenAI

CRITERIA_JUDGE = (
    JUDGE_CLIENT
    + """
judge = judges.criteria(
    JudgeModel(client, os.environ.get("RK_JUDGE_MODEL", "judge")),
    [Criterion("supported", "Does the context support the answer?")],  # pass 0.8, fail 0.2
)
"""
)

# answer -> (the judge's P(yes), the people's label); no probability sits on a bin's edge
ITEMS = {
    "a1": (0.95, "pass"),
    "a2": (0.90, "pass"),
    "a3": (0.85, "fail"),
    "a4": (0.70, "pass"),  # uncertain for the judge (between 0.2 and 0.8): counts as fail
    "a5": (0.45, "fail"),
    "a6": (0.35, "pass"),
    "a7": (0.15, "fail"),
    "a8": (0.05, "fail"),
}


def labelled(ws: Workspace, items: dict[str, tuple[float, str]]) -> Path:
    rows = [
        {"question": f"question {a}", "context": f"context {a}", "answer": a, "label": label}
        for a, (_, label) in items.items()
    ]
    return ws.csv("labelled.csv", rows)


def test_calibrate_a_criteria_judge_with_logprob_probabilities(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    data = labelled(ws, ITEMS)
    judge = ws.module(CRITERIA_JUDGE)
    server.script("judge", [judge_replies({a: p for a, (p, _) in ITEMS.items()})] * 8)

    result = cli(
        "calibrate", data, "--judge", f"{judge}:judge", "--bins", "5", "--target-error", "0.2"
    )

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    # judge pass: a1 a2 a3 (p >= 0.8); people pass: a1 a2 a4 a6
    assert "judged 8 items" in lines
    assert "  judge pass            2            1" in lines
    assert "  judge fail            2            3" in lines
    # accuracy 5/8; failures: precision 3/5, recall 3/4; kappa (5/8 - 1/2) / (1 - 1/2), its
    # interval 0.25 +- 1.96 sqrt(0.10986) (Fleiss, Cohen and Everitt's variance, by hand)
    assert (
        "accuracy 0.625, precision on failures 0.600, recall on failures 0.750, Cohen's kappa "
        "0.250 (95% -0.400 to 0.900)"
    ) in lines
    # sensitivity: people passed 4, the judge 2 of them; specificity: people failed 4, judge 3
    assert lines[lines.index("judged 8 items") + 5].startswith("sensitivity 0.500 (of the")
    assert "specificity 0.750 (of those people failed" in result.out
    start = lines.index("reliability (8 items):")
    assert lines[start + 1 : start + 7] == [
        "  bin         items   mean p   passed",
        "  0.00-0.20       2    0.100    0.000",
        "  0.20-0.40       1    0.350    1.000",
        "  0.40-0.60       1    0.450    0.000",
        "  0.60-0.80       1    0.700    1.000",
        "  0.80-1.00       3    0.900    0.667",
    ]
    # ECE = (2 * 0.1 + 0.65 + 0.45 + 0.3 + 3 * (0.9 - 2/3)) / 8
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
        cases = store.cases(run.id)
    assert run.kind == "calibrate"
    assert run.status == "complete"
    assert run.summary["ece"] == pytest.approx(0.2875)
    assert f"expected calibration error {run.summary['ece']:.3f}" in lines
    # at most 20% wrong: passes at p >= 0.90 (2 items, none failed by people); fails at
    # p <= 0.15 (2 items, none passed by people); 4 in between
    upper = wilson_interval(0, 2)[1]
    assert lines[-5:] == [
        "recommended thresholds, at most 20% wrong on each side:",
        f"  pass at p >= 0.900: 2 items, 0 failed by people (95% upper bound {upper:.3f})",
        f"  fail at p <= 0.150: 2 items, 0 passed by people (95% upper bound {upper:.3f})",
        "  uncertain (for a person to look at): 4 items (50%)",
        "  as a criterion: Criterion(..., pass_at=0.900, fail_at=0.150)",
    ]
    thresholds = run.summary["thresholds"]
    assert (thresholds["pass_at"], thresholds["fail_at"], thresholds["uncertain"]) == (
        pytest.approx(0.9),
        pytest.approx(0.15),
        4,
    )
    assert run.summary["kappa"] == pytest.approx(0.25)

    # the probabilities came from the logprobs of real replies
    assert [c.probability for c in cases] == [pytest.approx(p) for p, _ in ITEMS.values()]
    assert [c.label for c in cases] == [label for _, label in ITEMS.values()]
    requests = server.requests_for("judge")
    assert len(requests) == 8
    for request in requests:
        body = request.body or {}
        assert (body["logprobs"], body["top_logprobs"]) == (True, 5)
    prompts = [str((r.body or {})["messages"][-1]["content"]) for r in requests]
    [a6] = [p for p in prompts if "<answer>\na6\n</answer>" in p]
    assert "context a6" in a6  # the context column reached the judge
    assert all(c.judge_usage.model_calls == 1 for c in cases)

    listed = cli("runs", "--kind", "calibrate")
    assert re.search(r" 1  calibrate complete .* kappa 0\.250 ", listed.out)


def test_a_judge_without_probabilities_gets_agreement_figures_only(ws: Workspace, cli: Cli) -> None:
    data = ws.jsonl(
        "labelled.jsonl",
        [
            {"question": "q1", "answer": "good", "label": True},
            {"question": "q2", "answer": "good", "label": "yes"},
            {"question": "q3", "answer": "bad", "label": "0"},
            {"question": "q4", "answer": "bad", "label": "Pass"},
        ],
    )
    judge = ws.module("def judge(request):\n    return request.answer == 'good'\n")

    result = cli("calibrate", data, "--judge", f"{judge}:judge")

    assert result.code == 0, result.err
    assert "accuracy 0.750, precision on failures 0.500, recall on failures 1.000" in result.out
    assert (
        "probabilities: 0 of 4 verdicts carried one; a reliability table and thresholds need "
        "one on every verdict"
    ) in result.out
    assert "reliability" not in result.out.replace("a reliability table", "")
    assert "recommended thresholds" not in result.out


def test_items_the_judge_could_not_judge_are_counted_and_left_out(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    items = {"a1": (0.9, "pass"), "a2": (0.1, "fail"), "a3": (0.9, "fail"), "a4": (0.5, "pass")}
    data = labelled(ws, items)
    judge = ws.module(CRITERIA_JUDGE)
    plan: dict[str, float | list[float | Reply]] = {a: p for a, (p, _) in items.items()}
    plan["a4"] = [Reply.error(503, "overloaded")]
    server.script("judge", [judge_replies(plan)] * 4)

    result = cli("calibrate", data, "--judge", f"{judge}:judge", "--bins", "2")

    assert result.code == 0, result.err
    assert "judged 3 items (1 unavailable and 0 inconclusive left out)" in result.out
    assert "accuracy 0.667" in result.out
    assert "reliability (3 items):" in result.out
    assert not re.search(r"\b1 (cases|items|verdicts)\b", result.out), result.out  # "1 item"
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
    assert (run.summary["items"], run.summary["unavailable"]) == (3, 1)


def test_a_misconfigured_judge_stops_calibration_and_the_fixed_one_resumes(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = {"a1": (0.9, "pass"), "a2": (0.1, "fail"), "a3": (0.9, "pass")}
    data = labelled(ws, items)
    judge = ws.module(CRITERIA_JUDGE)
    monkeypatch.setenv("RK_JUDGE_MODEL", "judge-typo")  # no such model: HTTP 404
    server.script("judge", [yes_no(0.9)])

    stopped = cli("calibrate", data, "--judge", f"{judge}:judge", "--concurrency", "1")

    assert stopped.code == 3
    assert "the judge is misconfigured" in stopped.err
    assert "HTTP 404" in stopped.err
    assert "(check the model name and base URL)" in stopped.err
    assert "run 1 is incomplete: 0 of 3 cases stored" in stopped.out

    monkeypatch.setenv("RK_JUDGE_MODEL", "judge")
    monkeypatch.delitem(sys.modules, judge)
    server.script("judge", [judge_replies({a: p for a, (p, _) in items.items()})] * 3)
    resumed = cli("calibrate", data, "--judge", f"{judge}:judge", "--concurrency", "1")

    assert resumed.code == 0, resumed.err
    assert "-> run 1 in" in resumed.out
    assert "accuracy 1.000" in resumed.out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
    assert run.status == "complete"


def judged_answers(server: ScriptedOpenAI) -> list[str]:
    """The answers the judge was asked about, in order."""
    texts = [str((r.body or {})["messages"][-1]["content"]) for r in server.requests_for("judge")]
    return [m.group(1) for t in texts if (m := re.search(r"<answer>\n(.*?)\n</answer>", t, re.S))]


def test_retry_unavailable_judges_the_stored_unavailable_items_again(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    items = {"a1": (0.9, "pass"), "a2": (0.1, "fail"), "a3": (0.9, "pass")}
    data = labelled(ws, items)
    judge = ws.module(CRITERIA_JUDGE)
    command = ("calibrate", data, "--judge", f"{judge}:judge", "--concurrency", "1")
    # a1: the judge is down (unavailable); a2 judged; a3: the key is refused (exit 3)
    plan = {"a1": [Reply.error(503), 0.9], "a2": 0.1, "a3": [Reply.error(401), 0.9]}
    server.script("judge", [judge_replies(plan)] * 5)
    assert cli(*command).code == 3
    assert judged_answers(server) == ["a1", "a2", "a3"]

    resumed = cli(*command, "--retry", "unavailable")

    assert resumed.code == 0, resumed.err
    assert judged_answers(server)[3:] == ["a1", "a3"]  # a2 is not asked again
    assert "running again 1 case that ended 1 unavailable (--retry)" in resumed.out
    assert "judged 3 items" in resumed.out
    assert "accuracy 1.000" in resumed.out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
    assert (run.status, run.summary["retried"], run.summary["unavailable"]) == ("complete", 1, 0)


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        (
            [{"question": "q", "answer": "a"}],
            [],
            "the labelled file needs a 'label' column (pass or fail)",
        ),
        ([{"question": "q", "label": "pass"}], [], "the labelled file needs an 'answer' column"),
        (
            [{"question": "q", "answer": "a", "label": "pass"}, {"question": "r", "label": "fail"}],
            [],
            "needs an 'answer' column (row 2 has none)",
        ),
        (
            [{"question": "q", "answer": "a", "label": "maybe"}],
            [],
            "row 1: label 'maybe' is neither pass nor fail",
        ),
        ([{"question": "q", "answer": "a", "label": None}], [], "row 1: label None"),
        ([{"question": "q", "answer": "a", "label": "pass"}], ["--target-error", "1"], "0.99"),
        ([{"question": "q", "answer": "a", "label": "pass"}], ["--target-error", "x"], "0.99"),
        ([{"question": "q", "answer": "a", "label": "pass"}], ["--bins", "0"], "from 1 to 100"),
        ([{"question": "q", "answer": "a", "label": "pass"}], ["--judge", "{m}:nope"], "no 'nope'"),
        (
            [{"question": "q", "answer": "a", "label": "pass"}],
            ["--judge", "{m}:not_a_judge"],
            "is not an evaluator",
        ),
    ],
)
def test_calibrate_usage_errors_exit_2_and_judge_nothing(
    ws: Workspace, cli: Cli, rows: list[dict[str, object]], args: list[str], message: str
) -> None:
    data = ws.jsonl("labelled.jsonl", rows)
    module = ws.module(
        """
        import pathlib

        def judge(request):
            pathlib.Path("judged").write_text("the judge ran")
            return True

        not_a_judge = "strict"
        """
    )
    judge = ["--judge", f"{module}:judge"] if "--judge" not in args else []

    result = cli("calibrate", data, *judge, *(a.replace("{m}", module) for a in args))

    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err
    assert not (ws.path / "judged").exists()
    db = ws.path / ".refinekit" / "runs.db"
    assert not db.exists()


def test_calibrate_needs_a_judge_and_a_file(ws: Workspace, cli: Cli) -> None:
    assert "the following arguments are required: --judge" in cli("calibrate", "x.csv").err
    missing = cli("calibrate", "missing.csv", "--judge", "m:j")
    assert missing.code == 2
    assert "file not found: missing.csv" in missing.err


PLAIN_JUDGES = """
from refinekit import Verdict

def judge(request):
    return request.answer == "good"

def down(request):
    return Verdict.unjudged("the judge model is down")

def unsure(request):
    return Verdict.inconclusive("NOT_ENOUGH_EVIDENCE")
"""
# the judge passes q1 q2, fails q3 q4; people pass q1 q2 q4: agreement 3/4, by chance 1/2
AGREEMENT = [
    {"question": "q1", "answer": "good", "label": "pass"},
    {"question": "q2", "answer": "good", "label": "pass"},
    {"question": "q3", "answer": "bad", "label": "fail"},
    {"question": "q4", "answer": "bad", "label": "pass"},
]


def calibrate_plain(ws: Workspace, cli: Cli, judge: str, *args: str) -> Result:
    """`refinekit calibrate` of AGREEMENT's items by PLAIN_JUDGES' `judge`."""
    data = ws.jsonl("labelled.jsonl", AGREEMENT)
    module = ws.module(PLAIN_JUDGES)
    return cli("calibrate", data, "--judge", f"{module}:{judge}", *args)


@pytest.mark.parametrize(
    ("judge", "min_kappa", "code", "line"),
    [
        ("judge", "0.5", 0, "gate: Cohen's kappa 0.500 >= --min-kappa 0.500: pass"),
        ("judge", "-1", 0, "gate: Cohen's kappa 0.500 >= --min-kappa -1.000: pass"),
        ("judge", "0.6", 1, "gate: Cohen's kappa 0.500 is under --min-kappa 0.600: FAIL"),
    ],
)
def test_min_kappa_gates_calibration_on_cohens_kappa(
    ws: Workspace, cli: Cli, judge: str, min_kappa: str, code: int, line: str
) -> None:
    data = ws.jsonl("labelled.jsonl", AGREEMENT)
    module = ws.module(PLAIN_JUDGES)

    result = cli("calibrate", data, "--judge", f"{module}:{judge}", "--min-kappa", min_kappa)

    assert result.code == code, result.err
    assert result.out.splitlines()[-1] == line
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        assert store.runs()[0].status == "complete"  # a failed gate is a finished run
    ungated = cli("calibrate", data, "--judge", f"{module}:{judge}")
    assert ungated.code == 0
    assert "gate:" not in ungated.out


@pytest.mark.parametrize("gate", [[], ["--min-kappa", "-1"]], ids=["no-gate", "gate"])
def test_a_judge_inconclusive_on_every_item_measured_nothing_exit_1(
    ws: Workspace, cli: Cli, gate: list[str]
) -> None:
    result = calibrate_plain(ws, cli, "unsure", *gate)

    assert result.code == 1
    assert "judged 0 items (0 unavailable and 4 inconclusive)" in result.out
    assert "no item got a pass or fail verdict" in result.err
    assert "accuracy" not in result.out  # no figure of agreement with nothing judged
    assert "gate:" not in result.out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        assert store.runs()[0].status == "complete"  # a finished run, resumable as it is


@pytest.mark.parametrize("gate", [[], ["--min-kappa", "-1"]], ids=["no-gate", "gate"])
def test_a_judge_that_gave_no_verdict_at_all_is_a_setup_failure_exit_4(
    ws: Workspace, cli: Cli, gate: list[str]
) -> None:
    result = calibrate_plain(ws, cli, "down", *gate)

    assert result.code == 4
    assert result.err == (
        "refinekit calibrate: error: the judge gave no verdict: 4 unavailable of 4 cases (the "
        "commonest error, every time: the judge model is down); a failure of the setup (an "
        "endpoint, a key, the function), not a measurement: fix it and run again\n"
    )
    assert "accuracy" not in result.out  # no figure of agreement with nothing judged
    assert "gate:" not in result.out
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        [run] = store.runs()
    assert (run.status, run.summary["setup_failed"], run.summary["items"]) == ("complete", True, 0)
    assert "nothing (setup failed)" in cli("runs").out


@pytest.mark.parametrize("value", ["1.5", "-1.01", "high"])
def test_min_kappa_outside_minus_1_to_1_is_a_usage_error(
    ws: Workspace, cli: Cli, value: str
) -> None:
    result = calibrate_plain(ws, cli, "judge", "--min-kappa", value)

    assert result.code == 2
    assert "a number from -1 to 1" in result.err
    assert not (ws.path / ".refinekit" / "runs.db").exists()


def test_a_calibration_report_that_cannot_be_written_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli
) -> None:
    (ws.path / "notes.txt").write_text("a file where the report's folder would be made")

    result = calibrate_plain(ws, cli, "judge", "--report", "notes.txt/c.html")

    assert result.code == 2
    assert result.err == (
        "refinekit calibrate: error: --report notes.txt/c.html: notes.txt is a file, not a "
        "folder; nothing was run\n"
    )
    assert result.out == ""
    assert not (ws.path / ".refinekit" / "runs.db").exists()


CODE_CHECK_JUDGE = (
    JUDGE_CLIENT
    + """
judge = judges.criteria(
    JudgeModel(client, "judge"),
    [
        # a code check, run first: when it fails, the model criterion is not asked
        Criterion("cites", lambda request: "[" in request.answer, when_false="Cite a source."),
        Criterion("supported", "Does the context support the answer?"),
    ],
)
"""
)


def test_an_item_failed_by_a_code_check_keeps_the_reliability_table(
    ws: Workspace, server: ScriptedOpenAI, cli: Cli
) -> None:
    items = {
        "a1 [x.md]": (0.95, "pass"),
        "a2 [x.md]": (0.85, "pass"),
        "a3 [x.md]": (0.30, "fail"),
        "a4 [x.md]": (0.10, "fail"),
        "a5, citing nothing": (0.0, "fail"),  # fails the code check: certainly a fail
    }
    data = labelled(ws, items)
    judge = ws.module(CODE_CHECK_JUDGE)
    server.script("judge", [judge_replies({a: p for a, (p, _) in items.items()})] * 4)

    result = cli("calibrate", data, "--judge", f"{judge}:judge", "--bins", "2")

    assert result.code == 0, result.err
    assert len(server.requests_for("judge")) == 4  # a5 cost no model call
    assert "probabilities:" not in result.out
    lines = result.out.splitlines()
    start = lines.index("reliability (5 items):")
    assert lines[start + 1 : start + 4] == [
        "  bin         items   mean p   passed",
        "  0.00-0.50       3    0.133    0.000",
        "  0.50-1.00       2    0.900    1.000",
    ]
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        cases = store.cases(store.runs()[0].id)
    assert [c.probability for c in cases] == [pytest.approx(p) for p, _ in items.values()]
    assert cases[4].feedback == "Cite a source."
