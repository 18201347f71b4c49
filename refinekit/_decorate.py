"""The wrapper every refinekit decorator puts around a function: join the job, run the flow.

A decorator supplies its flow (`flow(cfg, fn, args, kwargs, job)`, a generator from
`refinekit._flow`) and its configuration; `wrap` gives back a function with `fn`'s metadata
that, on each call, joins the current job (or opens one, closed again when the call ends)
and drives the flow with `run_sync`, or with `run_async` when `fn` is async to call (see
`refinekit._bridge.is_async_callable`: an `async def`, a partial of one, an object with an
`async def __call__`). With a tracer installed (`refinekit.otel.instrument()`), the call
runs inside its `call` context (a span); otherwise that costs one check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from . import _hooks
from ._bridge import is_async_callable
from ._flow import Flow, run_async, run_sync
from ._job import Job, enter_job, leave_job

__all__ = ["wrap"]

C = TypeVar("C")

FlowOf = Callable[[C, Callable[..., Any], tuple[Any, ...], dict[str, Any], Job], Flow[Any]]
"""A decorator's flow: `(cfg, fn, args, kwargs, job) -> Flow`."""


def wrap(fn: Callable[..., Any], flow: FlowOf[C], cfg: C) -> Callable[..., Any]:
    """`fn` decorated: each call runs `flow(cfg, fn, args, kwargs, job)` in the current job.

    Returns:
        An `async def` wrapper when `fn` is async to call, else a plain one; either keeps
        `fn`'s name, docstring and signature (`functools.wraps`).
    """
    if is_async_callable(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            job, token = enter_job()
            try:
                tracing = _hooks.tracing
                if tracing is None:
                    return await run_async(flow(cfg, fn, args, kwargs, job))
                with tracing.call(flow, cfg, job):
                    return await run_async(flow(cfg, fn, args, kwargs, job))
            finally:
                leave_job(token)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        job, token = enter_job()
        try:
            tracing = _hooks.tracing
            if tracing is None:
                return run_sync(flow(cfg, fn, args, kwargs, job))
            with tracing.call(flow, cfg, job):
                return run_sync(flow(cfg, fn, args, kwargs, job))
        finally:
            leave_job(token)

    return wrapper
