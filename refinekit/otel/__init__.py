"""OpenTelemetry tracing for refinekit's decorators and judges (`pip install "refinekit[otel]"`).

Tracing is off until you call `instrument()`, once, at start-up, as you would an
OpenTelemetry instrumentor (`HTTPXClientInstrumentor().instrument()`). Until then refinekit
imports nothing of OpenTelemetry, and this module imports it only inside `instrument()`.

    import refinekit.otel

    refinekit.otel.instrument()  # spans go to the global tracer provider

What the spans are, their attribute names (the GenAI semantic conventions, in development
status) and how to send them to an OTLP collector: docs/tracing.md.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._engine import events as _hooks

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["instrument", "is_instrumented", "uninstrument"]

_lock = threading.Lock()
_installed: list[_hooks.Instrument] = []
"""The tracer `instrument()` installed (at most one), among the engine's instruments."""


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Trace every refinekit call that starts from now on, in every thread and task.

    Each decorated call gets a span, each attempt a span under it, each evaluator's judging
    a span with a `gen_ai.evaluation.result` event for its verdict, and each judge model
    request a GenAI client span (`chat {model}`) with its token counts. Spans nest under the
    caller's current span. Calling `instrument()` again replaces the tracer provider.

    Args:
        tracer_provider: An `opentelemetry.trace.TracerProvider`; None (the default) uses the
            global one (`opentelemetry.trace.set_tracer_provider`), even one set later.

    Raises:
        ModuleNotFoundError: `opentelemetry-api` is not installed; install
            `refinekit[otel]`.
    """
    try:
        from ._tracer import OtelTracing
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        raise ModuleNotFoundError(
            "refinekit.otel.instrument() needs the OpenTelemetry API: "
            'pip install "refinekit[otel]" (or opentelemetry-api), and an SDK or distro '
            "to export the spans",
            name=exc.name,
        ) from None
    tracer = OtelTracing(tracer_provider)
    with _lock:
        _stop()
        tracer.start()
        _installed.append(tracer)
        _hooks.set_instruments((*_hooks.instruments, tracer))


def uninstrument() -> None:
    """Stop tracing: calls that start from now on make no spans. Harmless when not on."""
    with _lock:
        _stop()


def is_instrumented() -> bool:
    """Whether `instrument()` is in effect."""
    return bool(_installed)


def _stop() -> None:
    for tracer in _installed:
        _hooks.set_instruments(i for i in _hooks.instruments if i is not tracer)
        stop = getattr(tracer, "stop", None)
        if stop is not None:
            stop()
    _installed.clear()
