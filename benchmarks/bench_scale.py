"""`refinekit eval` past one process: throughput, cases lost or asked twice, the store's cost.

Run it from the repository root::

    .venv/bin/python benchmarks/bench_scale.py           # the figures in docs/scale.md
    .venv/bin/python benchmarks/bench_scale.py --quick   # a smoke run

Every answer comes from `refinekit.testing.ScriptedOpenAI`, a real HTTP server on 127.0.0.1
started here, after a fixed delay (`--latency`, 50 ms: a fast model). The golden set has
`--cases` rows (200), judged by its `must_mention` column (no model judge). The answer
function is an `async def` making one call with one `openai.AsyncOpenAI` client per process.
Each line runs real `refinekit eval` processes, all started at once, on a store of its own:

- local: one process, `--concurrency` W x C, on a SQLite file (the default store);
- postgresql: W processes of `--concurrency` C on one PostgreSQL run (each joins it);
- ray: `--backend ray --workers W --concurrency C` on one PostgreSQL run (when refinekit
  has the Ray backend and Ray is installed; `--no-ray` leaves it out);

for W in `--workers` (1,2,4), so the lines with the same W have the same total concurrency
(`--concurrency` C is 4). Each line reports the cases stored, the questions asked twice and
the cases lost (counted on both sides: the scripted server's requests per question, and the
store's rows), the wall time from the first process's start to the last one's end, the cases
per second over it, and the steady rate: the server holds every answer until each answering
process (told apart by an `x-bench-worker` header, its pid) has asked a first question, and
the steady rate is the cases over the time from that moment to the last case stored, so
Python's and Ray's start-up are left out. "of ideal" is the steady rate against total
concurrency / latency; "vs local" against the local line of the same total concurrency.

Then the store's own cost per case, by direct calls (no model, no eval), on SQLite and on
PostgreSQL: queuing `--store-cases` cases (2000), claiming and saving them one at a time,
reading them back (`cases()`: time, and memory by tracemalloc), in ms and bytes per case; the
bytes a case takes queued and stored (this run's answers: 1,000 characters); and the cases
per second one PostgreSQL takes with 4 connections claiming and saving at once.

The PostgreSQL server is a throwaway one (Debian's binaries, `tests/pg.py`) started here, with
durable commits (fsync on); without PostgreSQL's binaries its lines are left out, saying so.
Not a gate on speed: the exit status is 1 only when a case was lost or asked twice, or a
worker failed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import loadavg, machine  # noqa: E402
from _pg import PostgresServer, binaries  # noqa: E402

from refinekit.eval import CaseRecord, RunInfo  # noqa: E402
from refinekit.eval._store import RunStore, open_store  # noqa: E402
from refinekit.testing import RecordedRequest, Reply, ScriptedOpenAI  # noqa: E402

ANSWER_MODULE = """
import asyncio
import os

import openai

_clients = {}


async def answer(question):
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:  # one client per event loop, made in it
        client = _clients[loop] = openai.AsyncOpenAI(
            base_url=os.environ["RK_BASE_URL"],
            api_key="sk-bench",
            max_retries=0,
            timeout=120,
            default_headers={"x-bench-worker": str(os.getpid())},  # the start line (below)
        )
    # the completion itself: refinekit judges its text and stores its usage (a `calls` row)
    return await client.chat.completions.create(
        model="answer", messages=[{"role": "user", "content": question}]
    )
"""

FILLER = (
    "The customer asks whether an opened pair of headphones bought nine days ago can still "
    "be returned, and what the shop's policy says about exchanges and refunds. "
)


def question_of(i: int) -> str:
    """The question of case `i`: about 150 characters."""
    return f"Case {i:06d}. {FILLER}"[:150]


def answer_to(question: str, chars: int) -> str:
    """The scripted answer to `question`: names its case (what `must_mention` checks)."""
    case = question.split(".", 1)[0]
    text = f"{case}: an opened item is exchanged, not refunded. "
    return (text + FILLER * (chars // len(FILLER) + 1))[:chars]


@dataclass
class Line:
    """One configuration's figures."""

    backend: str
    workers: int
    concurrency: int
    cases: int
    stored: int = 0
    twice: int = 0
    lost: int = 0
    runs: int = 0
    wall: float = 0.0
    steady: float = 0.0
    barrier: bool = True
    failed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.workers * self.concurrency

    @property
    def rate(self) -> float:
        return self.cases / self.wall if self.wall else 0.0

    @property
    def steady_rate(self) -> float:
        return self.stored / self.steady if self.steady else 0.0

    @property
    def broken(self) -> bool:
        return bool(self.failed or self.twice or self.lost or self.runs != 1)


