"""Writes of memory files: the memory tool's commands, whole-file writes and redaction.

Every change adds versions and overwrites nothing: an edit is a new version, a deletion a
version without content, a rename a deletion at the old path and a version at the new one
that records where it came from. The answers and error texts are those of Anthropic's memory
tool (memory_20250818), so a model trained on it reads what it expects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from governance.audit import audit_append
from memoryapp.content import REDACTED_TEXT
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError, changed_since_read, concurrent_change, not_found
from memoryapp.files.paths import (
    MAX_CHANGE_BYTES,
    MAX_FILE_BYTES,
    MAX_LINES,
    MEMORY_ROOT,
    path_is_hidden,
    path_is_reserved,
    path_is_under,
    path_normalize,
)
from memoryapp.files.selectors import (
    Snapshot,
    file_heads,
    version_content,
    versions_for_agent,
    versions_seen,
)
from memoryapp.files.text import (
    human_size,
    numbered,
    occurrence_lines,
    sha256_of,
    size_of,
    split_lines,
)
from memoryapp.models import MemoryFileVersion

# A writer that loses the race for a version number makes its change again on what stands.
MAX_TRIES = 3
# pg_advisory_xact_lock(class, agent): the file writes of one agent go one after another.
_FILES_LOCK_CLASS = 0x4D46  # "MF"
_UNIQUE_VERSION = "file_version_scope_path_seq_uniq"
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

T = TypeVar("T")


class _Unchecked:
    """The `expected_sha256` of a write that does not care which version it replaces."""

    def __repr__(self) -> str:
        return "UNCHECKED"


UNCHECKED = _Unchecked()
# The sha256 a caller last read; None: the file must not exist; UNCHECKED: any version.
ExpectedSha = str | _Unchecked | None


@dataclass
class ToolAnswer:
    """What a command answers: the text the model reads, and fields for programs."""

    result: str
    details: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass(frozen=True)
class PlannedVersion:
    path: str
    content: str | None
    follows: MemoryFileVersion | None  # the version this one comes after (for a moved file, its source)
    renamed_from: str = ""


@dataclass(frozen=True)
class RedactionReport:
    paths: list[str]
    versions: int


# --- checks --------------------------------------------------------------------------------------


def _check_writable(access: FileAccess, *paths: str) -> None:
    """Read-only access refuses every change; reserved paths refuse changes of themselves and below."""
    if access.read_only:
        raise MemoryFileError(
            "read_only",
            f"Error: The memory is read-only here: {paths[0] if paths else MEMORY_ROOT} cannot be changed.",
            status=403,
        )
    for path in paths:
        if path_is_reserved(path, access.reserved):
            raise MemoryFileError("reserved_path", f"{path} is kept by memory itself and is read-only here", status=403)


def _check_text(text: str, *, field: str) -> None:
    if "\x00" in text:
        raise MemoryFileError(
            "invalid_text", f"Error: Parameter `{field}` must not contain NUL characters.", field=field
        )


def _check_file_size(path: str, text: str, *, field: str | None = None) -> None:
    size = size_of(text)
    if size > MAX_FILE_BYTES:
        raise MemoryFileError(
            "file_too_large",
            f"Error: The file {path} would hold {size:,} bytes; a memory file holds at most 1 MiB ({MAX_FILE_BYTES:,} bytes).",
            field=field,
            status=413,
        )


def _check_expected(snapshot: Snapshot, path: str, expected_sha256: ExpectedSha) -> None:
    """Optimistic locking: the file must still be the version the caller read (None: must not exist)."""
    if isinstance(expected_sha256, _Unchecked):
        return
    standing = snapshot.file(path)
    if expected_sha256 is None:
        if standing is not None:
            raise changed_since_read(path)
    elif standing is None or standing.sha256 != expected_sha256:
        raise changed_since_read(path)


def _check_place_for_file(snapshot: Snapshot, path: str) -> None:
    """A file cannot be put where a directory stands, nor under another file."""
    if path == MEMORY_ROOT or snapshot.is_directory(path):
        raise MemoryFileError(
            "is_directory", f"Error: The path {path} is a directory, so a file cannot be written there.", status=409
        )
    above = snapshot.file_above(path)
    if above is not None:
        raise MemoryFileError(
            "parent_is_file", f"Error: {above} is a file, so {path} cannot be created under it.", status=409
        )


# --- the change engine ---------------------------------------------------------------------------


def _lock_files(access: FileAccess) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_FILES_LOCK_CLASS, access.agent.pk % 2**31])


def _is_version_race(error: IntegrityError) -> bool:
    diag = getattr(error.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == _UNIQUE_VERSION


def _write_versions(access: FileAccess, planned: list[PlannedVersion]) -> list[MemoryFileVersion]:
    """Add the planned versions in the access's scope, each at the next sequence of its path."""
    written_bytes = sum(size_of(p.content) for p in planned if p.content is not None)
    if written_bytes > MAX_CHANGE_BYTES:
        raise MemoryFileError(
            "change_too_large",
            f"Error: This change would write {written_bytes:,} bytes; one change writes at most 8 MiB ({MAX_CHANGE_BYTES:,} bytes).",
            status=413,
        )
    for version in planned:
        if version.content is not None:
            _check_text(version.content, field="content")
            _check_file_size(version.path, version.content)
    user_id, project_id, thread_id = access.scope
    last = dict(
        versions_for_agent(agent=access.agent)
        .filter(user_id=user_id, project_id=project_id, thread_id=thread_id, path__in=[p.path for p in planned])
        .values("path")
        .annotate(last=Max("sequence"))
        .values_list("path", "last")
    )
    rows = [
        MemoryFileVersion(
            agent=access.agent,
            user_id=user_id,
            project_id=project_id,
            thread_id=thread_id,
            path=p.path,
            sequence=(last.get(p.path) or 0) + 1,
            content=p.content,
            sha256=sha256_of(p.content) if p.content is not None else "",
            size=size_of(p.content) if p.content is not None else 0,
            previous=p.follows,
            place=access.place,
            renamed_from=p.renamed_from,
            author=access.author,
        )
        for p in planned
    ]
    return MemoryFileVersion.objects.bulk_create(rows)


