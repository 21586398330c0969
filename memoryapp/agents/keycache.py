"""Key lookups kept in the process for a few seconds, checked against a version on every request.

Looking up the key (a join of key and agent) on every request cost ~18% of a web process's time
(issue 26). The lookup is kept here, by the key's hash, together with the keys' version it was made
at (a counter in Redis, `memoryapp.agents.limits.KEYS_VERSION_NAME`):

1. Every request reads the version in the one Redis round trip it makes anyway (`request_gate`:
   the failed authentications, the version, the rate). A lookup made at another version, older
   than API_KEY_CACHE_SECONDS, or with Redis away is not used: the key is looked up again.
2. Every change of an agent or a key bumps the version: post_save and post_delete of Agent, its
   proxies and AgentKey, and their querysets' bulk writes (`agents_changed`), at once and again
   when the transaction commits (a lookup made between the two, of the state before the commit, is
   then stale too). A key's use (`last_used_at`, at most once a minute) is not a change.
   So a revoked key, a deactivated agent, a new screening policy or purposes list is refused or
   seen on the very next request, in every process.
3. A request gets its own copies of the agent and key (views may set attributes on them).
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from memoryapp.agents.limits import keys_version_bump
from memoryapp.models import Agent, AgentKey, ScreeningSettings
from memoryapp.models.agents import agents_changed


@dataclass(frozen=True)
class CachedKey:
    agent: Agent
    key: AgentKey
    version: str
    until: float


_cache: dict[str, CachedKey] = {}
_lock = threading.Lock()
# Bounded: past this many keys the oldest half is dropped (a key is re-read, nothing else).
MAX_KEYS = 10_000


def cached_key(key_hash: str) -> CachedKey | None:
    """The lookup kept for this key hash, unless it aged out (its version is the caller's to check)."""
    found = _cache.get(key_hash)
    if found is None or found.until < time.monotonic():
        return None
    return found


def key_cache_put(*, key_hash: str, agent: Agent, key: AgentKey, version: str) -> None:
    seconds = settings.API_KEY_CACHE_SECONDS
    if seconds <= 0:
        return
    with _lock:
        if len(_cache) >= MAX_KEYS:
            for name in list(_cache)[: MAX_KEYS // 2]:
                _cache.pop(name, None)
        _cache[key_hash] = CachedKey(agent=agent, key=key, version=version, until=time.monotonic() + seconds)


def key_cache_clear() -> None:
    with _lock:
        _cache.clear()


def request_copies(found: CachedKey) -> tuple[Agent, AgentKey]:
    """The request's own agent and key (the key's cached agent is that copy)."""
    agent, key = _row_copy(found.agent), _row_copy(found.key)
    AgentKey.agent.field.set_cached_value(key, agent)
    return agent, key


def _row_copy(row: Any) -> Any:
    """A copy of a row as it was read (nothing cached on it but what is set here): its field values,
    the mutable ones (JSON, arrays) copied deeply, and a state of its own with nothing cached.
    copy.deepcopy of the key and its agent cost ~6% of an append's web CPU (issue 26)."""
    fresh = row.__class__.__new__(row.__class__)
    values = {
        name: copy.deepcopy(value) if isinstance(value, (dict, list, set)) else value
        for name, value in row.__dict__.items()
    }
    state = copy.copy(row._state)
    state.fields_cache = {}
    values["_state"] = state
    fresh.__dict__ = values
    return fresh


def agents_changed_now() -> None:
    """An agent or key changed: stale everywhere at once, and again once the change commits."""
    key_cache_clear()
    keys_version_bump()
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(keys_version_bump)


def _on_change(sender: Any, **kwargs: Any) -> None:
    agents_changed_now()


def key_cache_connect() -> None:
    """Wire the version bumps (memoryapp/apps.py, at start)."""
    for model in (Agent, ScreeningSettings, AgentKey):
        post_save.connect(_on_change, sender=model, dispatch_uid=f"keycache-save-{model.__name__}")
        post_delete.connect(_on_change, sender=model, dispatch_uid=f"keycache-delete-{model.__name__}")
    agents_changed.connect(_on_change, dispatch_uid="keycache-bulk")
