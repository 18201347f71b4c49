"""A throwaway PostgreSQL server for the benchmarks (not a benchmark).

`tests/pg.py`'s `PostgresServer` (Debian's binaries, a data folder of its own, a superuser
with a random password, 127.0.0.1 at a free port). The benchmarks start it with
`durable=True`, PostgreSQL's own settings: the tests' server turns `fsync`,
`synchronous_commit` and `full_page_writes` off for speed, which would flatter the store's
figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pg import PostgresServer, binaries, missing_reason

__all__ = ["PostgresServer", "binaries", "missing_reason"]