class Bench:
    """The scripted server, the workspace with the golden set, and the eval processes."""

    def __init__(self, folder: Path, server: ScriptedOpenAI, args: argparse.Namespace) -> None:
        self.folder = folder
        self.server = server
        self.args = args
        self.questions = [question_of(i) for i in range(1, args.cases + 1)]
        for name, questions in (("golden.csv", self.questions), ("one.csv", self.questions[:1])):
            with (folder / name).open("w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["question", "must_mention"])
                for q in questions:
                    writer.writerow([q, q.split(".", 1)[0]])
        (folder / "bench_scale_answer.py").write_text(
            textwrap.dedent(ANSWER_MODULE), encoding="utf-8"
        )

    def script(self, processes: int) -> threading.Event:
        """Forget the requests so far; answer every question after the latency, once
        `processes` answering processes have each sent a first request (the start line).

        Returns:
            The start line's event, set when it opened; `self.opened` is when.
        """
        latency, chars = self.args.latency, self.args.answer_chars
        seen: set[str] = set()
        lock = threading.Lock()
        start = threading.Event()

        def reply(request: RecordedRequest) -> Reply:
            question = str((request.body or {})["messages"][-1]["content"])
            with lock:
                seen.add(request.headers.get("x-bench-worker", "?"))
                if len(seen) >= processes and not start.is_set():
                    self.opened = time.time()
                    start.set()
            if not start.wait(self.args.start_timeout):
                with lock:
                    if not start.is_set():
                        self.opened = time.time()
                        start.set()
            return Reply.delay(latency, answer_to(question, chars))

        self.opened = 0.0
        self.server.reset()
        self.server.script("answer", reply, times=None)
        return start

    def command(
        self, db: str, concurrency: int, *extra: str, golden: str = "golden.csv"
    ) -> list[str]:
        """A `refinekit eval` command line on `golden` (in the workspace)."""
        return [
            sys.executable,
            "-m",
            "refinekit",
            "eval",
            golden,
            "--target",
            "bench_scale_answer:answer",
            "--db",
            db,
            "--concurrency",
            str(concurrency),
            *extra,
        ]

    def measure(self, line: Line, db: str, commands: list[list[str]]) -> Line:
        """Run `commands` at once against `db`; fill in `line` from the server and the store."""
        processes = line.workers if line.backend != "local" else 1
        start = self.script(processes)
        env = {k: v for k, v in os.environ.items() if k != "REFINEKIT_DB"}
        env |= {"PYTHONPATH": str(self.folder), "RK_BASE_URL": self.server.base_url}
        started = time.perf_counter()
        children = [
            subprocess.Popen(
                command,
                cwd=self.folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for command in commands
        ]
        try:
            outputs = [p.communicate(timeout=self.args.timeout) for p in children]
        finally:  # a line that overran its time: stop what is left of it
            for p in children:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        line.wall = time.perf_counter() - started
        for p, (_, err) in zip(children, outputs, strict=True):
            if p.returncode != 0:
                line.failed.append(f"exit {p.returncode}: {err.strip()[-2000:]}")
        asked = collections.Counter(
            str((r.body or {})["messages"][-1]["content"])
            for r in self.server.requests_for("answer")
        )
        line.twice = sum(n - 1 for n in asked.values() if n > 1)
        with open_store(db) as store:
            runs = store.runs()
            line.runs = len(runs)
            stored = {c.question for run in runs for c in store.cases(run.id)}
            line.stored = sum(len(store.case_keys(run.id)) for run in runs)
            if runs and runs[0].status != "complete":
                line.failed.append(f"run {runs[0].id} is {runs[0].status}")
        # lost: a case of the file that no run stored
        line.lost = sum(1 for q in self.questions[: line.cases] if q not in stored)
        times = finish_times(db)
        if times and self.opened:
            line.steady = times[-1] - self.opened
        line.barrier = start.is_set() and len(seen_workers(self.server)) >= processes
        return line


def seen_workers(server: ScriptedOpenAI) -> set[str]:
    """The answering processes the server heard from."""
    return {r.headers.get("x-bench-worker", "?") for r in server.requests_for("answer")}


def finish_times(db: str) -> list[float]:
    """When each stored case finished (Unix time, the store's `finished_at`), in order.

    Read with the databases' own clients: the store interface does not give it.
    """
    query = "SELECT finished_at FROM cases ORDER BY finished_at"
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db) as conn:
            return [float(r[0]) for r in conn.execute(query)]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [float(r[0]) for r in conn.execute(query)]


@contextlib.contextmanager
def postgres(args: argparse.Namespace) -> Iterator[PostgresServer | None]:
    found = binaries()
    if found is None or args.no_postgres:
        yield None
        return
    server = PostgresServer(found, durable=not args.fast_postgres)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def has_ray_backend() -> bool:
    """Whether this refinekit's `eval` takes `--backend ray` and Ray is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    done = subprocess.run(
        [sys.executable, "-m", "refinekit", "eval", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "--backend" in done.stdout


# the store's own cost per case


def sample_record(db: str) -> CaseRecord:
    """A case as the eval runs stored it (this run's answer size and usage)."""
    with open_store(db) as store:
        [run, *_] = store.runs()
        return store.cases(run.id)[0]


def new_run(store: RunStore, n: int, folder: Path) -> RunInfo:
    run = store.start_run(
        kind="eval",
        dataset=folder / "golden.csv",
        dataset_sha256="0" * 64,
        target="bench_scale_answer:answer",
        judge=None,
        options={"concurrency": 1},
        fingerprint=os.urandom(8).hex(),
        version="bench",
    )
    store.queue(run.id, ((f"k{i:07d}", i) for i in range(1, n + 1)))
    return run


def drain(
    store: RunStore, run_id: int, worker: str, record: CaseRecord
) -> tuple[int, float, float]:
    """Claim and save cases until none is left; (cases, seconds claiming, seconds saving)."""
    store.join(run_id, worker)
    done, claiming, saving = 0, 0.0, 0.0
    while True:
        t0 = time.perf_counter()
        keys = store.claim(run_id, worker)
        t1 = time.perf_counter()
        claiming += t1 - t0
        if not keys:
            return done, claiming, saving
        position = int(keys[0][1:])
        saved = store.save_case(
            run_id, replace(record, key=keys[0], position=position), worker=worker
        )
        saving += time.perf_counter() - t1
        assert saved, f"case {keys[0]} claimed by {worker} but not saved"
        done += 1


@dataclass
class StoreCost:
    """The store's own cost per case, by direct calls."""

    kind: str
    cases: int
    queue_ms: float
    claim_ms: float
    save_ms: float
    read_ms: float
    read_bytes: float
    queued_bytes: float | None
    stored_bytes: float | None
    rows: float


def table_bytes(db: str, tables: Sequence[str]) -> int | None:
    """Bytes the tables take with their indexes (PostgreSQL: after a VACUUM); None when
    SQLite has no `dbstat` table to say."""
    names = ", ".join(f"'{t}'" for t in tables)
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c "
                f"WHERE c.relname IN ({names}) AND c.relkind = 'r'"
            ).fetchone()
            return int(row[0]) if row and row[0] is not None else 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            row = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN "
                f"(SELECT name FROM sqlite_schema WHERE tbl_name IN ({names}))"
            ).fetchone()
        except sqlite3.OperationalError:  # built without dbstat
            return None
        return int(row[0] or 0)


