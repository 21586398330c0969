"""Memory items, facts and their review history with encryption on: sealed in the database, whole
through the API and the admin, found by keyword through the blind index; a rotation seals a
database written with encryption off; the erasure's leftover scan opens sealed values."""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connection

from governance.crypto.blind import term_hash
from governance.crypto.envelope import blind_key, data_key_destroy
from governance.erasure.services import Probe, leftovers_scan
from memoryapp.items.services import item_approve, items_review_undo
from memoryapp.models import Agent, ItemReview, MemoryItem
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller, answered
from tests.kit.crypto import K1, assert_none_planted, keys_set, pg_dump
from tests.kit.review_staff import REVIEW_URL, staff
from tests.kit.servers import database_conninfo

# The planted words are their own English stems: a plaintext tsvector would hold them as they are.
PLANTED = ["Zanzibarquill", "plumbagovortex", "Quokkaparade", "Tangerinecipher"]
SUGGESTED = {"kind": "preference", "subject": "Ana", "attribute": "notebook", "user_id": "u-ana"}


def _system_trust(caller: Caller) -> None:
    """The caller's key may write system-trusted items: they are active at once (searchable)."""
    key = caller.agent.keys.get()
    key.max_trust = "system"
    key.save()


def _stored(sql: str) -> list[Any]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] if len(row) == 1 else row for row in cursor.fetchall()]


def _write_memory(caller: Caller) -> dict[str, Any]:
    """A suggested item a reviewer approves with an edit (the review history keeps the value before),
    a fact with a JSON value, and a review step holding a fact's JSON value before an edit."""
    item = answered(
        caller.client.post(
            "/api/v1/items", {**SUGGESTED, "value": "keeps the Zanzibarquill notebook in the glovebox"}, format="json"
        ),
        201,
    )
    fact = answered(
        caller.client.put(
            "/api/v1/facts/users/u-ana/pet", {"value": {"name": "Quokkaparade", "legs": 4}}, format="json"
        ),
        (200, 201),
    )
    row = MemoryItem.objects.get(pk=item["id"])
    item_approve(item=row, actor="staff:rita", value="keeps the plumbagovortex notebook at home")
    fact_row = MemoryItem.objects.get(namespace="users/u-ana", attribute="core:pet")
    ItemReview.objects.create(
        agent=caller.agent,
        item=fact_row,
        decision="dec-1",
        action=ItemReview.Action.UNDONE,
        actor="staff:rita",
        at=fact_row.recorded_at,
        status_before="active",
        status_after="active",
        value_json_before={"name": "Tangerinecipher"},
    )
    return {"item": item, "fact": fact, "fact_id": fact_row.pk}


