"""Export requests in the admin and the staff API: privacy officers file, watch and download them;
reviewers, operators and agents' keys get nothing, not even the list."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from governance.export.services import export_request_create, export_run
from governance.models import AuditRecord, ExportRequest, JobRun
from memoryapp.items.services import item_write
from memoryapp.models import Entry
from memoryapp.search.access_log import access_log_record
from memoryapp.threads.services import entry_add
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import ThreadFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/governance/exportrequest/"
ADD = "/admin/governance/exportrequest/add/"


@pytest.fixture(autouse=True)
def export_dir(tmp_path: Path, settings: Any) -> Path:
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return Path(settings.EXPORT_DIR)


@pytest.fixture
def officer() -> Client:
    return staff_client(username="officer", groups=("Privacy officers",))


@pytest.fixture
def ana(alice: Caller, bob: Caller) -> None:
    ThreadFactory(agent=alice.agent, external_id="ana-1", user_id="u-ana", turns=[("user", "ANA in alice")])
    ThreadFactory(agent=bob.agent, external_id="ana-2", user_id="u-ana", turns=[("user", "ANA in bob")])
    ThreadFactory(agent=alice.agent, external_id="ben-1", user_id="u-ben", turns=[("user", "BEN in alice")])


def _done(user_id: str = "u-ana") -> ExportRequest:
    request = export_request_create(user_id=user_id, agent_ids=[], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    return request


def _zip_names(content: bytes) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        return set(archive.namelist())


def test_a_privacy_officer_files_an_export_in_the_admin_and_downloads_it(
    officer: Client, alice: Caller, ana: None, django_capture_on_commit_callbacks: Any
) -> None:
    form = officer.get(f"{ADD}?user_id=u-ana&agents={alice.agent.pk}")
    assert form.status_code == 200
    page = form.content.decode()
    assert 'value="u-ana"' in page
    assert f'value="{alice.agent.pk}" selected' in page
    assert 'class="selectfilter"' in page  # hundreds of agents: two lists with a filter box

    with django_capture_on_commit_callbacks(execute=True):  # the job is sent after commit (eager in tests)
        answer = officer.post(ADD, {"user_id": "u-ana", "agents": [alice.agent.pk]})
    assert answer.status_code == 302
    request = ExportRequest.objects.get()
    assert request.status == ExportRequest.Status.DONE
    assert request.agent_ids == [alice.agent.pk] and request.requested_by == "staff:officer"

    listing = officer.get(LIST).content.decode()
    assert "u-ana" in listing and f"/admin/governance/exportrequest/{request.pk}/archive/" in listing
    detail = officer.get(f"{LIST}{request.pk}/change/")
    assert detail.status_code == 200 and "Download the archive" in detail.content.decode()

    download = officer.get(f"{LIST}{request.pk}/archive/")
    assert download.status_code == 200
    assert download["Content-Disposition"] == f'attachment; filename="export-{request.pk}.zip"'
    content = b"".join(download.streaming_content)
    assert _zip_names(content) >= {"manifest.json", "receipt.json", f"threads/{alice.agent.slug}/ana-1.jsonl"}
    assert not [n for n in _zip_names(content) if "ben-1" in n or "ana-2" in n]  # ben's, and bob's (not chosen)
    downloaded = AuditRecord.objects.get(action="export.download")
    assert downloaded.actor == "staff:officer" and downloaded.details == {"request_id": request.pk}


def test_a_form_without_a_person_is_refused_and_files_nothing(officer: Client) -> None:
    answer = officer.post(ADD, {"user_id": "   "})
    assert answer.status_code == 200
    assert "errorlist" in answer.content.decode()
    assert not ExportRequest.objects.exists()


@pytest.mark.parametrize("role", ["Reviewers", "Operators"])
def test_reviewers_and_operators_cannot_see_file_or_download_exports(role: str, ana: None) -> None:
    request = _done()
    other = staff_client(username="other", groups=(role,))

    assert other.get(LIST).status_code == 403
    assert other.get(ADD).status_code == 403
    assert other.post(ADD, {"user_id": "u-ana"}).status_code == 403
    assert other.get(f"{LIST}{request.pk}/change/").status_code == 403
    assert other.get(f"{LIST}{request.pk}/archive/").status_code == 403
    assert other.get(f"/api/v1/staff/exports/{request.pk}").status_code == 403
    assert other.get(f"/api/v1/staff/exports/{request.pk}/archive").status_code == 403
    assert ExportRequest.objects.count() == 1
    assert not AuditRecord.objects.filter(action="export.download").exists()
    assert "exportrequest" not in other.get("/admin/").content.decode()


def test_the_staff_api_gives_a_privacy_officer_the_state_and_the_archive(officer: Client, ana: None) -> None:
    request = _done()

    state = officer.get(f"/api/v1/staff/exports/{request.pk}")
    assert state.status_code == 200
    body = state.json()
    assert body["status"] == "done" and body["counts"]["threads"] == 2
    assert body["manifest_sha256"] == request.manifest_sha256
    archive = officer.get(body["archive_url"])
    assert archive.status_code == 200
    content = b"".join(archive.streaming_content)
    with zipfile.ZipFile(io.BytesIO(content)) as opened:
        assert json.loads(opened.read("manifest.json"))["request_id"] == request.pk
    assert officer.get("/api/v1/staff/exports/999999").json()["error"]["code"] == "not_found"


def test_an_unfinished_export_has_no_archive_yet(officer: Client, ana: None) -> None:
    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")  # not run

    answer = officer.get(f"/api/v1/staff/exports/{request.pk}/archive")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "not_ready"
    assert officer.get(f"{LIST}{request.pk}/archive/").status_code == 404
    assert officer.get(f"/api/v1/staff/exports/{request.pk}").json()["archive_url"] is None


def test_agents_keys_never_reach_the_staff_api(alice: Caller, mallory: Caller, ana: None) -> None:
    request = _done()

    for caller in (alice, mallory):
        state = caller.client.get(f"/api/v1/staff/exports/{request.pk}")
        archive = caller.client.get(f"/api/v1/staff/exports/{request.pk}/archive")
        assert state.status_code == 401 and state.json()["error"]["code"] == "not_authenticated"
        assert archive.status_code == 401
        assert b"ANA" not in archive.content
    assert Client().get(f"/api/v1/staff/exports/{request.pk}/archive").status_code == 401
    assert not AuditRecord.objects.filter(action="export.download").exists()


def test_a_failed_export_is_run_again_from_the_list(
    officer: Client, ana: None, django_capture_on_commit_callbacks: Any
) -> None:
    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")
    ExportRequest.objects.filter(pk=request.pk).update(status=ExportRequest.Status.FAILED, error="disk full")
    request.job_run.status = "failed"  # type: ignore[union-attr]
    request.job_run.save()  # type: ignore[union-attr]

    with django_capture_on_commit_callbacks(execute=True):
        officer.post(LIST, {"action": "run_again", "_selected_action": [request.pk]})

    request.refresh_from_db()
    assert request.status == ExportRequest.Status.DONE and request.counts["threads"] == 2
    assert AuditRecord.objects.filter(action="export.retry").count() == 1


def test_export_this_person_is_on_a_thread_and_an_item_page_for_privacy_officers_only(
    officer: Client, alice: Caller, ana: None
) -> None:
    thread = alice.agent.threads.get(external_id="ana-1")
    item = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="city", value="Rome", trust="system", user_id="u-ana"
    )
    wanted = f"{ADD}?user_id=u-ana&amp;agents={alice.agent.pk}"
    reviewer = staff_client(username="reviewer", groups=("Reviewers",))

    for page in (f"/admin/memoryapp/thread/{thread.pk}/change/", f"/admin/memoryapp/memoryitem/{item.pk}/change/"):
        assert wanted in officer.get(page).content.decode(), page
        seen = reviewer.get(page)
        assert seen.status_code == 200 and "export this person" not in seen.content.decode(), page


def test_the_request_page_counts_every_part_and_vectors_are_filed_when_ticked(
    officer: Client, alice: Caller, ana: None, django_capture_on_commit_callbacks: Any
) -> None:
    ben = alice.agent.threads.get(external_id="ben-1")
    said = entry_add(thread=ben, role="user", content="ANA writes in ben's thread", metadata={"userId": "u-ana"})
    Entry.objects.filter(pk=said.pk).update(embedding=[0.5] * settings.EMBEDDING_DIMENSIONS)
    JobRun.objects.create(kind="extract", agent_id=alice.agent.pk, arguments={"user_id": "u-ana"})
    access_log_record(agent_id=alice.agent.pk, thread=None, user_id="u-ana", source="search", entry_ids=[said.pk])
    form = officer.get(ADD).content.decode()
    assert 'name="include_vectors"' in form

    with django_capture_on_commit_callbacks(execute=True):
        officer.post(ADD, {"user_id": "u-ana", "agents": [alice.agent.pk], "include_vectors": "on"})

    request = ExportRequest.objects.get()
    assert request.include_vectors and request.status == ExportRequest.Status.DONE
    page = officer.get(f"{LIST}{request.pk}/change/").content.decode()
    for shown in ("messages elsewhere 1", "job runs 1", "access log 1", "vectors 1", "threads 1"):
        assert shown in page, shown
    assert "vectors of their entries and items" in page
    assert officer.get(f"/api/v1/staff/exports/{request.pk}").json()["include_vectors"] is True

    with django_capture_on_commit_callbacks(execute=True):
        officer.post(ADD, {"user_id": "u-ana", "agents": [alice.agent.pk]})  # unticked: the default
    plain = ExportRequest.objects.exclude(pk=request.pk).get()
    assert not plain.include_vectors and "vectors" not in plain.counts
    assert "messages elsewhere 1" in officer.get(f"{LIST}{plain.pk}/change/").content.decode()


def test_the_message_after_filing_says_the_export_is_done_when_its_run_already_finished(
    transactional_db: None, alice: Caller, bob: Caller, ana: None
) -> None:
    officer = staff_client(username="officer", groups=("Privacy officers",))  # its commits are real here

    answer = officer.post(ADD, {"user_id": "u-ana"}, follow=True)  # the job runs eagerly after the commit

    request = ExportRequest.objects.get()
    assert request.status == ExportRequest.Status.DONE
    said = [str(m) for m in answer.context["messages"]]
    assert said == [f"Export #{request.pk} is done: its archive is ready to download."]
    assert "queued" not in answer.content.decode().split('class="messagelist"')[1].split("</ul>")[0]
