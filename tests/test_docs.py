"""Every ```python block of README.md and docs/*.md runs, as a test of its own.

The blocks of a page run in order in one namespace (a later block uses what an earlier one
defined), each reported as `docs/page.md:LINE`. Selecting one block runs the page's blocks
before it first. How a block declares the stubs it needs, or says it is a signature, is in
tests/docs_blocks.py and docs/architecture.md ("Docs that run").

While a block runs: backoff is instant (tests/conftest.py), no connection leaves 127.0.0.1,
`OPENAI_API_KEY` is a dummy and `OPENAI_BASE_URL` a closed local port unless the page asked
for the scripted server, and warnings are errors.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib
import inspect
import io
import logging
import re
import shlex
import socket
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import ExitStack, redirect_stderr, redirect_stdout, suppress
from pathlib import Path
from typing import Any

import docs_blocks
import openai
import pytest
from docs_blocks import NEEDS, PAGES, ROOT, Block, MarkerError, blocks, numbered
from docs_stubs import placeholders

from refinekit.testing import ScriptedOpenAI

pytest_plugins = ["pytester"]

HOW_TO_MARK = (
    "If the block needs a stub, declare it in an HTML comment right before the fence, e.g. "
    "<!-- docs-test: needs=placeholders -->  (stubs: "
    + ", ".join(NEEDS)
    + '); a signature or a fragment says so: <!-- docs-test: skip reason="..." -->; '
    "a test module: <!-- docs-test: pytest -->; a file the reader saves: "
    "<!-- docs-test: file=NAME -->; refinekit commands: <!-- docs-test: cli -->. "
    "See docs/architecture.md, 'Docs that run'."
)
DEAD_ENDPOINT = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, nothing leaves
DUMMY_KEY = "sk-docs-test"
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
PYTESTER_INI = """
[pytest]
filterwarnings = error
asyncio_default_fixture_loop_scope = function
"""


def _collect() -> tuple[dict[str, list[Block]], list[Any]]:
    by_page: dict[str, list[Block]] = {}
    params: list[Any] = []
    for path in PAGES:
        try:
            found = blocks(path)
        except MarkerError as error:
            page = path.relative_to(ROOT).as_posix()
            params.append(pytest.param(error, id=f"{page}:marker"))
            continue
        for block in found:
            by_page.setdefault(block.page, []).append(block)
            params.append(pytest.param(block, id=block.id))
    return by_page, params


BY_PAGE, PARAMS = _collect()


class BlockFailed(Exception):
    """A block raised; the message names the page and line, the traceback its lines."""


def _md_traceback(error: BaseException) -> str:
    """The traceback from the first frame in a page on (the harness's frames left out)."""
    tb = error.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.endswith(".md"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))


def _log_levels() -> dict[str, int]:
    loggers = logging.root.manager.loggerDict.items()
    return {name: lg.level for name, lg in loggers if isinstance(lg, logging.Logger)}


