"""`refinekit eval --max-cost` with several workers on one PostgreSQL run, under seeded faults.

Each seeded run is a golden file whose cases each have their own answering model name (so the
scripted server's recorded requests say what each case was served) and a seeded cost: the
answer's prompt tokens at a price per million of `PRICE`. Some cases are rate-limited first
(HTTP 429, tried again: no cost), some answer HTTP 500 (the case raises: no cost), and the
replies take seeded moments, so that cases finish out of order. Three `python -m refinekit
eval` workers of `--concurrency 3` start at once on a PostgreSQL database of the run's own,
under a `--max-cost` below what the whole file costs; then one more worker resumes it with a
higher one.

Checked: every capped worker stops with exit status 3 and says to resume with a higher
`--max-cost`; the run's spend stays within the cap plus the bound docs/budgets.md states (each
case in flight when the last case started costs at most its reservation's shortfall over the
cap, and a reservation is never below the cost of the run's first case that cost anything:
the bound checked is the sum of the `WORKERS * CONCURRENCY` largest shortfalls of the stored
cases against that first cost; 0 when every case costs the same or the first costs the most);
no reservation or worker is left in the store; no case is asked twice; and the resumed run
answers the rest, each case stored once, none asked again.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import refinekit_process

from refinekit.eval._store import open_store
from refinekit.testing import Reply, ScriptedOpenAI

WORKERS = 3
CONCURRENCY = 3
PRICE = 10.0  # per million prompt tokens: 1000 tokens cost 0.01
SCHEMES = ("equal", "first_largest", "first_cheap", "varied")
"""How a run's case costs are drawn: all the same; seeded, with the first case the dearest;
seeded, with the first the cheapest (every estimate too low until a dearer case is stored);
seeded."""

TARGET = """
import os

import openai

import refinekit.testing

refinekit.testing.set_testing()  # the eval's backoff after a 429 is not slept

URL = {url!r}


def answer(question, model):
    with openai.OpenAI(base_url=URL, api_key="sk-cap-test", max_retries=0, timeout=10) as c:
        return c.chat.completions.create(
            model=model, messages=[{{"role": "user", "content": question}}]
        )
