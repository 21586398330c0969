"""The thread and entry actions of the admin: each its own POST, through a service, permission
checked; every irreversible one previewed with what goes with it (the preview equal to what
confirming then does) and reported with its counts; the person of a thread changed only through
an audited service."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from governance.models import AuditRecord, JobRun
from memoryapp.models import Entry, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import entry_add, thread_create, thread_fork
from tests.kit.api import Caller
from tests.kit.audit_names import audit_name

pytestmark = pytest.mark.django_db


def staff(name: str, *groups: str, codenames: tuple[str, ...] = ()) -> Client:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user(name, password="not-used", is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    if codenames:
        user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _say(caller: Caller, thread_id: str, text: str, role: str = "user", **more: Any) -> str:
    response = caller.client.post(
        f"/api/v1/threads/{thread_id}/entries", {"role": role, "content": text, **more}, format="json"
    )
    assert response.status_code == 201, response.json()
    return str(response.json()["id"])


def _item(caller: Caller, attribute: str, value: str, quotes: list[tuple[str, str]]) -> str:
    body = {
        "kind": "fact",
        "subject": "Ana",
        "attribute": attribute,
        "value": value,
        "user_id": "u-ana",
        "evidence": [{"entry_id": entry_id, "quote": quote} for entry_id, quote in quotes],
    }
    response = caller.client.post("/api/v1/items", body, format="json")
    assert response.status_code == 201, response.json()
    return str(response.json()["id"])


def porto(caller: Caller) -> dict[str, Any]:
    """A thread whose entries memory stands on: items (one only on `told`, one also elsewhere), a
    memory file written at `told`, a fork holding a copy of `told`, and a reply to `told`."""
    assert caller.client.post("/api/v1/threads", {"id": "porto", "user_id": "u-ana"}, format="json").status_code == 201
    told = _say(caller, "porto", "My passport number is X123 and I live in Porto.")
    reply = _say(caller, "porto", "Noted, Porto it is.", role="assistant")
    again = _say(caller, "porto", "Yes, Porto is home.")
    passport = _item(caller, "passport", "X123", [(told, "passport number is X123")])
    city = _item(caller, "city", "Porto", [(told, "I live in Porto"), (again, "Porto is home")])
    written = caller.client.post(
        f"/api/v1/memory-tool?thread_id=porto&place={told}",
        {"command": "create", "path": "/memories/ana.md", "file_text": "Ana: passport X123"},
        format="json",
    )
    assert written.status_code in (200, 201), written.json()
    thread = Thread.objects.get(external_id="porto")
    fork = thread_fork(thread=thread, entry_id=reply, new_thread_id="porto-fork")
    return {
        "thread": thread,
        "fork": fork,
        "told": told,
        "reply": reply,
        "again": again,
        "passport": passport,
        "city": city,
    }


def counts_on_page(page: str) -> dict[str, int]:
    return {label: int(n) for n, label in re.findall(r'<td class="n">(\d+)</td><td>([^<]+)</td>', page)}


def state(agent_id: int) -> dict[str, Any]:
    """What a delete or redaction could change, read whole."""
    return {
        "entries": sorted(
            Entry.objects.filter(agent_id=agent_id).values_list("id", "parent_id", "text", "redacted_at")
        ),
        "items": sorted(MemoryItem.objects.filter(agent_id=agent_id).values_list("id", "verified")),
        "evidence": Evidence.objects.filter(agent_id=agent_id).count(),
        "files": sorted(MemoryFileVersion.objects.filter(agent_id=agent_id).values_list("id", "content", "place_id")),
        "threads": sorted(Thread.objects.filter(agent_id=agent_id).values_list("external_id", "active_leaf_id")),
        "audit": AuditRecord.objects.count(),
        "jobs": JobRun.objects.count(),
    }


def message_of(response: Any) -> str:
    return " ".join(str(m) for m in response.context["messages"])


# --- compact now / extract now ------------------------------------------------------------------


def test_compact_now_posts_on_its_own_and_links_the_job_run(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="tools")
    entry_add(thread=thread, role="user", content="look up page 1")
    entry_add(thread=thread, role="assistant", content="", tool_calls=[{"id": "c1", "name": "fetch", "arguments": {}}])
    entry_add(thread=thread, type="tool_result", tool_call_id="c1", content="PAGE " * 200)
    entry_add(thread=thread, role="user", content="thanks")
    before = Thread.objects.values("user_id", "metadata", "updated_at").get(pk=thread.pk)
    response = admin_client.post(
        f"/admin/memoryapp/thread/{thread.pk}/compact/", {"strategy": "clear-old-tool-results"}, follow=True
    )
    run = JobRun.objects.get(kind__icontains="compact")
    assert run.arguments["thread_pk"] == thread.pk and run.arguments["actor"] == "staff:admin"
    text = message_of(response)
    assert f'<a href="/admin/governance/jobrun/{run.pk}/change/">job run #{run.pk}</a>' in text
    assert "changed successfully" not in response.content.decode()
    # The thread itself was not saved by it.
    assert Thread.objects.values("user_id", "metadata", "updated_at").get(pk=thread.pk) == before
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/extract/", follow=True)
    extraction = JobRun.objects.get(kind__icontains="extract")
    assert f"job run #{extraction.pk}" in message_of(response)


def test_an_unknown_compaction_strategy_is_a_message_and_no_job(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/compact/", {"strategy": "nonsense"}, follow=True)
    assert "strategy must be one of" in message_of(response)
    assert not JobRun.objects.exists()


@pytest.mark.parametrize("group", ["Reviewers", "Privacy officers", "Operators"])
def test_no_role_group_starts_jobs_from_the_thread_page(alice: Caller, group: str) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    entry_add(thread=thread, role="user", content="hello")
    client = staff("someone", group)
    for action in ("compact", "extract"):
        assert client.post(f"/admin/memoryapp/thread/{thread.pk}/{action}/").status_code == 403
    assert not JobRun.objects.exists()


def test_a_get_of_a_job_button_starts_nothing(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    for action in ("compact", "extract"):
        assert admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/{action}/").status_code == 405
    assert not JobRun.objects.exists()


def test_a_staff_user_with_the_change_permission_starts_a_job(alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    client = staff("editor", codenames=("view_thread", "change_thread"))
    assert client.post(f"/admin/memoryapp/thread/{thread.pk}/extract/").status_code == 302
    assert JobRun.objects.filter(kind__icontains="extract").count() == 1


# --- the person of a thread ---------------------------------------------------------------------------


def test_the_person_of_a_thread_changes_on_its_own_form_and_is_audited_with_ids_only(
    admin_client: Client, alice: Caller
) -> None:
    thread = thread_create(agent=alice.agent, external_id="t", user_id="u-ana", metadata={"note": "private words"})
    assert "Person (user id)" in admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/person/").content.decode()
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/person/", {"user_id": "u-ben"}, follow=True)
    assert "now u-ben" in message_of(response)
    thread.refresh_from_db()
    assert thread.user_id == "u-ben" and thread.metadata == {"note": "private words"}
    record = AuditRecord.objects.get(action="thread.user_change")

    # Each person and the thread by their pseudonyms (governance.audit.pseudonyms).
    def named(user_id: str, value: str) -> str:
        return audit_name(agent_id=alice.agent.pk, user_id=user_id, value=value)

    assert (record.actor, record.thread_id, record.subject) == ("staff:admin", named("u-ben", "t"), named("u-ben", "t"))
    assert record.details == {"from_user_id": named("u-ana", "u-ana"), "to_user_id": named("u-ben", "u-ben")}
    assert "u-ana" not in str(record.details) and "u-ben" not in str(record.details)
    # The same again changes nothing and writes no record.
    admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/person/", {"user_id": "u-ben"})
    assert AuditRecord.objects.filter(action="thread.user_change").count() == 1


@pytest.mark.parametrize("person", ["x" * 129, "a/b", "a\tb"])
def test_a_person_id_that_cannot_be_stored_is_a_form_error(admin_client: Client, alice: Caller, person: str) -> None:
    """The API's one rule of person ids: a `/` would make the person unreachable by /users/{id}/forget."""
    thread = thread_create(agent=alice.agent, external_id="t", user_id="u-ana")
    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/person/", {"user_id": person})
    assert response.status_code == 200 and response.context["form"].errors["user_id"]
    thread.refresh_from_db()
    assert thread.user_id == "u-ana" and not AuditRecord.objects.filter(action="thread.user_change").exists()


