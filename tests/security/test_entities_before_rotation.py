"""Encryption turned on for a database with entities, before the rotation has hashed their
normalised names: an item about a known subject still finds its entity (not a second one with the
same name, which the rotation could then not hash without breaking the unique constraint)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.core.management import call_command

from memoryapp.models import Entity, MemoryItem
from tests.kit.admin import staff_client
from tests.kit.api import Caller, answered
from tests.kit.crypto import K1, K2, keys_set


def _item(caller: Caller, subject: str, attribute: str) -> dict[str, Any]:
    body = {"kind": "preference", "subject": subject, "attribute": attribute, "value": "Porto", "user_id": "u-ana"}
    return dict(answered(caller.client.post("/api/v1/items", body, format="json"), 201))


def test_an_entity_written_before_encryption_is_found_by_name_until_the_rotation_hashes_it(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    _item(alice, "Marta Quillfeather", "city")
    assert Entity.objects.get().normalized_name == "marta quillfeather"

    keys_set(settings, K1)
    _item(alice, "marta  QUILLFEATHER", "job")
    assert Entity.objects.count() == 1
    assert MemoryItem.objects.filter(entity=Entity.objects.get()).count() == 2
    # The admin's search by whole name finds it too.
    staff = staff_client(username="eve", is_superuser=True)
    page = staff.get("/admin/memoryapp/entity/", {"q": "Marta Quillfeather"})
    assert page.status_code == 200 and page.context["cl"].result_count == 1

    out = StringIO()
    call_command("encryption_rotate", stdout=out)
    assert json.loads(out.getvalue())["rows_resealed"]["memoryapp_entity"] == 1
    assert Entity.objects.get().normalized_name.startswith("bh:")
    _item(alice, "Marta Quillfeather", "age")
    assert Entity.objects.count() == 1


def test_a_staff_rename_of_an_entity_keeps_its_matching_name_as_with_encryption_off(
    encrypted: Any, db: None, alice: Caller
) -> None:
    _item(alice, "Marta", "city")
    _item(alice, "Marta Silva", "job")
    marta = next(e for e in Entity.objects.all() if e.name == "Marta")  # names are sealed
    before = marta.normalized_name
    staff = staff_client(username="eve", is_superuser=True)

    # Renamed to the other entity's name: saved (not a unique-constraint error), matched as before.
    answer = staff.post(f"/admin/memoryapp/entity/{marta.pk}/change/", {"name": "Marta Silva", "aliases": "[]"})
    assert answer.status_code == 302
    marta.refresh_from_db()
    assert (marta.name, marta.normalized_name) == ("Marta Silva", before)
    assert Entity.objects.count() == 2


def test_a_rotation_with_new_keys_hashes_entity_names_again_so_they_are_still_found(
    encrypted: Any, db: None, settings: Any, alice: Caller
) -> None:
    _item(alice, "Marta Quillfeather", "city")
    before = Entity.objects.get().normalized_name
    keys_set(settings, f"{K2},{K1}")

    out = StringIO()
    call_command("encryption_rotate", "--rekey", "--settle", "0", stdout=out)

    assert Entity.objects.get().normalized_name not in ("", before)
    _item(alice, "marta quillfeather", "job")
    assert Entity.objects.count() == 1
    assert MemoryItem.objects.filter(entity=Entity.objects.get()).count() == 2


def test_a_rotation_with_new_keys_keeps_the_matching_name_a_staff_rename_kept(
    encrypted: Any, db: None, settings: Any, alice: Caller
) -> None:
    _item(alice, "Marta", "city")
    _item(alice, "Marta Silva", "job")
    marta = next(e for e in Entity.objects.all() if e.name == "Marta")
    staff = staff_client(username="eve", is_superuser=True)
    answer = staff.post(f"/admin/memoryapp/entity/{marta.pk}/change/", {"name": "Marta Silva", "aliases": "[]"})
    assert answer.status_code == 302
    keys_set(settings, f"{K2},{K1}")

    call_command("encryption_rotate", "--rekey", "--settle", "0", stdout=StringIO())

    # Still matched on "marta", as with encryption off: an item about Marta finds the renamed one.
    _item(alice, "Marta", "age")
    assert Entity.objects.count() == 2
    assert {i.attribute for i in MemoryItem.objects.filter(entity=marta)} == {"city", "age"}
