"""`refinekit demo`: both scenarios over real HTTP, scripted or against a configured endpoint."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refinekit.cli import _demo, main
from refinekit.cli._demo import idle_cores
from refinekit.testing import Reply, ScriptedOpenAI

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[")
SECRET = "sk-demo-test-5e3b1f0c9a7d4e2b8c6f1a0d"
_ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "NO_COLOR")

# The scripted story, in the order it must be told.
STORY = [
    "SCRIPTED",
    "proves the wiring",
    "not a model's quality",
    "1. Refund answer",
    "attempt 1/3, demo-answer replied:",
    "no questions asked",
    "verdict: rejected",
    "keeps_conditions  fail  p=0.04  from logprobs",
    "feedback sent back (attempt 2 follows, after a 0.10 s wait):",
    "| The answer drops the conditions of the refund policy: keep 'unused' and 'within seven "
    "days'.",
    "attempt 2/3, demo-answer replied:",
    "| Yes, if the order is unused: an unused order may be refunded within seven days",
    "-> the answer changed after the feedback",
    "verdict: passed",
    "keeps_conditions  pass  p=0.97  from logprobs",
    "-> the model acted on the feedback: attempt 2 passed",
    "answer model (demo-answer) calls: 2, tokens: ",
    "judge model (demo-judge) calls: 4, tokens: ",
    "outcome: as expected",
    "2. Invoice extraction",
    "reply 1 (2 messages sent), demo-answer replied:",
    "correction 1/2 (not JSON) goes back as a user turn:",
    "The reply had no JSON in it.",
    '{"number": "<string>", "total_cents": <integer>, "currency": "<string>"}',
    "reply 2 (3 messages sent), demo-answer replied:",
    "-> the model acted on correction 1 in part: its reply is JSON that fails validation now",
    "correction 2/2 (JSON that fails validation) goes back as a user turn:",
    '"total_cents" is missing.',
    '{"number": "INV-7", "total_cents": <integer>, "currency": "EUR"}',
    "reply 3 (3 messages sent), demo-answer replied:",
    "-> the model acted on correction 2: its reply is valid",
    "caller got: Invoice(number='INV-7', total_cents=1250, currency='EUR')",
    "answer model (demo-answer) calls: 3, tokens: ",
    "judge model (demo-judge) calls: 0, tokens: 0",
    "outcome: as expected: two corrections",
    "The scripted server answered 9 HTTP requests: 5 for demo-answer, 4 for demo-judge.",
    "Both scenarios ended as expected.",
]


@pytest.fixture(autouse=True)
def _no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the developer's shell has set, the demo under test runs where the test says."""
    for name in _ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENDPOINT_VARIABLES}
    return {**env, **extra}


def assert_in_order(out: str, expected: list[str]) -> None:
    position = 0
    for text in expected:
        found = out.find(text, position)
        assert found >= 0, f"{text!r} missing (or out of order) in:\n{out}"
        position = found + len(text)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "refinekit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env if env is not None else clean_env(),
    )


# --- scripted -------------------------------------------------------------------------------------


def test_scripted_demo_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert_in_order(out, STORY)
    assert not ANSI.search(out)


def test_scripted_demo_as_a_module() -> None:
    result = cli("demo")
    assert result.returncode == 0, result.stderr
    assert_in_order(result.stdout, STORY)
    assert not ANSI.search(result.stdout)
    assert result.stderr == ""


def test_scripted_demo_as_the_console_script() -> None:
    script = Path(sys.executable).with_name("refinekit")
    if not script.exists():
        pytest.skip("the refinekit console script is not installed beside this interpreter")
    result = subprocess.run(
        [str(script), "demo"], capture_output=True, text=True, timeout=60, env=clean_env()
    )
    assert result.returncode == 0, result.stderr
    assert_in_order(result.stdout, STORY)


def test_demo_piped_into_a_reader_that_is_gone_exits_0_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line, as with `| true`
    try:
        result = subprocess.run(
            [sys.executable, "-m", "refinekit", "demo"],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
            cwd=ROOT,
            env=clean_env(),  # the demo flushes each line: buffered or not, the same
            check=False,
        )
    finally:
        os.close(write)

    assert result.stderr == b""
    assert result.returncode == 0


