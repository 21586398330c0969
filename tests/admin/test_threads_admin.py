"""The admin of threads and entries: list, search, the thread page, entry detail, actions through services."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client

from governance.models import AuditRecord
from memoryapp.models import Entry, Thread
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller
from tests.kit.audit_names import audit_name

pytestmark = pytest.mark.django_db


def rome(caller: Caller) -> tuple[Thread, dict[str, Entry]]:
    thread = thread_create(agent=caller.agent, external_id="rome", user_id="u-ana")
    q = entry_add(thread=thread, role="user", content="Plan a day in Rome")
    colosseum = entry_add(thread=thread, role="assistant", content="Start at the Colosseum")
    vatican = entry_add(thread=thread, role="assistant", content="Start at the Vatican", parent_id=q.id, activate=False)
    more = entry_add(thread=thread, role="user", content="And lunch?", parent_id=vatican.id, activate=False)
    return thread, {"q": q, "colosseum": colosseum, "vatican": vatican, "more": more}


def test_thread_list_searches_by_id_user_and_agent(admin_client: Client, alice: Caller, bob: Caller) -> None:
    rome(alice)
    thread_create(agent=bob.agent, external_id="paris", user_id="u-bo")
    page = admin_client.get("/admin/memoryapp/thread/").content.decode()
    assert "rome" in page and "paris" in page
    for query, shown, hidden in [("rome", "rome", "paris"), ("u-bo", "paris", "rome"), ("alice", "rome", "paris")]:
        page = admin_client.get("/admin/memoryapp/thread/", {"q": query}).content.decode()
        assert f">{shown}<" in page and f">{hidden}<" not in page, query


def test_thread_page_shows_its_extraction_mark_and_links_each_entry(admin_client: Client, alice: Caller) -> None:
    """The page is a conversation now (tests/test_admin_conversation.py); what the tree page showed stays."""
    thread, entries = rome(alice)
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    # Quoted as the admin quotes every pk in a URL (`_` is `_5F`): see test_ids for why.
    assert f'href="/admin/memoryapp/entry/{quote(entries["q"].id)}/change/"' in page
    assert "not run yet" in page
    type(thread).objects.filter(pk=thread.pk).update(extraction={"through_seq": 3, "failed": [{"from_seq": 2}]})
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "extracted through seq 3; 1 window(s) to try again" in page


def test_entry_detail_shows_the_entry_and_links_its_parent(admin_client: Client, alice: Caller) -> None:
    _, entries = rome(alice)
    response = admin_client.get(f"/admin/memoryapp/entry/{entries['vatican'].id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Start at the Vatican" in page
    assert f'href="/admin/memoryapp/entry/{quote(entries["q"].id)}/change/"' in page


def test_deleting_an_entry_in_the_admin_splices_it_and_audits(admin_client: Client, alice: Caller) -> None:
    _, entries = rome(alice)
    response = admin_client.post(f"/admin/memoryapp/entry/{entries['vatican'].id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert Entry.objects.get(id=entries["more"].id).parent_id == entries["q"].id
    record = AuditRecord.objects.get(action="entry.delete")
    assert record.actor.startswith("staff:") and record.subject == entries["vatican"].id


def test_redact_action_goes_through_the_service(admin_client: Client, alice: Caller) -> None:
    _, entries = rome(alice)
    data: dict[str, Any] = {"action": "redact_entries", "_selected_action": [entries["q"].id]}
    assert admin_client.post("/admin/memoryapp/entry/", data).status_code == 200  # the preview first
    assert Entry.objects.get(id=entries["q"].id).redacted_at is None
    response = admin_client.post("/admin/memoryapp/entry/", {**data, "post": "yes", "reason": "asked"})
    assert response.status_code == 302
    stored = Entry.objects.get(id=entries["q"].id)
    assert stored.text == "[redacted]" and stored.redacted_at is not None
    # One record for the thread's cascade: the question and its replies (004), ids and counts.
    record = AuditRecord.objects.get(action="entry.redact")
    assert stored.id in record.details["redacted_ids"] and record.details["redacted"] >= 1


def test_deleting_a_thread_in_the_admin_audits(admin_client: Client, alice: Caller) -> None:
    thread, _ = rome(alice)
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Thread.objects.filter(pk=thread.pk).exists() and not Entry.objects.exists()
    named = audit_name(agent_id=thread.agent_id, user_id=thread.user_id, value="rome")
    assert AuditRecord.objects.filter(action="thread.delete", subject=named).exists()


def test_compact_now_and_extract_now_enqueue_jobs(admin_client, alice) -> None:
    from governance.models import JobRun
    from memoryapp.models import Thread
    from memoryapp.threads.services import entry_add, thread_create

    thread = thread_create(agent=alice.agent, external_id="t-admin-jobs", user_id="u-ana")
    entry_add(thread=thread, role="user", content="look up page 1")
    entry_add(thread=thread, role="assistant", content="", tool_calls=[{"id": "c1", "name": "fetch", "arguments": {}}])
    entry_add(thread=thread, type="tool_result", tool_call_id="c1", content="PAGE " * 200)
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "Compact now" in page and "Extract now" in page
    response = admin_client.post(
        f"/admin/memoryapp/thread/{thread.pk}/compact/", {"strategy": "clear-old-tool-results"}, follow=True
    )
    assert "queued as <a href" in response.content.decode()
    assert JobRun.objects.filter(kind__icontains="compact").exists()
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/extract/", follow=True)
    assert "Extraction queued" in response.content.decode()
    assert JobRun.objects.filter(kind__icontains="extract").exists()
    # a GET does nothing
    assert admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/extract/").status_code == 405
    assert Thread.objects.filter(pk=thread.pk).exists()
