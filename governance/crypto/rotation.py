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
   Rows of a model whose unique constraint holds an equality column that the new hashes give one
   value (two processes wrote one name under two blind keys in the settle) are folded into one,
   as the model's app says (`collisions_merge_with`), not left to break the walk.
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
from django.db import IntegrityError, connection, models, transaction
from django.db.models import QuerySet
from django.db.models.functions import Cast
from psycopg import errors, sql

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


# --- rows that one blind key hashes alike -------------------------------------------------------------

# A unique constraint over an equality column (an entity's name in its scope) holds for values hashed
# under one blind key. In a rotation's settle two processes may write the same name under two keys
# (one still knows the retired key alone: governance.crypto.fields.lookup_keys_reread narrows that
# to the moment around the retire, it cannot close it), and the walk then hashes both alike. It
# folds such rows into one instead of stopping: `merge(keep, merged)` (primary keys) moves what
# refers to the second onto the first and deletes the second. The app owning the model says how
# (memoryapp.apps); a rotation refuses to start while a model has such a constraint and no merge.
CollisionMerge = Callable[[Any, Any], None]
_collision_merges: dict[type[models.Model], CollisionMerge] = {}
# A row written under the new key after the walk looked for its batch's collisions may take one of
# their values first: the batch is then looked at again (its savepoint rolled back), this often.
_COLLISION_TRIES = 3


def collisions_merge_with(model: type[models.Model], merge: CollisionMerge) -> None:
    """How the rotation folds two rows of `model` its new hashes give one value of the model's unique
    constraint over an equality column (`hashed_unique`): `merge(keep, merged)`."""
    _collision_merges[model] = merge


def hashed_unique(model: type[models.Model]) -> list[models.Field] | None:  # type: ignore[type-arg]
    """The fields of the model's unique constraint that holds an equality column (EqualityHashField),
    None when it has none."""
    meta = model._meta
    sets: list[list[models.Field]] = [  # type: ignore[type-arg]
        [meta.get_field(name) for name in c.fields]  # type: ignore[misc]
        for c in meta.total_unique_constraints
    ]
    sets += [[meta.get_field(name) for name in names] for names in meta.unique_together]  # type: ignore[misc]
    sets += [[f] for f in meta.concrete_fields if f.unique and not f.primary_key]
    return next((fields for fields in sets if any(isinstance(f, EqualityHashField) for f in fields)), None)


def collisions_unmerged() -> list[str]:
    """The sealed models with a unique constraint over an equality column and no merge registered
    (`collisions_merge_with`): a rotation with new keys could not finish on them."""
    return [
        model._meta.label
        for model, _, _ in sealed_models()
        if hashed_unique(model) is not None and model not in _collision_merges
    ]


def _holders(
    model: type[models.Model],
    unique: list[models.Field],  # type: ignore[type-arg]
    values: list[tuple[Any, ...]],
    batch: list[Any],
) -> dict[tuple[Any, ...], Any]:
    """The rows outside `batch` (primary keys) holding each of these values of `unique` already
    (walked, or written under the new key): value -> primary key. One query, each value looked up
    in the constraint's index."""
    pk = model._meta.pk
    if not values or pk is None:
        return {}
    columns = [str(f.column) for f in unique]
    placeholders = sql.SQL("({})").format(
        sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(str(f.db_type(connection)))) for f in unique)
    )
    statement = sql.SQL(
        "SELECT t.{pk}, {held} FROM {table} AS t JOIN (VALUES {values}) AS v ({names}) ON {match}"
        " WHERE NOT (t.{pk} = ANY(%s))"
    ).format(
        pk=sql.Identifier(str(pk.column)),
        held=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in columns),
        table=sql.Identifier(model._meta.db_table),
        values=sql.SQL(", ").join([placeholders] * len(values)),
        names=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        match=sql.SQL(" AND ").join(sql.SQL("t.{c} = v.{c}").format(c=sql.Identifier(c)) for c in columns),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [v for value in values for v in value] + [list(batch)])
        return {tuple(found[1:]): found[0] for found in cursor.fetchall()}


