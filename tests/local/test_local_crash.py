"""A local model server that dies: `LocalModelError` with how it ended, its log and the fix.

No extra needed: `LocalModel` runs a stand-in server (tests/fake_llama_server.py) that answers
like llama.cpp's and kills itself with a signal on a chosen completion, as a llama-cpp-python
built for another CPU's instructions does (SIGSEGV in libggml-cpu.so on an Intel Xeon with
AVX-512/AMX).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import fake_llama_command

import refinekit.local
from refinekit.cli import main
from refinekit.local import LocalModel, LocalModelError

REBUILD = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir --no-deps'
LOG_LINE = "ggml_vec_dot: crashing now (stand-in)"
HI = [{"role": "user", "content": "Hi"}]


class StandIn(LocalModel):
    """A `LocalModel` whose server is the stand-in, crashing on POST number `crash_on`."""

    def __init__(self, pid_file: Path, crash_on: int, signal: str = "SIGSEGV") -> None:
        super().__init__(startup_timeout=60)
        self.pid_file = pid_file
        self.options = ["--crash-on", str(crash_on), "--signal", signal]

    def _server_command(self, port: int) -> list[str]:
        return fake_llama_command(port, self.model, "--pid-file", str(self.pid_file), *self.options)

    def pid(self) -> int:
        return int(self.pid_file.read_text())


def gone(pid: int) -> bool:
    """Whether the process is gone, reaped too (a zombie still has its pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_that_crashes_on_its_first_completion_fails_start(tmp_path: Path) -> None:
    model = StandIn(tmp_path / "pid", crash_on=1)  # /v1/models answers; the first POST kills
    with pytest.raises(LocalModelError) as caught:
        model.start()
    message = str(caught.value)
    assert "died from signal SIGSEGV (Segmentation fault) on a one-token test completion" in message
    assert LOG_LINE in message  # the tail of the server's own log
    assert REBUILD in message  # and the command that fixes it
    assert not model.running
    assert gone(model.pid())  # stopped and reaped


def test_a_server_that_dies_in_the_block_is_reported_on_exit(tmp_path: Path) -> None:
    model = StandIn(tmp_path / "pid", crash_on=2)  # the test completion passes, then a crash

    def use() -> None:
        with model, model.client() as client:
            assert model.running
            client.chat.completions.create(model=model.model, messages=HI)  # type: ignore[arg-type]

    with pytest.raises(LocalModelError) as caught:
        use()
    message = str(caught.value)
    assert "died from signal SIGSEGV (Segmentation fault) in the block" in message
    assert LOG_LINE in message
    assert REBUILD in message
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)  # what the client saw
    assert gone(model.pid())


def test_check_tells_a_dead_server_from_a_running_one(tmp_path: Path) -> None:
    model = StandIn(tmp_path / "pid", crash_on=3, signal="SIGKILL")
    with model, model.client() as client:
        model.check()  # running: nothing to say
        reply = client.chat.completions.create(model=model.model, messages=HI)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "Hello"
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model=model.model, messages=HI)  # type: ignore[arg-type]
        with pytest.raises(
            LocalModelError, match=r"died from signal SIGKILL \(Killed\) while running"
        ) as e:
            model.check(wait=30)
        assert REBUILD not in str(e.value)  # killed from outside: no rebuild cures that
        # the block itself ends normally: the caller handled the error, exit just stops
    assert gone(model.pid())
    with pytest.raises(RuntimeError, match="not running"):
        model.check()


def test_an_error_in_the_block_while_the_server_runs_is_left_alone(tmp_path: Path) -> None:
    model = StandIn(tmp_path / "pid", crash_on=0)
    with pytest.raises(ValueError, match="mine"), model:
        raise ValueError("mine")
    assert gone(model.pid())


def test_demo_local_reports_the_dead_server_not_a_connection_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stand_in(*args: Any, **kwargs: Any) -> StandIn:
        return StandIn(tmp_path / "pid", crash_on=2)  # the demo's first model call crashes it

    monkeypatch.setattr(refinekit.local, "LocalModel", stand_in)
    assert main(["demo", "--local"]) == 2
    out, err = capsys.readouterr()
    assert "refinekit demo: error: the llama.cpp server died from signal SIGSEGV" in err
    assert LOG_LINE in err
    assert REBUILD in err
    assert "the local model's server died" in out
    assert "2. Invoice extraction" not in out  # no second scenario against a dead server
    assert gone(int((tmp_path / "pid").read_text()))
