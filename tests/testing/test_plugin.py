"""The pytest plugin (loaded through the pytest11 entry point), tested with pytester."""

from __future__ import annotations

import json
import re

import anthropic
import openai
import pytest

from _refinekit_pytest_plugin import LIVE_SKIP_REASON
from refinekit.testing import FakeJudge

pytest_plugins = ["pytester"]

# The in-process runs below drop from `sys.modules` whatever they imported first; the HTTP
# stack of the clients (httpx and httpcore) imported again later gets new exception classes,
# and a client made before then no longer recognises its transport's timeouts. Imported here,
# the stack is in place before any inner run.
_HTTP_STACK = (
    openai.OpenAI(api_key="-", base_url="http://127.0.0.1:9/v1"),
    anthropic.Anthropic(api_key="-"),
)

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def golden_tests(
    tester: pytest.Pytester, passes: int, fails: int, *, ini: str = ""
) -> pytest.Pytester:
    """A CSV golden set of passes + fails rows and a test passing on the 'yes' rows."""
    rows = ["question,ok"]
    rows += [f"question {i},yes" for i in range(passes)]
    rows += [f"question {passes + i},no" for i in range(fails)]
    (tester.path / "cases.csv").write_text("\n".join(rows) + "\n")
    if ini:
        tester.makeini(INI + ini)
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.golden("cases.csv")
        def test_case(ok):
            assert ok == "yes"
        """
    )
    return tester


# loading


def test_a_session_that_uses_nothing_of_it_imports_nothing_of_refinekit(
    tester: pytest.Pytester,
) -> None:
    # pytest loads the plugin in every session of every project that has refinekit installed
    tester.makepyfile(
        """
        import sys

        def test_nothing_heavy_was_imported(pytestconfig):
            assert pytestconfig.pluginmanager.hasplugin("refinekit")
            heavy = ("refinekit", "openai", "instructor", "pydantic", "tenacity")
            assert sorted(m for m in sys.modules if m.split(".")[0] in heavy) == []
            assert "http.server" not in sys.modules
        """
    )
    # langsmith (installed with langchain-core, in the dev extra) has a pytest plugin of its
    # own that imports pydantic: not refinekit's doing
    result = tester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:langsmith_plugin")
    result.assert_outcomes(passed=1)


# the golden marker


def test_golden_csv_one_case_per_row_with_ids_and_column_arguments(
    tester: pytest.Pytester,
) -> None:
    sub = tester.mkdir("sub")
    (sub / "golden.csv").write_text(
        "question,expected source,mustMention\n"
        "What is the refund window?,policy.md,30 days\n"
        "Can I return a gift?,gifts.md,receipt\n"
    )
    (sub / "test_rows.py").write_text(
        "import pytest\n"
        "SEEN = []\n"
        "@pytest.mark.golden('golden.csv')\n"
        "def test_row(question, mustMention, expected_source, tmp_path):\n"
        "    SEEN.append((question, mustMention, expected_source))\n"
        "    assert tmp_path.exists()\n"
        "def test_seen():\n"
        "    assert SEEN == [\n"
        "        ('What is the refund window?', '30 days', 'policy.md'),\n"
        "        ('Can I return a gift?', 'receipt', 'gifts.md'),\n"
        "    ]\n"
    )
    result = run(tester, "-v", "--strict-markers")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_row?1-what-is-the-refund-window? PASSED*",
            "*test_row?2-can-i-return-a-gift? PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*refinekit golden set*", "2/2 passed, rate 1.000*"])


def test_golden_jsonl_keeps_json_values(tester: pytest.Pytester) -> None:
    lines = [
        {"id": "A-1", "question": "q1", "must": ["x", "y"], "n": 1},
        {"id": "B 2", "question": "q2", "must": [], "n": 2},
    ]
    (tester.path / "cases.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.golden("cases.jsonl")
        def test_row(question, must, n):
            assert isinstance(must, list) and isinstance(n, int)
            assert question == f"q{n}"
        """
    )
    result = run(tester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_row?1-a-1? PASSED*", "*test_row?2-b-2? PASSED*"])


def test_golden_missing_column_is_a_collection_error(tester: pytest.Pytester) -> None:
    (tester.path / "cases.csv").write_text("question\nhello\n")
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.golden("cases.csv")
        def test_row(question, answer):
            pass
        """
    )
    result = run(tester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_row takes the argument 'answer' but golden file *cases.csv has no column*"]
    )


def test_golden_missing_file_is_a_collection_error(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.golden("nowhere.csv")
        def test_row(question):
            pass
        """
    )
    result = run(tester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*golden file not found: *nowhere.csv*"])


def test_golden_malformed_csv_is_a_collection_error_naming_the_line(
    tester: pytest.Pytester,
) -> None:
    # a comma left unquoted: once read as question "Pen", must_mention " or pencil?"
    (tester.path / "cases.csv").write_text("question,must_mention\nPen, or pencil?,x\n")
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.golden("cases.csv")
        def test_row(question, must_mention):
            pass
        """
    )
    result = run(tester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*golden *cases.csv, line 2: 3 values, but the header has 2 columns*"]
    )


def test_markers_are_registered_for_strict_markers(tester: pytest.Pytester) -> None:
    result = run(tester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.golden(path):*", "@pytest.mark.live:*"])


# the gate


def test_gate_passes_when_the_lower_bound_clears_the_threshold(tester: pytest.Pytester) -> None:
    result = run(golden_tests(tester, 19, 1), "--refinekit-min-pass-rate", "0.7")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the one failing case
    result.assert_outcomes(passed=19, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*refinekit golden set*",
            "19/20 passed, rate 0.950, 95% Wilson lower bound 0.764",
            "gate: lower bound 0.764 vs minimum pass rate 0.700: PASS",
        ]
    )


def test_gate_turns_a_green_run_red(tester: pytest.Pytester) -> None:
    tester = golden_tests(tester, 19, 0)
    tester.makepyfile(
        test_skips="""
        import pytest

        @pytest.mark.golden("cases.csv")
        def test_skipped(question):
            pytest.skip("not today")
        """
    )
    passing = run(tester, "--refinekit-min-pass-rate", "0.8")
    assert passing.ret == pytest.ExitCode.OK  # 19/19: bound 0.832
    passing.stdout.fnmatch_lines(["19/19 passed*bound 0.832; 19 skipped (not counted)", "*PASS"])

    failing = run(tester, "--refinekit-min-pass-rate", "0.9")
    assert failing.ret == pytest.ExitCode.TESTS_FAILED
    failing.assert_outcomes(passed=19, skipped=19)
    failing.stdout.fnmatch_lines(["gate: lower bound 0.832 vs minimum pass rate 0.900: FAIL"])


def test_gate_19_of_20_fails_at_0_8(tester: pytest.Pytester) -> None:
    result = run(golden_tests(tester, 19, 1), "--refinekit-min-pass-rate=0.8")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["gate: lower bound 0.764 vs minimum pass rate 0.800: FAIL"])


SGR = re.compile(r"\x1b\[(\d+)m")  # a colour or style code


def last_lines(result: pytest.RunResult, n: int) -> list[str]:
    """The last n non-empty lines of the output, colour codes kept."""
    return [line for line in result.outlines if line.strip()][-n:]


def styles(line: str) -> list[str]:
    """The codes a line starts with: 31 red, 32 green, 33 yellow, 1 bold."""
    start = re.match(r"(?:\x1b\[\d+m)*", line)
    return SGR.findall(start.group(0)) if start else []


def plain(line: str) -> str:
    return SGR.sub("", line)


@pytest.mark.parametrize("quiet", [False, True], ids=["default", "quiet"])
def test_a_failed_gate_is_the_last_line_and_red(tester: pytest.Pytester, quiet: bool) -> None:
    # every test passed, the gate failed: the user must not end on pytest's green tally
    tester = golden_tests(tester, 19, 0)  # 19/19: bound 0.832
    args = ["--refinekit-min-pass-rate", "0.9", "--color=yes", *(["-q"] if quiet else [])]
    result = run(tester, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    tally, last = last_lines(result, 2)
    expected = "refinekit gate FAILED: lower bound 0.832 < minimum pass rate 0.900"
    if quiet:
        assert plain(last) == expected
    else:
        assert re.fullmatch(rf"=+ {expected} =+", plain(last)), plain(last)
    assert styles(last)[:2] == ["31", "1"]  # red, bold: as pytest writes a failed run's line
    # pytest's own tally counts the gate, and is not green
    tallied = r"(=+ )?19 passed, 1 refinekit gate failed in [\d.]+s( =+)?"
    assert re.fullmatch(tallied, plain(tally)), plain(tally)
    assert styles(tally)[0] != "32"
    result.assert_outcomes(passed=19)


@pytest.mark.parametrize("quiet", [False, True], ids=["default", "quiet"])
def test_a_passed_gate_leaves_pytests_green_last_line(tester: pytest.Pytester, quiet: bool) -> None:
    tester = golden_tests(tester, 19, 0)
    args = ["--refinekit-min-pass-rate", "0.8", "--color=yes", *(["-q"] if quiet else [])]
    result = run(tester, *args)
    assert result.ret == pytest.ExitCode.OK
    gate, last = last_lines(result, 2)
    assert plain(gate) == "gate: lower bound 0.832 vs minimum pass rate 0.800: PASS"
    assert re.fullmatch(r"(=+ )?19 passed in [\d.]+s( =+)?", plain(last)), plain(last)
    assert styles(last)[0] == "32"


def test_a_failed_gate_is_last_after_failed_tests_too(tester: pytest.Pytester) -> None:
    result = run(golden_tests(tester, 19, 1), "--refinekit-min-pass-rate=0.8", "-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    tally, last = last_lines(result, 2)
    assert last == "refinekit gate FAILED: lower bound 0.764 < minimum pass rate 0.800"
    assert re.fullmatch(r"1 failed, 19 passed, 1 refinekit gate failed in .*", tally), tally


def test_gate_reads_the_ini_option_and_the_command_line_wins(tester: pytest.Pytester) -> None:
    tester = golden_tests(tester, 10, 0, ini="refinekit_min_pass_rate = 0.9\n")
    result = run(tester, "--strict-config")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # 10/10: bound 0.722
    result.stdout.fnmatch_lines(["10/10 passed*0.722", "*0.900: FAIL"])
    result = run(tester, "--refinekit-min-pass-rate", "0.5")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*0.500: PASS"])


def test_no_threshold_reports_without_gating(tester: pytest.Pytester) -> None:
    result = run(golden_tests(tester, 2, 0))
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["2/2 passed, rate 1.000, 95% Wilson lower bound 0.342"])
    result.stdout.no_fnmatch_line("gate:*")


def test_no_golden_case_no_summary(tester: pytest.Pytester) -> None:
    tester.makepyfile("def test_plain():\n    pass\n")
    result = run(tester, "--refinekit-min-pass-rate", "0.99")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*refinekit golden set*")


@pytest.mark.parametrize("value", ["1.5", "-0.1", "high", "nan"])
def test_threshold_is_validated(tester: pytest.Pytester, value: str) -> None:
    tester.makepyfile("def test_plain():\n    pass\n")
    result = run(tester, f"--refinekit-min-pass-rate={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--refinekit-min-pass-rate must be a number from 0 to 1*"])


def test_ini_threshold_is_validated(tester: pytest.Pytester) -> None:
    tester.makeini(INI + "refinekit_min_pass_rate = 2\n")
    tester.makepyfile("def test_plain():\n    pass\n")
    result = run(tester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the ini option refinekit_min_pass_rate must be*"])


# live tests


def test_live_tests_are_skipped_without_the_option(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
        import pytest

        @pytest.mark.live
        def test_model():
            pass

        def test_offline():
            pass
        """
    )
    result = run(tester, "-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED*{LIVE_SKIP_REASON}"])
    result = run(tester, "--refinekit-live", "--strict-markers")
    result.assert_outcomes(passed=2)


