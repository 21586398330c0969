"""One Redis command without redis-py's layers of a command (governance.jobs.redis_io), against the
tests' real Redis: the same bytes on the wire, the server's answers and errors as redis-py gives
them, a connection the server dropped replaced."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from governance.jobs.redis_io import redis_command, redis_packed


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    found = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    yield found
    found.close()


@pytest.mark.parametrize(
    "args",
    [
        ("SET", "memory:x:pending-job:embed:3", "1", "NX", "EX", 300),
        ("EVALSHA", "ab" * 20, 2, "limits:authfail:addr:127.0.0.1", "limits:keys-version", 10, 1, 0, 0.5, ""),
        ("SET", "ça-va", b"\x00\xff\r\n", 1.25, -3),
    ],
)
def test_a_command_is_packed_as_redis_py_packs_it(client: redis.Redis, args: tuple[object, ...]) -> None:
    connection = client.connection_pool.get_connection()
    try:
        assert redis_packed(*args) == b"".join(connection.pack_command(*args))
    finally:
        client.connection_pool.release(connection)


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(redis.DataError):
        redis_packed("SET", "k", True)


def test_replies_and_errors_are_the_servers_as_redis_py_reads_them(client: redis.Redis) -> None:
    key = f"test:redis-io:{uuid.uuid4().hex}"
    try:
        assert redis_command(client, "SET", key, "1", "NX", "EX", 30) == b"OK"
        assert redis_command(client, "SET", key, "1", "NX", "EX", 30) is None  # there already
        assert 0 < client.ttl(key) <= 30
        script = "return {tonumber(ARGV[1]) + 1, redis.call('GET', KEYS[1]), 'x'}"
        sha = client.script_load(script)
        assert redis_command(client, "EVALSHA", sha, 1, key, 41) == [42, b"1", b"x"]
        with pytest.raises(redis.exceptions.NoScriptError):
            redis_command(client, "EVALSHA", "0" * 40, 0)
        with pytest.raises(redis.ResponseError):
            redis_command(client, "INCR", key, "surplus")
    finally:
        client.delete(key)


def test_a_connection_the_server_dropped_is_replaced_and_the_command_answered(client: redis.Redis) -> None:
    key = f"test:redis-io:{uuid.uuid4().hex}"
    try:
        assert redis_command(client, "SET", key, "1", "NX", "EX", 30) == b"OK"
        (kept,) = client.connection_pool._available_connections  # the one the command gave back
        name = f"redis-io-{uuid.uuid4().hex[:8]}"
        kept.send_command("CLIENT", "SETNAME", name)
        assert kept.read_response() == b"OK"
        killer = redis.Redis.from_url(settings.REDIS_URL)
        try:
            victims = [c for c in killer.client_list() if c.get("name") == name]
            assert len(victims) == 1
            killer.execute_command("CLIENT", "KILL", "ID", victims[0]["id"])
        finally:
            killer.close()
        assert redis_command(client, "GET", key) == b"1"
        assert redis_command(client, "CLIENT", "GETNAME") is None  # a new connection: no name
    finally:
        client.delete(key)