def rows_of(db: str, tables: Sequence[str]) -> int:
    query = " + ".join(f"(SELECT count(*) FROM {t})" for t in tables)
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db) as conn:
            row = conn.execute(f"SELECT {query}").fetchone()
            return int(row[0]) if row else 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute(f"SELECT {query}").fetchone()[0])


def store_cost(kind: str, db: str, folder: Path, record: CaseRecord, n: int) -> StoreCost:
    """`n` cases queued, claimed and saved one at a time, then read back, by one worker."""
    with open_store(db) as store:
        started = time.perf_counter()
        run = new_run(store, n, folder)
        queued = time.perf_counter() - started
        queued_bytes = table_bytes(db, ["claims"])
        done, claiming, saving = drain(store, run.id, "bench:1", record)
        tracemalloc.start()
        started = time.perf_counter()
        records = store.cases(run.id)
        read = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(records) == n, f"{len(records)} of {n} cases read back"
        del records
    stored = table_bytes(db, ["cases", "calls", "claims"])
    return StoreCost(
        kind=kind,
        cases=done,
        queue_ms=1000 * queued / n,
        claim_ms=1000 * claiming / done,
        save_ms=1000 * saving / done,
        read_ms=1000 * read / n,
        read_bytes=peak / n,
        queued_bytes=None if queued_bytes is None else queued_bytes / n,
        stored_bytes=None if stored is None else stored / n,
        rows=rows_of(db, ["cases", "calls", "claims"]) / n,
    )


