"""A throwaway PostgreSQL server for the tests: Debian's binaries, a data folder of its own.

`PostgresServer.start()` runs `initdb` into a fresh temporary folder (password authentication,
a superuser `refinekit` with a random password), then `pg_ctl start` with the server listening
on 127.0.0.1 at a free port and its unix socket in that folder; `stop()` stops it
(`pg_ctl stop -m immediate`) and removes the folder. `new_database()` makes an empty database
and returns its URL, password included (what `--db` takes).

PostgreSQL refuses to run as root: when the tests run as root, the server runs as the
`postgres` user Debian's package makes (else `nobody`) through `runuser`, and owns its folder.

The binaries are found in `$REFINEKIT_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`,
else on `PATH`; `binaries()` is None when there are none (the tests that need a server are
then skipped, saying so).
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["PostgresServer", "binaries", "missing_reason", "require"]

_NEEDED = ("initdb", "pg_ctl")


def binaries() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`, or None when PostgreSQL is not installed."""
    candidates: list[Path] = []
    if os.environ.get("REFINEKIT_PG_BIN"):
        candidates.append(Path(os.environ["REFINEKIT_PG_BIN"]))
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += debian
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for folder in candidates:
        if all((folder / name).is_file() for name in _NEEDED):
            return folder
    return None


def missing_reason() -> str:
    return (
        "PostgreSQL server binaries (initdb, pg_ctl) not found in $REFINEKIT_PG_BIN, "
        "/usr/lib/postgresql/*/bin or on PATH: install Debian's postgresql package "
        "(apt-get install postgresql) to run the PostgreSQL store tests"
    )


def require(found: Path | None) -> Path:
    """`found`; else a skip saying what is missing, or under CI (which installs PostgreSQL)
    a failure."""
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{missing_reason()}; .ci/run installs Debian's postgresql package")
        pytest.skip(missing_reason())
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_user() -> str | None:
    """Who runs the server: None for this user, or an unprivileged one when this is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root with neither a postgres nor a nobody user to run initdb")


class PostgresServer:
    """One throwaway server; `start()` it, `stop()` it."""

    user = "refinekit"

    def __init__(self, bin_dir: Path, *, durable: bool = False) -> None:
        self.bin_dir = bin_dir
        self.durable = durable  # PostgreSQL's own settings (fsync on): for benchmarks
        self.password = secrets.token_hex(12)
        self.port = 0
        self.folder: Path | None = None
        self._run_as = _server_user()
        self._names = itertools.count(1)

    @property
    def data(self) -> Path:
        assert self.folder is not None
        return self.folder / "data"

    def _command(self, *argv: str) -> list[str]:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self._run_as is not None:
            command = ["runuser", "-u", self._run_as, "--", *command]
        return command

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            self._command(*argv), capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{argv[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )

    def start(self) -> None:
        """`initdb` a fresh folder, start the server, wait until it takes connections."""
        self.folder = Path(tempfile.mkdtemp(prefix="rkpg-"))
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
            *(() if self.durable else ("--no-sync",)),
        )
        pwfile.unlink()
        self.port = _free_port()
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} " + (
            "-c max_connections=100"  # PostgreSQL's defaults otherwise: fsync on, ...
            if self.durable
            else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=50"
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

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self.folder is None:
            return
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def url(self, database: str = "postgres") -> str:
        """The URL of a database on this server, password included."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """An empty database of its own (for one test); its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)
