"""The heads of a context's memory files (its context documents and the observations its scope sees)
are read by a statement compiled once per process for each shape of the thread's scope (issue 26).
Every test compares the heads with those the ORM's queryset reads (the read before) on the same
files: documents and observations of every scope, a later version, a deletion, a redaction, files
of another agent at the same paths, with encryption off and on."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.consolidation.observations import OBSERVATIONS_DIRECTORY, observations_q
from memoryapp.context.builder import context_memory_heads
from memoryapp.files.access import FileAccess
from memoryapp.files.context_documents import CONTEXT_ROOT, context_document_scopes, context_documents_q
from memoryapp.files.selectors import heads_of, versions_for_agent
from memoryapp.files.services import file_put, versions_redact
from memoryapp.items.selectors import thread_context_scope
from memoryapp.models import Agent, MemoryFileVersion, Thread
from tests.kit.api import build_context
from tests.kit.crypto import encrypted  # noqa: F401  (fixture)
from tests.kit.factories import ThreadFactory

SCOPES = [
    ("", "", ""),
    ("", "p-rome", ""),
    ("", "p-oslo", ""),
    ("", "", "t-trip"),
    ("", "", "t-other"),
    ("u-ana", "", ""),
    ("u-ana", "p-rome", "t-trip"),
    ("u-ben", "", ""),
]


def _files(agent: Agent, word: str) -> None:
    """A document and an observation in each scope, a second version of some, a deletion (a version
    without content) and a redaction."""
    for user, project, thread in SCOPES:
        access = FileAccess(agent=agent, user_id=user, project_id=project, thread_id=thread, reserved=())
        where = f"{user}/{project}/{thread}"
        file_put(access=access, path=f"{CONTEXT_ROOT}/AGENTS.md", text=f"{word}: rules of {where}")
        file_put(access=access, path=f"{OBSERVATIONS_DIRECTORY}/ana.md", text=f"{word}: Ana seen in {where}")
        file_put(access=access, path="/memories/notes.md", text=f"{word}: notes of {where}")
        if project == "p-rome":
            file_put(access=access, path=f"{CONTEXT_ROOT}/AGENTS.md", text=f"{word}: new rules of {where}")
    gone = MemoryFileVersion.objects.get(
        agent=agent, path=f"{CONTEXT_ROOT}/AGENTS.md", user_id="", project_id="", thread_id="t-trip"
    )
    MemoryFileVersion.objects.create(
        agent=agent,
        user_id=gone.user_id,
        project_id=gone.project_id,
        thread_id=gone.thread_id,
        path=gone.path,
        sequence=gone.sequence + 1,
        content=None,
        sha256="",
        size=0,
        previous=gone,
    )
    versions_redact(
        MemoryFileVersion.objects.filter(agent=agent, path=f"{OBSERVATIONS_DIRECTORY}/ana.md", user_id="u-ana")
    )


def _heads_before(agent: Agent, thread: Thread, project_id: str) -> list[MemoryFileVersion]:
    """The read before issue 26: the ORM's queryset, compiled on every build."""
    scopes = context_document_scopes(thread_id=thread.external_id, project_id=project_id)
    return list(
        heads_of(
            versions_for_agent(agent=agent).filter(
                context_documents_q(scopes) | observations_q(agent=agent, scope=thread_context_scope(thread))
            )
        )
    )


def _seen(heads: list[MemoryFileVersion]) -> list[tuple[Any, ...]]:
    fields = ("pk", "agent_id", "user_id", "project_id", "thread_id", "path", "sequence", "content", "redacted_at")
    return [tuple(getattr(h, name) for name in (*fields, "is_deletion")) for h in heads]


def _same_heads_as_the_orm(alice: Any, mallory: Any) -> None:
    _files(alice.agent, "alice")
    _files(mallory.agent, "mallory")
    threads = [
        ThreadFactory(agent=alice.agent, external_id="t-trip", user_id="u-ana", metadata={"project_id": "p-rome"}),
        ThreadFactory(agent=alice.agent, external_id="t-other", user_id=""),
        ThreadFactory(agent=alice.agent, external_id="t-new", user_id="u-ben"),
    ]
    shapes = set()
    for thread in threads:
        for project_id in ("", "p-rome", "p-oslo"):
            heads = context_memory_heads(agent=alice.agent, thread=thread, project_id=project_id)
            before = _heads_before(alice.agent, thread, project_id)
            assert _seen(heads) == _seen(before)
            assert heads and {h.agent_id for h in heads} == {alice.agent.pk}
            assert all(not (h.content or "").startswith("mallory") for h in heads)
            shapes.add((bool(thread.user_id), bool(thread.project_scope), bool(project_id)))
    assert len(shapes) == 6
    # The deletion and the redaction are heads as before (the builder leaves both out).
    trip = context_memory_heads(agent=alice.agent, thread=threads[0], project_id="")
    assert any(h.is_deletion for h in trip)  # type: ignore[attr-defined]
    assert any(h.redacted_at is not None for h in trip)


def test_the_heads_are_those_the_orm_reads_for_every_shape_of_scope(alice: Any, mallory: Any) -> None:
    _same_heads_as_the_orm(alice, mallory)


@pytest.mark.usefixtures("encrypted")  # before the database's fixtures: torn down after them
def test_with_encryption_on_the_heads_open_as_the_orm_opens_them(alice: Any, mallory: Any) -> None:
    _same_heads_as_the_orm(alice, mallory)


def test_a_build_places_the_documents_of_its_scopes_nearest_first(alice: Any, mallory: Any) -> None:
    _files(alice.agent, "alice")
    _files(mallory.agent, "mallory")
    ThreadFactory(agent=alice.agent, external_id="t-trip", user_id="u-ana", metadata={"project_id": "p-rome"})
    built = build_context(alice, thread_id="t-trip", max_tokens=3000, current_input="Ana?")
    system = built["messages"][0]["content"]
    # The thread's own document was deleted: the project's (its second version), then the agent's.
    assert system.index("alice: new rules of /p-rome/") < system.index("alice: rules of //")
    assert "t-trip" not in system and "mallory" not in system and "p-oslo" not in system
