"""The wrapper every refinekit decorator puts around a function: join the job, run the flow.

A decorator supplies its flow (`flow(cfg, fn, args, kwargs, job, record)`, a generator from
`refinekit._engine.flow`) and its options (`refinekit._engine.options.Options`), which make
its configuration for a function; `wrap` gives back a `Decorated` object with `fn`'s metadata
that, on each call, joins the current job (or opens one, closed again when the call ends) and
drives the flow with `run_sync`, or with `run_async` when `fn` is async to call (see
`refinekit._engine.bridge.is_async_callable`: an `async def`, a partial of one, an object with
an `async def __call__`). With a tracer installed (`refinekit.otel.instrument()`), the call
runs inside its `call` context (a span); otherwise that costs one check.

Methods. A `Decorated` is a descriptor, as a function is: looked up on an instance it gives a
bound view calling the method with that instance; a `classmethod` or `staticmethod` given to
the decorator (the refinekit decorator above it) binds the class, or nothing. Whichever the
order, the receiver (`self`, `cls`) is never one of the call's arguments the decorator reads:
the configuration of a bound call is made for the function's signature without its first
parameter (`receiverless`), so the question, the conversation and the evaluator's request
come from the arguments after it. Nothing is stored on the instance, and no state is kept per
instance.

`fn.outcome(...)` makes the same call with a `Record` for the flow to fill, and returns the
`Outcome`; `fn.retry_with(**changes)` decorates the same function again with the decorator's
options changed (`Options.changed`); `fn.stream(...)` makes the same call consumed as it runs:
an iterator (an async iterator when `fn` is async to call) of the items the flow emits, then
the item the decorator's `last` makes of its value (`refinekit._engine.stream_calls`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Literal, TypeVar, cast

from . import events as _hooks
from .bridge import is_async_callable
from .flow import Flow, run_async, run_sync
from .job import Job, enter_job, leave_job
from .options import Options, by_value
from .outcome import Outcome, Record
from .request import function_name
from .stream_calls import AsyncItemStream, ItemStream, Last, stream_async, stream_sync
from .stream_commands import LISTENING

__all__ = ["Decorated", "wrap"]

C = TypeVar("C")


FlowOf = Callable[
    [C, Callable[..., Any], tuple[Any, ...], dict[str, Any], Job, "Record | None"], Flow[Any]
]
"""A decorator's flow: `(cfg, fn, args, kwargs, job, record) -> Flow`; `record` is None on a
plain call, and the `Record` to fill on `fn.outcome(...)`."""

Kind = Literal["function", "class", "static"]

_WRAPPER_ASSIGNMENTS = ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__")


def _drive_sync(
    flow: FlowOf[Any],
    cfg: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    job: Job,
    record: Record | None,
) -> Any:
    """Run the flow with `run_sync`, inside the instruments' `call` context (when installed).

    A call is never streamed, even inside another decorated call's `fn.stream(...)`: its flow
    runs with `listening()` False, so it behaves as a call does (it emits nothing anyway).
    """
    heard = LISTENING.set(False) if LISTENING.get() else None
    try:
        if not _hooks.instruments:
            return run_sync(flow(cfg, fn, args, kwargs, job, record))
        with _hooks.observed_call(flow, cfg, job):
            return run_sync(flow(cfg, fn, args, kwargs, job, record))
    finally:
        if heard is not None:
            LISTENING.reset(heard)


async def _drive_async(
    flow: FlowOf[Any],
    cfg: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    job: Job,
    record: Record | None,
) -> Any:
    """Run the flow with `run_async`, inside the instruments' `call` context (when installed).

    Never streamed, as `_drive_sync`.
    """
    heard = LISTENING.set(False) if LISTENING.get() else None
    try:
        if not _hooks.instruments:
            return await run_async(flow(cfg, fn, args, kwargs, job, record))
        with _hooks.observed_call(flow, cfg, job):
            return await run_async(flow(cfg, fn, args, kwargs, job, record))
    finally:
        if heard is not None:
            LISTENING.reset(heard)


class _Receiverless:
    """Stands for a method without its receiver: its name, and its signature minus `self`/`cls`.

    Given to a decorator's `configure`, which reads a function's name and signature only.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if params and params[0].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            params = params[1:]
        self.__qualname__ = function_name(fn)
        self.__name__ = getattr(fn, "__name__", self.__qualname__)
        self.__signature__ = signature.replace(parameters=params)

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        raise TypeError("a signature stand-in is not called")

    @staticmethod
    def of(fn: Callable[..., Any]) -> _Receiverless:
        """The stand-in for `fn`: async to call when `fn` is (an escalation ladder asks)."""
        is_async = is_async_callable(fn) or inspect.isasyncgenfunction(fn)
        return _AsyncReceiverless(fn) if is_async else _Receiverless(fn)


