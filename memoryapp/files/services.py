"""Writes of memory files: versioned changes under the agent's file lock, whole-file writes, redaction.

The memory tool's commands (`files.protocol`) make their changes here. Every change adds versions and overwrites nothing: an edit is a new version, a deletion a
version without content, a rename a deletion at the old path and a version at the new one
that records where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from governance import locks
from governance.audit.chain import audit_append
from governance.crypto.fields import sealed_update
from memoryapp.content import REDACTED_TEXT
from memoryapp.errors import Conflict
from memoryapp.events.services import event_record
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError, changed_since_read, concurrent_change
from memoryapp.files.paths import (
    MAX_CHANGE_BYTES,
    MAX_FILE_BYTES,
    MEMORY_ROOT,
    path_is_reserved,
    path_normalize,
)
from memoryapp.files.selectors import (
    Snapshot,
    file_heads,
    version_content,
    versions_for_agent,
    versions_seen,
    versions_unredacted,
)
from memoryapp.files.text import (
    human_size,
    sha256_of,
    size_of,
)
from memoryapp.items.services import versions_quotes_forget
from memoryapp.models import Agent, MemoryFileVersion, SubjectMention
from memoryapp.models.choices import FileAuthor
from memoryapp.screening.screen import screener_for
from memoryapp.subjects.detect import Written, key_people_set, mentions_record, rows_named
from memoryapp.subjects.erasing import senders_erasing_refuse

# A writer that loses the race for a version number makes its change again on what stands.
MAX_TRIES = 3
_UNIQUE_VERSION = "file_version_scope_path_seq_uniq"

T = TypeVar("T")


class Unchecked:
    """The `expected_sha256` of a write that does not care which version it replaces."""

    def __repr__(self) -> str:
        return "UNCHECKED"


UNCHECKED = Unchecked()
# The sha256 a caller last read; None: the file must not exist; UNCHECKED: any version.
ExpectedSha = str | Unchecked | None
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def expected_sha_parse(value: object) -> ExpectedSha:
    """The `expected_sha256` a caller sent beside a memory tool command (absent: UNCHECKED)."""
    if value is None:
        return UNCHECKED
    if not isinstance(value, str) or not _SHA256.match(value):
        raise MemoryFileError(
            "invalid_value",
            "Error: `expected_sha256` must be the 64 lowercase hex digits of the sha256 you last read.",
            field="expected_sha256",
        )
    return value


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


def paths_writable_check(access: FileAccess, *paths: str) -> None:
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


def file_text_check(text: str, *, field: str) -> None:
    if "\x00" in text:
        raise MemoryFileError(
            "invalid_text", f"Error: Parameter `{field}` must not contain NUL characters.", field=field
        )


def file_size_check(path: str, text: str, *, field: str | None = None) -> None:
    size = size_of(text)
    if size > MAX_FILE_BYTES:
        raise MemoryFileError(
            "file_too_large",
            f"Error: The file {path} would hold {size:,} bytes; a memory file holds at most 1 MiB ({MAX_FILE_BYTES:,} bytes).",
            field=field,
            status=413,
        )


def expected_sha_check(snapshot: Snapshot, path: str, expected_sha256: ExpectedSha) -> None:
    """Optimistic locking: the file must still be the version the caller read (None: must not exist)."""
    if isinstance(expected_sha256, Unchecked):
        return
    standing = snapshot.file(path)
    if expected_sha256 is None:
        if standing is not None:
            raise changed_since_read(path)
    elif standing is None or standing.sha256 != expected_sha256:
        raise changed_since_read(path)


def file_place_check(snapshot: Snapshot, path: str) -> None:
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


def files_lock(access: FileAccess) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", locks.pair(locks.MEMORY_FILES, access.agent.pk))


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
    screener = screener_for(agent=access.agent)
    if screener is not None:
        # A memory file has no review path: a category to hold is refused like one to refuse.
        planned = [
            replace(p, content=screener.text(p.content, field="content", holdable=False)) if p.content else p
            for p in planned
        ]
    for version in planned:
        if version.content is not None:
            file_text_check(version.content, field="content")
            file_size_check(version.path, version.content)
    user_id, project_id, thread_id = access.scope
    if user_id and any(p.content is not None for p in planned):
        # A file of a person being erased is refused (409), as an item of her scope is: her erasure
        # took the files of her scope at one step, and a version written after it would outlive it,
        # sealed under her destroyed key (memoryapp.subjects.erasing, step 5). A deletion says nothing.
        _scope_erasing_refuse(access)
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
    versions: list[Written] = [(SubjectMention.Table.FILE_VERSION, v.pk, v) for v in rows if v.content is not None]
    # A version naming registered people besides its scope's person (a project file naming one) is
    # sealed under their keys too (MemoryFileVersion.key_people).
    named = rows_named(agent=access.agent, rows=versions)
    for row in rows:
        if row.pk in named:
            key_people_set(row, named[row.pk], owner_person=user_id or row.scope_person())
    written = MemoryFileVersion.objects.bulk_create(rows)
    mentions_record(agent=access.agent, rows=versions, named=named)
    event_record(agent_id=access.agent.pk, type="file.version", thread_id=thread_id, ids=[v.pk for v in written])
    audit_append(
        action="memory_file.written",
        actor=access.actor,
        agent_id=access.agent.pk,
        thread_id=thread_id,
        subject=str(written[0].pk) if len(written) == 1 else f"{len(written)} versions",
        outcome=_change_kind(planned),
        # Version ids and counts: a path says what a file is about, so it stays on the version.
        details={
            "version_ids": [v.pk for v in written],
            "bytes": written_bytes,
            "scope": {"user_id": user_id, "project_id": project_id, "thread_id": thread_id},
        },
        person=user_id,
    )
    if screener is not None:
        screener.record(actor=access.actor, thread_id=thread_id, person=user_id)
    return written


def _change_kind(planned: list[PlannedVersion]) -> str:
    if any(p.renamed_from for p in planned):
        return "renamed"
    if all(p.content is None for p in planned):
        return "deleted"
    if any(p.follows is None for p in planned):
        return "created"
    return "changed"


def _scope_erasing_refuse(access: FileAccess) -> None:
    """The refusal of a version in the scope of a person being erased (`_write_versions`), as the
    memory tool refuses a command: 409 `person_being_erased`, field `user_id`, its text `Error: ...`
    (the `result` of the REST answer, the MCP tool's error text) rather than a JSON body the model
    reads as an unknown error. Else her eraser lock is held shared to the change's end."""
    try:
        senders_erasing_refuse(agent_id=access.agent.pk, senders={access.user_id: "user_id"}, what="memory file")
    except Conflict as refused:
        raise MemoryFileError(refused.code, f"Error: {refused.message}", field=refused.field, status=409) from refused


def files_change(
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
                files_lock(access)
                planned, outcome = plan(file_heads(access=access))
                written = _write_versions(access, planned) if planned else []
                return written, outcome
        except IntegrityError as error:
            if not _is_version_race(error):
                raise
    raise concurrent_change(around)


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
    paths_writable_check(access, path)
    file_text_check(text, field="text")
    file_size_check(path, text, field="text")

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], MemoryFileVersion | None]:
        expected_sha_check(snapshot, path, expected_sha256)
        standing = snapshot.file(path)
        if standing is None:
            file_place_check(snapshot, path)
        elif standing.sha256 == sha256_of(text):
            return [], standing
        return [PlannedVersion(path, text, standing)], None

    written, unchanged = files_change(access, path, plan)
    return unchanged if unchanged is not None else written[0]


