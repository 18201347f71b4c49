"""refinekit's pytest plugin, registered through the `pytest11` entry point.

Installing refinekit is enough to get:

- the fixtures `fake_judge`, `fake_stream`, `scripted_openai` (a server per test),
  `scripted_openai_session` (one server for the session, its scripts and requests reset
  before each test that uses it) and `refinekit_testing`;
- `@pytest.mark.golden("cases.csv")`: one test case per row of a CSV or JSONL file, each
  column passed as the argument of the same name;
- a pass-rate gate over the golden cases (`--refinekit-min-pass-rate`, or the ini option
  `refinekit_min_pass_rate`) on the lower end of the 95% Wilson score interval;
- `--refinekit-trials K` (or the ini option `refinekit_trials`): each golden case runs K
  times (ids ending `-trial1` to `-trialK`), passes only when every trial passed (pass^K,
  what the gate counts), and the summary gives pass@K (at least one trial passed) too;
- `@pytest.mark.live` tests, skipped unless `--refinekit-live` is given.

pytest imports this module in every session of every project that has refinekit installed,
so it is a top-level module of its own (as hypothesis's `_hypothesis_pytestplugin` is), not
part of the `refinekit` package: importing it imports pytest and the standard library only.
refinekit itself is imported when a fixture, a `golden` mark or the gate needs it, so the
plugin costs nothing to a test run that does not use it (`tests/testing/test_plugin.py` checks it).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from refinekit import Job
    from refinekit.testing import FakeJudge, FakeStream, ScriptedOpenAI

__all__ = [
    "LIVE_SKIP_REASON",
    "fake_judge",
    "fake_stream",
    "pytest_addoption",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_runtest_setup",
    "refinekit_testing",
    "scripted_openai",
    "scripted_openai_session",
]

LIVE_SKIP_REASON = (
    "live model test: run with --refinekit-live (uses OPENAI_BASE_URL / OPENAI_API_KEY)"
)
_MIN_PASS_RATE = "refinekit_min_pass_rate"
_TRIALS = "refinekit_trials"
_TRIAL_ID = re.compile(r"-trial\d+(?=[-\]])")  # a trial's part of a golden case's node id
_SESSION_SERVER = "scripted_openai_session"
_session_server_key = pytest.StashKey["ScriptedOpenAI"]()
_CONFIDENCE = 0.95
# a failed gate's entry in the terminal reporter's tally: "19 passed, 1 refinekit gate failed"
_GATE_STAT = "refinekit gate failed"


@dataclass
class _Gate:
    """The golden cases' results over a session, and the gate's threshold."""

    threshold: float | None
    trials: int = 1  # each golden case's runs (--refinekit-trials)
    golden: set[str] = field(default_factory=set)  # node ids of golden cases
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> passed/failed/skipped
    passed: int = 0  # cases whose every trial passed (pass^k), once counted
    failed: int = 0
    skipped: int = 0  # cases every trial of which was skipped
    any_passed: int = 0  # cases with at least one trial passed (pass@k)
    lower: float | None = None  # the Wilson lower bound, once computed

    def count(self) -> None:
        """The cases' counts from their trials' outcomes (a case is its trials' node ids)."""
        cases: dict[str, list[str]] = {}
        for nodeid, outcome in self.outcomes.items():
            key = _TRIAL_ID.sub("", nodeid) if self.trials > 1 else nodeid
            cases.setdefault(key, []).append(outcome)
        self.passed = self.failed = self.skipped = self.any_passed = 0
        for outcomes in cases.values():
            run = [o for o in outcomes if o != "skipped"]
            if not run:
                self.skipped += 1
            elif all(o == "passed" for o in run):
                self.passed += 1
            else:
                self.failed += 1
            self.any_passed += "passed" in run

    @property
    def total(self) -> int:
        return self.passed + self.failed

    @property
    def failing(self) -> bool:
        """Whether a threshold is set and the lower bound (once computed) is under it."""
        return self.threshold is not None and self.lower is not None and self.lower < self.threshold

    def failure(self) -> str:
        """The failed gate in one line."""
        return (
            f"refinekit gate FAILED: lower bound {self.lower:.3f} < minimum pass rate "
            f"{self.threshold:.3f}"
        )


def _write_last(reporter: Any, line: str) -> None:
    """Write a failure as pytest writes its last line: red and bold, between `=` unless -q."""
    if reporter.verbosity >= 0:
        reporter.write_sep("=", line, red=True, bold=True)
    else:
        reporter.ensure_newline()
        reporter.write_line(line, red=True, bold=True)


# options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add refinekit's command-line and ini options."""
    group = parser.getgroup("refinekit")
    group.addoption(
        "--refinekit-min-pass-rate",
        dest=_MIN_PASS_RATE,
        default=None,
        metavar="P",
        help="fail the run when the 95%% Wilson lower bound of the golden cases' pass rate "
        "is below P (0 to 1); overrides the ini option refinekit_min_pass_rate",
    )
    group.addoption(
        "--refinekit-live",
        dest="refinekit_live",
        action="store_true",
        default=False,
        help="run tests marked live against the real endpoint in OPENAI_BASE_URL / "
        "OPENAI_API_KEY (skipped otherwise)",
    )
    group.addoption(
        "--refinekit-trials",
        dest=_TRIALS,
        default=None,
        metavar="K",
        help="run each golden case K times (1 to 50): a case passes only when every trial "
        "passed (pass^K, what the gate counts); the summary gives pass@K too; overrides the "
        "ini option refinekit_trials",
    )
    parser.addini(
        _MIN_PASS_RATE,
        "minimum 95% Wilson lower bound of the golden cases' pass rate (0 to 1)",
        default=None,
    )
    parser.addini(_TRIALS, "runs of each golden case (1 to 50; pass^K gates)", default=None)


def _trials(config: pytest.Config) -> int:
    raw: Any = config.getoption(_TRIALS)
    where = "--refinekit-trials"
    if raw is None:
        raw = config.getini(_TRIALS)
        where = "the ini option refinekit_trials"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return 1
    text = str(raw).strip()
    if not text.isdigit() or not 1 <= int(text) <= 50:
        raise pytest.UsageError(f"{where} must be a whole number from 1 to 50, got {raw!r}")
    return int(text)


def _threshold(config: pytest.Config) -> float | None:
    raw: Any = config.getoption(_MIN_PASS_RATE)
    where = "--refinekit-min-pass-rate"
    if raw is None:
        raw = config.getini(_MIN_PASS_RATE)
        where = "the ini option refinekit_min_pass_rate"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise pytest.UsageError(f"{where} must be a number from 0 to 1, got {raw!r}")
    return value


def pytest_configure(config: pytest.Config) -> None:
    """Register the `golden` and `live` markers and validate the gate's threshold."""
    config.addinivalue_line(
        "markers",
        "golden(path): one case per row of a CSV or JSONL file (path relative to the test "
        "file); each column arrives as the argument of the same name",
    )
    config.addinivalue_line(
        "markers",
        "live: runs against a real model endpoint; skipped unless --refinekit-live is given",
    )
    gate = _Gate(threshold=_threshold(config), trials=_trials(config))
    config.pluginmanager.register(_GateHooks(gate), "refinekit-gate")


# golden sets


def _read_rows(path: Path) -> list[dict[str, Any]]:
    from refinekit._core.errors import GoldenFileError
    from refinekit.eval import DataFileError, read_golden

    try:
        return read_golden(path)
    except DataFileError as e:
        raise GoldenFileError(f"golden {e}") from None


def _golden_cases(
    test: str, path: Path, rows: list[dict[str, Any]], wanted: list[str]
) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Each row's values for the wanted arguments, and its id: the row number and a slug."""
    from refinekit._core.errors import GoldenFileError
    from refinekit.eval import case_slug, column_for

    columns = list(rows[0])
    values: list[tuple[Any, ...]] = []
    ids: list[str] = []
    for number, row in enumerate(rows, 1):
        keys = list(row)
        case = []
        for name in wanted:
            column = column_for(name, keys)
            if column is None:
                where = "" if number == 1 else f" in row {number}"
                raise GoldenFileError(
                    f"{test} takes the argument {name!r} but golden file {path} has no "
                    f"column {name!r}{where}; columns: {columns}"
                )
            case.append(row[column])
        values.append(tuple(case))
        first = row[keys[0]] if keys else None
        slug = case_slug(first) if first is not None else ""
        ids.append(f"{number}-{slug}" if slug else str(number))
    return values, ids


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise a test marked `golden`: one case per row of its file."""
    marker = metafunc.definition.get_closest_marker("golden")
    if marker is None:
        return
    test = metafunc.function.__name__
    if len(marker.args) != 1 or not isinstance(marker.args[0], (str, Path)):
        raise pytest.Collector.CollectError(
            f"@pytest.mark.golden on {test}: give one path, relative to the test file, e.g. "
            f"golden('cases.csv'), not golden{marker.args!r}"
        )
    path = Path(metafunc.definition.path).parent / marker.args[0]
    # arguments parametrised otherwise, and fixtures no column names, are not columns
    already = {
        name.strip()
        for mark in metafunc.definition.iter_markers("parametrize")
        for name in (
            mark.args[0].split(",") if isinstance(mark.args[0], str) else list(mark.args[0])
        )
    }
    fixtures: Any = getattr(metafunc, "_arg2fixturedefs", {})
    from refinekit._core.errors import GoldenFileError
    from refinekit.eval import column_for

    try:
        rows = _read_rows(path)
        if not rows:
            raise GoldenFileError(f"golden file {path} has no rows")
        columns = list(rows[0])
        wanted = [
            name
            for name, parameter in inspect.signature(metafunc.function).parameters.items()
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            and name not in ("self", "cls", "request")
            and name not in already
            and (column_for(name, columns) is not None or name not in fixtures)
        ]
        if not wanted:
            raise GoldenFileError(
                f"{test} takes no argument named after a column of {path}; columns: {columns}"
            )
        values, ids = _golden_cases(test, path, rows, wanted)
    except GoldenFileError as e:
        raise pytest.Collector.CollectError(f"@pytest.mark.golden: {e}") from None
    trials = _trials(metafunc.config)
    if trials > 1:  # each case K times, its trials side by side
        values = [v for v in values for _ in range(trials)]
        ids = [f"{i}-trial{t}" for i in ids for t in range(1, trials + 1)]
    metafunc.parametrize(wanted, values, ids=ids)


# selection: live tests; results: the gate


class _GateHooks:
    """Per-run hooks (registered in `pytest_configure`): live skips and the gate's counts.

    An instance per config keeps nested runs (pytester) apart.
    """

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Skip `live` tests without `--refinekit-live`; note which items are golden cases."""
        live = bool(config.getoption("refinekit_live"))
        for item in items:
            if item.get_closest_marker("golden") is not None:
                self.gate.golden.add(item.nodeid)
            if not live and item.get_closest_marker("live") is not None:
                item.add_marker(pytest.mark.skip(reason=LIVE_SKIP_REASON))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count a golden case: its call passed or failed, or it was skipped (or errored)."""
        gate = self.gate
        if report.nodeid not in gate.golden:
            return
        if report.when == "call":
            if report.passed:
                gate.outcomes[report.nodeid] = "passed"
            elif report.failed:
                gate.outcomes[report.nodeid] = "failed"
            else:  # skipped in the call (pytest.skip(), xfail)
                gate.outcomes[report.nodeid] = "skipped"
        elif report.when == "setup" and not report.passed:
            # skipped, or a setup error: the case did not pass
            gate.outcomes[report.nodeid] = "skipped" if report.skipped else "failed"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Fail an otherwise passing run whose pass rate's lower bound is under threshold."""
        gate = self.gate
        gate.count()
        if gate.total == 0:
            return
        from refinekit.eval import wilson_interval

        gate.lower = wilson_interval(gate.passed, gate.total, _CONFIDENCE)[0]
        if not gate.failing:
            return
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        # pytest's own last line ("19 passed in 0.12s") counts the failed gate too, so it is
        # not green; the terminal reporter writes it after this hook (see below).
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.stats.setdefault(_GATE_STAT, []).append(gate)

    # tryfirst: the outermost wrapper, so its end runs after the terminal reporter's, which
    # writes pytest's last line
    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_last_line(
        self, session: pytest.Session
    ) -> Generator[None, object, object]:
        """After pytest's last line: a failed gate's own line, red, the last thing written."""
        result = yield
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if self.gate.failing and reporter is not None:
            _write_last(reporter, self.gate.failure())
        return result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the golden cases' passes, total, rate and Wilson lower bound (and the gate)."""
        gate = self.gate
        if gate.total == 0 and gate.skipped == 0:
            return
        terminalreporter.write_sep("=", "refinekit golden set")
        skipped = f"; {gate.skipped} skipped (not counted)" if gate.skipped else ""
        if gate.total == 0 or gate.lower is None:
            terminalreporter.write_line(f"no golden case passed or failed{skipped}")
            return
        rate = gate.passed / gate.total
        if gate.trials > 1:
            k = gate.trials
            from refinekit.eval import wilson_interval

            low, high = wilson_interval(gate.any_passed, gate.total, _CONFIDENCE)
            terminalreporter.write_line(
                f"each case run {k} times: pass^{k} {gate.passed}/{gate.total} (every trial "
                f"passed: the rate below, what the gate holds), pass@{k} "
                f"{gate.any_passed}/{gate.total} (at least one passed, 95% Wilson {low:.3f} to "
                f"{high:.3f})"
            )
        terminalreporter.write_line(
            f"{gate.passed}/{gate.total} passed, rate {rate:.3f}, "
            f"95% Wilson lower bound {gate.lower:.3f}{skipped}"
        )
        if gate.threshold is not None:
            verdict = "FAIL" if gate.failing else "PASS"
            terminalreporter.write_line(
                f"gate: lower bound {gate.lower:.3f} vs minimum pass rate "
                f"{gate.threshold:.3f}: {verdict}",
                red=gate.failing,
                bold=gate.failing,
                green=not gate.failing,
            )


# fixtures


@pytest.fixture
def fake_judge() -> Callable[..., FakeJudge]:
    """A factory of `FakeJudge` evaluators returning scripted verdicts in order.

    `fake_judge("fail: cite a source", "pass")` returns an evaluator whose first verdict
    fails with that feedback and whose second passes; `.requests` records what it was asked
    to judge. Judges are named `fake_judge-1`, `fake_judge-2`, ... unless given `name=`.

    Returns:
        The factory: `(*verdicts, name=None) -> FakeJudge`.
    """
    from refinekit.testing import FakeJudge

    made = 0

    def make(*verdicts: Any, name: str | None = None) -> FakeJudge:
        nonlocal made
        made += 1
        return FakeJudge(*verdicts, name=name or f"fake_judge-{made}")

    return make


@pytest.fixture
def fake_stream() -> Callable[..., FakeStream]:
    """A factory of `FakeStream`s: scripted streams of a reply, for a function that streams.

    `fake_stream('{"number": "A-1"}', chunks=4)` returns a stream of that text in pieces of 4
    characters (the options are `FakeStream`'s: `shape="openai"`, `finish_reason=`,
    `prompt_tokens=`, `completion_tokens=`, `break_after=`). Each stream made is also in the
    factory's `made` list, in order, so a test can check how each was read (`sent`,
    `finished`, `client_closed`).

    Returns:
        The factory: `(content, **options) -> FakeStream`, with its `made` list.
    """
    from refinekit.testing import FakeStream

    made: list[FakeStream] = []

    def make(content: str, **options: Any) -> FakeStream:
        stream = FakeStream(content, **options)
        made.append(stream)
        return stream

    make.made = made  # type: ignore[attr-defined]
    return make


@pytest.fixture
def scripted_openai() -> Iterator[ScriptedOpenAI]:
    """A running `ScriptedOpenAI` server for the test, shut down after it.

    Script replies with `.script(model, replies)`; `.client()` and `.async_client()` give
    real `openai` clients pointed at it.

    Yields:
        The running server.
    """
    from refinekit.testing import ScriptedOpenAI

    with ScriptedOpenAI() as server:
        yield server


@pytest.fixture(scope="session")
def scripted_openai_session(request: pytest.FixtureRequest) -> Iterator[ScriptedOpenAI]:
    """One running `ScriptedOpenAI` server for the whole session, at one address.

    For an app that builds its client when it is imported (a module-level `openai.OpenAI()`
    reading `OPENAI_BASE_URL`): a session-scoped fixture can point the environment at
    `.base_url` and import the app once. Each test that uses this fixture (directly, or
    through another fixture) starts with no script and no recorded request: scripts belong
    to the test, as with `scripted_openai`; script replies every test needs in a
    function-scoped fixture. `.script(model, reply, times=None)` answers every request.

    Yields:
        The running server, shut down at the end of the session.
    """
    from refinekit.testing import ScriptedOpenAI

    with ScriptedOpenAI() as server:
        request.config.stash[_session_server_key] = server
        try:
            yield server
        finally:
            del request.config.stash[_session_server_key]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test's fixtures are set up: reset the session server when the test uses it."""
    if _SESSION_SERVER not in getattr(item, "fixturenames", ()):
        return
    server = item.config.stash.get(_session_server_key, None)
    if server is not None:
        server.reset()


@pytest.fixture
def refinekit_testing() -> Iterator[Job]:
    """Instant waits and a fresh refinekit job for the test.

    The testing switch is on for the test and restored after it. The test runs inside a
    new `refinekit.job()`: every refinekit call in the test joins that job, so budgets
    start fresh for each test and are shared by the test's calls, and the job's `usage`
    adds up the test's model calls. Nothing outlives the test: the previous job (normally
    none) is restored afterwards.

    Yields:
        The test's job.
    """
    from refinekit import job
    from refinekit.testing import set_testing

    with set_testing(), job() as current:
        yield current
