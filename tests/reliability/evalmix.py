"""`refinekit eval` under seeded faults: golden files, targets and judges on the scripted server.

Each case of a golden file has its own answering model name, and the run's judge reads the
case's question from its prompt, so the server's recorded requests say what each case was
served. A small simulator of the documented semantics (rate-limited calls tried again up to 6
times; a function that raised is `raised`; a judge that could not judge leaves the case
`unavailable`; a failed row check fails the case whatever the judge said; the majority of
`--repeat` verdicts decides) predicts each case's outcome, and the run store is checked
against it: every row stored exactly once, with a predicted outcome, within its call budget.
Nothing any output holds (stdout, stderr, the store's files, the HTML report) may contain a
planted secret or an answer's markup unescaped.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from faultmix import (
    CONTEXT,
    FAULT_KINDS,
    HOSTILE_TEXTS,
    Mix,
    Secrets,
    Step,
    _step,
)

from refinekit.eval._store._sqlite import CaseRecord, RunInfo, SQLiteStore
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI

TRIES = 6  # refinekit eval tries a rate-limited call this many times in all
MUST_MENTION = "30 days"
RAISE = "RAISE: the target raises on this reply"
OUTCOMES = frozenset({"passed", "failed", "raised", "unavailable", "inconclusive"})

TARGET = """
import os

import openai

import refinekit.testing

if os.environ.get("RK_INSTANT_BACKOFF"):  # a child process: the eval's backoff is not slept
    refinekit.testing.set_testing()

URL = {url!r}
KEY = {key!r}
UPSTREAM = {upstream!r}
BEARER = {bearer!r}
_client = openai.OpenAI(base_url=URL, api_key=KEY, max_retries=0, timeout=10)


def _checked(reply):
    text = reply.choices[0].message.content if reply.choices else ""
    if (text or "").startswith("RAISE"):
        raise RuntimeError(
            f"backend {{UPSTREAM}} refused the call (Authorization: Bearer {{BEARER}})"
        )
    return reply


def answer(question, model):
    return _checked(
        _client.chat.completions.create(
            model=model, messages=[{{"role": "user", "content": question}}]
        )
    )


async def aanswer(question, model):
    async with openai.AsyncOpenAI(base_url=URL, api_key=KEY, max_retries=0, timeout=10) as c:
        reply = await c.chat.completions.create(
            model=model, messages=[{{"role": "user", "content": question}}]
        )
    return _checked(reply)
"""

JUDGE = """
import httpx2
import openai

from refinekit import judges

# An async client made here outlives the event loop of an in-process eval: with no pooled
# connection, none is left to that closed loop (a test's concern; a CLI process just exits).
options = {{"http_client": openai.DefaultAsyncHttpxClient(
    limits=httpx2.Limits(max_keepalive_connections=0)
)}} if {client!r} == "AsyncOpenAI" else {{}}
client = openai.{client}(base_url={url!r}, api_key={key!r}, max_retries=0, timeout=10, **options)
judge = judges.criteria(
    judges.JudgeModel(client, {model!r}),
    [judges.Criterion("grounded", "Is the answer supported by the context?")],
)
"""


@dataclass
class EvalCase:
    """One row: its answering model's steps and its judge steps (TRIES per repeat)."""

    position: int
    question: str
    must_mention: str
    model: str
    answers: list[Step]
    verdicts: list[Step]


@dataclass
class Invocation:
    """One `refinekit eval` command: its exit status and what it printed."""

    code: int
    out: str
    err: str


@dataclass
class EvalResult:
    """One eval run (one or more invocations of the same command), checked."""

    name: str
    mode: str
    cases: int
    served: list[str]
    outcomes: Counter[str]
    exits: list[int]
    violations: list[str] = field(default_factory=list)


