"""Data keys (envelope encryption): one per (agent, person), the agent's own for rows about no one,
and one for rows of no agent. Each is 32 random bytes, stored only wrapped by a master key
(AES-256-GCM, associated data binding its id and owner) in the key store (governance.crypto.keystore),
outside the database. The database keeps their register (`DataKey`: id, owner, master key id,
created, destroyed), which is also the marker that it holds sealed rows.

Destroying a person's data key (`data_key_destroy`) shreds every copy of their sealed rows: a
backup or a dump keeps the ciphertext and the register row, but the key file is gone.

A row of several people (one naming others, one holding several people's words) is sealed under a
key set (`data_key_for_people`): a key derived from each member's data key, its id their ids joined
by `+`, which opens only while every member does, so destroying any one of them shreds it.

The register is read and written with SQL of its own: the models' fields import this package.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.db import connection, transaction
from django.utils import timezone
from psycopg import OperationalError

from governance.crypto.blind import word_hasher
from governance.crypto.keyring import keyring
from governance.crypto.keystore import keystore_dir, keystore_read, keystore_remove, keystore_write
from governance.crypto.sealing import SealError, cipher_cache_clear, unwrap, wrap

TABLE = "governance_datakey"
# A data key read by id is kept this long in a process (reads of many rows open with one lookup);
# a key destroyed in another process stops opening rows here after at most this long.
_CACHE_SECONDS = 60.0
# An owner's key is looked up again after this long: a key another process destroyed meanwhile is
# used for writes here for at most this long (rows sealed under it are shredded with it).
OWNER_CACHE_SECONDS = 5.0

Owner = tuple[int | None, str]


@dataclass(frozen=True)
class DataKey:
    id: str
    key: bytes


_by_id: dict[str, tuple[float, bytes]] = {}
_by_owner: dict[Owner, tuple[float, DataKey]] = {}
# Blind-index keys by the id of the data key they are derived from (an agent's changes with a
# rotation's new keys), and the agent's own keys a rotation retired and has not destroyed yet (read
# with its live key, as fresh): rows its walk has not reached still hold hashes under them.
_blind: dict[str, bytes] = {}
_retired: dict[Owner, list[tuple[str, str]]] = {}
_lock = threading.Lock()


def data_keys_forget() -> None:
    """Drop the process's caches (after a rotation, or in a test that changed keys)."""
    with _lock:
        _by_id.clear()
        _by_owner.clear()
        _blind.clear()
        _retired.clear()
    cipher_cache_clear()
    word_hasher.cache_clear()


def _aad(key_id: str, agent_id: int | None, user_id: str) -> bytes:
    return f"datakey:{key_id}:{'' if agent_id is None else agent_id}:{user_id}".encode()


def _unwrap(key_id: str, agent_id: int | None, user_id: str, master_id: str) -> bytes:
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
    wrapped = keystore_read(key_id)
    if wrapped is None:
        raise SealError(
            f"data key {key_id} is not in the key store {keystore_dir()} (destroyed, or not this database's key store)"
        )
    try:
        return unwrap(wrapped, master=master, aad=_aad(key_id, agent_id, user_id))
    except InvalidTag as exc:
        raise SealError(f"master key {master_id!r} is wrong: data key {key_id} does not unwrap with it") from exc


# Joins the ids of the data keys a key set is derived from (a data key id is letters and digits).
KEY_SET_JOIN = "+"


def key_set_ids(key_id: str) -> list[str]:
    """The data key ids a sealed value's key id names: one, or the members of a key set."""
    return key_id.split(KEY_SET_JOIN)


def _key_set_derive(key_id: str, keys: Sequence[bytes]) -> bytes:
    """The key of a key set: HKDF-SHA256 over the concatenation of its members' data keys, in the
    order the id names them, bound to that id. Without any one member (32 random bytes, destroyed)
    the input keeps 256 unknown bits, so the derived key cannot be had: destroying any one person's
    key shreds every value sealed under a set holding it (docs/security.md "Whose key seals a row")."""
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=b"memory key set v1:" + key_id.encode()).derive(
        b"".join(keys)
    )