class _AsyncReceiverless(_Receiverless):
    """`_Receiverless` of an `async def` method."""

    async def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise TypeError("a signature stand-in is not called")


class Decorated(Generic[C]):
    """A function decorated by refinekit: call it, get its `.outcome(...)`, or `.retry_with()`.

    Made by `wrap`; `AsyncDecorated` is the same for a function that is async to call.
    """

    _bound_class: type[Bound[Any]]

    def __init__(
        self,
        fn: Any,
        flow: FlowOf[C],
        options: Options,
        last: Last | None = None,
    ) -> None:
        kind: Kind = "function"
        target = fn
        if isinstance(fn, classmethod):
            kind, target = "class", fn.__func__
        elif isinstance(fn, staticmethod):
            kind, target = "static", fn.__func__
        elif isinstance(fn, Decorated):
            kind = fn._kind  # a refinekit decorator under this one binds as that one does
        for name in _WRAPPER_ASSIGNMENTS:
            try:
                value = getattr(target, name)
            except AttributeError:
                continue
            setattr(self, name, value)
        self._function = function_name(target)
        if not isinstance(getattr(self, "__name__", None), str):  # a callable object
            self.__name__ = self.__qualname__ = self._function
        self.__wrapped__ = target
        namespace = getattr(target, "__globals__", None)  # where string annotations resolve
        if isinstance(namespace, dict):
            self.__globals__ = namespace
        self._original = fn
        self._fn: Any = target
        self._kind: Kind = kind
        self._flow = flow
        self._options = options
        # The budget a call opens its job with (`budget=` of the decorator), if any.
        self._budget = getattr(options, "job_budget", None)
        self._configure: Callable[[Callable[..., Any]], C] = options.configure
        self._decorator = options.decorator
        self._last = last
        self._owner: type | None = None
        self._method = False  # an instance method: a call through the class passes `self`
        self._cfg: C | None = None
        self._bound_cfg: C | None = None
        # Bad options are refused when decorating: the configuration is made now.
        if kind == "class":
            self._bound_cfg = self._configure(_Receiverless.of(target))
        else:
            self._cfg = self._configure(target)
        self._plain = kind != "class"  # a direct call calls `_fn` with `_cfg` as it is

    # --- binding -------------------------------------------------------------------------------

    def __set_name__(self, owner: type, name: str) -> None:
        """Defined in a class body: a plain function is then an instance method."""
        self._owner = owner
        if self._kind == "function" and hasattr(type(self._fn), "__get__"):
            # (a callable object without `__get__` is not bound in a class: not a method)
            self._method = True
            self._plain = False
            self.bound_config()  # a bad signature without `self` is refused now
        if isinstance(self._fn, Decorated):
            self._fn.__set_name__(owner, name)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """As a function does: bound to an instance (a class for a classmethod), else itself."""
        if self._kind == "static":
            return self
        if self._kind == "class":
            cls = owner if owner is not None else type(instance)
            return self._bound_class(self, cls, cls, _bind(self._fn, cls, cls))
        if instance is None:
            return self
        if not hasattr(type(self._fn), "__get__"):  # a callable object: not bound, as in Python
            return self
        return self._bound_class(self, instance, owner, _bind(self._fn, instance, owner))

    def bound_config(self) -> C:
        """The configuration of a bound call: for the signature without `self`/`cls`."""
        cfg = self._bound_cfg
        if cfg is None:
            cfg = self._bound_cfg = self._configure(_Receiverless.of(self._fn))
        return cfg

    def _target(self, args: tuple[Any, ...]) -> tuple[Callable[..., Any], C, tuple[Any, ...]]:
        """What a direct call calls, with which configuration and arguments."""
        if self._method and args:  # `Class.method(instance, ...)`
            return _bind(self._fn, args[0], self._owner), self.bound_config(), args[1:]
        cfg = self._cfg
        if cfg is None:  # a classmethod's object called as it is
            cfg = self._cfg = self._configure(self._fn)
        return self._fn, cfg, args

    # --- variants ------------------------------------------------------------------------------

    def retry_with(self, **changes: Any) -> Any:
        """The same function decorated again with these options changed; this one unchanged.

        Args:
            **changes: Options of the decorator (as its keyword arguments), e.g.
                `max_retries=5` for `@retry_on_low_quality`.

        Returns:
            A new decorated function (bound to the same instance when this one is bound).

        Raises:
            TypeError: An option the decorator does not take.
            ValueError: A value the decorator refuses.
        """
        made = self._options.changed(changes).decorate(self._original)
        if isinstance(made, Decorated) and self._owner is not None:
            made.__set_name__(self._owner, getattr(self, "__name__", self._function))
        return made

    def _outcome_of(self, value: Any, record: Record) -> Outcome[Any]:
        return record.outcome(value, self._decorator, self._function)

    def __repr__(self) -> str:
        return f"<refinekit @{self._decorator} {self._function}>"

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Pickled as a function is: by name where the name finds it, else by value.

        By name (the module attribute `__qualname__` names) when it is importable from a
        module other than `__main__`: unpickling gives the very object. Otherwise (defined in
        `__main__`, inside a function, or not reachable by its name) by value, as cloudpickle
        pickles such a function: the function and the decorator's options, pickled with
        cloudpickle and decorated again when unpickled (`refinekit._engine.options`). No job,
        budget or usage is in either: those belong to a call (see `refinekit.Job`).
        """
        return by_value(self)


class SyncDecorated(Decorated[C]):
    """A decorated `def` function: the call runs the flow with `run_sync`."""

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        if self._plain:  # the common case, without a call more
            fn, cfg = self._fn, self._cfg
        else:
            fn, cfg, args = self._target(args)
        job, token = enter_job(self._budget)
        try:
            return _drive_sync(self._flow, cfg, fn, args, kwargs, job, None)
        finally:
            leave_job(token)

    def _call(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        job, token = enter_job(self._budget)
        try:
            return _drive_sync(self._flow, cfg, fn, args, kwargs, job, None)
        finally:
            leave_job(token)

    def outcome(self, /, *args: Any, **kwargs: Any) -> Outcome[Any]:
        """Call the function as `fn(*args, **kwargs)` does; return what the call did.

        Returns:
            The `Outcome`: the value, the attempts and their verdicts, the usage.

        Raises:
            Exception: Whatever `fn(*args, **kwargs)` raises, the same exception.
        """
        fn, cfg, args = self._target(args)
        return self._outcome(fn, cfg, args, kwargs)

    def _outcome(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome[Any]:
        job, token = enter_job(self._budget)
        try:
            record = Record(job)
            value = _drive_sync(self._flow, cfg, fn, args, kwargs, job, record)
            return self._outcome_of(value, record)
        finally:
            leave_job(token)

    def stream(self, /, *args: Any, **kwargs: Any) -> ItemStream[Any]:
        """Call the function as `fn(*args, **kwargs)` does, consumed as it runs.

        Nothing runs before the first item is asked for. See docs/streaming.md for the items
        each decorator yields.

        Returns:
            An iterator of the call's items (closing it early stops the call).

        Raises:
            Exception: While iterating, whatever `fn(*args, **kwargs)` raises.
        """
        fn, cfg, args = self._target(args)
        return self._stream(fn, cfg, args, kwargs)

    def _stream(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ItemStream[Any]:
        return ItemStream(stream_sync(self._flow, cfg, self._budget, fn, args, kwargs, self._last))


class AsyncDecorated(Decorated[C]):
    """A decorated function that is async to call: the call runs the flow with `run_async`."""

    async def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        if self._plain:  # the common case, without a call more
            fn, cfg = self._fn, self._cfg
        else:
            fn, cfg, args = self._target(args)
        job, token = enter_job(self._budget)
        try:
            return await _drive_async(self._flow, cfg, fn, args, kwargs, job, None)
        finally:
            leave_job(token)

    # `inspect.iscoroutinefunction()` (so FastAPI, pytest, ...) sees a coroutine function, on
    # every Python: it reads the code flags of a function-like object.
    __code__ = __call__.__code__
    __defaults__ = None
    __kwdefaults__ = None

    async def _call(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        job, token = enter_job(self._budget)
        try:
            return await _drive_async(self._flow, cfg, fn, args, kwargs, job, None)
        finally:
            leave_job(token)

    def outcome(self, /, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Outcome[Any]]:
        """Call the function as `fn(*args, **kwargs)` does; return what the call did.

        Returns:
            A coroutine: awaited, the `Outcome` (the value, the attempts and their verdicts,
            the usage).

        Raises:
            Exception: Whatever awaiting `fn(*args, **kwargs)` raises, the same exception.
        """
        fn, cfg, args = self._target(args)
        return self._outcome(fn, cfg, args, kwargs)

    async def _outcome(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome[Any]:
        job, token = enter_job(self._budget)
        try:
            record = Record(job)
            value = await _drive_async(self._flow, cfg, fn, args, kwargs, job, record)
            return self._outcome_of(value, record)
        finally:
            leave_job(token)

    def stream(self, /, *args: Any, **kwargs: Any) -> AsyncItemStream[Any]:
        """Call the function as `fn(*args, **kwargs)` does, consumed as it runs.

        Use it with `async for`; nothing runs before the first item is asked for. See
        docs/streaming.md for the items each decorator yields.

        Returns:
            An async iterator of the call's items (`aclose()` stops the call).

        Raises:
            Exception: While iterating, whatever awaiting `fn(*args, **kwargs)` raises.
        """
        fn, cfg, args = self._target(args)
        return self._stream(fn, cfg, args, kwargs)

    def _stream(
        self, fn: Callable[..., Any], cfg: C, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncItemStream[Any]:
        return AsyncItemStream(
            stream_async(self._flow, cfg, self._budget, fn, args, kwargs, self._last)
        )


def _bind(fn: Any, instance: Any, owner: type | None) -> Callable[..., Any]:
    get = getattr(type(fn), "__get__", None)
    if get is None:
        return fn  # type: ignore[no-any-return]
    return get(fn, instance, owner)  # type: ignore[no-any-return]


class Bound(Generic[C]):
    """A decorated method looked up on an instance (a class, for a classmethod).

    Calls it with the instance as its receiver; holds nothing else of the instance.
    """

    __slots__ = ("__self__", "__wrapped__", "_decorated", "_owner")

    def __init__(
        self, decorated: Decorated[C], instance: Any, owner: type | None, fn: Callable[..., Any]
    ) -> None:
        self._decorated = decorated
        self.__self__ = instance
        self._owner = owner
        self.__wrapped__ = fn  # the bound method: `inspect.signature` leaves out `self`

    def __getattr__(self, name: str) -> Any:
        # `__name__`, `__qualname__`, `__annotations__`, `outcome`'s docstring, ...
        if name == "_decorated":  # not set yet (a copy being made): nothing to delegate to
            raise AttributeError(name)
        return getattr(self._decorated, name)

    def __reduce__(self) -> tuple[Any, ...]:
        # As a bound method pickles: the attribute of its instance (or class).
        return (getattr, (self.__self__, self._decorated.__name__))

    def retry_with(self, **changes: Any) -> Any:
        """The decorated method with these options changed, bound to the same instance.

        See `Decorated.retry_with`.
        """
        made = self._decorated.retry_with(**changes)
        return made.__get__(self.__self__, self._owner)

    def __repr__(self) -> str:
        return f"<bound refinekit method {self._decorated._function} of {self.__self__!r}>"


class SyncBound(Bound[C]):
    """A bound decorated `def` method."""

    __slots__ = ()

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        decorated = cast("SyncDecorated[C]", self._decorated)
        return decorated._call(self.__wrapped__, decorated.bound_config(), args, kwargs)

    def outcome(self, /, *args: Any, **kwargs: Any) -> Outcome[Any]:
        """See `SyncDecorated.outcome`."""
        decorated = cast("SyncDecorated[C]", self._decorated)
        return decorated._outcome(self.__wrapped__, decorated.bound_config(), args, kwargs)

    def stream(self, /, *args: Any, **kwargs: Any) -> ItemStream[Any]:
        """See `SyncDecorated.stream`."""
        decorated = cast("SyncDecorated[C]", self._decorated)
        return decorated._stream(self.__wrapped__, decorated.bound_config(), args, kwargs)


class AsyncBound(Bound[C]):
    """A bound decorated method that is async to call."""

    __slots__ = ()

    async def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        decorated = cast("AsyncDecorated[C]", self._decorated)
        return await decorated._call(self.__wrapped__, decorated.bound_config(), args, kwargs)

    __code__ = __call__.__code__
    __defaults__ = None
    __kwdefaults__ = None

    def outcome(self, /, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Outcome[Any]]:
        """See `AsyncDecorated.outcome`."""
        decorated = cast("AsyncDecorated[C]", self._decorated)
        return decorated._outcome(self.__wrapped__, decorated.bound_config(), args, kwargs)

    def stream(self, /, *args: Any, **kwargs: Any) -> AsyncItemStream[Any]:
        """See `AsyncDecorated.stream`."""
        decorated = cast("AsyncDecorated[C]", self._decorated)
        return decorated._stream(self.__wrapped__, decorated.bound_config(), args, kwargs)


SyncDecorated._bound_class = SyncBound
AsyncDecorated._bound_class = AsyncBound
for _bound in (SyncBound, AsyncBound):  # a bound method's docstring is its function's
    _bound.__doc__ = property(lambda self: self._decorated.__doc__)  # type: ignore[assignment]
del _bound


def wrap(
    fn: Any,
    flow: FlowOf[C],
    options: Options,
    *,
    last: Last | None = None,
) -> Decorated[C]:
    """`fn` decorated: each call runs `flow(cfg, fn, args, kwargs, job, record)` in the job.

    Args:
        fn: The function (a `classmethod` or `staticmethod` object too).
        flow: The decorator's flow.
        options: The decorator's options (checked when made): their `configure` makes the
            configuration for a function (its name and signature), called when decorating,
            and for a method's signature without `self`/`cls`; their `decorator` names the
            decorator (`Outcome.decorator`); `retry_with` changes them.
        last: What `fn.stream(...)` yields last, made of the flow's value (None: nothing).

    Returns:
        An `AsyncDecorated` when `fn` is async to call, else a `SyncDecorated`; either keeps
        `fn`'s name, docstring and signature (`inspect.signature` follows `__wrapped__`).
    """
    target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    # an async generator function (of text deltas, say) is async to call too: its stream is
    cls: type[Decorated[C]] = (
        AsyncDecorated
        if is_async_callable(target) or inspect.isasyncgenfunction(target)
        else SyncDecorated
    )
    return cls(fn, flow, options, last)
