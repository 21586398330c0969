"""Rotation: after it, every live data key is wrapped by the first master key (the others can be
removed from MEMORY_ENCRYPTION_KEYS) and every sealed column of every model is sealed under its
row's owner's live data key. The same pass encrypts a database written with encryption off
(turning encryption on), and moves the rows of a thread whose person changed to the new person's
key (so shredding the new person takes them).

Steps (`encryption_rotate`):
0. With `rekey`: retire every data key (new rows take new keys), and wait for caches to expire.
1. Rewrap the data keys not wrapped by the first master key (each on its own, so a stopped run
   keeps what it did); remove key files of destroyed keys a crash left behind.
2. For each model with sealed fields, walk its rows in primary-key order, a batch per transaction;
   a row is saved again (sealed by its fields' pre_save) when a sealed column holds plaintext or a
   value sealed under another key than its owner's, when its blind index is missing, or when an
   equality column (EqualityHashField) holds plaintext instead of its keyed hash.
3. With `rekey`: destroy the retired keys (every row moved off them).
4. Report what was done, with progress after each batch.

Safe to run again at any time, and while the service runs: a row written meanwhile is sealed
already, and a second run finds nothing left to do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import connection, models, transaction
from django.db.models import QuerySet
from django.db.models.functions import Cast
from psycopg import sql

from governance.crypto.envelope import (
    OWNER_CACHE_SECONDS,
    data_key_open,
    data_keys_forget,
    data_keys_retire,
    data_keys_retired_destroy,
    data_keys_retired_left,
    data_keys_rewrap,
)
from governance.crypto.fields import (
    REHASH,
    BlindIndexField,
    EqualityHashField,
    SealedJSONField,
    SealedTextField,
    is_equality_hash,
    key_owner_key,
    row_key_owner,
    with_owner,
)
from governance.crypto.keyring import keyring
from governance.crypto.sealing import PREFIX, SealError, sealed_key_id

Progress = Callable[[int, int], None]


def sealed_models() -> list[tuple[type[models.Model], list[models.Field], list[BlindIndexField]]]:  # type: ignore[type-arg]
    found = []
    for model in apps.get_models():
        if model._meta.proxy:
            # A proxy (StaleItem, PlaybookDraft, EntityOverview) shares its model's table: walked once, as it.
            continue
        fields: list[models.Field] = [  # type: ignore[type-arg]
            f for f in model._meta.concrete_fields if isinstance(f, (SealedTextField, SealedJSONField))
        ]
        blind = [f for f in model._meta.concrete_fields if isinstance(f, BlindIndexField)]
        if fields:
            found.append((model, fields, blind))
    return found


def _stored_key(raw: str | None, *, json_value: bool) -> str | None:
    """The key id a stored value is sealed under; "" for a plaintext value; None for no value."""
    if raw is None or raw == "" or (json_value and raw in ("null", "{}")):
        return None
    if json_value:
        text = json.loads(raw)
        if not isinstance(text, str) or not text.startswith(PREFIX):
            return ""
        return sealed_key_id(text)
    return sealed_key_id(raw) if raw.startswith(PREFIX) else ""


def _owner_key(row: models.Model) -> str:
    """The id of the key the row's values are sealed under: its owner's, or the key set of its
    owner and the people its `key_people` lists (governance.crypto.fields.row_key_owner)."""
    return key_owner_key(row_key_owner(row)).id


def _opens(key_ids: set[str]) -> bool:
    try:
        for key_id in key_ids:
            data_key_open(key_id)
    except SealError:
        return False
    return True


def _stored_keys(row: models.Model, fields: list[models.Field]) -> set[str]:  # type: ignore[type-arg]
    """The key ids the row's sealed values are stored under ("" for a plaintext value)."""
    return {
        _stored_key(getattr(row, f"_sealed_raw_{f.attname}"), json_value=isinstance(f, SealedJSONField)) for f in fields
    } - {None}  # type: ignore[return-value]


def _is_stale(
    row: models.Model,
    fields: list[models.Field],  # type: ignore[type-arg]
    blind: list[BlindIndexField],
    equal: list[EqualityHashField],
) -> bool:
    """Whether a row read with its stored values needs sealing again: a value in plaintext or under
    another key than its owner's, a text without its blind index, or an equality column holding
    plaintext instead of its keyed hash."""
    want = _owner_key(row)
    if any(key != want for key in _stored_keys(row, fields)):
        return True
    if any(getattr(row, e.attname) and not is_equality_hash(getattr(row, e.attname)) for e in equal):
        return True
    return any(
        getattr(row, b.attname) is None and getattr(row, f"_sealed_raw_{b.source}", None) not in (None, "")
        for b in blind
    )


def _seal_again(
    model: type[models.Model],
    fields: list[models.Field],  # type: ignore[type-arg]
    derived: list[models.Field],  # type: ignore[type-arg]
    pks: list[Any],
) -> None:
    """Read the rows again under a row lock (a change made meanwhile, a redaction, is never undone),
    seal their values under their owner's key as a save would (each field's pre_save: the blind
    index and equality hashes (`derived`) from the plaintext, before the sealed values replace it),
    and write them in one UPDATE."""
    locked = with_owner(model._default_manager.select_for_update(of=("self",)).filter(pk__in=pks).order_by("pk"))
    if any(f.name == "thread" for f in model._meta.concrete_fields):
        locked = locked.select_related("thread")
    written = [*derived, *fields]
    rows = []
    for row in locked:
        setattr(row, REHASH, True)  # equality columns hashed again from their source (new keys)
        rows.append([row.pk, *(f.pre_save(row, False) for f in written)])
    _rows_write(model, written, rows)


