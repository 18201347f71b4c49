"""Calibrating a panel: its kappa, each member's, their pairwise agreement, what adds nothing.

A majority panel of a function (`exact`), a criteria judge over real HTTP to the scripted
server (`model`) and a function that fails everything (`never`), calibrated against people's
labels; every figure below is worked by hand from the votes. Then the bias checks: agreement
by length band, the self-preference warning, and the report and the CLI that show them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import Cli, judge_replies, write_csv

import refinekit.eval
from refinekit import EvaluationRequest, judges
from refinekit.eval._calibration import Calibration
from refinekit.eval._report import calibration_report
from refinekit.eval._store._sqlite import SQLiteStore
from refinekit.testing import ScriptedOpenAI

# people pass a1-a4; exact passes a1-a5 (wrong on a5); the model passes a1 a2 a4 a6 (wrong
# on a3, a6); never fails all.
PEOPLE = {f"a{i}": ("pass" if i <= 4 else "fail") for i in range(1, 9)}
EXACT = {"a1", "a2", "a3", "a4", "a5"}
MODEL = {"a1": 0.9, "a2": 0.9, "a3": 0.1, "a4": 0.9, "a5": 0.1, "a6": 0.9, "a7": 0.1, "a8": 0.1}


def exact(request: EvaluationRequest) -> bool:
    return request.answer in EXACT


def never(request: EvaluationRequest) -> bool:
    return False


@pytest.fixture
def labelled(tmp_path: Path) -> Path:
    rows = [{"question": f"q {a}", "answer": a, "label": label} for a, label in PEOPLE.items()]
    return write_csv(tmp_path / "labelled.csv", rows)


def the_panel(client: openai.OpenAI) -> judges.Panel:
    model = judges.criteria(
        judges.JudgeModel(client, "judge"),
        [judges.Criterion("supported", "Does the context support the answer?")],
    )
    return judges.panel([("exact", exact), ("model", model), ("never", never)])


def check_panel_figures(c: Calibration) -> None:
    # the panel (all three vote in a calibration): passes a1 a2 a4 (a3, a5: exact alone;
    # a6: model alone): agreement 7/8, both sides pass 3/8 and 4/8: kappa 0.75
    assert c.items == 8
    assert c.kappa == pytest.approx(0.75)
    p = c.panel
    assert p is not None
    assert (p.rule, p.quorum, p.kappa) == ("majority", 2, pytest.approx(0.75))
    by = {m.name: m for m in p.members}
    assert list(by) == ["exact", "model", "never"]  # the order given, not the running order
    assert {m.items for m in p.members} == {8}  # every member voted on every item
    assert by["exact"].agreement == pytest.approx(7 / 8)
    assert by["exact"].kappa == pytest.approx(0.75)
    assert by["model"].agreement == pytest.approx(6 / 8)
    assert by["model"].kappa == pytest.approx(0.5)
    assert by["never"].agreement == pytest.approx(4 / 8)
    assert by["never"].kappa == pytest.approx(0.0)
    # without never, exact and model (a tie fails) pass a1 a2 a4: kappa 0.75, no loss;
    # without exact or model, every item is a tie or a fail: kappa 0
    assert by["never"].kappa_without == pytest.approx(0.75)
    assert by["exact"].kappa_without == pytest.approx(0.0)
    assert by["model"].kappa_without == pytest.approx(0.0)
    assert p.adds_nothing == ["never"]
    assert [m.adds_nothing for m in p.members] == [False, False, True]
    pairs = {(x.first, x.second): x for x in p.pairs}
    assert list(pairs) == [("exact", "model"), ("exact", "never"), ("model", "never")]
    assert pairs["exact", "model"].agreement == pytest.approx(5 / 8)
    assert pairs["exact", "model"].kappa == pytest.approx(0.25)  # 5/8 against 1/2 by chance
    assert pairs["exact", "never"].agreement == pytest.approx(3 / 8)
    assert pairs["model", "never"].agreement == pytest.approx(4 / 8)
    assert any(w.startswith("panel members that add nothing") and "never" in w for w in c.warnings)


def test_calibrating_a_panel_measures_each_member(
    labelled: Path, tmp_path: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    scripted_openai.script("judge", [judge_replies(MODEL)] * 8)

    result = refinekit.eval.calibrate(
        labelled, judge=the_panel(judge_client), db=tmp_path / "runs.db"
    )

    check_panel_figures(result.calibration)
    # the model member ran on every item, over HTTP: a calibration stops no member early
    assert len(scripted_openai.requests_for("judge")) == 8


def test_the_async_calibration_measures_them_alike(
    labelled: Path, tmp_path: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    scripted_openai.script("judge", [judge_replies(MODEL)] * 8)

    result = asyncio.run(
        refinekit.eval.acalibrate(labelled, judge=the_panel(judge_client), db=tmp_path / "r.db")
    )

    check_panel_figures(result.calibration)


def test_the_report_shows_the_members_and_the_bias_checks(
    labelled: Path, tmp_path: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    scripted_openai.script("judge", [judge_replies(MODEL)] * 8)
    db = tmp_path / "runs.db"
    result = refinekit.eval.calibrate(labelled, judge=the_panel(judge_client), db=db)

    with SQLiteStore(db) as store:
        html = calibration_report(store, result.run_id, result.calibration)

    assert 'id="panel"' in html
    assert "<td>never</td>" in html
    assert '<span class="badge fail">adds nothing</span>' in html
    assert "Members against each other" in html
    assert 'id="bias"' in html
    assert "panel members that add nothing" in html


def test_a_single_judge_has_no_panel_figures(labelled: Path, tmp_path: Path) -> None:
    result = refinekit.eval.calibrate(labelled, judge=exact, db=tmp_path / "runs.db")

    assert result.calibration.panel is None
    assert result.calibration.kappa == pytest.approx(0.75)
    assert result.calibration.warnings == []


# --- bias checks ------------------------------------------------------------------------------


def lengthy(request: EvaluationRequest) -> bool:
    """A judge that passes any long answer: the verbosity bias the bands show."""
    return len(request.answer) >= 20


def test_agreement_by_length_shows_a_judge_that_favours_long_answers(tmp_path: Path) -> None:
    # 30 items, lengths 5 to 34: people pass every third whatever its length
    rows = [
        {"question": f"q{i}", "answer": "x" * (5 + i), "label": "pass" if i % 3 == 0 else "fail"}
        for i in range(30)
    ]
    data = write_csv(tmp_path / "labelled.csv", rows)

    c = refinekit.eval.calibrate(data, judge=lengthy, db=tmp_path / "runs.db").calibration

    assert [b.band for b in c.length_bands] == ["short", "medium", "long"]
    assert [b.items for b in c.length_bands] == [10, 10, 10]
    assert (c.length_bands[0].shortest, c.length_bands[0].longest) == (5, 14)
    short, _, long = c.length_bands
    assert short.judge_pass == 0.0
    assert long.judge_pass == 1.0
    assert short.people_pass == pytest.approx(0.4)
    assert long.people_pass == pytest.approx(0.3)
    assert any(w.startswith("verbosity bias: on the longest answers") for w in c.warnings)


def test_no_verbosity_warning_when_the_judge_follows_people_at_every_length(
    tmp_path: Path,
) -> None:
    rows = [
        {"question": f"q{i}", "answer": ("ok" if i % 2 else "no") + "x" * i, "label": "pass"}
        if i % 2
        else {"question": f"q{i}", "answer": "no" + "x" * i, "label": "fail"}
        for i in range(30)
    ]
    data = write_csv(tmp_path / "labelled.csv", rows)

    def follows(request: EvaluationRequest) -> bool:
        return request.answer.startswith("ok")

    c = refinekit.eval.calibrate(data, judge=follows, db=tmp_path / "runs.db").calibration

    assert len(c.length_bands) == 3
    assert not any(w.startswith("verbosity") for w in c.warnings)


def test_answers_written_by_the_judges_model_are_named(
    tmp_path: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    # the labelled rows say which model wrote each answer; the judge's replies name theirs
    rows = [
        {
            "question": f"q {a}",
            "answer": a,
            "label": label,
            "answer_model": "judge-2024-07-18" if a in ("a1", "a2") else "writer",
        }
        for a, label in PEOPLE.items()
    ]
    data = write_csv(tmp_path / "labelled.csv", rows)
    scripted_openai.script("judge", [judge_replies(MODEL)] * 8)
    model = judges.criteria(
        judges.JudgeModel(judge_client, "judge"),
        [judges.Criterion("supported", "Does the context support the answer?")],
    )

    c = refinekit.eval.calibrate(data, judge=model, db=tmp_path / "runs.db").calibration

    assert c.self_judged == 2
    assert c.self_judge_models == ["judge"]
    assert any(w.startswith("self-preference: 2 answers were judged by") for w in c.warnings)


FUNCTION_PANEL = judges.panel([("exact", exact), ("never", never), ("again", exact)])


def test_the_cli_prints_each_member_and_what_adds_nothing(
    labelled: Path, tmp_path: Path, cli: Cli
) -> None:
    report = tmp_path / "calibration.html"

    result = cli(
        "calibrate",
        str(labelled),
        "--judge",
        f"{__name__}:FUNCTION_PANEL",
        "--report",
        str(report),
    )

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    start = lines.index("panel (majority, quorum 2), each member against people:")
    rows = lines[start + 2 : start + 5]
    assert rows[0].split()[:5] == ["exact", "8", "0", "0.88", "0.750"]
    assert rows[1].split()[:5] == ["never", "8", "0", "0.50", "0.000"]
    assert rows[1].endswith("0.750  adds nothing")  # the panel without it: 0.750
    assert rows[2].split()[:5] == ["again", "8", "0", "0.88", "0.750"]
    assert not rows[0].endswith("adds nothing")
    assert "  exact and again agree on 1.00 of 8 items (kappa 1.000)" in lines
    assert (
        "warning: panel members that add nothing (the panel agrees with people as well "
        "without them): never"
    ) in lines
    assert "adds nothing</span>" in report.read_text(encoding="utf-8")


def _slot_reply(request: Any) -> str:
    """A pairwise judge's reply: consistent on good answers, always "A" on the others."""
    content = str(request.body["messages"][-1]["content"])
    first = content[content.index("<answer_a>") : content.index("</answer_a>")]
    if "biased" in content:
        return "A"  # position bias: whichever answer comes first
    return "A" if "good" in first else "B"


