"""The `refinekit` command's own usage: --version, "did you mean", where --report goes (and
that it is checked before a run is paid for), the gates in the summary, --target as a file.

In process, as tests/cli/test_cli_eval.py is: golden files and modules written into tmp_path.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Cli, Workspace

import refinekit
from refinekit.eval._stats import wilson_interval
from refinekit.eval._store._sqlite import SQLiteStore

# the target leaves a file behind when it runs: a usage error must leave none
MARKING = """
import pathlib

def answer(question):
    pathlib.Path("called").write_text("the target ran")
    return "ok"
"""


def golden(ws: Workspace) -> Path:
    return ws.csv(
        "golden.csv",
        [{"question": "q1", "must_mention": "ok"}, {"question": "q2", "must_mention": "no"}],
    )


def labelled(ws: Workspace) -> Path:
    return ws.csv(
        "labelled.csv",
        [
            {"question": "q", "answer": "ok", "label": "pass"},
            {"question": "q", "answer": "bad", "label": "fail"},
        ],
    )


# --- --version and "did you mean" ---------------------------------------------------------------


def test_version_is_the_package_version(cli: Cli) -> None:
    result = cli("--version")

    assert result.code == 0
    assert result.out == f"refinekit {refinekit.__version__}\n"


def _help(cli: Cli, command: str) -> str:
    result = cli(command, "--help")
    assert result.code == 0
    return " ".join(result.out.split())


def test_runs_help_says_a_missing_store_is_an_error_as_it_is(ws: Workspace, cli: Cli) -> None:
    text = _help(cli, "runs")
    assert "a missing one is an error: exit 2" in text
    assert "made" not in text
    missing = ws.path / "no" / "such" / "runs.db"

    result = cli("runs", "--db", missing)

    assert result.code == 2
    assert f"no run store at {missing}" in result.err
    assert not (ws.path / "no").exists()  # listing runs makes nothing


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_eval_and_calibrate_help_say_a_missing_store_is_made(cli: Cli, command: str) -> None:
    # what they do: test_report_and_db_make_their_missing_folders_alike
    assert "a SQLite file (made if missing, and its missing folders)" in _help(cli, command)


def test_calibrate_help_speaks_of_calibrate_runs_and_items_only(cli: Cli) -> None:
    text = _help(cli, "calibrate")
    # calibrate has no --repeat, and its run judges labelled items: no eval run, no cases
    assert "--repeat" not in text
    assert "eval run" not in text
    assert "cases" not in text
    assert "an unchanged calibrate run again makes no judge call (temperature 0 judges)" in text
    assert "each --repeat keyed apart" in _help(cli, "eval")


def test_one_case_is_one_case_not_one_cases(ws: Workspace, cli: Cli) -> None:
    data = ws.csv("one.csv", [{"question": "q1", "must_mention": "ok"}])
    module = ws.module("def answer(question):\n    return 'ok'\n")

    report = ws.path / "one.html"

    result = cli("eval", data, "--target", f"{module}:answer", "--report", report)

    assert result.code == 0, result.err
    assert result.out.startswith(f"refinekit eval: {data} (1 case) -> run 1 in ")
    assert not re.search(r"\b1 (cases|items|verdicts)\b", result.out), result.out
    shown = re.sub(r"<[^>]+>", " ", report.read_text(encoding="utf-8"))
    assert " 1 case " in " ".join(shown.split())  # the run line: "... · 1 case · ..."
    assert not re.search(r"\b1 (cases|items|verdicts)\b", shown)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["evl", "golden.csv"], "invalid choice: 'evl'"),
        (["calibrat"], "invalid choice: 'calibrat'"),
    ],
)
def test_a_mistyped_subcommand_gets_a_suggestion(cli: Cli, args: list[str], said: str) -> None:
    result = cli(*args)

    assert result.code == 2
    meant = "eval" if args[0] == "evl" else "calibrate"
    assert said in result.err
    assert result.err.rstrip().endswith(f"(did you mean '{meant}'?)")


def test_a_mistyped_flag_gets_a_suggestion_and_nothing_runs(ws: Workspace, cli: Cli) -> None:
    target = ws.module(MARKING)

    result = cli("eval", golden(ws), "--target", f"{target}:answer", "--min-passrate", "0.8")

    assert result.code == 2
    assert result.err.splitlines()[-1] == (
        "refinekit eval: error: unrecognized arguments: --min-passrate 0.8 "
        "(did you mean --min-pass-rate?)"
    )
    assert result.err.startswith("usage: refinekit eval ")  # the subcommand's usage
    assert not (ws.path / "called").exists()
    assert not (ws.path / ".refinekit").exists()


def test_several_mistyped_flags_and_a_value_after_equals(ws: Workspace, cli: Cli) -> None:
    result = cli(
        "eval", golden(ws), "--target", "m:f", "--concurency=2", "--min_pass_rate", "0.5", "x"
    )

    assert result.code == 2
    assert result.err.splitlines()[-1] == (
        "refinekit eval: error: unrecognized arguments: --concurency=2 --min_pass_rate 0.5 x "
        "(did you mean --concurrency for --concurency, --min-pass-rate for --min_pass_rate?)"
    )


def test_a_flag_nothing_resembles_gets_no_suggestion(ws: Workspace, cli: Cli) -> None:
    result = cli("eval", golden(ws), "--target", "m:f", "--zzzzzz")

    assert result.code == 2
    assert result.err.splitlines()[-1] == "refinekit eval: error: unrecognized arguments: --zzzzzz"


def test_a_mistyped_choice_and_a_top_level_flag_get_suggestions(cli: Cli) -> None:
    kind = cli("runs", "--kind", "evals")
    top = cli("--verison")

    assert kind.code == top.code == 2
    assert "argument --kind: invalid choice: 'evals' (choose from " in kind.err  # its quoting
    assert kind.err.rstrip().endswith(") (did you mean 'eval'?)")  # of choices varies by Python
    assert top.err.rstrip().endswith("unrecognized arguments: --verison (did you mean --version?)")


# --- --report: where it goes, checked before the run --------------------------------------------


@pytest.mark.parametrize("how", [["--report"], ["--report", "html"]])
def test_report_without_a_path_goes_next_to_the_store_named_after_the_run(
    ws: Workspace, cli: Cli, how: list[str]
) -> None:
    target = ws.module(MARKING)
    data = golden(ws)
    cli("eval", data, "--target", f"{target}:answer")  # run 1: the report is named for run 2

    result = cli("eval", data, "--target", f"{target}:answer", *how, "--min-pass-rate", "0.9")

    assert result.code == 1, result.err
    report = Path(".refinekit") / "report-run-2.html"
    assert result.out.splitlines()[-1] == f"report: {report}"
    assert not (ws.path / "html").exists()  # no longer a file literally named html
    document = (ws.path / report).read_text(encoding="utf-8")
    assert "refinekit eval \u2014 run 2" in document
    # why the job failed, in the artifact: the gate the command line asked for
    assert "<code>refinekit eval</code> exits 1)" in document
    assert "<code>--min-pass-rate 0.900</code>" in document


def test_report_without_a_path_follows_db_and_takes_a_value_after_it_as_its_path(
    ws: Workspace, cli: Cli
) -> None:
    target = ws.module(MARKING)
    data = golden(ws)
    (ws.path / "store").mkdir()

    result = cli("eval", "--target", f"{target}:answer", "--db", "store/r.db", "--report", data)

    # a value after a bare --report is its path: the golden file must then come first
    assert result.code == 2
    assert "the following arguments are required: GOLDEN" in result.err
    result = cli("eval", data, "--target", f"{target}:answer", "--db", "store/r.db", "--report")
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == f"report: {Path('store') / 'report-run-1.html'}"
    assert (ws.path / "store" / "report-run-1.html").is_file()


def test_a_calibrate_report_without_a_path_is_named_after_its_run(ws: Workspace, cli: Cli) -> None:
    data = ws.csv(
        "labelled.csv",
        [
            {"question": "q", "answer": "ok", "label": "pass"},
            {"question": "q", "answer": "bad", "label": "fail"},
        ],
    )
    judge = ws.module("def judge(request):\n    return 'ok' in request.answer\n")

    result = cli("calibrate", data, "--judge", f"{judge}:judge", "--report", "--min-kappa", "0.5")

    assert result.code == 0, result.err
    assert f"report: {Path('.refinekit') / 'report-run-1.html'}" in result.out
    document = (ws.path / ".refinekit" / "report-run-1.html").read_text(encoding="utf-8")
    assert "Cohen&#x27;s kappa 1.000 >= 0.500, over 2 items" in document


def unwritable(folder: Path) -> Path:
    folder.mkdir()
    folder.chmod(0o500)
    return folder / "r.html"


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("afile/r.html", "--report afile/r.html: afile is a file, not a folder"),
        ("afile/new/r.html", "--report afile/new/r.html: afile is a file, not a folder"),
        (".", "--report .: is a folder; give a file name (e.g. report.html)"),
        ("adir", f"--report adir: is a folder; give a file name (e.g. {Path('adir/report.html')})"),
    ],
)
@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli, command: str, where: str, said: str
) -> None:
    (ws.path / "afile").write_text("x")
    (ws.path / "adir").mkdir()
    data = golden(ws)
    module = ws.module(MARKING + "\njudge = answer\n")
    option = "--target" if command == "eval" else "--judge"
    name = "answer" if command == "eval" else "judge"

    result = cli(command, data, option, f"{module}:{name}", "--report", where)

    assert result.code == 2
    assert result.err == f"refinekit {command}: error: {said}; nothing was run\n"
    assert result.out == ""
    assert not (ws.path / "called").exists()
    assert not (ws.path / ".refinekit").exists()  # no run started, none to pay for


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_report_and_db_make_their_missing_folders_alike(
    ws: Workspace, cli: Cli, command: str
) -> None:
    # one rule for every output path, as pytest's --junitxml and coverage's reports have it
    data = golden(ws) if command == "eval" else labelled(ws)
    module = ws.module(
        "def answer(question):\n    return 'ok'\n\njudge = lambda r: 'ok' in r.answer\n"
    )
    option = "--target" if command == "eval" else "--judge"
    name = "answer" if command == "eval" else "judge"
    report, db = ws.path / "new" / "reports" / "r.html", ws.path / "other" / "dir" / "runs.db"

    result = cli(command, data, option, f"{module}:{name}", "--report", report, "--db", db)

    assert result.code in (0, 1), result.err  # the gate's verdict, whatever it is
    assert f"report: {report}" in result.out
    assert "<html" in report.read_text(encoding="utf-8")
    with SQLiteStore(db) as store:
        assert len(store.runs()) == 1


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_a_db_whose_folder_cannot_be_made_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli, command: str
) -> None:
    (ws.path / "afile").write_text("x")
    data = golden(ws) if command == "eval" else labelled(ws)
    module = ws.module(MARKING + "\njudge = answer\n")
    option = "--target" if command == "eval" else "--judge"
    name = "answer" if command == "eval" else "judge"

    result = cli(command, data, option, f"{module}:{name}", "--db", "afile/new/runs.db")

    assert result.code == 2
    assert result.err.startswith(f"refinekit {command}: error: cannot open the run store ")
    assert "afile" in result.err
    assert not (ws.path / "called").exists()


def not_writable(ws: Workspace) -> Path:
    """A report path in a folder this process cannot write: a locked folder of ours, or (as
    root, which writes anywhere) Linux's /proc/sys, which not even root may create files in."""
    if os.geteuid() != 0:
        return unwritable(ws.path / "locked")
    if not os.path.isdir("/proc/sys") or os.access("/proc/sys", os.W_OK):
        pytest.fail("running as root without a /proc/sys to stand for a folder root cannot write")
    return Path("/proc/sys/r.html")