def _collisions_fold(
    model: type[models.Model],
    unique: list[models.Field],  # type: ignore[type-arg]
    rows: list[models.Model],
) -> set[Any]:
    """Fold the rows of a batch (read under lock) that their new hashes give one value of `unique`,
    with each other or with a row outside the batch, into one: the row outside (it holds the value
    already), else the batch's first. Returns the primary keys folded away (deleted).

    Only values that change are looked up outside the batch: a rotation without new keys (or the
    erasure's, a thread's move) hashes under the same key, and the constraint held before."""
    equal = [f for f in unique if isinstance(f, EqualityHashField)]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    changed: set[tuple[Any, ...]] = set()
    for row in rows:
        stored = [getattr(row, f.attname) for f in equal]
        setattr(row, REHASH, True)
        for f in equal:
            f.pre_save(row, False)  # the value under the live blind key, set on the row
        value = tuple(getattr(row, f.attname) for f in unique)
        groups.setdefault(value, []).append(row.pk)
        if stored != [getattr(row, f.attname) for f in equal]:
            changed.add(value)
    held = _holders(model, unique, sorted(changed, key=repr), [row.pk for row in rows])
    folded: set[Any] = set()
    for value, pks in groups.items():
        keep = held.get(value, pks[0])
        for merged in pks:
            if merged == keep:
                continue
            merge = _collision_merges.get(model)
            if merge is None:
                raise SealError(
                    f"{model._meta.label} rows {keep} and {merged} hash alike under the new keys and no"
                    " merge is registered for them (governance.crypto.rotation.collisions_merge_with)"
                )
            merge(keep, merged)
            folded.add(merged)
    return folded


def _seal_again(
    model: type[models.Model],
    fields: list[models.Field],  # type: ignore[type-arg]
    derived: list[models.Field],  # type: ignore[type-arg]
    pks: list[Any],
) -> int:
    """Read the rows again under a row lock (a change made meanwhile, a redaction, is never undone),
    seal their values under their owner's key as a save would (each field's pre_save: the blind
    index and equality hashes (`derived`) from the plaintext, before the sealed values replace it),
    and write them in one UPDATE. Rows the new hashes make collide are folded first
    (`_collisions_fold`); returns how many were folded away."""
    unique = hashed_unique(model)
    if unique is None:
        return _seal_again_once(model, fields, derived, pks, None)
    tries = 0
    while True:
        try:
            with transaction.atomic():
                return _seal_again_once(model, fields, derived, pks, unique)
        except IntegrityError as exc:
            tries += 1
            if tries == _COLLISION_TRIES or not isinstance(exc.__cause__, errors.UniqueViolation):
                raise


def _seal_again_once(
    model: type[models.Model],
    fields: list[models.Field],  # type: ignore[type-arg]
    derived: list[models.Field],  # type: ignore[type-arg]
    pks: list[Any],
    unique: list[models.Field] | None,  # type: ignore[type-arg]
) -> int:
    locked = with_owner(model._default_manager.select_for_update(of=("self",)).filter(pk__in=pks).order_by("pk"))
    if any(f.name == "thread" for f in model._meta.concrete_fields):
        locked = locked.select_related("thread")
    found = list(locked)
    folded: set[Any] = set()
    if unique is not None:
        folded = _collisions_fold(model, unique, found)
        if folded:
            # Read again: a merge changed the rows kept (an entity's other names).
            found = list(locked.exclude(pk__in=folded))
    written = [*derived, *fields]
    rows = []
    for row in found:
        setattr(row, REHASH, True)  # equality columns hashed again from their source (new keys)
        rows.append([row.pk, *(f.pre_save(row, False) for f in written)])
    _rows_write(model, written, rows)
    return len(folded)


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
    queryset: QuerySet[Any],
    *,
    batch: int = 500,
    step: Callable[[int], None] | None = None,
    rekey: bool = False,
    folded: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Seal again, under their owner's live data key, the rows of `queryset` that need it (see
    `_is_stale`), a batch per transaction (a savepoint inside the caller's): (rows sealed again,
    rows left as they are because their key was destroyed). `step(n)` after each batch read;
    `folded(n)` after a batch whose new hashes made rows collide, with the rows folded into others
    (`_collisions_fold`: merged and deleted, not counted as sealed again).

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
                gone = _seal_again(model, fields, [*blind, *equal], stale)
                resealed += len(stale) - gone
                if gone and folded is not None:
                    folded(gone)
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
    unmerged = collisions_unmerged()
    if unmerged:
        raise ValueError(
            f"no merge registered for rows the new hashes may make collide: {', '.join(unmerged)}"
            " (governance.crypto.rotation.collisions_merge_with)"
        )
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
    merged: dict[str, int] = {}
    for model, _, _ in found:
        table = model._meta.db_table

        def fold(n: int, table: str = table) -> None:
            merged[table] = merged.get(table, 0) + n

        rows[table], shredded[table] = rows_reseal(
            model._default_manager.all(), batch=batch, step=step, rekey=rehash_all, folded=fold
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
        # Rows folded into another that the new hashes gave the same unique value (two processes
        # wrote one name under two blind keys in the settle): merged, then deleted.
        "rows_merged": merged,
        "master_keys_still_needed": [ring.primary[0]],
    }
