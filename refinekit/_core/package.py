"""What the package says of itself: its version, and the module its public names show."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["rehome", "version"]

_UNKNOWN = "0+unknown"


def version() -> str:
    """Refinekit's version: the installed distribution's, else a source checkout's.

    The one place it is written is `pyproject.toml`: an installed refinekit (an editable
    install too) reads it from its metadata; a checkout put on `sys.path` without installing
    reads it from the `pyproject.toml` beside the package.
    """
    try:
        return importlib.metadata.version("refinekit")
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return _UNKNOWN
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    found = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.MULTILINE)
    return found.group(1) if found else _UNKNOWN


def rehome(namespace: Mapping[str, Any], names: Iterable[str], module: str) -> None:
    """Show the public classes and functions in `names` as `module.<name>` (as httpx does).

    Only those still shown under a private module (`refinekit._x`, `refinekit.judges._x`) are
    changed, so a name a subpackage re-exports from the top-level package keeps its home.
    A class's own annotations are resolved first, in the module that defines it: whoever reads
    its type hints later (pydantic, for a subclass or for a field of that type) does not look
    them up in `module`.
    """
    for name in names:
        obj = namespace[name]
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # a module, a type alias
        if "._" not in obj.__module__:
            continue
        if inspect.isclass(obj):
            _resolve_annotations(obj)
        obj.__module__ = module


def _resolve_annotations(cls: type) -> None:
    own = inspect.get_annotations(cls)
    if not any(isinstance(a, str) for a in own.values()):
        return
    hints = typing.get_type_hints(cls, include_extras=True)
    cls.__annotations__ = {name: hints.get(name, hint) for name, hint in own.items()}
    if dataclasses.is_dataclass(cls):  # a dataclass field keeps its own copy of the hint
        for field in dataclasses.fields(cls):
            if isinstance(field.type, str) and field.name in hints:
                field.type = hints[field.name]
