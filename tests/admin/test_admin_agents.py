from __future__ import annotations

import re
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.models import Agent, AgentKey
from tests.kit.admin import secrets_in_cookies
from tests.kit.factories import JobRunFactory

pytestmark = pytest.mark.django_db


def _keys_shown(response: Any) -> list[str]:
    return re.findall(r"<code[^>]*>([^<]+)</code>", response.content.decode())


def test_creating_an_agent_in_the_admin_shows_its_key_once(admin_client) -> None:
    response = admin_client.post(
        "/admin/memoryapp/agent/add/",
        {"slug": "concierge", "name": "Concierge", "active": "on", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
        follow=True,
    )
    assert response.status_code == 200
    key = AgentKey.objects.get(agent__slug="concierge")
    page = response.content.decode()
    assert "Shown once" in page and key.prefix in page
    # the page after that does not show it again
    assert key.prefix + "_" not in admin_client.get("/admin/memoryapp/agent/").content.decode()
    assert AuditRecord.objects.filter(action="agent_key.created", subject=key.prefix).exists()


def test_a_minted_key_is_shown_on_the_page_of_its_response_and_never_set_in_a_cookie(admin_client, alice) -> None:
    added = admin_client.post(
        "/admin/memoryapp/agent/add/",
        {"slug": "concierge", "name": "Concierge", "active": "on", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
    )
    minted = admin_client.post(
        "/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]}
    )

    for response, agent in ((added, "concierge"), (minted, "alice")):
        assert response.status_code == 200 and "no-store" in response["Cache-Control"]
        (raw,) = _keys_shown(response)
        key = AgentKey.objects.filter(agent__slug=agent).latest("created_at")
        assert raw.startswith(key.prefix) and AgentKey.objects.filter(agent__slug=agent).count() == (
            1 if agent == "concierge" else 2
        )
        assert not secrets_in_cookies(response, raw) and not secrets_in_cookies(response, raw[len(key.prefix) :])
        assert raw not in admin_client.get("/admin/memoryapp/agent/").content.decode()


def test_revoking_a_key_first_says_the_agent_is_left_without_one_then_revokes_and_audits(admin_client, alice) -> None:
    """Revoking is irreversible (issue 23 §17): a confirmation first, naming the agent it stops."""
    key = AgentKey.objects.get(agent=alice.agent)
    asked = admin_client.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]})
    page = asked.content.decode()
    assert asked.status_code == 200 and 'id="consequences"' in page and key.prefix in page
    assert 'id="confirm-warning"' in page and "alice will have no active key left" in page
    key.refresh_from_db()
    assert key.revoked_at is None and alice.client.get("/api/v1/").status_code == 200
    assert not AuditRecord.objects.filter(action="agent_key.revoked").exists()

    response = admin_client.post(
        "/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk], "post": "yes"}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert alice.client.get("/api/v1/").status_code == 401
    assert AuditRecord.objects.filter(action="agent_key.revoked", actor="staff:admin").count() == 1


def test_the_revoke_confirmation_of_60_keys_asks_no_query_per_key(admin_client, django_assert_max_num_queries) -> None:
    """Which agents a revocation leaves with no key is read in one query, not one per key chosen."""
    from memoryapp.agents.services import agent_key_create
    from tests.kit.factories import AgentFactory

    keys = []
    for _ in range(30):
        agent = AgentFactory()
        keys += [agent_key_create(agent=agent)[0] for _ in range(2)]
    agent_key_create(agent=keys[0].agent)  # one agent keeps a key it was not asked to give up
    with django_assert_max_num_queries(20):
        asked = admin_client.post(
            "/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [k.pk for k in keys]}
        )
    page = asked.content.decode()
    assert asked.status_code == 200
    warned = re.search(r'id="confirm-warning"[^>]*>\s*([^<]*?) will have no active key left', page)
    assert warned is not None
    stranded = set(warned.group(1).split(", "))
    assert stranded == {k.agent.slug for k in keys[2:]}  # not the agent keeping its third key


def test_create_key_action_adds_a_key(admin_client, alice) -> None:
    response = admin_client.post(
        "/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]}, follow=True
    )
    assert response.status_code == 200
    assert AgentKey.objects.filter(agent=alice.agent).count() == 2
    assert Agent.objects.count() == 1


def test_audit_verify_button_reports_the_chain(admin_client, alice) -> None:
    response = admin_client.get("/admin/governance/auditrecord/verify/", follow=True)
    assert "Audit chain verified" in response.content.decode()
    listed = response.context["cl"].result_list
    assert [r.seq for r in listed] == sorted((r.seq for r in listed), reverse=True)  # newest first
    AuditRecord.objects.filter(seq=1).update(outcome="tampered")
    response = admin_client.get("/admin/governance/auditrecord/verify/", follow=True)
    assert "BROKEN at seq 1" in response.content.decode()


def test_job_runs_list_shows_progress(admin_client) -> None:
    JobRunFactory(kind="embed_entries", status="running", progress_done=3, progress_total=12, usage={"calls": 2})
    page = admin_client.get("/admin/governance/jobrun/").content.decode()
    assert "3 / 12 · 25%" in page and "embed_entries" in page


def test_deleting_an_agent_a_legal_hold_names_says_so_and_deletes_nothing(admin_client) -> None:
    from governance.retention.holds import legal_hold_place
    from memoryapp.models import Thread
    from tests.kit.factories import AgentFactory, ThreadFactory

    agent = AgentFactory(slug="concierge")
    ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana", turns=[("user", "hello")])
    hold = legal_hold_place(agent=agent, user_id="u-ana", reason="case 42", placed_by="staff:pia")
    url = f"/admin/memoryapp/agent/{agent.pk}/delete/"

    page = admin_client.get(url).content.decode()
    assert "cannot be deleted: a legal hold names it" in page
    assert f'href="/admin/memoryapp/legalhold/{hold.pk}/change/">legal hold #{hold.pk}</a> on user u-ana' in page
    assert "permission to delete" not in page and 'type="submit"' not in page.split('id="agent-held"')[1]

    refused = admin_client.post(url, {"post": "yes"})
    assert refused.status_code == 200 and "cannot be deleted" in refused.content.decode()
    bulk = admin_client.post(
        "/admin/memoryapp/agent/", {"action": "delete_selected", "_selected_action": [agent.pk], "post": "yes"}
    )
    assert f"legal hold #{hold.pk}" in bulk.content.decode()
    assert Agent.objects.filter(pk=agent.pk).exists() and Thread.objects.filter(agent=agent).count() == 1
    assert not AuditRecord.objects.filter(action="agent.deleted").exists()


def test_deleting_an_agent_goes_through_the_service_with_its_counts_audited(admin_client) -> None:
    from memoryapp.models import Entry, Thread
    from tests.kit.factories import AgentFactory, ThreadFactory

    agent = AgentFactory(slug="concierge")
    ThreadFactory(agent=agent, external_id="t-1", user_id="u-ana", turns=[("user", "hello"), ("assistant", "hi")])
    ThreadFactory(agent=agent, external_id="t-2", user_id="u-ben", turns=[("user", "bye")])
    kept = AgentFactory(slug="coach")
    ThreadFactory(agent=kept, external_id="t-3", user_id="u-ana", turns=[("user", "mine")])
    url = f"/admin/memoryapp/agent/{agent.pk}/delete/"
    confirm = admin_client.get(url).content.decode()
    assert "Are you sure you want to delete the agent <strong>concierge</strong>" in confirm
    assert "<li>Entries: 3</li>" in confirm and "<li>Threads: 2</li>" in confirm
    assert "Entry: " not in confirm  # counted by kind, not listed one by one (an agent holds thousands)

    answer = admin_client.post(url, {"post": "yes"}, follow=True)

    assert answer.status_code == 200
    said = [str(m) for m in answer.context["messages"]]
    assert said[0].startswith("Agent concierge deleted with ") and "3 entries" in said[0] and "2 threads" in said[0]
    assert not Agent.objects.filter(pk=agent.pk).exists() and not Thread.objects.filter(agent_id=agent.pk).exists()
    assert Entry.objects.filter(thread__agent=kept).count() == 1
    record = AuditRecord.objects.get(action="agent.deleted")
    assert (record.actor, record.agent_id, record.outcome) == ("staff:admin", agent.pk, "deleted")
    assert record.details["agent_id"] == agent.pk
    counted = (record.details["memoryapp.thread"], record.details["memoryapp.entry"], record.details["memoryapp.agent"])
    assert counted == (2, 3, 1)
    assert not any(isinstance(v, str) for v in record.details.values())  # ids and counts only


def test_an_agent_with_items_files_and_settings_is_deleted_whole_counted_without_reading_its_rows(admin_client) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memoryapp.models import CompactionSettings, MemoryFileVersion, MemoryItem
    from tests.kit.factories import AgentFactory, MemoryFileVersionFactory, MemoryItemFactory, ThreadFactory

    agent = AgentFactory(slug="concierge")
    ThreadFactory(agent=agent, external_id="t-1", user_id="u-ana", turns=[("user", "hello"), ("assistant", "hi")] * 5)
    MemoryItemFactory(agent=agent, subject="Ana", attribute="city", value="Porto")
    MemoryFileVersionFactory(agent=agent, path="/memories/ana.md", content="Ana lives in Porto")
    CompactionSettings.objects.create(agent=agent, enabled=True)
    url = f"/admin/memoryapp/agent/{agent.pk}/delete/"

    with CaptureQueriesContext(connection) as asked:
        confirm = admin_client.get(url).content.decode()

    # Their admins refuse deleting them one by one; the agent goes whole, and the page counts them.
    assert "permission to delete" not in confirm and "Are you sure you want to delete the agent" in confirm
    assert "<li>Entries: 10</li>" in confirm and "<li>Memory items: 1</li>" in confirm
    assert "<li>Automatic compaction: 1</li>" in confirm
    reads = [q["sql"] for q in asked.captured_queries if '"memoryapp_entry"."text"' in q["sql"]]
    assert reads == []  # counted from ids: no entry read whole (its sealed text never opened)

    admin_client.post(url, {"post": "yes"})
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert not MemoryItem.objects.filter(agent_id=agent.pk).exists()
    assert not MemoryFileVersion.objects.filter(agent_id=agent.pk).exists()
    record = AuditRecord.objects.get(action="agent.deleted")
    assert record.details["memoryapp.entry"] == 10 and record.details["memoryapp.memoryitem"] == 1
