"""`refinekit serve`: the scripted OpenAI-compatible server, from a script file, until stopped.

A script is a Python function that takes the server and scripts it, exactly as a test does
(`server.script(model, replies)`), so one script serves a test and a terminal alike, and every
reply a test can script (texts, `Reply` values, replies built from the request) is available.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

from .._core.errors import UsageProblem
from .._core.objects import load_object
from .._core.redact import redact
from ..testing import ScriptedOpenAI
from ._pipe import PipeSafe
from ._text import clean

__all__ = ["load_script", "serve_command"]

KEY = "scripted-key"  # what the server's clients send; it checks no key


class _Stopped(Exception):
    """SIGTERM arrived: stop as Ctrl-C does."""


def load_script(spec: str) -> Callable[[ScriptedOpenAI], Any]:
    """The function a `serve` argument names: `FILE.py` (its `script`), or `FILE.py:NAME`.

    The module form, `package.module:name`, works too, as for `eval --target`.

    Raises:
        UsageProblem: No such file, a folder, a module that cannot be imported, or a name
            that is not a function.
    """
    if spec.endswith(".py") or ":" not in spec:  # C:\\...\\replies.py: its colon is no NAME
        path, name = spec, "script"
    else:
        path, _, name = spec.rpartition(":")
    if path and Path(path).is_dir():
        raise UsageProblem(f"{path} is a folder; give the script's .py file")
    if not path or not name or (":" not in spec and not spec.endswith(".py")):
        raise UsageProblem(
            f"{spec!r}: give a Python file that defines script(server) (replies.py), or "
            "FILE.py:NAME for a function of another name"
        )
    if (path.endswith(".py") or os.sep in path or "/" in path) and not Path(path).is_file():
        raise UsageProblem(f"file not found: {path}")
    try:
        function = load_object(f"{path}:{name}", "the script")
    except UsageProblem as e:
        if f"has no {name!r}" not in str(e):
            raise
        raise UsageProblem(
            f"{path} defines no function {name}(server); write one that scripts the server "
            '(def script(server): server.script("gpt-4.1-mini", ["a reply"]))'
        ) from None
    if not callable(function):
        raise UsageProblem(
            f"the script {spec!r}: {name} is a {type(function).__name__}, not a function "
            "taking the server"
        )
    return function  # type: ignore[no-any-return]


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM raises `_Stopped` in the main thread while the server runs (then as before)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit serve SCRIPT`: serve the script until Ctrl-C or SIGTERM; 0 when stopped."""
    shown = PipeSafe(out or sys.stdout)  # its reader gone (| head -1), it serves on
    err = err or sys.stderr

    def error(message: str) -> int:
        print(f"refinekit serve: error: {clean(redact(message), 2000)}", file=err)
        return 2

    try:
        server = ScriptedOpenAI(host=args.host, port=args.port)
    except ValueError as e:
        return error(str(e))
    try:
        script = load_script(args.script)
        script(server)
    except UsageProblem as e:
        return error(str(e))
    except KeyboardInterrupt:
        print("refinekit serve: interrupted", file=err)
        return 130
    except Exception as e:  # the script's own mistake: a bad reply, a wrong argument
        return error(f"the script {args.script!r} raised {type(e).__name__}: {e}")
    try:
        server.__enter__()
    except OSError as e:
        where = f"{args.host}:{args.port}"
        return error(f"cannot listen on {where} ({e.strerror or e}); give another --port")
    try:
        with _sigterm_stops():
            print(
                f"refinekit serve: {args.script} on {server.base_url} (Ctrl-C stops it)",
                file=shown,
            )
            print(f"export OPENAI_BASE_URL={server.base_url} OPENAI_API_KEY={KEY}", file=shown)
            shown.flush()
            forever = threading.Event()
            while not forever.wait(1.0):  # until a signal raises (a wait Windows can break)
                pass
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        server.__exit__(None, None, None)
    print("refinekit serve: stopped", file=shown)
    return 0
