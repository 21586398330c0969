"""The retention admin: who may set policies, run the prune, place and lift holds; what each writes."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from governance.audit.chain import audit_verify
from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.retention.services import PRUNE_JOB_KIND
from governance.tasks import retention_prune_job
from memoryapp.models import Agent, LegalHold, MemoryItem, RetentionPolicy, Thread
from tests.kit.admin import staff_client
from tests.kit.factories import AgentFactory, MemoryItemFactory, ThreadFactory
from tests.kit.review_staff import staff
from tests.retention.world import aged_thread

pytestmark = pytest.mark.django_db

POLICIES = "/admin/memoryapp/retentionpolicy/"
PRUNE = "/admin/memoryapp/retentionpolicy/prune/"
HOLDS = "/admin/memoryapp/legalhold/"


def _role(name: str) -> Client:
    return staff_client(username=name.split()[0].lower(), groups=(name,))


def _policy_form(agent: Agent | None, **rules: object) -> dict[str, object]:
    form: dict[str, object] = {"agent": agent.pk if agent else ""}
    for rule in (
        "thread_ttl_days",
        "keep_checkpoints",
        "suggested_review_days",
        "inactive_item_days",
        "job_run_days",
        "tool_result_days",
        "event_days",
    ):
        form[rule] = rules.get(rule, "")
    if rules.get("drop_branches"):
        form["drop_branches"] = "on"
    return form


@pytest.mark.parametrize("role", ["Operators", "Privacy officers"])
def test_operators_and_privacy_officers_set_policies_and_run_the_prune(role: str) -> None:
    alice: Agent = AgentFactory(slug="alice")
    staff = _role(role)

    answer = staff.post(f"{POLICIES}add/", _policy_form(alice, thread_ttl_days=30))

    assert answer.status_code == 302, answer.content.decode()[:2000]
    policy = RetentionPolicy.objects.get(agent=alice)
    assert policy.thread_ttl_days == 30 and policy.updated_by.startswith("staff:")
    record = AuditRecord.objects.get(action="retention.policy_saved")
    assert record.agent_id == alice.pk and record.details["thread_ttl_days"] == 30
    assert staff.get(PRUNE).status_code == 200
    assert staff.post(PRUNE, {"action": "dry", "agent": "alice"}).status_code == 200


@pytest.mark.parametrize("role", ["Reviewers"])
def test_other_roles_neither_set_policies_nor_prune(role: str) -> None:
    alice: Agent = AgentFactory(slug="alice")
    aged_thread(alice, "t-old", days=40)
    RetentionPolicy.objects.create(thread_ttl_days=30)
    staff = _role(role)

    assert staff.get(POLICIES).status_code == 403
    assert staff.post(f"{POLICIES}add/", _policy_form(alice, thread_ttl_days=1)).status_code == 403
    assert staff.post(PRUNE, {"action": "run"}).status_code == 403
    assert staff.post(PRUNE, {"action": "run", "post": "yes"}).status_code == 403
    assert not RetentionPolicy.objects.filter(agent=alice).exists()
    assert not JobRun.objects.filter(kind=PRUNE_JOB_KIND).exists()
    assert Thread.objects.filter(agent=alice).exists()


def test_holds_are_the_privacy_officers_alone() -> None:
    alice: Agent = AgentFactory(slug="alice")
    hold = LegalHold.objects.create(agent=alice, user_id="u-ana", reason="case 7", placed_by="pat")
    for role in ("Operators", "Reviewers"):
        staff = _role(role)
        assert staff.get(HOLDS).status_code == 403, role
        assert staff.post(f"{HOLDS}add/", {"user_id": "u-ben", "reason": "mine"}).status_code == 403, role
        staff.post(HOLDS, {"action": "lift", "_selected_action": [hold.pk]})
        staff.post(HOLDS, {"action": "lift", "_selected_action": [hold.pk], "post": "yes", "reason": "mine"})
    assert LegalHold.objects.count() == 1
    hold.refresh_from_db()
    assert hold.lifted_at is None
    assert _role("Privacy officers").get(HOLDS).status_code == 200


def test_a_privacy_officer_places_and_lifts_a_hold_and_the_audit_has_ids_only() -> None:
    alice: Agent = AgentFactory(slug="alice")
    officer = _role("Privacy officers")
    ends = (timezone.now() + timedelta(days=90)).strftime("%Y-%m-%d %H:%M:%S")

    answer = officer.post(
        f"{HOLDS}add/",
        {"agent": alice.pk, "user_id": "u-ana", "reason": "Litigation hold: Smith v. Acme", "ends_at": ends},
    )

    assert answer.status_code == 302, answer.content.decode()[:3000]
    hold = LegalHold.objects.get()
    assert (hold.agent, hold.user_id, hold.reason) == (alice, "u-ana", "Litigation hold: Smith v. Acme")
    placed = AuditRecord.objects.get(action="legal_hold.placed")
    assert placed.details["hold_id"] == hold.pk and placed.agent_id == alice.pk
    assert "Smith" not in str(placed.details) and "Smith" not in placed.subject

    page = officer.get(f"{HOLDS}{hold.pk}/change/").content.decode()
    assert "Litigation hold: Smith v. Acme" in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page  # it reads only: lifting is the action

    # Lifting asks first, with what it lets go, and for a reason (issue 23 §17).
    blocked = ErasureRequest.objects.create(user_id="u-ana", status="blocked", blocked_by=[hold.pk])
    ThreadFactory(agent=alice, external_id="t-ana", user_id="u-ana")
    asked = officer.post(HOLDS, {"action": "lift", "_selected_action": [hold.pk]}).content.decode()
    assert 'id="consequences"' in asked and 'name="reason"' in asked
    assert '<td class="n">1</td><td>threads they keep' in asked
    assert '<td class="n">1</td><td>erasure requests they stopped' in asked
    no_reason = officer.post(HOLDS, {"action": "lift", "_selected_action": [hold.pk], "post": "yes", "reason": " "})
    assert "Say why the hold is lifted." in no_reason.content.decode()
    hold.refresh_from_db()
    assert hold.lifted_at is None and not AuditRecord.objects.filter(action="legal_hold.lifted").exists()

    officer.post(
        HOLDS, {"action": "lift", "_selected_action": [hold.pk], "post": "yes", "reason": "Case settled on 1 May"}
    )

    hold.refresh_from_db()
    assert hold.lifted_at is not None and hold.lifted_by.startswith("staff:")
    lifted = AuditRecord.objects.get(action="legal_hold.lifted")
    assert lifted.details == {"hold_id": hold.pk, "reason": "Case settled on 1 May"}
    assert blocked.pk
    assert audit_verify().ok
    # Never deleted: the record of what was held stays.
    assert officer.post(f"{HOLDS}{hold.pk}/delete/", {"post": "yes"}).status_code == 403
    assert LegalHold.objects.filter(pk=hold.pk).exists()


def test_a_hold_names_one_target_or_the_form_says_which_field() -> None:
    AgentFactory(slug="alice")
    officer = _role("Privacy officers")

    both = officer.post(f"{HOLDS}add/", {"user_id": "u-ana", "thread_external_id": "t-1", "reason": "x"})
    thread_without_agent = officer.post(f"{HOLDS}add/", {"thread_external_id": "t-1", "reason": "x"})

    assert both.status_code == 200 and "one of them" in both.content.decode()
    assert thread_without_agent.status_code == 200 and "choose the agent" in thread_without_agent.content.decode()
    assert not LegalHold.objects.exists()
    assert not AuditRecord.objects.filter(action="legal_hold.placed").exists()


def test_the_prune_page_shows_the_dry_run_then_sends_the_real_run() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    RetentionPolicy.objects.create(agent=alice, thread_ttl_days=30)
    aged_thread(alice, "t-old", days=40)
    aged_thread(bob, "t-old", days=400)
    operator = _role("Operators")

    dry = operator.post(PRUNE, {"action": "dry", "agent": ""}).content.decode()

    assert 'data-kind="threads_deleted" class=""><td>threads deleted' in dry
    assert "<code>t-old</code>" in dry
    assert Thread.objects.count() == 2
    # "Run" without the confirmation from a dry run is a dry run (issue 23 §17): nothing is sent.
    unconfirmed = operator.post(PRUNE, {"action": "run", "agent": "alice"}).content.decode()
    assert 'id="dry-report"' in unconfirmed and 'id="prune-run"' in unconfirmed
    assert "Nothing was pruned yet" in unconfirmed and "Yes, run the prune for alice (" in unconfirmed
    assert not JobRun.objects.filter(kind=PRUNE_JOB_KIND).exists() and Thread.objects.count() == 2
    assert 'id="prune-run"' not in operator.get(PRUNE).content.decode()  # no run before a dry run

    sent = operator.post(PRUNE, {"action": "run", "agent": "alice", "post": "yes"})
    run = JobRun.objects.get(kind=PRUNE_JOB_KIND)
    assert sent.status_code == 302 and sent["Location"].endswith(f"?run={run.pk}")
    assert run.arguments["agent"] == "alice" and run.arguments["actor"].startswith("staff:")
    retention_prune_job(run.pk)  # what the worker does with it
    page = operator.get(sent["Location"]).content.decode()
    # Pruned, the thread is named by its owner's pseudonym (as in the audit chain), never its id.
    assert "succeeded" in page and "<code>psn_" in page and "<code>t-old</code>" not in page
    assert list(Thread.objects.values_list("agent__slug", flat=True)) == ["bob"]


def test_the_review_queue_shows_when_a_suggestion_expires_unreviewed() -> None:
    alice: Agent = AgentFactory(slug="alice")
    bob: Agent = AgentFactory(slug="bob")
    RetentionPolicy.objects.create(suggested_review_days=14)
    RetentionPolicy.objects.create(agent=bob, thread_ttl_days=30)  # bob's own: no review deadline
    waiting = MemoryItemFactory(agent=alice, trust="model", value="likes tea")
    forever = MemoryItemFactory(agent=bob, trust="model", value="likes coffee")
    assert MemoryItem.objects.filter(pk__in=[waiting.pk, forever.pk], status="suggested").count() == 2

    page = staff("reviewer").get("/admin/memoryapp/memoryitem/review/").content.decode()

    deadline = (waiting.recorded_at + timedelta(days=14)).strftime("%Y-%m-%d %H:%M")
    card = page.split(f'id="card-{waiting.pk}"')[1].split("</article>")[0]
    assert f"expires unreviewed {deadline} UTC" in card
    other = page.split(f'id="card-{forever.pk}"')[1].split("</article>")[0]
    assert "expires unreviewed" not in other


def test_a_policy_form_refuses_zero_and_a_second_default_naming_the_field() -> None:
    alice: Agent = AgentFactory(slug="alice")
    RetentionPolicy.objects.create(thread_ttl_days=30)
    operator = _role("Operators")

    zero = operator.post(f"{POLICIES}add/", _policy_form(alice, keep_checkpoints=0, thread_ttl_days=0))
    second_default = operator.post(f"{POLICIES}add/", _policy_form(None, thread_ttl_days=5))

    assert zero.status_code == 200
    errors = zero.context["adminform"].form.errors
    assert set(errors) == {"keep_checkpoints", "thread_ttl_days"}
    assert second_default.status_code == 200 and second_default.context["adminform"].form.errors
    assert RetentionPolicy.objects.count() == 1
    assert not AuditRecord.objects.filter(action="retention.policy_saved").exists()


def test_manage_py_prune_dry_runs_runs_and_names_an_unknown_agent() -> None:
    alice: Agent = AgentFactory(slug="alice")
    RetentionPolicy.objects.create(thread_ttl_days=30)
    aged_thread(alice, "t-old", days=40)
    out = io.StringIO()

    call_command("prune", "--dry-run", "--agent", "alice", stdout=out)

    report = json.loads(out.getvalue())
    assert (report["dry_run"], report["counts"]["threads_deleted"], report["thread_ids"]) == (True, 1, ["t-old"])
    assert Thread.objects.filter(external_id="t-old").exists()
    with pytest.raises(CommandError, match="no agent has the slug 'nobody'"):
        call_command("prune", "--agent", "nobody")
    out = io.StringIO()
    call_command("prune", stdout=out)
    done = json.loads(out.getvalue())
    assert done["counts"]["threads_deleted"] == 1 and not Thread.objects.exists()
    run = JobRun.objects.get(pk=done["job_run"])
    assert run.kind == PRUNE_JOB_KIND and run.status == JobRun.Status.SUCCEEDED


def test_lifting_a_hold_counts_only_the_threads_no_other_hold_keeps() -> None:
    """A thread another hold in force still keeps is not let go by this lift: not counted as such."""
    alice: Agent = AgentFactory(slug="alice")
    ThreadFactory(agent=alice, external_id="t-ana", user_id="u-ana")
    ThreadFactory(agent=alice, external_id="t-ana-2", user_id="u-ana")
    lifted = LegalHold.objects.create(agent=alice, user_id="u-ana", reason="case 1", placed_by="staff:pat")
    LegalHold.objects.create(agent=alice, thread_external_id="t-ana", reason="case 2", placed_by="staff:pat")
    asked = _role("Privacy officers").post(HOLDS, {"action": "lift", "_selected_action": [lifted.pk]})
    assert '<td class="n">1</td><td>threads they keep' in asked.content.decode()  # t-ana-2 only
