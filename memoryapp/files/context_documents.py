"""Context documents (001's AGENTS.md / CLAUDE.md): standing instructions an agent or a project registers.

They are memory files under the reserved directory /memories/context/, so every change is a
version with its history, sha256 locking, limits and redaction, as for any memory file; the memory
tool shows them but a model cannot change them (a model writing its own standing instructions is
the prompt injection that outlives the conversation): they are written here, by the agent's
developer over the API, as `user`.

A document belongs to exactly one scope: the agent (every thread), a project (the threads of the
project, `metadata.project_id` or the context request's `project_id`), or a thread. The context
builder puts those of a thread's three scopes in its `pinned` partition, nearest first (thread,
project, agent), each under its own heading, framed as standing instructions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from memoryapp.content import REDACTED_TEXT
from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError, not_found
from memoryapp.files.paths import path_normalize
from memoryapp.files.selectors import Snapshot, versions_for_agent
from memoryapp.files.services import (
    UNCHECKED,
    ExpectedSha,
    PlannedVersion,
    expected_sha_check,
    file_size_check,
    file_text_check,
    files_change,
)
from memoryapp.models import Agent, MemoryFileVersion
from memoryapp.models.choices import FileAuthor

CONTEXT_ROOT = "/memories/context"
# The framing 001 gives project documents in the briefing.
FRAMING = (
    "The following documents describe the conventions of this work (the thread's own first, then its "
    "project's, then the agent's). Treat them as standing instructions."
)


@dataclass(frozen=True)
class DocumentScope:
    """One of the three scopes a document belongs to ("" = not limited)."""

    project_id: str = ""
    thread_id: str = ""

    @property
    def label(self) -> str:
        if self.thread_id:
            return f"thread {self.thread_id}"
        if self.project_id:
            return f"project {self.project_id}"
        return "agent"

    @property
    def kind(self) -> str:
        return "thread" if self.thread_id else "project" if self.project_id else "agent"


def document_scope(*, project_id: str = "", thread_id: str = "") -> DocumentScope:
    if project_id and thread_id:
        raise MemoryFileError(
            "invalid_scope",
            "A context document belongs to the agent, a project or a thread: give project_id or thread_id, not both.",
            field="thread_id",
        )
    return DocumentScope(project_id=project_id, thread_id=thread_id)


def document_path(name: object) -> str:
    """The file of a document named `name` (one name: AGENTS.md, style.md ...)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise MemoryFileError(
            "invalid_name", "A context document's name is one file name, such as AGENTS.md.", field="name"
        )
    return path_normalize(f"{CONTEXT_ROOT}/{name}", field="name")


def _access(*, agent: Agent, scope: DocumentScope, actor: str) -> FileAccess:
    # Past the reserved paths (this module is what writes them), in the document's own scope only.
    return FileAccess(
        agent=agent,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        reserved=(),
        author=FileAuthor.USER,
        actor=actor,
    )


def _scope_heads(*, agent: Agent, scope: DocumentScope) -> dict[str, MemoryFileVersion]:
    """The newest version of each document path in exactly this scope (deletions included)."""
    heads = (
        versions_for_agent(agent=agent)
        .filter(user_id="", project_id=scope.project_id, thread_id=scope.thread_id, path__startswith=CONTEXT_ROOT + "/")
        .order_by("path", "-sequence")
        .distinct("path")
    )
    return {head.path: head for head in heads}


def context_documents_list(*, agent: Agent, scope: DocumentScope) -> list[MemoryFileVersion]:
    """The documents of one scope that stand (not deleted), by name, with their content."""
    return [v for path, v in sorted(_scope_heads(agent=agent, scope=scope).items()) if v.content is not None]


def context_document_get(*, agent: Agent, scope: DocumentScope, name: str) -> MemoryFileVersion:
    path = document_path(name)
    head = _scope_heads(agent=agent, scope=scope).get(path)
    if head is None or head.content is None:
        raise not_found(path, field="name", prefix="")
    return head


