"""factory_boy factories of the domain's rows.

Each row is made the way the service makes it, so a factory never makes a row the service could
not: an agent by `agent_get_or_create` (audited), a thread by `thread_create`, an entry by
`entry_add` (its seq, parent, content hash and the thread's active leaf), an item by `item_write`
(merged, superseded, activated by trust, its quotes checked into evidence), a file version by
`file_put` (sequence, sha256, size, previous). Rows without such rules (an entity, a job run, a
staff user) are made as the model makes them.

The defaults are the fixed cast's world: thread `t-1` of the person `u-ana`, items about Ana.
"""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth.models import Group, Permission, User
from factory.django import DjangoModelFactory

from governance.models import JobRun
from memoryapp.agents.services import agent_get_or_create
from memoryapp.files.access import FileAccess
from memoryapp.files.services import file_put
from memoryapp.items.rules import normalized_name
from memoryapp.items.services import item_write
from memoryapp.models import Agent, Entity, Entry, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import entry_add, thread_create


class AgentFactory(DjangoModelFactory):
    """An agent, created as `agent_get_or_create` creates one (the same slug is the same agent)."""

    class Meta:
        model = Agent

    slug = factory.Sequence(lambda n: f"agent-{n}")
    name = ""

    @classmethod
    def _create(cls, model_class: type[Agent], *, slug: str, name: str) -> Agent:
        agent, _ = agent_get_or_create(slug=slug, name=name)
        return agent


class ThreadFactory(DjangoModelFactory):
    """A thread made by `thread_create` (the same id of the same agent is the same thread).

    `turns` adds entries through `entry_add`, in order: (role, text) pairs, or dicts of
    `entry_add`'s arguments.
    """

    class Meta:
        model = Thread
        # Saving again after the turns would move `updated_at`, which entries never do.
        skip_postgeneration_save = True

    agent = factory.SubFactory(AgentFactory)
    external_id = "t-1"
    user_id = "u-ana"
    metadata = None

    @classmethod
    def _create(cls, model_class: type[Thread], **fields: Any) -> Thread:
        return thread_create(**fields)

    @factory.post_generation
    def turns(thread: Thread, create: bool, extracted: list[Any] | None, **kwargs: Any) -> None:
        for turn in extracted or ():
            if isinstance(turn, dict):
                entry_add(thread=thread, **turn)
            else:
                role, text = turn
                entry_add(thread=thread, role=role, content=text)
        if extracted:
            thread.refresh_from_db()


def _default_content(entry: Any, n: int) -> str | None:
    if entry.type == "message":
        return f"turn {n}"
    if entry.type == "tool_result":
        return f"result {n}"
    return None  # an event carries its payload in `event`


class EntryFactory(DjangoModelFactory):
    """An entry added by `entry_add`: after the thread's active leaf (moving it), or under
    `parent_id`; `created_at` for a time in the past. Takes every argument of `entry_add`."""

    class Meta:
        model = Entry

    thread = factory.SubFactory(ThreadFactory)
    type = "message"
    role = factory.LazyAttribute(lambda entry: "user" if entry.type == "message" else "")
    content = factory.LazyAttributeSequence(_default_content)

    @classmethod
    def _create(cls, model_class: Any, *, thread: Thread, **fields: Any) -> Entry:  # `type` is a field here
        return entry_add(thread=thread, **fields)


def tool_round(thread: Thread, n: int, *, tool: str = "fetch_page", body: str | None = None) -> tuple[Entry, Entry]:
    """An assistant's tool call `c<n>` and its result (about 1,200 tokens of body by default)."""
    call = EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": f"c{n}", "name": tool, "arguments": {"page": n}}],
    )
    result = EntryFactory(
        thread=thread,
        type="tool_result",
        tool_call_id=f"c{n}",
        content=body if body is not None else f"PAGE-{n}-BODY " + "lorem ipsum " * 400,
    )
    return call, result


def tool_thread(agent: Agent, rounds: int = 4, external_id: str = "t-tools") -> Thread:
    """The acceptance check's thread: a user question, a tool call and its result, `rounds` times."""
    thread = ThreadFactory(agent=agent, external_id=external_id)
    for i in range(rounds):
        EntryFactory(thread=thread, role="user", content=f"look up page {i}")
        tool_round(thread, i)
    return thread


