"""The throwaway PostgreSQL server the store tests use (tests/pg.py)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pg import PostgresServer, binaries, require


def test_a_test_database_takes_connections_with_the_password_only(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT current_database()").fetchone() == (postgres_url.rsplit("/")[-1],)
        host = db.execute("SELECT inet_server_addr()::text").fetchone()
        assert host == ("127.0.0.1/32",)
    wrong = postgres_url.replace(postgres_server.password, "wrong-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong)


def test_each_test_has_a_database_of_its_own(postgres_server: PostgresServer) -> None:
    first, second = postgres_server.new_database(), postgres_server.new_database()
    assert first != second
    with psycopg.connect(first) as db:
        db.execute("CREATE TABLE only_here (x int)")
    with psycopg.connect(second) as db:
        assert db.execute("SELECT to_regclass('only_here')").fetchone() == (None,)


def test_a_server_stops_and_leaves_no_folder() -> None:
    server = PostgresServer(require(binaries()))
    server.start()
    folder, url = server.folder, server.url()
    assert isinstance(folder, Path)
    with psycopg.connect(url) as db:
        assert db.execute("SELECT 1").fetchone() == (1,)
    server.stop()
    assert not folder.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)


def test_missing_binaries_skip_saying_so_and_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="PostgreSQL server binaries"):
        require(None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="installs Debian's postgresql package"):
        require(None)
    found = Path("/usr/lib/postgresql/15/bin")
    assert require(found) == found
