"""Model fields sealed at rest: the boundary where rows are encrypted on save and opened on load.

A model with sealed fields says whose data a row is with `encryption_owner() -> (agent_id, user_id)`
(user_id "" for rows about no one); the row is sealed under that owner's data key. A row that also
names or holds the words of other people lists them in a `key_people` column (KEY_PEOPLE): it is
sealed under the key set of its owner and all of them (`data_key_for_people`), so destroying any
one of their keys shreds every copy of it (`row_key_people` says which people a row needs). Reads through
the ORM (querysets, values(), raw()) open values in `from_db_value`; a raw cursor opens them with
`value_open`. With encryption off nothing is sealed, and a sealed value read still opens (with the
keys) or fails loudly (without).

A write that bypasses `pre_save` (QuerySet.update, bulk_update) is sealed under the key of no
agent: still encrypted, but not shredded with a person. The services write sealed fields through
save() or bulk_create(), which call pre_save, or seal the values of an update with
`update_values_sealed` (bulk_update: `pre_save` each row's values first, as the rotation does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.expressions import Expression

from governance.crypto.blind import EQUALITY_PREFIX, equality_hash, term_hash, text_hashes, word_hasher
from governance.crypto.envelope import (
    DataKey,
    Owner,
    blind_key,
    blind_keys,
    blind_keys_reread,
    data_key_for_people,
    data_key_open,
    data_keys_for,
)
from governance.crypto.keyring import encryption_enabled
from governance.crypto.sealing import PREFIX, is_sealed, seal, sealed_key_id, unseal


def value_aad(table: str, column: str) -> bytes:
    return f"{table}.{column}".encode()


def text_seal(text: str, *, owner: Owner, aad: bytes) -> str:
    return text_seal_with(text, key=data_key_for_people(agent_id=owner[0], people=(owner[1],)), aad=aad)


def text_seal_with(text: str, *, key: DataKey, aad: bytes) -> str:
    return seal(text.encode("utf-8"), key_id=key.id, key=key.key, aad=aad)


def text_open(value: str, *, aad: bytes) -> str:
    key = data_key_open(sealed_key_id(value))
    return unseal(value, key=key, aad=aad).decode("utf-8")


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# What a row's owner's person is read through when its model says it in SQL (a classmethod
# `encryption_owner_person()` returning that expression): the rotation annotates its rows with it,
# where `encryption_owner` would otherwise look it up once per row (a quote's entry's thread, a
# thread-scoped row's thread). The models' `encryption_owner` read it first when it is there.
OWNER_PERSON = "sealed_owner_person"


def _owner(instance: models.Model) -> Owner:
    owner = getattr(instance, "encryption_owner", None)
    if owner is None:
        return (None, "")
    found: Owner = owner()
    return found


# The column of a model listing the people, besides its owner, whose keys its sealed values need
# (an array of user ids, GIN-indexed where the erasure looks a person up in it).
KEY_PEOPLE = "key_people"
# (agent id, the people whose keys seal the row, sorted; "" the agent's own key)
KeyOwner = tuple[int | None, tuple[str, ...]]


def row_key_owner(instance: models.Model) -> KeyOwner:
    """Whose keys seal the row: its owner's (`encryption_owner`) and those of the people its
    `key_people` names (who are named in it or whose words it holds without being its owner)."""
    agent_id, person = _owner(instance)
    others = getattr(instance, KEY_PEOPLE, None)
    if not others:
        return (agent_id, (person,))
    return (agent_id, tuple(sorted({person, *others})))


def key_owner_key(owner: KeyOwner) -> DataKey:
    return data_key_for_people(agent_id=owner[0], people=owner[1])


def key_people_of(owner_person: str, people: Iterable[str]) -> list[str] | None:
    """What a row's `key_people` holds: the people besides its owner's person, sorted (None for none)."""
    return sorted(set(people) - {owner_person}) or None


class _Sealed:
    """What the two sealed fields share; `_plain` says whether a value needs sealing."""

    model: type[models.Model]
    column: str

    @property
    def aad(self) -> bytes:
        return value_aad(self.model._meta.db_table, self.column)

    def _plain(self, value: Any) -> bool:
        return value is not None and value != "" and not is_sealed(value) and not isinstance(value, Expression)

    def seal_value(self, value: Any, owner: KeyOwner) -> Any:
        return self.seal_with(value, key_owner_key(owner))

    def seal_with(self, value: Any, key: DataKey) -> Any:
        raise NotImplementedError

    def seal_for(self, instance: models.Model, value: Any) -> Any:
        """The value as stored for this row: sealed under its owner's key when encryption is on."""
        if encryption_enabled() and self._plain(value):
            return self.seal_value(value, row_key_owner(instance))
        return value

    # The field's own steps (TextField's, JSONField's) come after this class in the fields' MRO.
    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        return self.seal_for(model_instance, super().pre_save(model_instance, add))  # type: ignore[misc]

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        """A value no row's save sealed (an update's, a lookup's): sealed under the key of no agent."""
        if encryption_enabled() and self._plain(value):
            value = self.seal_value(value, (None, ("",)))
        return super().get_db_prep_save(value, connection)  # type: ignore[misc]