def _cached(key_id: str, now: float) -> bytes | None:
    with _lock:
        cached = _by_id.get(key_id)
    if cached is not None and now - cached[0] < _CACHE_SECONDS:
        return cached[1]
    return None


def _keep(key_id: str, now: float, key: bytes) -> None:
    with _lock:
        if len(_by_id) > 10_000:
            _by_id.clear()
        _by_id[key_id] = (now, key)


def _read_at(key_ids: Sequence[str], now: float) -> float:
    """When the oldest of these keys' cached copies was read (`now` for one not cached): a key set
    derived from them is kept only as long as each of them is, so a member destroyed in another
    process stops opening its sets here when it stops opening alone (_CACHE_SECONDS after it was
    read), not a cache period after the set was derived from its cached copy."""
    with _lock:
        return min((_by_id.get(key_id, (now, b""))[0] for key_id in key_ids), default=now)


def data_key_open(key_id: str) -> bytes:
    """The key of a sealed value's id (cached); SealError when it is destroyed, unknown or wrong.
    A key set's id (`dkA+dkB`) opens when every member does (`_key_set_derive`)."""
    now = time.monotonic()
    if KEY_SET_JOIN in key_id:
        found = _cached(key_id, now)
        if found is None:
            members = key_set_ids(key_id)
            found = _key_set_derive(key_id, [data_key_open(member) for member in members])
            _keep(key_id, _read_at(members, now), found)
        return found
    with _lock:
        cached = _by_id.get(key_id)
    if cached is not None and now - cached[0] < _CACHE_SECONDS:
        return cached[1]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT agent_id, user_id, master_key_id, destroyed_at FROM {TABLE} WHERE id = %s", [key_id])
        row = cursor.fetchone()
    if row is None:
        raise SealError(f"data key {key_id} is not in this database")
    agent_id, user_id, master_id, destroyed_at = row
    if destroyed_at is not None:
        raise SealError(f"data key {key_id} was destroyed (crypto-shredded) at {destroyed_at.isoformat()}")
    key = _unwrap(key_id, agent_id, user_id, master_id)
    _keep(key_id, now, key)
    return key


