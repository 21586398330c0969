"""A thread given to another person with encryption on: its rows move to the new person's key in the
same transaction, so erasing the old person leaves it readable and erasing the new one shreds it."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import Client

from governance.crypto.keystore import keystore_read
from governance.crypto.sealing import sealed_key_id
from governance.models import AuditRecord, DataKey
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Thread
from tests.kit.api import Caller, answered, create_memory_file, post_item, use_memory_tool
from tests.kit.audit_names import audit_name

TEXTS = ["Ana's locker code is Zanzibarquill", "the spare key is under the quokkaparade mat"]


def _post(caller: Caller, thread_id: str, user_id: str) -> None:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    entries: list[dict[str, Any]] = [{"role": "user", "content": text} for text in TEXTS]
    entries.append({"type": "label", "role": "user", "event": {"label": "Zanzibarquill found"}})
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)


def _keys_of(thread_id: str) -> set[str]:
    """The data keys the thread's rows are sealed under (text, and the event of the label)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.text, e.event #>> '{}' FROM memoryapp_entry e JOIN memoryapp_thread t ON t.id = e.thread_id"
            " WHERE t.external_id = %s",
            [thread_id],
        )
        values = [v for row in cursor.fetchall() for v in row if v]
    assert values and all(v.startswith("enc:v1:") for v in values)
    return {sealed_key_id(v) for v in values}


def _key(agent_id: int, user_id: str) -> str:
    return str(DataKey.objects.get(agent_id=agent_id, user_id=user_id, destroyed_at__isnull=True).pk)


def _read(caller: Caller, thread_id: str) -> list[Any]:
    path = answered(caller.client.get(f"/api/v1/threads/{thread_id}/path?types=all"), 200)["results"]
    return [e.get("event") or e["content"] for e in path]


def test_a_thread_given_to_another_person_moves_to_their_key_and_goes_with_their_erasure(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _post(alice, "t-moved", "u-ana")
    _post(alice, "t-stays", "u-ana")
    ana = _key(alice.agent.pk, "u-ana")
    assert _keys_of("t-moved") == {ana}

    answered(alice.client.patch("/api/v1/threads/t-moved", {"user_id": "u-bo"}, format="json"), 200)

    bo = _key(alice.agent.pk, "u-bo")
    assert _keys_of("t-moved") == {bo} and _keys_of("t-stays") == {ana}
    named = audit_name(agent_id=alice.agent.pk, user_id="u-bo", value="t-moved")
    assert AuditRecord.objects.filter(action="thread.user_change", subject=named).count() == 1
    assert _read(alice, "t-moved") == [*TEXTS, {"label": "Zanzibarquill found"}]

    erased = person_erase(user_id="u-ana", agent_ids=[alice.agent.pk])

    assert erased["data_keys_destroyed"] == 1 and keystore_read(ana) is None
    assert list(Thread.objects.filter(agent=alice.agent).values_list("external_id", flat=True)) == ["t-moved"]
    assert _read(alice, "t-moved") == [*TEXTS, {"label": "Zanzibarquill found"}]

    erased = person_erase(user_id="u-bo", agent_ids=[alice.agent.pk])

    assert erased["data_keys_destroyed"] == 1 and erased["threads"] == 1
    assert DataKey.objects.get(pk=bo).destroyed_at is not None and keystore_read(bo) is None


def test_a_person_changed_in_the_admin_moves_the_rows_too_and_a_rotation_finds_nothing_left(
    encrypted: Any, db: None, alice: Caller, admin_client: Client
) -> None:
    _post(alice, "t-moved", "u-ana")
    thread = Thread.objects.get(external_id="t-moved")

    admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/person/", {"user_id": "u-ben"})

    assert Thread.objects.get(pk=thread.pk).user_id == "u-ben"
    assert _keys_of("t-moved") == {_key(alice.agent.pk, "u-ben")}
    assert _read(alice, "t-moved") == [*TEXTS, {"label": "Zanzibarquill found"}]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memoryapp_entry WHERE event IS NULL")
        assert cursor.fetchone() == (2,)  # the messages' events stay SQL NULL, not JSON null


def test_what_the_thread_alone_holds_moves_with_it_and_reads_after_the_old_person_is_erased(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _post(alice, "t-moved", "u-ana")
    on_thread = "/api/v1/memory-tool?thread_id=t-moved"
    create_memory_file(alice, "/memories/locker.md", "Zanzibarquill locker\n", url=on_thread)
    item = post_item(alice, kind="fact", subject="locker", attribute="code", value="Zanzibarquill", thread_id="t-moved")
    ana = _key(alice.agent.pk, "u-ana")
    assert _stored_keys("memoryapp_memoryfileversion", "content") == {ana}
    assert _stored_keys("memoryapp_memoryitem", "value") == {ana}

    answered(alice.client.patch("/api/v1/threads/t-moved", {"user_id": "u-bo"}, format="json"), 200)

    bo = _key(alice.agent.pk, "u-bo")
    assert _stored_keys("memoryapp_memoryfileversion", "content") == {bo}
    assert _stored_keys("memoryapp_memoryitem", "value") == {bo}
    assert _stored_keys("memoryapp_evidence", "quote") <= {bo}
    person_erase(user_id="u-ana", agent_ids=[alice.agent.pk])
    status, shown = use_memory_tool(alice, {"command": "view", "path": "/memories/locker.md"}, on_thread)
    assert status == 200 and "Zanzibarquill" in str(shown)
    assert answered(alice.client.get(f"/api/v1/items/{item['id']}"), 200)["value"] == "Zanzibarquill"


def _stored_keys(table: str, column: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE {column} LIKE 'enc:v1:%%'")
        return {sealed_key_id(value) for (value,) in cursor.fetchall()}


def test_a_quote_is_sealed_under_the_quoted_persons_key_and_moves_with_their_thread(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _post(alice, "t-quoted", "u-ana")
    entry_id = answered(alice.client.get("/api/v1/threads/t-quoted/path"), 200)["results"][0]["id"]
    # An item about no one in particular stands on Ana's words: the quote is hers, not the agent's.
    post_item(
        alice,
        kind="fact",
        subject="office",
        attribute="lockers",
        value="coded",
        evidence=[{"entry_id": entry_id, "quote": "locker code is Zanzibarquill"}],
    )
    ana = _key(alice.agent.pk, "u-ana")
    assert _stored_keys("memoryapp_evidence", "quote") == {ana}
    # An item whose every quote holds one person's words is sealed under that person's key too
    # (docs/security.md, "Whose key seals a row").
    assert _stored_keys("memoryapp_memoryitem", "value") == {ana}

    answered(alice.client.patch("/api/v1/threads/t-quoted", {"user_id": "u-bo"}, format="json"), 200)

    assert _stored_keys("memoryapp_evidence", "quote") == {_key(alice.agent.pk, "u-bo")}
