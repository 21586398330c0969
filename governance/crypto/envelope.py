"""Data keys (envelope encryption): one per (agent, person), the agent's own for rows about no one,
and one for rows of no agent (job results of system jobs). Each is 32 random bytes stored only
wrapped by a master key (AES-256-GCM, associated data binding its id and owner).

Destroying a person's data key (`data_key_destroy`) shreds every copy of their sealed rows: a
backup or a dump keeps the ciphertext, but no key opens it any more.

The table is the `DataKey` model's (governance.models); this module reads and writes it with SQL
of its own because the models' fields import this package.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from django.db import connection
from django.utils import timezone

from governance.crypto.keyring import keyring
from governance.crypto.sealing import SealError, unwrap, wrap

TABLE = "governance_datakey"
# A data key read by id is kept this long in a process (reads of many rows open with one lookup);
# a key destroyed in another process stops opening rows here after at most this long.
_CACHE_SECONDS = 60.0

Owner = tuple[int | None, str]


@dataclass(frozen=True)
class DataKey:
    id: str
    key: bytes


_by_id: dict[str, tuple[float, bytes]] = {}
_blind: dict[int | None, bytes] = {}
_lock = threading.Lock()


def data_keys_forget() -> None:
    """Drop the process's cache (after a rotation, a destruction, or a test that changed keys)."""
    with _lock:
        _by_id.clear()
        _blind.clear()


def _aad(key_id: str, agent_id: int | None, user_id: str) -> bytes:
    return f"datakey:{key_id}:{'' if agent_id is None else agent_id}:{user_id}".encode()


def _unwrap(key_id: str, agent_id: int | None, user_id: str, master_id: str, wrapped: bytes) -> bytes:
    master = keyring().get(master_id)
    if master is None:
        if not keyring().enabled:
            raise SealError(
                f"data key {key_id} is wrapped by master key {master_id!r} and MEMORY_ENCRYPTION_KEYS is not set"
            )
        raise SealError(
            f"data key {key_id} is wrapped by master key {master_id!r}, which is not in MEMORY_ENCRYPTION_KEYS"
            f" (it holds {', '.join(keyring().ids)})"
        )
    try:
        return unwrap(bytes(wrapped), master=master, aad=_aad(key_id, agent_id, user_id))
    except InvalidTag as exc:
        raise SealError(f"master key {master_id!r} is wrong: data key {key_id} does not unwrap with it") from exc


def data_key_open(key_id: str) -> bytes:
    """The key of a sealed value's id (cached); SealError when it is destroyed, unknown or wrong."""
    now = time.monotonic()
    with _lock:
        cached = _by_id.get(key_id)
    if cached is not None and now - cached[0] < _CACHE_SECONDS:
        return cached[1]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT agent_id, user_id, master_key_id, wrapped, destroyed_at FROM {TABLE} WHERE id = %s", [key_id]
        )
        row = cursor.fetchone()
    if row is None:
        raise SealError(f"data key {key_id} is not in this database")
    agent_id, user_id, master_id, wrapped, destroyed_at = row
    if destroyed_at is not None:
        raise SealError(f"data key {key_id} was destroyed (crypto-shredded) at {destroyed_at.isoformat()}")
    key = _unwrap(key_id, agent_id, user_id, master_id, wrapped)
    with _lock:
        if len(_by_id) > 10_000:
            _by_id.clear()
        _by_id[key_id] = (now, key)
    return key


