"""Memory files through the services: scopes, branches, whole-file writes, limits, redaction, the working note."""

from __future__ import annotations

import pytest

from governance.models import AuditRecord
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.protocol import file_create, file_delete, file_rename, file_str_replace, file_view
from memoryapp.files.selectors import file_history
from memoryapp.files.services import file_put, files_index, files_index_text, files_list, files_redact
from memoryapp.files.working_note import WORKING_NOTE_PATH, working_note_run
from memoryapp.models import MemoryFileVersion
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory
from tests.kit.files import sha256_hex, text_seen

pytestmark = pytest.mark.django_db


# --- scopes --------------------------------------------------------------------------------------


def test_the_narrowest_scope_holding_a_path_wins(alice: Caller) -> None:
    agent_wide = FileAccess(agent=alice.agent)
    ana = FileAccess(agent=alice.agent, user_id="ana")
    ana_in_thread = FileAccess(agent=alice.agent, user_id="ana", thread_id="t1")
    bruno = FileAccess(agent=alice.agent, user_id="bruno")
    file_create(access=agent_wide, path="/memories/style.md", file_text="formal")
    assert text_seen(ana, "/memories/style.md") == "formal"
    assert text_seen(bruno, "/memories/style.md") == "formal"

    file_str_replace(access=ana, path="/memories/style.md", old_str="formal", new_str="casual")
    assert text_seen(ana, "/memories/style.md") == "casual"
    assert text_seen(ana_in_thread, "/memories/style.md") == "casual"
    assert text_seen(bruno, "/memories/style.md") == "formal"
    assert text_seen(agent_wide, "/memories/style.md") == "formal"
    # The edit went into ana's scope: the agent-wide version is untouched.
    assert MemoryFileVersion.objects.get(user_id="ana").previous == MemoryFileVersion.objects.get(user_id="")


def test_a_deletion_in_a_narrow_scope_hides_the_wider_file_there_only(alice: Caller) -> None:
    file_create(access=FileAccess(agent=alice.agent), path="/memories/style.md", file_text="formal")
    file_delete(access=FileAccess(agent=alice.agent, user_id="ana"), path="/memories/style.md")
    assert text_seen(FileAccess(agent=alice.agent, user_id="ana"), "/memories/style.md") is None
    assert text_seen(FileAccess(agent=alice.agent, user_id="bruno"), "/memories/style.md") == "formal"


def test_a_thread_scope_is_narrower_than_a_project_and_a_person(alice: Caller) -> None:
    full = FileAccess(agent=alice.agent, user_id="ana", project_id="p", thread_id="t")
    file_put(access=FileAccess(agent=alice.agent, user_id="ana"), path="/memories/n.md", text="person")
    file_put(access=FileAccess(agent=alice.agent, project_id="p"), path="/memories/n.md", text="project")
    assert text_seen(full, "/memories/n.md") == "project"
    file_put(access=FileAccess(agent=alice.agent, thread_id="t"), path="/memories/n.md", text="thread")
    assert text_seen(full, "/memories/n.md") == "thread"
    assert text_seen(FileAccess(agent=alice.agent, user_id="ana", project_id="q"), "/memories/n.md") == "person"


def test_another_agent_with_the_same_scope_sees_nothing(alice: Caller, mallory: Caller) -> None:
    file_create(access=FileAccess(agent=alice.agent, user_id="ana"), path="/memories/ana.md", file_text="secret")
    assert text_seen(FileAccess(agent=mallory.agent, user_id="ana"), "/memories/ana.md") is None
    assert files_list(access=FileAccess(agent=mallory.agent, user_id="ana")) == []


# --- branches --------------------------------------------------------------------------------------


