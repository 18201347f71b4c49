"""The HTML reports of `refinekit eval` and `refinekit calibrate`, down to a real browser.

The stores are real SQLite run stores in tmp_path, filled through `SQLiteStore` (or by the CLI
itself). The browser tests render the file with headless Chromium (`--dump-dom` and
`--screenshot`) with every network path closed: the report loads nothing, and Chromium is
told to resolve no host name and to use a proxy on a closed 127.0.0.1 port.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import textwrap
import zlib
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from refinekit._core.types import Usage
from refinekit.cli import main
from refinekit.eval._calibration import Calibration, calibrate
from refinekit.eval._report import calibration_report, eval_report
from refinekit.eval._report._html import ANSWER_LIMIT, CSP, DETAILED_LIMIT, esc
from refinekit.eval._stats import wilson_interval
from refinekit.eval._store._sqlite import CaseRecord, SQLiteStore
from refinekit.eval._summary import compare_runs, summarise

CHROMIUM = Path("/usr/bin/chromium")

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</style><script>alert(2)</script>",
    "</pre></title><svg onload=alert(3)>",
    "<a href='https://evil.example/steal'>click</a>",
    '<img src="http://evil.example/x.png">',
    "<iframe src=javascript:alert(4)></iframe>",
]
EVIL = " ".join(HOSTILE)


# --- building stores ------------------------------------------------------------------------


def criteria(*pairs: tuple[str, str], feedback: str = "") -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "outcome": outcome,
            "probability": 0.9 if outcome == "pass" else 0.2,
            "source": "logprobs",
            "feedback": "" if outcome == "pass" else feedback,
        }
        for name, outcome in pairs
    ]


def case(position: int, outcome: str, **fields: Any) -> CaseRecord:
    """A case with sensible defaults for its outcome; `fields` override them."""
    judged = outcome in ("passed", "failed")
    verdict_criteria = fields.pop(
        "criteria",
        criteria(
            ("grounded", "pass" if outcome == "passed" else "fail"),
            ("must_mention", "pass"),
            feedback="Cite policy.md.",
        ),
    )
    defaults: dict[str, Any] = {
        "key": f"key-{position}",
        "position": position,
        "question": f"What is the refund window for order {position}?",
        "row": {"question": f"order {position}", "must_mention": "30 days"},
        "answer": f"Refunds within 30 days, order {position}.",
        "verdicts": [{"passed": outcome == "passed", "criteria": verdict_criteria}]
        if judged
        else [],
        "passes": int(outcome == "passed"),
        "judgements": int(judged),
        "answer_usage": Usage(1, 100, 20),
        "judge_usage": Usage(1, 300, 10) if judged else Usage(),
        "answer_seconds": 0.5,
        "judge_seconds": 0.25,
    }
    return CaseRecord(outcome=outcome, **(defaults | fields))  # type: ignore[arg-type]


def store_run(
    store: SQLiteStore,
    dataset: Path,
    cases: Sequence[CaseRecord],
    *,
    kind: str = "eval",
    status: str = "complete",
    target: str | None = "app.answers:answer",
    judge: str | None = "app.judges:grounded",
    summary: dict[str, Any] | None = None,
) -> int:
    run = store.start_run(
        kind=kind,  # type: ignore[arg-type]
        dataset=dataset,
        dataset_sha256="ab" * 32,
        target=target,
        judge=judge,
        options={"concurrency": 4, "repeat": 1},
        fingerprint=f"{kind}-{dataset}",
        version="0.1.0",
    )
    for record in cases:
        store.save_case(run.id, record)
    if summary is None:
        summary = summarise(cases).as_dict() | {"cases_in_file": len(cases)}
    store.finish_run(run.id, status, summary)  # type: ignore[arg-type]
    return run.id


def current_cases() -> list[CaseRecord]:
    """7 passed, 1 failed, 1 raised (counted: 7/9), 1 unavailable, 1 inconclusive (not)."""
    cases = [case(i, "passed") for i in range(1, 8)]
    cases += [
        case(
            8,
            "failed",
            question="Failing question " + EVIL,
            answer="Failing answer " + EVIL + "\n" + "x" * 3000,
            feedback="Failing feedback " + EVIL,
            criteria=criteria(("grounded", "fail"), ("must_mention", "pass"), feedback=EVIL),
            row={"question": "q " + EVIL, "must_mention": ["30 days", EVIL]},
            attempts=3,
            corrections=2,
        ),
        case(
            9,
            "raised",
            question="Raising question " + EVIL,
            answer=None,
            error="LowQualityAnswer: rejected " + EVIL,
            attempts=3,
        ),
        case(10, "unavailable", error="JudgeUnavailable: HTTP 503 " + EVIL),
        case(11, "inconclusive", error="the judge split 1/2", passes=1, judgements=2, flipped=True),
    ]
    return cases


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    path = tmp_path / "golden.csv"
    path.write_text("question,must_mention\nq,30 days\n", encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "runs.db") as s:
        yield s


@pytest.fixture
def eval_run(store: SQLiteStore, golden: Path, tmp_path: Path) -> int:
    """Run 6 of a store: three earlier complete runs and an incomplete one of the same file,
    one of another file, then the current run."""
    for fails in (1, 3, 2):
        store_run(
            store, golden, [case(i, "failed" if i <= fails else "passed") for i in (1, 2, 3, 4)]
        )
    store_run(store, golden, [case(1, "passed")], status="incomplete", summary={"stored": 1})
    other = tmp_path / "other.csv"
    other.write_text("question\nq\n", encoding="utf-8")
    store_run(store, other, [case(1, "passed")])
    return store_run(store, golden, current_cases())


@pytest.fixture
def eval_html(store: SQLiteStore, eval_run: int) -> str:
    return eval_report(store, eval_run)


def calibration_cases(wrong: int = 3, probabilities: bool = True) -> list[CaseRecord]:
    """Forty labelled items, the judge's probability rising with the row; `wrong` of them
    judged against the label; one item the judge could not judge."""
    out = []
    for i in range(1, 41):
        p = (i - 0.5) / 40
        label = "pass" if p >= 0.5 else "fail"
        outcome = "passed" if p >= 0.5 else "failed"
        if i <= wrong:
            outcome = "passed"
        out.append(
            case(
                i,
                outcome,
                question=f"Labelled question {i} " + (EVIL if i <= wrong else ""),
                answer=f"Labelled answer {i} " + (EVIL if i <= wrong else ""),
                feedback="" if outcome == "passed" else "Judge feedback " + EVIL,
                probability=(0.95 if i <= wrong else p) if probabilities else None,
                label=label,
                row={"question": f"{i}", "answer": "a", "label": label},
            )
        )
    out.append(case(41, "unavailable", error="JudgeUnavailable: HTTP 503 " + EVIL, label="pass"))
    return out


def calibration_run(
    store: SQLiteStore, labelled: Path, cases: Sequence[CaseRecord]
) -> tuple[int, Calibration]:
    run_id = store_run(store, labelled, cases, kind="calibrate", target=None, summary={})
    result = calibrate(store.cases(run_id), target_error=0.1, bins=10)
    store.finish_run(run_id, "complete", result.as_dict())
    return run_id, result


@pytest.fixture
def calibration_html(store: SQLiteStore, tmp_path: Path) -> str:
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("question,answer,label\nq,a,pass\n", encoding="utf-8")
    calibration_run(store, labelled, calibration_cases(wrong=8))
    calibration_run(store, labelled, calibration_cases(wrong=5))
    run_id, result = calibration_run(store, labelled, calibration_cases(wrong=3))
    return calibration_report(store, run_id, result)


# --- looking at HTML ------------------------------------------------------------------------


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <style> and <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.raw: dict[str, list[str]] = {"style": [], "script": []}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag in self.raw:
            self._open = tag
            self.raw[tag].append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.raw[self._open][-1] += data

    def count(self, name: str) -> int:
        return sum(tag == name for tag, _ in self.tags)


def parse(document: str) -> Tags:
    parser = Tags()
    parser.feed(document)
    parser.close()
    return parser


def assert_nothing_live(document: str) -> None:
    """No script, image, frame, object or event handler; no link or source outside the page."""
    tags = parse(document)
    for name in ("script", "img", "iframe", "object", "embed", "link", "base", "form"):
        assert tags.count(name) == 0, name
    assert tags.count("style") == 1
    assert tags.raw["style"][0].count("<") == 0  # no user text, no markup, in the style sheet
    assert "url(" not in tags.raw["style"][0]
    for tag, attrs in tags.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "srcset", "action", "formaction", "xlink:href"), (tag, name)
            if name == "href":
                assert value is not None
                assert value.startswith("#"), value  # in-page anchors only
            if name == "style":
                assert value is not None
                assert "url(" not in value
                assert all(ch in "0123456789.%:;width " for ch in value), value
    csp = [dict(attrs) for tag, attrs in tags.tags if tag == "meta"]
    assert {"http-equiv": "Content-Security-Policy", "content": CSP} in csp


def assert_escaped(document: str, text: str) -> None:
    assert text not in document
    assert html.escape(text, quote=True) in document


# --- the eval report ------------------------------------------------------------------------


def test_eval_report_is_one_html5_document(eval_html: str) -> None:
    assert eval_html.startswith("<!DOCTYPE html>\n")
    assert eval_html.rstrip().endswith("</html>")
    assert eval_html.count("<html") == 1
    assert "default-src 'none'" in CSP
    assert_nothing_live(eval_html)
    # the only URLs are the hostile text's, shown as text
    assert "://" not in eval_html.replace("://evil.example", "")


def test_eval_report_shows_the_pass_rate_and_how_it_was_computed(eval_html: str) -> None:
    lower, upper = wilson_interval(7, 9)
    assert '<span class="big">0.778</span>' in eval_html
    assert f"<b>{lower:.3f}</b> to <b>{upper:.3f}</b>" in eval_html
    assert "passed / (passed + failed + raised) = 7 / 9" in eval_html
    assert "1 unavailable" in eval_html
    assert "1 inconclusive" in eval_html
    tags = parse(eval_html)
    headings = {"Pass rate", "Per-criterion pass rates", "Cost", "Failing cases (4)"}
    text = eval_html
    for heading in headings:
        assert f">{heading}</h2>" in text
    assert tags.count("svg") >= 1


def test_eval_report_charts_every_complete_run_of_the_file(eval_html: str, eval_run: int) -> None:
    chart = eval_html[eval_html.index('id="history"') :]
    chart = chart[: chart.index("</svg>")]
    # runs 1-3 and the current one; not the incomplete run 4 nor run 5 of another file
    assert chart.count('class="pt"') == 4
    assert chart.count('<g class="cur">') == 1
    assert f"run {eval_run}: pass rate 0.778 (7/9)" in chart
    for earlier, rate in ((1, 0.75), (2, 0.25), (3, 0.5)):
        lower, upper = wilson_interval(int(rate * 4), 4)
        assert (
            f"run {earlier}: pass rate {rate:.3f} ({int(rate * 4)}/4), 95% {lower:.3f} to " in chart
        )
        assert f"{upper:.3f}" in chart
    assert "run 4:" not in chart
    assert "run 5:" not in chart


def test_eval_report_per_criterion_rates_attempts_and_cost(eval_html: str) -> None:
    criteria_part = eval_html[eval_html.index('id="criteria"') : eval_html.index('id="attempts"')]
    # grounded: 7 pass, 1 fail (only the judged cases carry verdicts); must_mention 8/8
    assert '<code>grounded</code></td><td class="n">7</td><td class="n">1</td>' in criteria_part
    assert "<b>0.875</b>" in criteria_part
    assert "<b>1.000</b>" in criteria_part
    attempts_part = eval_html[eval_html.index('id="attempts"') : eval_html.index('id="cost"')]
    assert "mean <b>1.364</b>, max <b>3</b>" in attempts_part  # (9 * 1 + 2 * 3) / 11
    assert '<td class="n">3</td><td class="n">2</td><td class="n">0.182</td>' in attempts_part
    assert "<b>2</b> in all, max <b>2</b> per answer" in attempts_part
    cost_part = eval_html[eval_html.index('id="cost"') : eval_html.index('id="failing-cases"')]
    # the answer model: 11 calls, 1,100 + 220 tokens; the run's judge: 8 judged cases
    assert '<td>answer model</td><td class="n">11</td><td class="n">1,100</td>' in cost_part
    assert '<td>the run\'s judge</td><td class="n">8</td><td class="n">2,400</td>' in cost_part
    assert "<b>8.250 s</b> in all" in cost_part


def test_eval_report_lists_failing_cases_with_their_feedback(eval_html: str) -> None:
    failing = eval_html[eval_html.index('id="failing-cases"') : eval_html.index('id="cases"')]
    assert failing.count("<article") == 4
    for word in ("failed", "raised", "unavailable", "inconclusive"):
        assert f'<article class="case {word}"' in failing
    assert html.escape("Failing feedback " + EVIL, quote=True) in failing
    assert html.escape("LowQualityAnswer: rejected " + EVIL, quote=True) in failing
    assert html.escape("JudgeUnavailable: HTTP 503 " + EVIL, quote=True) in failing
    assert "the judge split 1/2" in failing
    assert "No answer: the function raised" in failing
    # the long answer is cut, and says by how much
    answer = "Failing answer " + EVIL + "\n" + "x" * 3000
    assert f"[{len(answer) - ANSWER_LIMIT:,} more characters]" in failing
    assert "x" * 3000 not in failing
    # its criteria, with their own feedback
    assert '<code>grounded</code></td><td><span class="badge fail">fail</span>' in failing
    # passing cases are not listed
    assert "order 1?" not in failing
    table = eval_html[eval_html.index('id="cases"') :]
    assert table.count("<tr>") == 12  # a header and the 11 cases
    assert table.count('<a href="#case-') == 4


def test_eval_report_escapes_hostile_text(eval_html: str) -> None:
    for text in HOSTILE:
        assert text not in eval_html, text
    for text in ("Failing question ", "Failing feedback ", "LowQualityAnswer: rejected "):
        assert_escaped(eval_html, text + EVIL)
    assert_escaped(eval_html, "q " + EVIL)  # a row value
    assert_nothing_live(eval_html)


def test_eval_report_escapes_names_paths_and_odd_characters(
    store: SQLiteStore, tmp_path: Path
) -> None:
    folder = tmp_path / '"><script>x()<'
    folder.mkdir()
    dataset = folder / "golden.csv"
    dataset.write_text("question\nq\n", encoding="utf-8")
    run_id = store_run(
        store,
        dataset,
        [case(1, "failed", feedback="nul \x00 bell \x07 end")],
        target='app:answer"><img src=x onerror=1>',
        judge="</code><script>j()</script>",
    )
    document = eval_report(store, run_id)
    assert_nothing_live(document)
    assert html.escape(str(dataset), quote=True) in document
    assert html.escape('app:answer"><img src=x onerror=1>', quote=True) in document
    assert html.escape("</code><script>j()</script>", quote=True) in document
    assert "\x00" not in document
    assert "\x07" not in document
    assert "nul \ufffd bell \ufffd end" in document


def test_a_lone_surrogate_cannot_break_the_file() -> None:
    # the store cannot hold one (SQLite text is UTF-8), but the escaping copes all the same
    assert esc("a \ud800 b") == "a ? b"


def compared_report(store: SQLiteStore, golden: Path, eval_run: int, **gates: Any) -> str:
    """The report of the eval run against a run where every one of its questions passed:
    cases 8 (now failed) and 9 (now raised) regressed."""
    before = store_run(
        store, golden, [dataclasses.replace(c, outcome="passed") for c in current_cases()]
    )
    comparison = compare_runs(
        store.run(before), store.cases(before), store.run(eval_run), store.cases(eval_run)
    )
    assert [c.position for _, c in comparison.regressed] == [8, 9]
    return eval_report(store, eval_run, comparison, **gates)


def test_eval_report_puts_what_a_reviewer_acts_on_first(
    store: SQLiteStore, golden: Path, eval_run: int
) -> None:
    document = compared_report(store, golden, eval_run, min_pass_rate=0.8)
    anchors = ["gates", "regressions", "failing", "pass-rate", "history", "criteria", "cost"]
    anchors += ["comparison", "failing-cases", "cases"]
    starts = [document.index(f'<section id="{anchor}">') for anchor in anchors]
    assert starts == sorted(starts)  # the gates, the regressions, the failing cases; then figures
    assert document.index("</header>") < starts[0]
    # the regressions and the failing cases, a line each, linked to their cards below
    regressions = section_of(document, "regressions")
    assert ">Regressed since run 7 (2)</h2>" in regressions
    assert regressions.count("<tr>") == 3  # a header and the two cases
    assert (
        '<span class="badge passed">passed</span> \u2192 <span class="badge failed">failed</span>'
        in regressions
    )
    assert_escaped(regressions, "Failing question " + EVIL[:60])
    failing = section_of(document, "failing")
    assert ">Failing cases (4)</h2>" in failing
    assert re.findall(r'<a href="#case-(\d+)">(\d+)</a>', failing) == [
        ("7", "8"),
        ("8", "9"),
        ("9", "10"),
        ("10", "11"),
    ]
    assert all(f'id="case-{i}"' in document for i in (7, 8, 9, 10))  # the cards they link to
    assert "the judge split 1/2" in failing
    assert "order 1?" not in failing
    # the pass rate next to the gates, with what it left out
    gates = gates_of(document)
    assert "pass rate <b>0.778</b> (7/9)" in gates
    assert "not counted: 1 unavailable, 1 inconclusive" in gates
    # the definitions are behind disclosures, and so are the run's details
    for definition in (
        "passed / (passed + failed + raised) = 7 / 9",
        "Every complete eval run of this data file in the store",
        "From each case's first verdict.",
        "One attempt is an answer accepted at once",
        "<dt>SHA-256</dt>",
    ):
        at = document.index(definition)
        assert document.rfind("<details", 0, at) > document.rfind("</details>", 0, at), definition
    assert_nothing_live(document)


def test_eval_report_shows_the_cost_and_the_missing_context_by_the_gates(
    store: SQLiteStore, golden: Path
) -> None:
    from refinekit.checks import _NO_SOURCE

    unwired = [
        case(i, "failed", feedback=_NO_SOURCE, cost={"answer": 0.5, "judge": 0.25, "extra": 0.0})
        for i in (1, 2)
    ]
    run_id = store_run(store, golden, unwired)
    gates = gates_of(eval_report(store, run_id, min_pass_rate=0.5))
    assert "Every case failed cites_source because no context document with a source" in gates
    assert "refinekit.record_context(docs)" in gates
    assert '<a href="#cost">cost <b>1.5</b></a> (0.75 per case)' in gates
    wired = store_run(store, golden, [case(1, "failed")])
    assert "no context" not in gates_of(eval_report(store, wired))


def test_eval_report_with_a_comparison(store: SQLiteStore, eval_run: int) -> None:
    before = store.run(1)  # 3 passed, 1 failed
    comparison = compare_runs(before, store.cases(1), store.run(eval_run), store.cases(eval_run))
    document = eval_report(store, eval_run, comparison)
    part = document[document.index('id="comparison"') : document.index('id="failing-cases"')]
    assert ">Compared with run 1</h2>" in part
    assert len(comparison.regressed) == 0
    assert [c.position for _, c in comparison.improved] == [1]
    assert f'<div class="value">{comparison.p_value:.3f}</div>' in part
    assert "exact McNemar p" in part
    assert "order 1?" in part


def section_of(document: str, anchor: str) -> str:
    start = document.index(f'<section id="{anchor}">')
    return document[start : document.index("</section>", start)]


def gates_of(document: str) -> str:
    return section_of(document, "gates")


def header_of(document: str) -> str:
    return document[document.index("<header>") : document.index("</header>")]


@pytest.mark.parametrize(("floor", "held"), [(0.4, True), (0.6, False)])
def test_eval_report_shows_the_pass_rate_gate_and_whether_it_held(
    store: SQLiteStore, eval_run: int, floor: float, held: bool
) -> None:
    lower, _ = wilson_interval(7, 9)  # 7 of 9 counted cases passed
    assert 0.4 < lower < 0.6
    document = eval_report(store, eval_run, min_pass_rate=floor)
    gates = gates_of(document)
    assert f"<code>--min-pass-rate {floor:.3f}</code>" in gates
    sign = ">=" if held else "&lt;"
    assert (
        f"95% Wilson lower bound {lower:.3f} (pass rate {7 / 9:.3f}, 7/9) {sign} {floor:.3f}"
        in gates
    )
    word = "held" if held else "failed"
    assert gates.count(f'<span class="badge {word}">{word}</span>') == 1
    verdict = (
        'Gates: <span class="badge held">held</span>'
        if held
        else 'Gates: <span class="badge failed">failed</span> (1 of 1; '
        "<code>refinekit eval</code> exits 1)"
    )
    assert verdict in header_of(document)  # at the top, for a CI artifact's reader
    assert_nothing_live(document)


def test_eval_report_shows_the_comparison_gate(store: SQLiteStore, golden: Path) -> None:
    before = store_run(store, golden, [case(i, "passed") for i in range(1, 7)])
    after = store_run(store, golden, [case(i, "failed") for i in range(1, 7)])
    comparison = compare_runs(
        store.run(before), store.cases(before), store.run(after), store.cases(after)
    )
    assert comparison.p_value == 2 / 2**6

    strict = gates_of(eval_report(store, after, comparison, alpha=0.05))
    lenient = eval_report(store, after, comparison, alpha=0.01)

    assert f"<code>--compare</code> run {before}, <code>--alpha 0.05</code>" in strict
    assert "6 regressed, 0 improved; p = 0.031" in strict
    assert '<span class="badge failed">failed</span>' in strict
    assert "<code>--alpha 0.01</code>" in gates_of(lenient)
    assert '<span class="badge held">held</span>' in header_of(lenient)


def test_eval_report_without_a_gate_says_so(eval_html: str) -> None:
    assert "No gate: the run was not held to a threshold." in header_of(eval_html)
    assert "<code>refinekit eval</code> exits 0 whatever the figures" in gates_of(eval_html)


def test_eval_report_of_a_run_that_measured_nothing_fails_its_gate(
    store: SQLiteStore, golden: Path
) -> None:
    run_id = store_run(store, golden, [case(1, "unavailable", error="down")])
    gates = gates_of(eval_report(store, run_id, min_pass_rate=0.5))
    assert "no case has a pass or fail outcome, so there is no pass rate" in gates
    assert "no pass rate to hold against it" in gates
    assert gates.count('<span class="badge failed">failed</span>') == 2


def facts_of(document: str, position: int) -> str:
    start = document.index(f"Case {position}</h3>")
    return document[start : document.index("<h4>Question</h4>", start)]


def test_a_case_card_explains_score_and_probability_and_shows_none_that_is_missing(
    store: SQLiteStore, golden: Path
) -> None:
    code = [
        {"name": "cites", "outcome": "fail", "probability": 0.0, "source": "code"},
        {"name": "supported", "outcome": "skipped"},
    ]
    stated = [{"name": "correct", "outcome": "fail", "probability": 0.0, "source": "answer"}]
    cases = [
        case(1, "failed", score=0.92, probability=0.0, criteria=code),
        case(2, "failed", score=0.4, probability=0.2),  # logprobs criteria (the default)
        case(3, "failed", score=0.5, probability=None, criteria=stated),
    ]
    document = eval_report(store, store_run(store, golden, cases))

    first = facts_of(document, 1)
    assert "score <b>0.920</b>" in first
    assert "P(pass) <b>0.000</b>" in first
    assert "probability <b>" not in document  # the old, unexplained label
    assert (
        "score = the evaluator&#x27;s own score of the answer (0 to 1); P(pass) = the "
        "judge&#x27;s probability that the answer passes, 0: a code check failed, so the "
        "model criteria were not asked (a certain fail)." in first
    )
    assert "read from the judge model&#x27;s token probabilities" in facts_of(document, 2)
    third = facts_of(document, 3)
    assert "score <b>0.500</b>" in third
    assert "P(pass)" not in third  # the judge gave none: none is shown

    # per criterion: a column of probabilities only where a model's token probabilities are
    def card(position: int) -> str:
        start = document.index(f"Case {position}</h3>")
        return document[start : document.index("</article>", start)]

    assert ">P(holds)</th>" not in card(1)  # a code check's 0 is no probability
    assert ">P(holds)</th>" not in card(3)
    assert ">P(holds)</th>" in card(2)
    assert '<td class="n">0.200</td>' in card(2)


def test_eval_report_of_an_incomplete_run_and_of_nothing_judged(
    store: SQLiteStore, golden: Path
) -> None:
    run_id = store_run(
        store,
        golden,
        [case(1, "unavailable", error="down")],
        status="incomplete",
        summary={"stored": 1, "cases": 5},
    )
    document = eval_report(store, run_id)
    assert "This run is <b>incomplete</b>: 1 of 5 cases are stored" in document
    assert '<span class="big">n/a</span>' in document
    assert "No run has a pass rate yet." in document
    assert_nothing_live(document)


def test_the_report_of_a_setup_failure_shows_that_no_answer_was_judged(
    store: SQLiteStore, golden: Path
) -> None:
    """Every case raised a connection error: the run measured the setup, not the answers, so
    the report shows no pass rate (not 0.000), in its headline or its history."""
    earlier = store_run(store, golden, [case(1, "passed"), case(2, "failed")])
    down = [
        case(i, "raised", answer=None, error="APIConnectionError: Connection error.")
        for i in (1, 2, 3)
    ]
    summary = summarise(down).as_dict() | {"cases_in_file": 3, "setup_failed": True}
    assert summary["rate"] == 0.0  # what the stored figures say, and must not be shown
    failed = store_run(store, golden, down, summary=summary)
    later = store_run(store, golden, [case(1, "passed"), case(2, "passed")])

    for run_id in (failed, later):  # its own report, and a later run's history
        document = eval_report(store, run_id)
        assert '<span class="big">0.000</span>' not in document
        assert ">0.000</text>" not in document  # no point at 0 in the chart
        rows = re.findall(r'<tr class="(?:current|other)">.*?</tr>', document)
        [row] = [r for r in rows if re.search(f'^<tr class="\\w+"><td class="n">{failed}[ <]', r)]
        assert "nothing (setup failed)" in row
        assert "0.000" not in row
        assert_nothing_live(document)
    document = eval_report(store, failed)
    headline = document.split('<section id="history">')[0]
    assert '<span class="big">n/a</span>' in headline
    assert "No answer was judged" in headline
    assert "a failure of the setup, not a measurement" in headline
    # the runs that measured something keep their figures
    assert f"run {earlier}: pass rate 0.500 (1/2)" in document


def test_eval_report_refuses_a_calibrate_run(store: SQLiteStore, golden: Path) -> None:
    run_id = store_run(store, golden, [case(1, "passed", label="pass")], kind="calibrate")
    with pytest.raises(ValueError, match="not an eval run"):
        eval_report(store, run_id)


def test_a_thousand_case_run_makes_a_lean_report(store: SQLiteStore, golden: Path) -> None:
    cases = [
        case(
            i,
            "failed" if i % 2 else "passed",
            question=f"question {i} " + "q" * 2000,
            answer=f"answer {i} " + "a" * 10_000,
            feedback="f" * 500,
        )
        for i in range(1, 1001)
    ]
    document = eval_report(store, store_run(store, golden, cases))
    assert len(document.encode()) < 2_500_000
    assert document.count("<article") == DETAILED_LIMIT
    assert f"{500 - DETAILED_LIMIT} more failing cases are not shown in full" in document
    assert document.count("<tr>") > 1000  # every case is in the table


# --- the calibration report -----------------------------------------------------------------


def test_calibration_report_has_the_figures_and_the_reliability_diagram(
    calibration_html: str,
) -> None:
    document = calibration_html
    assert_nothing_live(document)
    # 40 judged: the judge passed 3 items people failed, else agreed
    assert '<td class="n agree">20</td><td class="n disagree">3</td>' in document
    assert "0.925" in document  # accuracy 37/40
    diagram = document[document.index('class="reliability"') :]
    diagram = diagram[: diagram.index("</svg>")]
    assert 'class="diag"' in diagram  # perfect calibration
    assert diagram.count('class="obs"') == 10  # one point per bin
    assert "n=4" in diagram
    assert "Expected calibration error: <b>" in document
    assert ">Recommended thresholds</h2>" in document
    assert "uncertain items" in document
    assert "Criterion(..., pass_at=" in document


def test_calibration_report_history_and_disagreements(calibration_html: str) -> None:
    document = calibration_html
    history = document[document.index('id="history"') :]
    history = history[: history.index("</svg>")]
    assert history.count('class="pt"') == 3
    assert history.count('<g class="cur">') == 1
    part = document[document.index('id="disagreements"') :]
    assert ">Disagreements (3)</h2>" in part
    assert "The judge passed, people failed (3)" in part
    assert "The judge failed, people passed (0)" in part
    assert "people <b>fail</b>" in part
    assert_escaped(document, "Labelled question 1 " + EVIL)
    assert_escaped(document, "Labelled answer 1 " + EVIL)
    assert ">Not judged (1)</h2>" in document
    for text in HOSTILE:
        assert text not in document


@pytest.mark.parametrize(("floor", "held"), [(0.5, True), (0.9, False)])
def test_calibration_report_shows_the_kappa_gate(
    store: SQLiteStore, tmp_path: Path, floor: float, held: bool
) -> None:
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("question,answer,label\nq,a,pass\n", encoding="utf-8")
    run_id, result = calibration_run(store, labelled, calibration_cases(wrong=3))
    assert result.kappa is not None
    assert 0.5 < result.kappa < 0.9

    document = calibration_report(store, run_id, result, min_kappa=floor)

    gates = gates_of_calibration(document)
    sign = ">=" if held else "&lt;"
    assert f"Cohen&#x27;s kappa {result.kappa:.3f} {sign} {floor:.3f}, over 40 items" in gates
    assert f"<code>--min-kappa {floor:.3f}</code>" in gates
    verdict = (
        'Gates: <span class="badge held">held</span>'
        if held
        else 'Gates: <span class="badge failed">failed</span> (1 of 1; '
        "<code>refinekit calibrate</code> exits 1)"
    )
    assert verdict in header_of(document)
    assert "No gate" in header_of(calibration_report(store, run_id, result))
    assert_nothing_live(document)


def gates_of_calibration(document: str) -> str:
    return document[document.index('<section id="gates">') : document.index('id="agreement"')]


def test_a_setup_failure_says_its_exit_status_in_the_gates(
    store: SQLiteStore, golden: Path
) -> None:
    down = [case(i, "raised", answer=None, error="APIConnectionError") for i in (1, 2)]
    summary = summarise(down).as_dict() | {"setup_failed": True}
    run_id = store_run(store, golden, down, summary=summary)

    document = eval_report(store, run_id, min_pass_rate=0.5)

    assert "<code>refinekit eval</code> exits 4)" in header_of(document)
    gates = gates_of(document)
    assert "no answer was judged (a failure of the setup); no other gate applies" in gates
    assert "--min-pass-rate 0.500" not in gates  # not applied to a run that measured nothing


def test_calibration_report_without_probabilities(store: SQLiteStore, tmp_path: Path) -> None:
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("{}\n", encoding="utf-8")
    run_id, result = calibration_run(store, labelled, calibration_cases(probabilities=False))
    assert result.reliability is None
    document = calibration_report(store, run_id, result)
    assert "The judge gave no probabilities: 0 of 40 verdicts carried one." in document
    assert 'class="reliability"' not in document
    assert "No thresholds" in document
    assert_nothing_live(document)


def test_calibration_report_refuses_an_eval_run(store: SQLiteStore, eval_run: int) -> None:
    result = calibrate(store.cases(eval_run), target_error=0.1)
    with pytest.raises(ValueError, match="not a calibrate run"):
        calibration_report(store, eval_run, result)


# --- through the command line ---------------------------------------------------------------

APP = """
from refinekit import Verdict


