"""Every example runs, offline, and shows what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

EXPECTED = {
    "retry_example.py": ["attempt 2/3", "caller got: Refunds", "policies/refunds.md", "gave up"],
    "self_correct_example.py": [
        "caller got: Invoice(number='INV-7', total_cents=1250)",
        "untouched: 1 message",
        "corrections used in this job: 1",
    ],
    "hooks_example.py": ["caller got: Paris.", "retry 1"],
    "evaluators_demo.py": [
        "cites_source=fail",
        "stand_in_judge=skipped",
        "stand-in judge calls: 1",
    ],
}


def run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_every_example_is_checked() -> None:
    assert {p.name for p in EXAMPLES} >= set(EXPECTED)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    result = run(path)
    assert result.returncode == 0, result.stderr
    assert "offline" in result.stdout.lower() or path.name == "hooks_example.py"
    for text in EXPECTED.get(path.name, []):
        assert text in result.stdout


def test_demo_command_runs_both_decorators_offline() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "refinekit", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "OFFLINE" in out
    assert "stand-in model" in out
    assert "attempt 1/3 rejected" in out
    assert "caller got: Invoice(number='INV-7', total_cents=1250)" in out
    assert "correction 2/2" in out
    assert "[Automated format check" in out


def test_cli_without_command_prints_help() -> None:
    from refinekit._cli import main

    assert main([]) == 2
