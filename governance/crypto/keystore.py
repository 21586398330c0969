"""Where the wrapped data keys live: a directory of small files (MEMORY_KEYSTORE_DIR), outside the
database, so a dump or backup of the database never holds key material.

That is what makes crypto-shredding reach old copies: destroying a person's key removes its file,
and a dump taken last week, restored today, finds its rows sealed under a key that no longer
exists. Every web and worker process of a deployment must see the same directory (a shared
volume), as with the audit anchors; back it up on its own, short-lived schedule (docs/security.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings


def keystore_dir() -> Path:
    return Path(settings.MEMORY_KEYSTORE_DIR)


def _path(key_id: str) -> Path:
    if not key_id.isalnum():
        raise ValueError(f"not a data key id: {key_id!r}")
    return keystore_dir() / f"{key_id}.key"


def keystore_write(key_id: str, wrapped: bytes, *, replace: bool = False) -> None:
    """Store a wrapped key durably (fsynced), readable by this user only. A new key never overwrites
    one of the same id; `replace` (a rewrap) swaps the file whole."""
    directory = keystore_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = _path(key_id)
    path = directory / f".{key_id}.{os.getpid()}.tmp" if replace else target
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL), 0o600)
    try:
        os.write(fd, wrapped)
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(path, target)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def keystore_read(key_id: str) -> bytes | None:
    try:
        return _path(key_id).read_bytes()
    except FileNotFoundError:
        return None


def keystore_remove(key_id: str) -> bool:
    """Overwrite and remove a key's file; whether there was one."""
    path = _path(key_id)
    try:
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.write(b"\0" * size)
            handle.flush()
            os.fsync(handle.fileno())
        path.unlink()
        return True
    except FileNotFoundError:
        return False
