"""What refinekit takes as a schema: a type to validate JSON against, never a callable to call.

`pydantic.TypeAdapter` accepts more than types: given a function it validates the JSON as
the function's arguments and *calls* it, and given a dict it takes it for a core schema. A
schema (`@self_correct(schema=...)`, `checks.json_schema(...)`) is the type of the value the
reply must be, so those are refused with a `TypeError` that says what to pass instead.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing

from pydantic import BaseModel

__all__ = ["require_type"]

_TYPING_MODULES = frozenset({"typing", "typing_extensions"})

_WHAT_TO_PASS = (
    "Pass the type of the value the reply must be: a class (a pydantic model, a dataclass, a "
    "TypedDict, int, ...) or a typing form pydantic.TypeAdapter accepts (list[Item], "
    "dict[str, int], Item | None, Literal[...], Annotated[...])."
)


def _is_type_form(schema: object) -> bool:
    """A class, or a typing form: `list[Item]`, `Item | None`, `Literal[...]`, `Any`, ..."""
    if inspect.isroutine(schema) or isinstance(schema, functools.partial):
        return False
    if isinstance(schema, type):
        return True
    if typing.get_origin(schema) is not None:  # list[Item], Annotated, Literal, unions
        return True
    # Any (a special form before 3.11), NewType, TypeVar, TypeAliasType
    return type(schema).__module__ in _TYPING_MODULES


def _what(schema: object) -> tuple[str, str]:
    """Why `schema` is refused, in words, and a hint of what to pass instead ("" for none)."""
    call_it = (
        " (pydantic would call it with the reply's fields instead of validating them)",
        " To transform the value, call your function on the validated value.",
    )
    if inspect.ismethod(schema):
        owner = schema.__self__
        if isinstance(owner, type):  # Invoice.model_validate_json: the class was meant
            name = f"{owner.__qualname__}.{schema.__name__}"
            return f"the method {name} is not a type", f" Pass {owner.__qualname__} itself."
        return f"the method {schema.__qualname__} is not a type" + call_it[0], call_it[1]
    if isinstance(schema, functools.partial):
        name = getattr(schema.func, "__qualname__", type(schema.func).__qualname__)
        return f"a functools.partial of {name} is not a type" + call_it[0], call_it[1]
    if inspect.isroutine(schema):
        name = str(getattr(schema, "__qualname__", None) or type(schema).__qualname__)
        return f"the function {name} is not a type" + call_it[0], call_it[1]
    if schema is None:
        return "None is not a type", ""
    if isinstance(schema, str):
        return f"the string {schema[:60]!r} is not a type", " Pass the type itself, not its name."
    cls = type(schema).__qualname__
    if isinstance(schema, BaseModel) or dataclasses.is_dataclass(schema):
        return f"an instance of {cls} is not a type", f" Pass {cls} itself."
    return f"an instance of {cls} is not a type", ""


def require_type(schema: object, where: str) -> None:
    """Raise `TypeError` unless `schema` is a class or a typing form.

    Args:
        schema: What the caller passed as a schema.
        where: The call, for the message: `"self_correct(schema=...)"`.

    Raises:
        TypeError: `schema` is a function, a method, a lambda, a string or another instance.
    """
    if _is_type_form(schema):
        return
    what, hint = _what(schema)
    raise TypeError(f"{where}: {what}. {_WHAT_TO_PASS}{hint}")
