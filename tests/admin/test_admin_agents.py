from __future__ import annotations

import pytest

from governance.models import AuditRecord
from memoryapp.models import Agent, AgentKey
from tests.kit.factories import JobRunFactory

pytestmark = pytest.mark.django_db


def test_creating_an_agent_in_the_admin_shows_its_key_once(admin_client) -> None:
    response = admin_client.post(
        "/admin/memoryapp/agent/add/",
        {"slug": "concierge", "name": "Concierge", "active": "on", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
        follow=True,
    )
    assert response.status_code == 200
    key = AgentKey.objects.get(agent__slug="concierge")
    page = response.content.decode()
    assert "shown once" in page and key.prefix in page
    # the page after that does not show it again
    assert key.prefix + "_" not in admin_client.get("/admin/memoryapp/agent/").content.decode()
    assert AuditRecord.objects.filter(action="agent_key.created", subject=key.prefix).exists()


def test_revoke_action_revokes_and_audits(admin_client, alice) -> None:
    key = AgentKey.objects.get(agent=alice.agent)
    response = admin_client.post(
        "/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert alice.client.get("/api/v1/").status_code == 401
    assert AuditRecord.objects.filter(action="agent_key.revoked", actor="staff:admin").count() == 1


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