_REGISTER = (
    f"INSERT INTO {TABLE} (id, agent_id, user_id, master_key_id, created_at)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)


def _register_committed(row: list[object]) -> bool:
    """Register a data key on a connection of its own, committed at once: a key is never lost with
    the caller's transaction (a rolled-back write), so a process may cache it by owner. A key no
    row ends up using is harmless. ON CONFLICT: two writers made the same owner's key at once; the
    unique index keeps one, and the loser reads it.

    False when that would wait on the caller's own transaction (it retired or destroyed the owner's
    key and has not committed): then the key is registered in the caller's transaction instead.
    """
    own = connection.get_new_connection(connection.get_connection_params())
    try:
        own.autocommit = True
        with own.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
            try:
                cursor.execute(_REGISTER, row)
            except OperationalError:
                return False
    finally:
        own.close()
    return True


def data_key_for(*, agent_id: int | None, user_id: str = "") -> DataKey:
    """The live data key of an owner, made (wrapped by the first master key) on its first use."""
    owner = (agent_id, user_id)
    now = time.monotonic()
    with _lock:
        cached = _by_owner.get(owner)
    if cached is not None and now - cached[0] < OWNER_CACHE_SECONDS:
        return cached[1]
    for _ in range(2):
        with connection.cursor() as cursor:
            # The live key, and those a rotation retired and has not destroyed yet (most owners have none).
            cursor.execute(
                f"SELECT id, master_key_id, retired_at IS NOT NULL FROM {TABLE}"
                " WHERE agent_id IS NOT DISTINCT FROM %s AND user_id = %s AND destroyed_at IS NULL",
                [agent_id, user_id],
            )
            rows = cursor.fetchall()
        retired = [(str(r[0]), str(r[1])) for r in rows if r[2]]
        with _lock:
            if retired:
                _retired[owner] = retired
            else:
                _retired.pop(owner, None)
        row = next((r for r in rows if not r[2]), None)
        if row is not None:
            found = DataKey(id=row[0], key=_cached(row[0], now) or _unwrap(row[0], agent_id, user_id, row[1]))
            with _lock:
                _by_id[found.id] = (now, found.key)
                _by_owner[owner] = (now, found)
            return found
        master_id, master = keyring().primary
        key_id = "dk" + secrets.token_hex(8)
        # The file first: a registered key always has its file (until it is destroyed).
        keystore_write(key_id, wrap(os.urandom(32), master=master, aad=_aad(key_id, agent_id, user_id)))
        row = [key_id, agent_id, user_id, master_id, timezone.now()]
        if not _register_committed(row):
            with connection.cursor() as cursor:
                cursor.execute(_REGISTER, row)
            # Not cached by owner: it goes if this transaction rolls back.
            return DataKey(id=key_id, key=_unwrap(key_id, agent_id, user_id, master_id))
    raise SealError(f"no data key could be made for agent {agent_id}")


def data_keys_for(*, agent_id: int | None, people: Sequence[str]) -> dict[str, DataKey]:
    """The live data keys of several owners of one agent (`data_key_for` each), those not cached
    read in one query: a batch naming many people looks their keys up once, not one query each."""
    now = time.monotonic()
    found: dict[str, DataKey] = {}
    missing: list[str] = []
    with _lock:
        for person in dict.fromkeys(people):
            cached = _by_owner.get((agent_id, person))
            if cached is not None and now - cached[0] < OWNER_CACHE_SECONDS:
                found[person] = cached[1]
            else:
                missing.append(person)
    if len(missing) > 1:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT user_id, id, master_key_id FROM {TABLE} WHERE agent_id IS NOT DISTINCT FROM %s"
                " AND user_id = ANY(%s) AND destroyed_at IS NULL AND retired_at IS NULL",
                [agent_id, missing],
            )
            rows = cursor.fetchall()
        for person, key_id, master_id in rows:
            # Live, the query says: the key's bytes as read within _CACHE_SECONDS are still its own.
            key = DataKey(id=key_id, key=_cached(key_id, now) or _unwrap(key_id, agent_id, person, master_id))
            found[person] = key
            with _lock:
                _by_id[key.id] = (now, key.key)
                _by_owner[(agent_id, person)] = (now, key)
    for person in missing:
        if person not in found:
            found[person] = data_key_for(agent_id=agent_id, user_id=person)
    return found


def data_key_for_people(*, agent_id: int | None, people: Sequence[str]) -> DataKey:
    """The key a row holding the words or names of several people is sealed under: one person's
    (`people` of one) is their data key; several people's is a key set's, derived from each one's
    live data key (`_key_set_derive`), its id their ids joined (`dkA+dkB`, in the order of
    `people`, which the caller sorts). Cached per process (an owner's keys are, and so is the
    derived key, by its id): a write of a batch naming the same people derives it once."""
    if len(people) == 1:
        return data_key_for(agent_id=agent_id, user_id=people[0])
    found_keys = data_keys_for(agent_id=agent_id, people=people)
    members = [found_keys[person] for person in people]
    key_id = KEY_SET_JOIN.join(member.id for member in members)
    now = time.monotonic()
    found = _cached(key_id, now)
    if found is None:
        found = _key_set_derive(key_id, [member.key for member in members])
        _keep(key_id, _read_at([member.id for member in members], now), found)
    return DataKey(id=key_id, key=found)


def _forget_key_sets(ids: Sequence[str]) -> None:
    """Drop the cached key sets holding any of these keys (called under _lock)."""
    gone = set(ids)
    for key_id in [k for k in _by_id if KEY_SET_JOIN in k and gone.intersection(key_set_ids(k))]:
        _by_id.pop(key_id, None)