@pytest.mark.parametrize("group", ["Reviewers", "Privacy officers", "Operators"])
def test_no_role_group_changes_the_person_of_a_thread(alice: Caller, group: str) -> None:
    thread = thread_create(agent=alice.agent, external_id="t", user_id="u-ana")
    client = staff("someone", group)
    assert client.post(f"/admin/memoryapp/thread/{thread.pk}/person/", {"user_id": "u-x"}).status_code == 403
    thread.refresh_from_db()
    assert thread.user_id == "u-ana"


def test_an_agent_changing_the_person_over_the_api_is_audited_too(alice: Caller) -> None:
    thread_create(agent=alice.agent, external_id="t", user_id="u-ana")
    assert alice.client.patch("/api/v1/threads/t", {"user_id": "u-ben"}, format="json").status_code == 200
    assert alice.client.post("/api/v1/threads", {"id": "t", "user_id": "u-cy"}, format="json").status_code == 200
    records = AuditRecord.objects.filter(action="thread.user_change").order_by("seq")

    def named(user_id: str) -> str:
        return audit_name(agent_id=alice.agent.pk, user_id=user_id, value=user_id)

    assert [(r.actor, r.details["from_user_id"], r.details["to_user_id"]) for r in records] == [
        ("agent:alice", named("u-ana"), named("u-ben")),
        ("agent:alice", named("u-ben"), named("u-cy")),
    ]
    # An upsert that names no person, or the same one, writes nothing.
    alice.client.post("/api/v1/threads", {"id": "t"}, format="json")
    alice.client.patch("/api/v1/threads/t", {"user_id": "u-cy", "metadata": {"a": 1}}, format="json")
    assert records.count() == 2


