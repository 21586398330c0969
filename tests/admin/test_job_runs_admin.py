"""Job runs in the admin: a progress bar with done / total and the rate, the agent by name,
arguments and results readable with links, nothing to save or delete, the progress the page polls,
and "retry" of a failed run, which puts it back to queued and sends it to the workers (audited)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from governance.jobs.retry import RetryRefused, job_retry
from governance.models import AuditRecord, JobRun
from memoryapp.compaction.services import compaction_now
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller

AUDIT_TASK = "governance.tasks.audit_verify_job"


def staff(name: str, *groups: str) -> Client:
    user = User.objects.create_user(name, password="not-used", is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return client


def tool_thread(caller: Caller) -> object:
    thread = thread_create(agent=caller.agent, external_id="tools")
    entry_add(thread=thread, role="user", content="look up page 1")
    entry_add(thread=thread, role="assistant", content="", tool_calls=[{"id": "c1", "name": "fetch", "arguments": {}}])
    entry_add(thread=thread, type="tool_result", tool_call_id="c1", content="PAGE " * 300)
    for n in range(4):
        entry_add(thread=thread, role="user", content=f"and then {n}")
        entry_add(
            thread=thread, role="assistant", content="", tool_calls=[{"id": f"d{n}", "name": "fetch", "arguments": {}}]
        )
        entry_add(thread=thread, type="tool_result", tool_call_id=f"d{n}", content="MORE " * 300)
    return thread


@pytest.mark.django_db
def test_the_job_run_list_shows_a_progress_bar_with_done_total_and_rate_and_the_agent_by_name(
    admin_client: Client, alice: Caller
) -> None:
    started = timezone.now() - timedelta(seconds=10)
    run = JobRun.objects.create(
        kind="embed_entries",
        status="running",
        agent_id=alice.agent.pk,
        progress_done=30,
        progress_total=120,
        started_at=started,
        arguments={"agent_id": alice.agent.pk},
    )
    page = admin_client.get("/admin/governance/jobrun/").content.decode()
    bar = re.search(
        rf'<span class="jr-progress" data-run="{run.pk}" data-open="1"><progress value="30" max="120"></progress> '
        r'<span class="jr-text">30 / 120 · 25% · (\d+\.\d)/s</span>',
        page,
    )
    assert bar is not None, page[page.find("jr-progress") - 200 : page.find("jr-progress") + 400]
    assert 2.0 <= float(bar.group(1)) <= 3.1  # 30 done in about 10 seconds
    assert re.search(rf'<td class="field-agent_shown"><a href="/admin/memoryapp/agent/{alice.agent.pk}/change/"', page)
    assert ">alice<" in page
    # The page's script polls this while runs are open.
    assert "governance/jobruns.js" in page
    progress = admin_client.get("/admin/governance/jobrun/progress/", {"ids": f"{run.pk},nonsense"}).json()
    assert progress["runs"][0] | {"text": ""} == {
        "id": run.pk,
        "status": "running",
        "status_label": "Running",
        "done": 30,
        "total": 120,
        "text": "",
        "open": True,
    }
    JobRun.objects.filter(pk=run.pk).update(
        progress_done=120, status="succeeded", finished_at=started + timedelta(seconds=40)
    )
    progress = admin_client.get("/admin/governance/jobrun/progress/", {"ids": str(run.pk)}).json()
    assert progress["runs"][0]["open"] is False and progress["runs"][0]["text"] == "120 / 120 · 100% · 3.0/s"


@pytest.mark.django_db
def test_a_job_run_page_reads_its_arguments_and_result_with_links_and_offers_no_save_or_delete(
    admin_client: Client, alice: Caller
) -> None:
    thread = tool_thread(alice)
    run, outcome = compaction_now(thread=thread, strategy="clear-old-tool-results", actor="staff:admin")
    assert run.status == "succeeded" and outcome is not None and outcome.entry is not None
    page = admin_client.get(f"/admin/governance/jobrun/{run.pk}/change/").content.decode()
    assert f'<a href="/admin/memoryapp/thread/{thread.pk}/change/" title="tools">' in page  # thread_pk, by its name
    compaction = outcome.entry.id
    assert f'href="/admin/memoryapp/thread/{thread.pk}/change/?entry={compaction}#entry-{compaction}"' in page
    assert '<th title="strategy">strategy</th><td>clear-old-tool-results</td>' in page
    assert 'name="_save"' not in page and "/delete/" not in page and "Retry this run" not in page
    assert admin_client.post(f"/admin/governance/jobrun/{run.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.post(f"/admin/governance/jobrun/{run.pk}/change/", {"status": "failed"}).status_code == 403
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert "delete_selected" not in admin_client.get("/admin/governance/jobrun/").content.decode()


@pytest.mark.django_db
def test_retrying_refuses_runs_that_did_not_fail_or_have_no_task(alice: Caller) -> None:
    running = JobRun.objects.create(kind="k", status="running", task_name=AUDIT_TASK)
    in_request = JobRun.objects.create(kind="k", status="failed", task_name="", error="boom")
    for run, words in ((running, "only a failed run"), (in_request, "ran inside a request")):
        with pytest.raises(RetryRefused, match=words):
            job_retry(run=run, actor="staff:x")
        run.refresh_from_db()
        assert run.status in ("running", "failed")
    assert not AuditRecord.objects.filter(action="job.retry").exists()


@pytest.mark.django_db
def test_retrying_a_failed_run_resets_it_and_sends_it_again(alice: Caller, django_capture_on_commit_callbacks) -> None:
    """Eager Celery (the tests' default) runs the sent task at once: the retried run succeeds."""
    run = JobRun.objects.create(
        kind="audit_verify",
        status="failed",
        task_name=AUDIT_TASK,
        error="OperationalError: the database went away",
        attempts=3,
        progress_done=5,
        progress_total=9,
        started_at=timezone.now() - timedelta(minutes=3),
        finished_at=timezone.now() - timedelta(minutes=2),
    )
    with django_capture_on_commit_callbacks(execute=True):  # the send waits for the commit
        job_retry(run=run, actor="staff:olav")
    run.refresh_from_db()
    assert run.status == "succeeded" and run.result["ok"] is True and run.attempts == 1
    assert run.error == "retried by staff after: OperationalError: the database went away"
    record = AuditRecord.objects.get(action="job.retry")
    assert (record.actor, record.subject, record.outcome) == ("staff:olav", str(run.pk), "queued")
    assert record.details == {"kind": "audit_verify", "attempts_before": 3}


@pytest.mark.django_db(transaction=True)
def test_a_retried_run_goes_through_redis_to_a_real_worker(alice: Caller) -> None:
    from celery.contrib.testing.worker import start_worker

    from memory_project.celery import app

    run = JobRun.objects.create(kind="audit_verify", status="failed", task_name=AUDIT_TASK, error="boom")
    app.conf.task_always_eager = False
    try:
        job_retry(run=run, actor="staff:olav")
        run.refresh_from_db()
        # Put back and handed to the broker: nothing consumes the queue yet.
        assert run.status == "queued" and run.sent_at is not None and run.finished_at is None
        with start_worker(app, perform_ping_check=False, queues=["governance"], pool="solo", shutdown_timeout=10):
            for _ in range(100):
                run.refresh_from_db()
                if run.status in ("succeeded", "failed"):
                    break
                time.sleep(0.1)
    finally:
        app.conf.task_always_eager = True
    assert run.status == "succeeded", (run.status, run.error)


@pytest.mark.django_db
def test_the_retry_button_and_action_are_for_those_who_may_retry(
    admin_client: Client, alice: Caller, django_capture_on_commit_callbacks
) -> None:
    failed = JobRun.objects.create(kind="audit_verify", status="failed", task_name=AUDIT_TASK, error="boom")
    page = admin_client.get(f"/admin/governance/jobrun/{failed.pk}/change/").content.decode()
    assert f'action="/admin/governance/jobrun/{failed.pk}/retry/"' in page and "Retry this run" in page
    officer = staff("olga", "Privacy officers")  # reads job runs, does not run them
    assert "Retry this run" not in officer.get(f"/admin/governance/jobrun/{failed.pk}/change/").content.decode()
    assert officer.post(f"/admin/governance/jobrun/{failed.pk}/retry/").status_code == 403
    officer.post("/admin/governance/jobrun/", {"action": "retry_runs", "_selected_action": [failed.pk]})
    failed.refresh_from_db()
    assert failed.status == "failed"
    reviewer = staff("rita", "Reviewers")
    assert reviewer.get(f"/admin/governance/jobrun/{failed.pk}/change/").status_code == 403
    assert reviewer.get("/admin/governance/jobrun/progress/", {"ids": str(failed.pk)}).status_code == 403

    operator = staff("olav", "Operators")
    assert operator.get(f"/admin/governance/jobrun/{failed.pk}/retry/").status_code == 405
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"/admin/governance/jobrun/{failed.pk}/retry/", follow=True)
    assert f"Sent again: job run #{failed.pk}." in " ".join(str(m) for m in response.context["messages"])
    failed.refresh_from_db()
    assert failed.status == "succeeded"
    other = JobRun.objects.create(kind="audit_verify", status="failed", task_name=AUDIT_TASK)
    done = JobRun.objects.create(kind="audit_verify", status="succeeded", task_name=AUDIT_TASK)
    response = operator.post(
        "/admin/governance/jobrun/", {"action": "retry_runs", "_selected_action": [other.pk, done.pk]}, follow=True
    )
    said = " ".join(str(m) for m in response.context["messages"])
    assert f"Sent again: job run #{other.pk}." in said and f"Job run #{done.pk} is succeeded" in said
    assert AuditRecord.objects.filter(action="job.retry", actor="staff:olav").count() == 2


@pytest.mark.django_db
def test_job_runs_filter_by_date(admin_client: Client) -> None:
    old = JobRun.objects.create(kind="k", status="succeeded")
    JobRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    new = JobRun.objects.create(kind="k", status="succeeded")
    today = timezone.localdate().isoformat()
    listed = admin_client.get("/admin/governance/jobrun/", {"created_at_from": today}).context["cl"].result_list
    assert [r.pk for r in listed] == [new.pk]
    page = admin_client.get("/admin/governance/jobrun/").content.decode()
    assert "last 7 days" in page and 'name="created_at_from"' in page
