"""The console says what happened in the domain's words: a blocked erasure's run reads blocked, not
succeeded; an export removed by a later erasure reads removed, not failed; the failed runs show their
error; stored JSON reads as labels (`branches deleted 1`, not `branches_deleted 1`); filters and
links say what they are about ("in force / lifted", not "By lifted at: Empty / Not empty"); a diff
keeps its contrast in dark mode (the browser test measures it)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from governance.erasure.services import erasure_request_file
from governance.export.services import export_request_create
from governance.models import ErasureRequest, ExportRequest, JobRun
from memoryapp.models import LegalHold
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db


def officer() -> Any:
    return staff_client(username="olga", groups=("Privacy officers",))


def _cell(page: str, name: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(rf'<td class="field-{name}[^"]*">(.*?)</td>', page, re.S)
    ]


def test_a_blocked_erasures_job_run_reads_blocked_by_its_hold_not_succeeded(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    ThreadFactory(agent=alice.agent, user_id="u-ana")
    hold = LegalHold.objects.create(user_id="u-ana", reason="litigation", placed_by="staff:pat")
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.BLOCKED
    run = JobRun.objects.get(pk=request.job_run_id)
    olga = officer()
    listed = _cell(olga.get("/admin/governance/jobrun/").content.decode(), "status_shown")
    assert listed == [f"Blocked by legal hold #{hold.pk}"]
    page = olga.get(f"/admin/governance/jobrun/{run.pk}/change/").content.decode()
    assert f"Blocked by legal hold #{hold.pk}" in page and "Succeeded" not in page
    # the progress the page polls says the same
    polled = olga.get("/admin/governance/jobrun/progress/", {"ids": str(run.pk)}).json()["runs"]
    assert polled[0]["status_label"] == f"Blocked by legal hold #{hold.pk}"


def test_an_export_removed_by_a_later_erasure_reads_removed_not_failed(
    alice: Caller, django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Any
) -> None:
    settings.EXPORT_DIR = tmp_path / "exports"
    ThreadFactory(agent=alice.agent, user_id="u-ana")
    with django_capture_on_commit_callbacks(execute=True):
        export = export_request_create(user_id="u-ana", actor="staff:olga")
    with django_capture_on_commit_callbacks(execute=True):
        erasure_request_file(user_id="u-ana", actor="staff:pat")
    export.refresh_from_db()
    assert export.status == ExportRequest.Status.FAILED and not export.user_id  # as the erasure leaves it
    olga = officer()
    assert _cell(olga.get("/admin/governance/exportrequest/").content.decode(), "status_shown") == [
        "Removed: the person was erased"
    ]
    page = olga.get(f"/admin/governance/exportrequest/{export.pk}/change/").content.decode()
    assert "Removed: the person was erased" in page


def test_the_failed_runs_list_shows_the_last_line_of_each_error() -> None:
    JobRun.objects.create(
        kind="extraction",
        status="failed",
        error="Traceback (most recent call last):\n  File x\nTimeoutError: the model did not answer in 60 s",
    )
    page = staff_client(username="olav", groups=("Operators",)).get("/admin/governance/jobrun/?status__exact=failed")
    assert _cell(page.content.decode(), "error_short") == ["TimeoutError: the model did not answer in 60 s"]


def test_stored_json_reads_as_labels_on_a_job_runs_page_and_the_item_page(alice: Caller) -> None:
    run = JobRun.objects.create(
        kind="retention_prune", status="succeeded", result={"branches_deleted": 1, "by_agent": {"threads_deleted": 2}}
    )
    page = staff_client(username="olav", groups=("Operators",)).get(f"/admin/governance/jobrun/{run.pk}/change/")
    text = page.content.decode()
    assert ">branches deleted<" in text and ">branches_deleted<" not in text
    assert "threads deleted 2" in text and '"threads_deleted"' not in text
    item = MemoryItemFactory(agent=alice.agent, value="vegetarian")
    item.metadata = {"stale_undone": {"by": "staff:rita", "was": {"reason": "duplicate"}}}
    item.save(update_fields=["metadata"])
    page = staff_client(is_superuser=True).get(f"/admin/memoryapp/memoryitem/{item.pk}/change/").content.decode()
    assert "stale undone</dt>" in page and "stale_undone</dt>" not in page
    assert "by staff:rita · was (reason duplicate)" in page and "{&#x27;by&#x27;" not in page
    assert "Django change log" not in page


def test_filters_and_breadcrumbs_use_the_domains_words(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "hi")])
    admin = staff_client(is_superuser=True)
    holds = admin.get("/admin/memoryapp/legalhold/").content.decode()
    assert "By in force" in holds and "in force (not lifted)" in holds and ">lifted<" in holds
    assert "By lifted at" not in holds and "Not empty" not in holds
    keys = admin.get("/admin/memoryapp/agentkey/").content.decode()
    assert "By revoked at" not in keys and ">revoked<" in keys
    assert "Not empty" not in admin.get("/admin/memoryapp/entry/").content.decode()
    page = admin.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "Memoryapp" not in page and ">Memory</a>" in page


def test_the_day_filters_say_day_not_the_columns_name(alice: Caller) -> None:
    admin = staff_client(is_superuser=True)
    audit = admin.get("/admin/governance/auditrecord/").content.decode()
    assert "By day" in audit and "By at" not in audit
    runs = admin.get("/admin/governance/jobrun/").content.decode()
    assert "By day created" in runs and "By created at" not in runs