def data_key_destroy(*, agent_id: int, user_id: str) -> str | None:
    """Crypto-shred a person: destroy their live data key under this agent.

    Returns the id of the key destroyed (for the erasure report), None when the person had none.
    The register row is marked destroyed in the caller's transaction; the key's file is overwritten
    and removed when it commits. From then on, rows sealed under it (here, in a backup, a dump, a
    replica) no longer open anywhere. The row stays, so old values still say what became of them.
    """
    if not user_id:
        raise ValueError("data_key_destroy shreds a person: user_id must be given (the agent's own key stays)")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET destroyed_at = %s"
            " WHERE agent_id = %s AND user_id = %s AND destroyed_at IS NULL RETURNING id, retired_at IS NULL",
            [timezone.now(), agent_id, user_id],
        )
        rows = cursor.fetchall()
    if not rows:
        return None
    ids = [str(r[0]) for r in rows]
    with _lock:
        for key_id in ids:
            _by_id.pop(key_id, None)
        _forget_key_sets(ids)
        _by_owner.pop((agent_id, user_id), None)
    transaction.on_commit(lambda: [keystore_remove(key_id) for key_id in ids])
    # The live key (a key retired by a rotation still running is destroyed with it).
    return next((str(r[0]) for r in rows if r[1]), ids[0])


def data_keys_made_since_delete(*, agent_id: int, user_id: str, since: Any) -> list[str]:
    """Delete a person's data keys under this agent made at or after `since`, register rows and
    files (on commit): for an erasure in an agent that held nothing of her, whose only key is the
    one the erasure itself made to seal the identifiers given with it (deleted by then), so the
    agent ends with no row of her (`data_key_destroy` keeps a destroyed key's row, to say what
    became of the values sealed under it: here none are left). Answers the ids deleted."""
    if not user_id:
        raise ValueError("data_keys_made_since_delete deletes a person's keys: user_id must be given")
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {TABLE} WHERE agent_id = %s AND user_id = %s AND created_at >= %s RETURNING id",
            [agent_id, user_id, since],
        )
        ids = [str(r[0]) for r in cursor.fetchall()]
    if not ids:
        return ids
    with _lock:
        for key_id in ids:
            _by_id.pop(key_id, None)
        _forget_key_sets(ids)
        _by_owner.pop((agent_id, user_id), None)
        _retired.pop((agent_id, user_id), None)
    transaction.on_commit(lambda: [keystore_remove(key_id) for key_id in ids])
    return ids