class _ReadsOneScenario(io.StringIO):
    """A standard output whose reader goes away after scenario 1's outcome line."""

    def write(self, text: str) -> int:
        if "outcome:" in self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_reader_gone_stops_the_demo_before_its_next_model_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers: list[ScriptedOpenAI] = []
    script = _demo.script_demo
    monkeypatch.setattr(_demo, "script_demo", lambda s: (servers.append(s), script(s))[1])
    out = _ReadsOneScenario()
    monkeypatch.setattr(sys, "stdout", out)

    assert main(["demo"]) == 0

    assert "1. Refund answer" in out.getvalue()
    assert "2. Invoice extraction" not in out.getvalue()
    # scenario 1's 2 answers and 4 verdicts; scenario 2 (3 more calls) never started
    assert len(servers[0].requests) == 6


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _Terminal()
    assert _demo.run_demo(terminal) == 0
    assert ANSI.search(terminal.getvalue())
    assert "\x1b[31mfail\x1b[0m" in terminal.getvalue()

    monkeypatch.setenv("NO_COLOR", "1")
    terminal = _Terminal()
    assert _demo.run_demo(terminal) == 0
    assert not ANSI.search(terminal.getvalue())
    assert_in_order(terminal.getvalue(), STORY)


def test_the_scripted_judge_reads_the_request_so_order_does_not_matter() -> None:
    """The judge's replies are callables of the request: any order gives the same verdicts."""
    with ScriptedOpenAI() as server:
        _demo.script_demo(server, "m", "j")
        with server.client() as client:
            for answer in (
                "Yes, a full refund, no questions asked.",
                "Yes, a refund if unused, within seven days.",
            ):
                replies = {}
                for criterion in reversed(_demo.CRITERIA):
                    prompt = f"{criterion.question}\n<answer>\n{answer}\n</answer>"
                    reply = client.chat.completions.create(
                        model="j",
                        messages=[{"role": "user", "content": prompt}],
                        logprobs=True,
                        top_logprobs=2,
                    )
                    replies[criterion.name] = reply.choices[0].message.content
                conditional = "unused" in answer
                assert replies == {
                    "keeps_conditions": "YES" if conditional else "NO",
                    "answers_question": "YES",
                }


# --- a real endpoint (another scripted server, started here) ------------------------------------


def test_real_endpoint_runs_the_same_scenarios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with ScriptedOpenAI() as server:
        _demo.script_demo(server, "my-model", "my-judge")
        status = main(
            [
                "demo",
                "--base-url",
                server.base_url,
                "--model",
                "my-model",
                "--judge-model",
                "my-judge",
            ]
        )
        requests = server.requests
        base_url = server.base_url
    captured = capsys.readouterr()
    assert status == 0, captured.out
    out = captured.out
    assert SECRET not in out + captured.err
    assert "SCRIPTED" not in out
    assert f"a REAL endpoint, {base_url}" in out
    assert "API key: from OPENAI_API_KEY (not shown)" in out
    assert_in_order(
        out,
        [
            "attempt 1/3, my-model replied:",
            "keeps_conditions  fail  p=0.04  from logprobs",
            "feedback sent back",
            "attempt 2/3, my-model replied:",
            "verdict: passed",
            "judge model (my-judge) calls: 4, tokens: ",
            "outcome: as expected: the caller got an answer that passed, on attempt 2.",
            "correction 2/2",
            "caller got: Invoice(number='INV-7', total_cents=1250, currency='EUR')",
            "outcome: as expected: 2 correction(s), then a typed Invoice.",
            "Both scenarios ended as expected.",
        ],
    )
    assert [r.model for r in requests].count("my-model") == 5
    assert [r.model for r in requests].count("my-judge") == 4
    assert all(r.body and r.body["logprobs"] is True for r in requests if r.model == "my-judge")
    assert all(r.headers["authorization"] == "Bearer ***" for r in requests)


def test_real_endpoint_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedOpenAI() as server:
        _demo.script_demo(server, "env-model", "env-judge")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        status = main(["demo", "--model", "env-model", "--judge-model", "env-judge"])
        served = len(server.requests)
    captured = capsys.readouterr()
    assert status == 0, captured.out
    assert served == 9
    assert SECRET not in captured.out + captured.err
    assert "a REAL endpoint" in captured.out
    assert "Both scenarios ended as expected." in captured.out


def test_real_endpoint_without_a_key_sends_not_needed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedOpenAI() as server:
        _demo.script_demo(server, "m", "j")
        status = main(["demo", "--base-url", server.base_url, "--model", "m", "--judge-model", "j"])
    assert status == 0
    assert "OPENAI_API_KEY not set, sending 'not-needed'" in capsys.readouterr().out


