"""Encryption at rest in tests: keys, and turning it on for one test only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from governance.crypto.envelope import data_keys_forget

K1 = "k1:" + "11" * 32
K2 = "k2:" + "22" * 32
K1_WRONG = "k1:" + "33" * 32


def keys_set(settings: Any, keys: str) -> None:
    """Use these master keys from now on in this process (the caches forget the old ones)."""
    settings.MEMORY_ENCRYPTION_KEYS = keys
    data_keys_forget()


@pytest.fixture
def encrypted(settings: Any) -> Iterator[Any]:
    """Encryption on with K1 for this test; pytest-django's `settings` puts the setting back after."""
    keys_set(settings, K1)
    yield settings
    data_keys_forget()