def data_keys_destroy_agent(*, agent_id: int) -> list[str]:
    """Crypto-shred an agent being deleted: every data key of it (its own, each person's) destroyed
    as `data_key_destroy` does, so no copy of its sealed rows opens any more. Returns their ids."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [TABLE])
        if cursor.fetchone()[0] is None:
            return []
        cursor.execute(
            f"UPDATE {TABLE} SET destroyed_at = %s WHERE agent_id = %s AND destroyed_at IS NULL RETURNING id",
            [timezone.now(), agent_id],
        )
        ids = [str(r[0]) for r in cursor.fetchall()]
    with _lock:
        for key_id in ids:
            _by_id.pop(key_id, None)
        _forget_key_sets(ids)
        for owner in [o for o in _by_owner if o[0] == agent_id]:
            _by_owner.pop(owner, None)
        for key_id in ids:
            _blind.pop(key_id, None)
        _retired.pop((agent_id, ""), None)
    transaction.on_commit(lambda: [keystore_remove(key_id) for key_id in ids])
    return ids


def blind_key(*, agent_id: int | None) -> bytes:
    """The agent's blind-index key, what its rows are hashed under from now on: derived from its own
    live data key (one HMAC step), so it is as safe as that key, a rewrap leaves it the same (no
    row's index needs computing again), and a rotation with new keys changes it in every process
    within OWNER_CACHE_SECONDS (the rotation's settle), as it changes the key rows are sealed under."""
    key = data_key_for(agent_id=agent_id, user_id="")
    return _blind_of(key.id, key.key)


def blind_keys(*, agent_id: int | None) -> list[bytes]:
    """Every blind-index key the agent's rows may be hashed under, what a lookup hashes its values
    with: the live one (`blind_key`) first, then, while a rotation with new keys walks the rows,
    those of the agent's retired keys (rows the walk has not reached yet hold hashes under them).
    Outside a rotation, the live one alone: read with it, no further query."""
    live = blind_key(agent_id=agent_id)
    with _lock:
        retired = list(_retired.get((agent_id, ""), ()))
    keys = [live]
    now = time.monotonic()
    for key_id, master_id in retired:
        with _lock:
            known = _blind.get(key_id)
        if known is None:
            try:
                known = _blind_of(key_id, _cached(key_id, now) or _unwrap(key_id, agent_id, "", master_id))
            except SealError:
                continue  # destroyed meanwhile: the walk is over, no row holds its hashes any more
        keys.append(known)
    return keys


def blind_keys_reread(*, agent_id: int | None) -> bool:
    """Read the agent's own data key from the register again, not from this process's cache, and
    answer whether its blind keys (`blind_keys`) changed: what a write calls before it makes a row
    its lookup did not find (an entity, a slot's first state). A process that read the key a moment
    before a rotation with new keys retired it knows the old blind key alone until its cache expires
    (OWNER_CACHE_SECONDS, the rotation's settle), so it misses a row another process hashed under the
    new one meanwhile, and would make a second. One query (the key's bytes are cached by its id)."""
    before = blind_keys(agent_id=agent_id)
    with _lock:
        _by_owner.pop((agent_id, ""), None)
    return blind_keys(agent_id=agent_id) != before


def _blind_of(key_id: str, data_key: bytes) -> bytes:
    with _lock:
        known = _blind.get(key_id)
    if known is None:
        known = _blind_derive(data_key)
        with _lock:
            if len(_blind) > 10_000:
                _blind.clear()
            _blind[key_id] = known
    return known


def _blind_derive(data_key: bytes) -> bytes:
    return hmac.new(data_key, b"memory blind index v1", hashlib.sha256).digest()


def blind_keys_of_agents() -> dict[int, list[bytes]]:
    """The blind keys of every agent with a data key of its own (an agent without one has never
    written with encryption on, so has no blind index), read in one query: a search across agents
    (the admin's) hashes its words under each, where blind_keys would read their keys one by one
    (measured: 300 agents, the first search of a process 305 queries and 1.35 s). As `blind_keys`,
    the live one first, then those a rotation with new keys retired and has not destroyed yet (its
    walk has not reached every row hashed under them; an agent that wrote nothing since the
    rotation retired its key has no live one yet, only that)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, agent_id, master_key_id, retired_at IS NOT NULL FROM {TABLE}"
            " WHERE agent_id IS NOT NULL AND user_id = '' AND destroyed_at IS NULL"
            " ORDER BY agent_id, retired_at NULLS FIRST"
        )
        rows = cursor.fetchall()
    keys: dict[int, list[bytes]] = {}
    for key_id, agent_id, master_id, retired in rows:
        with _lock:
            known = _blind.get(key_id)
        if known is None:
            try:
                known = _blind_of(key_id, _unwrap(key_id, agent_id, "", master_id))
            except SealError:
                if not retired:
                    raise
                continue  # destroyed meanwhile: the walk is over
        keys.setdefault(int(agent_id), []).append(known)
    return keys


def data_keys_rewrap(*, batch: int = 500) -> tuple[int, int]:
    """Rewrap every live data key not wrapped by the first master key under it: (rewrapped, live).

    Each key is rewrapped on its own (file replaced whole, then the register row), so a run stopped
    part way keeps what it did and the next run goes on from there. Files of destroyed keys that a
    crash left behind are removed on the way.
    """
    master_id, master = keyring().primary
    done = 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE destroyed_at IS NULL")
        live = int(cursor.fetchone()[0])
        cursor.execute(f"SELECT id FROM {TABLE} WHERE destroyed_at IS NOT NULL")
        for (destroyed,) in cursor.fetchall():
            keystore_remove(str(destroyed))
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, agent_id, user_id, master_key_id FROM {TABLE}"
                " WHERE destroyed_at IS NULL AND master_key_id <> %s ORDER BY id LIMIT %s",
                [master_id, batch],
            )
            rows = cursor.fetchall()
        if not rows:
            return done, live
        for key_id, agent_id, user_id, old_master in rows:
            key = _unwrap(key_id, agent_id, user_id, old_master)
            keystore_write(key_id, wrap(key, master=master, aad=_aad(key_id, agent_id, user_id)), replace=True)
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"UPDATE {TABLE} SET master_key_id = %s WHERE id = %s", [master_id, key_id])
            done += 1


def data_keys_retire() -> int:
    """Retire every live data key (a rotation with new keys): each owner's next write makes a new one."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET retired_at = %s WHERE destroyed_at IS NULL AND retired_at IS NULL", [timezone.now()]
        )
        count = cursor.rowcount
    data_keys_forget()
    return int(count)


def data_keys_retired_left() -> bool:
    """Whether the register holds keys a rotation with new keys retired and has not destroyed yet
    (one is under way, or was stopped part way)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE destroyed_at IS NULL AND retired_at IS NOT NULL)")
        return bool(cursor.fetchone()[0])


def data_keys_retired_destroy() -> list[str]:
    """Destroy the retired keys (no row is sealed under them any more): their files removed."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET destroyed_at = %s WHERE destroyed_at IS NULL AND retired_at IS NOT NULL RETURNING id",
            [timezone.now()],
        )
        ids = [str(r[0]) for r in cursor.fetchall()]
    for key_id in ids:
        keystore_remove(key_id)
    data_keys_forget()
    return ids