class PageRun:
    """One page's namespace and stubs, and how far its blocks have run."""

    def __init__(self, page: str, folder: Path, page_blocks: list[Block]) -> None:
        self.page = page
        self.folder = folder  # the working directory of its blocks: what they write goes here
        self.blocks = page_blocks
        slug = re.sub(r"\W", "_", page.removesuffix(".md"))
        self.module = types.ModuleType(f"docs_page_{slug}")
        sys.modules[self.module.__name__] = self.module  # pydantic and dataclasses look it up
        self.next = 0  # the index of the next block to run
        self.failed: Block | None = None
        self.env: dict[str, str] = {}
        self.provided: set[str] = set()
        self.stack = ExitStack()
        self.closed = False
        self.log_levels = _log_levels()  # docs/observability.md sets one: put back on close
        self.importable = False  # the folder is on sys.path (the page wrote a file)
        self.retired: list[types.ModuleType] = []  # its modules imported before a file grew

    def provide(self, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        if name in self.provided:
            return
        ns = self.module.__dict__
        if name == "placeholders":
            ns.update(placeholders())
        elif name == "scripted_server":
            server = self.stack.enter_context(ScriptedOpenAI())
            ns["server"] = server
            self.env.update(
                OPENAI_BASE_URL=server.base_url,
                OPENAI_API_KEY=DUMMY_KEY,
                ANTHROPIC_BASE_URL=server.base_url.removesuffix("/v1"),  # it adds /v1/messages
                ANTHROPIC_API_KEY=DUMMY_KEY,
            )
            for key, value in self.env.items():
                monkeypatch.setenv(key, value)
        else:  # pragma: no cover - docs_blocks checks the names
            raise AssertionError(name)
        self.provided.add(name)

    def execute(self, block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
        """Run one block (its stubs, its hidden setup, its code); `BlockFailed` if it raises.

        A `file=` block is written instead, and a `cli` block's commands are run.
        """
        for name in block.needs:
            self.provide(name, monkeypatch)
        path = str(ROOT / block.page)
        try:
            if block.setup:
                self._exec(numbered(block.setup, block.setup_line), path)
            if block.file is not None:
                self.write(block)
            elif block.cli:
                self.commands(block)
            else:
                self._exec(numbered(block.code, block.line + 1), path)
        except Exception as error:
            self.failed = block
            raise BlockFailed(
                f"{block.id}: the block raised {type(error).__name__}: {error}\n\n"
                f"{_md_traceback(error)}\n{HOW_TO_MARK}"
            ) from error

    def write(self, block: Block) -> None:
        """A `file=` block: written (or added to), its folder importable, its module fresh."""
        assert block.file is not None
        target = self.folder / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        earlier = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(_joined(earlier, block.code), encoding="utf-8")
        if not self.importable:
            sys.path.insert(0, str(self.folder))
            self.importable = True
        for name in self._modules():  # imported again from the file as it is now
            if Path(getattr(sys.modules[name], "__file__", "") or "") == target:
                self.retired.append(sys.modules.pop(name))  # earlier blocks may still use it
        importlib.invalidate_caches()

    def commands(self, block: Block) -> None:
        """A `cli` block: each `$ refinekit ...` command in process, then its checks."""
        from refinekit.cli import main

        commands = block.commands
        output = ""
        for number, command in enumerate(commands, 1):
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    status = main(shlex.split(command)[1:])
                except SystemExit as e:  # argparse's usage errors
                    status = int(e.code or 0)
            output = out.getvalue() + err.getvalue()
            wanted = block.status if number == len(commands) else 0
            if status != wanted:
                raise AssertionError(
                    f"$ {command}\nexited {status}, the page expects {wanted}; it printed:\n"
                    f"{output}"
                )
        for text in block.expect:
            if text not in output:
                raise AssertionError(
                    f"$ {commands[-1]}\nprinted no {text!r} (expect=); it printed:\n{output}"
                )
        for name in block.creates:
            if not (self.folder / name).is_file():
                raise AssertionError(f"$ {commands[-1]}\nmade no file {name} (creates=)")

    def _modules(self) -> list[str]:
        """The modules imported from files in the page's folder."""
        folder = self.folder.resolve()
        found = []
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str) and Path(file).resolve().is_relative_to(folder):
                found.append(name)
        return found

    @staticmethod
    def _close_clients(module: Any) -> None:
        for value in list(vars(module).values()):
            if isinstance(value, openai.OpenAI):
                value.close()  # the page's clients, as the program's exit would
            elif isinstance(value, openai.AsyncOpenAI):
                asyncio.run(value.close())

    def _exec(self, source: str, path: str) -> None:
        code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, self.module.__dict__)
        if inspect.iscoroutine(result):  # the block awaits at top level, as in a notebook
            asyncio.run(result)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_clients(self.module)  # the blocks' clients
        for name in self._modules():  # what the blocks imported from the page's files
            self.retired.append(sys.modules.pop(name))
        for module in self.retired:
            self._close_clients(module)
        if self.importable:
            sys.path.remove(str(self.folder))
        sys.modules.pop(self.module.__name__, None)
        self.module.__dict__.clear()
        self.stack.close()
        for name, level in _log_levels().items():
            if self.log_levels.get(name, logging.NOTSET) != level:
                logging.getLogger(name).setLevel(self.log_levels.get(name, logging.NOTSET))
        otel = sys.modules.get("refinekit.otel")
        if otel is not None and otel.is_instrumented():  # docs/tracing.md switches it on
            otel.uninstrument()


