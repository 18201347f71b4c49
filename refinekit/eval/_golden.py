"""Golden and labelled data files: CSV or JSONL rows, shared by the pytest plugin and the CLI."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._core.errors import DataFileError
from .._core.jsonload import MAX_DEPTH, TooDeep, loads

__all__ = [
    "DataFileError",
    "case_slug",
    "column_for",
    "file_sha256",
    "numbered_rows",
    "read_golden",
    "row_key",
]


def read_golden(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a golden (or labelled) file, as `run` and `@pytest.mark.golden` read it.

    A CSV file (header row first) or a JSONL file (one JSON object a line); blank lines are
    skipped, and a CSV row must have exactly as many values as the header has columns.

    Args:
        path: The file, `.csv` or `.jsonl`.

    Returns:
        Each row as a dict of its columns, in file order.

    Raises:
        DataFileError: The file cannot be read, or a row is malformed; the message names the
            line where the bad row starts.
    """
    return [row for _, row in numbered_rows(Path(path))]


def numbered_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """A data file's rows, each with the line it starts on: CSV (header first) or JSONL.

    Blank lines are skipped. A CSV row must have exactly as many values as the header has
    columns, and each header name must be given once; a column without a name is dropped
    when it holds no value in any row (as a spreadsheet's trailing commas).

    Raises:
        DataFileError: The file is missing, a folder or unreadable, is neither .csv nor
            .jsonl, a CSV row has more or fewer values than the header, a quote is never
            closed, a header name is repeated (or missing over a value), or a JSONL line is
            not a JSON object (or nests one more than `_core.jsonload.MAX_DEPTH`, 200, levels
            deep). The message names the line where the bad row starts.
    """
    if path.is_dir():
        raise DataFileError(f"{path} is a folder, not a .csv or .jsonl file")
    if not path.is_file():
        raise DataFileError(f"file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:
                return _csv_rows(path, f)
        except UnicodeDecodeError as e:
            raise DataFileError(f"{path}: not a UTF-8 CSV file ({e})") from None
        except OSError as e:
            raise DataFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    if suffix in (".jsonl", ".ndjson"):
        rows: list[tuple[int, dict[str, Any]]] = []
        try:
            with path.open(encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = loads(line)
                    except TooDeep:
                        raise DataFileError(
                            f"{path}, line {number}: a value nested more than {MAX_DEPTH} "
                            "levels deep (refinekit reads JSON up to that depth); flatten it"
                        ) from None
                    except ValueError as e:  # JSONDecodeError, or an integer past 4300 digits
                        raise DataFileError(f"{path}, line {number}: not JSON ({e})") from None
                    row = _without_lone_surrogates(row)
                    if not isinstance(row, dict):
                        raise DataFileError(f"{path}, line {number}: not a JSON object")
                    rows.append((number, row))
        except UnicodeDecodeError as e:
            raise DataFileError(f"{path}: not a UTF-8 file ({e})") from None
        except OSError as e:
            raise DataFileError(f"{path}: cannot read it ({e.strerror or e})") from None
        return rows
    raise DataFileError(f"{path}: use a .csv or .jsonl file, not {suffix or 'no suffix'!r}")


_QUOTING = (
    'a value with a comma, a quote or a line break goes in double quotes ("Pen, or pencil?"), '
    'with a quote inside it doubled ("say ""hi""")'
)


def _csv_rows(path: Path, lines: Iterable[str]) -> list[tuple[int, dict[str, Any]]]:
    """A CSV file's rows, strictly: every row as wide as the header, every quote closed.

    A quoted value may span lines, so a row is named by the line it starts on.
    """
    reader = csv.reader(lines, strict=True)
    header: list[str] | None = None
    named: list[int] = []  # the header's columns that have a name
    unnamed: list[int] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    while True:
        start = reader.line_num + 1  # the physical line this row starts on
        try:
            fields = next(reader)
        except StopIteration:
            return rows
        except csv.Error as e:
            if "unexpected end of data" in str(e):
                raise DataFileError(
                    f"{path}, line {start}: a quote opened in this row is never closed (the "
                    f"row runs to the end of the file); {_QUOTING}"
                ) from None
            raise DataFileError(f"{path}, line {start}: not valid CSV ({e}); {_QUOTING}") from None
        if not fields:  # a blank line
            continue
        if header is None:
            header = fields
            named, unnamed = _header(path, start, header)
            continue
        if len(fields) != len(header):
            end = reader.line_num
            where = f"line {start}" if end == start else f"lines {start}-{end}"
            fix = (
                _QUOTING
                if len(fields) > len(header)
                else "give every column a value, an empty one too (a comma with nothing after it)"
            )
            raise DataFileError(
                f"{path}, {where}: {_values(len(fields))}, but the header has "
                f"{len(header)} columns ({', '.join(header)}); {fix}"
            )
        for i in unnamed:
            if fields[i].strip():
                raise DataFileError(
                    f"{path}, line {start}: value {fields[i]!r} is in column {i + 1}, which "
                    "has no name in the header; name the column, or delete the value"
                )
        rows.append((start, {header[i]: fields[i] for i in named}))


def _values(n: int) -> str:
    return "1 value" if n == 1 else f"{n} values"


def _header(path: Path, line: int, header: list[str]) -> tuple[list[int], list[int]]:
    """The indexes of the named and unnamed columns; a name given twice is an error."""
    seen: dict[str, int] = {}
    named, unnamed = [], []
    for i, name in enumerate(header):
        key = name.strip()
        if not key:
            unnamed.append(i)
            continue
        if key in seen:
            raise DataFileError(
                f"{path}, line {line}: the header names column {key!r} twice (columns "
                f"{seen[key] + 1} and {i + 1}); give each column a name of its own"
            )
        seen[key] = i
        named.append(i)
    if not named:
        raise DataFileError(f"{path}, line {line}: the header row names no column")
    return named, unnamed


def _without_lone_surrogates(value: Any) -> Any:
    """Strings with a lone UTF-16 surrogate (JSON can escape one) get `?` in its place.

    No file or database can hold such a string, so it would fail a run halfway.
    """
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def normalise(name: str) -> str:
    """A column name folded for matching: `Must mention`, `must-mention` -> `must_mention`."""
    return re.sub(r"[\s\-]+", "_", name.strip())


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", normalise(name)).lower()


def column_for(name: str, columns: list[str], *, loose: bool = False) -> str | None:
    """The column of a golden file an argument named `name` reads.

    Its exact name, else the column whose name has spaces and dashes where `name` has
    underscores (`Must mention`, `must-mention` -> `must_mention`).

    Args:
        name: The argument's name.
        columns: The file's column names.
        loose: Also match case- and style-insensitively (`expectedSource`, `Expected source`
            and `expected_source` are one column), as a run matches its well-known columns.

    Returns:
        The column's name as the file spells it, or None when no column matches.
    """
    if name in columns:
        return name
    for column in columns:
        if normalise(column) == name:
            return column
    if loose:
        wanted = _snake(name)
        for column in columns:
            if _snake(column) == wanted:
                return column
    return None


def case_slug(value: Any, limit: int = 30) -> str:
    """A short readable id of a value, as a golden case's test id shows its first column.

    Args:
        value: The value: text, or anything JSON shows.
        limit: The most characters the id has.

    Returns:
        Lowercase letters and digits, a dash between runs of them.
    """
    text = value if isinstance(value, str) else json.dumps(value)
    return re.sub(r"[^0-9a-zA-Z]+", "-", text).strip("-").lower()[:limit].rstrip("-")


def row_key(row: dict[str, Any]) -> str:
    """A stable key of a row's content (column order ignored): a row edited is a new case."""
    canonical = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()
