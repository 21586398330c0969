"""Staff roles: the groups kept by migrate, and admin actions that need more than a view."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from governance.audit.chain import audit_verify
from governance.models import AuditRecord
from governance.staff.roles import ROLES, roles_sync
from memoryapp.agents.services import TRUST_PERMISSION, agent_key_trust_set
from memoryapp.errors import DomainError
from memoryapp.items.services import item_write
from memoryapp.models import AgentKey, Entry, MemoryItem
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, MemoryItemFactory, ThreadFactory, rome_thread

pytestmark = pytest.mark.django_db


# The agent form's busy policy (002 onBusy), which its page fills in with these defaults.
BUSY_DEFAULTS = {"on_busy": "wait", "busy_timeout_seconds": "60"}


def _staff(*, groups: tuple[str, ...] = (), name: str = "staffer", permissions: tuple[str, ...] = ()) -> Client:
    return staff_client(username=name, groups=groups, permissions=permissions)


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
    _, entries = rome_thread(alice.agent)
    reviewer = _staff(groups=("Reviewers",))
    assert reviewer.get("/admin/memoryapp/memoryitem/review/").status_code == 200
    changelist = reviewer.get("/admin/memoryapp/entry/")
    assert changelist.status_code == 200 and "redact_entries" not in changelist.content.decode()
    reviewer.post(
        "/admin/memoryapp/entry/",
        {"action": "redact_entries", "_selected_action": [entries["q"].id], "post": "yes", "reason": "asked"},
    )
    assert Entry.objects.get(pk=entries["q"].id).redacted_at is None
    keys = AgentKey.objects.count()
    reviewer.post("/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]})
    assert AgentKey.objects.count() == keys
    assert reviewer.get("/admin/governance/jobrun/").status_code == 403


def test_a_privacy_officer_redacts_and_an_operator_mints_and_revokes_keys(alice: Caller) -> None:
    _, entries = rome_thread(alice.agent)
    officer = _staff(groups=("Privacy officers",), name="officer")
    officer.post(
        "/admin/memoryapp/entry/",
        {"action": "redact_entries", "_selected_action": [entries["q"].id], "post": "yes", "reason": "asked"},
    )
    assert Entry.objects.get(pk=entries["q"].id).redacted_at is not None
    assert AuditRecord.objects.get(action="entry.redact").actor == "staff:officer"

    operator = _staff(groups=("Operators",), name="operator")
    keys = AgentKey.objects.filter(agent=alice.agent).count()
    operator.post("/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]})
    assert AgentKey.objects.filter(agent=alice.agent).count() == keys + 1
    key = AgentKey.objects.filter(agent=alice.agent).latest("created_at")
    operator.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is None  # what it stops is shown first
    operator.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk], "post": "yes"})
    key.refresh_from_db()
    assert key.revoked_at is not None
    # Operators keep the service running without reading what was said.
    assert operator.get(f"/admin/memoryapp/entry/{entries['q'].id}/change/").status_code == 403


def test_staff_with_a_view_of_keys_only_cannot_revoke_them(alice: Caller) -> None:
    viewer = _staff(permissions=("view_agentkey",))
    key = AgentKey.objects.filter(agent=alice.agent).first()
    assert key is not None
    assert viewer.get("/admin/memoryapp/agentkey/").status_code == 200
    viewer.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk]})
    viewer.post("/admin/memoryapp/agentkey/", {"action": "revoke", "_selected_action": [key.pk], "post": "yes"})
    key.refresh_from_db()
    assert key.revoked_at is None


def test_creating_an_agent_mints_its_first_key_only_for_those_who_may_make_keys() -> None:
    creator = _staff(name="creator", permissions=("add_agent", "view_agent"))
    response = creator.post(
        "/admin/memoryapp/agent/add/", {"slug": "newbie", "name": "Newbie", **BUSY_DEFAULTS}, follow=True
    )
    assert response.status_code == 200
    assert not AgentKey.objects.filter(agent__slug="newbie").exists()
    assert "without a key" in response.content.decode()

    operator = _staff(groups=("Operators",), name="operator")
    operator.post(
        "/admin/memoryapp/agent/add/",
        {"slug": "second", "name": "Second", **BUSY_DEFAULTS, "keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"},
    )
    assert AgentKey.objects.filter(agent__slug="second").count() == 1


# --- each role both ways: what it may do and what it may not ------------------------------------

REVIEW_URL = "/admin/memoryapp/memoryitem/review/"


def _suggested(caller: Caller) -> tuple[MemoryItem, Entry]:
    thread = ThreadFactory(agent=caller.agent, external_id="t-ana")
    answer = EntryFactory(thread=thread, content="I am vegetarian now.")
    item = MemoryItemFactory(
        agent=caller.agent,
        kind="preference",
        attribute="diet",
        value="vegetarian",
        trust="model",
        evidence=[{"entry_id": answer.id, "quote": "I am vegetarian now"}],
    )
    assert item.status == "suggested"
    return item, answer


def _key_form(key: AgentKey, **changes: str) -> dict[str, str]:
    return {"name": key.name, "max_trust": key.max_trust, **changes}


def test_no_role_group_may_set_an_agents_trust() -> None:
    app_label, codename = TRUST_PERMISSION.split(".")
    assert Permission.objects.filter(content_type__app_label=app_label, codename=codename).exists()
    for name, codes in ROLES.items():
        assert TRUST_PERMISSION not in codes, name
        assert not Group.objects.get(name=name).permissions.filter(codename=codename).exists(), name


def test_a_reviewer_approves_rejects_and_edits_and_reads_the_quoted_conversation(alice: Caller) -> None:
    item, answer = _suggested(alice)
    reviewer = _staff(groups=("Reviewers",), name="rita")
    assert reviewer.get(f"/admin/memoryapp/thread/{answer.thread_id}/change/").status_code == 200
    assert reviewer.get(f"/admin/memoryapp/entry/{answer.id}/change/").status_code == 200
    reviewer.post(REVIEW_URL, {"action": "approve", "item": item.pk, "value": "vegetarian (no meat)"})
    item.refresh_from_db()
    assert (item.status, item.value) == ("active", "vegetarian (no meat)")
    other = MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon", trust="model")
    reviewer.post(REVIEW_URL, {"action": "reject", "item": other.pk, "reason": "wrong"})
    other.refresh_from_db()
    assert other.status == "rejected"
    assert set(AuditRecord.objects.filter(actor="staff:rita").values_list("action", flat=True)) == {"item.reviewed"}


def test_a_reviewer_may_not_delete_threads_read_audit_or_touch_keys(alice: Caller) -> None:
    thread, entries = rome_thread(alice.agent)
    reviewer = _staff(groups=("Reviewers",), name="rita")
    assert reviewer.get(f"/admin/memoryapp/thread/{thread.pk}/delete/").status_code == 403
    assert reviewer.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"}).status_code == 403
    assert reviewer.post(f"/admin/memoryapp/entry/{entries['q'].id}/delete/", {"post": "yes"}).status_code == 403
    assert Entry.objects.filter(thread=thread).count() == 4
    assert reviewer.get("/admin/governance/auditrecord/").status_code == 403
    key = AgentKey.objects.get(agent=alice.agent)
    assert reviewer.get(f"/admin/memoryapp/agentkey/{key.pk}/change/").status_code == 403
    reviewer.post(f"/admin/memoryapp/agentkey/{key.pk}/change/", _key_form(key, max_trust="system"))
    key.refresh_from_db()
    assert key.max_trust == "model"


def test_a_privacy_officer_deletes_threads_and_reads_the_audit_list(alice: Caller) -> None:
    thread, _ = rome_thread(alice.agent)
    officer = _staff(groups=("Privacy officers",), name="officer")
    assert officer.get("/admin/governance/auditrecord/").status_code == 200
    assert officer.get(f"/admin/memoryapp/thread/{thread.pk}/delete/").status_code == 200
    officer.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"})
    assert not Entry.objects.filter(thread_id=thread.pk).exists()
    assert AuditRecord.objects.get(action="thread.delete").actor == "staff:officer"


def test_a_privacy_officer_may_not_decide_review_items_nor_touch_keys(alice: Caller) -> None:
    item, _ = _suggested(alice)
    officer = _staff(groups=("Privacy officers",), name="officer")
    assert officer.get(REVIEW_URL).status_code == 403
    assert officer.post(REVIEW_URL, {"action": "approve", "item": item.pk, "value": "x"}).status_code == 403
    assert officer.post(REVIEW_URL, {"action": "reject", "item": item.pk, "reason": "no"}).status_code == 403
    changelist = officer.get("/admin/memoryapp/memoryitem/")
    assert changelist.status_code == 200  # they may see what memory holds about a person
    assert "approve_selected" not in changelist.content.decode()
    officer.post("/admin/memoryapp/memoryitem/", {"action": "approve_selected", "_selected_action": [item.pk]})
    officer.post("/admin/memoryapp/memoryitem/", {"action": "reject_selected", "_selected_action": [item.pk]})
    item.refresh_from_db()
    assert (item.status, item.value) == ("suggested", "vegetarian")
    assert not AuditRecord.objects.filter(action="item.reviewed").exists()
    keys = AgentKey.objects.count()
    officer.post("/admin/memoryapp/agent/", {"action": "create_key", "_selected_action": [alice.agent.pk]})
    assert AgentKey.objects.count() == keys
    assert officer.get("/admin/django_celery_beat/periodictask/").status_code == 403


ITEMS_URL = "/admin/memoryapp/memoryitem/"


def _active(caller: Caller) -> MemoryItem:
    item = item_write(
        agent=caller.agent,
        kind="fact",
        subject="Ana",
        attribute="city",
        value="Lisbon",
        trust="system",
        user_id="u-ana",
    )
    assert item.status == "active" and item.expired_at is None
    return item


def test_a_privacy_officer_forgets_items_but_may_not_approve_or_reject_them(alice: Caller) -> None:
    suggested, _ = _suggested(alice)
    active = _active(alice)
    officer = _staff(groups=("Privacy officers",), name="officer")
    page = officer.get(ITEMS_URL).content.decode()
    assert "forget_selected" in page
    assert "approve_selected" not in page and "reject_selected" not in page

    officer.post(ITEMS_URL, {"action": "approve_selected", "_selected_action": [suggested.pk]})
    officer.post(ITEMS_URL, {"action": "reject_selected", "_selected_action": [suggested.pk]})
    suggested.refresh_from_db()
    assert suggested.status == "suggested"

    officer.post(ITEMS_URL, {"action": "forget_selected", "_selected_action": [active.pk]})
    active.refresh_from_db()
    assert active.expired_at is not None
    record = AuditRecord.objects.get(action="item.forgotten")
    assert (record.actor, record.subject) == ("staff:officer", active.pk)
    assert not AuditRecord.objects.filter(action="item.reviewed").exists()


def test_a_reviewer_approves_from_the_item_list_but_may_not_forget_items(alice: Caller) -> None:
    suggested, _ = _suggested(alice)
    active = _active(alice)
    reviewer = _staff(groups=("Reviewers",), name="rita")
    page = reviewer.get(ITEMS_URL).content.decode()
    assert "approve_selected" in page and "forget_selected" not in page

    reviewer.post(ITEMS_URL, {"action": "forget_selected", "_selected_action": [active.pk]})
    active.refresh_from_db()
    assert active.expired_at is None
    assert not AuditRecord.objects.filter(action="item.forgotten").exists()

    reviewer.post(ITEMS_URL, {"action": "approve_selected", "_selected_action": [suggested.pk]})
    suggested.refresh_from_db()
    assert suggested.status == "active"


def test_a_superuser_forgets_items(alice: Caller, admin_client: Client) -> None:
    active = _active(alice)
    admin_client.post(ITEMS_URL, {"action": "forget_selected", "_selected_action": [active.pk]})
    active.refresh_from_db()
    assert active.expired_at is not None


def test_an_operator_sees_job_runs_and_schedules_and_a_keys_trust_but_cannot_raise_it(alice: Caller) -> None:
    operator = _staff(groups=("Operators",), name="operator")
    assert operator.get("/admin/governance/jobrun/").status_code == 200
    assert operator.get("/admin/django_celery_beat/periodictask/").status_code == 200
    key = AgentKey.objects.get(agent=alice.agent)
    page = operator.get(f"/admin/memoryapp/agentkey/{key.pk}/change/")
    assert page.status_code == 200
    assert 'name="max_trust"' not in page.content.decode()  # shown, not a field of the form
    operator.post(f"/admin/memoryapp/agentkey/{key.pk}/change/", _key_form(key, name="renamed", max_trust="system"))
    key.refresh_from_db()
    assert (key.name, key.max_trust) == ("renamed", "model")
    # Nor through the agent's page (its keys inline) or by leaving shadow mode.
    operator.post(
        f"/admin/memoryapp/agent/{alice.agent.pk}/change/",
        {
            "slug": alice.agent.slug,
            "name": "Alice",
            "active": "on",
            **BUSY_DEFAULTS,
            "keys-TOTAL_FORMS": "1",
            "keys-INITIAL_FORMS": "1",
            "keys-0-id": str(key.pk),
            "keys-0-agent": str(alice.agent.pk),
            "keys-0-max_trust": "system",
        },
    )
    key.refresh_from_db()
    alice.agent.refresh_from_db()
    assert key.max_trust == "model"
    assert alice.agent.name == "Alice" and alice.agent.shadow_mode is True
    assert not AuditRecord.objects.filter(action__in=["agent_key.trust_set", "agent.shadow_mode_set"]).exists()
    # So the agent's own items still wait for review.
    response = alice.client.post(
        "/api/v1/items",
        {"kind": "fact", "subject": "Ana", "attribute": "city", "value": "Rome", "trust": "system"},
        format="json",
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "trust_not_allowed"
    assert not MemoryItem.objects.filter(agent=alice.agent, attribute="city").exists()


def test_an_operator_may_not_read_conversations_nor_review(alice: Caller) -> None:
    thread, _ = rome_thread(alice.agent)
    item, _ = _suggested(alice)
    operator = _staff(groups=("Operators",), name="operator")
    assert operator.get(f"/admin/memoryapp/thread/{thread.pk}/change/").status_code == 403
    assert operator.get("/admin/memoryapp/thread/").status_code == 403
    assert operator.get(REVIEW_URL).status_code == 403
    assert operator.post(REVIEW_URL, {"action": "approve", "item": item.pk, "value": "x"}).status_code == 403
    item.refresh_from_db()
    assert item.status == "suggested"
    assert operator.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Entry.objects.filter(thread=thread).count() == 4


def test_who_holds_the_trust_permission_raises_a_keys_trust_and_the_audit_chain_records_it(alice: Caller) -> None:
    trusted = _staff(groups=("Operators",), name="security", permissions=(TRUST_PERMISSION.split(".")[1],))
    key = AgentKey.objects.get(agent=alice.agent)
    page = trusted.get(f"/admin/memoryapp/agentkey/{key.pk}/change/").content.decode()
    assert 'name="max_trust"' in page
    trusted.post(f"/admin/memoryapp/agentkey/{key.pk}/change/", _key_form(key, max_trust="system"))
    key.refresh_from_db()
    assert key.max_trust == "system"
    record = AuditRecord.objects.get(action="agent_key.trust_set")
    assert (record.actor, record.agent_id, record.subject, record.outcome) == (
        "staff:security",
        alice.agent.pk,
        key.prefix,
        "raised",
    )
    assert record.details == {"key_id": key.pk, "from": "model", "to": "system"}
    assert audit_verify().ok

    trusted.post(
        f"/admin/memoryapp/agent/{alice.agent.pk}/change/",
        {
            "slug": alice.agent.slug,
            "name": "Alice",
            "active": "on",
            **BUSY_DEFAULTS,
            "keys-TOTAL_FORMS": "0",
            "keys-INITIAL_FORMS": "0",
        },
    )
    alice.agent.refresh_from_db()
    assert alice.agent.shadow_mode is False
    shadow = AuditRecord.objects.get(action="agent.shadow_mode_set")
    assert (shadow.actor, shadow.outcome, shadow.details) == ("staff:security", "off", {"from": True, "to": False})


def test_setting_a_keys_trust_to_the_same_level_writes_nothing_and_a_bad_level_is_refused(alice: Caller) -> None:
    key = AgentKey.objects.get(agent=alice.agent)
    agent_key_trust_set(key=key, max_trust="model", actor="staff:admin")
    assert not AuditRecord.objects.filter(action="agent_key.trust_set").exists()
    with pytest.raises(DomainError) as refused:
        agent_key_trust_set(key=key, max_trust="root", actor="staff:admin")
    assert refused.value.field == "max_trust"
    agent_key_trust_set(key=key, max_trust="web", actor="staff:admin")
    assert AuditRecord.objects.get(action="agent_key.trust_set").outcome == "lowered"
