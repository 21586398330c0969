"""Rows scoped to a thread only (no user_id) are the thread's person's: sealed under their data key,
so erasing them shreds those rows too (not under the agent's key, which no erasure destroys)."""

from __future__ import annotations

from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connection

from governance.crypto.envelope import data_key_for
from governance.crypto.sealing import sealed_key_id
from memoryapp.models import ConsolidationState, Entity, MemoryFileVersion, MemoryItem
from memoryapp.models.consolidation import ConsolidationPass
from tests.kit.api import Caller, answered

NOTE = "Ana keeps the obsidian-lantern under the stairs."


def _key_of(sql: str, *params: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    assert row is not None and isinstance(row[0], str)
    return sealed_key_id(row[0].strip('"'))


def test_a_file_and_an_item_scoped_to_a_persons_thread_are_sealed_under_that_persons_key(
    encrypted: Any, db: None, alice: Caller
) -> None:
    answered(alice.client.post("/api/v1/threads", {"id": "t-ana", "user_id": "u-ana"}, format="json"), (200, 201))
    answered(
        alice.client.put("/api/v1/context-documents/style.md?thread_id=t-ana", {"content": NOTE}, format="json"),
        (200, 201),
    )
    item = answered(
        alice.client.post(
            "/api/v1/items",
            {"kind": "preference", "subject": "user", "attribute": "lamp", "value": NOTE, "thread_id": "t-ana"},
            format="json",
        ),
        201,
    )
    ana = data_key_for(agent_id=alice.agent.pk, user_id="u-ana").id
    agent = data_key_for(agent_id=alice.agent.pk, user_id="").id
    assert ana != agent

    version = "SELECT content FROM memoryapp_memoryfileversion WHERE thread_id = 't-ana' AND content IS NOT NULL"
    assert _key_of(version) == ana
    assert _key_of("SELECT value FROM memoryapp_memoryitem WHERE id = %s", item["id"]) == ana
    assert _key_of("SELECT name FROM memoryapp_entity WHERE thread_id = 't-ana'") == ana
    # Read back whole through the API.
    got = answered(alice.client.get("/api/v1/context-documents/style.md?thread_id=t-ana"), 200)
    assert got["content"] == NOTE
    assert answered(alice.client.get(f"/api/v1/items/{item['id']}"), 200)["value"] == NOTE


def test_a_row_scoped_to_a_thread_of_no_one_stays_under_the_agents_key(encrypted: Any, db: None, alice: Caller) -> None:
    answered(alice.client.post("/api/v1/threads", {"id": "t-none"}, format="json"), (200, 201))
    answered(
        alice.client.put("/api/v1/context-documents/style.md?thread_id=t-none", {"content": NOTE}, format="json"),
        (200, 201),
    )
    agent = data_key_for(agent_id=alice.agent.pk, user_id="").id
    version = "SELECT content FROM memoryapp_memoryfileversion WHERE thread_id = 't-none' AND content IS NOT NULL"
    assert _key_of(version) == agent


def test_erasing_the_person_takes_what_their_threads_held_alone_and_leaves_nothing_unopenable(
    encrypted: Any, db: None, alice: Caller
) -> None:
    answered(alice.client.post("/api/v1/threads", {"id": "t-ana", "user_id": "u-ana"}, format="json"), (200, 201))
    answered(
        alice.client.put("/api/v1/context-documents/style.md?thread_id=t-ana", {"content": NOTE}, format="json"),
        (200, 201),
    )
    answered(
        alice.client.post(
            "/api/v1/items",
            {"kind": "preference", "subject": "user", "attribute": "lamp", "value": NOTE, "thread_id": "t-ana"},
            format="json",
        ),
        201,
    )
    ConsolidationState.objects.create(
        agent=alice.agent, thread_id="t-ana", pass_kind=ConsolidationPass.FOLD, details={"draft_base": "f" * 64}
    )

    answered(alice.client.post("/api/v1/users/u-ana/forget", {}, format="json"), 200)

    # What the thread held alone went with it (as when the thread itself is deleted) ...
    assert not MemoryItem.objects.filter(thread_id="t-ana").exists()
    assert not Entity.objects.filter(thread_id="t-ana").exists()
    assert not MemoryFileVersion.objects.filter(thread_id="t-ana", content__isnull=False).exists()
    assert not ConsolidationState.objects.filter(thread_id="t-ana").exists()
    # ... so nothing sealed under the destroyed key is left for a reader to stumble on.
    assert answered(alice.client.get("/api/v1/items"), 200)["results"] == []
    answered(alice.client.get("/api/v1/context-documents?thread_id=t-ana"), 200)
    history = "/api/v1/memory-files/history?path=/memories/context/style.md&thread_id=t-ana"
    answered(alice.client.get(history), 404)  # its versions went with the thread


def test_the_rotation_moves_a_thread_scoped_row_sealed_under_another_key_to_the_persons(
    encrypted: Any, db: None, alice: Caller
) -> None:
    answered(alice.client.post("/api/v1/threads", {"id": "t-ana", "user_id": "u-ana"}, format="json"), (200, 201))
    answered(
        alice.client.put("/api/v1/context-documents/style.md?thread_id=t-ana", {"content": NOTE}, format="json"),
        (200, 201),
    )
    # As written before rows scoped to a thread were its person's (or by a plain update).
    MemoryFileVersion.objects.filter(thread_id="t-ana").update(content=NOTE)
    version = "SELECT content FROM memoryapp_memoryfileversion WHERE thread_id = 't-ana' AND content IS NOT NULL"
    ana = data_key_for(agent_id=alice.agent.pk, user_id="u-ana").id
    assert _key_of(version) != ana

    call_command("encryption_rotate", stdout=StringIO())

    assert _key_of(version) == ana
    got = answered(alice.client.get("/api/v1/context-documents/style.md?thread_id=t-ana"), 200)
    assert got["content"] == NOTE
