"""Every example runs, offline or on a scripted server, and shows what it promises."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from refinekit.testing import RecordedRequest, ScriptedOpenAI

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
# one per judge, on an OpenAI-compatible endpoint (judge_anthropic.py is checked on its own)
JUDGE_EXAMPLES = [
    p for p in EXAMPLES if p.name.startswith("judge_") and p.name != "judge_anthropic.py"
]

EXPECTED = {
    "escalation.py": [
        "caller got: Invoice(number='INV-7', total=12.5) from tier 'gpt-4.1'",
        "escalation: gpt-4.1 after exhausted",
        "tier gpt-4.1-nano: 1 call(s), exhausted, cost 0.000038",
        "tier gpt-4.1: 1 call(s), answered, cost 0.000960",
        "the strong tier (gpt-4.1) got 1 message(s)",
        'with carry=True it was told: "total": got "twelve fifty"',
        "stopped before tier 'gpt-4.1': ResponseValidationError below",
    ],
    "budget.py": [
        "stopped: max_calls=5, planned: judge call to model 'judge-mini'",
        "calls on the wire: 5 (3 answer, 2 judge)",
        "best attempt: 2 of 2",
        "stopped at cost 0.001040 (answer 0.000768, judge 0.000272) of max_cost=0.001",
        "calls on the wire: 6 (a call's reply took the job over)",
    ],
    "retry_example.py": ["attempt 2/3", "caller got: Refunds", "policies/refunds.md", "gave up"],
    "self_correct_example.py": [
        "caller got: Invoice(number='INV-7', total_cents=1250)",
        "untouched: 1 message",
        "corrections used in this job: 1",
    ],
    "hooks_example.py": ["caller got: Paris.", "retry 1"],
    "outcome_example.py": [
        "Retrying __main__.SupportService.answer in 0.01 seconds as it raised LowQualityAnswer",
        'response: {"answer": "Refunds are accepted within 30 days (policies/refunds.md).", '
        '"attempts": 2, "verdicts": [false, true], "waited_s": 0.01, "job": "',
        "plain call: Refunds are accepted within 30 days (policies/refunds.md).",
        "model calls: acme 2, globex 2",
        "triage: Ticket(order='A-1001', reason='damaged'), corrections used: 1",
        "retry_with(max_retries=0): gave up after 1 attempt: Cite the source",
    ],
    "evaluators_demo.py": [
        "cites_source=fail",
        "stand_in_judge=skipped",
        "stand-in judge calls: 1",
    ],
    "judge_relevancy.py": [
        "on-topic answer: passed (the judge said 'Yes, it is in line with the context.')",
        "off-topic answer: failed (the judge said 'No.')",
        "feedback for the next attempt: The answer is not in line with the context",
    ],
    "judge_fact_check.py": [
        "'An unused order can be refunded within a week of delivery.': supported",
        "'Any order can be refunded within thirty days.': NOT supported",
    ],
    "judge_rating.py": [
        "rating 2/4, score 0.50: failed",
        "feedback: The answer drops the conditions: unused, within seven days.",
        "rating 4/4, score 1.00: passed",
    ],
    "judge_criteria.py": [
        "keeps_conditions=fail p=0.10 from logprobs",
        "answers_question=pass p=0.95 from logprobs",
        "cites_policy=fail p=0.00 from code",
        "answers_question=skipped",
        "feedback for the next attempt: Cite the policy's source path",
        "'Yes, if the order is unused and you ask within seven days. [policies/refunds.md]': "
        "passed",
    ],
    "judge_pairwise.py": ["winner: a", "winner: tie (the two orders disagreed)"],
    "judge_cascade.py": [
        "fitted on 400 labelled items: thresholds 0.78, 0.78, 0.78;",
        "failed by numbers (confidence 1.00); asked: numbers",
        "passed by cheap (confidence 0.98); asked: numbers, cheap",
        "failed by strong (confidence 0.96); asked: numbers, cheap, strong",
    ],
    "judge_cache.py": [
        "pass 1: 3 judgements, 3 judge calls, ",
        "  passed, failed, passed",
        "pass 2: 3 judgements, 0 judge calls, 0 tokens; same verdicts: True",
        "a changed answer: 1 judge call (a miss)",
        "the first answer again under cache_salt('repeat=2'): 1 call",
        "cache: 3 hits, 5 misses, 5 entries",
        "judge_cache events: 3 hit, 5 miss",
    ],
    "judge_anthropic.py": [
        "retry with feedback: Keep the policy's conditions: unused, within seven days.",
        "answer: Yes, if the order is unused and you ask within seven days of delivery.",
        "judge calls: 2, tokens",
        "keeps_conditions=pass p=1.0 from answer",
        "rating 4/4: Correct and supported.",
    ],
    "reviewed_refund.py": [
        "scripted",
        "draft: Yes, you will get a full refund for order A-1001.",
        "review of draft 1: failed: Keep the policy's conditions",
        "revision 1 requested (text only, no tools offered)",
        "review of draft 2: passed",
        "published: Yes, order A-1001 can be refunded if it is unused and within seven days",
        "answer ran 1 time, lookup_policy ran 1 time",
        "the revision request offered tools: no",
    ],
    "eval_workflow.py": [
        "-> Mention 'closed'.",
        "attempts per answer: mean 1.10, max 2",
        "over 10 cases (9 passed, 1 failed, 0 raised: a function that raised counts as failed)",
        "rate limited: backed off once (0.0 s not slept: testing switch on)",
        "gate: lower bound 0.490 >= --min-pass-rate 0.400: pass",
        "gate: lower bound 0.313 is under --min-pass-rate 0.400: FAIL",
        "3 regressed, 1 improved; exact McNemar p = 0.6250",
        "as a criterion: Criterion(..., pass_at=0.850, fail_at=0.450)",
        "gate: Cohen's kappa 0.667 >= --min-kappa 0.600: pass",
        "every outcome as expected",
    ],
    "eval_batch.py": [
        "the batch, as polled: in_progress 5/10, finalizing 10/10, ended 10/10",
        "direct: 8/10 passed, judge cost $0.002890, answers $0.000144",
        "batched: 8/10 passed, judge cost $0.001445, answers $0.000144",
        "batched: 1 batch, 10 judge requests in it",
        "judge cost batched / direct: 0.50",
        "stopped with 2 batches submitted so far; resuming",
        "resumed run 3: 8/10 passed, batches submitted in all: 2",
        "every outcome as expected",
    ],
    "eval_python.py": [
        "run 1: 10 cases, 0 resumed",
        "main: pass rate 0.800 (8/10), 95% lower bound 0.490; gate held: True",
        "#5 failed: Can I pay by invoice? -> Say only what the context supports",
        "against run 1: 3 regressed, 1 improved, McNemar p = 0.6250",
        "branch gates: pass rate held False, passed False",
        "calibrate: 24 items, kappa 0.667, accuracy 0.833",
        "as a criterion: Criterion(..., pass_at=0.85, fail_at=0.45)",
        "with the comparison: True",
        "stored run 2: eval complete, target _workflow_app:answer_v2",
        "every outcome as expected",
    ],
    "tracing_example.py": [
        "caller got: Within 14 days.",
        "POST /ask\n  refinekit.retry_on_low_quality answer  {'refinekit.attempts': 2, "
        "'refinekit.judge.usage.input_tokens': 99}\n"
        "    refinekit.attempt  {'refinekit.attempt.number': 1}\n"
        "      * event gen_ai.evaluation.result fail\n"
        "      * event refinekit.retry\n"
        "      refinekit.evaluate relevancy\n"
        "        chat judge  {'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'judge', "
        "'gen_ai.usage.input_tokens': 42, 'gen_ai.usage.output_tokens': 1}\n"
        "    refinekit.attempt  {'refinekit.attempt.number': 2}\n"
        "      * event gen_ai.evaluation.result pass\n",
    ],
    "ray_extraction.py": [
        "failed after 2 correction(s): model reply did not parse as JSON after 2 corrections",
        "invoice 101: 120 EUR, 1 correction(s), 2 call(s)",
        "invoice 102: 75 EUR, 0 correction(s), 1 call(s)",
        "invoice 108: 18 EUR, 0 correction(s), 1 call(s)",
        "7/8 extracted; model calls 13, tokens 476, corrections 5",
    ],
    "stream_resume.py": [
        "form (attempt 1): {'number': 'INV-7'}",
        "form (attempt 2): {'number': 'INV-7', 'currency': 'EUR'}",
        "final (attempt 2): Invoice(number='INV-7', currency='EUR', total_cents=1250)",
        "the resumed request ends with: {'role': 'assistant', 'content': '{\"number\": "
        '"INV-7", "currency":\'}',
        "restate: Invoice(number='INV-7', currency='EUR', total_cents=1250)",
        'its correction says: These fields are right; keep them exactly as they are: "number": '
        '"INV-7".',
        "its schema pins the number: {'type': 'string', 'enum': ['INV-7']}",
    ],
    "stream_self_correct.py": [
        "form (attempt 1): {'number': 'INV-7'}",
        "reset (stream closed early: True): 1 validation error, first: currency: Input should "
        "be 'EUR' or 'USD'",
        "form (attempt 2): {'number': 'INV-7', 'currency': 'EUR', 'total_cents': 1250}",
        "final (attempt 2): Invoice(number='INV-7', currency='EUR', total_cents=1250)",
        "first stream: 2 of 4 chunks sent; closed: True",
        "the plain call returns the value: Invoice(number='INV-7', currency='EUR', "
        "total_cents=1250)",
        "early_abort=False: 4 of 4 chunks read; closed early: False; final: "
        "Invoice(number='INV-7', currency='EUR', total_cents=1250)",
        'the correction\'s template: {"number": "INV-7", "currency": "<EUR or USD>", '
        '"total_cents": 1250}',
    ],
    "stream_retry.py": [
        "buffered: ['Refunds', ' are', ' accepted', ' within', ' 30', ' days', "
        "' (policies/refunds.md).']",
        "provisional: ['Refunds', ' are', ' guaranteed,', '<reset: retry>', 'Refunds', ' are', "
        "' accepted',",
        "  first answer's stream closed early: True",
    ],
    "stream_reviewed.py": [
        "enforce, approved: ['Refunds', ' are', ' accepted', ' within', ' 30', ' days', "
        "' [policies/refunds.md].']",
        "enforce, rejected: nothing published (AnswerRejected)",
        "shadow, passed through: ['Refunds', ' are', ' always', ' accepted.']",
        "shadow's review, aside: passed=False: The answer failed the check 'cites_the_policy'.",
    ],
    "stream_guarded.py": [
        "safe answer: ['Refunds', ' are', ' accepted', ' within', ' 30', ' days.']",
        'unsafe answer: ["Sorry, I can\'t share that."]',
        "closed early: True",
    ],
    "grounded_values.py": [
        'correction template: {"number": "INV-7", "vendor": "Acme Audio Ltd", "total": 12.5, '
        '"currency": "<EUR or USD>"}',
        "caller got: Invoice(number='INV-7', vendor='Acme Audio Ltd', total=Decimal('12.5'), "
        "currency='EUR')",
        "  vendor = 'Acme Audio Ltd': 'ACME  Audio Ltd' at 19-34",
        "  total = '12.5': '12.50' at 61-66",
        "'\"Acme Audio Ltd\" asks 12.50 EUR.': passed",
        "'\"Globex Corp\" asks 12.50 EUR.': refused: Use only values from the context: "
        "'Globex Corp' is not in it.",
    ],
    "guarded_example.py": [
        "caller got: Refunds are accepted within 30 days (policies/refunds.md).",
        "blocked: output blocked by screen 'no_card_numbers'",
        "blocked: input blocked by screen 'no_card_numbers'; the function was not called",
        "model calls: 3, screens: 5",
    ],
}

# Whatever the developer's shell has set, an example under test never reaches a real endpoint.
_ENDPOINT_VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "REFINEKIT_JUDGE_MODEL",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENDPOINT_VARIABLES}
    return {**env, **extra}


# needs an extra to run: the module it imports
NEEDS = {"ray_extraction.py": "ray.data"}


def run(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=180 if path.name in NEEDS else 60,  # starting Ray takes a while
        cwd=ROOT,
        env=env if env is not None else clean_env(),
    )


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_is_checked() -> None:
    assert {p.name for p in EXAMPLES} == set(EXPECTED)


def test_there_is_one_example_per_judge() -> None:
    assert {p.stem for p in JUDGE_EXAMPLES} == {
        "judge_relevancy",
        "judge_fact_check",
        "judge_rating",
        "judge_criteria",
        "judge_pairwise",
        "judge_cascade",  # not a judge: levels of judges, the first sure enough decides
        "judge_cache",  # not a judge: the cache every judge can use
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    if path.name in NEEDS:
        pytest.importorskip(NEEDS[path.name], reason=f"{path.name} needs refinekit[ray]")
    result = run(path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    if path.name.startswith("judge_"):
        assert "scripted" in out.lower()
        assert "not a model's quality" in out
    else:
        assert "offline" in out.lower() or path.name == "hooks_example.py"
    for text in EXPECTED[path.name]:
        assert text in out


def test_the_app_at_import_example_passes_its_own_tests() -> None:
    """examples/testing_app_at_import: a pytest suite of its own, run as a user runs it, with
    no endpoint in the environment (the session-wide scripted server provides one)."""
    folder = ROOT / "examples" / "testing_app_at_import"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def main_on_endpoint(
    module: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    server_env: Callable[[str], dict[str, str]],
) -> tuple[str, str, list[RecordedRequest]]:
    """`module.main()` with `env` set, on a scripted server serving module.SCRIPTED under
    $REFINEKIT_JUDGE_MODEL (`server_env` its base URL's variables); what it printed (out,
    err) and the requests the server got."""
    with ScriptedOpenAI() as server:
        server.script(env["REFINEKIT_JUDGE_MODEL"], module.SCRIPTED)
        for name, value in (env | server_env(server.base_url)).items():
            monkeypatch.setenv(name, value)
        module.main()
        requests = server.requests
    captured = capsys.readouterr()
    return captured.out, captured.err, requests


@pytest.mark.parametrize("path", JUDGE_EXAMPLES, ids=lambda p: p.name)
def test_judge_example_runs_on_a_configured_endpoint(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL point it at an endpoint: here another
    scripted server, started by the test, under another model name and with a key."""
    monkeypatch.syspath_prepend(str(path.parent))  # as `python examples/x.py` has it
    module = load(path)
    env = {"REFINEKIT_JUDGE_MODEL": "my-judge", "OPENAI_API_KEY": "sk-example-test-key"}
    out, err, requests = main_on_endpoint(
        module, monkeypatch, capsys, env, lambda url: {"OPENAI_BASE_URL": url}
    )
    assert "real endpoint (OPENAI_BASE_URL), judge model 'my-judge'" in out
    assert "scripted" not in out.lower()
    assert "sk-example-test-key" not in out + err
    for text in EXPECTED[path.name]:
        assert text in out
    assert len(requests) == len(module.SCRIPTED)
    assert {r.model for r in requests} == {"my-judge"}
    assert all(r.headers["authorization"] == "Bearer ***" for r in requests)


def test_the_anthropic_judge_example_runs_on_a_configured_endpoint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ANTHROPIC_API_KEY and REFINEKIT_JUDGE_MODEL point it at Anthropic; ANTHROPIC_BASE_URL
    (which the client reads) at another scripted server here."""
    path = ROOT / "examples" / "judge_anthropic.py"
    module = load(path)
    env = {"ANTHROPIC_API_KEY": "sk-ant-example-test-key", "REFINEKIT_JUDGE_MODEL": "my-claude"}
    out, err, requests = main_on_endpoint(
        module,
        monkeypatch,
        capsys,
        env,
        lambda url: {"ANTHROPIC_BASE_URL": url.removesuffix("/v1")},
    )
    assert "real endpoint (ANTHROPIC_API_KEY), judge model 'my-claude'" in out
    assert "scripted" not in out.lower()
    assert "sk-ant-example-test-key" not in out + err
    for text in EXPECTED[path.name]:
        assert text in out
    assert len(requests) == len(module.SCRIPTED)
    assert {(r.path, r.model) for r in requests} == {("/v1/messages", "my-claude")}
    assert all("temperature" not in (r.body or {}) for r in requests)