def test_a_report_in_a_folder_not_writable_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli
) -> None:
    target = ws.module(MARKING)
    path = not_writable(ws)
    try:
        result = cli("eval", golden(ws), "--target", f"{target}:answer", "--report", path)
    finally:
        if path.parent.is_relative_to(ws.path):
            path.parent.chmod(0o700)

    assert result.code == 2
    assert "is not writable; nothing was run" in result.err
    assert not (ws.path / "called").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("where", ["/proc/r.html", "/proc/new/r.html"])
def test_a_report_no_file_can_be_created_at_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli, where: str
) -> None:
    # /proc passes a permission check (for root, every folder does) and takes no new file
    target = ws.module(MARKING)

    result = cli("eval", golden(ws), "--target", f"{target}:answer", "--report", where)

    assert result.code == 2
    assert result.err.startswith(f"refinekit eval: error: --report {where}: cannot create the ")
    assert result.err.endswith("; nothing was run\n")
    assert not (ws.path / "called").exists()
    assert not (ws.path / ".refinekit").exists()


def test_the_report_check_leaves_no_file_or_folder_behind(ws: Workspace, cli: Cli) -> None:
    # the check creates the file and its folders, and removes them before the usage error
    (ws.path / "kept.html").write_text("an earlier report")
    module = ws.module(MARKING)
    for where in ("new/deeper/r.html", "kept.html"):
        result = cli("eval", "missing.csv", "--target", f"{module}:answer", "--report", where)
        assert result.code == 2
        assert "file not found: missing.csv" in result.err
    assert not (ws.path / "new").exists()
    assert (ws.path / "kept.html").read_text() == "an earlier report"


