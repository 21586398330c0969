"""The refusal to run on a database whose keys are not given: at startup (the WSGI application,
the worker, the launcher, `manage.py check --database default`) and in /readyz.

The marker is the register of data keys: a live data key means sealed rows may exist. Each master
key that wraps one must be in MEMORY_ENCRYPTION_KEYS and must unwrap it (the AES-GCM tag tells a
wrong key from the right one), and the key store must hold it, so a process never reads garbage
nor writes under a key nobody has.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from governance.crypto.envelope import data_key_check, master_keys_in_use
from governance.crypto.keyring import keyring
from governance.crypto.keystore import keystore_dir
from governance.crypto.sealing import SealError


def encryption_refusal() -> str:
    """Why this process must not serve this database ("" when it may)."""
    ring = keyring()  # a malformed setting raises ImproperlyConfigured here, at startup
    in_use = master_keys_in_use()
    if not in_use:
        return ""
    named = ", ".join(sorted(in_use))
    if not ring.enabled:
        return (
            f"This database holds data encrypted at rest under master keys {named}, and MEMORY_ENCRYPTION_KEYS"
            " is not set: start it with the keys it was written with (MEMORY_ENCRYPTION_KEYS or"
            " MEMORY_ENCRYPTION_KEYS_FILE)."
        )
    for master_id, samples in sorted(in_use.items()):
        if ring.get(master_id) is None:
            return (
                f"This database holds data keys wrapped by master key {master_id!r}, which is not in"
                f" MEMORY_ENCRYPTION_KEYS (it holds {', '.join(ring.ids)}): add it back, or run"
                " `manage.py encryption_rotate` with it before removing it."
            )
        try:
            # A destroyed person's key has no file: the first sample whose file is there decides.
            if not any(data_key_check(sample) for sample in samples):
                return (
                    f"The key store {keystore_dir()} (MEMORY_KEYSTORE_DIR) holds none of this database's data keys"
                    f" under master key {master_id!r}: point it at the key store this database was written with."
                )
        except SealError as exc:
            return f"MEMORY_ENCRYPTION_KEYS: {exc}. The key of that id is not the one this database was written with."
    return ""


def encryption_startup_check() -> None:
    """Raise ImproperlyConfigured with the reason when this process must not start."""
    reason = encryption_refusal()
    if reason:
        raise ImproperlyConfigured(reason)
