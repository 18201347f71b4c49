"""`refinekit runs`: the stored runs, oldest first."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from ..eval import RunStoreError, UsageProblem, runs, store_location
from ._output import EXIT_USAGE, clean, streams

__all__ = ["runs_command"]


def runs_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`refinekit runs`: the stored runs, oldest first."""
    io = streams(out, err)
    try:
        path = store_location(args.db)
    except UsageProblem as e:
        io.error("runs", str(e))
        return EXIT_USAGE
    if isinstance(path, Path) and not path.exists():
        io.error(
            "runs",
            f"no run store at {path} (refinekit eval and calibrate make one; give --db the "
            "store they used)",
        )
        return EXIT_USAGE
    try:
        stored = runs(db=path, kind=args.kind)
    except RunStoreError as e:
        io.error("runs", str(e))
        return EXIT_USAGE
    io.say(f"{'id':>4}  {'kind':<9} {'status':<10} {'started':<16} {'figure':<22} data file")
    for r in stored:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at))
        figure = ""
        if r.summary.get("setup_failed"):
            figure = "nothing (setup failed)"
        elif r.kind == "eval" and r.summary.get("rate") is not None:
            figure = f"pass {r.summary['rate']:.3f} (>= {r.summary['lower']:.3f})"
        elif r.kind == "calibrate" and r.summary.get("kappa") is not None:
            figure = f"kappa {r.summary['kappa']:.3f}"
        io.say(
            f"{r.id:>4}  {r.kind:<9} {r.status:<10} {started:<16} {figure:<22} {clean(r.dataset)}"
        )
    return 0
