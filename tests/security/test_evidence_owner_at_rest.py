"""Whose key a quote (Evidence) is sealed under with encryption on: the quoted entry's thread's
person, found without a query per quote on the paths that write or move many of them."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance.crypto.rotation import rows_reseal
from governance.crypto.sealing import sealed_key_id
from governance.models import DataKey
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Evidence, MemoryItem
from tests.kit.api import Caller, answered, post_item
from tests.kit.crypto import K1, keys_set
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, ThreadFactory


def _thread(caller: Caller, thread_id: str, user_id: str, turns: int) -> list[str]:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    entries = [{"role": "user", "content": f"turn {n} mentions the quokkaparade"} for n in range(turns)]
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)
    return [e["id"] for e in answered(caller.client.get(f"/api/v1/threads/{thread_id}/path"), 200)["results"]]


def _quoting(caller: Caller, subject: str, entry_ids: list[str]) -> int:
    """Queries of writing an item about no one that quotes these entries."""
    evidence = [{"entry_id": e, "quote": "the quokkaparade"} for e in entry_ids]
    with CaptureQueriesContext(connection) as captured:
        post_item(caller, kind="fact", subject=subject, attribute="mentions", value="yes", evidence=evidence)
    return len(captured.captured_queries)


def test_an_item_quoting_many_entries_finds_whose_words_they_are_in_one_query(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    ids = _thread(alice, "t-ana", "u-ana", 8)
    _quoting(alice, "warm-up", ids[:1])  # data keys, caches

    assert _quoting(alice, "parade", ids) == _quoting(alice, "march", ids[:2])
    with connection.cursor() as cursor:
        cursor.execute("SELECT quote FROM memoryapp_evidence")
        keys = {sealed_key_id(v) for (v,) in cursor.fetchall()}
    assert keys == {str(DataKey.objects.get(agent_id=alice.agent.pk, user_id="u-ana").pk)}


def test_a_quote_given_another_entry_is_sealed_under_that_entrys_person(encrypted: Any, db: None) -> None:
    agent = AgentFactory()
    ana = EntryFactory(thread=ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana"))
    bob = EntryFactory(thread=ThreadFactory(agent=agent, external_id="t-bob", user_id="u-bob"))
    quote = Evidence.objects.create(agent=agent, item=MemoryItemFactory(agent=agent), entry=ana, quote="the quokka")

    quote.entry = bob
    quote.save()

    with connection.cursor() as cursor:
        cursor.execute("SELECT quote FROM memoryapp_evidence WHERE id = %s", [quote.pk])
        assert sealed_key_id(cursor.fetchone()[0]) == str(DataKey.objects.get(agent_id=agent.pk, user_id="u-bob").pk)


def test_a_thread_given_to_another_person_walks_only_the_rows_whose_key_follows_it(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    ids = _thread(alice, "t-ana", "u-ana", 3)
    _quoting(alice, "parade", ids)

    with CaptureQueriesContext(connection) as captured:
        answered(alice.client.patch("/api/v1/threads/t-ana", {"user_id": "u-bob"}, format="json"), 200)

    # A row's key follows its thread, its scope, its item and its quoted entry; an entry's parent,
    # a file version's place or previous version, an item's entity do not decide it: the rows
    # reached through them are the thread's again or not its person's, read for nothing.
    joins = [q["sql"] for q in captured.captured_queries if " JOIN " in q["sql"]]
    for column in ("parent_id", "place_id", "previous_id", "entity_id"):
        assert not [q for q in joins if f'."{column}" = ' in q.split(" WHERE ")[0]], column
    with connection.cursor() as cursor:
        cursor.execute("SELECT quote FROM memoryapp_evidence")
        keys = {sealed_key_id(v) for (v,) in cursor.fetchall()}
    assert keys == {str(DataKey.objects.get(agent_id=alice.agent.pk, user_id="u-bob").pk)}


def _reseal_queries(queryset: Any) -> tuple[int, int]:
    """(rows sealed again, queries it took)."""
    with CaptureQueriesContext(connection) as captured:
        resealed, _ = rows_reseal(queryset)
    return resealed, len(captured.captured_queries)


def test_the_rotation_reads_the_owners_of_quotes_and_thread_scoped_rows_with_the_rows(
    encrypted: Any, db: None, settings: Any
) -> None:
    keys_set(settings, "")
    agent = AgentFactory()
    ana = EntryFactory(thread=ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana"))
    ThreadFactory(agent=agent, external_id="t-bob", user_id="u-bob")
    ThreadFactory(agent=agent, external_id="t-warm", user_id="u-bob")
    for size, thread_id in ((1, "t-warm"), (2, "t-ana"), (10, "t-bob")):
        for n in range(size):
            # Thread-scoped items (their person is their thread's); quotes of Ana's entry, and
            # quotes of no entry (their item's person).
            item = MemoryItemFactory(agent=agent, user_id="", thread_id=thread_id, subject=f"{thread_id}-{n}")
            Evidence.objects.create(agent=agent, item=item, entry=ana, quote="the quokka")
            Evidence.objects.create(agent=agent, item=item, entry=None, quote="the parade")
    keys_set(settings, K1)
    _reseal_queries(MemoryItem.objects.filter(thread_id="t-warm"))  # the keys, read once
    _reseal_queries(Evidence.objects.filter(item__thread_id="t-warm"))

    few, many = (_reseal_queries(MemoryItem.objects.filter(thread_id=t)) for t in ("t-ana", "t-bob"))
    assert (few[0], many[0]) == (2, 10) and few[1] == many[1]
    few, many = (_reseal_queries(Evidence.objects.filter(item__thread_id=t)) for t in ("t-ana", "t-bob"))
    assert (few[0], many[0]) == (4, 20) and few[1] == many[1]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.thread_id, e.entry_id IS NULL, e.quote FROM memoryapp_evidence e"
            " JOIN memoryapp_memoryitem i ON i.id = e.item_id WHERE i.thread_id <> 't-warm'"
        )
        keys = {(thread_id, unquoted, sealed_key_id(quote)) for thread_id, unquoted, quote in cursor.fetchall()}
    key = {u: str(DataKey.objects.get(agent_id=agent.pk, user_id=u).pk) for u in ("u-ana", "u-bob")}
    assert keys == {
        ("t-ana", False, key["u-ana"]),
        ("t-ana", True, key["u-ana"]),
        ("t-bob", False, key["u-ana"]),
        ("t-bob", True, key["u-bob"]),
    }


def _items_of(caller: Caller, user_id: str) -> list[dict[str, Any]]:
    return list(answered(caller.client.get("/api/v1/items", {"user_id": user_id}), 200)["results"])


def test_erasing_the_quoted_person_takes_their_quotes_from_an_item_about_someone_else(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    ana = _thread(alice, "t-ana", "u-ana", 2)
    bob = _thread(alice, "t-bob", "u-bob", 2)
    evidence = [{"entry_id": ana[0], "quote": "the quokkaparade"}, {"entry_id": bob[0], "quote": "the quokkaparade"}]
    post_item(alice, kind="fact", subject="Bob", attribute="likes", value="parades", user_id="u-bob", evidence=evidence)
    assert len(_items_of(alice, "u-bob")) == 1

    person_erase(user_id="u-ana", agent_ids=[alice.agent.pk])

    # Bob's item reads whole (no quote of Ana's words left under her destroyed key), on Bob's words.
    assert [i["value"] for i in _items_of(alice, "u-bob")] == ["parades"]
    assert list(Evidence.objects.values_list("entry_id", flat=True)) == [bob[0]]