# --- deletes and redactions: preview, confirm, report ------------------------------------------------


def test_deleting_a_thread_shows_what_goes_and_the_preview_changes_nothing(admin_client: Client, alice: Caller) -> None:
    world = porto(alice)
    thread = world["thread"]
    before = state(alice.agent.pk)
    response = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/delete/")
    assert response.status_code == 200
    page = response.content.decode()
    counts = counts_on_page(page)
    assert counts["thread deleted"] == 1 and counts["entries deleted"] == 3
    assert counts["fork copies deleted"] == 2 and counts["fork touched"] == 1
    assert counts["memory items purged"] == 2  # both items stand only on this thread's entries
    assert counts["quotes removed"] == 3 and counts["memory file version redacted"] == 1
    assert "porto-fork" in page and world["passport"].replace("_", "_5F") in page
    # Not Django's list of every row: no entry id is listed.
    assert world["told"] not in page and world["again"] not in page
    assert state(alice.agent.pk) == before

    response = admin_client.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"}, follow=True)
    message = message_of(response)
    assert message.startswith("Deleted thread porto: 1 thread deleted, 3 entries deleted, 2 fork copies deleted")
    assert "2 memory items purged" in message and "1 memory file version redacted" in message
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not MemoryItem.objects.filter(pk__in=[world["passport"], world["city"]]).exists()
    assert Entry.objects.filter(thread=world["fork"]).count() == 0
    # The file of the thread's own scope: redacted, then deleted with the thread (004).
    versions = MemoryFileVersion.objects.filter(agent=alice.agent).order_by("sequence")
    assert [v.content for v in versions] == ["[redacted]", None]


def test_a_redaction_preview_equals_what_the_redaction_then_does(admin_client: Client, alice: Caller) -> None:
    world = porto(alice)
    told = world["told"]
    url = f"/admin/memoryapp/entry/{told.replace('_', '_5F')}/redact/"
    before = state(alice.agent.pk)
    preview = admin_client.get(url)
    assert preview.status_code == 200
    previewed = counts_on_page(preview.content.decode())
    assert state(alice.agent.pk) == before
    # `told` is a user message: its reply goes with it (004), and the copies of both in the fork.
    assert previewed["entries redacted"] == 2 and previewed["fork copies redacted"] == 2
    assert previewed["memory item purged"] == 1 and previewed["memory item trimmed (loses quotes)"] == 1
    assert previewed["quotes removed"] == 2 and previewed["memory file version redacted"] == 1

    # No reason: asked again, nothing done.
    response = admin_client.post(url, {"post": "yes", "reason": "  "})
    assert response.status_code == 200 and "Say why" in response.content.decode()
    assert state(alice.agent.pk) == before

    audit_before = AuditRecord.objects.count()
    response = admin_client.post(url, {"post": "yes", "reason": "the person asked on the phone"}, follow=True)
    assert response.status_code == 200
    entry = Entry.objects.get(pk=told)
    assert entry.text == "[redacted]" and entry.metadata["redacted"]["reason"] == "the person asked on the phone"
    # The counts said after it are those of the preview.
    new = AuditRecord.objects.filter(seq__gt=audit_before)
    done: dict[str, int] = {}
    for record in new.filter(action="lineage.forget"):
        for key in ("items_purged", "items_trimmed", "evidence_removed", "file_versions_redacted"):
            done[key] = done.get(key, 0) + record.details[key]
    assert done == {"items_purged": 1, "items_trimmed": 1, "evidence_removed": 2, "file_versions_redacted": 1}
    assert new.filter(action="entry.redact").count() == 2  # one record per thread: the origin and the fork
    assert Entry.objects.get(pk=world["reply"]).text == "[redacted]"
    message = message_of(response)
    assert message == (
        f"Redacted {told}: 2 entries redacted, 2 fork copies redacted, 1 memory item purged, "
        "1 memory item trimmed (loses quotes), 2 quotes removed, 1 memory file version redacted, 1 fork touched."
    )
    # The reason is on the entry, never in the audit trail.
    assert not any("phone" in str(r.details) for r in AuditRecord.objects.all())