def _rows_write(model: type[models.Model], written: list[models.Field], rows: list[list[Any]]) -> None:  # type: ignore[type-arg]
    """Write rows of (pk, *values of `written`) in one UPDATE ... FROM (VALUES ...): bulk_update's
    CASE per row and column costs the square of the batch (measured: a thread of 2,000 entries given
    to another person took 4.2 s with bulk_update, 1.4 s with this)."""
    pk = model._meta.pk
    if not rows or pk is None:
        return
    columns = [pk, *written]
    placeholders = sql.SQL("({})").format(
        sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(str(f.db_type(connection)))) for f in columns)
    )
    statement = sql.SQL(
        "UPDATE {table} AS t SET {sets} FROM (VALUES {values}) AS v ({names}) WHERE t.{pk} = v.{pk}"
    ).format(
        table=sql.Identifier(model._meta.db_table),
        sets=sql.SQL(", ").join(sql.SQL("{c} = v.{c}").format(c=sql.Identifier(str(f.column))) for f in written),
        values=sql.SQL(", ").join([placeholders] * len(rows)),
        names=sql.SQL(", ").join(sql.Identifier(str(f.column)) for f in columns),
        pk=sql.Identifier(str(pk.column)),
    )
    params = [f.get_db_prep_save(value, connection) for row in rows for f, value in zip(columns, row, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def rows_reseal(
    queryset: QuerySet[Any], *, batch: int = 500, step: Callable[[int], None] | None = None, rekey: bool = False
) -> tuple[int, int]:
    """Seal again, under their owner's live data key, the rows of `queryset` that need it (see
    `_is_stale`), a batch per transaction (a savepoint inside the caller's): (rows sealed again,
    rows left as they are because their key was destroyed). `step(n)` after each batch read.

    `rekey` (a rotation with new keys): every row holding a sealed value, also one already sealed
    under its owner's new key. A row written while the other processes' caches expired (the
    settle) may be sealed under a person's new key and hashed under the agent's retired blind key:
    the two keys come from two entries of a process's cache, which expire apart. Nothing stored
    tells which blind key a row's hashes are under, so such a row is hashed again with the rest
    (those written during the rotation are the only rows this adds).

    The rotation walks every row of every sealed model with it; a thread whose person changed
    moves its rows to the new person's key with it (memoryapp.threads.services).
    """
    model = queryset.model
    fields: list[models.Field] = [  # type: ignore[type-arg]
        f for f in model._meta.concrete_fields if isinstance(f, (SealedTextField, SealedJSONField))
    ]
    blind = [f for f in model._meta.concrete_fields if isinstance(f, BlindIndexField)]
    equal = [f for f in model._meta.concrete_fields if isinstance(f, EqualityHashField)]
    raw = {f"_sealed_raw_{f.attname}": Cast(f.attname, models.TextField()) for f in fields}
    # The sealed values are read as stored (never opened): a shredded person's rows stay unread.
    queryset = with_owner(queryset.order_by("pk").defer(*(f.name for f in fields)).annotate(**raw))
    if any(f.name == "thread" for f in model._meta.concrete_fields):
        queryset = queryset.select_related("thread")
    resealed = shredded = 0
    last = None
    while True:
        page = queryset if last is None else queryset.filter(pk__gt=last)
        with transaction.atomic():
            rows = list(page[:batch])
            stale = []
            for row in rows:
                if not (rekey and _stored_keys(row, fields)) and not _is_stale(row, fields, blind, equal):
                    continue
                if not _opens({key for key in _stored_keys(row, fields) if key}):
                    shredded += 1
                    continue
                stale.append(row.pk)
            if stale:
                _seal_again(model, fields, [*blind, *equal], stale)
                resealed += len(stale)
        if not rows:
            return resealed, shredded
        last = rows[-1].pk
        if step is not None:
            step(len(rows))


def encryption_rotate(
    *, batch: int = 500, rekey: bool = False, settle: float = OWNER_CACHE_SECONDS + 1, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the steps of the module doc; the result counts what each did.

    With `rekey`, every data key is first retired (each owner gets a new one), so step 2 seals every
    row again under a new key; the retired keys are destroyed at the end. `settle`: seconds to wait
    after retiring, for the other processes' caches of the old keys to expire.
    """
    ring = keyring()
    if not ring.enabled:
        raise ValueError("encryption is off: set MEMORY_ENCRYPTION_KEYS (the new key first) to rotate or encrypt")
    data_keys_forget()
    rewrapped, live = data_keys_rewrap(batch=batch)
    retired = data_keys_retire() if rekey else 0
    if retired and settle > 0:
        time.sleep(settle)
    # Rows may be hashed under a retired blind key while the register holds one (this run retired
    # them, or a run stopped part way did): the walk hashes every row again (`rows_reseal`).
    rehash_all = bool(retired) or data_keys_retired_left()
    found = sealed_models()
    total = sum(model._default_manager.count() for model, _, _ in found)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    rows: dict[str, int] = {}
    shredded: dict[str, int] = {}
    for model, _, _ in found:
        table = model._meta.db_table
        rows[table], shredded[table] = rows_reseal(
            model._default_manager.all(), batch=batch, step=step, rekey=rehash_all
        )
    destroyed = data_keys_retired_destroy() if rekey else []
    return {
        "data_keys_retired_and_destroyed": len(destroyed),
        "master_key": ring.primary[0],
        "data_keys_rewrapped": rewrapped,
        "data_keys_live": live,
        "rows_checked": done,
        "rows_resealed": rows,
        # Rows sealed under a destroyed key (a shredded person whose rows were not deleted): left as
        # they are, unreadable.
        "rows_shredded": shredded,
        "master_keys_still_needed": [ring.primary[0]],
    }