def _change(
    access: FileAccess, around: str, plan: Callable[[Snapshot], tuple[list[PlannedVersion], T]]
) -> tuple[list[MemoryFileVersion], T]:
    """Make one change of one or many files, whole or not at all.

    1. Under the agent's file lock, read the files that stand (the snapshot).
    2. `plan` checks the command against them (existence, expected sha256, places) and says
       which versions to add; it raises the tool's error when the command cannot be done.
    3. Add the versions in one transaction. The unique (scope, path, sequence) constraint makes
       sure no two writers add the same version, also writers that do not take the lock; the
       one that loses makes its change again on what stands (a change made from a read sha256
       then fails as changed), up to MAX_TRIES times, then answers the conflict.
    """
    for _ in range(MAX_TRIES):
        try:
            with transaction.atomic():
                _lock_files(access)
                planned, outcome = plan(file_heads(access=access))
                written = _write_versions(access, planned) if planned else []
                return written, outcome
        except IntegrityError as error:
            if not _is_version_race(error):
                raise
    raise concurrent_change(around)


def _version_fields(version: MemoryFileVersion) -> dict[str, Any]:
    return {
        "path": version.path,
        "sha256": version.sha256,
        "size": version.size,
        "version": version.sequence,
        "version_id": version.pk,
    }


