"""Tool calls recorded while a decorated call (or one attempt) runs: the judge's evidence.

`@refinekit.tool` adds each call of a tool to the current recorder; the decorators open one
around each call of the function they wrap (`start_recording` / `stop_recording`) and put
what it recorded into the `EvaluationRequest` they judge.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from .._core.types import ToolCall

__all__ = ["Recorder", "current_recorder", "start_recording", "stop_recording"]


class Recorder:
    """The tool calls made while one decorated call (or one attempt) runs.

    Recorders nest: a tool call is recorded by the innermost recorder and every one around it,
    so an outer `@retry_on_low_quality` sees the tools an inner decorated function called.
    """

    __slots__ = ("_token", "calls", "direct", "parent")

    def __init__(self, parent: Recorder | None) -> None:
        self.parent = parent
        self.calls: list[ToolCall] = []
        self.direct: ToolCall | None = None  # the last return_direct call, if any
        self._token: Token[Recorder | None] | None = None

    def add(self, call: ToolCall, direct: bool) -> None:
        """Record `call` here and in every recorder around this one."""
        recorder: Recorder | None = self
        while recorder is not None:
            recorder.calls.append(call)
            if direct:
                recorder.direct = call
            recorder = recorder.parent


_RECORDER: ContextVar[Recorder | None] = ContextVar("refinekit_tool_recorder", default=None)


def start_recording() -> Recorder:
    """Open a recorder in the current context; close it with `stop_recording`."""
    recorder = Recorder(_RECORDER.get())
    recorder._token = _RECORDER.set(recorder)
    return recorder


def stop_recording(recorder: Recorder) -> None:
    """Close a recorder `start_recording` opened (the one around it is current again)."""
    if recorder._token is not None:
        _RECORDER.reset(recorder._token)
        recorder._token = None


def current_recorder() -> Recorder | None:
    """The innermost open recorder, or None outside every refinekit call."""
    return _RECORDER.get()
