"""The schedules page, the daily audit verification (a tampered row shows on the index and in
/readyz), and the retention state on the admin index."""

from __future__ import annotations

import pytest
from django.test import Client
from django_celery_beat.models import PeriodicTask

from governance.audit.chain import audit_append
from governance.jobs.schedules import SCHEDULES
from governance.models import AuditRecord, JobRun
from governance.retention.services import PRUNE_JOB_KIND
from governance.tasks import audit_verify_job, audit_verify_tick, retention_prune_job, retention_prune_tick
from memoryapp.models import Agent, LegalHold, RetentionPolicy
from tests.kit.admin import staff_client
from tests.kit.factories import AgentFactory
from tests.retention.world import aged_thread

pytestmark = pytest.mark.django_db

SCHEDULES_PAGE = "/admin/governance/jobrun/schedules/"


def _role(name: str) -> Client:
    return staff_client(username=name.split()[0].lower(), groups=(name,))


def test_the_prune_and_the_audit_verification_are_scheduled_daily_and_editable() -> None:
    for task in ("governance.tasks.retention_prune_tick", "governance.tasks.audit_verify_tick"):
        row = PeriodicTask.objects.select_related("interval").get(task=task)
        assert row.enabled and (row.interval.every, row.interval.period) == (1, "days"), task
    # The operator's edit stays (schedules_sync leaves the interval alone).
    assert any(s.task == "governance.tasks.retention_prune_tick" for s in SCHEDULES)


def test_the_daily_verification_reports_a_tampered_row_on_the_index_the_schedules_page_and_readyz(
    client: Client,
) -> None:
    for n in range(4):
        audit_append(action="test.thing", actor="t", subject=f"s{n}", outcome="done")
    audit_verify_tick()  # beat's tick: one queued run
    run = JobRun.objects.get(kind="audit_verify")
    audit_verify_job(run.pk)  # the worker
    run.refresh_from_db()
    assert run.result["ok"] is True
    assert client.get("/readyz").json()["details"]["audit_chain"]["ok"] is True

    AuditRecord.objects.filter(seq=3).update(outcome="kept")  # tampering
    audit_verify_tick()
    second = JobRun.objects.filter(kind="audit_verify").exclude(pk=run.pk).get()
    audit_verify_job(second.pk)

    ready = client.get("/readyz").json()["details"]["audit_chain"]
    assert (ready["ok"], ready["first_broken"], ready["run_id"]) == (False, 3, second.pk)
    for role in ("Operators", "Privacy officers"):
        staff = _role(role)
        index = staff.get("/admin/").content.decode()
        assert "the audit chain is BROKEN at seq 3" in index, role
        page = staff.get(SCHEDULES_PAGE).content.decode()
        assert "Audit chain BROKEN at seq 3" in page
        assert "BROKEN at seq 3" in page.split('data-task="governance.tasks.audit_verify_tick"')[1].split("</tr>")[0]


def test_the_schedules_page_lists_every_schedule_with_its_last_run_for_operators_only_among_roles() -> None:
    alice: Agent = AgentFactory(slug="alice")
    RetentionPolicy.objects.create(thread_ttl_days=30)
    aged_thread(alice, "t-old", days=40)
    retention_prune_tick()
    run = JobRun.objects.get(kind=PRUNE_JOB_KIND)
    retention_prune_job(run.pk)

    page = _role("Operators").get(SCHEDULES_PAGE).content.decode()

    for schedule in SCHEDULES:
        assert f'data-task="{schedule.task}"' in page, schedule.task
    prune_row = page.split('data-task="governance.tasks.retention_prune_tick"')[1].split("</tr>")[0]
    assert f"#{run.pk}" in prune_row and "threads_deleted 1" in prune_row
    assert "every day" in prune_row and "every 1 days" not in prune_row
    item_prune_row = page.split('data-task="memoryapp.tasks.items_prune_tick"')[1].split("</tr>")[0]
    assert "every 10 minutes" in item_prune_row
    assert _role("Privacy officers").get(SCHEDULES_PAGE).status_code == 200
    assert _role("Reviewers").get(SCHEDULES_PAGE).status_code == 403


def test_the_index_shows_the_last_prune_the_holds_in_force_and_the_next_run() -> None:
    alice: Agent = AgentFactory(slug="alice")
    RetentionPolicy.objects.create(thread_ttl_days=30)
    aged_thread(alice, "t-old", days=40)
    LegalHold.objects.create(user_id="u-ben", reason="case", placed_by="pat")
    retention_prune_tick()
    retention_prune_job(JobRun.objects.get(kind=PRUNE_JOB_KIND).pk)

    officer = _role("Privacy officers").get("/admin/").content.decode()
    operator = _role("Operators").get("/admin/").content.decode()
    reviewer = _role("Reviewers").get("/admin/").content.decode()

    for page in (officer, operator):
        assert "Last prune: <b>succeeded</b>" in page and "threads deleted 1" in page
        assert "<b>1</b> legal hold in force" in page
        assert "Next scheduled prune:" in page
    # Operators see how many holds there are, not the holds.
    assert "/admin/memoryapp/legalhold/" in officer and "/admin/memoryapp/legalhold/" not in operator
    assert 'id="ov-retention"' not in reviewer