def test_a_version_written_on_a_branch_is_seen_only_on_branches_holding_its_place(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t1", user_id="ana")
    root = EntryFactory(thread=thread)
    left, right = EntryFactory(thread=thread, parent_id=root.id), EntryFactory(thread=thread, parent_id=root.id)
    after_left = EntryFactory(thread=thread, parent_id=left.id)
    base = FileAccess(agent=alice.agent, user_id="ana", thread_id="t1")
    file_put(
        access=FileAccess(agent=alice.agent, user_id="ana", thread_id="t1", place=root),
        path="/memories/a.md",
        text="v1",
    )
    file_put(
        access=FileAccess(agent=alice.agent, user_id="ana", thread_id="t1", place=left),
        path="/memories/a.md",
        text="v2",
    )
    assert (
        text_seen(FileAccess(agent=alice.agent, user_id="ana", thread_id="t1", place=after_left), "/memories/a.md")
        == "v2"
    )
    assert (
        text_seen(FileAccess(agent=alice.agent, user_id="ana", thread_id="t1", place=right), "/memories/a.md") == "v1"
    )
    assert text_seen(base, "/memories/a.md") == "v2"  # without a place, the newest
    # Writing on the other branch continues the file's sequence, never reusing a number.
    version = file_put(
        access=FileAccess(agent=alice.agent, user_id="ana", thread_id="t1", place=right),
        path="/memories/a.md",
        text="v3",
    )
    assert version.sequence == 3 and version.previous is not None and version.previous.content == "v1"


# --- whole-file writes ----------------------------------------------------------------------------


def test_put_creates_replaces_and_checks_the_version_it_was_made_from(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent, author="system")
    first = file_put(access=access, path="/memories/own.md", text="one", expected_sha256=None)
    assert (first.sequence, first.author) == (1, "system")
    with pytest.raises(MemoryFileError) as refused:
        file_put(access=access, path="/memories/own.md", text="two", expected_sha256=None)
    assert (refused.value.code, refused.value.status) == ("file_changed", 409)
    with pytest.raises(MemoryFileError):
        file_put(access=access, path="/memories/own.md", text="two", expected_sha256=sha256_hex("zero"))
    second = file_put(access=access, path="/memories/own.md", text="two", expected_sha256=sha256_hex("one"))
    assert second.sequence == 2
    # The same text again is not a change: no version is added.
    assert file_put(access=access, path="/memories/own.md", text="two").pk == second.pk
    assert MemoryFileVersion.objects.count() == 2


def test_list_and_index_give_the_files_that_stand(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    file_put(access=access, path="/memories/b.md", text="bb")
    file_put(access=access, path="/memories/a/x.md", text="x" * 2048)
    file_put(access=access, path="/memories/gone.md", text="g")
    file_delete(access=access, path="/memories/gone.md")
    assert [(v.path, v.size, v.sequence) for v in files_list(access=access)] == [
        ("/memories/a/x.md", 2048, 1),
        ("/memories/b.md", 2, 1),
    ]
    assert [(e.path, e.size) for e in files_index(access=access)] == [("/memories/a/x.md", 2048), ("/memories/b.md", 2)]
    assert files_index_text(access=access) == "- /memories/a/x.md (2.0K)\n- /memories/b.md (2B)"


def test_history_holds_every_version_oldest_first(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    file_create(access=access, path="/memories/a.md", file_text="1")
    file_str_replace(access=access, path="/memories/a.md", old_str="1", new_str="2")
    file_delete(access=access, path="/memories/a.md")
    file_create(access=access, path="/memories/a.md", file_text="3")
    history = file_history(access=access, path="/memories/a.md")
    assert [(v.sequence, v.content) for v in history] == [(1, "1"), (2, "2"), (3, None), (4, "3")]


# --- limits and atomic changes ------------------------------------------------------------------------


def test_a_change_over_8_mib_is_refused_whole(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    for n in range(9):
        file_put(access=access, path=f"/memories/big/{n}.md", text="x" * (1024 * 1024))
    with pytest.raises(MemoryFileError) as refused:
        file_rename(access=access, old_path="/memories/big", new_path="/memories/moved")
    assert (refused.value.code, refused.value.status) == ("change_too_large", 413)
    assert "8 MiB" in refused.value.message
    assert MemoryFileVersion.objects.count() == 9


def test_a_directory_rename_touching_a_reserved_path_writes_nothing(alice: Caller) -> None:
    setup = FileAccess(agent=alice.agent, reserved=())
    file_put(access=setup, path="/memories/old/a.md", text="a")
    file_put(access=setup, path="/memories/old/b.md", text="b")
    access = FileAccess(agent=alice.agent, reserved=("/memories/new/b.md",))
    with pytest.raises(MemoryFileError) as refused:
        file_rename(access=access, old_path="/memories/old", new_path="/memories/new")
    assert refused.value.message == "/memories/new/b.md is kept by memory itself and is read-only here"
    assert MemoryFileVersion.objects.count() == 2


def test_a_file_of_999999_lines_and_more_cannot_be_viewed(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent)
    file_put(access=access, path="/memories/lines.md", text="\n" * 1_000_000)
    with pytest.raises(MemoryFileError) as refused:
        file_view(access=access, path="/memories/lines.md")
    assert refused.value.message == "File /memories/lines.md exceeds maximum line limit of 999,999 lines."


# --- redaction -------------------------------------------------------------------------------------


def test_redaction_replaces_every_version_along_renames_and_is_audited(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent, user_id="ana", actor="staff:eve")
    file_create(access=access, path="/memories/draft.md", file_text="Ana has condition X")
    file_str_replace(access=access, path="/memories/draft.md", old_str="X", new_str="Y")
    file_rename(access=access, old_path="/memories/draft.md", new_path="/memories/health.md")
    file_rename(access=access, old_path="/memories/health.md", new_path="/memories/people/ana.md")
    file_create(access=access, path="/memories/other.md", file_text="untouched")

    report = files_redact(access=access, paths=["/memories/health.md"], reason="erasure request")
    assert report.paths == ["/memories/draft.md", "/memories/health.md", "/memories/people/ana.md"]
    assert report.versions == 4
    for version in MemoryFileVersion.objects.exclude(path="/memories/other.md"):
        if version.content is not None:
            assert version.content == "[redacted]"
            assert version.sha256 == sha256_hex("[redacted]") and version.redacted_at is not None
    assert MemoryFileVersion.objects.get(path="/memories/other.md").content == "untouched"
    # Deletions stay deletions; the file in front was redacted, so it is then deleted (004: its
    # path may name what was forgotten) and leaves the listing; its history keeps the redacted versions.
    assert MemoryFileVersion.objects.filter(content__isnull=True).count() == 3
    assert text_seen(access, "/memories/people/ana.md") is None
    assert text_seen(access, "/memories/other.md") == "untouched"
    record = AuditRecord.objects.get(action="memory_files.redact")
    assert (record.actor, record.agent_id, record.outcome) == ("staff:eve", alice.agent.pk, "redacted")
    assert record.details["versions"] == 4 and record.details["paths"] == 3 and record.details["files_deleted"] == 1
    assert record.details["reason_given"] is True
    # Ids and counts only: no path, no reason typed, no content.
    assert not any(word in str(record.details) for word in ("condition", "health", "erasure request", "/memories"))


def test_the_reason_a_redaction_was_given_stays_on_its_versions_and_out_of_the_audit(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent, user_id="ana", actor="staff:eve")
    file_create(access=access, path="/memories/health.md", file_text="Ana has condition X")
    file_create(access=access, path="/memories/other.md", file_text="untouched")

    files_redact(access=access, paths=["/memories/health.md"], reason="  Ana asked on the phone  ")

    redacted = MemoryFileVersion.objects.get(path="/memories/health.md", redacted_at__isnull=False)
    assert redacted.redaction_reason == "Ana asked on the phone"
    assert MemoryFileVersion.objects.get(path="/memories/other.md").redaction_reason == ""
    record = AuditRecord.objects.get(action="memory_files.redact")
    assert record.details["reason_given"] is True and "phone" not in str(record.details)


@pytest.mark.parametrize(
    ("reason", "code"), [(7, "invalid_type"), ("x" * 501, "too_long"), ("a\x00b", "invalid_value")]
)
def test_a_redaction_reason_out_of_the_rule_is_refused_naming_it(alice: Caller, reason: object, code: str) -> None:
    access = FileAccess(agent=alice.agent, user_id="ana")
    file_create(access=access, path="/memories/n.md", file_text="kept")

    with pytest.raises(MemoryFileError) as refused:
        files_redact(access=access, paths=["/memories/n.md"], reason=reason)  # type: ignore[arg-type]

    assert (refused.value.code, refused.value.field) == (code, "reason")
    assert MemoryFileVersion.objects.get().content == "kept"


def test_redaction_keeps_to_the_scopes_seen_unless_every_scope(alice: Caller) -> None:
    file_put(access=FileAccess(agent=alice.agent, user_id="ana"), path="/memories/n.md", text="ana")
    file_put(access=FileAccess(agent=alice.agent, user_id="bruno"), path="/memories/n.md", text="bruno")
    files_redact(access=FileAccess(agent=alice.agent, user_id="ana"), paths=["/memories/n.md"], reason="r")
    assert MemoryFileVersion.objects.get(user_id="bruno").content == "bruno"
    files_redact(access=FileAccess(agent=alice.agent), paths=["/memories"], reason="r", every_scope=True)
    # Every version redacted, each file then deleted (a deletion version closes each).
    assert set(MemoryFileVersion.objects.values_list("content", flat=True)) == {"[redacted]", None}
    assert MemoryFileVersion.objects.filter(content__isnull=True).count() == 2


def test_redaction_never_reaches_another_agent(alice: Caller, mallory: Caller) -> None:
    file_put(access=FileAccess(agent=alice.agent), path="/memories/n.md", text="alice's")
    files_redact(access=FileAccess(agent=mallory.agent), paths=["/memories/n.md"], every_scope=True)
    assert MemoryFileVersion.objects.get().content == "alice's"


# --- the working note ------------------------------------------------------------------------------


def test_working_note_reads_replaces_and_appends_as_versions(alice: Caller) -> None:
    access = FileAccess(agent=alice.agent, user_id="ana")
    empty = working_note_run(access=access, action="read")
    assert (empty.text, empty.details) == ("", {"action": "read", "ok": True, "length": 0})
    replaced = working_note_run(access=access, action="replace", content="Project uses pnpm.")
    assert replaced.details == {"action": "replace", "ok": True, "length": 18}
    appended = working_note_run(access=access, action="append", content="Decision: Redis\ncache.")
    assert appended.text == "Project uses pnpm.\nDecision: Redis cache."
    assert working_note_run(access=access, action="append").text == appended.text
    assert working_note_run(access=access, action="append", content="").text == appended.text
    assert working_note_run(access=access, action="read", content="ignored").text == appended.text
    history = file_history(access=access, path=WORKING_NOTE_PATH)
    assert [v.content for v in history] == ["Project uses pnpm.", "Project uses pnpm.\nDecision: Redis cache."]


def test_working_note_over_http(alice: Caller, mallory: Caller) -> None:
    url = "/api/v1/working-note?user_id=ana"
    assert alice.client.get(url).json()["text"] == ""
    response = alice.client.post(url, {"action": "append", "content": "first line"}, format="json")
    assert response.status_code == 200
    assert response.json()["text"] == "first line"
    assert response.json()["details"] == {"action": "append", "ok": True, "length": 10}
    answer = alice.client.post(url, {"action": "append", "content": "second"}, format="json").json()
    assert answer["text"] == "first line\nsecond"
    assert alice.client.get(url).json() == {
        "text": "first line\nsecond",
        "details": {"action": "read", "ok": True, "length": 17},
        "path": WORKING_NOTE_PATH,
        "version_id": None,
    }
    refused = alice.client.post(url, {"action": "shout"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "action" and refused.json()["details"]["ok"] is False
    assert mallory.client.get(url).json()["text"] == ""
    # The note is a memory file: the memory tool sees it too.
    viewed = alice.client.post(
        "/api/v1/memory-tool?user_id=ana", {"command": "view", "path": WORKING_NOTE_PATH}, format="json"
    ).json()
    assert "second" in viewed["result"]
