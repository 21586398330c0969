"""Who reads and writes memory files, and where."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from memoryapp.files.paths import MEMORY_RESERVED_PATHS
from memoryapp.models import Agent, Entry
from memoryapp.models.choices import FileAuthor


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
