"""The memory tool over HTTP: every command's answer and error text, as Anthropic's memory tool words them."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.models import MemoryFileVersion
from tests.kit.api import MEMORY_TOOL, Caller, create_memory_file, use_memory_tool
from tests.kit.factories import MemoryFileVersionFactory
from tests.kit.files import sha256_hex

pytestmark = pytest.mark.django_db


# --- view ------------------------------------------------------------------------------------------


def test_view_of_a_file_shows_numbered_lines_and_its_sha256(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "Allergic to peanuts.\nLikes Rome.\n")
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/ana.md"})
    assert status == 200
    assert answer["result"] == (
        "Here's the content of /memories/ana.md with line numbers:\n     1\tAllergic to peanuts.\n     2\tLikes Rome."
    )
    assert answer["sha256"] == sha256_hex("Allergic to peanuts.\nLikes Rome.\n")
    assert (answer["kind"], answer["version"], answer["lines"]) == ("file", 1, 2)


def test_view_with_a_range_shows_those_lines_only(alice: Caller) -> None:
    create_memory_file(alice, "/memories/list.md", "".join(f"line {n}\n" for n in range(1, 13)))
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/list.md", "view_range": [10, -1]})
    assert status == 200
    assert answer["result"].splitlines()[1:] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/list.md", "view_range": [2, 3]})
    assert answer["result"].splitlines()[1:] == ["     2\tline 2", "     3\tline 3"]


def test_view_with_a_range_outside_the_file_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/list.md", "a\nb\n")
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/list.md", "view_range": [5, 6]})
    assert status == 400
    assert answer["error"]["field"] == "view_range"
    assert answer["result"].startswith("Error: Invalid `view_range`: [5, 6].")


def test_view_of_a_directory_lists_two_levels_with_sizes_without_hidden_items(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "x" * 1536)
    create_memory_file(alice, "/memories/notes/rome.md", "y" * 100)
    create_memory_file(alice, "/memories/notes/deep/er/est.md", "z" * 10)
    create_memory_file(alice, "/memories/.secret", "hidden")
    create_memory_file(alice, "/memories/node_modules/x.js", "hidden")
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories"})
    assert status == 200
    assert answer["result"] == (
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n"
        "1.6K\t/memories\n"
        "1.5K\t/memories/ana.md\n"
        "110B\t/memories/notes/\n"
        "10B\t/memories/notes/deep/\n"
        "100B\t/memories/notes/rome.md"
    )
    assert answer["kind"] == "directory"
    assert {e["path"] for e in answer["entries"]} == {
        "/memories/ana.md",
        "/memories/notes",
        "/memories/notes/deep",
        "/memories/notes/rome.md",
    }


def test_view_of_an_empty_memory_lists_the_root_alone(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories"})
    assert status == 200
    assert answer["result"].endswith("node_modules:\n0B\t/memories")


def test_view_of_a_missing_path_says_it_does_not_exist(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/nothing.md"})
    assert status == 404
    assert answer["result"] == "The path /memories/nothing.md does not exist. Please provide a valid path."
    assert answer["error"] == {"code": "path_not_found", "message": answer["result"], "field": "path"}


# --- create ----------------------------------------------------------------------------------------


def test_create_answers_and_keeps_a_first_version(alice: Caller) -> None:
    answer = create_memory_file(alice, "/memories/ana.md", "Allergic to peanuts.")
    assert answer["result"] == "File created successfully at: /memories/ana.md"
    version = MemoryFileVersion.objects.get(pk=answer["version_id"])
    assert (version.agent_id, version.user_id, version.path, version.sequence) == (
        alice.agent.pk,
        "u-ana",
        "/memories/ana.md",
        1,
    )
    assert (version.content, version.sha256, version.size, version.author) == (
        "Allergic to peanuts.",
        sha256_hex("Allergic to peanuts."),
        20,
        "model",
    )


def test_create_of_an_existing_file_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "one")
    status, answer = use_memory_tool(alice, {"command": "create", "path": "/memories/ana.md", "file_text": "two"})
    assert status == 409
    assert answer["result"] == "Error: File /memories/ana.md already exists"
    assert MemoryFileVersion.objects.filter(path="/memories/ana.md").count() == 1


def test_create_without_file_text_names_the_parameter(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "create", "path": "/memories/ana.md"})
    assert status == 400
    assert answer["result"] == "Error: Parameter `file_text` is required for command: create"
    assert answer["error"]["field"] == "file_text"
    assert not MemoryFileVersion.objects.exists()


def test_create_under_a_file_or_over_a_directory_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "a file")
    create_memory_file(alice, "/memories/notes/rome.md", "a file in a directory")
    status, answer = use_memory_tool(
        alice, {"command": "create", "path": "/memories/ana.md/child.md", "file_text": "x"}
    )
    assert (status, answer["result"]) == (
        409,
        "Error: /memories/ana.md is a file, so /memories/ana.md/child.md cannot be created under it.",
    )
    status, answer = use_memory_tool(alice, {"command": "create", "path": "/memories/notes", "file_text": "x"})
    assert (status, answer["error"]["code"]) == (409, "is_directory")
    assert MemoryFileVersion.objects.count() == 2


# --- str_replace -----------------------------------------------------------------------------------


def test_str_replace_edits_and_shows_a_numbered_snippet(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "Allergic to peanuts.\nLikes Rome.\n")
    status, answer = use_memory_tool(
        alice,
        {"command": "str_replace", "path": "/memories/ana.md", "old_str": "Likes Rome.", "new_str": "Likes Lisbon."},
    )
    assert status == 200
    assert answer["result"] == (
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
        "     1\tAllergic to peanuts.\n     2\tLikes Lisbon."
    )
    assert answer["version"] == 2
    head = MemoryFileVersion.objects.get(pk=answer["version_id"])
    assert head.content == "Allergic to peanuts.\nLikes Lisbon.\n"
    assert head.previous is not None and head.previous.sequence == 1


def test_str_replace_of_missing_text_performs_no_replacement(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "Likes Rome.\n")
    status, answer = use_memory_tool(
        alice, {"command": "str_replace", "path": "/memories/ana.md", "old_str": "Paris", "new_str": "x"}
    )
    assert status == 400
    assert answer["result"] == (
        "No replacement was performed, old_str `Paris` did not appear verbatim in /memories/ana.md."
    )
    assert answer["error"]["code"] == "old_str_not_found"
    assert MemoryFileVersion.objects.count() == 1


def test_str_replace_of_repeated_text_names_the_lines(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "tea\ncoffee\ntea\n")
    status, answer = use_memory_tool(
        alice, {"command": "str_replace", "path": "/memories/ana.md", "old_str": "tea", "new_str": "x"}
    )
    assert status == 400
    assert answer["result"] == (
        "No replacement was performed. Multiple occurrences of old_str `tea` in lines: 1, 3. Please ensure it is unique"
    )
    assert MemoryFileVersion.objects.count() == 1


def test_str_replace_of_a_missing_file_or_a_directory_says_it_does_not_exist(alice: Caller) -> None:
    create_memory_file(alice, "/memories/notes/a.md", "a")
    for path in ("/memories/none.md", "/memories/notes"):
        status, answer = use_memory_tool(
            alice, {"command": "str_replace", "path": path, "old_str": "a", "new_str": "b"}
        )
        assert status == 404
        assert answer["result"] == f"Error: The path {path} does not exist. Please provide a valid path."


def test_str_replace_with_a_stale_sha256_is_a_conflict(alice: Caller) -> None:
    first = create_memory_file(alice, "/memories/ana.md", "Likes Rome.\n")
    use_memory_tool(
        alice, {"command": "str_replace", "path": "/memories/ana.md", "old_str": "Rome", "new_str": "Porto"}
    )
    status, answer = use_memory_tool(
        alice,
        {
            "command": "str_replace",
            "path": "/memories/ana.md",
            "old_str": "Porto",
            "new_str": "Lisbon",
            "expected_sha256": first["sha256"],
        },
    )
    assert status == 409
    assert answer["result"] == "Error: /memories/ana.md changed since you last read it. View it again and try again."
    assert answer["error"]["code"] == "file_changed"
    assert MemoryFileVersion.objects.count() == 2


def test_str_replace_with_the_sha256_last_read_goes_through(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "Likes Rome.\n")
    _, viewed = use_memory_tool(alice, {"command": "view", "path": "/memories/ana.md"})
    status, answer = use_memory_tool(
        alice,
        {
            "command": "str_replace",
            "path": "/memories/ana.md",
            "old_str": "Rome",
            "new_str": "Porto",
            "expected_sha256": viewed["sha256"],
        },
    )
    assert status == 200, answer
    assert answer["sha256"] == sha256_hex("Likes Porto.\n")


# --- insert ----------------------------------------------------------------------------------------


def test_insert_puts_text_after_the_line(alice: Caller) -> None:
    create_memory_file(alice, "/memories/todo.md", "one\nthree\n")
    status, answer = use_memory_tool(
        alice, {"command": "insert", "path": "/memories/todo.md", "insert_line": 1, "insert_text": "two\n"}
    )
    assert (status, answer["result"]) == (200, "The file /memories/todo.md has been edited.")
    assert MemoryFileVersion.objects.get(pk=answer["version_id"]).content == "one\ntwo\nthree\n"
    use_memory_tool(alice, {"command": "insert", "path": "/memories/todo.md", "insert_line": 0, "insert_text": "zero"})
    _, viewed = use_memory_tool(alice, {"command": "view", "path": "/memories/todo.md"})
    assert viewed["result"].splitlines()[1:] == ["     1\tzero", "     2\tone", "     3\ttwo", "     4\tthree"]


def test_insert_at_a_line_outside_the_file_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/todo.md", "one\ntwo\n")
    status, answer = use_memory_tool(
        alice, {"command": "insert", "path": "/memories/todo.md", "insert_line": 3, "insert_text": "x"}
    )
    assert status == 400
    assert answer["result"] == (
        "Error: Invalid `insert_line` parameter: 3. It should be within the range of lines of the file: [0, 2]"
    )
    assert answer["error"]["field"] == "insert_line"


def test_insert_into_a_missing_file_says_it_does_not_exist(alice: Caller) -> None:
    status, answer = use_memory_tool(
        alice, {"command": "insert", "path": "/memories/no.md", "insert_line": 0, "insert_text": "x"}
    )
    assert (status, answer["result"]) == (404, "Error: The path /memories/no.md does not exist")


def test_insert_line_must_be_an_integer(alice: Caller) -> None:
    create_memory_file(alice, "/memories/todo.md", "one\n")
    status, answer = use_memory_tool(
        alice, {"command": "insert", "path": "/memories/todo.md", "insert_line": "1", "insert_text": "x"}
    )
    assert (status, answer["error"]["field"]) == (400, "insert_line")


# --- delete ----------------------------------------------------------------------------------------


def test_delete_of_a_file_adds_a_version_without_content(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "x")
    status, answer = use_memory_tool(alice, {"command": "delete", "path": "/memories/ana.md"})
    assert (status, answer["result"]) == (200, "Successfully deleted /memories/ana.md")
    versions = list(MemoryFileVersion.objects.order_by("sequence"))
    assert [(v.sequence, v.content, v.sha256) for v in versions] == [(1, "x", sha256_hex("x")), (2, None, "")]
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/ana.md"})
    assert status == 404


def test_delete_of_a_directory_deletes_every_file_under_it(alice: Caller) -> None:
    create_memory_file(alice, "/memories/notes/a.md", "a")
    create_memory_file(alice, "/memories/notes/deep/b.md", "b")
    create_memory_file(alice, "/memories/keep.md", "k")
    status, answer = use_memory_tool(alice, {"command": "delete", "path": "/memories/notes"})
    assert (status, answer["result"]) == (200, "Successfully deleted /memories/notes")
    assert answer["deleted"] == ["/memories/notes/a.md", "/memories/notes/deep/b.md"]
    _, listing = use_memory_tool(alice, {"command": "view", "path": "/memories"})
    assert [e["path"] for e in listing["entries"]] == ["/memories/keep.md"]


def test_delete_of_a_missing_path_or_the_root_is_refused(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "delete", "path": "/memories/gone.md"})
    assert (status, answer["result"]) == (404, "Error: The path /memories/gone.md does not exist")
    status, answer = use_memory_tool(alice, {"command": "delete", "path": "/memories"})
    assert status == 400
    assert answer["result"] == "Error: The /memories directory itself cannot be deleted."


# --- rename ----------------------------------------------------------------------------------------


def test_rename_moves_a_file_recording_where_it_came_from(alice: Caller) -> None:
    create_memory_file(alice, "/memories/draft.md", "text")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/draft.md", "new_path": "/memories/final.md"}
    )
    assert (status, answer["result"]) == (200, "Successfully renamed /memories/draft.md to /memories/final.md")
    moved = MemoryFileVersion.objects.get(path="/memories/final.md")
    assert (moved.content, moved.renamed_from, moved.sequence) == ("text", "/memories/draft.md", 1)
    gone = MemoryFileVersion.objects.get(path="/memories/draft.md", sequence=2)
    assert gone.content is None
    assert (
        moved.previous_id == gone.previous_id == MemoryFileVersion.objects.get(path="/memories/draft.md", sequence=1).pk
    )


def test_rename_of_a_directory_moves_all_its_files(alice: Caller) -> None:
    create_memory_file(alice, "/memories/old/a.md", "a")
    create_memory_file(alice, "/memories/old/sub/b.md", "b")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/old", "new_path": "/memories/new"}
    )
    assert status == 200
    assert answer["moved"][0]["from"] == "/memories/old/a.md"
    assert {m["to"] for m in answer["moved"]} == {"/memories/new/a.md", "/memories/new/sub/b.md"}
    _, listing = use_memory_tool(alice, {"command": "view", "path": "/memories"})
    assert [e["path"] for e in listing["entries"]] == ["/memories/new", "/memories/new/a.md", "/memories/new/sub"]


def test_rename_errors_name_the_missing_source_and_the_taken_destination(alice: Caller) -> None:
    create_memory_file(alice, "/memories/a.md", "a")
    create_memory_file(alice, "/memories/b.md", "b")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/x.md", "new_path": "/memories/y.md"}
    )
    assert (status, answer["result"], answer["error"]["field"]) == (
        404,
        "Error: The path /memories/x.md does not exist",
        "old_path",
    )
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"}
    )
    assert (status, answer["result"]) == (409, "Error: The destination /memories/b.md already exists")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md/c.md"}
    )
    assert (status, answer["error"]["code"]) == (409, "parent_is_file")
    assert MemoryFileVersion.objects.count() == 2


def test_rename_of_a_directory_into_itself_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/dir/a.md", "a")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/dir", "new_path": "/memories/dir/sub"}
    )
    assert status == 400
    assert answer["result"] == "Error: /memories/dir cannot be moved into itself (/memories/dir/sub)."


# --- input, paths and limits -----------------------------------------------------------------------


def test_unknown_command_is_a_400_naming_command(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "explode", "path": "/memories"})
    assert status == 400
    assert answer["error"]["field"] == "command"
    assert answer["result"].startswith("Error: Unknown command `explode`.")
    status, answer = use_memory_tool(alice, {"path": "/memories"})
    assert (status, answer["error"]["field"]) == (400, "command")


def test_unknown_parameter_is_refused(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories", "view_rnge": [1, 2]})
    assert (status, answer["error"]["field"]) == (400, "view_rnge")


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/etc/passwd", "invalid_path"),
        ("/memoriesx/a.md", "invalid_path"),
        ("memories/a.md", "invalid_path"),
        ("/memories/../etc", "invalid_path"),
        ("/memories/a/./b.md", "invalid_path"),
        ("/memories//a.md", "invalid_path"),
        ("/memories/a\x07b.md", "invalid_path"),
        ("/memories/a\x00b.md", "invalid_path"),
        ("/memories/" + "n" * 256 + ".md", "name_too_long"),
    ],
)
def test_bad_paths_are_refused_and_change_nothing(alice: Caller, path: str, code: str) -> None:
    status, answer = use_memory_tool(alice, {"command": "create", "path": path, "file_text": "x"})
    assert status == 400
    assert answer["error"] == {"code": code, "message": answer["result"], "field": "path"}
    assert answer["result"].startswith("Error: ")
    assert not MemoryFileVersion.objects.exists()


def test_a_path_outside_memories_is_answered_with_the_rule(alice: Caller) -> None:
    _, answer = use_memory_tool(alice, {"command": "create", "path": "/etc/passwd", "file_text": "x"})
    assert (
        answer["result"] == "Error: The path /etc/passwd is outside /memories. Every memory path starts with /memories."
    )


def test_a_name_of_255_characters_is_fine(alice: Caller) -> None:
    create_memory_file(alice, "/memories/" + "n" * 252 + ".md", "x")


def test_a_file_over_1_mib_is_refused(alice: Caller) -> None:
    status, answer = use_memory_tool(
        alice, {"command": "create", "path": "/memories/big.md", "file_text": "x" * (1024 * 1024 + 1)}
    )
    assert status == 413
    assert answer["error"]["code"] == "file_too_large"
    assert "1 MiB" in answer["result"]
    assert not MemoryFileVersion.objects.exists()
    create_memory_file(alice, "/memories/big.md", "x" * (1024 * 1024))


def test_an_edit_that_grows_a_file_over_1_mib_is_refused(alice: Caller) -> None:
    create_memory_file(alice, "/memories/big.md", "x" * (1024 * 1024 - 1) + "!")
    status, answer = use_memory_tool(
        alice, {"command": "str_replace", "path": "/memories/big.md", "old_str": "!", "new_str": "!!"}
    )
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (413, "file_too_large", "new_str")


def test_nul_in_text_is_refused(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "create", "path": "/memories/a.md", "file_text": "a\x00b"})
    assert (status, answer["error"]["field"]) == (400, "file_text")
    assert answer["result"] == "Error: Parameter `file_text` must not contain NUL characters."


def test_reserved_paths_are_viewed_but_not_changed(alice: Caller) -> None:
    MemoryFileVersionFactory(agent=alice.agent, user_id="u-ana", path="/memories/playbook.md", content="Be kind.\n")
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/playbook.md"})
    assert status == 200 and "Be kind." in answer["result"]
    refused = [
        {"command": "str_replace", "path": "/memories/playbook.md", "old_str": "kind", "new_str": "mean"},
        {"command": "delete", "path": "/memories/playbook.md"},
        {"command": "create", "path": "/memories/playbook.next.md", "file_text": "x"},
        {"command": "create", "path": "/memories/observations/ana.md", "file_text": "x"},
        {"command": "rename", "old_path": "/memories/playbook.md", "new_path": "/memories/p.md"},
    ]
    for command in refused:
        status, answer = use_memory_tool(alice, command)
        assert status == 403, command
        assert answer["error"]["code"] == "reserved_path"
        assert answer["result"].endswith("is kept by memory itself and is read-only here")
    create_memory_file(alice, "/memories/mine.md", "x")
    status, answer = use_memory_tool(
        alice, {"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/observations/x.md"}
    )
    assert answer["result"] == "/memories/observations/x.md is kept by memory itself and is read-only here"
    assert MemoryFileVersion.objects.filter(path__startswith="/memories/p").count() == 1


def test_read_only_access_refuses_every_change_but_reads(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "x\n")
    url = MEMORY_TOOL + "&read_only=true"
    for command in (
        {"command": "create", "path": "/memories/b.md", "file_text": "x"},
        {"command": "str_replace", "path": "/memories/ana.md", "old_str": "x", "new_str": "y"},
        {"command": "insert", "path": "/memories/ana.md", "insert_line": 0, "insert_text": "y"},
        {"command": "delete", "path": "/memories/ana.md"},
        {"command": "rename", "old_path": "/memories/ana.md", "new_path": "/memories/c.md"},
    ):
        status, answer = use_memory_tool(alice, command, url)
        assert (status, answer["error"]["code"]) == (403, "read_only"), command
        assert answer["result"].startswith("Error: The memory is read-only here")
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories/ana.md"}, url)
    assert status == 200
    assert MemoryFileVersion.objects.count() == 1


def test_expected_sha256_must_look_like_one(alice: Caller) -> None:
    create_memory_file(alice, "/memories/a.md", "a")
    status, answer = use_memory_tool(alice, {"command": "delete", "path": "/memories/a.md", "expected_sha256": "abc"})
    assert (status, answer["error"]["field"]) == (400, "expected_sha256")


def test_unknown_query_parameter_is_refused(alice: Caller) -> None:
    status, answer = use_memory_tool(alice, {"command": "view", "path": "/memories"}, "/api/v1/memory-tool?usr_id=u")
    assert (status, answer["error"]["field"]) == (400, "usr_id")


def test_the_memory_tool_needs_a_key(anonymous: Any) -> None:
    response = anonymous.post(MEMORY_TOOL, {"command": "view", "path": "/memories"}, format="json")
    assert response.status_code == 401


# --- isolation -------------------------------------------------------------------------------------


def test_another_agent_never_sees_alices_files(alice: Caller, mallory: Caller) -> None:
    answer = create_memory_file(alice, "/memories/ana.md", "Allergic to peanuts.")
    status, seen = use_memory_tool(mallory, {"command": "view", "path": "/memories/ana.md"})
    assert status == 404 and "peanuts" not in str(seen)
    status, seen = use_memory_tool(mallory, {"command": "view", "path": "/memories"})
    assert "ana.md" not in seen["result"]
    status, _ = use_memory_tool(mallory, {"command": "delete", "path": "/memories/ana.md"})
    assert status == 404
    assert mallory.client.get(f"/api/v1/memory-files/versions/{answer['version_id']}").status_code == 404
    assert mallory.client.get("/api/v1/memory-files/history?path=/memories/ana.md&user_id=u-ana").status_code == 404
    assert mallory.client.get("/api/v1/memory-files?user_id=u-ana").json() == {"files": []}
    assert MemoryFileVersion.objects.filter(agent=mallory.agent).count() == 0


def test_one_person_does_not_see_another_persons_files(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "Ana's", url="/api/v1/memory-tool?user_id=u-ana")
    status, _ = use_memory_tool(
        alice, {"command": "view", "path": "/memories/ana.md"}, "/api/v1/memory-tool?user_id=u-bruno"
    )
    assert status == 404


# --- list, history, versions -------------------------------------------------------------------------


def test_list_history_and_version_endpoints(alice: Caller) -> None:
    create_memory_file(alice, "/memories/ana.md", "one\n")
    use_memory_tool(alice, {"command": "str_replace", "path": "/memories/ana.md", "old_str": "one", "new_str": "two"})
    use_memory_tool(alice, {"command": "rename", "old_path": "/memories/ana.md", "new_path": "/memories/people/ana.md"})
    files = alice.client.get("/api/v1/memory-files?user_id=u-ana").json()["files"]
    assert [(f["path"], f["version"], f["size"]) for f in files] == [("/memories/people/ana.md", 1, 4)]
    assert files[0]["sha256"] == sha256_hex("two\n")

    history = alice.client.get("/api/v1/memory-files/history?path=/memories/ana.md&user_id=u-ana").json()
    assert [(v["version"], v["deleted"]) for v in history["versions"]] == [(1, False), (2, False), (3, True)]
    moved = alice.client.get("/api/v1/memory-files/history?path=/memories/people/ana.md&user_id=u-ana").json()
    assert moved["versions"][0]["renamed_from"] == "/memories/ana.md"

    first = alice.client.get(f"/api/v1/memory-files/versions/{history['versions'][0]['version_id']}").json()
    assert (first["content"], first["version"], first["author"]) == ("one\n", 1, "model")
    deletion = alice.client.get(f"/api/v1/memory-files/versions/{history['versions'][2]['version_id']}").json()
    assert deletion["content"] is None and deletion["deleted"] is True
    assert alice.client.get("/api/v1/memory-files/versions/mfv_nothing").status_code == 404


def test_history_of_a_path_never_written_is_404_and_a_bad_path_400(alice: Caller) -> None:
    assert alice.client.get("/api/v1/memory-files/history?path=/memories/none.md").status_code == 404
    response = alice.client.get("/api/v1/memory-files/history?path=/etc/x")
    assert (response.status_code, response.json()["error"]["field"]) == (400, "path")


def test_the_schema_documents_the_memory_file_endpoints(anonymous: Any) -> None:
    schema = anonymous.get("/api/schema/", {"format": "json"}).json()
    for endpoint in (
        "/api/v1/memory-tool",
        "/api/v1/memory-files",
        "/api/v1/memory-files/history",
        "/api/v1/working-note",
    ):
        assert endpoint in schema["paths"]
    names = {p["name"] for p in schema["paths"]["/api/v1/memory-tool"]["post"]["parameters"]}
    assert {"user_id", "project_id", "thread_id", "read_only"} <= names