def answer(question):
    if "boom" in question:
        raise RuntimeError("no answer for " + question)
    return "Refunds within 30 days. " + question


def grounded(request):
    ok = "30 days" in request.answer and "bad" not in request.question
    return Verdict(
        passed=ok,
        feedback="" if ok else "Say 30 days. <b>bold</b>",
        metadata={"probability": 0.9 if ok else 0.1},
    )
"""


def test_the_cli_writes_both_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("REFINEKIT_DB", raising=False)
    (tmp_path / "report_app_cli.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    (tmp_path / "golden.csv").write_text(
        'question,must_mention\nrefund?,30 days\n"<script>boom()</script>",30 days\n'
        "returns?,45 days\n",
        encoding="utf-8",
    )
    (tmp_path / "labelled.csv").write_text(
        "question,answer,label\nq1,30 days,pass\nbad q2,30 days,fail\nq3,60 days,pass\n",
        encoding="utf-8",
    )
    status = main(
        [
            "eval",
            "golden.csv",
            "--target",
            "report_app_cli:answer",
            "--report",
            "eval.html",
            "--db",
            "runs.db",
        ]
    )
    assert status == 0
    document = (tmp_path / "eval.html").read_text(encoding="utf-8")
    assert '<span class="big">0.333</span>' in document  # 1 passed, 1 failed, 1 raised
    assert "Mention &#x27;45 days&#x27;." in document
    assert "RuntimeError: no answer for &lt;script&gt;boom()&lt;/script&gt;" in document
    assert "<code>report_app_cli:answer</code>" in document
    assert_nothing_live(document)
    status = main(
        [
            "calibrate",
            "labelled.csv",
            "--judge",
            "report_app_cli:grounded",
            "--report",
            "cal.html",
            "--db",
            "runs.db",
            "--bins",
            "5",
        ]
    )
    assert status == 0
    document = (tmp_path / "cal.html").read_text(encoding="utf-8")
    assert 'class="reliability"' in document
    assert ">Disagreements (1)</h2>" in document  # q3: the judge failed, people passed
    assert "Say 30 days. &lt;b&gt;bold&lt;/b&gt;" in document
    assert_nothing_live(document)


# --- in a real browser ----------------------------------------------------------------------


def find_chromium(path: Path = CHROMIUM) -> Path:
    """`path`; else a skip, or under CI (which installs Chromium) a failure."""
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing; .ci/run installs Debian's chromium package")
        pytest.skip(f"{path} is not installed (apt-get install chromium)")
    return path


@pytest.fixture
def chromium() -> Path:
    return find_chromium()


def run_chromium(browser: Path, work: Path, *args: str) -> str:
    """Run headless Chromium on a fresh profile, with no way out to the network."""
    profile = work / f"profile-{len(list(work.glob('profile-*')))}"
    command = [
        str(browser),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=127.0.0.1:9",
        f"--user-data-dir={profile}",
        *args,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
        env={**os.environ, "HOME": str(work)},
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("chromium took more than 60 s")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert process.returncode == 0, err[-2000:]
    return out


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB(A) rows of an 8-bit, non-interlaced PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, []
    width = height = depth = colour = interlace = -1
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    assert depth == 8
    assert colour in (2, 6)
    assert interlace == 0
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    assert len(raw) == height * (stride + 1)
    previous = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + previous[i]) // 2) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = previous[i], previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            assert kind == 0
        rows.append(
            bytes(line[i] for i in range(stride) if i % bpp < 3) if bpp == 4 else bytes(line)
        )
        previous = line
    return width, height, rows


def colours(rows: Sequence[bytes]) -> set[tuple[int, int, int]]:
    found = set()
    for row in rows[::3]:
        for i in range(0, len(row), 9):
            found.add((row[i], row[i + 1], row[i + 2]))
    return found


def near(found: set[tuple[int, int, int]], want: tuple[int, int, int], slack: int = 6) -> bool:
    return any(all(abs(a - b) <= slack for a, b in zip(c, want, strict=True)) for c in found)


def render(browser: Path, document: str, tmp_path: Path, name: str) -> tuple[str, bytes]:
    """The DOM Chromium built from the report, and a 1200 x 2000 screenshot of it."""
    page = tmp_path / f"{name}.html"
    page.write_text(document, encoding="utf-8")
    dom = run_chromium(browser, tmp_path, "--dump-dom", page.as_uri())
    shot = tmp_path / f"{name}.png"
    run_chromium(
        browser, tmp_path, f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()
    )
    assert shot.is_file()
    return dom, shot.read_bytes()


def test_eval_report_renders_in_chromium(chromium: Path, eval_html: str, tmp_path: Path) -> None:
    dom, png = render(chromium, eval_html, tmp_path, "eval")
    # (a) the figures and headings are in the rendered page
    for text in (
        "refinekit eval \u2014 run 6",
        ">Pass rate</h2>",
        '<span class="big">0.778</span>',
        ">Per-criterion pass rates</h2>",
        ">Failing cases (4)</h2>",
        "Failing feedback ",
    ):
        assert text in dom, text
    # (b) the hostile text stayed text: no element came of it
    tags = parse(dom)
    assert tags.count("script") == 0
    assert tags.count("img") == 0
    assert tags.count("iframe") == 0
    assert tags.count("svg") == 1  # the chart; not the hostile <svg onload>
    assert all(not name.startswith("on") for _, attrs in tags.tags for name, _ in attrs)
    links = [value or "" for _, attrs in tags.tags for name, value in attrs if name == "href"]
    assert links
    assert all(link.startswith("#") for link in links)  # the hostile <a href> stayed text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    # (c) it painted: a real image, not one colour, the style sheet applied under the CSP
    assert len(png) > 20_000
    width, height, rows = png_rows(png)
    assert (width, height) == (1200, 2000)
    seen = colours(rows)
    assert len(seen) > 50
    assert near(seen, (255, 255, 255))
    assert near(seen, (0x1A, 0x7F, 0x37))  # passed green: the outcome bar and the status badge
    assert near(seen, (0xCF, 0x22, 0x2E))  # failed red
    assert near(seen, (0x09, 0x69, 0xDA))  # the current run in the chart


LAPTOP = (1280, 800)
"""A typical laptop's browser window; the page gets what the window leaves of it (Chromium's
headless window keeps about 140 pixels for itself: a viewport of 1280 x 657)."""

FIRST_SCREEN = {
    "the gates' verdict": "header .gate-verdict",
    "the gates": "#gates table",
    "the regressions' heading": "#regressions h2",
    "the first regression": "#regressions tr:nth-of-type(2)",
    "the failing cases' heading": "#failing h2",
    "the first failing case": "#failing tr:nth-of-type(2)",
    "the figures' first section": "#pass-rate h2",
}

PROBE = """<script>
const found = {viewport: [innerWidth, innerHeight]};
for (const [name, selector] of Object.entries(%s)) {
  const element = document.querySelector(selector);
  found[name] = element ? element.getBoundingClientRect().toJSON() : null;
}
const out = document.createElement("pre");
out.id = "layout-probe";
out.textContent = JSON.stringify(found);
document.body.appendChild(out);
</script>"""


def layout(
    browser: Path, document: str, tmp_path: Path, selectors: dict[str, str], size: tuple[int, int]
) -> dict[str, Any]:
    """Where Chromium lays out each selector's element at a window of `size` (None: none).

    The report runs no script (its CSP allows none), so the page measured is a copy whose
    CSP also allows the one inline script appended at its end, which measures and writes the
    boxes into the DOM: the layout is the report's own.
    """
    probe_csp = CSP + "; script-src 'unsafe-inline'"
    copy = document.replace(f'content="{CSP}"', f'content="{probe_csp}"', 1)
    copy = copy.replace("</body>", PROBE % json.dumps(selectors) + "</body>", 1)
    page = tmp_path / "layout.html"
    page.write_text(copy, encoding="utf-8")
    dom = run_chromium(browser, tmp_path, f"--window-size={size[0]},{size[1]}", "--dump-dom",
                       page.as_uri())  # fmt: skip
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom, re.DOTALL)
    assert found, dom[-2000:]
    boxes: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return boxes


def test_the_first_screen_of_the_eval_report_is_the_gates_regressions_and_failing_cases(
    chromium: Path, store: SQLiteStore, golden: Path, eval_run: int, tmp_path: Path
) -> None:
    document = compared_report(store, golden, eval_run, min_pass_rate=0.8)
    boxes = layout(chromium, document, tmp_path, FIRST_SCREEN, LAPTOP)
    width, height = boxes.pop("viewport")  # the first screen: what the window shows of the page
    assert width == LAPTOP[0]
    assert 600 <= height <= LAPTOP[1]
    figures = boxes.pop("the figures' first section")
    for name, box in boxes.items():
        assert box is not None, name
        assert box["top"] >= 0, (name, box)
        assert box["bottom"] <= height, (name, box, height)  # wholly on the first screen
        assert box["right"] <= width, (name, box)  # and no sideways scrolling
    assert figures["top"] > boxes["the first failing case"]["bottom"]  # the figures come after
    # a screenshot of that screen: the failed gate, what regressed and what fails are on it
    page = tmp_path / "first-screen.html"
    page.write_text(document, encoding="utf-8")
    shot = tmp_path / "first-screen.png"
    run_chromium(chromium, tmp_path, f"--screenshot={shot}", f"--window-size={width},{height}",
                 page.as_uri())  # fmt: skip
    shown_width, shown_height, rows = png_rows(shot.read_bytes())
    assert (shown_width, shown_height) == (width, height)
    seen = colours(rows)
    assert near(seen, (0xCF, 0x22, 0x2E))  # failed red: the gate, a regression, a failing case
    assert near(seen, (0x1A, 0x7F, 0x37))  # passed green: what the regressed cases were
    assert near(seen, (0xBC, 0x4C, 0x00))  # raised orange: a regressed and a failing case


def test_calibration_report_renders_in_chromium(
    chromium: Path, calibration_html: str, tmp_path: Path
) -> None:
    dom, png = render(chromium, calibration_html, tmp_path, "calibration")
    for text in (
        ">Agreement with people</h2>",
        ">Reliability diagram</h2>",
        'class="reliability"',
        'class="diag"',
        ">Disagreements (3)</h2>",
    ):
        assert text in dom, text
    tags = parse(dom)
    assert tags.count("script") == 0
    assert tags.count("img") == 0
    assert tags.count("svg") == 2  # the reliability diagram and the kappa history
    assert tags.count("circle") >= 10
    width, height, rows = png_rows(png)
    assert (width, height) == (1200, 2000)
    seen = colours(rows)
    assert len(seen) > 50
    assert near(seen, (0xDD, 0xF4, 0xFF))  # the reliability bars
    assert near(seen, (0x09, 0x69, 0xDA))  # their points


def test_a_missing_chromium_skips_only_outside_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "no-chromium"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        find_chromium(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="installs Debian's chromium"):
        find_chromium(missing)


def test_a_messages_code_spans_are_code_and_their_text_stays_escaped() -> None:
    from refinekit.eval._report._html import prose

    assert prose("run `refinekit runs` first") == "run <code>refinekit runs</code> first"
    assert prose("`<script>` & `a'b`") == "<code>&lt;script&gt;</code> &amp; <code>a&#x27;b</code>"
    assert prose("one ` alone") == "one ` alone"  # no pair, no code