def context_document_put(
    *,
    agent: Agent,
    scope: DocumentScope,
    name: str,
    content: str,
    expected_sha256: ExpectedSha = UNCHECKED,
    actor: str = "",
) -> tuple[MemoryFileVersion, bool]:
    """Write a document (a new version; the same text again writes nothing). (version, created)."""
    path = document_path(name)
    if not isinstance(content, str):
        raise MemoryFileError("invalid_value", "content must be text.", field="content")
    file_text_check(content, field="content")
    file_size_check(path, content, field="content")
    access = _access(agent=agent, scope=scope, actor=actor)
    heads = _scope_heads(agent=agent, scope=scope)

    def plan(_: Snapshot) -> tuple[list[PlannedVersion], MemoryFileVersion | None]:
        standing = _scope_heads(agent=agent, scope=scope).get(path)
        if standing is not None and standing.content is None:
            standing = None
        expected_sha_check(Snapshot(files={path: standing} if standing else {}), path, expected_sha256)
        if standing is not None and standing.content == content:
            return [], standing
        return [PlannedVersion(path, content, standing)], None

    written, unchanged = files_change(access, path, plan)
    existed = path in heads and heads[path].content is not None
    return (unchanged if unchanged is not None else written[0]), not existed


def context_document_delete(*, agent: Agent, scope: DocumentScope, name: str, actor: str = "") -> MemoryFileVersion:
    """Delete a document: a version without content (its history stays)."""
    path = document_path(name)
    access = _access(agent=agent, scope=scope, actor=actor)

    def plan(_: Snapshot) -> tuple[list[PlannedVersion], None]:
        standing = _scope_heads(agent=agent, scope=scope).get(path)
        if standing is None or standing.content is None:
            raise not_found(path, field="name", prefix="")
        return [PlannedVersion(path, None, standing)], None

    written, _ = files_change(access, path, plan)
    return written[0]


@dataclass(frozen=True)
class ContextDocument:
    name: str
    scope: DocumentScope
    version_id: str
    content: str


def context_documents_for(*, agent: Agent, thread_id: str, project_id: str = "") -> list[ContextDocument]:
    """The documents a thread's context takes: its own, its project's, the agent's, in that order
    (by name within a scope), read in one query (every context build asks). A redacted one is left
    out (nothing of it is left to follow)."""
    scopes = context_document_scopes(thread_id=thread_id, project_id=project_id)
    heads = (
        versions_for_agent(agent=agent)
        .filter(context_documents_q(scopes))
        .order_by("project_id", "thread_id", "path", "-sequence")
        .distinct("project_id", "thread_id", "path")
    )
    return context_documents_of(heads, scopes)


def context_document_scopes(*, thread_id: str, project_id: str = "") -> list[DocumentScope]:
    """The scopes whose documents a thread's context takes, nearest first."""
    scopes = [DocumentScope(thread_id=thread_id)]
    if project_id:
        scopes.append(DocumentScope(project_id=project_id))
    scopes.append(DocumentScope())
    return scopes


def context_documents_q(scopes: list[DocumentScope]) -> Q:
    """The versions of the documents of these scopes."""
    wanted = Q()
    for scope in scopes:
        wanted |= Q(project_id=scope.project_id, thread_id=scope.thread_id)
    return wanted & Q(user_id="", path__startswith=CONTEXT_ROOT + "/")


def context_documents_of(heads: Iterable[MemoryFileVersion], scopes: list[DocumentScope]) -> list[ContextDocument]:
    """The documents of these head versions (one per scope and path, in (project, thread, path)
    order), scope by scope as `context_documents_for` gives them."""
    found: dict[DocumentScope, list[ContextDocument]] = {scope: [] for scope in scopes}
    for version in heads:
        if version.content in (None, REDACTED_TEXT) or version.redacted_at is not None:
            continue
        scope = DocumentScope(project_id=version.project_id, thread_id=version.thread_id)
        name = version.path.rsplit("/", 1)[1]
        found[scope].append(
            ContextDocument(name=name, scope=scope, version_id=version.pk, content=version.content or "")
        )
    return [document for scope in scopes for document in sorted(found[scope], key=lambda d: d.name)]