def master_keys_in_use() -> dict[str, list[str]]:
    """Master key id -> some of the live data keys it wraps; {} before the register exists."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [TABLE])
        if cursor.fetchone()[0] is None:
            return {}
        cursor.execute(
            f"SELECT master_key_id, (array_agg(id ORDER BY created_at DESC))[1:20] FROM {TABLE}"
            " WHERE destroyed_at IS NULL GROUP BY master_key_id"
        )
        return {str(m): [str(i) for i in ids] for m, ids in cursor.fetchall()}


def data_key_check(key_id: str) -> bool:
    """Unwrap one data key without the cache: False when its file is not in the key store; SealError
    when its master key is missing or wrong."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT agent_id, user_id, master_key_id FROM {TABLE} WHERE id = %s", [key_id])
        row = cursor.fetchone()
    if row is None or keystore_read(key_id) is None:
        return False
    _unwrap(key_id, row[0], row[1], row[2])
    return True


def data_keys_of_person(*, user_id: str, agent_ids: Sequence[int] = ()) -> list[dict[str, object]]:
    """A person's data keys in the register (every agent's, or those of `agent_ids`): id, agent,
    created, destroyed (None while live). What an erasure report names: which keys were shredded."""
    query = f"SELECT id, agent_id, created_at, destroyed_at FROM {TABLE} WHERE user_id = %s"
    params: list[Any] = [user_id]
    if agent_ids:
        query += " AND agent_id = ANY(%s)"
        params.append(list(agent_ids))
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [TABLE])
        if cursor.fetchone()[0] is None:
            return []
        cursor.execute(query + " ORDER BY created_at, id", params)
        return [
            {"id": str(key_id), "agent": agent_id, "created_at": created, "destroyed_at": destroyed}
            for key_id, agent_id, created, destroyed in cursor.fetchall()
        ]
