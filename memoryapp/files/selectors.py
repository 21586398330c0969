"""Reads of memory files. `versions_for_agent` is the one way in: every query starts there."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet

from governance.crypto.keyring import encryption_enabled
from memoryapp.content import REDACTED_TEXT
from memoryapp.files.access import FileAccess, scope_narrowness
from memoryapp.files.paths import MEMORY_ROOT, path_ancestors, path_is_under
from memoryapp.models import Agent, Entry, MemoryFileVersion
from memoryapp.threads.branch import branch_sql


def versions_for_agent(*, agent: Agent) -> QuerySet[MemoryFileVersion]:
    """Every version of one agent's files: all other reads narrow this one."""
    return MemoryFileVersion.objects.filter(agent=agent)


def versions_unredacted(versions: QuerySet[MemoryFileVersion]) -> QuerySet[MemoryFileVersion]:
    """The versions among these a redaction still has to change: not deletions, not already
    saying [redacted]. A redaction sets the redacted text and `redacted_at` together; with
    encryption on the content is sealed (it never compares in the database), so the mark alone
    says it."""
    versions = versions.filter(content__isnull=False)
    if encryption_enabled():
        return versions.exclude(redacted_at__isnull=False)
    return versions.exclude(content=REDACTED_TEXT, redacted_at__isnull=False)


def entry_ancestor_ids(*, entry: Entry) -> list[str]:
    """The entry and every entry above it on its branch."""
    with connection.cursor() as cursor:
        cursor.execute(branch_sql("SELECT id FROM branch"), {"start": entry.pk, "thread": entry.thread_id})
        return [row[0] for row in cursor.fetchall()]


def versions_seen(*, access: FileAccess, branch: bool = True) -> QuerySet[MemoryFileVersion]:
    """The versions of the scopes `access` reads; with `branch`, only those on its place's branch.

    A version written after an entry of the access's thread is seen only from places that hold
    that entry; versions written without a place, or in other threads, are seen everywhere.
    """
    versions = versions_for_agent(agent=access.agent).filter(access.scopes_seen())
    if branch and access.place is not None:
        on_branch = entry_ancestor_ids(entry=access.place)
        versions = versions.filter(
            Q(place__isnull=True) | ~Q(place__thread_id=access.place.thread_id) | Q(place_id__in=on_branch)
        )
    return versions


@dataclass
class Snapshot:
    """The files an access sees at one moment: for each path, the head of the narrowest scope.

    Heads are loaded without their content; `content()` reads the one a command needs.
    """

    files: dict[str, MemoryFileVersion]
    directories: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.directories = {MEMORY_ROOT}
        for path in self.files:
            self.directories.update(path_ancestors(path))

    def file(self, path: str) -> MemoryFileVersion | None:
        return self.files.get(path)

    def is_directory(self, path: str) -> bool:
        return path in self.directories

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.directories

    def files_under(self, directory: str) -> list[MemoryFileVersion]:
        if directory == MEMORY_ROOT:
            return [self.files[p] for p in sorted(self.files)]
        return [self.files[p] for p in sorted(self.files) if path_is_under(p, directory)]

    def file_above(self, path: str) -> str | None:
        """The nearest file standing where a directory above `path` would be, if any."""
        for ancestor in reversed(path_ancestors(path)):
            if ancestor in self.files:
                return ancestor
        return None


def version_content(version: MemoryFileVersion) -> str | None:
    """The content of a version loaded without it (one query), or the one already loaded."""
    if "content" in version.get_deferred_fields():
        version.content = versions_for_agent(agent=version.agent).values_list("content", flat=True).get(pk=version.pk)
    return version.content


def file_heads(*, access: FileAccess, under: str = MEMORY_ROOT, with_content: bool = False) -> Snapshot:
    """The files `access` sees (deleted ones left out), optionally only at or under `under`.

    1. The newest version of every (scope, path) the access reads: DISTINCT ON over the head index.
    2. For each path, the head of the narrowest scope wins, a deletion included: a deletion in the
       access's own scope hides the file of a wider scope.
    3. Deletions are dropped; what is left is the files that stand.
    """
    versions = versions_seen(access=access)
    if under != MEMORY_ROOT:
        versions = versions.filter(path_under_q(under))
    heads = heads_of(versions)
    if not with_content:
        heads = heads.defer("content")
    return snapshot_of(heads)


def path_under_q(under: str) -> Q:
    """The versions of `under` and of every path under it."""
    return Q(path=under) | Q(path__startswith=under + "/")


def heads_of(versions: QuerySet[MemoryFileVersion]) -> QuerySet[MemoryFileVersion]:
    """The newest version of every (scope, path) among `versions` (DISTINCT ON over the head
    index), scope by scope and path by path, each marked `is_deletion`."""
    return (
        versions.annotate(is_deletion=ExpressionWrapper(Q(content__isnull=True), output_field=BooleanField()))
        .order_by("user_id", "project_id", "thread_id", "path", "-sequence")
        .distinct("user_id", "project_id", "thread_id", "path")
    )


def snapshot_of(heads: Iterable[MemoryFileVersion]) -> Snapshot:
    """Steps 2 and 3 of `file_heads` over its heads (in `heads_of`'s order)."""
    narrowest: dict[str, MemoryFileVersion] = {}
    for head in heads:
        standing = narrowest.get(head.path)
        if standing is None or scope_narrowness(head.user_id, head.project_id, head.thread_id) > scope_narrowness(
            standing.user_id, standing.project_id, standing.thread_id
        ):
            narrowest[head.path] = head
    return Snapshot(files={path: head for path, head in narrowest.items() if not head.is_deletion})  # type: ignore[attr-defined]


def file_history(*, access: FileAccess, path: str) -> list[MemoryFileVersion]:
    """Every version of `path` the access reads, deletions and renames included, oldest first."""
    return list(versions_seen(access=access).filter(path=path).order_by("created_at", "sequence", "id"))


def version_for_agent(*, agent: Agent, version_id: str) -> MemoryFileVersion | None:
    return versions_for_agent(agent=agent).filter(pk=version_id).first()