def test_a_report_whose_missing_folder_cannot_be_made_is_a_usage_error_before_the_run(
    ws: Workspace, cli: Cli
) -> None:
    target = ws.module(MARKING)
    locked = not_writable(ws).parent
    path = locked / "new" / "r.html"
    try:
        result = cli("eval", golden(ws), "--target", f"{target}:answer", "--report", path)
    finally:
        if locked.is_relative_to(ws.path):
            locked.chmod(0o700)

    assert result.code == 2
    assert result.err == (
        f"refinekit eval: error: --report {path}: cannot make its folder: the folder {locked} "
        "is not writable; nothing was run\n"
    )
    assert not (ws.path / "called").exists()


def test_a_report_that_fails_after_the_run_is_still_a_usage_error(ws: Workspace, cli: Cli) -> None:
    # the folder is there when checked, and a file in its place by the time the run is done
    (ws.path / "out").mkdir()
    target = ws.module(
        "import pathlib, shutil\n\ndef answer(question):\n"
        "    shutil.rmtree('out', ignore_errors=True)\n"
        "    pathlib.Path('out').write_text('in the way')\n    return 'ok'\n"
    )
    data = ws.csv("golden.csv", [{"question": "q", "must_mention": "ok"}])

    result = cli("eval", data, "--target", f"{target}:answer", "--report", "out/r.html")

    assert result.code == 2
    assert result.err == (
        "refinekit eval: error: cannot write the report to out/r.html: File exists\n"
    )
    assert "pass rate 1.000 (1/1)" in result.out  # the run itself was done and stored
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        assert [r.status for r in store.runs()] == ["complete"]


# --- the gates, printed ---------------------------------------------------------------------------


def test_the_summary_says_whether_the_pass_rate_gate_held_and_why(ws: Workspace, cli: Cli) -> None:
    target = ws.module(MARKING)
    data = golden(ws)  # 1 of 2 passes
    lower = wilson_interval(1, 2)[0]

    failed = cli("eval", data, "--target", f"{target}:answer", "--min-pass-rate", "0.5")
    held = cli("eval", data, "--target", f"{target}:answer", "--min-pass-rate", "0.05")

    assert failed.code == 1
    assert f"gate: lower bound {lower:.3f} is under --min-pass-rate 0.500: FAIL" in failed.out
    assert held.code == 0
    assert f"gate: lower bound {lower:.3f} >= --min-pass-rate 0.050: pass" in held.out


# --- --target as a file path ----------------------------------------------------------------------


@pytest.fixture
def package(ws: Workspace) -> Iterator[str]:
    """A package folder of a name of its own: app_<hex>/answers.py."""
    name = f"app_{uuid.uuid4().hex[:12]}"
    (ws.path / name).mkdir()
    (ws.path / name / "answers.py").write_text(textwrap.dedent(MARKING), encoding="utf-8")
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


@pytest.mark.parametrize("suffix", [".py", ""])
def test_a_target_given_as_a_file_path_is_its_module(
    ws: Workspace, cli: Cli, package: str, suffix: str
) -> None:
    data = golden(ws)

    by_path = cli("eval", data, "--target", f"{package}/answers{suffix}:answer")
    by_module = cli("eval", data, "--target", f"{package}.answers:answer")

    assert by_path.code == by_module.code == 0, by_path.err
    assert "pass rate 0.500 (1/2)" in by_path.out
    assert (ws.path / "called").exists()
    with SQLiteStore(ws.path / ".refinekit" / "runs.db") as store:
        targets = [r.target for r in store.runs()]
    assert targets == [f"{package}.answers:answer"] * 2  # one name for one function


def test_a_target_file_under_the_current_folder_by_absolute_path(
    ws: Workspace, cli: Cli, package: str
) -> None:
    result = cli("eval", golden(ws), "--target", f"{ws.path / package / 'answers.py'}:answer")

    assert "pass rate 0.500 (1/2)" in result.out, result.err


def test_a_target_file_that_is_not_there_or_not_importable_says_the_module_form(
    ws: Workspace, cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "answers.py"
    elsewhere.write_text(MARKING, encoding="utf-8")
    (ws.path / "my-app").mkdir()
    (ws.path / "my-app" / "answers.py").write_text(MARKING, encoding="utf-8")
    data = golden(ws)

    missing = cli("eval", data, "--target", "app/answers.py:answer")
    outside = cli("eval", data, "--target", f"{elsewhere}:answer")
    no_name = cli("eval", data, "--target", "my-app/answers.py:answer")

    assert missing.code == outside.code == no_name.code == 2
    assert missing.err == (
        "refinekit eval: error: --target 'app/answers.py:answer': no file 'app/answers.py'; "
        "give a file that exists, or the module form, package.module:answer\n"
    )
    for result in (outside, no_name):
        assert re.search(
            r"is not inside the current folder or a folder Python imports from .*give "
            r"package\.module:answer\n$",
            result.err,
        ), result.err
    assert not (ws.path / "called").exists()