def test_a_scenario_that_fails_exits_1_and_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge the endpoint does not know: the refund scenario fails with the reason, the
    extraction still runs, and the exit status is 1; the key never shows."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with ScriptedOpenAI() as server:
        server.script("m", [_demo.scripted_answer] * 4)
        server.script("j", Reply.error(404, f"The model 'j' does not exist (key {SECRET})"))
        status = main(["demo", "--base-url", server.base_url, "--model", "m", "--judge-model", "j"])
    out = capsys.readouterr().out
    assert status == 1
    assert SECRET not in out
    assert_in_order(
        out,
        [
            "failed: JudgeMisconfigured: judge model 'j'",
            "HTTP 404",
            "outcome: NOT as expected",
            "caller got: Invoice(",
            "outcome: as expected",
            "1 of 2 scenarios did not end as expected.",
        ],
    )


# --- configuration errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["--model", "m"], "missing: --base-url, --judge-model."),
        (["--judge-model", "j"], "missing: --base-url, --model."),
        (["--base-url", "http://127.0.0.1:9/v1"], "missing: --model, --judge-model."),
        (["--base-url", "http://127.0.0.1:9/v1", "--model", "m"], "missing: --judge-model."),
        (["--model", "m", "--judge-model", "j"], "missing: --base-url."),
    ],
)
def test_partial_endpoint_options_exit_2_naming_what_is_missing(
    args: list[str], missing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "refinekit demo: error: a real endpoint needs --base-url (or OPENAI_BASE_URL)" in (
        captured.err
    )
    assert missing in captured.err


def test_openai_base_url_alone_exits_2_and_says_how_to_run_scripted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "missing: --model, --judge-model." in err
    assert "OPENAI_BASE_URL is set: unset it to run the scripted demo" in err


def test_an_api_key_alone_does_not_leave_the_scripted_demo(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "SCRIPTED" in out
    assert SECRET not in out


def test_partial_options_exit_2_as_a_module() -> None:
    result = cli("demo", "--model", "m")
    assert result.returncode == 2
    assert "missing: --base-url, --judge-model." in result.stderr
    assert result.stdout == ""


def test_a_base_url_that_is_not_http_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["demo", "--base-url", "localhost:11434/v1", "--model", "m", "--judge-model", "j"]
    assert main(args) == 2
    assert "--base-url must be an http:// or https:// URL" in capsys.readouterr().err


def test_there_is_no_api_key_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--api-key", SECRET])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --api-key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--api-key" not in capsys.readouterr().out


def test_cli_without_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_the_refund_scenario_says_when_the_model_ignored_the_feedback_and_the_judge_was_unsure(
    scripted_openai: ScriptedOpenAI,
) -> None:
    # what --local shows on a model that repeats itself, judged by one that cannot decide
    from refinekit.cli._demo._output import Output
    from refinekit.cli._demo._run import Setting, refund

    unsure = Reply.text("YES", {"YES": 0.55, "NO": 0.45})
    scripted_openai.script("answerer", ["Yes, you can."] * 3)
    scripted_openai.script("unsure-judge", [unsure] * 6)
    out = io.StringIO()
    with scripted_openai.client() as client:
        setting = Setting(Output(out, None), client, "answerer", "unsure-judge", False, local=True)
        assert refund(setting)  # a typed refusal is the expected end on the tiny model
    assert_in_order(
        out.getvalue(),
        [
            "attempt 1/3, answerer replied:",
            "-> the judge could not decide (its p is between the thresholds); an uncertain",
            "attempt 2/3, answerer replied:",
            "-> the model did not act on the feedback: the same answer as attempt 1",
            "-> the judge could not decide",
            "attempt 3/3, answerer replied:",
            "-> the model did not act on the feedback: the same answer as attempt 2",
            "gave up after 3 attempts",
            "outcome: as expected: the caller got LowQualityAnswer",
        ],
    )
    assert "acted on the feedback" not in out.getvalue()


@pytest.mark.parametrize(
    ("cores", "load", "threads"),
    [(2, 0.1, 2), (2, 0.9, 1), (2, 2.5, 1), (8, 3.2, 5), (None, 0.0, 1)],
)
def test_the_local_model_gets_the_cores_other_work_leaves_idle(
    monkeypatch: pytest.MonkeyPatch, cores: int | None, load: float, threads: int
) -> None:
    # llama.cpp's threads spin-wait: one on a busy core slows every token (docstring figures)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert idle_cores() == threads