class SealedTextField(_Sealed, models.TextField):  # type: ignore[misc]
    def seal_with(self, value: Any, key: DataKey) -> Any:
        return text_seal_with(str(value), key=key, aad=self.aad)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, str) and value.startswith(PREFIX):
            return text_open(value, aad=self.aad)
        return value


class SealedJSONField(_Sealed, models.JSONField):  # type: ignore[misc]
    def seal_with(self, value: Any, key: DataKey) -> Any:
        return text_seal_with(json_text(value), key=key, aad=self.aad)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        value = super().from_db_value(value, expression, connection)
        if isinstance(value, str) and value.startswith(PREFIX):
            return json.loads(text_open(value, aad=self.aad))
        return value


class SealedMetadataField(SealedJSONField):
    """A JSON object a writer puts beside the content (a thread's or an entry's `metadata`), sealed
    like SealedJSONField, except the empty object, which holds nothing: stored as `{}` (most rows'
    value), so a write of many rows seals only those that say something."""

    def _plain(self, value: Any) -> bool:
        return value != {} and super()._plain(value)


def update_values_sealed(instance: models.Model, values: dict[str, Any]) -> dict[str, Any]:
    """The values of a QuerySet.update of this row (or of rows of the same owner), its sealed
    fields' values sealed under the row's owner's key: an update bypasses pre_save, and its
    get_db_prep_save would seal them under the key of no agent (never shredded with the owner)."""
    sealed = dict(values)
    for name, value in values.items():
        field = instance._meta.get_field(name)
        if isinstance(field, _Sealed):
            sealed[name] = field.seal_for(instance, value)
    return sealed


def value_open(value: Any, *, table: str, column: str, json_value: bool = False) -> Any:
    """Open a value a raw cursor read (the ORM's reads open it themselves)."""
    if isinstance(value, str) and value.startswith(PREFIX):
        text = text_open(value, aad=value_aad(table, column))
        return json.loads(text) if json_value else text
    return value


def json_text_open(value: Any, *, table: str, column: str) -> Any:
    """A jsonb value a raw cursor read as text: the JSON text of its plain value."""
    if isinstance(value, str) and value.startswith('"' + PREFIX):
        return text_open(json.loads(value), aad=value_aad(table, column))
    return value


