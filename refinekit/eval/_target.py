"""The answer function and the judge of a run: loaded by name, and how a row becomes a call."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.errors import UsageProblem
from .._core.objects import load_object, module_form
from .._engine.evaluators import as_evaluator, evaluator_name
from ._cases import Case
from ._golden import column_for

__all__ = ["Target", "load_judge", "name_of"]


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
