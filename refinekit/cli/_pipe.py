"""Standard output whose reader went away (`refinekit ... | head`): stop writing, quietly.

A command-line tool whose reader stops reading ends without a word. Python, which ignores
SIGPIPE, raises `BrokenPipeError` on the next write instead (or at the last flush, where it
prints "Exception ignored" and exits 120). So every `refinekit` command writes through
`PipeSafe`, and `main` flushes standard output itself before it returns. SIGPIPE is not
restored to its default: that would also kill the process when a model endpoint's socket
closes under a write.

What happens then depends on the command's work. `eval` and `calibrate` finish their run
without printing (it is stored, `--report` is written, the gates decide the exit status);
the demo, whose work is what it prints, stops at once (`ReaderGone`) and exits 0, as
ripgrep does.
"""

from __future__ import annotations

import os
from typing import TextIO

from .._core.errors import ReaderGone

__all__ = ["PipeSafe", "ReaderGone", "discard", "flush_quietly"]


def discard(stream: TextIO) -> None:
    """Point the stream's file descriptor at the null device.

    What is still buffered, and every later write, goes nowhere without an error, the
    interpreter's last flush included. A stream without a descriptor is left alone.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def flush_quietly(stream: TextIO) -> None:
    """Flush a stream; when its reader went away, discard what is left instead."""
    try:
        stream.flush()
    except BrokenPipeError:
        discard(stream)
    except (OSError, ValueError):  # closed, or not a real stream: nothing to flush
        pass


class PipeSafe:
    """A text stream that writes nothing more, without an error, once its reader has gone.

    Args:
        stream: The stream to write to.
        stop: Raise `ReaderGone` when the reader goes (the command's only work is printing)
            instead of carrying on without output.
    """

    def __init__(self, stream: TextIO, *, stop: bool = False) -> None:
        self.stream = stream
        self.stop = stop
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._lost()

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def _lost(self) -> None:
        self.gone = True
        discard(self.stream)
        if self.stop:
            raise ReaderGone from None
