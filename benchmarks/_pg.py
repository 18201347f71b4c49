"""A throwaway PostgreSQL server for the benchmarks (not a benchmark).

`tests/pg.py`'s `PostgresServer` (Debian's binaries, a data folder of its own, a superuser
with a random password, 127.0.0.1 at a free port), started with PostgreSQL's durable
defaults: the tests' server turns `fsync`, `synchronous_commit` and `full_page_writes` off
for speed, which would flatter the store's figures. `durable=False` keeps the tests'
settings.
"""

from __future__ import annotations

import os
import pwd
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pg import PostgresServer, _free_port, binaries, missing_reason

__all__ = ["BenchPostgres", "binaries", "missing_reason"]


class BenchPostgres(PostgresServer):
    """A `PostgresServer` whose commits are durable (fsync on), unless `durable=False`."""

    def __init__(self, bin_dir: Path, *, durable: bool = True) -> None:
        super().__init__(bin_dir)
        self.durable = durable

    def start(self) -> None:
        """`initdb` a fresh folder and start the server, as `PostgresServer.start` does."""
        if not self.durable:
            super().start()
            return
        self.folder = Path(tempfile.mkdtemp(prefix="rkbench-pg-"))
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        if self._run_as is not None:
            record = pwd.getpwnam(self._run_as)
            os.chown(self.folder, record.pw_uid, record.pw_gid)
            os.chown(pwfile, record.pw_uid, record.pw_gid)
        self.folder.chmod(0o700)
        pwfile.chmod(0o600)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
        )
        pwfile.unlink()
        self.port = _free_port()
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} "
            "-c max_connections=100"  # PostgreSQL's defaults otherwise: fsync on, ...
        )
        self._run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "server.log"),
            "-o",
            options,
        )
