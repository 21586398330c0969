"""Django's PostgreSQL backend (psycopg 3), with a health check that costs no round trip and
timestamps read by psycopg's own loader.

With CONN_HEALTH_CHECKS, Django checks a kept connection before the first query of each request by
sending `SELECT 1` and waiting for its answer: one round trip of every request that touches the
database, ~0.25 ms of web CPU on a loaded 2-core machine (each wait for the server is a sleep and a
wake-up; issue 26), for a connection that is almost always fine.

A connection the server ended (a restart, `pg_terminate_backend`, an idle timeout, a crash) has
something to read on its socket while it sits idle between requests: the server's last message
(FATAL) or the end of the stream. So `is_usable` first looks, without waiting: a connection that
psycopg already knows is closed or broken is not usable; one whose socket has nothing to read is;
one with something to read (or not idle) is asked `SELECT 1` as before. A restarted database
still costs no failed request.

Django reads every `timestamptz` with a loader of its own: psycopg's pure-Python parser (its regex),
then `replace(tzinfo=...)`, ~2.8 us a value against ~0.2 us for psycopg's C loader in one process
(8.4 against 2.5 us under load; issue 26), paid for every entry's times on a path read. When
Django's time zone and the session's are both UTC (the service's settings: USE_TZ, TIME_ZONE
"UTC", the session's set by Django when it connects), the two loaders give the same value, an aware
datetime in `datetime.timezone.utc` to the microsecond; `create_cursor` then reads with psycopg's.
Otherwise (USE_TZ off, another zone, a session whose zone was changed, a named cursor) it puts
Django's loader back and answers as Django does.

The service's transactions are written for READ COMMITTED. Django's `isolation_level` option (set by
`database_from_url`) only changes the `BEGIN` psycopg sends for an `atomic` block: a statement in
autocommit (the single append's one statement, which locks its thread) runs at the session's
`default_transaction_isolation`, the server's or the database's or the role's default. Under
REPEATABLE READ four clients appending to one thread got a serialization failure (a 503) for 42 of
100 appends. So each new physical connection sets the session's default too (`_configure_connection`:
Django calls it once a connection, from `init_connection_state`, or from the pool when the pool
opens one), one round trip a connection, not a request.
"""

from __future__ import annotations

import select
from datetime import UTC
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.utils.asyncio import async_unsafe
from psycopg.pq import Format, TransactionStatus

_READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP

_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid
# psycopg's own loader of the type (its C one with psycopg's binary or C package, which psycopg
# puts in place of the Python class it registers).
_PSYCOPG_TIMESTAMPTZ = psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)


class DatabaseWrapper(base.DatabaseWrapper):  # type: ignore[misc]
    def _configure_connection(self, connection: Any) -> bool:
        commit = bool(super()._configure_connection(connection))  # type: ignore[misc]
        if self.settings_dict["OPTIONS"].get("isolation_level") != psycopg.IsolationLevel.READ_COMMITTED:
            return commit
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_isolation = 'read committed'")
        # In a transaction unless the connection is in autocommit: the caller commits when told to.
        return commit or not connection.autocommit

    @async_unsafe
    def create_cursor(self, name: str | None = None) -> Any:
        connection = self.connection
        adapters = connection.adapters
        psycopgs = adapters.get_loader(_TIMESTAMPTZ, Format.TEXT) is _PSYCOPG_TIMESTAMPTZ
        if name is None and self.timezone is UTC and connection.info.timezone is UTC:
            if not psycopgs:
                # Once per connection (and after a cursor of the other kind).
                adapters.register_loader(_TIMESTAMPTZ, _PSYCOPG_TIMESTAMPTZ)
            return connection.cursor()
        if psycopgs:
            # Django's own cursor reads its loader's time zone off the connection's loader.
            register_tzloader(self.timezone, connection)
        return super().create_cursor(name)

    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status != TransactionStatus.IDLE:
            return bool(super().is_usable())
        try:
            poller = select.poll()
            poller.register(connection.fileno(), _READABLE)
            waiting = poller.poll(0)
        except (OSError, ValueError):
            return False
        if not waiting:
            return True
        return bool(super().is_usable())