# fixtures


def test_fake_judge_through_retry_on_low_quality(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
        import pytest
        from refinekit import LowQualityAnswer, retry_on_low_quality

        def test_scripted_order(fake_judge, refinekit_testing):
            judge = fake_judge("fail: cite a source", "pass")
            calls = []

            @retry_on_low_quality(evaluator=judge, max_retries=3)
            def answer(question, feedback=None):
                calls.append(feedback)
                return f"answer {len(calls)}"

            assert answer("Refund window?") == "answer 2"
            assert calls == [None, "cite a source"]
            assert [r.answer for r in judge.requests] == ["answer 1", "answer 2"]
            assert [r.question for r in judge.requests] == ["Refund window?"] * 2
            assert judge.remaining == 0
            assert judge.name == "fake_judge-1"

        async def test_async(fake_judge):
            judge = fake_judge(False, True, name="strict")

            @retry_on_low_quality(evaluator=judge, max_retries=1)
            async def answer(question):
                return "x"

            assert await answer("q") == "x"
            assert len(judge.requests) == 2

        def test_over_asking(fake_judge, refinekit_testing):
            judge = fake_judge("fail: again", name="stingy")

            @retry_on_low_quality(evaluator=judge, max_retries=3)
            def answer(question):
                return "x"

            answer("q")
        """
    )
    result = run(tester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*AssertionError: fake judge 'stingy' was asked for verdict #2 but only 1 were*"]
    )


def test_fake_judge_verdicts() -> None:
    judge = FakeJudge("PASS", "fail:  no source ", "fail", True)
    assert [(v.passed, v.feedback) for v in judge.verdicts] == [
        (True, ""),
        (False, "no source"),
        (False, ""),
        (True, ""),
    ]
    with pytest.raises(ValueError, match="'maybe'"):
        FakeJudge("maybe")
    with pytest.raises(TypeError, match="not int"):
        FakeJudge(1)  # type: ignore[arg-type]


def test_scripted_openai_fixture_serves_its_client(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
        import pytest

        SERVERS = []

        def test_reply(scripted_openai):
            SERVERS.append(scripted_openai)
            scripted_openai.script("m", ["Hello there"])
            with scripted_openai.client() as client:
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert reply.choices[0].message.content == "Hello there"
            assert scripted_openai.requests_for("m")[0].body["messages"][0]["content"] == "hi"

        async def test_async_reply(scripted_openai):
            scripted_openai.script("m", ["async hello"])
            async with scripted_openai.async_client() as client:
                reply = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert reply.choices[0].message.content == "async hello"

        def test_closed_after():
            with pytest.raises(RuntimeError, match="not running"):
                SERVERS[0].base_url
        """
    )
    result = run(tester)
    result.assert_outcomes(passed=3)