# --- the memory tool's commands -------------------------------------------------------------------


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
    _check_writable(access, path)
    _check_text(file_text, field="file_text")
    _check_file_size(path, file_text, field="file_text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], None]:
        if snapshot.file(path) is not None:
            raise MemoryFileError("file_exists", f"Error: File {path} already exists", status=409)
        _check_place_for_file(snapshot, path)
        return [PlannedVersion(path, file_text, None)], None

    (version,), _ = _change(access, path, plan)
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
    _check_writable(access, path)
    _check_text(new_str, field="new_str")
    if old_str == "":
        raise MemoryFileError("invalid_old_str", "Error: Parameter `old_str` must not be empty.", field="old_str")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], tuple[int, int]]:
        standing = snapshot.file(path)
        if standing is None:
            if not isinstance(expected_sha256, _Unchecked):
                raise changed_since_read(path)
            raise not_found(path, hint=True)
        _check_expected(snapshot, path, expected_sha256)
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
        _check_file_size(path, edited, field="new_str")
        return [PlannedVersion(path, edited, standing)], (starts[0], starts[0] + new_str.count("\n"))

    (version,), (first, last) = _change(access, path, plan)
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
    _check_writable(access, path)
    _check_text(insert_text, field="insert_text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], None]:
        standing = snapshot.file(path)
        if standing is None:
            if not isinstance(expected_sha256, _Unchecked):
                raise changed_since_read(path)
            raise not_found(path)
        _check_expected(snapshot, path, expected_sha256)
        lines = split_lines(version_content(standing) or "")
        if insert_line < 0 or insert_line > len(lines):
            raise MemoryFileError(
                "invalid_insert_line",
                f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines of the file: [0, {len(lines)}]",
                field="insert_line",
            )
        edited = lines_inserted(lines, insert_line, insert_text)
        _check_file_size(path, edited, field="insert_text")
        return [PlannedVersion(path, edited, standing)], None

    (version,), _ = _change(access, path, plan)
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
    _check_writable(access, path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], list[str]]:
        standing = snapshot.file(path)
        if standing is None and not isinstance(expected_sha256, _Unchecked):
            raise changed_since_read(path)
        _check_expected(snapshot, path, expected_sha256)
        doomed = [standing] if standing is not None else snapshot.files_under(path)
        if not doomed:
            raise not_found(path)
        _check_writable(access, *(v.path for v in doomed))
        return [PlannedVersion(v.path, None, v) for v in doomed], [v.path for v in doomed]

    _, deleted = _change(access, path, plan)
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
    _check_writable(access, old_path, new_path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], list[dict[str, str]]]:
        standing = snapshot.file(old_path)
        if standing is None and not isinstance(expected_sha256, _Unchecked):
            raise changed_since_read(old_path)
        _check_expected(snapshot, old_path, expected_sha256)
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
            _check_writable(access, version.path, target)
            planned.append(PlannedVersion(version.path, None, version))
            planned.append(PlannedVersion(target, version_content(version), version, renamed_from=version.path))
            moves.append({"from": version.path, "to": target})
        return planned, moves

    written, moves = _change(access, old_path, plan)
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


# --- whole files, for code that keeps a file of its own -------------------------------------------


def file_put(
    *, access: FileAccess, path: str, text: str, expected_sha256: ExpectedSha = UNCHECKED
) -> MemoryFileVersion:
    """Write a whole file, creating it when it does not exist.

    `expected_sha256` names the version `text` was made from (None: a file that did not exist);
    the write fails as changed when the file stands otherwise. Writing the same text again adds
    no version and answers the one that stands.
    """
    path = path_normalize(path)
    _check_writable(access, path)
    _check_text(text, field="text")
    _check_file_size(path, text, field="text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], MemoryFileVersion | None]:
        _check_expected(snapshot, path, expected_sha256)
        standing = snapshot.file(path)
        if standing is None:
            _check_place_for_file(snapshot, path)
        elif standing.sha256 == sha256_of(text):
            return [], standing
        return [PlannedVersion(path, text, standing)], None

    written, unchanged = _change(access, path, plan)
    return unchanged if unchanged is not None else written[0]


def file_update(
    *, access: FileAccess, path: str, edit: Callable[[str | None], str | None]
) -> tuple[MemoryFileVersion | None, str | None]:
    """Read a file and write what `edit` makes of it, in one step no other writer comes between.

    `edit` gets the content that stands (None: no file) and returns the new text, or None to
    leave the file as it is. Answers (the version written or standing, its content).
    """
    path = path_normalize(path)
    _check_writable(access, path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], tuple[MemoryFileVersion | None, str | None]]:
        standing = snapshot.file(path)
        current = version_content(standing) if standing is not None else None
        edited = edit(current)
        if edited is None or edited == current:
            return [], (standing, current)
        _check_text(edited, field="content")
        _check_file_size(path, edited, field="content")
        if standing is None:
            _check_place_for_file(snapshot, path)
        return [PlannedVersion(path, edited, standing)], (None, edited)

    written, (standing, content) = _change(access, path, plan)
    return (written[0] if written else standing), content


