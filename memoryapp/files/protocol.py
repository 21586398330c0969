"""The memory tool's commands (Anthropic memory_20250818): view, create, str_replace, insert,
delete, rename, with the answers and error texts a model trained on it expects. Each change goes
through the file services (`files.services`): versions added, nothing overwritten."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError, changed_since_read, not_found
from memoryapp.files.paths import (
    MAX_LINES,
    MEMORY_ROOT,
    path_is_hidden,
    path_is_under,
    path_normalize,
)
from memoryapp.files.selectors import (
    Snapshot,
    file_heads,
    version_content,
)
from memoryapp.files.services import (
    UNCHECKED,
    ExpectedSha,
    PlannedVersion,
    Unchecked,
    expected_sha_check,
    file_place_check,
    file_size_check,
    file_text_check,
    files_change,
    paths_writable_check,
)
from memoryapp.files.text import (
    human_size,
    numbered,
    occurrence_lines,
    split_lines,
)
from memoryapp.models import MemoryFileVersion

COMMANDS = ("view", "create", "str_replace", "insert", "delete", "rename")
_PARAMETERS = {
    "view": ("path", "view_range"),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str", "new_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}
SNIPPET_CONTEXT_LINES = 4


@dataclass
class ToolAnswer:
    """What a command answers: the text the model reads, and fields for programs."""

    result: str
    details: dict[str, Any] = field(default_factory=dict)
    status: int = 200


def _version_fields(version: MemoryFileVersion) -> dict[str, Any]:
    return {
        "path": version.path,
        "sha256": version.sha256,
        "size": version.size,
        "version": version.sequence,
        "version_id": version.pk,
    }


def file_view(*, access: FileAccess, path: str, view_range: list[int] | None = None) -> ToolAnswer:
    """A file with line numbers (optionally a range of lines), or a directory two levels deep with sizes."""
    path = path_normalize(path)
    snapshot = file_heads(access=access)
    standing = snapshot.file(path)
    if standing is not None:
        content = version_content(standing) or ""
        lines = split_lines(content)
        if len(lines) > MAX_LINES:
            raise MemoryFileError("too_many_lines", f"File {path} exceeds maximum line limit of 999,999 lines.")
        first, last = 1, len(lines)
        if view_range is not None:
            first, last = _view_range(view_range, len(lines))
        return ToolAnswer(
            f"Here's the content of {path} with line numbers:\n{numbered(lines[first - 1 : last], first)}",
            {"command": "view", "kind": "file", "lines": len(lines), **_version_fields(standing)},
        )
    if not snapshot.is_directory(path):
        raise not_found(path, prefix="", hint=True)
    if view_range is not None:
        raise MemoryFileError(
            "invalid_view_range",
            f"Error: The `view_range` parameter is not allowed when `path` points to a directory: {path}.",
            field="view_range",
        )
    return _directory_listing(snapshot, path)


def _view_range(view_range: list[int], line_count: int) -> tuple[int, int]:
    if (
        not isinstance(view_range, list | tuple)
        or len(view_range) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
    ):
        raise MemoryFileError(
            "invalid_view_range",
            "Error: Invalid `view_range`. It should be a list of two integers.",
            field="view_range",
        )
    first, last = view_range
    if first < 1 or first > max(line_count, 1):
        raise MemoryFileError(
            "invalid_view_range",
            f"Error: Invalid `view_range`: {list(view_range)}. Its first element `{first}` should be within the range of lines of the file: [1, {line_count}]",
            field="view_range",
        )
    if last == -1:
        return first, line_count
    if last < first or last > line_count:
        raise MemoryFileError(
            "invalid_view_range",
            f"Error: Invalid `view_range`: {list(view_range)}. Its second element `{last}` should be -1 or within [{first}, {line_count}]",
            field="view_range",
        )
    return first, last


def _directory_listing(snapshot: Snapshot, path: str) -> ToolAnswer:
    """Files and directories up to two levels below `path`, hidden ones and node_modules left out.

    A directory's size is the total size of the files under it.
    """
    depth = path.count("/")
    visible = [f for f in snapshot.files_under(path) if not path_is_hidden(f.path, path)]
    sizes: dict[str, int] = {}
    for version in visible:
        parts = version.path.split("/")
        for level in range(depth + 1, len(parts)):
            directory = "/".join(parts[:level])
            sizes[directory] = sizes.get(directory, 0) + version.size
    entries: list[dict[str, Any]] = []
    for directory in sorted(d for d in sizes if d != path and d.count("/") - depth <= 2):
        entries.append({"path": directory, "kind": "directory", "size": sizes[directory]})
    for version in visible:
        if version.path.count("/") - depth <= 2:
            entries.append({"path": version.path, "kind": "file", "size": version.size})
    entries.sort(key=lambda e: e["path"].split("/"))
    total = sum(v.size for v in visible)
    lines = [f"{human_size(total)}\t{path}"]
    lines += [f"{human_size(e['size'])}\t{e['path']}{'/' if e['kind'] == 'directory' else ''}" for e in entries]
    return ToolAnswer(
        f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items and node_modules:\n"
        + "\n".join(lines),
        {"command": "view", "kind": "directory", "path": path, "size": total, "entries": entries},
    )


def file_create(*, access: FileAccess, path: str, file_text: str) -> ToolAnswer:
    path = path_normalize(path)
    paths_writable_check(access, path)
    file_text_check(file_text, field="file_text")
    file_size_check(path, file_text, field="file_text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], None]:
        if snapshot.file(path) is not None:
            raise MemoryFileError("file_exists", f"Error: File {path} already exists", status=409)
        file_place_check(snapshot, path)
        return [PlannedVersion(path, file_text, None)], None

    (version,), _ = files_change(access, path, plan)
    return ToolAnswer(f"File created successfully at: {path}", {"command": "create", **_version_fields(version)}, 201)


def file_str_replace(
    *,
    access: FileAccess,
    path: str,
    old_str: str,
    new_str: str = "",
    expected_sha256: ExpectedSha = UNCHECKED,
) -> ToolAnswer:
    """Replace the one place `old_str` occurs; refused when it occurs nowhere or more than once."""
    path = path_normalize(path)
    paths_writable_check(access, path)
    file_text_check(new_str, field="new_str")
    if old_str == "":
        raise MemoryFileError("invalid_old_str", "Error: Parameter `old_str` must not be empty.", field="old_str")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], tuple[int, int]]:
        standing = snapshot.file(path)
        if standing is None:
            if not isinstance(expected_sha256, Unchecked):
                raise changed_since_read(path)
            raise not_found(path, hint=True)
        expected_sha_check(snapshot, path, expected_sha256)
        content = version_content(standing) or ""
        starts = occurrence_lines(content, old_str)
        if not starts:
            raise MemoryFileError(
                "old_str_not_found",
                f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}.",
                field="old_str",
            )
        if len(starts) > 1:
            lines = ", ".join(str(n) for n in sorted(set(starts)))
            raise MemoryFileError(
                "old_str_not_unique",
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: {lines}. Please ensure it is unique",
                field="old_str",
            )
        edited = content.replace(old_str, new_str, 1)
        file_size_check(path, edited, field="new_str")
        return [PlannedVersion(path, edited, standing)], (starts[0], starts[0] + new_str.count("\n"))

    (version,), (first, last) = files_change(access, path, plan)
    lines = split_lines(version.content or "")
    start = max(1, first - SNIPPET_CONTEXT_LINES)
    end = min(len(lines), last + SNIPPET_CONTEXT_LINES)
    return ToolAnswer(
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
        + numbered(lines[start - 1 : end], start),
        {"command": "str_replace", **_version_fields(version)},
    )


def file_insert(
    *,
    access: FileAccess,
    path: str,
    insert_line: int,
    insert_text: str,
    expected_sha256: ExpectedSha = UNCHECKED,
) -> ToolAnswer:
    """Insert `insert_text` after line `insert_line` (0: at the top); the file ends with a newline."""
    path = path_normalize(path)
    paths_writable_check(access, path)
    file_text_check(insert_text, field="insert_text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], None]:
        standing = snapshot.file(path)
        if standing is None:
            if not isinstance(expected_sha256, Unchecked):
                raise changed_since_read(path)
            raise not_found(path)
        expected_sha_check(snapshot, path, expected_sha256)
        lines = split_lines(version_content(standing) or "")
        if insert_line < 0 or insert_line > len(lines):
            raise MemoryFileError(
                "invalid_insert_line",
                f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines of the file: [0, {len(lines)}]",
                field="insert_line",
            )
        edited = lines_inserted(lines, insert_line, insert_text)
        file_size_check(path, edited, field="insert_text")
        return [PlannedVersion(path, edited, standing)], None

    (version,), _ = files_change(access, path, plan)
    return ToolAnswer(f"The file {path} has been edited.", {"command": "insert", **_version_fields(version)})


def lines_inserted(lines: list[str], at: int, text: str) -> str:
    """The file with `text` (one line or many; a final newline ignored) after line `at`."""
    added = (text[:-1] if text.endswith("\n") else text).split("\n")
    return "\n".join([*lines[:at], *added, *lines[at:]]) + "\n"


def file_delete(*, access: FileAccess, path: str, expected_sha256: ExpectedSha = UNCHECKED) -> ToolAnswer:
    """Delete a file, or a directory with every file under it (a deletion version each)."""
    path = path_normalize(path)
    if path == MEMORY_ROOT:
        raise MemoryFileError("invalid_path", f"Error: The {MEMORY_ROOT} directory itself cannot be deleted.")
    paths_writable_check(access, path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], list[str]]:
        standing = snapshot.file(path)
        if standing is None and not isinstance(expected_sha256, Unchecked):
            raise changed_since_read(path)
        expected_sha_check(snapshot, path, expected_sha256)
        doomed = [standing] if standing is not None else snapshot.files_under(path)
        if not doomed:
            raise not_found(path)
        paths_writable_check(access, *(v.path for v in doomed))
        return [PlannedVersion(v.path, None, v) for v in doomed], [v.path for v in doomed]

    _, deleted = files_change(access, path, plan)
    return ToolAnswer(f"Successfully deleted {path}", {"command": "delete", "path": path, "deleted": deleted})


def file_rename(
    *, access: FileAccess, old_path: str, new_path: str, expected_sha256: ExpectedSha = UNCHECKED
) -> ToolAnswer:
    """Move a file, or a directory with every file under it, whole or not at all."""
    old_path = path_normalize(old_path, field="old_path")
    new_path = path_normalize(new_path, field="new_path")
    if old_path == MEMORY_ROOT:
        raise MemoryFileError(
            "invalid_path", f"Error: The {MEMORY_ROOT} directory itself cannot be renamed.", field="old_path"
        )
    paths_writable_check(access, old_path, new_path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], list[dict[str, str]]]:
        standing = snapshot.file(old_path)
        if standing is None and not isinstance(expected_sha256, Unchecked):
            raise changed_since_read(old_path)
        expected_sha_check(snapshot, old_path, expected_sha256)
        moving = [standing] if standing is not None else snapshot.files_under(old_path)
        if not moving:
            raise not_found(old_path, field="old_path")
        if snapshot.exists(new_path):
            raise MemoryFileError(
                "destination_exists", f"Error: The destination {new_path} already exists", field="new_path", status=409
            )
        if path_is_under(new_path, old_path):
            raise MemoryFileError(
                "invalid_path", f"Error: {old_path} cannot be moved into itself ({new_path}).", field="new_path"
            )
        above = snapshot.file_above(new_path)
        if above is not None:
            raise MemoryFileError(
                "parent_is_file",
                f"Error: {above} is a file, so {new_path} cannot be created under it.",
                field="new_path",
                status=409,
            )
        planned: list[PlannedVersion] = []
        moves: list[dict[str, str]] = []
        for version in moving:
            target = new_path + version.path[len(old_path) :]
            paths_writable_check(access, version.path, target)
            planned.append(PlannedVersion(version.path, None, version))
            planned.append(PlannedVersion(target, version_content(version), version, renamed_from=version.path))
            moves.append({"from": version.path, "to": target})
        return planned, moves

    written, moves = files_change(access, old_path, plan)
    ids = {v.path: v.pk for v in written if v.content is not None}
    return ToolAnswer(
        f"Successfully renamed {old_path} to {new_path}",
        {
            "command": "rename",
            "old_path": old_path,
            "new_path": new_path,
            "moved": [{**move, "version_id": ids[move["to"]]} for move in moves],
        },
    )


def memory_tool_run(
    *, access: FileAccess, command: Mapping[str, Any], expected_sha256: ExpectedSha = UNCHECKED
) -> ToolAnswer:
    """Run one memory tool call, the model's input as it gave it: {"command": "view", "path": ...}."""
    name = command.get("command")
    if not isinstance(name, str) or name not in COMMANDS:
        shown = "" if name is None else f" `{name}`"
        raise MemoryFileError(
            "unknown_command",
            f"Error: Unknown command{shown}. The command must be one of: {', '.join(COMMANDS)}.",
            field="command",
        )
    allowed = _PARAMETERS[name]
    for key in command:
        if key != "command" and key not in allowed:
            raise MemoryFileError(
                "unknown_parameter", f"Error: Unknown parameter `{key}` for command: {name}", field=key
            )

    def text(key: str, *, required: bool = True, default: str = "") -> str:
        value = command.get(key)
        if value is None:
            if required:
                raise MemoryFileError(
                    "missing_parameter", f"Error: Parameter `{key}` is required for command: {name}", field=key
                )
            return default
        if not isinstance(value, str):
            raise MemoryFileError("invalid_parameter", f"Error: Parameter `{key}` must be a string.", field=key)
        return value

    if name == "view":
        view_range = command.get("view_range")
        return file_view(access=access, path=text("path"), view_range=view_range)
    if name == "create":
        return file_create(access=access, path=text("path"), file_text=text("file_text"))
    if name == "str_replace":
        return file_str_replace(
            access=access,
            path=text("path"),
            old_str=text("old_str"),
            new_str=text("new_str", required=False),
            expected_sha256=expected_sha256,
        )
    if name == "insert":
        line = command.get("insert_line")
        if line is None:
            raise MemoryFileError(
                "missing_parameter",
                "Error: Parameter `insert_line` is required for command: insert",
                field="insert_line",
            )
        if not isinstance(line, int) or isinstance(line, bool):
            raise MemoryFileError(
                "invalid_parameter", "Error: Parameter `insert_line` must be an integer.", field="insert_line"
            )
        return file_insert(
            access=access,
            path=text("path"),
            insert_line=line,
            insert_text=text("insert_text"),
            expected_sha256=expected_sha256,
        )
    if name == "delete":
        return file_delete(access=access, path=text("path"), expected_sha256=expected_sha256)
    return file_rename(
        access=access, old_path=text("old_path"), new_path=text("new_path"), expected_sha256=expected_sha256
    )