def file_update(
    *, access: FileAccess, path: str, edit: Callable[[str | None], str | None]
) -> tuple[MemoryFileVersion | None, str | None]:
    """Read a file and write what `edit` makes of it, in one step no other writer comes between.

    `edit` gets the content that stands (None: no file) and returns the new text, or None to
    leave the file as it is. Answers (the version written or standing, its content).
    """
    path = path_normalize(path)
    paths_writable_check(access, path)

    def plan(snapshot: Snapshot) -> tuple[list[PlannedVersion], tuple[MemoryFileVersion | None, str | None]]:
        standing = snapshot.file(path)
        current = version_content(standing) if standing is not None else None
        edited = edit(current)
        if edited is None or edited == current:
            return [], (standing, current)
        file_text_check(edited, field="content")
        file_size_check(path, edited, field="content")
        if standing is None:
            file_place_check(snapshot, path)
        return [PlannedVersion(path, edited, standing)], (None, edited)

    written, (standing, content) = files_change(access, path, plan)
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


def redacted_heads_delete(*, agent: Agent, version_ids: list[str], actor: str = "") -> int:
    """Delete the files whose version in front is one of these redacted versions (004: a path may
    name what was forgotten, so it leaves the listing; its history keeps the redacted versions).
    Call inside the redaction's transaction, the agent's file lock held. Returns the files deleted."""
    if not version_ids:
        return 0
    scopes = sorted(
        set(
            MemoryFileVersion.objects.filter(agent=agent, pk__in=version_ids).values_list(
                "user_id", "project_id", "thread_id", "path"
            )
        )
    )
    deleted = 0
    by_scope: dict[tuple[str, str, str], list[str]] = {}
    for user_id, project_id, thread_id, path in scopes:
        by_scope.setdefault((user_id, project_id, thread_id), []).append(path)
    for (user_id, project_id, thread_id), paths in by_scope.items():
        heads: dict[str, MemoryFileVersion] = {}
        for version in (
            MemoryFileVersion.objects.filter(
                agent=agent, user_id=user_id, project_id=project_id, thread_id=thread_id, path__in=paths
            )
            .order_by("path", "-sequence")
            .only("id", "path", "sequence", "content", "redacted_at")
        ):
            heads.setdefault(version.path, version)
        doomed = [v for v in heads.values() if v.content is not None and v.redacted_at is not None]
        if doomed:
            access = FileAccess(
                agent=agent,
                user_id=user_id,
                project_id=project_id,
                thread_id=thread_id,
                reserved=(),
                author=FileAuthor.SYSTEM,
                actor=actor,
            )
            _write_versions(access, [PlannedVersion(v.path, None, v) for v in sorted(doomed, key=lambda v: v.path)])
            deleted += len(doomed)
    return deleted


