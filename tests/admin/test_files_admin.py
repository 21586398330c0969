"""The admin of memory files: the tree per scope, a file's history, diffs, and the audited redact action."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from governance.models import AuditRecord
from memoryapp.files.access import FileAccess
from memoryapp.files.protocol import file_create, file_rename, file_str_replace
from memoryapp.models import MemoryFileVersion
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.factories import MemoryFileVersionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(db: None) -> Client:
    return staff_client(username="eve", is_superuser=True)


def test_tree_shows_the_files_of_each_scope(staff: Client, alice: Caller, bob: Caller) -> None:
    MemoryFileVersionFactory(agent=alice.agent, user_id="ana", path="/memories/people/ana.md", content="x")
    MemoryFileVersionFactory(agent=alice.agent, path="/memories/style.md", content="y")
    MemoryFileVersionFactory(agent=bob.agent, path="/memories/bobs.md", content="z")
    page = staff.get(reverse("admin:memoryapp_memoryfileversion_tree")).content.decode()
    for shown in ("alice", "bob", "agent-wide", "user ana", "people/", "ana.md", "style.md", "bobs.md"):
        assert shown in page
    only_alice = staff.get(reverse("admin:memoryapp_memoryfileversion_tree") + "?agent=alice").content.decode()
    assert "bobs.md" not in only_alice and "style.md" in only_alice


def test_history_lists_every_version_with_author_and_place(staff: Client, alice: Caller) -> None:
    access = FileAccess(agent=alice.agent, user_id="ana", author="user")
    file_create(access=access, path="/memories/a.md", file_text="one\n")
    file_str_replace(access=access, path="/memories/a.md", old_str="one", new_str="two")
    file_rename(access=access, old_path="/memories/a.md", new_path="/memories/b.md")
    url = reverse("admin:memoryapp_memoryfileversion_history")
    page = staff.get(url, {"agent": alice.agent.pk, "user_id": "ana", "path": "/memories/a.md"})
    assert page.status_code == 200
    text = page.content.decode()
    assert text.count('name="a"') == 3 and "deleted" in text and "user" in text
    assert staff.get(url, {"agent": alice.agent.pk, "path": "/memories/a.md"}).status_code == 404  # another scope


def test_diff_between_two_versions_is_escaped(staff: Client, alice: Caller) -> None:
    first = MemoryFileVersionFactory(agent=alice.agent, path="/memories/a.md", content="<b>bold</b>\nsame\n")
    second = MemoryFileVersionFactory(
        agent=alice.agent, path="/memories/a.md", content="<script>alert(1)</script>\nsame\n"
    )
    page = staff.get(reverse("admin:memoryapp_memoryfileversion_diff"), {"a": first.pk, "b": second.pk})
    text = page.content.decode()
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in text
    assert "+&lt;script&gt;alert(1)&lt;/script&gt;" in text and "-&lt;b&gt;bold&lt;/b&gt;" in text


def test_redact_action_redacts_every_version_in_the_scope_and_audits(staff: Client, alice: Caller) -> None:
    MemoryFileVersionFactory(agent=alice.agent, path="/memories/n.md", content="agent-wide")
    MemoryFileVersionFactory(agent=alice.agent, user_id="ana", path="/memories/n.md", content="secret 1")
    version = MemoryFileVersionFactory(agent=alice.agent, user_id="ana", path="/memories/n.md", content="secret 2")
    response = staff.post(
        reverse("admin:memoryapp_memoryfileversion_changelist"),
        {"action": "redact", "_selected_action": [version.pk]},
    )
    assert response.status_code == 302
    assert list(
        MemoryFileVersion.objects.filter(user_id="ana").order_by("sequence").values_list("content", flat=True)
    ) == [
        "[redacted]",
        "[redacted]",
        None,  # the file in front was redacted: it is then deleted, out of the listing
    ]
    assert MemoryFileVersion.objects.get(user_id="").content == "agent-wide"
    record = AuditRecord.objects.get(action="memory_files.redact")
    assert record.actor == "staff:eve" and record.details["versions"] == 2


def test_changelist_and_version_page_open(staff: Client, alice: Caller) -> None:
    version = MemoryFileVersionFactory(agent=alice.agent, path="/memories/a.md", content="hello")
    assert staff.get(reverse("admin:memoryapp_memoryfileversion_changelist")).status_code == 200
    page = staff.get(reverse("admin:memoryapp_memoryfileversion_change", args=[version.pk]))
    assert page.status_code == 200 and "hello" in page.content.decode()
