"""The health check of a kept database connection (memory_project.postgres): a connection that is
fine is checked without a round trip; one the server ended is found unusable and replaced."""

from __future__ import annotations

import select
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from tests.kit.servers import database_conninfo


@pytest.fixture
def kept() -> Iterator[BaseDatabaseWrapper]:
    """A connection of its own, as a web thread keeps one between requests (autocommit, idle)."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()


@pytest.fixture
def observer() -> Iterator[psycopg.Connection]:
    """Another session, which sees the kept one's backend from outside."""
    with psycopg.connect(database_conninfo(), autocommit=True) as conn:
        yield conn


def _last_query(observer: psycopg.Connection, pid: int) -> str | None:
    row = observer.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return None if row is None else str(row[0])


def _gone(observer: psycopg.Connection, pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _last_query(observer, pid) is None:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.django_db
def test_a_fine_connection_is_checked_without_a_query(kept: BaseDatabaseWrapper, observer: psycopg.Connection) -> None:
    marker = f"SELECT 'before the check {uuid.uuid4().hex}'"
    with kept.cursor() as cursor:
        cursor.execute(marker)
    kept.health_check_done = False
    kept.close_if_health_check_failed()
    assert kept.connection is not None and kept.is_usable()
    # The server's last statement of that session is still the one before the checks (Django's own
    # check would have sent `SELECT 1`).
    assert _last_query(observer, kept.connection.info.backend_pid) == marker


@pytest.mark.django_db
def test_a_connection_the_server_ended_is_unusable_and_the_next_query_reconnects(
    kept: BaseDatabaseWrapper, observer: psycopg.Connection
) -> None:
    pid = kept.connection.info.backend_pid
    assert observer.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
    assert _gone(observer, pid)
    assert not kept.is_usable()
    kept.health_check_done = False
    kept.close_if_health_check_failed()
    assert kept.connection is None
    with kept.cursor() as cursor:
        cursor.execute("SELECT 41 + 1")
        assert cursor.fetchone() == (42,)
    assert kept.connection.info.backend_pid != pid


@pytest.mark.django_db
def test_a_connection_with_something_to_read_is_asked_as_before(
    kept: BaseDatabaseWrapper, observer: psycopg.Connection
) -> None:
    """Something waiting on the socket of a session that is fine (here a notification) is no proof
    it ended: the check then asks the server, which answers, and the connection stays."""
    channel = f"health_{uuid.uuid4().hex[:12]}"
    with kept.cursor() as cursor:
        cursor.execute(f"LISTEN {channel}")
    observer.execute(f"NOTIFY {channel}")
    deadline = time.monotonic() + 10
    while not _readable(kept) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _readable(kept)
    assert kept.is_usable()
    assert _last_query(observer, kept.connection.info.backend_pid) == "SELECT 1"


def _readable(wrapper: BaseDatabaseWrapper) -> bool:
    poller = select.poll()
    poller.register(wrapper.connection.fileno(), select.POLLIN)
    return bool(poller.poll(0))
