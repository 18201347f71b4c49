"""`refinekit.tool`: record the application's tool calls, so a judge sees the evidence."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

import pydantic_core

from .._core.types import ToolCall
from .._engine.bridge import is_async_callable
from .._engine.recorder import current_recorder

__all__ = ["tool"]

P = ParamSpec("P")
R = TypeVar("R")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError:
        return str(value)


_RECEIVERS = ("self", "cls")
"""A method's receiver, by the names PEP 8 gives it: never one of a tool call's arguments."""


def _receiver(signature: inspect.Signature) -> str | None:
    """The name of the first parameter when it is a method's receiver (`self`, `cls`)."""
    first = next(iter(signature.parameters.values()), None)
    if first is None or first.name not in _RECEIVERS:
        return None
    if first.kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None
    return first.name


def _arguments(
    signature: inspect.Signature,
    receiver: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        given = list(args[1:] if receiver is not None else args)
        return json.dumps({"args": _text(given), "kwargs": _text(kwargs)})
    arguments = dict(bound.arguments)
    if receiver is not None:
        arguments.pop(receiver, None)
    return _text(arguments)


@overload
def tool(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def tool(
    *, name: str | None = None, return_direct: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    return_direct: bool = False,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Record every call of an application tool, for the judge to see.

    Use it bare (`@refinekit.tool`) or with options. Each call made while a refinekit decorator
    runs is recorded with its arguments and its result (as text; `error: <message>` when the
    tool raised, the exception still propagating), and lands in the `tool_calls` of that
    attempt's `EvaluationRequest`. A retry re-runs the function, and so its tools. Outside any
    refinekit call the tool runs unrecorded. Works on `def` and `async def` tools, and on
    methods, classmethods and staticmethods (in either order with `@classmethod` or
    `@staticmethod`): a first parameter named `self` or `cls` is the receiver, never recorded
    as an argument.

    Args:
        fn: The tool function (when used bare).
        name: The name the judge sees; the function's name by default.
        return_direct: The tool's output is the final answer, handed straight back: an attempt
            in which such a tool ran is returned without judging.

    Returns:
        The tool, with its signature kept.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if isinstance(fn, (classmethod, staticmethod)):  # the tool is the function inside
            return type(fn)(decorate(fn.__func__))
        tool_name: str = name or getattr(fn, "__name__", None) or "tool"
        signature = inspect.signature(fn)
        receiver = _receiver(signature)

        def record(args: tuple[Any, ...], kwargs: dict[str, Any], result: str, ok: bool) -> None:
            recorder = current_recorder()
            if recorder is not None:
                call = ToolCall(
                    name=tool_name,
                    arguments=_arguments(signature, receiver, args, kwargs),
                    result=result,
                    ok=ok,
                )
                recorder.add(call, return_direct and ok)

        if is_async_callable(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    result = await fn(*args, **kwargs)
                except Exception as exc:
                    record(args, kwargs, f"error: {exc}", False)
                    raise
                record(args, kwargs, _text(result), True)
                return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                record(args, kwargs, f"error: {exc}", False)
                raise
            record(args, kwargs, _text(result), True)
            return result

        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate
