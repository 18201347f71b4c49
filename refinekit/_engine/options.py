"""A decorator's options, one frozen dataclass: checked once, changed by `retry_with`, pickled.

Each decorator's options are a subclass of `Options`: its fields are the decorator's keyword
arguments with their defaults, and `__post_init__` checks them (raising what the decorator
raises when decorating) and keeps what it makes of them (an adapted evaluator, a parser) in
fields of `init=False`. The decorator makes one (`Options.of`) and returns its `decorate`;
`fn.retry_with(**changes)` is `dataclasses.replace` of it (`changed`), decorating the same
function again.

A decorated function that pickles by value (defined in `__main__` or inside a function, see
`Decorated.__reduce__`) carries its options and its function, pickled with cloudpickle, and
is decorated again when unpickled (`by_value`): the options pickle as the keyword arguments
they were made of, and are checked again.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar, ParamSpec, TypeVar

__all__ = ["Options", "by_value", "signature_of"]

OptionsT = TypeVar("OptionsT", bound="Options")
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Options:
    """What a decorator was given: a frozen dataclass, its fields the keyword arguments.

    A subclass names its decorator (`decorator`), the configuration it makes for a function
    (`config`, through `configure`: called when decorating, and for a method's signature
    without `self`/`cls`) and how it decorates one (`decorate`, the decorator the decorator
    function returns).
    """

    decorator: ClassVar[str] = "refinekit"
    config: ClassVar[Callable[..., Any]]
    """Makes the configuration for a function: `config(fn, options)`."""

    @classmethod
    def of(cls: type[OptionsT], options: dict[str, Any]) -> OptionsT:
        """The options of these keyword arguments; an unknown one is a `TypeError`, as a call's."""
        unknown = _unknown(cls, options)
        if unknown is not None:
            raise TypeError(f"{cls.decorator}() got an unexpected keyword argument {unknown!r}")
        for f in dataclasses.fields(cls):
            given = f.name in options or not f.init
            if not given and f.default is MISSING and f.default_factory is MISSING:
                raise TypeError(
                    f"{cls.decorator}() missing 1 required keyword-only argument: {f.name!r}"
                )
        return cls(**options)

    def changed(self: OptionsT, changes: dict[str, Any]) -> OptionsT:
        """These options with `changes` (`retry_with`), checked again; these unchanged."""
        unknown = _unknown(type(self), changes)
        if unknown is not None:
            raise TypeError(f"retry_with(): @{self.decorator} takes no option {unknown!r}")
        return dataclasses.replace(self, **changes)

    def given(self) -> dict[str, Any]:
        """The keyword arguments these options were made of."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def keep(self, **made: Any) -> None:
        """Keep what `__post_init__` made of the options (fields of `init=False`)."""
        for name, value in made.items():
            object.__setattr__(self, name, value)

    def configure(self, fn: Callable[..., Any]) -> Any:
        """The decorator's configuration for `fn` (its name and signature)."""
        return self.config(fn, self)

    def decorate(self, fn: Any) -> Any:
        """`fn` decorated with these options."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # As the keyword arguments they were made of: what they made is made again.
        return (_remade, (type(self), self.given()))


def _unknown(cls: type[Options], options: dict[str, Any]) -> str | None:
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return next((name for name in options if name not in names), None)


def _remade(cls: type[OptionsT], options: dict[str, Any]) -> OptionsT:
    return cls(**options)


def signature_of(options: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Give a function the signature of an options class: its arguments are the fields.

    For type checkers (a `ParamSpec` taken from the class) and for `help()` and IDEs (its
    `__signature__`), so that a function's arguments are written once, as its options'
    fields, and it takes them as `**options` (a decorator's, `refinekit.eval.run`'s).
    """
    shown = inspect.signature(options)

    def give(fn: Callable[..., R]) -> Callable[P, R]:
        returns = inspect.signature(fn).return_annotation
        fn.__signature__ = shown.replace(return_annotation=returns)  # type: ignore[attr-defined]
        return fn

    return give


# --- pickling by value ---------------------------------------------------------------------------


class _PicklingByValue(threading.local):
    """The decorated objects this thread is pickling by value (a recursive one goes by name)."""

    def __init__(self) -> None:
        self.ids: set[int] = set()


_pickling_by_value = _PicklingByValue()


def by_value(decorated: Any) -> str | tuple[Any, ...]:
    """What `Decorated.__reduce__` returns: its name, or its options and function by value.

    By name (the module attribute `__qualname__` names) when it is importable from a module
    other than `__main__`. Otherwise by value, with cloudpickle: its options and function,
    decorated again when unpickled.
    """
    if _by_reference(decorated):
        return str(decorated._function)
    dumps = _cloudpickle_dumps()
    if dumps is None or id(decorated) in _pickling_by_value.ids:
        if decorated.__module__ == "__main__":
            # What `pickle` does with a function of `__main__`: its name (the same process,
            # or multiprocessing's children, which import the main module).
            return str(decorated._function)
        raise pickle.PicklingError(
            f"cannot pickle {decorated!r}: it is defined inside a function, so it pickles by "
            "value, which takes cloudpickle (pip install cloudpickle); or define it at "
            "module level"
        )
    _pickling_by_value.ids.add(id(decorated))
    try:
        payload = dumps((decorated._options, decorated._original, decorated._method))
    except Exception as e:
        raise pickle.PicklingError(
            f"cannot pickle {decorated!r} by value (it is defined in __main__ or inside a "
            f"function): the function or an option of @{decorated._decorator} does not pickle "
            f"({type(e).__name__}: {e}); define it in an importable module, so that it "
            "pickles by name, or make the option picklable"
        ) from None
    finally:
        _pickling_by_value.ids.discard(id(decorated))
    return (_unpickle_by_value, (payload,))


def _by_reference(decorated: Any) -> bool:
    """Whether unpickling `decorated` by its module and qualified name finds it again."""
    module_name = getattr(decorated, "__module__", None)
    if not isinstance(module_name, str) or module_name == "__main__":
        return False
    found: Any = sys.modules.get(module_name)
    if found is None:
        return False
    for part in decorated._function.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    return found is decorated


def _cloudpickle_dumps() -> Callable[[Any], bytes] | None:
    """The `dumps` of cloudpickle (Ray's own copy when Ray is loaded and cloudpickle is not)."""
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        if "ray" not in sys.modules:
            return None
        try:
            from ray import cloudpickle  # type: ignore[import-not-found,import-untyped,no-redef,unused-ignore]
        except ImportError:  # pragma: no cover - a Ray without its cloudpickle
            return None
    return cloudpickle.dumps  # type: ignore[no-any-return]


def _unpickle_by_value(payload: bytes) -> Any:
    """A decorated object pickled by value: its function decorated again with its options."""
    options, original, method = pickle.loads(payload)
    made = options.decorate(original)
    if method:  # an instance method (its class's `__set_name__` is not called again)
        made._method = True
        made._plain = False
    return made