def test_scripted_openai_session_is_one_server_reset_before_each_test_using_it(
    tester: pytest.Pytester,
) -> None:
    tester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def address(scripted_openai_session):
            return scripted_openai_session.base_url
        """
    )
    tester.makepyfile(
        """
        SEEN = []

        def ask(server, model="m"):
            with server.client() as client:
                reply = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}]
                )
            return reply.choices[0].message.content

        def test_first(scripted_openai_session, address):
            SEEN.append(scripted_openai_session)
            assert scripted_openai_session.base_url == address
            scripted_openai_session.script("m", ["one", "left over"])
            scripted_openai_session.script("always", "same", times=None)
            assert ask(scripted_openai_session) == "one"
            assert [ask(scripted_openai_session, "always") for _ in range(3)] == ["same"] * 3

        def test_not_using_it_resets_nothing():
            assert len(SEEN[0].requests) == 4

        def test_second_starts_clean(scripted_openai_session):
            assert scripted_openai_session is SEEN[0]
            assert scripted_openai_session.requests == []
            scripted_openai_session.script("m", "two")
            assert ask(scripted_openai_session) == "two"  # not the first test's left over

        def test_through_another_fixture_is_reset_too(address):
            assert SEEN[0].requests == []
            assert SEEN[0].base_url == address
        """
    )
    result = run(tester, "-p", "no:randomly")
    result.assert_outcomes(passed=4)


def test_refinekit_testing_instant_waits_and_a_job_per_test(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
        import time
        import refinekit
        from refinekit import retry_on_low_quality
        from refinekit.testing import is_testing, set_testing

        JOBS = []
        set_testing(False)  # whatever the outer run set: the fixture must restore this

        def test_instant(refinekit_testing):
            assert is_testing()
            assert refinekit.current_job() is refinekit_testing
            JOBS.append(refinekit_testing)

            @retry_on_low_quality(evaluator=lambda r: r.answer == "ok", max_retries=2, wait=30)
            def answer(question):
                JOBS.append(refinekit.current_job())
                return "ok" if len(JOBS) > 2 else "bad"

            start = time.monotonic()
            assert answer("q") == "ok"
            assert time.monotonic() - start < 5
            assert JOBS[1] is JOBS[2] is refinekit_testing

        async def test_async_sees_its_own_job(refinekit_testing):
            assert refinekit.current_job() is refinekit_testing
            assert refinekit_testing is not JOBS[0]

        def test_nothing_leaks():
            assert refinekit.current_job() is None
            assert not is_testing()
        """
    )
    result = run(tester)
    result.assert_outcomes(passed=3)


