"""Builders shared by the test modules."""

from __future__ import annotations

import asyncio
import csv
import functools
import importlib
import inspect
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from refinekit import EvaluationRequest, Verdict
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

Evaluate = Callable[[Any, EvaluationRequest], Awaitable[Verdict]]
"""Runs a judge on a request, sync or async by the test's kind (the `evaluate` fixture)."""


# Schemas of the self-correction tests (no docstrings: a docstring is the schema's description).


class Invoice(BaseModel):
    number: str
    total_cents: int


class Item(BaseModel):
    name: str
    price: int


def completion(text: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> ChatCompletion:
    """A `ChatCompletion` with one text choice and the given token usage."""
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def as_kind(kind: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    """`impl` itself, or an `async def` with the same signature calling it (by `kind`)."""
    if kind == "sync":
        return impl

    @functools.wraps(impl)  # keeps impl's signature: `question` and `feedback` are seen
    async def impl_async(*args: Any, **kwargs: Any) -> Any:
        return impl(*args, **kwargs)

    return impl_async


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a decorated function from a sync test: an async one runs on an event loop of its own."""
    result = fn(*args, **kwargs)
    return asyncio.run(result) if inspect.iscoroutine(result) else result


async def acall(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a decorated function from an async test, awaiting it when it is async."""
    result = fn(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def close_clients(clients: Iterable[Any]) -> None:
    """Close SDK clients (`openai`'s, `anthropic`'s), sync and async alike."""
    for client in clients:
        closed = client.close()
        if inspect.isawaitable(closed):
            await closed


def passes_on(n: int) -> Callable[[EvaluationRequest], Verdict]:
    """An evaluator rejecting attempts before `n` with feedback "fix #<attempt>"."""

    def evaluate(request: EvaluationRequest) -> Verdict:
        attempt = request.metadata["attempt"]
        return Verdict(passed=attempt >= n, feedback="" if attempt >= n else f"fix #{attempt}")

    return evaluate


reject_all = passes_on(10**6)


def answering(mode: str, answer: str = "an answer") -> tuple[list[str], Callable[..., Any]]:
    """A function to decorate (`def` or `async def` by mode) and the questions it was asked."""
    calls: list[str] = []
    if mode == "sync":

        def respond(question: str) -> str:
            calls.append(question)
            return answer

        return calls, respond

    async def arespond(question: str) -> str:
        calls.append(question)
        return answer

    return calls, arespond


# --- the `refinekit eval` / `calibrate` / `runs` tests: a folder with data files and modules ---


FAKE_LLAMA = Path(__file__).resolve().with_name("fake_llama_server.py")
"""The stand-in llama.cpp server the local model tests start."""


def fake_llama_command(port: int, model: str, *options: str) -> list[str]:
    """The command starting the stand-in llama.cpp server on `port`, serving `model`."""
    return [sys.executable, str(FAKE_LLAMA), "--port", str(port), "--model_alias", model, *options]


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """A CSV file at `path` with a header row made of the first row's keys; returns `path`."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


class Workspace:
    """A folder standing for a user's project: data files and importable modules.

    Modules get names unique in the process, so a module written by one test never answers
    for another; `forget_modules` drops them from `sys.modules` after the test.
    """

    _made = itertools.count(1)

    def __init__(self, path: Path) -> None:
        self.path = path
        self.modules: list[str] = []

    def module(self, source: str, stem: str = "mod") -> str:
        """Write a module (dedented) into the folder; returns its import name."""
        name = f"mod_{stem}_{os.getpid()}_{next(self._made)}"
        (self.path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()
        self.modules.append(name)
        return name

    def csv(self, name: str, rows: list[dict[str, Any]]) -> Path:
        """A CSV file with a header row made of the first row's keys."""
        return write_csv(self.path / name, rows)

    def jsonl(self, name: str, rows: list[dict[str, Any]]) -> Path:
        """A JSONL file, one object a line."""
        path = self.path / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        return path

    def forget_modules(self) -> None:
        for name in self.modules:
            sys.modules.pop(name, None)


def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """The body of a `ws` fixture: tmp_path importable and current, no $REFINEKIT_DB."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REFINEKIT_DB", raising=False)
    ws = Workspace(tmp_path)
    yield ws
    ws.forget_modules()


def _default_sigint() -> None:  # a shell may start the test run with SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def refinekit_process(folder: Path, *args: str | Path, **env: str) -> subprocess.Popen[str]:
    """`python -m refinekit ARGS` started in `folder`, its output piped as text.

    The process has this one's environment without $REFINEKIT_DB, `folder` first on its
    PYTHONPATH (the modules written there, then the refinekit under test), `env` added, and
    SIGINT's default action.
    """
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    environ = {k: v for k, v in os.environ.items() if k != "REFINEKIT_DB"}
    environ |= {"PYTHONPATH": path, **env}
    return subprocess.Popen(
        [sys.executable, "-m", "refinekit", *map(str, args)],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def judge_replies(
    probabilities: Mapping[str, float | Sequence[float | Reply]],
) -> Callable[[RecordedRequest], Reply]:
    """A scripted reply for criteria judge requests, by the answer the request carries.

    Each answer maps to P(yes) (the same each time it is asked) or to a list of them, one per
    time it is asked (a `Reply` in the list is served as it is, e.g. `Reply.error(503)`). A
    probability p is sent as the reply "Yes" (p >= 0.5) or "No" with the top logprobs
    {"Yes": p, "No": 1 - p}, so the judge reads p back from real logprobs.
    """
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def reply(request: RecordedRequest) -> Reply:
        text = str((request.body or {})["messages"][-1]["content"])
        found = re.search(r"<answer>\n(.*?)\n</answer>", text, re.DOTALL)
        assert found is not None, text
        answer = found.group(1)
        plan = probabilities[answer]
        with lock:
            n = asked.get(answer, 0)
            asked[answer] = n + 1
        p = plan[n] if isinstance(plan, Sequence) else plan
        if isinstance(p, Reply):
            return p
        return yes_no(p)

    return reply


def yes_no(p: float) -> Reply:
    """A yes/no judge reply whose first token has P(yes) = p (0 < p < 1)."""
    top = {"Yes": p, "No": round(1.0 - p, 9)}
    return Reply.text("Yes" if p >= 0.5 else "No", top)


def text_beside_tool_call(
    pieces: Sequence[str], name: str = "lookup", arguments: str = '{"order": "A-1"}'
) -> Reply:
    """A streamed Chat Completions reply holding text (`pieces`, in order) and then one tool call.

    What a model answering "Let me look that up" and calling a tool in one turn streams; a
    `Reply.raw` body of server-sent events, so it must be asked for with `stream=True`.
    """

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0}
        return "data: " + json.dumps({**event, "model": "m", "choices": [choice]}) + "\n\n"

    function = {"name": name, "arguments": ""}
    call = {"index": 0, "id": "call_1", "type": "function", "function": function}
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({"tool_calls": [call]}))
    events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}))
    events.append(chunk({}, "tool_calls"))
    body = "".join(events) + "data: [DONE]\n\n"
    return Reply.raw(body, headers={"Content-Type": "text/event-stream"})


@dataclass
class Result:
    """What a `refinekit` command returned and printed."""

    code: int
    out: str
    err: str


Cli = Callable[..., Result]


def cli_runner(capsys: pytest.CaptureFixture[str]) -> Cli:
    """`refinekit ARGS` in process: the exit status (argparse's too) and what it printed."""
    from refinekit.cli import main

    def run(*args: str | Path) -> Result:
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def answers(by_question: Mapping[str, str]) -> Callable[[RecordedRequest], str]:
    """A scripted reply of the answering model: the answer to the question it was sent."""

    def reply(request: RecordedRequest) -> str:
        return by_question[str((request.body or {})["messages"][-1]["content"])]

    return reply


def asked(server: ScriptedOpenAI, model: str = "answer") -> list[str]:
    """The questions a model was sent (the last message of each request), in order."""
    return [str((r.body or {})["messages"][-1]["content"]) for r in server.requests_for(model)]


def table(out: str) -> dict[int, str]:
    """The table `refinekit eval` printed: each case's number -> its outcome mark."""
    return {int(m[1]): m[2] for m in re.finditer(r"^ +(\d+)  (\S+) ", out, re.MULTILINE)}


# --- modules the eval tests import as targets and judges ---------------------------------

# `ask` (a def) and `aask` (an async def): the "answer" model at $RK_BASE_URL's reply to the
# question they are given. The answer functions the tests write call them.
ASKING = """
import os
import openai

def ask(question):
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        reply = client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )
    return reply.choices[0].message.content

async def aask(question):
    client = openai.AsyncOpenAI(
        base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0
    )
    async with client:
        reply = await client.chat.completions.create(
            model="answer", messages=[{"role": "user", "content": question}]
        )
    return reply.choices[0].message.content
"""

# A def asking the "answer" model at $RK_BASE_URL the question it is given.
SYNC_ANSWER = (
    ASKING
    + """
def answer(question):
    return ask(question)
"""
)

# The top of a judge module: `client`, an `openai.OpenAI` client of the server at $RK_BASE_URL.
JUDGE_CLIENT = """
import os
import openai
from refinekit import judges
from refinekit.judges import Criterion, JudgeModel

# The judge makes an async counterpart of this client for the run's event loop, and nothing
# closes it when the loop ends; "Connection: close" leaves no socket open behind it.
client = openai.OpenAI(
    base_url=os.environ["RK_BASE_URL"],
    api_key="sk-test",
    max_retries=0,
    default_headers={"Connection": "close"},
)
"""

# A criteria judge on the "judge" model (or $RK_JUDGE_MODEL) at $RK_BASE_URL.
CRITERIA_JUDGE = (
    JUDGE_CLIENT
    + """
judge = judges.criteria(
    JudgeModel(client, os.environ.get("RK_JUDGE_MODEL", "judge")),
    [Criterion("correct", "Is the answer right?", when_false="Give the right answer.")],
)
"""
)


def schema_of(made: dict[str, Any], dialect: str) -> dict[str, Any]:
    """The JSON schema inside a dialect's keyword arguments."""
    if dialect == "openai":
        return dict(made["response_format"]["json_schema"]["schema"])
    if dialect == "llama.cpp":
        return dict(made["response_format"]["schema"])
    if dialect == "ollama":
        return dict(made["format"])
    return dict(made["extra_body"]["guided_json"])