def rome_thread(agent: Agent) -> tuple[Thread, dict[str, Entry]]:
    """Thread `rome` of u-ana, a tree: q -> colosseum (the active leaf), q -> vatican -> more."""
    thread = ThreadFactory(agent=agent, external_id="rome")
    q = EntryFactory(thread=thread, role="user", content="Plan a day in Rome")
    colosseum = EntryFactory(thread=thread, role="assistant", content="Start at the Colosseum")
    vatican = EntryFactory(
        thread=thread, role="assistant", content="Start at the Vatican", parent_id=q.id, activate=False
    )
    more = EntryFactory(thread=thread, role="user", content="And lunch?", parent_id=vatican.id, activate=False)
    return thread, {"q": q, "colosseum": colosseum, "vatican": vatican, "more": more}


class MemoryItemFactory(DjangoModelFactory):
    """A statement written by `item_write`: merged into the item of the same value, superseding
    the slot's older states, active or suggested by its trust and quotes. `evidence` takes
    quotes as [{"entry_id", "quote"}], checked into Evidence rows. Without a `trust`, the
    system's word; without a scope, about u-ana."""

    class Meta:
        model = MemoryItem

    agent = factory.SubFactory(AgentFactory)
    kind = "fact"
    subject = "Ana"
    attribute = "diet"
    value = factory.Sequence(lambda n: f"value {n}")
    trust = "system"
    user_id = "u-ana"

    @classmethod
    def _create(cls, model_class: type[MemoryItem], **fields: Any) -> MemoryItem:
        return item_write(**fields)


class EntityFactory(DjangoModelFactory):
    """Who or what items are about, in a scope; matched on its name lower-cased, spacing collapsed."""

    class Meta:
        model = Entity

    agent = factory.SubFactory(AgentFactory)
    name = "Ana"
    normalized_name = factory.LazyAttribute(lambda entity: normalized_name(entity.name))
    user_id = ""


class MemoryFileVersionFactory(DjangoModelFactory):
    """A whole file written by `file_put` in the scope given (`user_id`, `project_id`,
    `thread_id`, a `place` entry), as `author`; paths memory keeps for itself included."""

    class Meta:
        model = MemoryFileVersion

    agent = factory.SubFactory(AgentFactory)
    path = factory.Sequence(lambda n: f"/memories/note-{n}.md")
    content = factory.Sequence(lambda n: f"note {n}\n")

    @classmethod
    def _create(
        cls, model_class: type[MemoryFileVersion], *, agent: Agent, path: str, content: str, **scope: Any
    ) -> MemoryFileVersion:
        return file_put(access=FileAccess(agent=agent, reserved=(), **scope), path=path, text=content)


class JobRunFactory(DjangoModelFactory):
    """A run of a background job as its bookkeeping stands (queued unless told)."""

    class Meta:
        model = JobRun

    kind = "test"


class StaffFactory(DjangoModelFactory):
    """A staff user of the admin, in role groups (`groups`: names of governance.staff.roles.ROLES) and
    holding single permissions (`permissions`: codenames). No usable password unless given one."""

    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"staffer-{n}")
    is_staff = True
    password = None

    @classmethod
    def _create(cls, model_class: type[User], *, username: str, password: str | None, **fields: Any) -> User:
        return model_class.objects.create_user(username, password=password, **fields)

    @factory.post_generation
    def groups(user: User, create: bool, extracted: tuple[str, ...] | None, **kwargs: Any) -> None:
        if extracted:
            found = list(Group.objects.filter(name__in=extracted))
            assert {g.name for g in found} == set(extracted), f"no such role group among {extracted}"
            user.groups.set(found)

    @factory.post_generation
    def permissions(user: User, create: bool, extracted: tuple[str, ...] | None, **kwargs: Any) -> None:
        if extracted:
            found = list(Permission.objects.filter(codename__in=extracted))
            assert {p.codename for p in found} == set(extracted), f"no such permission among {extracted}"
            user.user_permissions.add(*found)