def postgres_ceiling(url: str, folder: Path, record: CaseRecord, n: int, threads: int) -> float:
    """Cases per second `threads` connections claim and save at once on one run."""
    with open_store(url) as store:
        run = new_run(store, n, folder)
    stores = [open_store(url) for _ in range(threads)]
    counts: list[int] = []
    errors: list[BaseException] = []

    def work(store: RunStore, i: int) -> None:
        try:
            counts.append(drain(store, run.id, f"bench:{i}", record)[0])
        except BaseException as e:  # reported below
            errors.append(e)

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(store, i)) for i, store in enumerate(stores, 1)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    seconds = time.perf_counter() - started
    for store in stores:
        store.close()
    if errors:
        raise errors[0]
    assert sum(counts) == n, f"{sum(counts)} of {n} cases saved"
    return n / seconds


# the report


def table(lines: Sequence[Line], latency: float) -> list[str]:
    """The eval lines as a markdown table."""
    local = {line.total: line for line in lines if line.backend == "local"}
    out = [
        "| backend | workers x conc. | cases | stored | asked twice | lost | wall (s) "
        "| cases/s (wall) | cases/s (steady) | of ideal | vs local (steady) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        base = local.get(line.total)
        ratio = f"{line.steady_rate / base.steady_rate:.2f}" if base and base.steady_rate else "-"
        ideal = line.total / latency
        out.append(
            f"| {line.backend} | {line.workers} x {line.concurrency} | {line.cases} "
            f"| {line.stored} | {line.twice} | {line.lost} | {line.wall:.1f} | {line.rate:.1f} "
            f"| {line.steady_rate:.1f} | {line.steady_rate / ideal:.0%} | {ratio} |"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="golden cases (200)")
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds per answer call (0.05)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="cases in flight per worker (4)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (1,2,4)")
    parser.add_argument(
        "--answer-chars", type=int, default=1000, help="characters per answer (1000)"
    )
    parser.add_argument(
        "--store-cases", type=int, default=2000, help="cases of the store's cost (2000)"
    )
    parser.add_argument("--no-ray", action="store_true", help="leave the Ray lines out")
    parser.add_argument("--no-postgres", action="store_true", help="leave the PostgreSQL lines out")
    parser.add_argument(
        "--fast-postgres",
        action="store_true",
        help="PostgreSQL with fsync and synchronous_commit off (the tests' server)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per line, seconds")
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        help="seconds answers wait for every worker's first request (60)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run, a few seconds")
    args = parser.parse_args(argv)
    if args.quick:
        args.cases, args.latency, args.store_cases = 24, 0.02, 60
        args.workers, args.concurrency, args.no_ray = "1,2", 2, True
    counts = [int(w) for w in args.workers.split(",")]

    print("refinekit eval past one process: throughput, cases lost or asked twice")
    for info in machine(["refinekit", "openai", "psycopg", "ray"]):
        print(info)
    pg_bin = binaries()
    if pg_bin is not None:
        done = subprocess.run(
            [str(pg_bin / "pg_ctl"), "--version"], capture_output=True, text=True, check=False
        )
        settings = "the tests' settings" if args.fast_postgres else "durable: fsync on"
        print(f"postgres   {done.stdout.strip()} ({settings})")
    print(f"load avg   {loadavg()} (before)")
    print(f"command    {' '.join(['python benchmarks/bench_scale.py', *(argv or sys.argv[1:])])}")
    print(
        f"setup      {args.cases} cases, {args.latency * 1000:.0f} ms per answer call, "
        f"{args.answer_chars}-char answers, column checks (no judge); each line a fresh store"
    )
    print()

    lines: list[Line] = []
    costs: list[StoreCost] = []
    ceiling: float | None = None
    notes: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="rkbench-") as tmp,
        ScriptedOpenAI() as server,
        postgres(args) as pg,
    ):
        folder = Path(tmp)
        bench = Bench(folder, server, args)
        ray = not args.no_ray and pg is not None and has_ray_backend()
        if pg is None:
            notes.append(
                "PostgreSQL lines left out: "
                + ("--no-postgres" if args.no_postgres else "no PostgreSQL binaries")
            )
        if not args.no_ray and not ray and pg is not None:
            notes.append("Ray lines left out: this refinekit has no --backend ray, or no Ray")
        db = str(folder / "one.db")
        fixed = bench.measure(Line("local", 1, 1, 1), db, [bench.command(db, 1, golden="one.csv")])
        c = args.concurrency
        for n in counts:
            db = str(folder / f"local{n}.db")
            local = Line("local", 1, n * c, args.cases)
            lines.append(bench.measure(local, db, [bench.command(db, n * c)]))
            if pg is not None:
                url = pg.new_database()
                workers = Line("postgresql", n, c, args.cases)
                lines.append(bench.measure(workers, url, [bench.command(url, c)] * n))
            if ray:
                assert pg is not None
                url = pg.new_database()
                command = bench.command(url, c, "--backend", "ray", "--workers", str(n))
                lines.append(bench.measure(Line("ray", n, c, args.cases), url, [command]))
        record = sample_record(str(folder / f"local{counts[0]}.db"))
        n = args.store_cases
        costs.append(store_cost("SQLite", str(folder / "cost.db"), folder, record, n))
        if pg is not None:
            costs.append(store_cost("PostgreSQL", pg.new_database(), folder, record, n))
            ceiling = postgres_ceiling(pg.new_database(), folder, record, args.store_cases, 4)

    print(
        f"one refinekit eval process of 1 case (start-up, import, store, summary): "
        f"{fixed.wall:.1f} s wall"
    )
    print()
    print("\n".join(table(lines, args.latency)))
    print()
    print("the store's own cost per case (direct calls: one worker, one case at a time):")
    print(
        "| store | cases | queue (ms) | claim (ms) | save_case (ms) | claim + save (ms) "
        "| read back (ms) | read back (bytes in memory) | queued (bytes) | stored (bytes) "
        "| rows |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def size(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    for cost in costs:
        print(
            f"| {cost.kind} | {cost.cases} | {cost.queue_ms:.3f} | {cost.claim_ms:.2f} "
            f"| {cost.save_ms:.2f} | {cost.claim_ms + cost.save_ms:.2f} | {cost.read_ms:.3f} "
            f"| {cost.read_bytes:.0f} | {size(cost.queued_bytes)} | {size(cost.stored_bytes)} "
            f"| {cost.rows:.2f} |"
        )
    print("(per case: queue and read back are one call for all the cases; rows stored per case)")
    if ceiling is not None:
        print(
            f"PostgreSQL, 4 connections claiming and saving at once: {ceiling:.0f} cases/s "
            "(on this machine, the server sharing its 2 cores)"
        )
    print(f"load avg   {loadavg()} (after)")
    for note in notes:
        print(f"note: {note}")
    for line in lines:
        if not line.barrier:
            notes.append(
                f"{line.backend} {line.workers} x {line.concurrency}: not every worker sent a "
                f"request within {args.start_timeout:.0f} s; its steady figure includes start-up"
            )
    broken = [line for line in lines if line.broken]
    for line in broken:
        print(
            f"BROKEN: {line.backend} {line.workers} x {line.concurrency}: {line.runs} run(s), "
            f"{line.twice} asked twice, {line.lost} lost; {'; '.join(line.failed)}"
        )
    print(
        f"result: {'FAIL' if broken else 'ok'}: {sum(x.twice for x in lines)} asked twice, "
        f"{sum(x.lost for x in lines)} lost over {len(lines)} lines"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