class KeyPeopleField(ArrayField):  # type: ignore[type-arg]
    """The `key_people` of a row (KEY_PEOPLE): the people besides its owner whose data keys its
    sealed values need, sorted; null for none (most rows). Kept whether encryption is on or off, so
    a rotation that turns it on seals each row under the right keys."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("base_field", models.CharField(max_length=128))
        kwargs.setdefault("null", True)
        kwargs.setdefault("blank", True)
        # Bookkeeping the writers keep: never in an admin form.
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        # Whether a form shows it is not schema: migrations need not know it.
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("editable", None)
        return name, path, args, kwargs


class BlindIndexField(ArrayField):  # type: ignore[type-arg]
    """The keyed hashes of the words of the field `source` (governance.crypto.blind), and of the
    fields `also` names (an item's subject beside its value), computed on save when encryption is on
    (null when it is off: the plaintext full-text index serves then)."""

    def __init__(self, *args: Any, source: str = "", also: tuple[str, ...] = (), **kwargs: Any) -> None:
        self.source = source
        self.also = tuple(also)
        kwargs.setdefault("base_field", models.BigIntegerField())
        kwargs.setdefault("null", True)
        kwargs.setdefault("blank", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["source"] = self.source
        if self.also:
            kwargs["also"] = self.also
        return name, path, args, kwargs

    def text_of(self, instance: models.Model) -> str:
        """The text whose words the index holds: `source`'s, then those of `also`."""
        texts = [str(getattr(instance, name) or "") for name in (self.source, *self.also)]
        return " ".join(t for t in texts if t)

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        if not encryption_enabled():
            return None
        return text_hashes_for(model_instance, self.text_of(model_instance))


class PairIndexField(BlindIndexField):
    """The keyed hashes of the top-level key/value pairs of the JSON object in `source` (a thread's
    metadata), when encryption is on (null when off: the plaintext JSON is filtered then). A filter
    "each of these keys holds exactly this value" asks for rows holding all their hashes
    (`pair_hashes`), as JSONB containment of the plaintext does, without reading it."""

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        if not encryption_enabled():
            return None
        value = getattr(model_instance, self.source)
        return pair_hashes(agent_id=_owner(model_instance)[0], pairs=value if isinstance(value, dict) else {})


def _pair_texts(pairs: dict[str, Any]) -> list[str]:
    return [
        "pair\x00" + key + "\x00" + json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        for key, value in pairs.items()
    ]


def pair_hashes(*, agent_id: int | None, pairs: dict[str, Any]) -> list[int]:
    """The keyed hashes of key/value pairs (the agent's blind key): the key and the value's
    canonical JSON (keys sorted, so `{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` are one value; a
    number and its text differ, as they do in JSONB)."""
    texts = _pair_texts(pairs)
    return word_hasher(blind_key(agent_id=agent_id)).many(texts) if texts else []


def pair_hashes_each_key(*, agent_id: int | None, pairs: dict[str, Any]) -> list[list[int]]:
    """The pairs' hashes (`pair_hashes`) under each blind key the agent's rows may be hashed under
    (`blind_keys`: the live one, and a retired one while a rotation with new keys walks the rows):
    a row holding every pair holds every hash of one of these lists (its pairs are hashed under one
    key)."""
    texts = _pair_texts(pairs)
    return [word_hasher(key).many(texts) if texts else [] for key in blind_keys(agent_id=agent_id)]


def text_hashes_for(instance: models.Model, text: str) -> list[int] | None:
    """The blind index of a row's text (its owner's agent's key); None for an empty text."""
    if not text:
        return None
    return text_hashes(text, key=blind_key(agent_id=_owner(instance)[0]))


def equality_value(*, agent_id: int | None, text: str) -> str:
    """What an equality column (EqualityHashField) holds for a normalised value, and what a lookup
    by that value compares with: its keyed hash under the agent's blind key when encryption is on,
    the value itself when it is off."""
    if not encryption_enabled() or not text:
        return text
    return equality_hash(text, key=blind_key(agent_id=agent_id))


def equality_values(*, agent_id: int | None, text: str) -> list[str]:
    """What an equality column may hold for a normalised value: with encryption on, its keyed hash
    under the agent's live blind key, and those the rotation has not reached yet may hold: its
    hash under a blind key a rotation with new keys retired (`blind_keys`), and the value itself for
    a row written before encryption was turned on. A lookup finds such a row by them meanwhile,
    instead of writing a second row beside it."""
    if not encryption_enabled() or not text:
        return [text]
    return [*(equality_hash(text, key=key) for key in blind_keys(agent_id=agent_id)), text]


def lookup_keys_reread(*, agent_id: int | None) -> bool:
    """Before a write makes a row because a lookup by `equality_values` found none: read the agent's
    blind keys from the register again (`blind_keys_reread`) and answer whether they changed, so
    the lookup is made again with them. In a rotation's settle a process whose cached key predates
    the retire hashes under the old blind key alone, and would miss the row another process just
    made under the new one (a second entity of one name, a second open state of one slot). False,
    and no query, with encryption off."""
    return encryption_enabled() and blind_keys_reread(agent_id=agent_id)


def words_hashes(*, agent_id: int | None, words: Iterable[str]) -> list[int]:
    """The keyed hashes of query words under every blind key the agent's rows may be hashed under
    (`blind_keys`: the live one, and a retired one while a rotation with new keys walks the rows),
    what a lookup asks a blind index for with `&&` (any of them); words that normalise to nothing
    are left out."""
    keys = blind_keys(agent_id=agent_id)
    return [h for word in words for key in keys if (h := term_hash(word, key=key)) is not None]


class EqualityHashField(models.CharField):  # type: ignore[type-arg]
    """A normalised copy of a sealed field, for equality lookups and unique constraints in the
    database: plaintext when encryption is off, a keyed hash (`bh:<hex>`, governance.crypto.blind)
    when it is on, so equal values still compare equal and nothing readable is stored.

    The writers set the normalised plaintext; `pre_save` hashes it under the row's agent's blind
    key. A value already hashed is kept, except in the rotation (`REHASH` set on the row: new keys
    change the blind key), which computes it again from `source` through `normalize`, so `normalize`
    must be the writers' normalisation.
    Lookups compare with `equality_values(agent_id=..., text=...)` (`__in`: a row not hashed yet
    is found by its plaintext until the rotation hashes it).
    """

    def __init__(
        self,
        *args: Any,
        source: str = "",
        normalize: Callable[[str], str] | None = None,
        kept: str = "",
        **kwargs: Any,
    ) -> None:
        self.source = source
        self.normalize = normalize
        # A sealed field (declared after this one) that keeps the plaintext hashed: the rotation
        # hashes it again under new keys, where `source` may have been edited since (a staff rename
        # keeps the name an entity is matched on, as the plaintext column does with encryption off).
        self.kept = kept
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        # `normalize` is Python behaviour, not schema: migrations need not know it.
        name, path, args, kwargs = super().deconstruct()
        kwargs["source"] = self.source
        if self.kept:
            kwargs["kept"] = self.kept
        return name, path, args, kwargs

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = super().pre_save(model_instance, add)
        if not encryption_enabled() or not value:
            return value
        text = str(value)
        if is_equality_hash(text):
            # Kept as it is on an ordinary save (a staff edit of the name leaves the column as it
            # leaves the plaintext with encryption off); made again only by the rotation.
            again = self._rehash_text(model_instance) if getattr(model_instance, REHASH, False) else None
            if again is None:
                return value
            text = again
        hashed = equality_value(agent_id=_owner(model_instance)[0], text=text)
        setattr(model_instance, self.attname, hashed)
        if self.kept:
            setattr(model_instance, self.kept, text)
        return hashed

    def _rehash_text(self, instance: models.Model) -> str | None:
        """What the rotation hashes again: the plaintext kept, else (a row hashed before it was
        kept) `source` normalised; None when neither can be had (the hash stays)."""
        kept = str(getattr(instance, self.kept) or "") if self.kept else ""
        if kept:
            return kept
        if self.normalize is not None and self.source:
            return self.normalize(str(getattr(instance, self.source) or ""))
        return None


class ValueHashField(EqualityHashField):
    """The keyed hash of a sealed field's whole value, for what SQL compares it by (an item's subject:
    the lookups of its slot, the admin's search): `bh:<hex>` under the row's agent's blind key when
    encryption is on, the value itself when it is off (one column for SQL to compare either way).

    Unlike EqualityHashField, the writers never set it: it is made from `source` (exactly, no
    normalisation) on every save, the rotation's included. Lookups compare with
    `equality_values(agent_id=..., text=value)` (`__in`: a row written before encryption was
    turned on holds the value itself until the rotation hashes it)."""

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = equality_value(agent_id=_owner(model_instance)[0], text=str(getattr(model_instance, self.source) or ""))
        setattr(model_instance, self.attname, value)
        return value


# Set on a row by the rotation before it saves it: its equality columns are hashed again from their
# source (new keys change the blind key).
REHASH = "_equality_rehash"


def is_equality_hash(value: object) -> bool:
    return isinstance(value, str) and value.startswith(EQUALITY_PREFIX)


M = TypeVar("M", bound=models.Model)


def with_owner(queryset: models.QuerySet[M]) -> models.QuerySet[M]:
    """The rows with their owner's person read in the same query, where the model says how
    (OWNER_PERSON): a page of rows costs one query, not one more per row."""
    person = getattr(queryset.model, "encryption_owner_person", None)
    return queryset.annotate(**{OWNER_PERSON: person()}) if person is not None else queryset


def sealed_update(queryset: models.QuerySet[M], **values: Any) -> int:
    """`queryset.update(**values)` with its sealed fields sealed under each row's owner's key.

    A plain update would seal them under the key of no agent (`get_db_prep_save`), so they would
    not be shredded with their person. With encryption on, the rows are grouped by owner (their
    sealed columns never read) and each group updated with the values sealed under its key: one
    UPDATE per owner. Returns the rows updated, as `update` does.
    """
    model = queryset.model
    if not encryption_enabled() or not any(isinstance(model._meta.get_field(n), _Sealed) for n in values):
        return queryset.update(**values)
    deferred = [f.name for f in model._meta.concrete_fields if isinstance(f, _Sealed)]
    groups: dict[KeyOwner, tuple[models.Model, list[Any]]] = {}
    for found in with_owner(queryset.order_by().defer(*deferred)):
        groups.setdefault(row_key_owner(found), (found, []))[1].append(found.pk)
    return sum(
        model._default_manager.filter(pk__in=pks).update(**update_values_sealed(first, values))
        for first, pks in groups.values()
    )


class BatchSealer:
    """What a write of many rows that bypasses Model.save (the COPY of a batch of entries) stores in
    their sealed fields and blind indexes: the same values `pre_save` gives (each row sealed under
    its own owner's data key, its index under its agent's blind key), with each owner's keys looked
    up once for the batch instead of once per row and field. A batch is one write: holding an
    owner's key for its length is what the owner cache (OWNER_CACHE_SECONDS) does between writes.

    Only for encryption on (the caller checks `encryption_enabled()`: with it off, the fields'
    values are stored as they are and the blind index is null).
    """

    def __init__(self, fields: list[models.Field]) -> None:  # type: ignore[type-arg]
        self.fields = fields
        self._keys: dict[KeyOwner, DataKey] = {}
        self._blind: dict[int | None, bytes] = {}

    def prepare(self, instances: Iterable[models.Model]) -> None:
        """Look up at once the data keys of every person whose key seals a row of the batch (one
        query an agent, where a batch naming many people would ask for each one's key apart)."""
        people: dict[int | None, set[str]] = {}
        for instance in instances:
            if getattr(instance, KEY_PEOPLE, None):
                agent_id, members = row_key_owner(instance)
                people.setdefault(agent_id, set()).update(members)
        for agent_id, everyone in people.items():
            data_keys_for(agent_id=agent_id, people=sorted(everyone))

    def key(self, owner: KeyOwner) -> DataKey:
        key = self._keys.get(owner)
        if key is None:
            key = self._keys[owner] = key_owner_key(owner)
        return key

    def blind_key(self, agent_id: int | None) -> bytes:
        key = self._blind.get(agent_id)
        if key is None:
            key = self._blind[agent_id] = blind_key(agent_id=agent_id)
        return key

    def row(self, instance: models.Model) -> list[Any]:
        """The stored values of `fields` for this row, in their order."""
        owner = row_key_owner(instance)
        values: list[Any] = []
        for field in self.fields:
            if isinstance(field, BlindIndexField):
                text = field.text_of(instance)
                values.append(text_hashes(text, key=self.blind_key(owner[0])) if text else None)
                continue
            value = getattr(instance, field.attname)
            if isinstance(field, _Sealed) and field._plain(value):
                value = field.seal_with(value, self.key(owner))
            values.append(value)
        return values
