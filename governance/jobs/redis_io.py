"""One Redis command sent on a client's pooled connection without redis-py's layers of a command, for
the round trips of every agent request: the limits' gate (memoryapp.agents.limits) and the embedding's
debounce mark (`governance.jobs.broker.debounce_mark_set`).

redis-py's `Redis.execute_command` cost ~0.09 ms of CPU a command on this machine where its socket's
send and receive cost ~0.015 ms (issue 26): an encoder call an argument, a check for HIMPORT, the
observability records, closures and the retry around them. `redis_command` keeps what those round
trips rely on and sends the rest of it: 0.06 ms a command (bench/handler_cpu.py figures in the commit).

1. Its arguments are packed as redis-py packs them (RESP arrays of bulk strings: bytes as given, a
   str in UTF-8, an int or a float by its repr).
2. A connection is taken from the client's pool and given back, connected, authenticated and on its
   database as redis-py sets it up (its URL: TLS, password, `db`).
3. The connection's own retry policy is applied as the client applies it: after a connection error
   or a timeout the connection is dropped and the command sent again, on a new one, as many times as
   the client's `Retry` allows; past that the error is raised (a `redis.RedisError`).
4. The server's answer is read by the connection's parser, so its errors are raised as redis-py
   raises them (`NoScriptError`, `ResponseError`); the reply is returned raw (no response callback:
   SET's is `b"OK"` or None, not a bool; no decoding).
"""

from __future__ import annotations

from typing import Any

import redis


def _bulk(value: bytes | str | int | float) -> bytes:
    """An argument as redis-py's Encoder writes it (a bool, which it refuses, is refused too)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value).encode()
    raise redis.DataError(f"Invalid input of type: {type(value).__name__!r}. Convert to a bytes, string, int or float.")


def redis_packed(*args: bytes | str | int | float) -> bytes:
    """The command `args` in RESP: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        value = _bulk(arg)
        parts.append(b"$%d\r\n%b\r\n" % (len(value), value))
    return b"".join(parts)


def redis_command(client: redis.Redis, *args: bytes | str | int | float) -> Any:
    """Send the command `args` on one of the client's pooled connections: its raw reply (see the
    module's steps)."""
    packed = [redis_packed(*args)]
    pool = client.connection_pool
    connection = pool.get_connection()
    try:

        def attempt() -> Any:
            connection.send_packed_command(packed)
            return connection.read_response()

        return connection.retry.call_with_retry(attempt, lambda error: connection.disconnect())
    finally:
        pool.release(connection)
