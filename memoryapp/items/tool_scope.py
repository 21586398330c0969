"""The scope of a connection of the model's tools: the one check of every tool argument that names
a person, a namespace, a thread or a tool result's handle.

The configuration decides whose memory the model touches, not the model: an MCP connection's URL
(`/mcp/?user_id=&project_id=&thread_id=`) or the body of a REST memory tools call (`user_id`,
`project_id`, `thread_id`, `namespace`) names the scope, and what the model puts in a tool's
arguments stays inside it (issue 23: a connection of ben read and changed ana's facts through
`namespace`, and read and appended to ana's threads through `thread_id`). Out of scope answers as
missing does (`NotFound`), so the model learns nothing of what exists outside:

1. A namespace (facts): the person's own (`users/<user_id>` and inside it), the one the
   configuration named (and inside it), or a shared one (not under `users/`). Another person's,
   and `users` itself (a search is nested: it holds every person's), are not found.
2. A thread: the connection's, when it names one (the model may only repeat it); otherwise a
   thread of the connection's person or of no person, as memory files are seen (agent-wide and the
   person's). A thread of another person is not found, as a missing one is.
3. A tool result's handle (`read_result`): a tool result in a thread of (2); with a thread named,
   in that thread or one it was forked from (the fork holds copies of their turns). Not one that
   screening holds (it stays out of every context until a reviewer releases it).
4. A person named in an entry (`metadata.userId`, what a person's erasure follows): the
   connection's person only.
5. A project (`get_context`): the connection's, when it names one.
6. A channel session (`session_open`): of the connection's person only, and not from a connection
   named for one thread (a session opens a thread of its own, outside that scope).
7. A purpose (`?purpose=`, the REST memory tools' `purpose`): facts remembered are collected for it,
   and searches and contexts recall only memory of it or of none (memoryapp.items.purposes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memoryapp.errors import DomainError, NotFound
from memoryapp.items.facts import PERSON_PREFIX
from memoryapp.models import Agent, Entry, Thread
from memoryapp.models.choices import EntryType, Role

# How far a handle may lie up the connection's thread's forks (a fork of a fork of ...).
MAX_FORK_DEPTH = 32


@dataclass(frozen=True)
class ToolScope:
    """What a connection of the model's tools was opened for (see the module's docstring)."""

    agent: Agent
    user_id: str = ""
    project_id: str = ""
    thread_id: str = ""
    # The facts' namespace the configuration named (the REST memory tools' `namespace`).
    namespace: str = ""
    # The purpose of the run (checked against the agent's list by whoever opens the scope): facts
    # remembered are collected for it, searches and contexts recall only its memory or memory of none.
    purpose: str = ""

    # --- namespaces ---------------------------------------------------------------------------

    def fact_namespace(self, given: str = "") -> str:
        """The namespace a facts tool works in: the one given (checked), else the configuration's,
        else `users/<user_id>`. A DomainError (400, `user_id`) when none can be chosen."""
        chosen = given or self.namespace
        if not chosen:
            if not self.user_id:
                raise DomainError(
                    "invalid_value", "Give user_id (facts go to users/<user_id>) or a namespace.", field="user_id"
                )
            return f"{PERSON_PREFIX}/{self.user_id}"
        if given and not self.namespace_allowed(given):
            raise NotFound(f"Namespace {given}", field="namespace")
        return chosen

    def namespace_allowed(self, namespace: str) -> bool:
        segments = namespace.split("/")
        if segments[0] != PERSON_PREFIX:
            return True  # shared by every run of the agent
        if len(segments) >= 2 and self.user_id and segments[1] == self.user_id:
            return True
        configured = self.namespace
        return bool(configured) and (namespace == configured or namespace.startswith(configured + "/"))

    def purpose_for(self, given: str | None) -> str:
        """The purpose a context is built for: the connection's, which a tool may only repeat (a 400
        naming `purpose` otherwise), else the one given (checked by the builder)."""
        if self.purpose and given and given != self.purpose:
            raise DomainError(
                "invalid_value", "purpose must be the connection's purpose (or left out).", field="purpose"
            )
        return self.purpose or given or ""

    # --- threads and their tool results ------------------------------------------------------

    def thread_id_for(self, given: str | None) -> str:
        """The thread a tool works on: the one given, else the connection's (NotFound when the
        connection names another; a 400 naming `thread_id` when there is none)."""
        if self.thread_id and given and given != self.thread_id:
            raise NotFound("Thread", field="thread_id")
        thread_id = given or self.thread_id
        if not thread_id:
            raise DomainError(
                "invalid_value", "Give thread_id (or name one in the connection's URL).", field="thread_id"
            )
        return thread_id

    def thread(self, given: str | None) -> Thread:
        """The thread a tool works on, in scope; a missing one and one out of scope are the same
        NotFound."""
        # By agent first, as every agent query (threads.selectors.thread_for_agent reads it so too:
        # not imported, as threads stand below search, which stands on items).
        thread = Thread.objects.filter(agent=self.agent, external_id=self.thread_id_for(given)).first()
        if thread is None or not self.thread_allowed(thread):
            raise NotFound("Thread")
        return thread

    def thread_allowed(self, thread: Thread) -> bool:
        if thread.agent_id != self.agent.pk:
            return False
        if self.thread_id and thread.external_id != self.thread_id:
            return False
        if thread.user_id in ("", self.user_id):
            return True
        # No person named: the thread the configuration named is the scope, whoever it is about.
        return bool(self.thread_id) and not self.user_id

    def tool_result(self, handle: Any) -> Entry:
        """The tool result behind a cleared placeholder's handle, in scope (NotFound otherwise)."""
        if not isinstance(handle, str) or not handle:
            raise DomainError("invalid_value", "handle must be the id a cleared tool result names.", field="handle")
        # A turn screening holds waits for its reviewer out of every context: not read back either.
        entry = Entry.objects.select_related("thread").filter(agent=self.agent, id=handle, held_at__isnull=True).first()
        if entry is None:
            raise NotFound("Tool result", field="handle")
        is_result = entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL
        if not is_result or not self._holds_results_of(entry.thread):
            raise NotFound("Tool result", field="handle")
        return entry

    def _holds_results_of(self, thread: Thread) -> bool:
        if not self.thread_id:
            return self.thread_allowed(thread)
        here = Thread.objects.filter(agent=self.agent, external_id=self.thread_id).first()
        if here is None or not self.thread_allowed(here):
            return False
        # The connection's thread, or one it was forked from (whose turns it copied).
        for _ in range(MAX_FORK_DEPTH):
            if here.pk == thread.pk:
                return thread.user_id in ("", self.user_id) or not self.user_id
            if here.forked_from_id is None:
                return False
            here = Thread.objects.filter(pk=here.forked_from_id).first()
            if here is None:
                return False
        return False

    # --- people and projects ------------------------------------------------------------------

    def person_check(self, user_id: Any, *, field: str) -> None:
        """A person an argument names (who wrote a message) is the connection's person."""
        if user_id in (None, "") or user_id == self.user_id:
            return
        raise NotFound("Person", field=field)

    def session_person(self, given: Any = None) -> str:
        """The person a channel session is opened for: the connection's (a tool may only repeat it:
        another answers as missing). A 400 naming `user_id` when the connection names none, or
        naming `thread_id` when it is bound to one thread (the session's thread is another)."""
        self.person_check(given, field="user_id")
        if not self.user_id:
            raise DomainError("invalid_value", "Open sessions over a connection that names user_id.", field="user_id")
        if self.thread_id:
            raise DomainError(
                "invalid_value",
                "This connection is bound to one thread; a session opens a thread of its own.",
                field="thread_id",
            )
        return self.user_id

    def project_for(self, given: str | None) -> str | None:
        """The project a context is built for: the connection's, or the one given when it names none."""
        if self.project_id and given and given != self.project_id:
            raise NotFound("Project", field="project_id")
        return given or self.project_id or None
