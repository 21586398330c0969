"""sealed_update (an UPDATE of sealed fields outside save) reads the owner of rows scoped to a thread
only with the rows, not once per row: redacting a thread's memory files costs as many queries
however many versions they are, each sealed under the thread's person's key."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance.crypto.envelope import data_key_for
from governance.crypto.sealing import sealed_key_id
from memoryapp.files.services import versions_redact
from memoryapp.models import MemoryFileVersion
from tests.kit.api import Caller, answered


def _redact_counted(alice: Caller, thread: str, documents: int) -> int:
    answered(alice.client.post("/api/v1/threads", {"id": thread, "user_id": "u-ana"}, format="json"), (200, 201))
    for n in range(documents):
        answered(
            alice.client.put(f"/api/v1/context-documents/d{n}.md?thread_id={thread}", {"content": "x"}, format="json"),
            (200, 201),
        )
    versions = MemoryFileVersion.objects.filter(thread_id=thread, content__isnull=False)
    with CaptureQueriesContext(connection) as captured:
        assert versions_redact(versions) == documents
    return len(captured.captured_queries)


def test_redacting_a_threads_files_reads_their_person_with_them(encrypted: Any, db: None, alice: Caller) -> None:
    few = _redact_counted(alice, "t-few", 2)
    many = _redact_counted(alice, "t-many", 6)
    assert many == few

    ana = data_key_for(agent_id=alice.agent.pk, user_id="u-ana").id
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM memoryapp_memoryfileversion WHERE redacted_at IS NOT NULL")
        keys = {sealed_key_id(row[0]) for row in cursor.fetchall()}
    assert keys == {ana}