def predict_case(case: EvalCase, judged: bool, repeat: int) -> tuple[set[str], int, int]:
    """The outcomes a case may have, and its answer and judge call budgets.

    Returns:
        (possible outcomes, answer calls it makes at most, judge calls it makes at most).
    """
    tried = 0
    text: str | None = None
    for step in case.answers[:TRIES]:
        tried += 1
        if step.kind == "http_429" and tried < TRIES:
            continue
        if "raise" in step.result:
            return {"raised"}, TRIES, 0
        text = str(step.value)
        break
    if text is None or text.startswith("RAISE"):
        return {"raised"}, TRIES, 0
    check_failed = bool(case.must_mention) and case.must_mention.casefold() not in text.casefold()
    if not judged:
        if not case.must_mention:
            return {"inconclusive"}, TRIES, 0
        return {"failed" if check_failed else "passed"}, TRIES, 0
    verdicts: list[set[str]] = []
    steps = iter(case.verdicts)
    for _ in range(repeat):
        possible: set[str] = set()
        for t in range(1, TRIES + 1):
            step = next(steps)
            if step.kind == "http_429" and t < TRIES:
                continue
            for r in step.result:
                possible.add({"pass": "pass", "fail": "fail"}.get(r, "unjudged"))
            break
        verdicts.append(possible)
    outcomes = set()
    for picked in itertools.product(*verdicts):
        judged_ = [v for v in picked if v != "unjudged"]
        passes = judged_.count("pass")
        if check_failed:
            outcomes.add("failed")
        elif not judged_:
            outcomes.add("unavailable")
        elif passes * 2 > len(judged_):
            outcomes.add("passed")
        elif passes * 2 < len(judged_):
            outcomes.add("failed")
        else:
            outcomes.add("inconclusive")
    return outcomes, TRIES, TRIES * repeat


def expected_exit(outcomes: Sequence[str]) -> int:
    """`refinekit eval`'s exit status without gates, from its cases' outcomes.

    4 when no answer was judged (every case raised, here never a refused answer, or was
    unavailable: the setup failed); 1 when no case passed or failed (nothing counted);
    else 0.
    """
    if not any(o in ("passed", "failed", "inconclusive") for o in outcomes):
        return 4
    return 0 if any(o in ("passed", "failed", "raised") for o in outcomes) else 1


