"""The people an agent's memory is about and their identifiers (issue 25 §1): registered normalised,
sealed under the person's key, found in texts by screening's `person` category, gone with the person."""

from __future__ import annotations

import pytest
from django.db import connection

from governance.models import AuditRecord
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry, PersonIdentifier
from tests.kit.api import (
    THREADS,
    Caller,
    error_of,
    get_ok,
    patch_ok,
    post_entries,
    post_entry,
    post_ok,
    post_thread,
    put_ok,
)
from tests.kit.crypto import encrypted  # noqa: F401  (fixture)

IDENTIFIERS = "/api/v1/users/ines/identifiers"
BODY = {
    "emails": [" Ines.Valdomiro@Example.COM "],
    "phones": ["+351 912 345 678"],
    "names": ["Inês  Valdomiro"],
    "external_ids": ["cust-4417"],
}
NORMALISED = {
    "user_id": "ines",
    "emails": ["ines.valdomiro@example.com"],
    "phones": ["+351912345678"],
    "names": ["ines valdomiro"],
    "external_ids": ["cust-4417"],
}


def test_identifiers_are_registered_normalised_and_read_back(alice: Caller) -> None:
    assert put_ok(alice.client, IDENTIFIERS, BODY) == NORMALISED
    assert get_ok(alice.client, IDENTIFIERS) == NORMALISED
    record = AuditRecord.objects.get(action="person.identifiers_set")
    assert record.details == {"counts": {"emails": 1, "phones": 1, "names": 1, "external_ids": 1}}
    # A PUT replaces the whole set.
    assert put_ok(alice.client, IDENTIFIERS, {"names": ["Ines"]})["emails"] == []
    assert PersonIdentifier.objects.filter(agent=alice.agent, user_id="ines").count() == 1


def test_bad_identifiers_are_a_400_naming_the_field_and_change_nothing(alice: Caller) -> None:
    put_ok(alice.client, IDENTIFIERS, BODY)
    for body, field in (
        ({"emails": ["not-an-email"]}, "emails[0]"),
        ({"phones": ["+351 912 345 678", "12"]}, "phones[1]"),
        ({"names": ["..."]}, "names[0]"),
        ({"names": "Ines"}, "names"),
        ({"nicknames": []}, "nicknames"),
        ({"external_ids": [7]}, "external_ids[0]"),
        # 254 characters that fold to 508 (`ss` each): once a 400 naming no field.
        ({"names": ["Ines", "\u00df" * 254]}, "names[1]"),
    ):
        error = error_of(alice.client.put(IDENTIFIERS, body, format="json"), 400)
        assert error["field"] == field, body
    assert get_ok(alice.client, IDENTIFIERS) == NORMALISED


def test_another_agent_sees_none_of_a_persons_identifiers_and_its_screening_finds_none(
    alice: Caller, mallory: Caller
) -> None:
    put_ok(alice.client, IDENTIFIERS, BODY)
    assert get_ok(mallory.client, IDENTIFIERS) == {
        "user_id": "ines",
        "emails": [],
        "phones": [],
        "names": [],
        "external_ids": [],
    }
    patch_ok(mallory.client, "/api/v1/settings/screening", {"person": "refuse"})
    post_thread(mallory, "t-m")
    post_ok(mallory.client, f"{THREADS}/t-m/entries", {"role": "user", "content": "Inês Valdomiro, cust-4417"})
    # Mallory's own registration of the same person does not touch alice's.
    put_ok(mallory.client, IDENTIFIERS, {"names": ["Someone Else"]})
    assert get_ok(alice.client, IDENTIFIERS) == NORMALISED


def test_the_person_category_finds_each_kind_of_registered_identifier_in_a_text(alice: Caller) -> None:
    put_ok(alice.client, IDENTIFIERS, BODY)
    patch_ok(alice.client, "/api/v1/settings/screening", {"person": "redact"})
    post_thread(alice, "t-p")
    text = (
        "INES VALDOMIRO wrote from ines.valdomiro@example.com, phone +351 91 234 5678, "
        "account cust-4417. Ines Valdomira is someone else."
    )
    post_ok(alice.client, f"{THREADS}/t-p/entries", {"role": "user", "content": text})
    assert Entry.objects.get(thread__external_id="t-p").text == (
        "[person] wrote from [person], phone [person], account [person]. Ines Valdomira is someone else."
    )


