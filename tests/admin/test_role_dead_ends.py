"""No dead ends for a role: the agent page and the job runs link only to the pages the viewer's role
may open, a refused page is the admin's own saying which permission and which roles open it, and
"Retry this run" is offered only on a run that can be sent again. Each role tested both ways."""

from __future__ import annotations

import pytest
from django.test import Client

from governance.models import JobRun
from memoryapp.models import Thread
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import ThreadFactory

pytestmark = pytest.mark.django_db

AUDIT_TASK = "governance.tasks.audit_verify_job"


def operator() -> Client:
    return staff_client(username="olav", groups=("Operators",))


def officer() -> Client:
    return staff_client(username="olga", groups=("Privacy officers",))


def reviewer() -> Client:
    return staff_client(username="rita", groups=("Reviewers",))


def test_the_agent_page_links_an_operator_only_to_the_lists_an_operator_may_open(alice: Caller) -> None:
    ThreadFactory(agent=alice.agent)
    url = f"/admin/memoryapp/agent/{alice.agent.pk}/change/"
    page = operator().get(url).content.decode()
    for refused in ("/admin/memoryapp/thread/", "/admin/memoryapp/entry/", "/admin/memoryapp/memoryitem/"):
        assert f'href="{refused}' not in page, refused
    assert "/admin/memoryapp/memoryfileversion/tree/" not in page
    assert "/admin/memoryapp/memoryitem/review/" not in page
    assert f'href="/admin/governance/jobrun/?agent_id={alice.agent.pk}"' in page
    assert f'href="/admin/governance/auditrecord/?agent_id={alice.agent.pk}"' in page

    # the other way: a privacy officer reads the conversations and files, a reviewer the queue
    page = officer().get(url).content.decode()
    assert f'href="/admin/memoryapp/thread/?agent__id__exact={alice.agent.pk}"' in page
    assert "/admin/memoryapp/memoryfileversion/tree/" in page
    assert "/admin/memoryapp/memoryitem/review/" not in page
    assert "/admin/memoryapp/memoryitem/review/" in reviewer().get(url).content.decode()


def test_a_job_run_names_its_thread_as_a_link_only_for_a_role_that_may_open_threads(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-run")
    run = JobRun.objects.create(kind="extraction", agent_id=alice.agent.pk, arguments={"thread_id": "t-run"})
    thread_url = f"/admin/memoryapp/thread/{thread.pk}/change/"
    olav, olga = operator(), officer()
    for page in (
        olav.get("/admin/governance/jobrun/"),
        olav.get(f"/admin/governance/jobrun/{run.pk}/change/"),
    ):
        assert page.status_code == 200
        text = page.content.decode()
        assert "t-run" in text and thread_url not in text
    for page in (
        olga.get("/admin/governance/jobrun/"),
        olga.get(f"/admin/governance/jobrun/{run.pk}/change/"),
    ):
        assert thread_url in page.content.decode()
    assert Thread.objects.count() == 1


def test_a_refused_page_is_the_admins_own_and_says_which_permission_and_roles_open_it(alice: Caller) -> None:
    olav = operator()
    answer = olav.get("/admin/memoryapp/thread/")
    assert answer.status_code == 403
    page = answer.content.decode()
    assert "admin/css/base.css" in page and 'id="header"' in page  # the admin's look, dark mode included
    assert "admin/css/dark_mode.css" in page
    assert "Your role does not open this page" in page
    assert "Can view thread" in page and "memoryapp.view_thread" in page
    assert "Reviewers, Privacy officers roles hold" in page
    assert "Your role: Operators." in page
    # a reviewer opening the erasure requests is told whose they are
    page = reviewer().get("/admin/governance/erasurerequest/").content.decode()
    assert "Can view erasure request" in page and "the Privacy officers role holds" in page
    # under /api/ a refusal keeps the API's error shape
    api = olav.get("/api/v1/staff/exports/1")
    assert api.status_code in (403, 404) and api["Content-Type"].startswith("application/json")


def test_retry_is_offered_only_on_a_failed_run_that_can_be_sent_again(alice: Caller) -> None:
    in_request = JobRun.objects.create(kind="compaction", status="failed", task_name="", error="boom")
    of_a_task = JobRun.objects.create(kind="audit_verify", status="failed", task_name=AUDIT_TASK, error="boom")
    done = JobRun.objects.create(kind="audit_verify", status="succeeded", task_name=AUDIT_TASK)
    olav = operator()
    page = olav.get(f"/admin/governance/jobrun/{in_request.pk}/change/").content.decode()
    assert "Retry this run" not in page
    assert "ran inside a request" in page  # says why not
    assert "Retry this run" in olav.get(f"/admin/governance/jobrun/{of_a_task.pk}/change/").content.decode()
    assert "Retry this run" not in olav.get(f"/admin/governance/jobrun/{done.pk}/change/").content.decode()
    # a role that may not retry is told nothing about retrying
    page = officer().get(f"/admin/governance/jobrun/{in_request.pk}/change/").content.decode()
    assert "Retry this run" not in page and "ran inside a request" not in page
