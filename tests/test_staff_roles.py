"""Staff roles: the groups kept by migrate, and admin actions that need more than a view."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from governance.models import AuditRecord
from governance.roles import ROLES, roles_sync
from memoryapp.models import AgentKey, Entry
from tests.conftest import Caller
from tests.test_threads_admin import rome

pytestmark = pytest.mark.django_db


def _staff(*, groups: tuple[str, ...] = (), name: str = "staffer") -> Client:
    user = User.objects.create_user(name, password="pw-not-used", is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return client


def test_migrate_keeps_the_role_groups_with_exactly_their_permissions() -> None:
    for name, codes in ROLES.items():
        group = Group.objects.get(name=name)
        held = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
        assert held == set(codes), name
    reviewers = Group.objects.get(name="Reviewers")
    reviewers.permissions.clear()
    roles_sync()  # what every migrate runs: a role drifted by hand is set back
    assert reviewers.permissions.count() == len(ROLES["Reviewers"])


def test_a_reviewer_opens_the_queue_but_cannot_redact_or_mint_keys(alice: Caller) -> None:
    _, entries = rome(alice)
    reviewer = _staff(groups=("Reviewers",))
    assert reviewer.get("/admin/memoryapp/memoryitem/review/").status_code == 200
    changelist = reviewer.get("/admin/memoryapp/entry/")
    assert changelist.status_code == 200 and "redact_entries" not in changelist.content.decode()
    reviewer.post("/admin/memoryapp/entry/", {"action": "redact_entries", "_selected_action": [entries["q"].id]})
    assert Entry.objects.get(pk=entries["q"].id).redacted_at is None
    keys = AgentKey.objects.count()
    reviewer.post("/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]})
    assert AgentKey.objects.count() == keys
    assert reviewer.get("/admin/governance/jobrun/").status_code == 403


def test_a_privacy_officer_redacts_and_an_operator_mints_and_revokes_keys(alice: Caller) -> None:
    _, entries = rome(alice)
    officer = _staff(groups=("Privacy officers",), name="officer")
    officer.post("/admin/memoryapp/entry/", {"action": "redact_entries", "_selected_action": [entries["q"].id]})
    assert Entry.objects.get(pk=entries["q"].id).redacted_at is not None
    assert AuditRecord.objects.get(action="entry.redact").actor == "staff:officer"

    operator = _staff(groups=("Operators",), name="operator")
    keys = AgentKey.objects.filter(agent=alice.agent).count()
    operator.post("/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]})
    assert AgentKey.objects.filter(agent=alice.agent).count() == keys + 1
    key = AgentKey.objects.filter(agent=alice.agent).latest("created_at")
    operator.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is not None
    # Operators keep the service running without reading what was said.
    assert operator.get(f"/admin/memoryapp/entry/{entries['q'].id}/change/").status_code == 403


def test_staff_with_a_view_of_keys_only_cannot_revoke_them(alice: Caller) -> None:
    viewer = _staff()
    viewer_user = User.objects.get(username="staffer")
    viewer_user.user_permissions.add(*Group.objects.get(name="Operators").permissions.filter(codename="view_agentkey"))
    key = AgentKey.objects.filter(agent=alice.agent).first()
    assert key is not None
    assert viewer.get("/admin/memoryapp/agentkey/").status_code == 200
    viewer.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is None


def test_creating_an_agent_mints_its_first_key_only_for_those_who_may_make_keys() -> None:
    creator = _staff(name="creator")
    User.objects.get(username="creator").user_permissions.add(
        *Group.objects.get(name="Operators").permissions.filter(codename__in=["add_agent", "view_agent"])
    )
    response = creator.post("/admin/memoryapp/agent/add/", {"slug": "newbie", "name": "Newbie"}, follow=True)
    assert response.status_code == 200
    assert not AgentKey.objects.filter(agent__slug="newbie").exists()
    assert "without a key" in response.content.decode()

    operator = _staff(groups=("Operators",), name="operator")
    operator.post(
        "/admin/memoryapp/agent/add/",
        {"slug": "second", "name": "Second", "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
    )
    assert AgentKey.objects.filter(agent__slug="second").count() == 1
