"""`refinekit serve`: the scripted server from a script file, in a real process, until stopped."""

from __future__ import annotations

import os
import queue
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from docs_blocks import ROOT, blocks

from refinekit.cli import main


def documented_script() -> str:
    """The `replies.py` of docs/scripted_server.md: what that page says `serve` serves."""
    page = ROOT / "docs" / "scripted_server.md"
    (found,) = [b for b in blocks(page) if b.file == "replies.py"]
    return found.code


SCRIPT = documented_script()

READY = re.compile(
    r"refinekit serve: replies\.py on (http://127\.0\.0\.1:\d+/v1) \(Ctrl-C stops it\)\n"
)


class Served:
    """A `refinekit serve` process and the lines it printed, read as they come."""

    def __init__(self, folder: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "refinekit", "serve", *args],
            cwd=folder,
            env=env | {"PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end

    def line(self) -> str:
        """The next line printed (bounded: a process that never prints fails the test)."""
        return self.lines.get(timeout=60)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "replies.py").write_text(SCRIPT, encoding="utf-8")
    process = Served(tmp_path, "replies.py", "--port", "0")
    yield process
    if process.proc.poll() is None:  # the test failed before stopping it
        process.proc.kill()
    process.proc.wait(timeout=60)
    for stream in (process.proc.stdout, process.proc.stderr):
        assert stream is not None
        stream.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_answers_the_openai_client_from_a_script_file_until_stopped(
    served: Served, stop: signal.Signals
) -> None:
    ready = READY.fullmatch(served.line())
    assert ready is not None
    base_url = ready.group(1)
    export = served.line()
    assert export == f"export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=scripted-key\n"

    # the reader's own client, configured from the printed line as a shell would
    with openai.OpenAI(base_url=base_url, api_key="scripted-key", max_retries=0) as client:
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=[])
        assert reply.choices[0].message.content == "Paris."
        with pytest.raises(openai.RateLimitError, match="slow down"):
            client.chat.completions.create(model="gpt-4.1-mini", messages=[])
        for word in ("one", "two"):
            echoed = client.chat.completions.create(
                model="echo", messages=[{"role": "user", "content": word}]
            )
            assert echoed.choices[0].message.content == f"you said: {word}"
        with pytest.raises(openai.NotFoundError, match="no script for model 'other'"):
            client.chat.completions.create(model="other", messages=[])

    served.proc.send_signal(stop)
    assert served.proc.wait(timeout=60) == 0
    assert served.line() == "refinekit serve: stopped\n"
    assert served.line() == ""
    assert served.proc.stderr is not None
    assert served.proc.stderr.read() == ""  # no traceback
    with pytest.raises(ConnectionRefusedError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", int(base_url[17:-3]))).close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and select on a pipe")
def test_serve_whose_reader_went_away_serves_on(tmp_path: Path) -> None:
    # `refinekit serve replies.py | head -1`: the rest of what it prints goes nowhere
    (tmp_path / "replies.py").write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    with subprocess.Popen(
        [sys.executable, "-m", "refinekit", "serve", "replies.py", "--port", "0"],
        cwd=tmp_path,
        env=env | {"PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                assert selector.select(timeout=60), "refinekit serve printed nothing in 60 s"
            first = proc.stdout.readline()  # printed and flushed whole: no partial line
            proc.stdout.close()  # as head does after its line
            ready = READY.fullmatch(first.decode())
            assert ready is not None, first
            port = int(ready.group(1).rsplit(":", 1)[1].removesuffix("/v1"))
            with socket.create_connection(("127.0.0.1", port)):
                pass  # still serving
            proc.send_signal(signal.SIGTERM)
            err = proc.stderr.read()
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:  # a failed assertion above: no process left behind
                proc.kill()

    assert err == b""  # no BrokenPipeError, no traceback
    assert code == 0


def serve(*args: str) -> tuple[int, str, str]:
    """`refinekit serve ...` in process: for the errors found before it starts serving."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(["serve", *args])
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.py").mkdir()
    (tmp_path / "noscript.py").write_text("REPLIES = ['a']\n")
    (tmp_path / "notfunction.py").write_text("script = 42\n")
    (tmp_path / "raises.py").write_text(
        "def script(server):\n    server.script('m', ['a'], times=0)\n"
    )
    (tmp_path / "named.py").write_text(SCRIPT.replace("def script", "def other"))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "file not found: missing.py"),
        (["adir"], "adir is a folder; give the script's .py file"),
        (["adir.py"], "adir.py is a folder; give the script's .py file"),
        (["replies.json"], "'replies.json': give a Python file that defines script(server)"),
        (["replies"], "'replies': give a Python file that defines script(server)"),
        (["named.py:"], "'named.py:': give a Python file that defines script(server)"),
        (["noscript.py"], "noscript.py defines no function script(server); write one"),
        (["notfunction.py"], "script is a int, not a function taking the server"),
        (["named.py"], "named.py defines no function script(server)"),
        (["named.py:missing"], "named.py defines no function missing(server)"),
        (["raises.py"], "the script 'raises.py' raised ValueError: times is a whole number"),
        (["named.py:other", "--port", "65536"], "a port from 0 to 65535"),
        (["named.py:other", "--host", " "], "host is an address to listen on, such as"),
    ],
)
def test_serve_usage_errors_exit_2_before_serving(
    folder: Path, args: list[str], message: str
) -> None:
    code, out, err = serve(*args)

    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert out == ""


def test_serve_on_a_port_that_is_taken_says_so(folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = serve("named.py:other", "--port", str(port))

    assert code == 2
    assert f"refinekit serve: error: cannot listen on 127.0.0.1:{port} (" in err
    assert err.endswith("); give another --port\n")
    assert out == ""


def test_serve_listens_on_127_0_0_1_port_8765_by_default() -> None:
    code, out, _ = serve("--help")
    out = " ".join(out.split())

    assert code == 0
    assert "(default 127.0.0.1: this machine only)" in out
    assert "(default 8765)" in out


def test_the_tutorial_shows_what_serve_prints() -> None:
    # the page's block is shown, not run (it serves until Ctrl-C): its lines are the ones
    # the test above reads from a real process, at the default port
    page = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    base_url = "http://127.0.0.1:8765/v1"
    shown = (
        "```console\n$ refinekit serve replies.py\n"
        f"refinekit serve: replies.py on {base_url} (Ctrl-C stops it)\n"
        f"export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=scripted-key\n```\n"
    )
    assert shown in page
    assert READY.fullmatch(shown.splitlines()[2] + "\n")
