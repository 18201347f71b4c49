"""Counting model calls and tokens on the wire: `refinekit/cli/_demo/_count.py`, which the
local demo (`refinekit demo --local`) counts with too. Re-exported here for the benchmarks."""

from refinekit.cli._demo._count import Counter, Tally, async_http_client, http_client

__all__ = ["Counter", "Tally", "async_http_client", "http_client"]
