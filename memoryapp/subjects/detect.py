"""Mentions found at write time (issue 25 §2): the cheap detector the write paths call, in their
transaction, so the subject index knows a row names a registered person from the moment it is
stored, not only from the next rebuild.

What is looked at: the texts of each row as the index's scan reads them (`row_texts`: an entry's
content, tool calls, event, metadata and sender name; a thread's metadata; an item's or a fact's
subject, attribute, value and metadata; an entity's name and aliases; a quote; a memory file or
context document version), written by an agent over the API, the MCP server, an import or a job
(extraction's items, compaction's summaries, fork copies).

What is looked for: the identifiers the agent registered for any of its people, matched as the
registry and screening match them (`identifier_candidates`: an e-mail lower-cased, a phone in
E.164, a name case- and accent-folded, an external id as a token), so a row is recorded here
exactly when `subject_index_rebuild` would record it for that person.

Cost (`bench/subjects.py`): an agent that registered no one pays one comparison; otherwise the
texts go through the agent's `PeopleMatcher` (memoryapp.screening.people: built once per process
and registry version, shared with screening's `person` category, a cheap gate before any parsing),
and what matched is inserted in one statement (`ON CONFLICT DO NOTHING`); nothing matched, no query.

The same finding says whose keys seal the row (governance.crypto.fields.KEY_PEOPLE): the writers
ask `rows_named` before they store the rows, set each row's `key_people` (`key_people_set`: the
people it names besides its owner) so its sealed values need every one of their keys, and hand
what was found to `mentions_record` (`named`), so the texts are matched once.

Rows written this way: entries, threads' metadata, items and facts with their quotes, entities,
memory file and context document versions, the graph's quotes, knowledge documents, the run
ledger's events and snapshots, job results as a run finishes (`job_result_recorded`), and staff's
edits (a reviewer's edited value, an entity's name and aliases, a knowledge document).

The rest stays with the rebuild job: rows written before a person was registered or whose
identifiers changed (`subject_index_schedule` after a PUT), identifiers given only with an erasure
request, and rows about an entity linked to a person.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Model

from governance.crypto.fields import KEY_PEOPLE, equality_values, key_people_of
from governance.models import JobRun
from memoryapp.errors import Conflict
from memoryapp.models import Agent, Entity, SubjectMention
from memoryapp.models.items import name_normalized
from memoryapp.screening.people import PeopleMatcher, people_matcher
from memoryapp.screening.recognizers import Memo
from memoryapp.subjects.erasing import people_erasing
from memoryapp.subjects.index import person_matcher
from memoryapp.subjects.matching import PersonMatcher
from memoryapp.subjects.texts import redacted_columns, row_redact, row_texts

__all__ = [
    "PeopleMatcher",
    "Written",
    "entity_names_merged",
    "job_result_recorded",
    "key_people_set",
    "mentions_record",
    "people_matcher",
    "rows_named",
    "thread_key_people_set",
]

# A row to look at: its table in the index (SubjectMention.Table), its primary key, and the row.
Written = tuple[str, Any, Any]


def rows_named(
    *, agent: Agent | None = None, agent_id: int | None = None, rows: Iterable[Written], memo: Memo | None = None
) -> dict[str, set[str]]:
    """The registered people each of these rows (about to be written) names, by str(pk), rows
    naming no one left out; {} when the agent registered no one (no query, no matching). `memo`:
    the write's screener's (memoryapp.screening.screen), which looked through the same texts."""
    matcher = people_matcher(agent=agent, agent_id=agent_id)
    if matcher is None:
        return {}
    named: dict[str, set[str]] = {}
    found: list[Written] = []
    rows = list(rows)
    texts = [row_texts(table, row) for table, _, row in rows]
    # The rows none of whose strings passes the matcher's gate, told apart at once (a batch's
    # ordinary turns): the rest are matched one by one.
    for (table, pk, row), row_strings, maybe in zip(rows, texts, matcher.rows_may_name(texts, memo), strict=True):
        if not maybe:
            continue
        people = matcher.people_in(row_strings, memo)
        if people:
            named[str(pk)] = people
            found.append((table, pk, row))
    if named:
        _erasing_redact(
            agent_id=agent.pk if agent is not None else agent_id, matcher=matcher, rows=found, named=named, saved=False
        )
    return named


def rows_name_anyone(*, agent: Agent, rows: Iterable[Written], memo: Memo | None = None) -> bool:
    """Whether any of these rows (about to be written) names a registered person of the agent: what
    `rows_named` would find, without acting on it (no erasure lock taken, nothing redacted), for a
    writer that leaves such a write to its transaction (the single append's statement,
    memoryapp.threads.services)."""
    matcher = people_matcher(agent=agent)
    return matcher is not None and any(matcher.people_in(row_texts(table, row), memo) for table, _, row in rows)


def _erasing_redact(
    *, agent_id: int | None, matcher: PeopleMatcher, rows: list[Written], named: dict[str, set[str]], saved: bool
) -> None:
    """The rows naming a person being erased (memoryapp.subjects.erasing) say the placeholder
    instead, and `named` no more names them; `saved`: the rows are stored already (saved again
    here, their key set without her). Takes the named people's erasure lock shared (a query or two,
    only for a write that names someone)."""
    assert agent_id is not None
    erasing = people_erasing(agent_id=agent_id, people={p for people in named.values() for p in people})
    if not erasing:
        return
    matchers: dict[str, PersonMatcher] = {}
    for table, pk, row in rows:
        people = named.get(str(pk), set())
        gone = sorted(p for p in people if p in erasing and table not in erasing[p])
        if not gone:
            continue
        fields: set[str] = set()
        for user_id in gone:
            if user_id not in matchers:
                matchers[user_id] = person_matcher(agent_id=agent_id, user_id=user_id)
            fields.update(row_redact(table, row, matchers[user_id]))
        left = matcher.people_in(row_texts(table, row)) - set(gone)
        if left:
            named[str(pk)] = left
        else:
            del named[str(pk)]
        if saved:
            if hasattr(row, KEY_PEOPLE) and getattr(row, KEY_PEOPLE):
                setattr(row, KEY_PEOPLE, [p for p in getattr(row, KEY_PEOPLE) if p not in gone] or None)
                fields.add(KEY_PEOPLE)
            row.save(update_fields=sorted(fields))


def key_people_set(row: Model, people: Iterable[str], *, owner_person: str | None = None) -> None:
    """Set the row's `key_people` before it is stored: the people it names or whose words it holds
    besides its owner's person (`encryption_owner`, or `owner_person` when the caller knows it)."""
    people = set(people)
    if not people:
        setattr(row, KEY_PEOPLE, None)
        return
    if owner_person is None:
        owner_person = row.encryption_owner()[1]  # type: ignore[attr-defined]
    setattr(row, KEY_PEOPLE, key_people_of(owner_person, people))


