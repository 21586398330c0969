"""A database written with encryption keys refuses to start without them, or with a wrong one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from governance.crypto.envelope import data_key_for
from governance.crypto.keyring import keyring_parse
from governance.crypto.startup import encryption_refusal, encryption_startup_check
from tests.kit.crypto import K1, K1_WRONG, K2, keys_set
from tests.kit.servers import database_url

ROOT = Path(__file__).resolve().parents[2]


def test_a_database_without_data_keys_starts_with_or_without_keys(encrypted: Any, db: None, settings: Any) -> None:
    assert encryption_refusal() == ""
    keys_set(settings, K1)
    assert encryption_refusal() == ""


def test_a_database_with_data_keys_refuses_missing_unknown_and_wrong_keys(
    encrypted: Any, db: None, settings: Any
) -> None:
    keys_set(settings, K1)
    data_key_for(agent_id=None)

    keys_set(settings, "")
    assert "MEMORY_ENCRYPTION_KEYS is not set" in encryption_refusal()
    with pytest.raises(ImproperlyConfigured, match="k1"):
        encryption_startup_check()

    keys_set(settings, K2)
    assert "master key 'k1', which is not in MEMORY_ENCRYPTION_KEYS (it holds k2)" in encryption_refusal()

    keys_set(settings, K1_WRONG)
    assert "master key 'k1' is wrong" in encryption_refusal()

    keys_set(settings, f"{K2},{K1}")
    assert encryption_refusal() == ""


def test_malformed_keys_are_refused_naming_the_key_never_its_value() -> None:
    with pytest.raises(ImproperlyConfigured, match="'k9' is not") as caught:
        keyring_parse("k9:abc")
    assert "abc" not in str(caught.value)
    with pytest.raises(ImproperlyConfigured, match="given twice"):
        keyring_parse(f"{K1},{K1}")


def _start(keys: str, keystore: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "MEMORY_ENCRYPTION_KEYS": keys,
        "MEMORY_KEYSTORE_DIR": str(keystore),
    }
    return subprocess.run(
        [sys.executable, "-c", "import memory_project.wsgi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_web_process_refuses_to_start_without_its_key_or_with_a_wrong_one(
    encrypted: Any, transactional_db: None, settings: Any
) -> None:
    keys_set(settings, K1)
    data_key_for(agent_id=None)

    keystore = settings.MEMORY_KEYSTORE_DIR
    missing = _start("", keystore)
    assert missing.returncode != 0
    assert "MEMORY_ENCRYPTION_KEYS is not set" in missing.stderr

    wrong = _start(K1_WRONG, keystore)
    assert wrong.returncode != 0
    assert "master key 'k1' is wrong" in wrong.stderr

    elsewhere = _start(K1, keystore.parent / "another-keystore")
    assert elsewhere.returncode != 0
    assert "holds none of this database's data keys" in elsewhere.stderr

    started = _start(K1, keystore)
    assert started.returncode == 0, started.stderr
