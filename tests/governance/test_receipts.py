"""Signed receipts: Ed25519 over canonical JSON, a key from the environment or generated once,
the public key at a well-known URL, and `manage.py receipt_verify` for anyone holding a receipt."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from governance import receipts
from governance.receipts import (
    canonical_json,
    public_key_parse,
    receipt_check,
    receipt_sign,
    receipt_verify,
    signing_key,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]

REPORT = {
    "kind": "erasure-report",
    "request_id": 41,
    "person": "user-7f3a",
    "counts": {"entries_deleted": 1200, "items_purged": 37, "file_versions": 4},
    "leftovers": [],
    "report_sha256": "9b" * 32,
    "note": "naïve café",  # non-ASCII survives the canonical form
}


@pytest.fixture(autouse=True)
def own_key_dir(tmp_path: Path, settings: Any) -> Path:
    """Each test generates (or is given) a key of its own, never the repository's var/."""
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return Path(settings.VAR_DIR)


def _pem(key: Ed25519PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_a_signed_receipt_verifies_and_carries_the_document_and_key_id() -> None:
    receipt = receipt_sign(REPORT)

    assert receipt["document"] == REPORT
    assert receipt["alg"] == "Ed25519"
    assert receipt["key_id"] == receipts.key_id_of(signing_key().public_key())
    assert receipt_verify(receipt)
    # Read back from a file written any way (indented, keys reordered), it still verifies.
    assert receipt_verify(json.loads(json.dumps(receipt, indent=4, ensure_ascii=False)))


def test_changing_any_one_byte_of_a_receipt_file_breaks_it_unless_only_whitespace_changed() -> None:
    receipt = receipt_sign(REPORT)
    original = canonical_json(receipt)
    text = json.dumps(receipt, indent=1).encode()
    unchanged_meaning = 0
    for position in range(len(text)):
        tampered = bytearray(text)
        tampered[position] = (tampered[position] + 1) % 256
        try:
            read = json.loads(bytes(tampered))
        except (ValueError, UnicodeDecodeError):
            continue  # not a receipt at all any more
        if receipt_verify(read):
            # Only a change of layout may keep a receipt valid: what it says is the same.
            assert canonical_json(read) == original, f"byte {position} changed the receipt and it still verified"
            unchanged_meaning += 1
    assert unchanged_meaning < len(text) // 4  # most bytes carry meaning


def test_one_changed_count_fails_with_a_reason() -> None:
    receipt = receipt_sign(REPORT)
    receipt["document"]["counts"]["entries_deleted"] = 1201

    check = receipt_check(receipt)

    assert not check.ok
    assert "changed after signing" in check.reason


def test_a_receipt_of_another_key_fails_even_when_it_claims_our_key_id() -> None:
    other = Ed25519PrivateKey.generate()
    forged = receipt_sign(REPORT, key=other)

    assert not receipt_verify(forged)
    assert "signed by key" in receipt_check(forged).reason
    # Claiming this service's key id does not help: the signature is checked against our key.
    forged["key_id"] = receipts.key_id_of(signing_key().public_key())
    assert not receipt_verify(forged)
    # And against the other key it verifies.
    assert receipt_verify(receipt_sign(REPORT, key=other), public=other.public_key())


@pytest.mark.parametrize(
    ("receipt", "reason"),
    [
        ([], "JSON object"),
        ({"document": {}}, "has no receipt_version, alg, key_id, signature"),
        ({"receipt_version": 2, "alg": "Ed25519", "key_id": "x", "document": {}, "signature": ""}, "receipt_version"),
        ({"receipt_version": 1, "alg": "RS256", "key_id": "x", "document": {}, "signature": ""}, "alg"),
    ],
)
def test_a_malformed_receipt_is_refused_naming_why(receipt: Any, reason: str) -> None:
    check = receipt_check(receipt)
    assert not check.ok
    assert reason in check.reason


def test_a_document_that_is_not_json_cannot_be_signed() -> None:
    with pytest.raises(ValueError, match="plain JSON"):
        receipt_sign({"ids": {1, 2}})
    with pytest.raises(ValueError):
        receipt_sign({"ratio": float("nan")})


def test_the_generated_key_is_written_once_with_mode_0600_and_kept(own_key_dir: Path) -> None:
    first = receipt_sign(REPORT)
    key_file = own_key_dir / receipts.RECEIPT_KEY_DEFAULT_FILE

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    receipts._signing_key_load.cache_clear()  # as a new process would: read from the file
    assert receipt_verify(first)
    assert receipt_sign(REPORT)["key_id"] == first["key_id"]


def test_processes_generating_the_key_at_once_all_end_with_the_same_one(own_key_dir: Path) -> None:
    path = own_key_dir / "race.pem"
    barrier = threading.Barrier(8)

    def generate() -> None:
        barrier.wait()
        receipts._key_file_create(path)

    threads = [threading.Thread(target=generate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [p.name for p in own_key_dir.iterdir()] == ["race.pem"]  # no temporary file left behind
    receipts._private_key_parse(path.read_text(), source="test")


def test_a_key_from_the_environment_signs_as_pem_or_hex_seed(settings: Any, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    expected = receipts.key_id_of(key.public_key())

    settings.RECEIPT_SIGNING_KEY = _pem(key)
    assert receipt_sign(REPORT)["key_id"] == expected

    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    settings.RECEIPT_SIGNING_KEY = seed.hex()
    assert receipt_sign(REPORT)["key_id"] == expected

    settings.RECEIPT_SIGNING_KEY = ""
    key_file = tmp_path / "signing.pem"
    key_file.write_text(_pem(key))
    settings.RECEIPT_SIGNING_KEY_FILE = str(key_file)
    assert receipt_sign(REPORT)["key_id"] == expected
    assert not (Path(settings.VAR_DIR) / receipts.RECEIPT_KEY_DEFAULT_FILE).exists()  # nothing generated


def test_a_bad_signing_key_stops_with_the_variable_named(settings: Any, tmp_path: Path) -> None:
    settings.RECEIPT_SIGNING_KEY = "not a key"
    with pytest.raises(ImproperlyConfigured, match="RECEIPT_SIGNING_KEY"):
        receipt_sign(REPORT)
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "missing.pem")
    with pytest.raises(ImproperlyConfigured, match=r"missing\.pem"):
        receipt_sign(REPORT)


def test_the_public_key_is_served_at_the_well_known_url_without_a_login() -> None:
    client = Client()
    answer = client.get("/.well-known/memory-receipt-key")
    pem = client.get("/.well-known/memory-receipt-key.pem")

    assert answer.status_code == 200
    published = answer.json()
    assert published["key_id"] == receipts.key_id_of(signing_key().public_key())
    assert published["alg"] == "Ed25519"
    assert pem.status_code == 200
    assert pem.content.decode() == published["public_key_pem"]
    receipt = receipt_sign(REPORT)
    # Each form a verifier may have saved checks the receipt.
    for form in (answer.content.decode(), pem.content.decode(), published["public_key_hex"], published["public_key"]):
        assert receipt_verify(receipt, public=public_key_parse(form))
    assert client.post("/.well-known/memory-receipt-key").status_code == 405


def _receipt_verify_command(*arguments: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    """`manage.py receipt_verify` in a process of its own, with no database or Redis to reach."""
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "VAR_DIR": str(var_dir),
    }
    env.pop("RECEIPT_SIGNING_KEY", None)
    env.pop("RECEIPT_SIGNING_KEY_FILE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "receipt_verify", *arguments],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_passes_a_valid_receipt_and_fails_a_tampered_one_naming_why(tmp_path: Path) -> None:
    receipt = receipt_sign(REPORT)
    key_json = tmp_path / "key.json"
    key_json.write_text(json.dumps(receipts.public_key_document()))
    good = tmp_path / "receipt.json"
    good.write_text(json.dumps(receipt, indent=2))
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(good.read_bytes().replace(b'"items_purged": 37', b'"items_purged": 36'))
    assert tampered.read_bytes() != good.read_bytes()
    other_key = tmp_path / "other.pem"
    other_key.write_text(receipts.public_key_pem(Ed25519PrivateKey.generate().public_key()))
    broken = tmp_path / "broken.json"
    broken.write_bytes(good.read_bytes()[:-3])

    valid = _receipt_verify_command(str(good), "--public-key", str(key_json), var_dir=tmp_path / "elsewhere")
    changed = _receipt_verify_command(str(tampered), "--public-key", str(key_json), var_dir=tmp_path / "elsewhere")
    wrong_key = _receipt_verify_command(str(good), "--public-key", str(other_key), var_dir=tmp_path / "elsewhere")
    cut = _receipt_verify_command(str(broken), "--public-key", str(key_json), var_dir=tmp_path / "elsewhere")

    assert valid.returncode == 0, valid.stderr
    assert f"valid receipt signed by {receipt['key_id']}" in valid.stdout
    assert changed.returncode != 0
    assert "changed after signing" in changed.stderr
    assert wrong_key.returncode != 0
    assert "not by this public key" in wrong_key.stderr
    assert cut.returncode != 0
    assert "not valid JSON" in cut.stderr


def test_the_command_uses_the_services_own_key_without_one_given(own_key_dir: Path, tmp_path: Path) -> None:
    receipt = receipt_sign(REPORT)  # generates the key under own_key_dir
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))

    done = _receipt_verify_command(str(path), var_dir=own_key_dir)

    assert done.returncode == 0, done.stderr