def entity_names_merged(entity: Model, merged: Iterable[Model]) -> None:
    """After an entity took the names of others (a merge): saved with its other names, sealed under
    the keys of whom it names now and of whom the merged ones were sealed under besides (their
    `key_people`, their scope's person), and its mentions in the subject index replaced."""
    written: list[Written] = [(SubjectMention.Table.ENTITY, entity.pk, entity)]
    name = entity.name  # type: ignore[attr-defined]
    named = rows_named(agent_id=entity.agent_id, rows=written)  # type: ignore[attr-defined]
    people = {*named.get(str(entity.pk), ()), *(getattr(entity, KEY_PEOPLE) or ())}
    for other in merged:
        people |= {*(getattr(other, KEY_PEOPLE) or ()), other.encryption_owner()[1]}  # type: ignore[attr-defined]
    key_people_set(entity, people - {""})
    fields = ["aliases", KEY_PEOPLE]
    if entity.name != name:  # type: ignore[attr-defined]
        # Its name named a person being erased: stored saying the placeholder, as its aliases, with
        # what derives from it.
        _placeholder_name_free(entity)
        fields = [*redacted_columns(SubjectMention.Table.ENTITY), KEY_PEOPLE]
        try:
            with transaction.atomic():  # an entity of that name made since the look: the same 409
                entity.save(update_fields=fields)
        except IntegrityError as exc:
            raise _placeholder_taken() from exc
    else:
        entity.save(update_fields=fields)
    mentions_record(agent_id=entity.agent_id, rows=written, replace=True, named=named)  # type: ignore[attr-defined]