# --- reads that answer programs ------------------------------------------------------------------


@dataclass(frozen=True)
class FileIndexEntry:
    path: str
    size: int


def files_list(*, access: FileAccess, under: str = MEMORY_ROOT) -> list[MemoryFileVersion]:
    """The files that stand (heads, without content), by path."""
    under = path_normalize(under)
    snapshot = file_heads(access=access, under=under)
    return [snapshot.files[path] for path in sorted(snapshot.files)]


def files_index(*, access: FileAccess) -> list[FileIndexEntry]:
    """The compact list of files a context gets: paths and sizes."""
    return [FileIndexEntry(v.path, v.size) for v in files_list(access=access)]


def files_index_text(*, access: FileAccess) -> str:
    """The index as the lines a context shows ("" when there are no files)."""
    return "\n".join(f"- {entry.path} ({human_size(entry.size)})" for entry in files_index(access=access))


# --- redaction -----------------------------------------------------------------------------------


@transaction.atomic
def files_redact(
    *,
    access: FileAccess,
    paths: list[str],
    reason: str = "",
    every_scope: bool = False,
    exact_scope: bool = False,
) -> RedactionReport:
    """Replace the content of every version of `paths` with [redacted], keeping everything else.

    1. Take the agent's file lock, so no rename copies a version while it is being redacted.
    2. The versions in reach: the scopes the access reads (every branch), only its own scope
       with `exact_scope`, or every scope of the agent with `every_scope`. A directory path
       takes every file under it.
    3. Follow renames both ways until nothing new turns up: the paths a file was renamed from,
       and the paths it was renamed to, carry the same text.
    4. Redact the content of each of their versions (sha256 recomputed over the redacted text,
       deletions stay deletions), and write the audit record in the same transaction.
    """
    if not paths:
        raise MemoryFileError("invalid_paths", "Error: Name at least one path to redact.", field="paths")
    wanted = [path_normalize(p, field="paths") for p in paths]
    _lock_files(access)
    reach = versions_for_agent(agent=access.agent)
    if exact_scope and not every_scope:
        user_id, project_id, thread_id = access.scope
        reach = reach.filter(user_id=user_id, project_id=project_id, thread_id=thread_id)
    elif not every_scope:
        reach = versions_seen(access=access, branch=False)
    found: set[str] = set()
    for path in wanted:
        if path == MEMORY_ROOT:
            found.update(reach.values_list("path", flat=True).distinct())
        else:
            found.update(
                reach.filter(Q(path=path) | Q(path__startswith=path + "/")).values_list("path", flat=True).distinct()
            )
    frontier = set(found)
    while frontier:
        linked = reach.filter(Q(path__in=frontier) | Q(renamed_from__in=frontier)).values_list("path", "renamed_from")
        discovered = {p for pair in linked for p in pair if p} - found
        found |= discovered
        frontier = discovered
    versions = reach.filter(path__in=found, content__isnull=False).exclude(
        content=REDACTED_TEXT, redacted_at__isnull=False
    )
    count = versions.update(
        content=REDACTED_TEXT,
        sha256=sha256_of(REDACTED_TEXT),
        size=size_of(REDACTED_TEXT),
        redacted_at=timezone.now(),
    )
    audit_append(
        action="memory_files.redact",
        actor=access.actor,
        agent_id=access.agent.pk,
        thread_id=access.thread_id,
        subject=f"{len(found)} memory file path(s)",
        outcome="redacted" if count else "nothing_to_redact",
        details={
            "paths": sorted(found),
            "versions": count,
            "reason": reason[:200],
            "every_scope": every_scope,
            "exact_scope": exact_scope,
            "scope": {"user_id": access.user_id, "project_id": access.project_id, "thread_id": access.thread_id},
        },
    )
    return RedactionReport(paths=sorted(found), versions=count)
