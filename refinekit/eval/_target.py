"""The answer function and the judge of a run: loaded by name, and how a row becomes a call."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.errors import UsageProblem
from .._engine.evaluators import as_evaluator, evaluator_name
from ._cases import Case
from ._golden import column_for

__all__ = ["Target", "load_judge", "load_object", "module_form", "name_of"]


def module_form(spec: str, what: str) -> str:
    """`spec`, with a file path before its colon turned into the module the file is.

    `app/answers.py:answer` (or `app/answers:answer`) is `app.answers:answer`: the file's
    path relative to the folder it is imported from, which is the deepest folder holding it
    among the current folder and `sys.path`. A spec without a path is returned as it is.

    Raises:
        UsageProblem: No such file, or it is in no folder Python imports from.
    """
    module, sep, attribute = spec.rpartition(":")
    if not sep or not (module.endswith(".py") or "/" in module or os.sep in module):
        return spec
    path = Path(module if module.endswith(".py") else module + ".py")
    if not path.is_file():
        raise UsageProblem(
            f"{what} {spec!r}: no file {str(path)!r}; give a file that exists, or the module "
            f"form, package.module:{attribute or 'name'}"
        )
    path = path.resolve()
    best: tuple[str, ...] | None = None
    for entry in [str(Path.cwd()), *sys.path]:
        root = Path(entry or ".").resolve()
        try:
            parts = path.relative_to(root).with_suffix("").parts
        except ValueError:
            continue
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        usable = bool(parts) and all(p.isidentifier() for p in parts)
        if usable and (best is None or len(parts) < len(best)):
            best = parts
    if best is None:
        raise UsageProblem(
            f"{what} {spec!r}: {str(path)!r} is not inside the current folder or a folder "
            "Python imports from (or its path is not a module name); run from the folder that "
            f"holds its package and give package.module:{attribute or 'name'}"
        )
    return ".".join(best) + ":" + attribute


def load_object(spec: str, what: str) -> Any:
    """The object a `package.module:attribute` names (the current folder is importable).

    A file path before the colon (`app/answers.py:answer`) is taken as its module form (see
    `module_form`).

    Raises:
        UsageProblem: The spec is malformed, the module cannot be imported or lacks the name.
    """
    spec = module_form(spec, what)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageProblem(
            f"{what} must look like package.module:name (e.g. myapp.answers:answer), got {spec!r}"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise UsageProblem(
                f"{what} {spec!r}: no module named {e.name!r} (run from the folder it is "
                "importable from, or install its package)"
            ) from None
        raise UsageProblem(f"{what} {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:
        raise UsageProblem(
            f"{what} {spec!r}: importing {module_name!r} raised {type(e).__name__}: {e}"
        ) from e
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageProblem(f"{what} {spec!r}: {module_name!r} has no {attribute!r}") from None
    return obj


def name_of(obj: Any, *, evaluator: bool = False) -> str:
    """The name a run stores for an object given itself rather than by `module:name`.

    A function or class is `module:qualified.name`; another object (an evaluator instance)
    its evaluator name when `evaluator`, else its type's `module:name`.
    """
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    if evaluator:
        return evaluator_name(obj)
    return f"{type(obj).__module__}:{type(obj).__qualname__}"


def load_judge(spec: str) -> Any:
    """The `--judge` object, checked to be something that can judge (an evaluator).

    Raises:
        UsageProblem: As `load_object`, or the object is not an evaluator.
    """
    return check_judge(load_object(spec, "--judge"), spec)


def check_judge(judge: Any, name: str) -> Any:
    """`judge`, checked to be something that can judge (an evaluator).

    Raises:
        UsageProblem: It is not an evaluator.
    """
    try:
        as_evaluator(judge)
    except TypeError as e:
        raise UsageProblem(f"--judge {name!r}: {e}") from None
    return judge


_SKIPPED_PARAMETERS = {"self", "cls", "feedback"}


@dataclass(frozen=True)
class Target:
    """The answer function, and how a row becomes its arguments."""

    function: Callable[..., Any]
    spec: str
    columns: Mapping[str, str]  # parameter -> column
    question_parameter: str | None  # gets the question when no parameter names a column
    required: frozenset[str] = frozenset()  # parameters without a default

    @classmethod
    def load(cls, spec: str, columns: list[str]) -> Target:
        """The function `spec` (`module:function`) names, mapped onto the file's columns.

        Raises:
            UsageProblem: As `load_object`, or as `of`.
        """
        spec = module_form(spec, "--target")  # the run stores one name for one function
        return cls.of(load_object(spec, "--target"), spec, columns)

    @classmethod
    def of(cls, function: Any, spec: str, columns: list[str]) -> Target:
        """`function`, called `spec`, mapped onto the file's columns.

        Raises:
            UsageProblem: It is not callable, or a parameter without a default has no column.
        """
        if not callable(function):
            raise UsageProblem(f"--target {spec!r} is a {type(function).__name__}, not a function")
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return cls(function, spec, {}, None)
        mapping: dict[str, str] = {}
        required: set[str] = set()
        positional: list[str] = []
        missing: list[str] = []
        for name, parameter in signature.parameters.items():
            if name in _SKIPPED_PARAMETERS or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                continue
            column = column_for(name, columns, loose=True)
            if column is not None and parameter.kind != parameter.POSITIONAL_ONLY:
                mapping[name] = column
                if parameter.default is parameter.empty:
                    required.add(name)
            elif parameter.default is parameter.empty:
                if parameter.kind != parameter.KEYWORD_ONLY:
                    positional.append(name)
                missing.append(name)
        question = None
        if not mapping and len(positional) == 1 and missing == positional:
            question, missing = positional[0], []
        if missing:
            raise UsageProblem(
                f"--target {spec!r} needs {', '.join(repr(m) for m in missing)}, and the file "
                f"has no column of that name; columns: {columns}. Name the function's "
                "parameters after columns (or give it one parameter, which gets the question)."
            )
        return cls(function, spec, mapping, question, frozenset(required))

    def check(self, cases: Sequence[Case]) -> None:
        """Every row has a value for every parameter without a default (JSONL rows vary).

        Raises:
            UsageProblem: Rows lacking one, named.
        """
        for name in sorted(self.required):
            column = self.columns[name]
            lacking = [c.position for c in cases if column not in c.row]
            if lacking:
                rows = ", ".join(map(str, lacking[:10])) + (" ..." if len(lacking) > 10 else "")
                which = f"rows {rows} have" if len(lacking) > 1 else f"row {rows} has"
                raise UsageProblem(
                    f"--target {self.spec!r} needs {name!r}, and {which} no {column!r}; give "
                    "every row that field, or the parameter a default"
                )

    def arguments(self, case: Case) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments: a row's fields by parameter (a field it lacks: the default)."""
        if self.question_parameter is not None:
            return (case.question,), {}
        return (), {
            name: case.row[column] for name, column in self.columns.items() if column in case.row
        }