def versions_redact(versions: QuerySet[MemoryFileVersion], *, reason: str = "") -> int:
    """Replace the content of these versions with [redacted] (its sha256 and size with it), and keep
    the `reason` given on them, sealed under each version's person's key when encryption is on; the
    number of versions changed. The quotes items took of their lines go as a redacted entry's do
    (memoryapp.items.services.quotes_forget): an item left with no quote is purged, and so do the
    versions' rows of the subject index ([redacted] names no one; the trigger of migration 0055
    sees deletes only)."""
    ids = [str(pk) for pk in versions.values_list("pk", flat=True)]
    versions_quotes_forget(version_ids=ids)
    SubjectMention.objects.filter(table=SubjectMention.Table.FILE_VERSION, row_id__in=ids).delete()
    return sealed_update(
        versions,
        content=REDACTED_TEXT,
        sha256=sha256_of(REDACTED_TEXT),
        size=size_of(REDACTED_TEXT),
        redacted_at=timezone.now(),
        redaction_reason=reason,
    )


# As long as an entry's redaction reason may be (memoryapp.forgetting.services.entries_redact).
MAX_REDACTION_REASON = 500


def _reason_check(reason: object) -> str:
    if not isinstance(reason, str):
        raise MemoryFileError("invalid_type", "Error: reason must be a string.", field="reason")
    if len(reason) > MAX_REDACTION_REASON:
        raise MemoryFileError(
            "too_long", f"Error: reason is longer than {MAX_REDACTION_REASON} characters.", field="reason"
        )
    if "\x00" in reason:
        raise MemoryFileError("invalid_value", "Error: reason contains a NUL character.", field="reason")
    return reason.strip()


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
       deletions stay deletions), the reason given kept on each (`redaction_reason`), and write the
       audit record in the same transaction (whether a reason was given, never its words).
    """
    if not paths:
        raise MemoryFileError("invalid_paths", "Error: Name at least one path to redact.", field="paths")
    wanted = [path_normalize(p, field="paths") for p in paths]
    reason = _reason_check(reason)
    files_lock(access)
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
    versions = versions_unredacted(reach.filter(path__in=found))
    redacted_ids = list(versions.order_by("pk").values_list("pk", flat=True))
    count = versions_redact(versions, reason=reason)
    if redacted_ids:
        event_record(agent_id=access.agent.pk, type="file.redacted", thread_id=access.thread_id, ids=redacted_ids)
    deleted = redacted_heads_delete(agent=access.agent, version_ids=redacted_ids, actor=access.actor)
    # Ids and counts only: a path, or the reason a person typed, may name what was forgotten.
    audit_append(
        action="memory_files.redact",
        actor=access.actor,
        agent_id=access.agent.pk,
        thread_id=access.thread_id,
        person=access.user_id,
        subject=f"{len(found)} memory file path(s)",
        outcome="redacted" if count else "nothing_to_redact",
        # Counts only: the paths name what the files are about and the reason is a person's words;
        # both stay on the versions (which erasure reaches), never in the chain.
        details={
            "paths": len(found),
            "versions": count,
            "version_ids": redacted_ids[:50],
            "files_deleted": deleted,
            "reason_given": bool(reason),
            "every_scope": every_scope,
            "exact_scope": exact_scope,
        },
    )
    return RedactionReport(paths=sorted(found), versions=count)