def test_items_facts_and_review_history_are_sealed_in_a_dump_and_whole_through_the_api(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    written = _write_memory(alice)

    dump = pg_dump(database_conninfo())
    assert "memoryapp_memoryitem" in dump and "memoryapp_itemreview" in dump and "enc:v1:dk" in dump
    assert_none_planted(dump, PLANTED)
    assert all(v.startswith("enc:v1:") for v in _stored("SELECT value FROM memoryapp_memoryitem"))
    assert _stored("SELECT value_json::text FROM memoryapp_memoryitem WHERE value_json IS NOT NULL")[0].startswith(
        '"enc:v1:'
    )
    steps = _stored("SELECT value_before, value_after, value_json_before::text FROM memoryapp_itemreview")
    assert all(v is None or v.startswith(("enc:v1:", '"enc:v1:')) for step in steps for v in step)
    # The value's words are not in the full-text column (nor the subject's); the attribute's still are.
    assert _stored("SELECT count(*) FROM memoryapp_memoryitem WHERE search_vector @@ 'zanzibarquill'") == [0]
    assert _stored("SELECT count(*) FROM memoryapp_memoryitem WHERE search_vector @@ 'notebook'") == [1]
    assert _stored("SELECT count(*) FROM memoryapp_memoryitem WHERE keyword_hashes IS NULL") == [0]

    item = answered(alice.client.get(f"/api/v1/items/{written['item']['id']}"), 200)
    assert item["value"] == "keeps the plumbagovortex notebook at home"
    history = answered(alice.client.get(f"/api/v1/items/{written['item']['id']}/history"), 200)
    assert "keeps the plumbagovortex notebook at home" in json.dumps(history)
    fact = answered(alice.client.get("/api/v1/facts/users/u-ana/pet"), 200)
    assert fact["value"] == {"name": "Quokkaparade", "legs": 4}
    step = ItemReview.objects.get(item_id=written["fact_id"])
    assert step.value_json_before == {"name": "Tangerinecipher"}
    edit = ItemReview.objects.get(item_id=written["item"]["id"])
    assert (edit.value_before, edit.value_after) == (
        "keeps the Zanzibarquill notebook in the glovebox",
        "keeps the plumbagovortex notebook at home",
    )


def test_the_review_queue_and_the_item_page_show_sealed_values(encrypted: Any, db: None, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t-ana", user_id="u-ana")
    said = entry_add(thread=thread, role="user", content="My Zanzibarquill notebook lives in the glovebox.")
    item = answered(
        alice.client.post(
            "/api/v1/items",
            {
                **SUGGESTED,
                "value": "keeps the Zanzibarquill notebook in the glovebox",
                "evidence": [{"entry_id": said.id, "quote": "Zanzibarquill notebook"}],
            },
            format="json",
        ),
        201,
    )
    reviewer = staff("reviewer", name="rita")

    queue = reviewer.get(REVIEW_URL).content.decode()
    assert "keeps the Zanzibarquill notebook in the glovebox" in queue
    assert "<mark>Zanzibarquill notebook</mark>" in queue
    page_url = f"/admin/memoryapp/memoryitem/{item['id']}/change/"
    decided = reviewer.post(
        f"/admin/memoryapp/memoryitem/{item['id']}/decide/",
        {"action": "approve", "item": item["id"], "value": "keeps the plumbagovortex notebook at home"},
    )
    assert decided.status_code == 302
    page = reviewer.get(page_url).content.decode()
    assert re.search(
        r"value edited: <del>keeps the Zanzibarquill notebook in the glovebox</del> → "
        r"<ins>keeps the plumbagovortex notebook at home</ins>",
        page,
    )
    listing = reviewer.get("/admin/memoryapp/memoryitem/?q=notebook").content.decode()
    assert "keeps the plumbagovortex notebook at home" in listing
    assert "enc:v1:" not in queue + page + listing


def test_keyword_search_finds_items_and_facts_by_their_sealed_values(
    encrypted: Any, db: None, alice: Caller, mallory: Caller
) -> None:
    _system_trust(alice)
    item = answered(
        alice.client.post(
            "/api/v1/items",
            {"kind": "preference", "subject": "Ana", "attribute": "hobby", "value": "collects Zanzibarquill stamps"},
            format="json",
        ),
        201,
    )
    other = answered(
        alice.client.post(
            "/api/v1/items",
            {"kind": "fact", "subject": "Ana", "attribute": "city", "value": "lives in Porto near the stamps museum"},
            format="json",
        ),
        201,
    )
    answered(
        alice.client.put("/api/v1/facts/users/u-ana/pet", {"value": "a cat named Quokkaparade"}, format="json"),
        (200, 201),
    )
    _system_trust(mallory)
    answered(
        mallory.client.post(
            "/api/v1/items",
            {"kind": "fact", "subject": "Bo", "attribute": "hobby", "value": "collects Zanzibarquill stamps"},
            format="json",
        ),
        201,
    )

    def items_found(caller: Caller, text: str) -> list[str]:
        body = {"text": text, "method": "keyword", "kinds": ["items"]}
        return [h["id"] for h in answered(caller.client.post("/api/v1/search", body, format="json"), 200)["results"]]

    # Both words of the first item rank it above the item holding one of them.
    assert items_found(alice, "zanzibarquill stamps") == [item["id"], other["id"]]
    assert items_found(alice, "Zanzibarquill stamp")[:1] == [item["id"]]  # stems, as for entries
    assert items_found(alice, "hobby") == [item["id"]]  # the attribute, plaintext
    assert mallory.agent.pk != alice.agent.pk and item["id"] not in items_found(mallory, "zanzibarquill")
    facts = answered(alice.client.get("/api/v1/facts/users/u-ana?q=quokkaparade"), 200)["results"]
    assert [(f["key"], f["value"], f["score"]) for f in facts] == [("pet", "a cat named Quokkaparade", 1.0)]
    assert answered(alice.client.get("/api/v1/facts/users/u-ana?q=quokka"), 200)["results"] == []


def _rotate() -> dict[str, Any]:
    out = StringIO()
    call_command("encryption_rotate", stdout=out)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_rotation_seals_items_facts_and_history_written_with_encryption_off(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    written = _write_memory(alice)
    assert "Zanzibarquill" in pg_dump(database_conninfo())
    assert MemoryItem.objects.filter(keyword_hashes__isnull=True).count() == 2

    keys_set(settings, K1)
    result = _rotate()

    assert result["rows_resealed"]["memoryapp_memoryitem"] == 2
    assert result["rows_resealed"]["memoryapp_itemreview"] == 2
    assert_none_planted(pg_dump(database_conninfo()), PLANTED)
    assert MemoryItem.objects.filter(keyword_hashes__isnull=True).count() == 0
    assert answered(alice.client.get("/api/v1/facts/users/u-ana/pet"), 200)["value"]["name"] == "Quokkaparade"
    assert ItemReview.objects.get(item_id=written["fact_id"]).value_json_before == {"name": "Tangerinecipher"}
    found = answered(alice.client.get("/api/v1/facts/users/u-ana?q=quokkaparade"), 200)["results"]
    assert [f["key"] for f in found] == ["pet"]
    assert sum(_rotate()["rows_resealed"].values()) == 0


def test_the_leftover_scan_opens_sealed_values_and_never_calls_ciphertext_a_leftover(
    encrypted: Any, db: None, alice: Caller
) -> None:
    email = "ana.pereira@example.org"
    agent: Agent = alice.agent
    bob = thread_create(agent=agent, external_id="t-bob", user_id="u-bob")
    said = entry_add(thread=bob, role="user", content=f"Ana's address is {email}, write there")
    kept = answered(
        alice.client.post(
            "/api/v1/items",
            {
                "kind": "fact",
                "subject": "Bob",
                "attribute": "contact",
                "value": f"forwards to {email}",
                "user_id": "u-bob",
            },
            format="json",
        ),
        201,
    )
    shredded = answered(
        alice.client.post(
            "/api/v1/items",
            {"kind": "fact", "subject": "Cy", "attribute": "contact", "value": f"also {email}", "user_id": "u-cy"},
            format="json",
        ),
        201,
    )
    data_key_destroy(agent_id=agent.pk, user_id="u-cy")
    sealed_value = _stored(f"SELECT value FROM memoryapp_memoryitem WHERE id = '{kept['id']}'")[0]
    probes = [
        Probe("user id", "u-ana", True),
        Probe("identifier 1", email, True),
        # A piece of the ciphertext itself: the database holds it, but it is no one's words.
        Probe("identifier 2", sealed_value[-20:-4], False),
    ]

    scan = leftovers_scan(probes=probes, agent_ids=[agent.pk])

    found = {(f["table"], f["row"]): f["probes"] for f in scan["findings"]}
    assert found == {
        ("memoryapp_entry", said.id): ["identifier 1"],
        ("memoryapp_memoryitem", kept["id"]): ["identifier 1"],
    }
    items = next(t for t in scan["tables"] if t["table"] == "memoryapp_memoryitem")
    assert items["sealed_columns"] == ["subject", "value", "value_json", "metadata"]
    # Cy's item is sealed under a destroyed key: unreadable, so no leftover of anyone's.
    assert (items["found"], items["unreadable"]) == (1, 1) and shredded["id"] not in str(scan["findings"])


def test_a_reviewers_edit_moves_the_blind_index_to_the_new_value_and_an_undo_moves_it_back(
    encrypted: Any, db: None, alice: Caller
) -> None:
    item = answered(
        alice.client.post("/api/v1/items", {**SUGGESTED, "value": "a Zanzibarquill notebook"}, format="json"), 201
    )
    approved = item_approve(
        item=MemoryItem.objects.get(pk=item["id"]), actor="staff:rita", value="a plumbagovortex notebook"
    )

    def found(text: str) -> list[str]:
        body = {"text": text, "method": "keyword", "kinds": ["items"]}
        return [h["id"] for h in answered(alice.client.post("/api/v1/search", body, format="json"), 200)["results"]]

    assert found("plumbagovortex") == [item["id"]] and found("zanzibarquill") == []
    items_review_undo(decision=ItemReview.objects.get(item_id=approved.pk).decision, actor="staff:rita")
    assert MemoryItem.objects.get(pk=item["id"]).value == "a Zanzibarquill notebook"
    stored = MemoryItem.objects.get(pk=item["id"]).keyword_hashes
    assert stored is not None and term_hash("zanzibarquill", key=blind_key(agent_id=alice.agent.pk)) in stored