def test_deleting_an_entry_previews_the_replies_it_moves_and_reports_them(admin_client: Client, alice: Caller) -> None:
    world = porto(alice)
    reply = world["reply"]
    url = f"/admin/memoryapp/entry/{reply.replace('_', '_5F')}/delete/"
    previewed = counts_on_page(admin_client.get(url).content.decode())
    assert previewed["entry deleted"] == 1 and previewed["reply moved to the parent"] == 1
    assert previewed["fork copy deleted"] == 1
    response = admin_client.post(url, {"post": "yes"}, follow=True)
    assert "1 entry deleted, 1 reply moved to the parent, 1 fork copy deleted" in message_of(response)
    assert Entry.objects.get(pk=world["again"]).parent_id == world["told"]


def test_redacting_from_the_entry_list_asks_for_a_reason_and_previews_the_batch(alice: Caller) -> None:
    world = porto(alice)
    officer = staff("olga", "Privacy officers")
    data: dict[str, Any] = {"action": "redact_entries", "_selected_action": [world["told"], world["again"]]}
    preview = officer.post("/admin/memoryapp/entry/", data)
    assert preview.status_code == 200
    counts = counts_on_page(preview.content.decode())
    assert counts["entries redacted"] == 3 and counts["memory items purged"] == 2  # `told`'s reply too
    assert Entry.objects.filter(redacted_at__isnull=False).count() == 0
    response = officer.post(
        "/admin/memoryapp/entry/", {**data, "post": "yes", "reason": "erasure by phone"}, follow=True
    )
    assert "Redacted 2 entries: 3 entries redacted, 2 fork copies redacted, 2 memory items purged" in message_of(
        response
    )
    assert set(Entry.objects.filter(redacted_at__isnull=False).values_list("thread__external_id", flat=True)) == {
        "porto",
        "porto-fork",
    }


def test_an_event_entry_in_a_batch_is_skipped_and_said_so(admin_client: Client, alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    said = entry_add(thread=thread, role="user", content="hello")
    label = entry_add(thread=thread, type="label", event={"label": "x"})
    data: dict[str, Any] = {"action": "redact_entries", "_selected_action": [said.id, label.id]}
    page = admin_client.post("/admin/memoryapp/entry/", data).content.decode()
    assert "Event entries cannot be redacted." in page and counts_on_page(page)["entry redacted"] == 1
    response = admin_client.post("/admin/memoryapp/entry/", {**data, "post": "yes", "reason": "r"}, follow=True)
    assert "Skipped 1" in message_of(response)
    assert Entry.objects.get(pk=said.id).redacted_at is not None


def test_deleting_threads_from_the_list_previews_them_all(admin_client: Client, alice: Caller) -> None:
    a = thread_create(agent=alice.agent, external_id="a")
    entry_add(thread=a, role="user", content="one")
    b = thread_create(agent=alice.agent, external_id="b")
    entry_add(thread=b, role="user", content="two")
    entry_add(thread=b, role="user", content="three")
    data: dict[str, Any] = {"action": "delete_threads", "_selected_action": [a.pk, b.pk]}
    page = admin_client.post("/admin/memoryapp/thread/", data).content.decode()
    assert counts_on_page(page)["threads deleted"] == 2 and counts_on_page(page)["entries deleted"] == 3
    assert "delete_selected" not in admin_client.get("/admin/memoryapp/thread/").content.decode()
    admin_client.post("/admin/memoryapp/thread/", {**data, "post": "yes"})
    assert not Thread.objects.exists()


def test_who_may_preview_and_confirm_deletes_and_redactions(alice: Caller) -> None:
    world = porto(alice)
    thread, told = world["thread"], world["told"]
    quoted = told.replace("_", "_5F")
    for group in ("Reviewers", "Operators"):
        client = staff(group.lower(), group)
        assert client.get(f"/admin/memoryapp/thread/{thread.pk}/delete/").status_code == 403
        assert client.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"}).status_code == 403
        assert client.get(f"/admin/memoryapp/entry/{quoted}/redact/").status_code == 403
        assert (
            client.post(f"/admin/memoryapp/entry/{quoted}/redact/", {"post": "yes", "reason": "r"}).status_code == 403
        )
    assert Entry.objects.get(pk=told).redacted_at is None and Thread.objects.filter(pk=thread.pk).exists()
    officer = staff("olga", "Privacy officers")
    assert officer.get(f"/admin/memoryapp/entry/{quoted}/redact/").status_code == 200
    assert officer.post(f"/admin/memoryapp/entry/{quoted}/redact/", {"post": "yes", "reason": "r"}).status_code == 302
    assert officer.post(f"/admin/memoryapp/thread/{thread.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Thread.objects.filter(pk=thread.pk).exists()
