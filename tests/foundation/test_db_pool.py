"""Database connections: Django's psycopg pool when DB_POOL_SIZE is set (a web server's workers
each keep a pool of that size, the master none), and the embedded PostgreSQL's settings for a small
machine (memory_project.embedded.POSTGRES_SETTINGS)."""

from __future__ import annotations

import http.client
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from psycopg import IsolationLevel

from memory_project import embedded
from memory_project.settings import database_from_url
from tests.kit.api import Caller
from tests.kit.servers import database_url, gunicorn_serving

APP = "memory-pool-test"


def test_a_pool_size_gives_djangos_pool_and_no_connection_kept_past_a_request() -> None:
    pooled = database_from_url("postgres://u:p@db.example:5432/memory?sslmode=require", pool_size=6, pool_timeout=4)
    assert pooled["OPTIONS"] == {
        "sslmode": "require",
        "pool": {"min_size": 6, "max_size": 6, "timeout": 4},
        "isolation_level": IsolationLevel.READ_COMMITTED,
    }
    assert pooled["CONN_MAX_AGE"] == 0 and pooled["CONN_HEALTH_CHECKS"] is True
    plain = database_from_url("postgres://u:p@db.example:5432/memory", pool_size=0)
    assert "pool" not in plain["OPTIONS"]


def _get(where: str, path: str, key: str) -> int:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP])
        return int(cursor.fetchone()[0])


def _settle(expected: int, timeout: float = 30.0) -> int:
    """The server's backends once they are `expected` (a pool opens its connections in the background)."""
    deadline = time.monotonic() + timeout
    while (count := _backends()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("pool", "kept"), [("2", 2), ("0", 0)])
def test_a_web_server_keeps_a_pool_of_db_pool_size_connections_per_worker(
    alice: Caller, tmp_path: Path, pool: str, kept: int
) -> None:
    """Eight requests at once on four threads: with DB_POOL_SIZE=2 the worker's two pooled
    connections serve them all and stay open after (the master's, opened while it loaded the
    application, closed before the fork); without a pool (and DB_CONN_MAX_AGE=0, as the tests run
    servers) none outlives its request."""
    url = database_url()
    url += ("&" if "?" in url else "?") + f"application_name={APP}"
    env = {"DATABASE_URL": url, "DB_POOL_SIZE": pool}
    with gunicorn_serving(var_dir=tmp_path, threads=4, workers=1, env=env) as where:
        # The master's pool (it queried the database while loading) was closed before the fork: a
        # worker inheriting it would share its connections' sockets with the master.
        assert _settle(0) == 0
        with ThreadPoolExecutor(8) as requests:
            answers = list(requests.map(lambda _: _get(where, "/api/v1/", alice.key), range(8)))
        assert answers == [200] * 8
        assert _settle(kept) == kept
    assert _settle(0) == 0


def test_the_embedded_settings_read_overrides_and_refuse_a_malformed_one() -> None:
    wanted = embedded.postgres_settings({"EMBEDDED_PG_SETTINGS": "work_mem=64MB, log_min_duration_statement=250"})
    assert wanted["work_mem"] == "64MB" and wanted["log_min_duration_statement"] == "250"
    assert wanted["jit"] == embedded.POSTGRES_SETTINGS["jit"]
    with pytest.raises(SystemExit, match="EMBEDDED_PG_SETTINGS: 'work_mem' is not name=value"):
        embedded.postgres_settings({"EMBEDDED_PG_SETTINGS": "work_mem"})
    for value in ("it's", "a\\b", "x # y", "a\nfsync=off"):
        with pytest.raises(SystemExit, match="holds a quote, backslash, # or line break"):
            embedded.postgres_settings({"EMBEDDED_PG_SETTINGS": f"application_name={value}"})


@pytest.mark.django_db
def test_the_embedded_server_runs_with_the_small_machine_settings() -> None:
    """The tests' own embedded server was started (and restarted, once) with them."""
    if not settings.USES_EMBEDDED_POSTGRES:
        pytest.skip("the tests run on a PostgreSQL of DATABASE_URL")
    with connection.cursor() as cursor:
        for name in ("jit", "random_page_cost", "shared_buffers", "work_mem", "max_wal_size"):
            cursor.execute("SELECT current_setting(%s)", [name])
            assert cursor.fetchone()[0] == embedded.POSTGRES_SETTINGS[name], name


class _LateReload:
    """A connection whose `pg_reload_conf()` reaches the server a second late (a loaded machine:
    the postmaster, then each session, rereads the files when the scheduler lets it)."""

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self._conn, self._url = conn, url

    def __enter__(self) -> _LateReload:
        self._conn.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.__exit__(*exc)

    def execute(self, query: str, *args: Any) -> Any:
        if "pg_reload_conf" in query:

            def signal() -> None:
                with psycopg.connect(self._url, autocommit=True) as other:
                    other.execute("SELECT pg_reload_conf()")

            threading.Timer(1.0, signal).start()
            return self._conn.execute("SELECT true")
        return self._conn.execute(query, *args)


@pytest.mark.slow
def test_a_setting_that_needs_a_restart_is_applied_however_late_the_reload_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pg_reload_conf() only signals the postmaster, which signals each session in its turn: the
    restart a setting needs (shared_buffers) must not be skipped because the session that asked
    read pending_restart before it had reread the files."""
    if not settings.USES_EMBEDDED_POSTGRES:
        pytest.skip("the tests run on a PostgreSQL of DATABASE_URL")
    connect = psycopg.connect
    monkeypatch.setattr(
        embedded,
        "psycopg",
        SimpleNamespace(connect=lambda url, **kw: _LateReload(connect(url, **kw), url)),
    )
    place = Path(tempfile.mkdtemp(prefix="test-pg-settings-", dir=settings.BASE_DIR / "var"))
    pgdata = place / "pgdata"
    try:
        url = embedded.postgres_url(pgdata)
        with connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW shared_buffers").fetchone()
        assert row is not None and row[0] == embedded.POSTGRES_SETTINGS["shared_buffers"]
    finally:
        embedded.postgres_stop(pgdata)
        shutil.rmtree(place, ignore_errors=True)
