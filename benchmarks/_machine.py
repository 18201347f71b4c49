"""What the benchmark scripts print about the machine they ran on (not a benchmark)."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version


def loadavg() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def machine(packages: list[str]) -> list[str]:
    """Platform, CPU, Python and the versions of `packages`, one `label  value` line each.

    Nothing in them names a path of the machine (no interpreter path, no home folder): the
    lines are pasted into the docs as they are.
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    impl = platform.python_implementation()
    versions = ", ".join(f"{name} {_version(name)}" for name in packages)
    return [
        f"platform   {platform.platform()}",
        f"cpu        {cpu}, {os.cpu_count()} CPUs ({usable} usable)",
        f"python     {impl} {platform.python_version()}",
        f"versions   {versions}",
    ]