# pass^k: --refinekit-trials


def flaky_golden(tester: pytest.Pytester) -> pytest.Pytester:
    """4 cases: 2 always pass, 1 passes on its first trial only, 1 never passes."""
    (tester.path / "cases.csv").write_text("question,plan\nq1,yes\nq2,yes\nq3,once\nq4,no\n")
    tester.makepyfile(
        """
        import pytest

        seen = {}

        @pytest.mark.golden("cases.csv")
        def test_case(question, plan):
            seen[question] = seen.get(question, 0) + 1
            assert plan == "yes" or (plan == "once" and seen[question] == 1)
        """
    )
    return tester


def test_trials_run_each_case_k_times_and_the_gate_counts_pass_k(tester: pytest.Pytester) -> None:
    tester = flaky_golden(tester)

    result = run(tester, "--refinekit-trials", "3", "--refinekit-min-pass-rate", "0.1", "-v")

    result.assert_outcomes(passed=7, failed=5)  # 12 runs: 4 cases x 3 trials
    result.stdout.fnmatch_lines(["*test_case?3-q3-trial1? PASSED*"])
    result.stdout.fnmatch_lines(["*test_case?3-q3-trial2? FAILED*"])
    # pass^3: q1 q2 (2 of 4); pass@3: q1 q2 q3 (3 of 4)
    result.stdout.fnmatch_lines(
        [
            "each case run 3 times: pass^3 2/4 (every trial passed: the rate below, what the "
            "gate holds), pass@3 3/4 (at least one passed, 95% Wilson 0.301 to 0.954)",
            "2/4 passed, rate 0.500, 95% Wilson lower bound 0.150",
            "gate: lower bound 0.150 vs minimum pass rate 0.100: PASS",
        ]
    )
    failing = run(tester, "--refinekit-trials", "3", "--refinekit-min-pass-rate", "0.2")
    failing.stdout.fnmatch_lines(["gate: lower bound 0.150 vs minimum pass rate 0.200: FAIL"])
    once = run(tester, "--refinekit-min-pass-rate", "0.2")  # one trial: q3 passes, 3 of 4
    once.stdout.fnmatch_lines(["3/4 passed, rate 0.750, 95% Wilson lower bound 0.301", "*PASS"])


def test_trials_read_the_ini_option_and_are_validated(tester: pytest.Pytester) -> None:
    tester = flaky_golden(tester)
    tester.makeini(INI + "refinekit_trials = 2\n")
    result = run(tester)
    result.assert_outcomes(passed=5, failed=3)
    result.stdout.fnmatch_lines(["each case run 2 times: pass^2 2/4*pass@2 3/4*"])
    for bad in ("0", "51", "two"):
        refused = run(tester, f"--refinekit-trials={bad}")
        refused.stderr.fnmatch_lines(["*--refinekit-trials must be a whole number from 1 to 50*"])