def _placeholder_name_free(entity: Model) -> None:
    """Refuse (409) to name an entity by the placeholder where its scope has an entity of that name
    already (one name a scope): the merge is for after the person's erasure, which leaves one."""
    scope = {f: getattr(entity, f) for f in ("agent_id", "user_id", "project_id", "thread_id")}
    keys = equality_values(agent_id=scope["agent_id"], text=name_normalized(entity.name))  # type: ignore[attr-defined]
    if Entity.objects.filter(**scope, normalized_name__in=keys).exclude(pk=entity.pk).exists():
        raise _placeholder_taken()


def _placeholder_taken() -> Conflict:
    return Conflict(
        "person_being_erased",
        "An entity merged names a person being erased, and its scope holds her placeholder already: "
        "merge them once the erasure ended.",
        field="entity_id",
    )


def thread_key_people_set(thread: Model) -> dict[str, set[str]]:
    """Before a thread's metadata is saved: its `key_people`, the registered people the metadata
    names besides the person it is sealed under (`encryption_owner`), whose keys seal it too.
    Answers what was found (for `mentions_record`'s `named`)."""
    named = rows_named(agent_id=thread.agent_id, rows=[(SubjectMention.Table.THREAD, thread.pk, thread)])  # type: ignore[attr-defined]
    key_people_set(thread, named.get(str(thread.pk), ()))
    return named


def mentions_record(
    *,
    agent: Agent | None = None,
    agent_id: int | None = None,
    rows: Iterable[Written],
    replace: bool = False,
    named: Mapping[str, set[str]] | None = None,
) -> int:
    """Record in the subject index which registered people these rows (just written, in the
    caller's transaction) name; answers how many (row, person) pairs were found.

    `replace`: the rows were rewritten (a thread's metadata), so what the index held for them goes
    first. `named`: what `rows_named` found of them before they were written (not matched again).
    Only when the agent registered someone: otherwise no query at all."""
    matcher = people_matcher(agent=agent, agent_id=agent_id)
    if matcher is None:
        return 0
    agent_id = agent.pk if agent is not None else agent_id
    assert agent_id is not None
    mentions: list[SubjectMention] = []
    written: dict[str, list[str]] = {}
    rows = list(rows)
    if named is None:
        # Found here (the writer did not ask `rows_named` before storing them): a row naming a
        # person being erased is saved again saying the placeholder.
        named = {}
        for table, pk, row in rows:
            people = matcher.people_in(row_texts(table, row))
            if people:
                named[str(pk)] = people
        if named:
            _erasing_redact(agent_id=agent_id, matcher=matcher, rows=rows, named=named, saved=True)
    for table, pk, _row in rows:
        written.setdefault(table, []).append(str(pk))
        people = named.get(str(pk), set())
        for user_id in sorted(people):
            mentions.append(SubjectMention(agent_id=agent_id, user_id=user_id, table=table, row_id=str(pk)))
    if replace:
        for table, ids in written.items():
            SubjectMention.objects.filter(agent_id=agent_id, table=table, row_id__in=ids).delete()
    if mentions:
        SubjectMention.objects.bulk_create(mentions, ignore_conflicts=True)
    return len(mentions)


def job_result_recorded(run: JobRun) -> None:
    """A job run's result (and arguments) naming a registered person of its agent, in the index as
    the run finishes (governance.jobs.runs.job_finish's follower: extraction's, compaction's,
    consolidation's results). A run of no agent has no people to name."""
    if run.agent_id is not None:
        mentions_record(agent_id=run.agent_id, rows=[(SubjectMention.Table.JOB_RUN, run.pk, run)], replace=True)
