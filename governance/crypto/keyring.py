"""Master keys from the settings: `MEMORY_ENCRYPTION_KEYS="k2:<64 hex>,k1:<64 hex>"` (or the
same text in the file MEMORY_ENCRYPTION_KEYS_FILE names). The first key wraps new data keys; the
others only unwrap the data keys wrapped before a rotation. No keys: encryption is off."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

_KEY = re.compile(r"^(?P<id>[A-Za-z0-9_-]{1,32}):(?P<hex>[0-9a-fA-F]{64})$")


@dataclass(frozen=True)
class Keyring:
    # (key id, 32 key bytes), the encrypting key first.
    keys: tuple[tuple[str, bytes], ...]

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @property
    def primary(self) -> tuple[str, bytes]:
        return self.keys[0]

    def get(self, key_id: str) -> bytes | None:
        for kid, key in self.keys:
            if kid == key_id:
                return key
        return None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(kid for kid, _ in self.keys)


def keyring_parse(text: str) -> Keyring:
    """The keys of a MEMORY_ENCRYPTION_KEYS value; ImproperlyConfigured naming what is wrong."""
    keys: list[tuple[str, bytes]] = []
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        match = _KEY.match(part)
        if match is None:
            shown = part.split(":", 1)[0][:32]
            raise ImproperlyConfigured(
                f"MEMORY_ENCRYPTION_KEYS: {shown!r} is not `<id>:<64 hex digits>` (an id of letters, digits, _ or -)"
            )
        if any(kid == match["id"] for kid, _ in keys):
            raise ImproperlyConfigured(f"MEMORY_ENCRYPTION_KEYS: key id {match['id']!r} is given twice")
        keys.append((match["id"], bytes.fromhex(match["hex"])))
    return Keyring(keys=tuple(keys))


_cache: dict[str, Keyring] = {}
_lock = threading.Lock()


def keyring() -> Keyring:
    """The keyring of the current settings (read on each call: a test may override the setting)."""
    text = str(getattr(settings, "MEMORY_ENCRYPTION_KEYS", "") or "")
    with _lock:
        ring = _cache.get(text)
        if ring is None:
            ring = _cache[text] = keyring_parse(text)
    return ring


def encryption_enabled() -> bool:
    return keyring().enabled
