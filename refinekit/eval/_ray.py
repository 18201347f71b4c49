"""`refinekit eval --backend ray`: a run's cases answered by workers on a Ray cluster.

The driver (the `refinekit eval` process) starts the run in the store as the local backend
does, then starts `workers` Ray tasks. Each task is an ordinary worker of that run: it joins
it by id (`run_id=`), claims cases from the store, answers and judges them, and stores each
(`_session`, `_runner`); the store's claims are what share the cases out, so a task that dies
has its cases taken over as any worker's are. The driver holds its own lease while it waits
(the run reads `running`), then stores the run complete with its figures, prints the same
summary and gates, and writes the same report: the run is the same as a local one.

A task gets the data file's bytes (the workers need not see the driver's disk), and the
target and judge as they were given: a `module:name` (imported on the worker: the driver's
folder is put on the worker's path, which serves a single-machine Ray; a cluster's workers
need the module installed, or shipped by the cluster's runtime environment) or the object
itself, which Ray pickles (a decorated function pickles by name or by value, see
docs/scale.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.errors import RunAborted, UsageProblem
from ._results import CaseFinished
from ._store import StoreURL
from ._store._claims import LEASE_SECONDS

__all__ = ["RayBackend", "run_on_ray"]


@dataclass(frozen=True)
class RayBackend:
    """Where and how wide a Ray run goes.

    Attributes:
        address: The cluster's address; None for a local Ray started here (or the one
            already initialised).
        workers: The number of worker tasks; None for one per CPU of the cluster.
    """

    address: str | None = None
    workers: int | None = None


def _ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise UsageProblem("--backend ray needs Ray: pip install 'refinekit[ray]'") from None


def check_backend(
    backend: str, address: str | None, workers: int | None, db: Path | StoreURL
) -> RayBackend | None:
    """The backend a run's arguments ask for; a usage problem before anything runs."""
    if backend not in ("local", "ray"):
        raise UsageProblem(f"backend must be 'local' or 'ray', not {backend!r}")
    if backend == "local":
        if address is not None or workers is not None:
            raise UsageProblem("an address and workers are for backend='ray' (--backend ray)")
        return None
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024
    ):
        raise UsageProblem(f"workers must be a whole number from 1 to 1024, got {workers!r}")
    if address is not None and not isinstance(db, StoreURL):
        raise UsageProblem(
            "the workers of a Ray cluster need a store they all reach: give --db "
            "postgresql://... (a SQLite file serves a local Ray on this machine only)"
        )
    _ray()
    return RayBackend(address, workers)


Work = Callable[[Path, Callable[[Any], None]], None]
"""A worker's part of the run: given its copy of the run's file and a listener, it claims and
stores cases until none is left (`refinekit.eval._workflow.work`, with the run's options)."""


def _work(task: dict[str, Any]) -> int:
    """One Ray task: a worker of the run, until no case is left. How many cases it stored.

    It joins the run (the driver's lease keeps it running) and leaves it when done; the
    driver, not the task, stores the run complete.
    """
    for folder in reversed(task["path"]):  # the driver's folder, for module:name targets
        if folder not in sys.path and Path(folder).is_dir():
            sys.path.insert(0, folder)
    stored = 0

    def count(event: object) -> None:
        nonlocal stored
        if isinstance(event, CaseFinished):
            stored += 1

    with tempfile.TemporaryDirectory(prefix="refinekit-ray-") as folder:
        data = Path(folder) / task["name"]
        data.write_bytes(task["data"])
        task["work"](data, count)
    return stored


@contextlib.asynccontextmanager
async def _cluster(backend: RayBackend) -> AsyncIterator[Any]:
    """Ray, initialised for the run (and shut down after, when this run started it)."""
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        await asyncio.to_thread(
            ray.init,
            address=backend.address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


async def run_on_ray(backend: RayBackend, work: Work, dataset: Path) -> list[int]:
    """Run the run's cases on Ray workers, each doing `work` on a copy of `dataset`; wait.

    `work` carries the run's options as its workers take them (the run to join, its store),
    pickled with the target and judge as given.

    Returns:
        How many cases each worker stored.

    Raises:
        RunAborted: A worker stopped (its error is the cause); the other workers are
            cancelled, the finished cases are stored.
    """
    async with _cluster(backend) as ray:
        workers = backend.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(num_cpus=0)(_work)  # waiting on the model, not computing
        data = await asyncio.to_thread(dataset.read_bytes)
        task = {"name": dataset.name, "data": data, "path": [os.getcwd()], "work": work}
        refs = [remote.remote(task) for _ in range(workers)]
        try:
            return list(await asyncio.to_thread(ray.get, refs))
        except BaseException as e:
            _cancel_unfinished(ray, refs)
            if isinstance(e, ray.exceptions.RayTaskError):
                cause = getattr(e, "cause", None) or e
                if isinstance(cause, (UsageProblem, RunAborted)):
                    raise cause from None
                raise RunAborted(
                    f"a Ray worker of the run failed: {type(cause).__name__}: {cause}"
                ) from cause
            raise


def _cancel_unfinished(ray: Any, refs: list[Any]) -> None:
    """Cancel the tasks still running, and wait (up to a lease) until they have stopped.

    Each leaves the run as an interrupted worker does, so that when the driver says the run
    stopped, its status is already what a resume finds. Only the running ones are cancelled:
    cancelling a finished task can crash the driver (Ray 2.x).
    """
    with contextlib.suppress(Exception):
        _, running = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in running:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        if running:
            ray.wait(running, num_returns=len(running), timeout=LEASE_SECONDS)
