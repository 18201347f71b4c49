"""The overhead benchmark keeps working. Not a timed test: nothing here asserts a speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def quick_run(script: str, timeout: float) -> str:
    """Run a benchmark's `--quick` smoke run; return its output after checking it exited 0."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_bench_overhead_quick_run_prints_the_table() -> None:
    out = quick_run("bench_overhead.py", timeout=120)
    for heading in (
        "refinekit decorator overhead",
        "pydantic",
        "tenacity",
        "decorated",
        "baseline",
        "added/attempt",
        "ratio",
        "result",
        "retry: pass, 1st attempt",
        "retry: pass, 1st attempt (async)",
        "retry: 1 rejection + pass",
        "retry: pass, otel on",  # the dev extra installs opentelemetry-sdk
        "retry: 1 rejection, otel on",
        "self_correct: pass (2 lines)",
        "self_correct: 1 correction",
        "parse only (2 lines)",
        "parse only (50 lines)",
        "targets:",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"


def test_bench_judges_quick_run_prints_the_table() -> None:
    out = quick_run("bench_judges.py", timeout=180)
    for heading in (
        "refinekit judges over HTTP",
        "openai",
        "load avg",
        "figure (ms)",
        "floor (ms)",
        "floor is",
        "ratio",
        "target",
        "result",
        "criteria, 4 model criteria (sync)",
        "criteria, 4 model criteria (async)",
        "one bare call (sync)",
        "one bare call (async)",
        "4 bare calls in turn (sync)",
        "4 bare calls in turn (async)",
        "judged jobs (answer + judge)",
        "bare asyncio, same calls",
        "client CPU time of those rounds",
        "requests   identical on both sides",
        "targets:",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"


def test_bench_correction_cost_prints_the_ratios_and_meets_its_target() -> None:
    out = quick_run("bench_correction_cost.py", timeout=120)
    assert "| extraction (system, example, invoice) | a misnamed key |" in out
    assert "| one short user message | not JSON at all |" in out
    worst = json.loads(out.strip().splitlines()[-1])["worst_extraction_ratio"]
    assert worst <= 1.05


def test_bench_judge_cache_quick_run_prints_the_table() -> None:
    out = quick_run("bench_judge_cache.py", timeout=120)
    for heading in (
        "refinekit judge cache",
        "1. first run",
        "2. same run again",
        "answers changed",
        "4. repeat 2 (cache_salt)",
        "pass 2 verdicts identical to pass 1: True",
        "errors on the wire: 0",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"
    again = next(line for line in out.splitlines() if line.startswith("2. same run again"))
    assert again.split()[5:7] == ["0", "0.00"]  # no call on the wire the second time


def test_bench_budget_stops_the_runaway_judge_where_promised() -> None:
    out = quick_run("bench_budget.py", timeout=120)
    # answer, judge, ... 11 of each without a budget; max_calls=5: 3 answers and 2 judge calls
    assert "no budget                              11    11    22" in out
    assert "Budget(max_calls=5)                     3     2     5" in out
    assert "Budget(max_calls=5): BudgetExceeded before judge call to model 'judge-model'" in out
    assert "no budget: LowQualityAnswer after 11 attempts" in out


def test_bench_scale_quick_run_stores_every_case_once_on_each_backend() -> None:
    import pg

    out = quick_run("bench_scale.py", timeout=300)
    for heading in (
        "refinekit eval past one process",
        "load avg",
        "| backend | workers x conc. | cases | stored | asked twice | lost |",
        "the store's own cost per case",
        "| SQLite | 60 |",
        "result: ok: 0 asked twice, 0 lost",
    ):
        assert heading in out, f"{heading!r} missing from the benchmark's output:\n{out}"
    expected = ["| local | 1 x 2 |", "| local | 1 x 4 |"]
    if pg.binaries() is not None:  # else the benchmark leaves them out, saying so
        assert "| PostgreSQL | 60 |" in out
        expected += ["| postgresql | 1 x 2 |", "| postgresql | 2 x 2 |"]
    for start in expected:
        [line] = [x for x in out.splitlines() if x.startswith(start)]
        cases, stored, twice, lost = (x.strip() for x in line.split("|")[3:7])
        assert (cases, stored, twice, lost) == ("24", "24", "0", "0"), line


def test_bench_eval_cache_second_run_sends_no_judge_request() -> None:
    out = quick_run("bench_eval_cache.py", timeout=180)
    rows = {
        line[:34].strip(): line[34:].split()
        for line in out.splitlines()
        if line[:2] in {"1.", "2.", "3.", "4.", "5."}
    }
    assert rows["1. first run, --cache"][:1] == ["20"]  # 10 cases, 2 criteria
    assert rows["2. same eval again, --cache"][:4] == ["0", "0.00", "0", "0.00"]
    assert rows["4. --repeat 2, --cache"][4:6] == ["20", "hits,"]
    assert rows["5. same eval, no --cache"][:1] == ["20"]


def test_bench_batch_quick_run_judges_at_half_the_cost_in_fewer_requests() -> None:
    out = quick_run("bench_batch.py", timeout=180)
    rows = {
        tuple(line.split()[:2]): line.split()[2:]
        for line in out.splitlines()
        if line.split()[:1] in (["openai"], ["anthropic"])
    }
    for provider in ("openai", "anthropic"):
        direct, batched = rows[(provider, "direct")], rows[(provider, "batch")]
        assert batched[1] == "0.50"  # the judge's cost at the batch price: half
        assert batched[2] == direct[2]  # the same requests, the same tokens
        assert direct[4] == "20"  # 10 cases, 2 criteria: a request each
        assert int(batched[4]) < 10  # one batch: upload, create, polls, results


def test_bench_streaming_quick_run_reads_every_reply_and_prints_the_ratios() -> None:
    """Each reader reads each reply in full (refinekit's partial reader sees no failure)."""
    out = quick_run("bench_streaming.py", timeout=300)
    assert "| reply | size | chunks | reader | CPU per reply | median | reader / bare |" in out
    rows = (
        "| invoice object | 1 KB | 256 | refinekit fn.stream |",
        "| invoice object | 10 KB | 2504 | instructor Partial |",
        "| list[Line] | 10 KB | 2475 | refinekit reader |",
    )
    for row in rows:
        assert row in out, f"{row!r} missing from the benchmark's output:\n{out}"
    ratios = json.loads(out.strip().splitlines()[-1])["ratios"]
    assert set(ratios) == {"invoice_1kb", "invoice_10kb", "list_1kb", "list_10kb"}
    assert set(ratios["invoice_10kb"]) == {"bare", "refinekit", "fn_stream", "instructor"}
    assert set(ratios["list_10kb"]) == {"bare", "refinekit", "fn_stream"}
    assert all(r["refinekit"] > 0 for r in ratios.values())


def test_bench_corrected_gate_quick_run_covers_the_true_rate() -> None:
    # exits 1 when a cell's corrected coverage is under 0.95 (quick_run checks the exit)
    out = quick_run("bench_corrected_gate.py", timeout=120)
    assert "| judge (Se, Sp) | answers n | labelled m | corrected covers |" in out
    assert "| lenient (0.95, 0.70) | 1000 | 200 |" in out
    assert "targets: corrected coverage >= 0.95 in every cell: met" in out


def test_bench_panel_judges_smoke_run_over_the_scripted_server() -> None:
    # the real model is not needed for the smoke run: a scripted judge that always says
    # Yes at P 0.7 (a pass at the benchmark's 0.5 threshold)
    from refinekit.testing import Reply, ScriptedOpenAI

    with ScriptedOpenAI() as server:
        server.script("smollm2-135m-instruct", [Reply.text("Yes", {"Yes": 0.7, "No": 0.3})] * 12)
        done = subprocess.run(
            [
                sys.executable,
                str(BENCHMARKS / "bench_panel_judges.py"),
                "--quick",
                "--base-url",
                server.base_url,
                "--panel",
                "all(numbers, one claim)",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        asked = len(server.requests)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| judge | items | no verdict | kappa | 95% interval | model calls / verdict |" in out
    assert "| all(numbers, one claim) (chosen on the tuning seed) | 6 | 0 |" in out
    # a calibration asks every model member of every item: 2 model members x 6 items
    assert asked == 12
    # all(numbers, default, one claim): both model members, whenever numbers passes
    assert "| numbers | 6 | 0 |" in out
    assert out.count("| 0.00 |") == 1  # only the rule check costs no model call


def test_bench_cascade_local_smoke_run_over_the_scripted_server(tmp_path: Path) -> None:
    # the real model is not needed for the smoke run: a scripted judge that always says Yes
    # at P 0.7; on 6 answers no threshold holds 0.8 at risk 0.1, so the fit abstains on all
    from refinekit.testing import Reply, ScriptedOpenAI

    db = str(tmp_path / "runs.db")
    script = str(BENCHMARKS / "bench_cascade_local.py")

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, script, *args, "--db", db],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    with ScriptedOpenAI() as server:
        server.script("smollm2-135m-instruct", [Reply.text("Yes", {"Yes": 0.7, "No": 0.3})] * 6)
        done = bench("--quick", "--base-url", server.base_url)
        asked = len(server.requests)
        again = bench("--stored", "1,2")  # the tables from the store: no model call
        asked_again = len(server.requests)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # the calibration asks the model of all 6 answers; the eval, with no threshold to clear,
    # asks no level at all
    assert asked == asked_again == 6
    assert "fit        thresholds numbers never, model never" in out
    rows = [
        "| numbers alone | 3/6 = 0.500 (0.188-0.812) |",
        "| model alone | 3/6 = 0.500 (0.188-0.812) |",
        "| cascade, fit of run 1 (eval, on the wire) | 0/0 = nan",
    ]
    assert all(r in out for r in rows)
    assert "| 0.000 | 0.00 / 0.00 / 1.00 | 0.00 |" in out  # every answer abstained, for free
    assert (
        "held out   6 abstained (inconclusive), 0 unavailable; 0 model calls for 6 answers" in out
    )
    assert again.returncode == 0, again.stderr
    assert all(r in again.stdout for r in rows)


def test_the_machine_lines_name_no_path_of_the_machine() -> None:
    # they are pasted into the docs: "CPython 3.11.7", never the interpreter's full path
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from _machine import machine
    finally:
        sys.path.remove(str(BENCHMARKS))
    lines = machine(["pytest"])
    text = "\n".join(lines)
    python = next(line for line in lines if line.startswith("python "))
    assert python.split(None, 1)[1].startswith(("CPython 3.", "PyPy 3."))
    assert sys.executable not in text
    assert str(Path.home()) not in text
    assert "/" not in python


def test_bench_escalation_smoke_run_climbs_the_ladder_over_the_scripted_server() -> None:
    # the real model is not needed for the smoke run: a scripted model that answers an
    # invoice right only when its prompt holds the worked example (tier 2), and with prose
    # otherwise (tier 1), so every ladder call climbs to tier 2
    from refinekit._structure.corrections import CHECK_MARKER
    from refinekit.cli._demo._batch import EXAMPLE_TEXT
    from refinekit.cli._demo._synthetic import invoices
    from refinekit.testing import RecordedRequest, ScriptedOpenAI

    truth = {item.text: item.truth for item in invoices(3, 2024)}

    def answer(request: RecordedRequest) -> str:
        messages = (request.body or {})["messages"]
        if not any(m["content"] == EXAMPLE_TEXT for m in messages):
            return "The invoice is from a company."
        invoice = truth[next(m["content"] for m in messages[3:] if m["content"] in truth)]
        return invoice.model_dump_json()

    with ScriptedOpenAI() as server:
        server.script("smollm2-135m-instruct", answer, times=None)
        done = subprocess.run(
            [
                sys.executable,
                str(BENCHMARKS / "bench_escalation.py"),
                "--quick",
                "--base-url",
                server.base_url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        sent = [(r.body or {})["messages"] for r in server.requests]
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # one call per item alone (tier 1 has no correction), two per item in each ladder
    assert len(sent) == 3 + 3 + 6 + 6
    assert "| tier 1 alone (plain) | 0 | 0/3 = 0.00 (0.00-0.56) | 0/3 = 0.00" in out
    assert "| tier 2 alone (worked example) | 2 | 3/3 = 1.00 (0.44-1.00) | 3/3 = 1.00" in out
    # every ladder item answered at tier 2, and refinekit's per-tier usage is the wire's
    assert "| ladder, fresh (carry=False) | 0 (0) | 3 (3) | 0 | 1.00," in out
    assert "| ladder, carried (carry=True) | 0 (0) | 3 (3) | 0 | 1.00," in out
    assert out.count("| 3 of 3 items |") == 2
    # every field right at tier 2, none copied from the worked example
    assert "| ladder, carried (carry=True) | 1.00 | 1.00 | 1.00 | 1.00 | 0 |" in out
    # carried: tier 2's first call gets tier 1's correction turn; fresh: the caller's prompt
    told = [m for m in sent if m[-1]["content"].startswith(CHECK_MARKER)]
    assert len(told) == 3
    assert all(any(x["content"] == EXAMPLE_TEXT for x in m) for m in told)
    summary = json.loads(out.strip().splitlines()[-1])
    assert [summary[k]["exact"] for k in ("tier1", "tier2", "fresh", "carried")] == [0, 3, 3, 3]
    # the ladders pay for tier 1's failed call on top of tier 2's: dearer per correct item
    assert summary["fresh"]["ratio_vs_tier2"] > 1
    assert summary["carried"]["ratio_vs_tier2"] > summary["fresh"]["ratio_vs_tier2"]


def test_bench_cascade_smoke_run_keeps_the_guaranteed_agreement() -> None:
    # exits 1 when a setting's share of runs below its target exceeds its risk
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_cascade.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| setting | target, risk | runs below target | naive: runs below |" in out
    assert "targets: the share of runs below the target <= risk in every setting: met" in out
    below = json.loads(out.strip().splitlines()[-1])["below_target"]
    assert set(below) >= {"strong alone", "cheap, strong", "check, cheap, strong"}
    assert all(share <= 0.1 for share in below.values())
    # the cheap level decides some items: the cascade costs less than the strong judge alone
    [row] = [x for x in out.splitlines() if x.startswith("| cheap, strong | 0.9, 0.1 |")]
    per_item, per_verdict = (float(x) for x in row.split("|")[-3:-1])
    assert per_item < 1.0
    assert per_item <= per_verdict  # an abstention costs and gives no verdict
