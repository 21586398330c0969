"""Keyed pseudonyms: how the audit trail names a person and the threads they own.

A record is hashed into the chain as written, so it cannot be edited when the person is erased.
It names them instead by `psn_<hex>`: HMAC-SHA256 of the id under a secret of the person's
(`PseudonymKey`, one per agent and person, sealed under their data key when encryption is on).
The person's erasure deletes that secret (`pseudonyms_forget`): the records stay, the chain still
verifies (the pseudonym is what was hashed), and nothing links them to the person any more. While
the secret lives, staff pages resolve a pseudonym back to the id (`pseudonyms_resolve`).

The write path reads a person's secret once per process per minute (`_CACHE_SECONDS`), not
once per record: a batch of records about one person costs one lookup. A secret deleted in another
process meanwhile may still make a pseudonym here for that long; it links to no one either.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, transaction

from governance.models import PseudonymKey

PREFIX = "psn_"
_CACHE_SECONDS = 60.0
_cache: dict[tuple[int | None, str], tuple[float, bytes]] = {}
_lock = threading.Lock()


def pseudonym_of(secret: bytes, value: str) -> str:
    return PREFIX + hmac.new(secret, value.encode("utf-8"), hashlib.sha256).hexdigest()[:24]


def is_pseudonym(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX) and len(value) == len(PREFIX) + 24


def pseudonym_secret(*, agent_id: int | None, user_id: str) -> bytes:
    """The person's secret, made on first use."""
    owner = (agent_id, user_id)
    now = time.monotonic()
    with _lock:
        hit = _cache.get(owner)
    if hit is not None and now - hit[0] < _CACHE_SECONDS:
        return hit[1]
    row = PseudonymKey.objects.filter(agent_id=agent_id, user_id=user_id).first()
    if row is None:
        try:
            with transaction.atomic():
                row = PseudonymKey.objects.create(agent_id=agent_id, user_id=user_id, secret=secrets.token_hex(32))
        except IntegrityError:  # made meanwhile by another transaction
            row = PseudonymKey.objects.get(agent_id=agent_id, user_id=user_id)
    secret = bytes.fromhex(row.secret)
    with _lock:
        _cache[owner] = (now, secret)
    return secret


def pseudonyms_of(*, agent_id: int | None, user_id: str, values: Iterable[str]) -> list[str]:
    """The pseudonyms the person's secret makes of these ids (none when they have no secret: then
    no record names them by one). For reads: makes no secret."""
    row = PseudonymKey.objects.filter(agent_id=agent_id, user_id=user_id).only("secret").first()
    if row is None:
        return []
    secret = bytes.fromhex(row.secret)
    return [pseudonym_of(secret, v) for v in values if v]


def pseudonymize(value: Any, *, names: Mapping[str, str]) -> Any:
    """`value` with every string that is one of `names` replaced by its pseudonym (in lists and
    dicts too, keys left as they are)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list | tuple):
        return [pseudonymize(v, names=names) for v in value]
    if isinstance(value, dict):
        return {k: pseudonymize(v, names=names) for k, v in value.items()}
    return value


def pseudonym_names(*, agent_id: int | None, user_id: str, also: Iterable[str] = ()) -> dict[str, str]:
    """{id: pseudonym} for the person and the other ids of theirs given (their threads)."""
    secret = pseudonym_secret(agent_id=agent_id, user_id=user_id)
    return {value: pseudonym_of(secret, value) for value in {user_id, *also} if value}


def pseudonyms_forget(*, agent_id: int | None, user_id: str) -> int:
    """Delete the person's secret (their erasure): their pseudonyms link to no one from now on."""
    with _lock:
        _cache.pop((agent_id, user_id), None)
    deleted, _ = PseudonymKey.objects.filter(agent_id=agent_id, user_id=user_id).delete()
    return deleted


def pseudonyms_resolve(
    *, pseudonyms: Iterable[str], agent_ids: Iterable[int | None], threads: Iterable[tuple[int | None, str, str]] = ()
) -> dict[str, str]:
    """{pseudonym: id} for those that resolve: a person whose secret lives, a thread of theirs among
    `threads` ((agent_id, external id, owner's user_id)). One query for the secrets of the agents
    the candidates name; what does not resolve (an erased person's) is left out."""
    wanted = {p for p in pseudonyms if is_pseudonym(p)}
    if not wanted:
        return {}
    candidates = list(threads)
    keys = list(PseudonymKey.objects.filter(agent_id__in=set(agent_ids)).only("agent_id", "user_id", "secret"))
    by_owner = {(k.agent_id, k.user_id): bytes.fromhex(k.secret) for k in keys}
    found: dict[str, str] = {}
    for (_, user_id), secret in by_owner.items():
        name = pseudonym_of(secret, user_id)
        if name in wanted:
            found[name] = user_id
    for agent_id, external_id, user_id in candidates:
        owner_secret = by_owner.get((agent_id, user_id))
        if owner_secret is not None and (name := pseudonym_of(owner_secret, external_id)) in wanted:
            found[name] = external_id
    return found
