"""The admin of threads and entries: list, search, the tree page, entry detail, actions through services."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client

from governance.models import AuditRecord, JobRun
from memoryapp.models import Entry, Thread
from memoryapp.services.threads import thread_fork, thread_update
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory, rome_thread, tool_round

pytestmark = pytest.mark.django_db


def test_thread_list_searches_by_id_user_and_agent(admin_client: Client, alice: Caller, bob: Caller) -> None:
    rome_thread(alice.agent)
    ThreadFactory(agent=bob.agent, external_id="paris", user_id="u-bo")
    page = admin_client.get("/admin/memoryapp/thread/").content.decode()
    assert "rome" in page and "paris" in page
    for query, shown, hidden in [("rome", "rome", "paris"), ("u-bo", "paris", "rome"), ("alice", "rome", "paris")]:
        page = admin_client.get("/admin/memoryapp/thread/", {"q": query}).content.decode()
        assert f">{shown}<" in page and f">{hidden}<" not in page, query


def test_thread_page_draws_the_tree_with_branches_and_the_active_path(admin_client: Client, alice: Caller) -> None:
    thread, entries = rome_thread(alice.agent)
    response = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    rows = re.findall(r'<li class="([^"]*)"\s+style="margin-left: (\d+)px"\s+data-entry="([^"]+)"', page)
    order = [entry_id for _, _, entry_id in rows]
    by_key = {key: entry.id for key, entry in entries.items()}
    # Depth first: the question, then its older branch, then the other branch and its child.
    assert order == [by_key["q"], by_key["colosseum"], by_key["vatican"], by_key["more"]]
    depth = {entry_id: int(margin) for _, margin, entry_id in rows}
    assert depth[by_key["q"]] == 0 and depth[by_key["colosseum"]] == depth[by_key["vatican"]] > 0
    assert depth[by_key["more"]] > depth[by_key["vatican"]]
    marked = {entry_id for classes, _, entry_id in rows if "active" in classes.split()}
    assert marked == {by_key["q"], by_key["colosseum"]}
    leaf = [entry_id for classes, _, entry_id in rows if "leaf" in classes.split()]
    assert leaf == [by_key["colosseum"]]
    assert "2 branches" in page
    # Quoted as the admin quotes every pk in a URL (`_` is `_5F`): see test_ids for why.
    assert f'href="/admin/memoryapp/entry/{quote(by_key["vatican"])}/change/"' in page
    assert "not run yet" in page
    fork = thread_fork(thread=thread, entry_id=entries["q"].id, new_thread_id="rome-fork")
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert f'<a href="/admin/memoryapp/thread/{fork.pk}/change/">rome-fork</a>' in page
    type(thread).objects.filter(pk=thread.pk).update(extraction={"through_seq": 3, "failed": [{"from_seq": 2}]})
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "extracted through seq 3; 1 window(s) to try again" in page


def test_entry_detail_shows_the_entry_and_links_its_parent(admin_client: Client, alice: Caller) -> None:
    _, entries = rome_thread(alice.agent)
    response = admin_client.get(f"/admin/memoryapp/entry/{entries['vatican'].id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Start at the Vatican" in page
    assert f'href="/admin/memoryapp/entry/{quote(entries["q"].id)}/change/"' in page


def test_deleting_an_entry_in_the_admin_splices_it_and_audits(admin_client: Client, alice: Caller) -> None:
    _, entries = rome_thread(alice.agent)
    response = admin_client.post(f"/admin/memoryapp/entry/{entries['vatican'].id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert Entry.objects.get(id=entries["more"].id).parent_id == entries["q"].id
    record = AuditRecord.objects.get(action="entry.delete")
    assert record.actor.startswith("staff:") and record.subject == entries["vatican"].id


def test_redact_action_goes_through_the_service(admin_client: Client, alice: Caller) -> None:
    _, entries = rome_thread(alice.agent)
    data: dict[str, Any] = {"action": "redact_entries", "_selected_action": [entries["q"].id]}
    response = admin_client.post("/admin/memoryapp/entry/", data)
    assert response.status_code == 302
    stored = Entry.objects.get(id=entries["q"].id)
    assert stored.text == "[redacted]" and stored.redacted_at is not None
    assert AuditRecord.objects.filter(action="entry.redact", subject=stored.id).exists()


def test_deleting_a_thread_in_the_admin_audits(admin_client: Client, alice: Caller) -> None:
    thread, _ = rome_thread(alice.agent)
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Thread.objects.filter(pk=thread.pk).exists() and not Entry.objects.exists()
    assert AuditRecord.objects.filter(action="thread.delete", subject="rome").exists()


def test_editing_thread_metadata_in_the_admin_saves_it(admin_client: Client, alice: Caller) -> None:
    thread, _ = rome_thread(alice.agent)
    response = admin_client.post(
        f"/admin/memoryapp/thread/{thread.pk}/change/", {"user_id": "u-new", "metadata": '{"topic": "roma"}'}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    thread.refresh_from_db()
    assert thread.user_id == "u-new" and thread.metadata == {"topic": "roma"}


@pytest.fixture
def thread_editor(db: None) -> Client:
    """A staff user who may view and change threads, and nothing else."""
    return staff_client(username="editor", permissions=("view_thread", "change_thread"))


@pytest.mark.parametrize(
    "metadata",
    [
        "[1, 2]",
        '"a string"',
        "7",
        "null",
        "",
        '{"big": "' + "x" * (64 * 1024) + '"}',
        '{"a": "nul \\u0000 here"}',
        '{"a\\u0000": 1}',
        '{"a": "lone \\ud800 half"}',
    ],
)
def test_thread_metadata_the_api_would_refuse_is_a_form_error_in_the_admin(
    thread_editor: Client, alice: Caller, metadata: str
) -> None:
    thread, _ = rome_thread(alice.agent)
    thread_update(thread=thread, metadata={"topic": "rome"})
    response = thread_editor.post(
        f"/admin/memoryapp/thread/{thread.pk}/change/", {"user_id": "u-new", "metadata": metadata}
    )
    assert response.status_code == 200, response.content.decode()[:500]
    assert response.context["adminform"].form.errors["metadata"]
    thread.refresh_from_db()
    assert thread.metadata == {"topic": "rome"} and thread.user_id == "u-ana"
    # The same value over the API: refused there too (the admin adds no rule of its own).
    if metadata not in ("null", ""):
        api = alice.client.patch("/api/v1/threads/rome", f'{{"metadata": {metadata}}}', content_type="application/json")
        assert 400 <= api.status_code < 500


def test_a_thread_editor_saves_good_metadata_in_the_admin(thread_editor: Client, alice: Caller) -> None:
    thread, _ = rome_thread(alice.agent)
    response = thread_editor.post(
        f"/admin/memoryapp/thread/{thread.pk}/change/", {"user_id": "u-ana", "metadata": '{"topic": "roma"}'}
    )
    assert response.status_code == 302
    thread.refresh_from_db()
    assert thread.metadata == {"topic": "roma"}


def test_compact_now_and_extract_now_enqueue_jobs(admin_client, alice) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-admin-jobs")
    EntryFactory(thread=thread, role="user", content="look up page 1")
    tool_round(thread, 1, tool="fetch", body="PAGE " * 200)
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "Compact now" in page and "Extract now" in page
    response = admin_client.post(
        f"/admin/memoryapp/thread/{thread.pk}/compact/", {"strategy": "clear-old-tool-results"}, follow=True
    )
    assert "queued as job run" in response.content.decode()
    assert JobRun.objects.filter(kind__icontains="compact").exists()
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/extract/", follow=True)
    assert "Extraction queued" in response.content.decode()
    assert JobRun.objects.filter(kind__icontains="extract").exists()
    # a GET does nothing
    assert admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/extract/").status_code == 403
    assert Thread.objects.filter(pk=thread.pk).exists()