class EvalRun:
    """A golden file, a target and a judge for one `refinekit eval` run, and its check."""

    def __init__(
        self,
        mix: Mix,
        number: int | str,
        folder: Path,
        *,
        cases: int,
        mode: str,
        judged: bool,
        repeat: int = 1,
        fmt: str = "csv",
        concurrency: int = 4,
    ) -> None:
        self.mix = mix
        self.name = f"eval_{mode}_{mix.seed}_{number}"
        self.folder = folder
        self.mode = mode
        self.judged = judged
        self.repeat = repeat
        self.fmt = fmt
        self.concurrency = concurrency
        self.module = f"rkfault_{self.name}_{os.getpid()}"
        self.db = folder / f"{self.name}.db"
        self.report = folder / f"{self.name}.html"
        self.judge_model = f"{self.name}-judge"
        self.cases: list[EvalCase] = []
        rate = mix.fault_rate()
        self.judge_key = mix.pick(mix.secrets.judge_keys)  # the run's judge client's key
        for i in range(1, cases + 1):
            must = mix.pick([MUST_MENTION, MUST_MENTION, MUST_MENTION, ""])
            answers = [self._answer_step(rate) for _ in range(TRIES)]
            verdicts = [
                mix.verdict("criteria", rate, key=self.judge_key, hangs=False, misconfigured=False)
                for _ in range(TRIES * repeat)
            ]
            hostile = mix.pick([t for t in HOSTILE_TEXTS if "\x00" not in t])
            question = f"Q{i} of {self.name}: can I get a refund? {hostile}"
            self.cases.append(EvalCase(i, question, must, f"{self.name}-{i}", answers, verdicts))
        self.invocations: list[Invocation] = []
        self.asked: dict[str, int] = {}
        self._lock = threading.Lock()

    def _answer_step(self, rate: float) -> Step:
        if self.mix.rng.random() < 0.06:
            return _step("raises_with_secret", RAISE, "text", value=RAISE)
        return self.mix.text(rate, hangs=False, misconfigured=False)

    # setting up

    def write(self, server: ScriptedOpenAI, *, kill_at: int | None = None) -> None:
        """The golden file, the target and judge modules, and the server's scripts.

        With `kill_at`, the answering model's request number `kill_at` (over all cases) is
        held open and `self.arrived` set when it comes: the moment to kill the eval.
        """
        s = self.mix.secrets
        url = s.url(server.base_url)
        upstream = f"http://{s.url_user}:{s.url_password}@db.internal:5432/orders"
        source = TARGET.format(url=url, key=s.answer_key, upstream=upstream, bearer=s.bearer)
        client = self.mix.pick(["OpenAI", "AsyncOpenAI"])
        source += JUDGE.format(client=client, url=url, key=self.judge_key, model=self.judge_model)
        (self.folder / f"{self.module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        rows = [
            {
                "question": c.question,
                "must_mention": c.must_mention,
                "context": CONTEXT,
                "model": c.model,
            }
            for c in self.cases
        ]
        self.golden = self.folder / f"{self.name}.{self.fmt}"
        if self.fmt == "jsonl":
            self.golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        else:
            import csv

            with self.golden.open("w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        self.arrived = threading.Event()
        count = itertools.count(1)
        for case in self.cases:
            replies = [s.reply for s in case.answers]
            if kill_at is not None:
                replies = [self._tripwire(r, count, kill_at, self.arrived) for r in replies]
            server.script(case.model, replies)
        if self.judged:
            server.script(
                self.judge_model, [self._route] * sum(len(c.verdicts) for c in self.cases)
            )

    def _route(self, request: RecordedRequest) -> Reply | str:
        prompt = str((request.body or {})["messages"][-1]["content"])
        found = re.search(rf"<question>\nQ(\d+) of {self.name}:", prompt)
        if found is None:
            return Reply.error(500, f"no case for this judge request: {prompt[:200]!r}")
        case = self.cases[int(found.group(1)) - 1]
        with self._lock:
            n = self.asked.get(case.model, 0)
            self.asked[case.model] = n + 1
        if n < len(case.verdicts):
            return case.verdicts[n].reply
        return Reply.error(500, "over the case's judge budget")

    def command(self) -> list[str]:
        function = "answer" if self.mode == "sync" else "aanswer"
        args = [
            "eval",
            str(self.golden),
            "--target",
            f"{self.module}:{function}",
            "--db",
            str(self.db),
            "--concurrency",
            str(self.concurrency),
            "--report",
            str(self.report),
        ]
        if self.judged:
            args += ["--judge", f"{self.module}:judge", "--repeat", str(self.repeat)]
        return args

    # running

    @contextlib.contextmanager
    def importable(self) -> Iterator[None]:
        sys.path.insert(0, str(self.folder))
        try:
            yield
        finally:
            sys.path.remove(str(self.folder))
            module = sys.modules.pop(self.module, None)
            # The module's sync clients keep their pooled connections open; dropped unclosed,
            # they would be closed by the garbage collector whenever it runs (a ResourceWarning,
            # an error under this suite's filterwarnings, in whatever test is running then).
            clients = vars(module).values() if module is not None else ()
            for client in [c for c in clients if isinstance(c, openai.OpenAI)]:
                client.close()

    def run_in_process(self) -> Invocation:
        """`refinekit eval ...` through the CLI's main, here."""
        from refinekit.cli import main

        out, err = io.StringIO(), io.StringIO()
        with self.importable(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(self.command())
            except SystemExit as e:
                code = int(e.code or 0)
        invocation = Invocation(code, out.getvalue(), err.getvalue())
        self.invocations.append(invocation)
        return invocation

    def run_killed(self) -> Invocation:
        """`python -m refinekit eval ...` in a child, SIGKILLed once `self.arrived` is set."""
        env = dict(os.environ, PYTHONPATH=str(self.folder), RK_INSTANT_BACKOFF="1")
        env.pop("REFINEKIT_DB", None)
        child = subprocess.Popen(
            [sys.executable, "-m", "refinekit", *self.command()],
            cwd=self.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            if not self.arrived.wait(60):
                child.kill()
                out, err = child.communicate()
                raise AssertionError(
                    f"the eval never reached the request to kill at:\n{out}\n{err}"
                )
            child.send_signal(signal.SIGKILL)
            out, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        invocation = Invocation(child.returncode, out, err)
        self.invocations.append(invocation)
        return invocation

    @staticmethod
    def _tripwire(reply: Any, count: Iterator[int], after: int, arrived: threading.Event) -> Any:
        def served(request: RecordedRequest) -> Any:
            if next(count) == after:
                arrived.set()
                return Reply.hang()
            return reply

        return served

    # checking

    def stored(self) -> tuple[list[RunInfo], list[CaseRecord]]:
        with SQLiteStore(self.db) as store:
            runs = store.runs()
            return runs, (store.cases(runs[0].id) if runs else [])

    def answered(self, server: ScriptedOpenAI) -> dict[str, int]:
        return {c.model: len(server.requests_for(c.model)) for c in self.cases}

    def judge_calls(self, server: ScriptedOpenAI) -> Counter[int]:
        """Judge requests per case position, from the questions in their prompts."""
        calls: Counter[int] = Counter()
        for request in server.requests_for(self.judge_model):
            prompt = str((request.body or {})["messages"][-1]["content"])
            for case in self.cases:
                if f"Q{case.position} of {self.name}:" in prompt:
                    calls[case.position] += 1
        return calls

    def check(self, server: ScriptedOpenAI, *, exact: set[int] | None = None) -> EvalResult:
        """Check the store and the outputs; `exact`: the positions whose outcome is predicted.

        (After a kill, the cases that were in flight were asked again on resume: their
        outcome is not predicted, only checked to be one.)
        """
        runs, cases = self.stored()
        served = [
            s.kind for c in self.cases for s in c.answers[: len(server.requests_for(c.model))]
        ]
        served += [s.kind for c in self.cases for s in c.verdicts[: self.asked.get(c.model, 0)]]
        result = EvalResult(
            self.name,
            self.mode,
            len(self.cases),
            served,
            Counter(c.outcome for c in cases),
            [i.code for i in self.invocations],
        )
        v = result.violations
        if len(runs) != 1:
            v.append(f"{len(runs)} runs in the store, not 1")
        elif runs[0].status != "complete":
            v.append(f"the run is {runs[0].status}, not complete")
        positions = Counter(c.position for c in cases)
        lost = sorted(set(range(1, len(self.cases) + 1)) - set(positions))
        doubled = sorted(p for p, n in positions.items() if n > 1)
        if lost:
            v.append(f"cases lost (not stored): {lost}")
        if doubled:
            v.append(f"cases stored more than once: {doubled}")
        judge_calls = self.judge_calls(server)
        answered = self.answered(server)
        for record in cases:
            case = self.cases[record.position - 1]
            possible, answer_budget, judge_budget = predict_case(case, self.judged, self.repeat)
            where = f"case {record.position}"
            if record.outcome not in OUTCOMES:
                v.append(f"{where}: unknown outcome {record.outcome!r}")
            if (exact is None or record.position in exact) and record.outcome not in possible:
                kinds = [s.kind for s in case.answers[: answered[case.model]]]
                kinds += [s.kind for s in case.verdicts[: judge_calls[record.position]]]
                v.append(
                    f"{where}: {record.outcome} ({record.error or record.feedback}), served "
                    f"{kinds}; expected one of {sorted(possible)}"
                )
            if exact is not None and record.position not in exact:  # asked twice, any steps
                answer_budget, judge_budget = 2 * TRIES, 2 * TRIES * self.repeat
            if answered[case.model] > answer_budget:
                v.append(f"{where}: {answered[case.model]} answering calls, over {answer_budget}")
            if judge_calls[record.position] > judge_budget:
                v.append(
                    f"{where}: {judge_calls[record.position]} judge calls, over {judge_budget}"
                )
        last = self.invocations[-1]
        expected = expected_exit([c.outcome for c in cases])
        if last.code != expected:
            v.append(f"exit status {last.code}, not {expected}: {last.err.strip()[-300:]}")
        self._check_outputs(v)
        return result

    def _check_outputs(self, v: list[str]) -> None:
        secrets = self.mix.secrets
        outputs: list[tuple[str, str]] = []
        for n, inv in enumerate(self.invocations, 1):
            outputs += [(f"stdout of command {n}", inv.out), (f"stderr of command {n}", inv.err)]
        for path in sorted(self.folder.glob(f"{self.name}.db*")):
            outputs.append((path.name, path.read_bytes().decode("latin-1")))
        html = self.report.read_text(encoding="utf-8") if self.report.exists() else ""
        outputs.append(("HTML report", html))
        for where, text in outputs:
            leaked = secrets.leaked(text)
            if leaked:
                at = min(text.find(secrets.values()[name][-16:]) for name in leaked)
                v.append(
                    f"secret {', '.join(leaked)} in the {where}: "
                    f"{text[max(0, at - 100) : at + 30]!r}"
                )
        for where, text in outputs:
            if where.startswith("stdout") and re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):
                v.append(f"a control character reached the {where}")
        for markup in ("<script>alert(document.cookie)", "<img src=x onerror", "<b>x</b>"):
            if markup in html:
                v.append(f"unescaped answer markup in the HTML report: {markup!r}")
        if self.invocations and self.invocations[-1].code in (0, 1, 4) and not html:
            v.append("no HTML report written")


def run_eval_mix(
    seed: int, runs: int, cases: int, folder: Path, *, interrupt: bool = True
) -> list[EvalResult]:
    """`runs` eval runs of `cases` cases each (sync and async targets, judged or not, CSV or
    JSONL, --repeat 1 or 3), and, with `interrupt`, two more stopped mid-run and resumed: one
    killed with SIGKILL, one stopped by a misconfigured judge (exit 3)."""
    secrets = Secrets.planted(seed)
    mix = Mix(seed, secrets, "eval")
    results = []
    with ScriptedOpenAI() as server:
        for number in range(1, runs + 1):
            run = EvalRun(
                mix,
                number,
                folder,
                cases=cases,
                mode=("sync", "async")[number % 2],
                judged=mix.rng.random() < 0.75,
                repeat=mix.pick([1, 1, 3]),
                fmt=mix.pick(["csv", "jsonl"]),
            )
            run.write(server)
            run.run_in_process()
            results.append(run.check(server))
        if interrupt:
            for how in ("killed", "stopped"):
                mix = Mix(seed, secrets, f"eval-{how}")
                results.append(interrupted_and_resumed(mix, how, folder, server, cases))
    return results


def interrupted_and_resumed(
    mix: Mix, how: str, folder: Path, server: ScriptedOpenAI, cases: int
) -> EvalResult:
    """An eval stopped mid-run, then the same command again: nothing lost, nothing doubled,
    and no case stored before the stop asked again.

    `how`: "killed" (the child process gets SIGKILL while a case waits for its answer) or
    "stopped" (a case's judge answers HTTP 401 echoing the key: `refinekit eval` stops, exit
    3, and the fixed endpoint answers the resumed run).
    """
    mode = mix.pick(["sync", "async"])
    run = EvalRun(mix, how, folder, cases=cases, mode=mode, judged=True, concurrency=2)
    if how == "killed":
        run.write(server, kill_at=mix.rng.randint(cases // 2, cases - 2))
        stop = run.run_killed()
        stopped_as = -signal.SIGKILL
    else:
        case = run.cases[mix.rng.randint(cases // 2, cases - 2) - 1]
        good = "Yes: an unused order can be refunded within 30 days [refunds.md]."
        case.answers[0] = _step("good_text", good, "text", value=good)
        echo = f"Incorrect API key provided: {run.judge_key}"
        case.verdicts[0] = _step("http_401", Reply.error(401, echo), "misconfigured")
        run.write(server)
        stop = run.run_in_process()
        stopped_as = 3
    _, before = run.stored()
    asked_before = run.answered(server)
    stored_before = {c.position for c in before}
    # the cases in flight at the stop are asked again on resume: their outcome is not predicted
    in_flight = {c.position for c in run.cases if asked_before[c.model]} - stored_before
    run.run_in_process()
    asked_after = run.answered(server)
    result = run.check(server, exact={c.position for c in run.cases} - in_flight)
    v = result.violations
    if stop.code != stopped_as:
        v.append(f"the first command exited {stop.code}, not {stopped_as}: {stop.err[-300:]!r}")
    if how == "stopped" and "the judge is misconfigured" not in stop.err:
        v.append(f"the first command did not say the judge is misconfigured: {stop.err[-300:]!r}")
    resumed = run.invocations[-1].out
    if f"resuming run 1: {len(before)} of {cases} cases already stored" not in resumed:
        v.append(
            f"the second command did not resume run 1 ({len(before)} stored): {resumed[:300]!r}"
        )
    for case in run.cases:
        if case.position in stored_before and asked_after[case.model] != asked_before[case.model]:
            v.append(f"case {case.position} was stored before the stop and asked again on resume")
    if not len(before) < cases:
        v.append(f"{len(before)} of {cases} cases stored at the stop: it was not mid-run")
    return result


def eval_figures(results: Sequence[EvalResult]) -> str:
    """Runs, cases, faults by kind and outcomes, as text."""
    lines = [f"refinekit eval: {len(results)} runs, {sum(r.cases for r in results)} cases"]
    served = Counter(k for r in results for k in r.served)
    lines.append("replies served, by kind (faults marked *)")
    for kind, n in sorted(served.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {'*' if kind in FAULT_KINDS else ' '} {kind:<22}{n:>6}")
    outcomes = Counter()
    for r in results:
        outcomes.update(r.outcomes)
    lines.append("case outcomes")
    for outcome, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"    {outcome:<36}{n:>6}")
    exits = Counter(code for r in results for code in r.exits)
    lines.append("exit statuses " + ", ".join(f"{c}: {n}" for c, n in sorted(exits.items())))
    return "\n".join(lines)
