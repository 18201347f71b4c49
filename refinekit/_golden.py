"""Golden and labelled data files: CSV or JSONL rows, shared by the pytest plugin and the CLI."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ._errors import RefinekitError

__all__ = ["DataFileError", "column_for", "file_sha256", "read_rows", "row_key", "slug"]


class DataFileError(RefinekitError, ValueError):
    """A golden or labelled file that cannot be used: missing, unreadable, wrong shape."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV (header row first) or JSONL (one object a line) file.

    Raises:
        DataFileError: The file is missing or unreadable, is neither .csv nor .jsonl, or a
            line is not a JSON object.
    """
    if not path.is_file():
        raise DataFileError(f"file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:
                return [
                    {str(k): ("" if v is None else v) for k, v in row.items() if k is not None}
                    for row in csv.DictReader(f)
                ]
        except (UnicodeDecodeError, csv.Error) as e:
            raise DataFileError(f"{path}: not a UTF-8 CSV file ({e})") from None
        except OSError as e:
            raise DataFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    if suffix in (".jsonl", ".ndjson"):
        rows: list[dict[str, Any]] = []
        try:
            with path.open(encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataFileError(f"{path}, line {number}: not JSON ({e})") from None
                    row = _without_lone_surrogates(row)
                    if not isinstance(row, dict):
                        raise DataFileError(f"{path}, line {number}: not a JSON object")
                    rows.append(row)
        except UnicodeDecodeError as e:
            raise DataFileError(f"{path}: not a UTF-8 file ({e})") from None
        except OSError as e:
            raise DataFileError(f"{path}: cannot read it ({e.strerror or e})") from None
        return rows
    raise DataFileError(f"{path}: use a .csv or .jsonl file, not {suffix or 'no suffix'!r}")


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
    """The column a name reads: its exact name, else spaces and dashes as underscores.

    With `loose`, also case- and style-insensitive (`expectedSource`, `Expected source` and
    `expected_source` are one column), as the CLI's well-known columns are matched.
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


def slug(value: Any, limit: int = 30) -> str:
    """A short readable id made of a value: letters and digits, dashes between."""
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