"""


@dataclass
class CapCase:
    """One row: its model, the replies it is served in turn, and what refinekit counts it at."""

    position: int
    model: str
    replies: list[Reply]
    cost: float  # 0 for a case that raises (its only reply with usage is never returned)
    raises: bool


@dataclass
class CapResult:
    """One capped run, checked."""

    name: str
    scheme: str
    cases: int
    cap: float
    spent: float
    answered: int
    allowed: float  # the documented bound's excess for this run's costs
    exits: list[int]
    violations: list[str] = field(default_factory=list)

    @property
    def overrun(self) -> float:
        return max(0.0, self.spent - self.cap)


class CapRun:
    """A golden file, its target and its scripts for one capped run with several workers."""

    def __init__(
        self, seed: int, number: int, folder: Path, url: str, *, cases: int, scheme: str
    ) -> None:
        self.rng = random.Random(f"{seed}-cap-{number}")
        self.name = f"cap_{seed}_{number}"
        self.folder = folder / self.name
        self.folder.mkdir()
        self.url = url
        self.scheme = scheme
        self.module = f"rkcap_{self.name}_{os.getpid()}"
        self.cases: list[CapCase] = []
        for i in range(1, cases + 1):
            if scheme == "equal":
                tokens = 1000
            elif scheme == "first_largest":
                tokens = 2000 if i == 1 else self.rng.randint(400, 2000)
            elif scheme == "first_cheap":
                tokens = 400 if i == 1 else self.rng.randint(400, 2000)
            else:
                tokens = self.rng.randint(400, 2000)
            replies: list[Reply] = [
                Reply.error(429, "slow down") for _ in range(self.rng.choice([0, 0, 0, 1, 2]))
            ]
            raises = scheme != "equal" and i > 1 and self.rng.random() < 0.1
            last = (
                Reply.error(500, "upstream failed")
                if raises
                else Reply.text("ok, within 30 days", prompt_tokens=tokens, completion_tokens=5)
            )
            replies.append(Reply.delay(self.rng.uniform(0.0, 0.12), last))
            cost = 0.0 if raises else tokens * PRICE / 1e6
            self.cases.append(CapCase(i, f"{self.name}-{i}", replies, cost, raises))
        total = sum(c.cost for c in self.cases)
        self.cap = round(total * self.rng.uniform(0.3, 0.6), 4)
        self.exits: list[int] = []
        self.outputs: list[tuple[str, str]] = []

    def write(self, server: ScriptedOpenAI) -> None:
        """The golden file, the target module, the prices and the server's scripts."""
        source = TARGET.format(url=server.base_url)
        (self.folder / f"{self.module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        lines = ["question,must_mention,model"]
        lines += [f"Q{c.position} of {self.name}?,30 days,{c.model}" for c in self.cases]
        (self.folder / "golden.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (self.folder / "prices.json").write_text(f'{{"default": [{PRICE}, 0.0]}}', "utf-8")
        for case in self.cases:
            server.script(case.model, list(case.replies))
            # the resumed run: a case not answered under the cap is served the same again
            server.script(case.model, list(case.replies))

    def _worker(self, *extra: str) -> subprocess.Popen[str]:
        command = ["eval", "golden.csv", "--target", f"{self.module}:answer", "--db", self.url]
        return refinekit_process(self.folder, *command, "--prices", "prices.json", *extra)

    def _wait(self, processes: Sequence[subprocess.Popen[str]]) -> None:
        try:
            for p in processes:
                out, err = p.communicate(timeout=180)
                self.exits.append(p.returncode)
                self.outputs.append((out, err))
        finally:
            for p in processes:
                if p.poll() is None:
                    p.kill()
                    p.communicate()

    def bound(self, stored: Sequence[float]) -> float:
        """The documented bound's excess for these stored costs (see the module's docstring)."""
        first = next((c.cost for c in self.cases if c.cost > 0), 0.0)
        shortfalls = sorted((max(0.0, cost - first) for cost in stored), reverse=True)
        return sum(shortfalls[: WORKERS * CONCURRENCY])

    def run(self, server: ScriptedOpenAI) -> CapResult:
        capped = ("--max-cost", str(self.cap), "--concurrency", str(CONCURRENCY))
        self._wait([self._worker(*capped) for _ in range(WORKERS)])
        asked_capped = {c.model: len(server.requests_for(c.model)) for c in self.cases}
        with open_store(self.url) as store:
            [run] = store.runs()
            records = store.cases(run.id)
            costs = [sum(r.cost.get(k, 0.0) for k in ("answer", "answer_judge", "judge"))
                     for r in records]  # fmt: skip
            status = run.status
            claims = [dict(r) for r in store._all("SELECT * FROM claims")]  # type: ignore[attr-defined]
            left = [c for c in claims if c["worker"] is not None or c.get("reserved") is not None]
            workers = store._all("SELECT worker FROM workers")  # type: ignore[attr-defined]
        spent = sum(costs)
        result = CapResult(
            self.name,
            self.scheme,
            len(self.cases),
            self.cap,
            spent,
            len(records),
            self.bound(costs),
            list(self.exits),
        )
        v = result.violations
        for n, (code, (_, err)) in enumerate(zip(self.exits, self.outputs, strict=True), 1):
            if code != 3:
                v.append(f"capped worker {n} exited {code}, not 3: {err.strip()[-300:]!r}")
            elif f"--max-cost {self.cap:.6g}: the run has spent" not in err or (
                "higher --max-cost" not in err
            ):
                v.append(f"capped worker {n} did not say why it stopped: {err.strip()[-300:]!r}")
        if spent > self.cap + result.allowed + 1e-9:
            v.append(
                f"spent {spent:.6g} under --max-cost {self.cap:.6g}: over the cap by "
                f"{spent - self.cap:.6g}, past the documented bound {result.allowed:.6g}"
            )
        if status != "incomplete":
            v.append(f"the capped run is {status}, not incomplete")
        if not len(records) < len(self.cases):
            v.append(f"{len(records)} of {len(self.cases)} cases stored: the cap never bit")
        if left or workers:
            v.append(f"left in the store after every worker stopped: {left} {workers}")
        for case in self.cases:
            if asked_capped[case.model] > len(case.replies):
                v.append(f"case {case.position} asked {asked_capped[case.model]} times")
        stored_before = {r.position for r in records}

        # the cases not started are resumable: a higher --max-cost answers the rest
        self._wait([self._worker("--max-cost", str(round(self.cap * 10, 4)))])
        code, (out, err) = self.exits[-1], self.outputs[-1]
        result.exits.append(code)
        if code != 0:
            v.append(f"the resumed run exited {code}, not 0: {err.strip()[-300:]!r}")
        elif f"resuming run 1: {len(records)} of {len(self.cases)} cases already stored" not in out:
            v.append(f"the higher --max-cost did not resume run 1: {out[:300]!r}")
        with open_store(self.url) as store:
            [run] = store.runs()
            after = store.cases(run.id)
            status = run.status
        if status != "complete":
            v.append(f"the resumed run is {status}, not complete")
        positions = sorted(r.position for r in after)
        if positions != list(range(1, len(self.cases) + 1)):
            v.append(f"stored after the resume: {positions}, not every case once")
        for case in self.cases:
            asked = len(server.requests_for(case.model))
            if case.position in stored_before and asked != asked_capped[case.model]:
                v.append(f"case {case.position} was stored under the cap and asked again")
            record = next((r for r in after if r.position == case.position), None)
            expected = "raised" if case.raises else "passed"
            if record is not None and record.outcome != expected:
                v.append(f"case {case.position}: {record.outcome}, not {expected}")
        return result


def run_cap_mix(
    seed: int, runs: int, folder: Path, server: ScriptedOpenAI, new_database: Any, cases: int = 24
) -> list[CapResult]:
    """`runs` capped runs of `cases` cases (the cost schemes in turn), each on a database of
    its own (`new_database()` gives its URL)."""
    results = []
    for number in range(1, runs + 1):
        run = CapRun(
            seed, number, folder, new_database(), cases=cases, scheme=SCHEMES[(number - 1) % 4]
        )
        run.write(server)
        results.append(run.run(server))
    return results


def cap_figures(results: Sequence[CapResult]) -> str:
    """Each run's workers, cases, spend against its cap, and the largest overrun, as text."""
    lines = [
        f"refinekit eval --max-cost: {len(results)} runs of {WORKERS} workers x --concurrency "
        f"{CONCURRENCY} on one PostgreSQL run",
        f"  {'run':<16}{'costs':<15}{'cases':>6}{'answered':>10}{'cap':>10}{'spent':>10}"
        f"{'overrun':>10}{'bound':>10}",
    ]
    for r in results:
        lines.append(
            f"  {r.name:<16}{r.scheme:<15}{r.cases:>6}{r.answered:>10}{r.cap:>10.4f}"
            f"{r.spent:>10.4f}{r.overrun:>10.4f}{r.allowed:>10.4f}"
        )
    largest = max((r.overrun for r in results), default=0.0)
    lines.append(f"  largest overrun seen: {largest:.4f}")
    return "\n".join(lines)


if __name__ == "__main__":  # the figures of docs/reliability.md: python tests/reliability/capmix.py
    import tempfile
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/pg.py
    from pg import PostgresServer, binaries

    found = binaries()
    if found is None:
        sys.exit("PostgreSQL's binaries (initdb, pg_ctl) are needed: apt-get install postgresql")
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 20260
    pg = PostgresServer(found)
    pg.start()
    try:
        with ScriptedOpenAI() as scripted, tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            done = run_cap_mix(seed, len(SCHEMES), Path(tmp), scripted, pg.new_database)
            print(f"seed {seed}, {time.monotonic() - started:.1f} s")
            print(cap_figures(done))
            broken = [f"- {r.name}: {v}" for r in done for v in r.violations]
            print(f"violations: {len(broken)}", *broken, sep="\n")
    finally:
        pg.stop()
