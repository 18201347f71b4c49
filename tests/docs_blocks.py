"""The Python blocks of README.md and docs/*.md, and the markers that say how each one runs.

A block runs as it is unless the HTML comment right before its fence (blank lines between are
allowed) says otherwise. The comment does not render::

    <!-- docs-test: needs=placeholders,scripted_server -->
    <!-- docs-test: skip reason="a signature, not code" -->
    <!-- docs-test: pytest -->
    <!-- docs-test: file=helpdesk.py -->
    <!-- docs-test: cli status=1 creates=report.html expect="pass rate 0.750 (3/4)" -->
    <!-- docs-test: needs=scripted_server
    server.script("gpt-4o-mini", ["Yes"])
    -->

Options:

- `needs=NAME[,NAME]`: stubs the harness provides (`NEEDS` below) before the block runs, kept
  for the rest of the page;
- `skip reason="..."`: a signature or a fragment: reported as a skipped test with the reason;
- `pytest`: the block is a test module: pytest runs it (with the page's earlier `pytest`
  blocks before it), and its tests must pass;
- `file=NAME`: the block (of any language) is a file the reader saves: it is written to NAME
  in the page's folder (added to the end of it when an earlier block wrote NAME), not run;
  the folder is importable by the page's blocks, and a `pytest` block gets the files too;
- `cli`: the block (```console, ```sh or ```text) shows `$ refinekit ...` commands (a line
  ending in a backslash goes on): each is run in process in the page's folder, the lines
  after it are what it printed for the page, not compared. `status=N` is the exit status the
  last command must end with (default 0; the others must end with 0), `expect="TEXT"` a text
  its output must contain (as often as needed), `creates=PATH[,PATH]` files that must exist
  afterwards;
- lines after the options, up to `-->`: code run before the block, unseen by readers (data a
  stub replies with, an import the page's prose implies).

See docs/architecture.md, "Docs that run".
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# What `needs=` may name. Each is documented where the harness provides it (tests/test_docs.py).
NEEDS = {
    "placeholders": "retrieve, build_prompt, call_model, ask_model: the app of the examples",
    "scripted_server": "server: a ScriptedOpenAI on 127.0.0.1; OPENAI_/ANTHROPIC_BASE_URL at it",
}

MARKER = "docs-test:"
CLI_LANGS = ("console", "sh", "text")
_OPEN_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_CLOSE_FENCE = re.compile(r"^\s*```\s*$")
_COMMENT_START = re.compile(r"^\s*<!--\s*docs-test:(?P<rest>.*)$")


class MarkerError(ValueError):
    """A `docs-test` comment the harness cannot read; the message says where and why."""


@dataclass(frozen=True)
class Block:
    """One ```python block of a page, with what its marker says."""

    page: str  # relative to the repository: "docs/judges.md"
    line: int  # the line of the opening fence, from 1
    code: str  # dedented
    needs: tuple[str, ...] = ()
    skip: str | None = None  # the reason, when skipped
    pytest: bool = False
    setup: str = ""  # the marker's hidden code
    setup_line: int = 0  # the line of its first line
    lang: str = "python"
    file: str | None = None  # `file=`: where the block is written, relative to the page's folder
    cli: bool = False
    status: int = 0
    expect: tuple[str, ...] = ()
    creates: tuple[str, ...] = ()

    @property
    def commands(self) -> list[str]:
        """A `cli` block's commands: its `$ ` lines, each with the lines its backslashes join."""
        found: list[str] = []
        lines = iter(self.code.splitlines())
        for line in lines:
            if not line.startswith("$ "):
                continue
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1].rstrip() + " " + next(lines, "").strip()
            found.append(command)
        return found

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class _Marker:
    needs: tuple[str, ...] = ()
    skip: str | None = None
    pytest: bool = False
    setup: str = ""
    setup_line: int = 0
    file: str | None = None
    cli: bool = False
    status: int = 0
    expect: tuple[str, ...] = ()
    creates: tuple[str, ...] = ()


def _parse_options(where: str, text: str) -> _Marker:
    marker = _Marker()
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise MarkerError(f"{where}: cannot read the docs-test options {text!r}: {error}") from None
    skip = False
    reason = None
    for word in words:
        if word == "skip":
            skip = True
        elif word.startswith("reason="):
            reason = word.removeprefix("reason=").strip()
        elif word == "pytest":
            marker.pytest = True
        elif word.startswith("file="):
            name = word.removeprefix("file=")
            if not name or name.startswith("/") or ".." in Path(name).parts:
                raise MarkerError(f"{where}: file= names a file inside the page's folder: {name!r}")
            marker.file = name
        elif word == "cli":
            marker.cli = True
        elif word.startswith("status="):
            try:
                marker.status = int(word.removeprefix("status="))
            except ValueError:
                raise MarkerError(
                    f"{where}: status= is an exit status (a number): {word!r}"
                ) from None
        elif word.startswith("expect="):
            marker.expect += (word.removeprefix("expect="),)
        elif word.startswith("creates="):
            marker.creates += tuple(n for n in word.removeprefix("creates=").split(",") if n)
        elif word.startswith("needs="):
            names = tuple(n for n in word.removeprefix("needs=").split(",") if n)
            unknown = [n for n in names if n not in NEEDS]
            if unknown or not names:
                raise MarkerError(
                    f"{where}: needs={','.join(names)}: the harness provides "
                    + ", ".join(f"{k} ({v})" for k, v in NEEDS.items())
                )
            marker.needs = names
        else:
            raise MarkerError(
                f"{where}: unknown docs-test option {word!r}; the options are "
                'needs=NAME[,NAME], skip reason="...", pytest, file=NAME, cli (with status=N, '
                'expect="TEXT", creates=PATH)'
            )
    if skip != (reason is not None) or reason == "":
        raise MarkerError(f'{where}: a skip says why: <!-- docs-test: skip reason="..." -->')
    marker.skip = reason
    if (marker.status or marker.expect or marker.creates) and not marker.cli:
        raise MarkerError(f"{where}: status=, expect= and creates= go with cli")
    if sum((marker.pytest, marker.file is not None, marker.cli)) > 1:
        raise MarkerError(f"{where}: a block is one of pytest, file= and cli")
    return marker


def blocks(path: Path) -> list[Block]:
    """The page's ```python blocks in order, each with its marker; `MarkerError` on a bad one."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    pending: tuple[int, _Marker] | None = None  # a marker waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        start = _COMMENT_START.match(line)
        fence = _OPEN_FENCE.match(line)
        if start:
            if pending is not None:
                raise MarkerError(
                    f"{page}:{pending[0]}: a docs-test comment with no block after it"
                )
            rest = start.group("rest")
            first = i + 1
            if "-->" in rest:
                options, body, body_line = rest.split("-->", 1)[0], [], 0
            else:
                options, body, body_line = rest, [], i + 2
                i += 1
                while i < len(lines) and "-->" not in lines[i]:
                    body.append(lines[i])
                    i += 1
                if i == len(lines):
                    raise MarkerError(f"{page}:{first}: a docs-test comment never closed (-->)")
                if lines[i].split("-->", 1)[0].strip():
                    raise MarkerError(f"{page}:{i + 1}: put the closing --> on a line of its own")
            marker = _parse_options(f"{page}:{first}", options)
            marker.setup = textwrap.dedent("\n".join(body))
            marker.setup_line = body_line
            pending = (first, marker)
        elif fence:
            close = i + 1
            while close < len(lines) and not _CLOSE_FENCE.match(lines[close]):
                close += 1
            lang = fence.group("lang")
            marker = pending[1] if pending is not None else _Marker()
            where = f"{page}:{pending[0] if pending is not None else i + 1}"
            if pending is not None and marker.cli and lang not in CLI_LANGS:
                raise MarkerError(
                    f"{where}: a cli marker goes before a ```console, ```sh or "
                    f"```text block, not ```{lang}"
                )
            if lang == "python" or marker.cli or marker.file is not None:
                code = textwrap.dedent("\n".join(lines[i + 1 : close]))
                block = Block(
                    page=page,
                    line=i + 1,
                    code=code,
                    needs=marker.needs,
                    skip=marker.skip,
                    pytest=marker.pytest,
                    setup=marker.setup,
                    setup_line=marker.setup_line,
                    lang=lang,
                    file=marker.file,
                    cli=marker.cli,
                    status=marker.status,
                    expect=marker.expect,
                    creates=marker.creates,
                )
                if block.cli and not block.commands:
                    raise MarkerError(f"{where}: a cli block with no $ line")
                if block.cli and any(not c.startswith("refinekit ") for c in block.commands):
                    raise MarkerError(f"{where}: a cli block runs `$ refinekit ...` commands only")
                found.append(block)
            elif pending is not None:
                raise MarkerError(
                    f"{page}:{pending[0]}: a docs-test comment before a ```{lang} block: "
                    "markers are for ```python blocks, and for cli and file= blocks"
                )
            pending = None
            i = close
        elif line.strip() and pending is not None:
            raise MarkerError(
                f"{page}:{pending[0]}: a docs-test comment must come right before a ```python "
                "fence (blank lines only between)"
            )
        i += 1
    if pending is not None:
        raise MarkerError(f"{page}:{pending[0]}: a docs-test comment with no block after it")
    return found


def numbered(code: str, line: int) -> str:
    """`code` padded so that its line numbers are those of the page (for tracebacks)."""
    return "\n" * (line - 1) + code