def test_a_registered_person_named_in_a_turn_is_refused_when_the_policy_says_refuse(alice: Caller) -> None:
    put_ok(alice.client, IDENTIFIERS, {"names": ["Inês Valdomiro"]})
    patch_ok(alice.client, "/api/v1/settings/screening", {"person": "refuse"})
    post_thread(alice, "t-r")
    error = error_of(
        alice.client.post(f"{THREADS}/t-r/entries", {"role": "user", "content": "ask inês valdomiro"}, format="json"),
        422,
    )
    assert (error["code"], error["field"]) == ("sensitive_data", "content") and "(person)" in error["message"]


def test_a_changed_identifier_is_screened_on_the_next_write(alice: Caller) -> None:
    """The agent's people are matched by a matcher each process keeps by registry version
    (memoryapp.screening.people): a PUT that changes them is seen by the very next write, single
    and batch, and one that removes them stops the matching."""
    patch_ok(alice.client, "/api/v1/settings/screening", {"person": "redact"})
    post_thread(alice, "t-c")
    text = "Ines Valdomiro (ines@example.com) met Rui Tavares (rui.t@example.org), cust-77."
    put_ok(alice.client, IDENTIFIERS, {"names": ["Ines Valdomiro"], "emails": ["ines@example.com"]})
    post_entry(alice, "t-c", role="user", content=text)
    put_ok(alice.client, IDENTIFIERS, {"names": ["Rui Tavares"], "emails": ["rui.t@example.org"]})
    post_entry(alice, "t-c", role="user", content=text)
    post_entries(alice, "t-c", [{"role": "user", "content": text}, {"role": "assistant", "content": text}])
    put_ok(alice.client, "/api/v1/users/rui/identifiers", {"external_ids": ["cust-77"]})
    post_entry(alice, "t-c", role="user", content=text)
    put_ok(alice.client, IDENTIFIERS, {})
    put_ok(alice.client, "/api/v1/users/rui/identifiers", {})
    post_entry(alice, "t-c", role="user", content=text)
    ines = "[person] ([person]) met Rui Tavares (rui.t@example.org), cust-77."
    rui = "Ines Valdomiro (ines@example.com) met [person] ([person]), cust-77."
    both = "Ines Valdomiro (ines@example.com) met [person] ([person]), [person]."
    texts = list(Entry.objects.filter(thread__external_id="t-c").order_by("seq").values_list("text", flat=True))
    assert texts == [ines, rui, rui, rui, both, text]


@pytest.mark.usefixtures("encrypted")
def test_identifiers_are_sealed_and_blind_indexed_with_encryption_on(alice: Caller) -> None:
    put_ok(alice.client, IDENTIFIERS, BODY)
    with connection.cursor() as cursor:
        cursor.execute("SELECT value, lookup, lookup_kept FROM memoryapp_personidentifier")
        stored = repr(cursor.fetchall()).lower()
    assert "valdomiro" not in stored and "4417" not in stored and "351912" not in stored
    assert get_ok(alice.client, IDENTIFIERS) == NORMALISED
    patch_ok(alice.client, "/api/v1/settings/screening", {"person": "redact"})
    post_thread(alice, "t-e")
    post_ok(alice.client, f"{THREADS}/t-e/entries", {"role": "user", "content": "Ines Valdomiro called"})
    assert Entry.objects.get(thread__external_id="t-e").text == "[person] called"


def test_the_persons_erasure_deletes_their_identifiers_and_no_one_elses(alice: Caller, bob: Caller) -> None:
    put_ok(alice.client, IDENTIFIERS, BODY)
    put_ok(bob.client, IDENTIFIERS, BODY)
    put_ok(alice.client, "/api/v1/users/other/identifiers", {"names": ["Other Person"]})
    answer = post_ok(alice.client, "/api/v1/users/ines/forget", {}, status=200)
    assert answer["user_id"] == "ines"
    assert not PersonIdentifier.objects.filter(agent=alice.agent, user_id="ines").exists()
    assert PersonIdentifier.objects.filter(agent=bob.agent, user_id="ines").count() == 4
    assert PersonIdentifier.objects.filter(agent=alice.agent, user_id="other").count() == 1
    # A staff erasure across agents takes every agent's.
    counts = person_erase(user_id="ines", agent_ids=None, actor="staff:officer")
    assert counts["identifiers"] == 4
    assert not PersonIdentifier.objects.filter(user_id="ines").exists()