def test_position_consistency_of_a_pairwise_judge_alone_and_in_a_panel(
    tmp_path: Path, scripted_openai: ScriptedOpenAI, judge_client: openai.OpenAI
) -> None:
    rows = [
        {
            "question": f"q{i}",
            "answer": f"good {i}" if i < 6 else f"biased {i}",
            "reference": f"reference {i}",
            "label": "pass",
        }
        for i in range(10)
    ]
    data = write_csv(tmp_path / "labelled.csv", rows)
    versus = judges.pairwise(judges.JudgeModel(judge_client, "judge")).against("reference")
    scripted_openai.script("judge", [_slot_reply] * 40)

    alone = refinekit.eval.calibrate(data, judge=versus, db=tmp_path / "a.db").calibration
    both = refinekit.eval.calibrate(
        data,
        judge=judges.panel([("versus", versus), ("exact", exact)]),
        db=tmp_path / "b.db",
    ).calibration

    [position] = alone.position
    assert (position.judge, position.items, position.consistent) == ("pairwise", 10, 6)
    assert position.rate == pytest.approx(0.6)
    assert any(
        w == "position bias: swapping the two answers changed pairwise's vote on 4 of 10 items "
        "(consistent 0.60)"
        for w in alone.warnings
    )
    [member] = both.position
    assert (member.judge, member.items, member.consistent) == ("versus", 10, 6)
    assert len(scripted_openai.requests_for("judge")) == 40  # both orders, both runs