def data_key_for(*, agent_id: int | None, user_id: str = "") -> DataKey:
    """The live data key of an owner, made (wrapped by the first master key) on its first use."""
    for _ in range(2):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, master_key_id, wrapped FROM {TABLE}"
                " WHERE agent_id IS NOT DISTINCT FROM %s AND user_id = %s AND destroyed_at IS NULL",
                [agent_id, user_id],
            )
            row = cursor.fetchone()
        if row is not None:
            key_id, master_id, wrapped = row
            with _lock:
                cached = _by_id.get(key_id)
            if cached is not None:
                return DataKey(id=key_id, key=cached[1])
            key = _unwrap(key_id, agent_id, user_id, master_id, wrapped)
            with _lock:
                _by_id[key_id] = (time.monotonic(), key)
            return DataKey(id=key_id, key=key)
        master_id, master = keyring().primary
        key_id = "dk" + secrets.token_hex(6)
        key = os.urandom(32)
        with connection.cursor() as cursor:
            # Two writers making the same owner's key at once: the unique index keeps one, and the
            # loser reads it on its second turn.
            cursor.execute(
                f"INSERT INTO {TABLE} (id, agent_id, user_id, master_key_id, wrapped, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [
                    key_id,
                    agent_id,
                    user_id,
                    master_id,
                    wrap(key, master=master, aad=_aad(key_id, agent_id, user_id)),
                    timezone.now(),
                ],
            )
            if cursor.rowcount == 1:
                return DataKey(id=key_id, key=key)
    raise SealError(f"no data key could be made for agent {agent_id}")


def data_key_destroy(*, agent_id: int, user_id: str) -> str | None:
    """Crypto-shred a person: destroy their live data key under this agent, in the caller's transaction.

    Returns the id of the key destroyed (for the erasure report), None when the person had none.
    Rows sealed under it (here, in a backup, a dump, a replica) no longer open anywhere. The wrapped
    key itself is overwritten; the row stays, so the id in old rows still says what happened.
    """
    if not user_id:
        raise ValueError("data_key_destroy shreds a person: user_id must be given (the agent's own key stays)")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET wrapped = '\\x'::bytea, destroyed_at = %s"
            " WHERE agent_id = %s AND user_id = %s AND destroyed_at IS NULL RETURNING id",
            [timezone.now(), agent_id, user_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    with _lock:
        _by_id.pop(row[0], None)
    return str(row[0])


def blind_key(*, agent_id: int | None) -> bytes:
    """The agent's blind-index key: derived from its own data key (HKDF-like, one HMAC step), so it
    is as safe as that key and rotates with it (rewrapping the data key leaves it the same)."""
    with _lock:
        cached = _blind.get(agent_id)
    if cached is not None:
        return cached
    base = data_key_for(agent_id=agent_id, user_id="")
    derived = hmac.new(base.key, b"memory blind index v1", hashlib.sha256).digest()
    with _lock:
        _blind[agent_id] = derived
    return derived


def data_keys_rewrap(*, batch: int = 500) -> tuple[int, int]:
    """Rewrap every live data key not wrapped by the first master key under it: (rewrapped, total).

    Each batch commits on its own (autocommit outside a transaction), so a run stopped part way
    keeps what it did and the next run goes on from there.
    """
    master_id, master = keyring().primary
    done = 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE destroyed_at IS NULL")
        total = int(cursor.fetchone()[0])
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, agent_id, user_id, master_key_id, wrapped FROM {TABLE}"
                " WHERE destroyed_at IS NULL AND master_key_id <> %s ORDER BY id LIMIT %s",
                [master_id, batch],
            )
            rows = cursor.fetchall()
        if not rows:
            return done, total
        for key_id, agent_id, user_id, old_master, wrapped in rows:
            key = _unwrap(key_id, agent_id, user_id, old_master, wrapped)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {TABLE} SET master_key_id = %s, wrapped = %s WHERE id = %s AND master_key_id = %s",
                    [master_id, wrap(key, master=master, aad=_aad(key_id, agent_id, user_id)), key_id, old_master],
                )
            done += 1


def master_keys_in_use() -> dict[str, tuple[int, str]]:
    """Master key id -> (live data keys it wraps, one of them); {} before the table exists."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [TABLE])
        if cursor.fetchone()[0] is None:
            return {}
        cursor.execute(
            f"SELECT master_key_id, count(*), min(id) FROM {TABLE} WHERE destroyed_at IS NULL GROUP BY master_key_id"
        )
        return {str(m): (int(n), str(first)) for m, n, first in cursor.fetchall()}


def data_key_check(key_id: str) -> None:
    """Unwrap one data key without the cache: SealError when its master key is missing or wrong."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT agent_id, user_id, master_key_id, wrapped FROM {TABLE} WHERE id = %s", [key_id])
        row = cursor.fetchone()
    if row is not None:
        _unwrap(key_id, row[0], row[1], row[2], row[3])