class PageRuns(dict[str, PageRun]):
    """The pages' runs in this session; a page starts afresh when its first block runs again."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        super().__init__()
        self.tmp = tmp

    def start(self, page: str) -> PageRun:
        if page in self:
            self[page].close()
        slug = re.sub(r"\W", "_", page.removesuffix(".md"))
        run = self[page] = PageRun(page, self.tmp.mktemp(slug), BY_PAGE[page])
        return run


@pytest.fixture(scope="session")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageRuns]:
    runs = PageRuns(tmp_path_factory)
    yield runs
    for run in runs.values():
        run.close()


@pytest.fixture
def docs_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Dummy keys, a dead local endpoint, and no host but 127.0.0.1 reachable."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", DEAD_ENDPOINT)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", DEAD_ENDPOINT.removesuffix("/v1"))
    monkeypatch.delenv("REFINEKIT_JUDGE_MODEL", raising=False)
    real_getaddrinfo = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in _LOCAL_HOSTS:
            raise OSError(f"docs tests reach no network but 127.0.0.1 (the block tried {name})")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    return monkeypatch


def _run_exec_block(block: Block, runs: PageRuns, env: pytest.MonkeyPatch) -> None:
    run = runs.get(block.page)
    index = BY_PAGE[block.page].index(block)
    if run is None or run.closed or run.next > index:
        run = runs.start(block.page)
    env.chdir(run.folder)
    for key, value in run.env.items():
        env.setenv(key, value)
    while run.next < index and run.failed is None:  # the blocks before it, as its setup
        earlier = run.blocks[run.next]
        run.next += 1
        if earlier.skip is None and not earlier.pytest:
            with suppress(BlockFailed):  # recorded in run.failed
                run.execute(earlier, env)
    if run.failed is not None:
        pytest.fail(
            f"{block.id}: not run: the block at {run.failed.id} before it on the page failed "
            "(its own test says why)",
            pytrace=False,
        )
    run.next = index + 1
    failure = None
    try:
        run.execute(block, env)
    except BlockFailed as error:
        failure = str(error)
    finally:
        if not any(b.skip is None and not b.pytest for b in run.blocks[index + 1 :]):
            run.close()  # the page's last block: its server and clients go now
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def _joined(earlier: str, code: str) -> str:
    """A file's text with a block's code added at its end (a blank line between)."""
    return f"{earlier.rstrip()}\n\n\n{code}\n" if earlier.strip() else f"{code}\n"


@functools.cache
def _warm_http_stack() -> None:
    """Import what the openai clients import at their first request, in this process.

    When the pytester fixture ends, it removes every module first imported while it was in
    use. The HTTP core (httpcore, h11, anyio's backends) is imported at a client's first
    request, so a block run first would import it, lose it, and leave the next run's copy raising
    exception classes the retained openai and httpx modules do not know (a read timeout then
    surfaced as `APIConnectionError`, not `APITimeoutError`).
    """
    with ScriptedOpenAI() as server:
        server.script("warm", ["ok", "ok"])
        with server.client() as client:
            client.chat.completions.create(model="warm", messages=[])

        async def warm() -> None:
            async with server.async_client() as client:
                await client.chat.completions.create(model="warm", messages=[])

        asyncio.run(warm())


def _run_pytest_block(block: Block, page_blocks: list[Block], pytester: pytest.Pytester) -> None:
    """The block as a test module, after the page's earlier `pytest` blocks: all must pass.

    The files the page's `file=` blocks wrote before it are in the test's folder, so the
    module imports them as the reader's tests do.
    """
    parts = []
    files: dict[str, str] = {}
    for b in page_blocks:
        if b.pytest and b.line <= block.line and b.skip is None:
            parts += [b.setup, f"# {b.id}\n{b.code}"]
        elif b.file is not None and b.line < block.line and b.skip is None:
            files[b.file] = _joined(files.get(b.file, ""), b.code)
    for name, text in files.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(text, encoding="utf-8")
    pytester.makeini(PYTESTER_INI)
    name = "test_" + re.sub(r"\W", "_", block.id)
    pytester.makepyfile(**{name: "\n\n".join(p for p in parts if p)})
    # the page's own run may have imported a module of the same name from its folder
    modules = [n.removesuffix(".py").replace("/", ".") for n in files if n.endswith(".py")]
    hidden = {n: sys.modules.pop(n) for n in modules if n in sys.modules}
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    finally:
        sys.modules.update(hidden)
    outcomes = result.parseoutcomes()
    output = "\n".join(result.outlines)
    defines_tests = re.search(r"^\s*(async\s+)?def test_", block.code, re.MULTILINE)
    ok = not any(outcomes.get(k) for k in ("failed", "errors", "error", "skipped", "xfailed"))
    ok = ok and (outcomes.get("passed", 0) > 0 if defines_tests else result.ret in (0, 5))
    if not ok:
        pytest.fail(
            f"{block.id}: the block's tests did not all pass under pytest "
            f"({outcomes}):\n{output}\n{HOW_TO_MARK}",
            pytrace=False,
        )


@pytest.mark.parametrize("block", PARAMS)
def test_block_runs(
    block: Block | MarkerError,
    page_runs: PageRuns,
    docs_env: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if isinstance(block, MarkerError):
        pytest.fail(str(block), pytrace=False)
    if block.skip is not None:
        pytest.skip(f"{block.id}: {block.skip}")
    if block.pytest:
        _warm_http_stack()  # before pytester's fixture takes its snapshot of sys.modules
        _run_pytest_block(block, BY_PAGE[block.page], request.getfixturevalue("pytester"))
    else:
        _run_exec_block(block, page_runs, docs_env)


def test_every_page_is_in_the_index() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages - linked == set(), "pages missing from docs/index.md"
    assert linked - pages - {"README.md"} == set(), "docs/index.md links pages that do not exist"
    assert "(docs/index.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_page_is_in_the_readmes_documentation_list() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)(?:#[\w-]*)?\)", readme))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "pages missing from README.md's Documentation list"


def test_every_example_is_linked_from_a_page() -> None:
    # an example no page names is one a reader never finds
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    examples = {p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_")}
    linked = set(re.findall(r"examples/([\w.-]+\.py)", text))
    assert examples - linked == set(), "examples no page of docs/ or README.md links"


# What the user-facing files must not hold: a path of the machine they were written on (a
# home, a checkout, a temporary folder, an interpreter), a lock file of the team's, or words
# addressed to the people who wrote them rather than to the reader.
_MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:work|root|tmp|home|Users|private/var|var/folders)/|"
    r"[A-Za-z]:\\Users\\|\bflock\b|\.lock\b"
)
_DEVELOPER_WORDS = re.compile(
    r"\b(?:the|this|that|an|our) issue\b|\bissues? \d+|\bissue #?\d+|"
    r"\b(?:this|that|last|next|previous|earlier) (?:session|stop)\b|"
    r"\bworktree\b|\bthe lead\b|\bthe brief\b",
    re.IGNORECASE,
)
USER_FILES = [
    *PAGES,
    *sorted((ROOT / "examples").rglob("*.py")),
    *sorted((ROOT / "examples").rglob("*.md")),
]


def _offending(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in USER_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for hit in pattern.finditer(line):
                found.append(
                    f"{path.relative_to(ROOT)}:{number}: {hit.group()!r} in {line.strip()!r}"
                )
    return found


def test_user_docs_hold_no_path_of_a_development_machine() -> None:
    # paths in the docs are relative to the repository (or the reader's own folder)
    assert _offending(_MACHINE_PATH) == []


def test_user_docs_speak_to_users_not_to_the_people_who_wrote_them() -> None:
    assert _offending(_DEVELOPER_WORDS) == []


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """page.md in tmp_path, the folder the docs' pages are read under (docs_blocks.ROOT)."""
    monkeypatch.setattr(docs_blocks, "ROOT", tmp_path)
    return tmp_path / "page.md"


def test_markers_are_read_as_documented(page: Path) -> None:
    marked = (
        "```python\nx = 1\n```\n\n"
        '<!-- docs-test: skip reason="a signature" -->\n\n'
        "```python\nf(x: int) -> str\n```\n\n"
        "<!-- docs-test: needs=placeholders,scripted_server\n"
        "call_model.script('yes')\n"
        "-->\n"
    )
    page.write_text(
        "Text.\n\n"
        + marked
        + "- item:\n\n"  # not a fence: the marker above must be right before one
        "  ```python\n  y = 2\n  ```\n",
        encoding="utf-8",
    )
    with pytest.raises(MarkerError, match=r"page\.md:13: a docs-test comment must come right"):
        blocks(page)
    page.write_text(
        marked + "  ```python\n  y = 2\n  ```\n"
        "<!-- docs-test: pytest -->\n"
        "```python\ndef test_it(): pass\n```\n",
        encoding="utf-8",
    )
    first, skipped, stubbed, as_test = blocks(page)
    assert (first.id, first.code, first.skip, first.needs) == ("page.md:1", "x = 1", None, ())
    assert (skipped.line, skipped.skip) == (7, "a signature")
    assert stubbed.needs == ("placeholders", "scripted_server")
    assert (stubbed.setup, stubbed.setup_line, stubbed.code) == (
        "call_model.script('yes')",
        12,
        "y = 2",
    )
    assert as_test.pytest
    assert not stubbed.pytest


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("<!-- docs-test: skip -->", "a skip says why"),
        ("<!-- docs-test: needs=network -->", "the harness provides placeholders"),
        ("<!-- docs-test: sikp -->", "unknown docs-test option 'sikp'"),
    ],
)
def test_a_bad_marker_says_what_to_write(page: Path, marker: str, message: str) -> None:
    page.write_text(f"{marker}\n```python\nx = 1\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match=re.escape(message)):
        blocks(page)


def test_a_failing_block_says_where_and_how_to_mark_it(
    page: Path, tmp_path: Path, docs_env: pytest.MonkeyPatch
) -> None:
    page.write_text(
        "```python\nanswer = 42\n```\n\nThen:\n\n"
        "```python\nprint(answer)\nprint(call_model)\n```\n",
        encoding="utf-8",
    )
    first, second = blocks(page)
    run = PageRun("page.md", tmp_path, [first, second])
    try:
        run.execute(first, docs_env)
        with pytest.raises(BlockFailed) as failed:  # `answer` came from the block before
            run.execute(second, docs_env)
    finally:
        run.close()
    message = str(failed.value)
    assert message.startswith("page.md:7: the block raised NameError: name 'call_model'")
    assert 'page.md", line 9, in <module>' in message  # the page's own line numbers
    assert "<!-- docs-test: needs=placeholders -->" in message
    assert '<!-- docs-test: skip reason="..." -->' in message
    assert run.failed is second


def test_a_block_reaches_no_host_but_127_0_0_1(
    page: Path, tmp_path: Path, docs_env: pytest.MonkeyPatch
) -> None:
    page.write_text(
        "```python\nimport socket\nsocket.create_connection(('example.com', 443))\n```\n",
        encoding="utf-8",
    )
    (block,) = blocks(page)
    run = PageRun("page.md", tmp_path, [block])
    try:
        with pytest.raises(BlockFailed, match=r"no network but 127\.0\.0\.1 .*example\.com"):
            run.execute(block, docs_env)
    finally:
        run.close()


def test_a_pytest_block_whose_test_fails_fails(page: Path, pytester: pytest.Pytester) -> None:
    page.write_text(
        "<!-- docs-test: pytest -->\n```python\nimport pytest\n\n\n"
        "@pytest.fixture\ndef city():\n    return 'Paris'\n```\n\n"
        "<!-- docs-test: pytest -->\n```python\ndef test_city(city):\n"
        "    assert city == 'Rome'\n```\n",
        encoding="utf-8",
    )
    fixture, test = blocks(page)
    _run_pytest_block(fixture, [fixture, test], pytester)  # no test of its own: it imports
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:12: .*'failed': 1"):
        _run_pytest_block(test, [fixture, test], pytester)


def test_file_and_cli_markers_are_read_as_documented(page: Path) -> None:
    page.write_text(
        "<!-- docs-test: file=app.py -->\n```python\nX = 1\n```\n\n"
        "<!-- docs-test: file=data/golden.csv -->\n```text\nquestion\nq\n```\n\n"
        "```console\n$ refinekit runs\n```\n\n"  # unmarked: shown, not run
        '<!-- docs-test: cli status=1 creates=r.html,s.html expect="a b" expect=c -->\n'
        "```console\n$ refinekit eval golden.csv \\\n    --target app:f\nprinted\n"
        "$ refinekit runs\n```\n",
        encoding="utf-8",
    )
    module, data, cli = blocks(page)
    assert (module.file, module.lang, module.cli) == ("app.py", "python", False)
    assert (data.file, data.lang, data.code) == ("data/golden.csv", "text", "question\nq")
    assert cli.cli
    assert cli.file is None
    assert (cli.status, cli.creates, cli.expect) == (1, ("r.html", "s.html"), ("a b", "c"))
    assert cli.commands == ["refinekit eval golden.csv --target app:f", "refinekit runs"]


@pytest.mark.parametrize(
    ("marker", "fence", "message"),
    [
        ("<!-- docs-test: cli -->", "python", "a cli marker goes before a ```console"),
        ("<!-- docs-test: status=1 -->", "python", "status=, expect= and creates= go with cli"),
        ("<!-- docs-test: file=../x.py -->", "python", "file= names a file inside the page"),
        ("<!-- docs-test: pytest file=x.py -->", "python", "one of pytest, file= and cli"),
        ("<!-- docs-test: cli status=x -->", "console", "status= is an exit status"),
        ("<!-- docs-test: needs=placeholders -->", "console", "markers are for ```python"),
    ],
)
def test_a_bad_file_or_cli_marker_says_what_to_write(
    page: Path, marker: str, fence: str, message: str
) -> None:
    page.write_text(f"{marker}\n```{fence}\n$ refinekit runs\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match=re.escape(message)):
        blocks(page)


def test_a_cli_block_runs_only_refinekit_commands(page: Path) -> None:
    page.write_text("<!-- docs-test: cli -->\n```sh\n$ rm -rf build\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match=r"page\.md:1: a cli block runs `\$ refinekit"):
        blocks(page)
    page.write_text("<!-- docs-test: cli -->\n```sh\nrefinekit runs\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match=r"page\.md:1: a cli block with no \$ line"):
        blocks(page)


GOLDEN = "question,must_mention\nHow long?,30 days\n"
APP = "def answer(question):\n    return 'Refunds within 30 days.'\n"


@pytest.mark.parametrize(
    ("options", "failure"),
    [
        ("status=1", "exited 0, the page expects 1"),
        ('expect="(2/2)"', "printed no '(2/2)' (expect=)"),
        ("creates=report.html", "made no file report.html (creates=)"),
        ("", None),
        ('expect="pass rate 1.000 (1/1)"', None),
    ],
)
def test_a_cli_block_is_checked_by_its_exit_status_output_and_files(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docs_env: pytest.MonkeyPatch,
    options: str,
    failure: str | None,
) -> None:
    import docs_blocks

    monkeypatch.setattr(docs_blocks, "ROOT", tmp_path)
    module = f"docs_cli_app_{abs(hash(options))}"  # a name of its own: sys.modules is shared
    page = tmp_path / "page.md"
    page.write_text(
        f"<!-- docs-test: file={module}.py -->\n```python\n{APP}```\n\n"
        f"<!-- docs-test: file=golden.csv -->\n```text\n{GOLDEN}```\n\n"
        f"<!-- docs-test: cli {options} -->\n"
        f"```console\n$ refinekit eval golden.csv --target {module}:answer\n```\n",
        encoding="utf-8",
    )
    app, golden, cli = blocks(page)
    folder = tmp_path / "run"
    folder.mkdir()
    docs_env.chdir(folder)
    run = PageRun("page.md", folder, [app, golden, cli])
    try:
        run.execute(app, docs_env)
        run.execute(golden, docs_env)
        assert (folder / "golden.csv").read_text(encoding="utf-8") == GOLDEN
        if failure is None:
            run.execute(cli, docs_env)
        else:
            with pytest.raises(BlockFailed, match=re.escape(failure)):
                run.execute(cli, docs_env)
    finally:
        run.close()
    assert module not in sys.modules  # the page's modules go with the page
    assert str(folder) not in sys.path


def test_a_file_written_twice_grows_and_is_imported_afresh(
    page: Path, tmp_path: Path, docs_env: pytest.MonkeyPatch
) -> None:
    page.write_text(
        "<!-- docs-test: file=docs_grown_app.py -->\n```python\nA = 1\n```\n\n"
        "```python\nfrom docs_grown_app import A\n```\n\n"
        "<!-- docs-test: file=docs_grown_app.py -->\n```python\nB = A + 1\n```\n\n"
        "```python\nfrom docs_grown_app import B\nassert B == 2\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    run = PageRun("page.md", tmp_path, found)
    try:
        for block in found:
            run.execute(block, docs_env)
        assert (tmp_path / "docs_grown_app.py").read_text() == "A = 1\n\n\nB = A + 1\n"
    finally:
        run.close()
    assert "docs_grown_app" not in sys.modules
