"""Who reads and writes memory files, and where."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from memoryapp.errors import DomainError, NotFound
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_RESERVED_PATHS
from memoryapp.ids import person_id_check
from memoryapp.models import Agent, Entry
from memoryapp.models.choices import FileAuthor

MAX_SCOPE_CHARS = 128
# An agent may say who wrote a change; "memory" is for the service's own jobs.
AGENT_AUTHORS = (FileAuthor.MODEL, FileAuthor.USER, FileAuthor.SYSTEM)


@dataclass(frozen=True)
class FileAccess:
    """An agent's view of its memory files in one scope.

    It reads the files of its scope and of every wider one (agent-wide, then the person, the
    project, the thread), each path from the narrowest scope that holds it, and writes into its
    own scope. `place` is the entry a change is written after: a version written with a place in
    a thread is seen, from a place in that thread, only on the branches holding that entry.
    """

    agent: Agent
    user_id: str = ""
    project_id: str = ""
    thread_id: str = ""
    read_only: bool = False
    reserved: tuple[str, ...] = MEMORY_RESERVED_PATHS
    author: str = FileAuthor.MODEL
    place: Entry | None = None
    # Who acts, for the audit trail ("agent:<slug>", "staff:<name>", "job:<kind>").
    actor: str = ""

    @property
    def scope(self) -> tuple[str, str, str]:
        return (self.user_id, self.project_id, self.thread_id)

    def scopes_seen(self) -> Q:
        """The scopes this access reads: each limit either unset ("") or its own."""
        return Q(
            agent=self.agent,
            user_id__in=sorted({"", self.user_id}),
            project_id__in=sorted({"", self.project_id}),
            thread_id__in=sorted({"", self.thread_id}),
        )

    def describe(self) -> str:
        limits = [
            f"{name}={value}" for name, value in zip(("user", "project", "thread"), self.scope, strict=True) if value
        ]
        return ", ".join(limits) or "agent-wide"


def scope_narrowness(user_id: str, project_id: str, thread_id: str) -> tuple[bool, bool, bool]:
    """Orders scopes from wide to narrow: agent-wide < person < project < thread, limits adding up."""
    return (bool(thread_id), bool(project_id), bool(user_id))


def scope_value_check(name: str, value: str) -> str:
    """A scope limit (user_id, project_id, thread_id) as a caller gives it: at most 128 printable characters."""
    if name == "user_id":
        try:
            return person_id_check(value, field=name)
        except DomainError as exc:
            raise MemoryFileError("invalid_scope", f"Error: {exc.message}", field=name) from exc
    if len(value) > MAX_SCOPE_CHARS or any(not ch.isprintable() for ch in value):
        raise MemoryFileError(
            "invalid_scope", f"Error: `{name}` must be at most {MAX_SCOPE_CHARS} printable characters.", field=name
        )
    return value


def file_access_for(
    *,
    agent: Agent,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    read_only: bool = False,
    author: str = FileAuthor.MODEL,
    place_id: str = "",
    actor: str = "",
) -> FileAccess:
    """The access an agent's caller asks for (the REST API's query string, an MCP connection's URL).

    The limits are checked, the author must be one an agent may name, and the place must be an
    entry of this agent (and of the thread, when one is named): another agent's answers 404.
    """
    for name, value in (("user_id", user_id), ("project_id", project_id), ("thread_id", thread_id)):
        scope_value_check(name, value)
    if author not in AGENT_AUTHORS:
        raise MemoryFileError(
            "invalid_value", f"Error: `author` must be one of: {', '.join(AGENT_AUTHORS)}.", field="author"
        )
    place = None
    if place_id:
        place = Entry.objects.filter(agent=agent, pk=place_id).select_related("thread").first()
        if place is None or (thread_id and place.thread.external_id != thread_id):
            raise NotFound("The place entry", field="place")
    return FileAccess(
        agent=agent,
        read_only=read_only,
        author=author,
        place=place,
        actor=actor or f"agent:{agent.slug}",
        user_id=user_id,
        project_id=project_id,
        thread_id=thread_id,
    )
