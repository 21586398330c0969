"""Erasure of a person (004 "Forgetting, Redacting and Rewinding" `deleteUser`; 002 `forgetAll`).

`person_erase` removes what the service holds about one person (a `user_id`) across the chosen
agents, in batches, each batch its own transaction, so a person with thousands of threads never
holds one giant transaction, and an erasure that stopped part way is simply run again: every
batch asks the database afresh for what is left, so a second run finds nothing and counts zero.

Steps, in this order (derived memory before the entries it stands on):

1. The items of the person's scope (`MemoryItem.user_id`) and the facts of their namespace
   (`users/<id>` and inside it), with their evidence and reviews; the playbooks naming them. A slot
   that keeps items of others is laid out again.
1b. Their channel sessions (`ChannelSession.user_id`: the channel ids that name them), whatever
   became of the sessions' threads; in `redact` mode too.
2. The threads about the person (`Thread.user_id`), a batch of threads at a time: what memory
   derived from their entries elsewhere (`derived_forget_threads`: the items of other scopes quoting
   them purged or trimmed, file versions written at them redacted, the playbook rules of purged
   lessons), their copies in forks that are not about the person, the job runs that name the
   threads, then the entries and the threads themselves. In `redact` mode the threads stay and
   every entry is redacted instead (events deleted), through the entry cascades.
3. The messages the person wrote in threads of others (messages whose sender, `metadata.userId` by
   the one rule `message_sender`, is the person), with their replies, through the entry cascades (`entries_forget`).
4. The entities of the person's scope (and those no item is about any more, with step 1).
5. The memory files of the person's scope: every version deleted (`erase`), or redacted with the
   file then deleted (`redact`), so no path naming the person stays in a listing.
5b. The rows that name the person without being theirs (memoryapp.forgetting.mentions, through
   the subject index): with the person's identifiers (registered with the agent, and given with
   the erasure), items and entities whose subject is the person go, and every mention in rows
   that stay (another person's turn, an agent-wide item or fact, a project file or context
   document, a fork's metadata) becomes a placeholder, re-indexed and re-embedded; the person
   leaves every participants list (`memoryUserIds`).
6. The consolidation records of the person's scope, and the job runs whose arguments or results
   name the person.
7. (`erase`) The person's data key is destroyed. 8. (`redact`) Her threads, which stay, are held
   and what was appended to them since step 2 is redacted: the erasure's last look at them (run
   before her audit pseudonyms are forgotten: its records would make her secret again).

Every batch writes one audit record: counts only, never the person's id (the audit chain cannot
be edited; the caller's request record says whom it was for).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from django.apps import apps
from django.db import connection, transaction
from django.db.models import BooleanField, Count, F, Func, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from psycopg import sql

from governance import locks
from governance.audit.chain import audit_append
from governance.audit.pseudonyms import pseudonym_names, pseudonyms_forget
from governance.crypto.envelope import data_key_destroy, data_keys_made_since_delete
from governance.crypto.fields import KEY_PEOPLE, KeyPeopleField, equality_values, json_text_open, sealed_update
from governance.crypto.keyring import encryption_enabled
from governance.crypto.rotation import rows_reseal
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from governance.crypto.sealing import SealError
from governance.models import DataKey, JobRun
from memoryapp.consolidation.lineage import derived_files_forget
from memoryapp.errors import DomainError
from memoryapp.events.services import event_record_many, events_forget_threads
from memoryapp.files.access import FileAccess
from memoryapp.files.selectors import versions_unredacted
from memoryapp.files.services import files_lock, redacted_heads_delete, versions_redact
from memoryapp.forgetting.lineage import LineageReport, derived_forget_threads
from memoryapp.forgetting.mentions import (
    GROUPS,
    MENTION_MODES,
    PARTICIPANTS,
    mentions_delete_entities,
    mentions_erase,
)
from memoryapp.forgetting.services import (
    COUNT_KEYS,
    cascade_step,
    counts_add,
    counts_zero,
    entries_forget,
    fork_copies,
    origins_forget_forks,
    thread_scope_forget,
    threads_with_origins_lock,
)
from memoryapp.graph.services import entities_unused_delete, entity_relations_delete, scope_relations_delete
from memoryapp.items.facts import PERSON_PREFIX
from memoryapp.items.rules import Scope, normalized_name
from memoryapp.items.selectors import FACT_PREFIX
from memoryapp.items.services import slot_layout, versions_quotes_forget
from memoryapp.models import (
    Agent,
    ConsolidationState,
    Entity,
    Entry,
    ErasureMark,
    Evidence,
    ItemReview,
    LegalHold,
    MemoryFileVersion,
    MemoryItem,
    PersonIdentifier,
    RunEvent,
    SubjectMention,
    Thread,
    ThreadRun,
)
from memoryapp.models.choices import EntryType, ItemStatus
from memoryapp.models.people import sent_by
from memoryapp.retry import atomic_retrying
from memoryapp.screening.identifiers import identifiers_delete
from memoryapp.search.access_log import access_log_forget_person
from memoryapp.sessions.services import sessions_of_person_delete
from memoryapp.subjects.erasing import erasing_mark, erasing_unmark, erasure_running
from memoryapp.subjects.index import person_matcher

MODES = ("erase", "redact")
Progress = Callable[[int, int], None]

__all__ = [
    "COUNT_KEYS",
    "HOLDING_KINDS",
    "MODES",
    "person_erase",
    "person_erase_plan",
    "person_holdings",
    "person_job_runs",
    "person_messages_elsewhere",
]


def _user_check(user_id: Any) -> str:
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 128:
        raise DomainError("invalid_value", "user_id must be a non-empty id of at most 128 characters.", field="user_id")
    return user_id


def _agents(agent_ids: Sequence[int] | None) -> list[int]:
    """The agents to go through, in pk order (every agent when None)."""
    agents = Agent.objects.order_by("pk")
    if agent_ids is not None:
        agents = agents.filter(pk__in=list(agent_ids))
    return list(agents.values_list("pk", flat=True))


def _threads(user_id: str, agents: list[int]) -> QuerySet[Thread]:
    return Thread.objects.filter(agent_id__in=agents, user_id=user_id)


def _messages(user_id: str, agents: list[int], mode: str = "erase") -> QuerySet[Entry]:
    """The person's messages in threads of others (not about them), not yet forgotten (in `redact`
    mode, those not redacted yet)."""
    messages = Entry.objects.filter(sent_by(user_id), agent_id__in=agents, type=EntryType.MESSAGE).exclude(
        thread__user_id=user_id
    )
    return messages.filter(redacted_at__isnull=True) if mode == "redact" else messages


def _items(user_id: str, agents: list[int]) -> QuerySet[MemoryItem]:
    namespace = f"{PERSON_PREFIX}/{user_id}"
    return MemoryItem.objects.filter(agent_id__in=agents).filter(
        Q(user_id=user_id) | Q(namespace=namespace) | Q(namespace__startswith=namespace + "/")
    )


def _entities(user_id: str, agents: list[int]) -> QuerySet[Entity]:
    return Entity.objects.filter(agent_id__in=agents, user_id=user_id)


def _files(user_id: str, agents: list[int], mode: str) -> QuerySet[MemoryFileVersion]:
    versions = MemoryFileVersion.objects.filter(agent_id__in=agents, user_id=user_id)
    if mode == "redact":
        # What a redaction leaves: versions already saying nothing (and deletions) are done.
        versions = versions_unredacted(versions)
    return versions


def _jobs(user_id: str, agents: list[int], keep_job_ids: Sequence[int], *, unowned: bool) -> QuerySet[JobRun]:
    """Job runs of these agents whose arguments or result hold the person's id as a value (not yet
    scrubbed); with `unowned` (staff's erasure and export), the runs of no agent too.

    An agent's erasure never reaches the runs of no agent (the audit verification, staff's erasures,
    exports and prunes): with them, `POST /users/first_broken/forget` replaced the audit
    verification's result and /readyz said the chain was broken. And a JSON key is never taken for
    the person: "first_broken" names a field of a result, not someone.
    """
    owners = Q(agent_id__in=agents)
    if unowned:
        owners |= Q(agent_id__isnull=True)
    runs = JobRun.objects.filter(owners).exclude(pk__in=list(keep_job_ids))
    naming = Q(_holds_value("arguments", user_id)) | Q(_holds_value("result", user_id))
    if encryption_enabled():
        naming |= Q(pk__in=_sealed_results_naming(runs, user_id))
    return runs.filter(naming)


# A string value equal to $id anywhere in the JSON (objects and arrays at any depth), never a key.
_VALUE_PATH = "strict $.** ? (@ == $id)"


def _holds_value(column: str, value: str) -> Func:
    return Func(
        F(column),
        RawSQL("%s::jsonpath", (_VALUE_PATH,)),
        RawSQL("jsonb_build_object('id', %s::text)", (value,)),
        function="jsonb_path_exists",
        output_field=BooleanField(),
    )


def _json_holds_value(value: Any, wanted: str) -> bool:
    """Whether `wanted` is one of the JSON's string values (keys are not values)."""
    if isinstance(value, dict):
        return any(_json_holds_value(inner, wanted) for inner in value.values())
    if isinstance(value, list):
        return any(_json_holds_value(inner, wanted) for inner in value)
    return value == wanted


def _sealed_results_naming(runs: QuerySet[JobRun], user_id: str) -> list[int]:
    """The runs whose sealed result, opened, holds the person's id: the database sees only
    ciphertext. A result whose key was destroyed names no one any more (nobody can open it)."""
    table = JobRun._meta.db_table
    found = []
    stored_text = runs.annotate(stored=Cast("result", TextField()))
    sealed = stored_text.filter(stored__startswith='"' + SEALED_PREFIX).values_list("pk", "stored")
    for pk, stored in sealed.iterator(chunk_size=2000):
        try:
            opened = json_text_open(stored, table=table, column="result")
        except SealError:
            continue
        if _json_holds_value(json.loads(opened), user_id):
            found.append(pk)
    return found


def person_messages_elsewhere(*, user_id: str, agent_ids: Sequence[int]) -> QuerySet[Entry]:
    """The messages the person wrote in threads of others: what the erasure's step 3 takes, and what
    an export of the person shows (the same selector, so the two never disagree)."""
    return _messages(user_id, list(agent_ids))


def person_job_runs(*, user_id: str, agent_ids: Sequence[int], unowned: bool = False) -> QuerySet[JobRun]:
    """The job runs of these agents (with `unowned`, of none too) whose arguments or result name the
    person: what the erasure scrubs, and what an export of the person shows."""
    return _jobs(user_id, list(agent_ids), (), unowned=unowned)


def person_erase_plan(*, user_id: str, agent_ids: Sequence[int] | None = None, unowned: bool = False) -> dict[str, int]:
    """What `person_erase` would touch, counted by kind; changes nothing."""
    user_id = _user_check(user_id)
    agents = _agents(agent_ids)
    threads = _threads(user_id, agents)
    return {
        "agents": len(agents),
        "threads": threads.count(),
        "entries": Entry.objects.filter(thread__in=threads).count(),
        "messages_elsewhere": _messages(user_id, agents).count(),
        "items": _items(user_id, agents).count(),
        "entities": _entities(user_id, agents).count(),
        "file_versions": _files(user_id, agents, "erase").count(),
        "job_runs": _jobs(user_id, agents, (), unowned=unowned).count(),
    }


# The kinds a person's page counts per agent, in the order it shows them.
HOLDING_KINDS = ("threads", "entries", "messages_elsewhere", "items", "facts", "entities", "file_versions")


def person_holdings(*, user_id: str) -> dict[int, dict[str, int]]:
    """What each agent holds about the person, counted by kind (the agents holding nothing left
    out): the erasure's own selectors, so the person's page, the erasure's plan and the erasure
    never disagree about what is theirs. One grouped query per kind, whatever the number of agents.

    Facts are the items of slots `core:<key>` (002 facts, stored as items); `items` the others.
    """
    user_id = _user_check(user_id)
    agents = _agents(None)
    by_agent: dict[int, dict[str, int]] = {}

    def add(kind: str, rows: Any) -> None:
        for agent_id, n in rows:
            by_agent.setdefault(agent_id, dict.fromkeys(HOLDING_KINDS, 0))[kind] = n

    def grouped(rows: QuerySet[Any], column: str = "agent_id") -> Any:
        return rows.order_by().values(column).annotate(n=Count("pk")).values_list(column, "n")

    threads = _threads(user_id, agents)
    add("threads", grouped(threads))
    add("entries", grouped(Entry.objects.filter(thread__in=threads)))
    add("messages_elsewhere", grouped(_messages(user_id, agents)))
    items = _items(user_id, agents)
    add("items", grouped(items.exclude(attribute__startswith=FACT_PREFIX)))
    add("facts", grouped(items.filter(attribute__startswith=FACT_PREFIX)))
    add("entities", grouped(_entities(user_id, agents)))
    add("file_versions", grouped(_files(user_id, agents, "erase")))
    return by_agent


def person_erase(
    *,
    user_id: str,
    agent_ids: Sequence[int] | None = None,
    mode: str = "erase",
    actor: str = "",
    progress: Progress | None = None,
    batch_size: int = 200,
    keep_job_ids: Sequence[int] = (),
    unowned: bool = False,
    identifiers: Mapping[str, Sequence[str]] | None = None,
    mentions: str = "redact",
    exclude: Collection[str] | Mapping[str, str] = (),
    examples: dict[str, list[str]] | None = None,
    wait: bool = True,
) -> dict[str, int]:
    """Erase (or redact) everything held about a person, batch by batch; returns the counts.

    `agent_ids` limits it to those agents (None: every agent). `progress(done, total)` is called
    after every batch (units: threads, messages, items, file versions). `keep_job_ids` names the
    job runs not to scrub (the erasure's own run, which names the person in its arguments).
    `unowned` (staff's erasure only) scrubs the job runs of no agent that name the person too; an
    agent's erasure touches its own rows only.
    `identifiers` (normalised, `identifiers_check`) are the person's besides those each agent
    registered; with `mentions` "redact" the rows naming the person by them are erased or
    redacted (memoryapp.forgetting.mentions), except the groups in `exclude` (a mapping gives
    each group's reason, the officer's); "keep" leaves them. Both are kept with the person's mark,
    every group with its reason, so a resume of a run interrupted makes the same choices.
    `wait` False (a web request): an erasure of the person already running in an agent is a 409
    `erasure_running` at once, not waited for (`erasure_running`). See the module's docstring for the steps. Idempotent: a second run returns zero counts.
    """
    user_id = _user_check(user_id)
    if mode not in MODES:
        raise DomainError("invalid_value", "mode must be erase or redact.", field="mode")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DomainError("invalid_value", "batch_size must be a positive integer.", field="batch_size")
    if mentions not in MENTION_MODES:
        raise DomainError("invalid_value", "mentions must be redact or keep.", field="mentions")
    unknown = sorted(set(exclude) - set(GROUPS))
    if unknown:
        raise DomainError("invalid_value", f"exclude names no group: {', '.join(unknown)}.", field="exclude")
    # The choices as made (before `keep` widens them), for the mark: a resume makes them again.
    excluded = (
        {str(g): str(exclude[g]) for g in exclude} if isinstance(exclude, Mapping) else dict.fromkeys(exclude, "")
    )
    if mentions == "keep":
        exclude = {*exclude, *(group for group in GROUPS if group != PARTICIPANTS)}
    agents = _agents(agent_ids)
    # The index's tables whose mentions stay (the groups excluded): writers name her there as written.
    kept = sorted(set(exclude) & set(SubjectMention.Table.values))
    counts = counts_zero()
    plan = person_erase_plan(user_id=user_id, agent_ids=agents, unowned=unowned)
    total = plan["threads"] + plan["messages_elsewhere"] + plan["items"] + plan["file_versions"]
    done = 0

    def step(n: int) -> None:
        nonlocal done, total
        done += n
        total = max(total, done)
        if progress is not None:
            progress(done, total)
        cascade_step("batch")

    for agent_id in agents:
        # Held while this agent's part runs: a second erasure of the person waits, and a mark a
        # killed run leaves shows as interrupted (memoryapp.subjects.erasing).
        with erasure_running(agent_id=agent_id, user_id=user_id, wait=wait):
            # Before the mark seals the identifiers given under her key here (a key made for them):
            # an agent that held nothing of her ends with nothing of her, that key's row too.
            held = not encryption_enabled() or _held_before(agent_id=agent_id, user_id=user_id)
            # Marked first (memoryapp.subjects.erasing): from here every write naming her by an
            # identifier, registered or given (kept with the mark, sealed), stores the placeholder
            # (in the tables not kept), and a run stopped at any step below leaves the mark, so the
            # resume finishes it with the same identifiers (governance.erasure.resume). Marked too
            # when every table's mentions are kept (`mentions` "keep"), and when she has no
            # identifier at all: writers change nothing then, and the mark is what shows the run
            # interrupted and has it resumed.
            erasing_mark(
                agent_id=agent_id,
                user_id=user_id,
                keeps=kept,
                mode=mode,
                given=identifiers,
                mentions=mentions,
                excluded=excluded,
            )
            # 0. The access log: the rows of requests about the person go, and the ids of their items and
            # entries leave the rows of other people's requests (first, while those ids can be read).
            counts_add(counts, _access_log_forget(user_id=user_id, agent_id=agent_id, mode=mode))
            # 1. Items and facts of the person's scope (derived memory goes first; most of what quotes
            # the person's entries is theirs, so the thread step below finds little left to trim).
            while True:
                ids = list(_items(user_id, [agent_id]).order_by("pk").values_list("pk", flat=True)[: batch_size * 10])
                if not ids:
                    break
                counts_add(counts, _items_erase(agent_id=agent_id, item_ids=ids, actor=actor))
                step(len(ids))
            # 1b. Their channel sessions (the threads follow in 2, or are redacted).
            with transaction.atomic():
                sessions = sessions_of_person_delete(agent_id=agent_id, user_id=user_id)
            if sessions:
                counts["sessions"] = counts.get("sessions", 0) + sessions
            # 2. Threads about the person.
            after = 0
            while True:
                batch = list(
                    _threads(user_id, [agent_id])
                    .filter(pk__gt=after)
                    .order_by("pk")
                    .values_list("pk", flat=True)[:batch_size]
                )
                if not batch:
                    break
                after = batch[-1]
                if mode == "erase":
                    counts_add(counts, _threads_erase(agent_id=agent_id, thread_pks=batch, actor=actor))
                else:
                    counts_add(counts, _threads_redact(agent_id=agent_id, thread_pks=batch, actor=actor))
                step(len(batch))
            # 3. The person's messages in threads of others.
            while True:
                ids = list(
                    _messages(user_id, [agent_id], mode).order_by("pk").values_list("pk", flat=True)[:batch_size]
                )
                if not ids:
                    break
                agent = Agent.objects.get(pk=agent_id)
                counts_add(
                    counts,
                    entries_forget(agent=agent, entry_ids=ids, redact=mode == "redact", actor=actor, because="person"),
                )
                step(len(ids))
            # 4. The entities of the person's scope.
            counts_add(counts, _entities_erase(user_id=user_id, agent_id=agent_id))
            # 5. Memory files of the person's scope.
            while True:
                ids = list(_files(user_id, [agent_id], mode).order_by("pk").values_list("pk", flat=True)[:batch_size])
                if not ids:
                    break
                counts_add(counts, _files_erase(agent_id=agent_id, version_ids=ids, mode=mode, actor=actor))
                step(len(ids))
            # 5b. What names the person without being theirs, through the subject index (the person's
            # identifiers registered with this agent and those given), and the participants lists.
            matcher = person_matcher(agent_id=agent_id, user_id=user_id, given=identifiers)
            found = mentions_erase(agent_id=agent_id, matcher=matcher, exclude=exclude, examples=examples, mode=mode)
            counts_add(counts, found.counts)
            for start in range(0, len(found.item_ids), batch_size * 10):
                ids = found.item_ids[start : start + batch_size * 10]
                counts_add(counts, _items_erase(agent_id=agent_id, item_ids=ids, actor=actor))
            with transaction.atomic():
                mentions_delete_entities(agent_id=agent_id, entity_ids=found.entity_ids)
            # 6. Consolidation records of the scope, and the identifiers registered for the person
            # (memoryapp.screening.identifiers), before their key goes (sealed under it).
            ConsolidationState.objects.filter(agent_id=agent_id, user_id=user_id).delete()
            registered = identifiers_delete(agent_ids=[agent_id], user_id=user_id)
            if registered:
                counts["identifiers"] = counts.get("identifiers", 0) + registered
            if mode == "redact":
                # 8. Her threads stay in `redact` mode, and a turn appended to one after step 2 would
                # outlive the erasure as written: the last step redacts what they gained meanwhile,
                # her threads held (FOR UPDATE, as an append holds its thread) in one transaction, so
                # an append after it is after the erasure. Before her pseudonyms go: its audit
                # records name her thread, and would make her secret again.
                counts_add(counts, _threads_redact_last(agent_id=agent_id, user_id=user_id, actor=actor))
            # 7. Crypto-shredding (encryption on): the person's data key goes, so a copy of their rows
            # that outlives this (a backup, a dump, a replica) no longer opens. Erase only: a redaction
            # keeps rows sealed under it.
            # The audit trail's pseudonyms of the person and their threads link to no one now (a
            # redaction too: the leftover scan would find the secret's row naming them).
            pseudonyms_forget(agent_id=agent_id, user_id=user_id)
            if mode == "erase":
                counts_add(counts, _words_of_released(agent_id=agent_id, user_id=user_id))
                counts_add(counts, _key_people_released(agent_id=agent_id, user_id=user_id))
                with transaction.atomic():
                    # A write that named them while the sweep above ran (its matcher not yet told that
                    # their identifiers went) is sealed again here, in the key's own transaction: the
                    # window where a live row could be left sealed under a destroyed key shrinks to
                    # this transaction's commit.
                    counts_add(counts, _key_people_released(agent_id=agent_id, user_id=user_id))
                    # (One this erasure made, in an agent that held nothing of her, is no key of hers
                    # it shredded: not counted, and deleted below.)
                    if data_key_destroy(agent_id=agent_id, user_id=user_id) is not None and held:
                        counts["data_keys_destroyed"] = counts.get("data_keys_destroyed", 0) + 1
            if not held:
                # The agent held nothing of her: the only key of hers here is the one this erasure
                # made for the identifiers given (deleted at step 6), sealing nothing left; its row
                # goes too, not kept destroyed (governance.crypto.envelope).
                # Unless a row still needs it: a write naming her during the erasure, in a table
                # whose mentions are kept, sealed under it; a redaction keeps such a row, and it
                # would no longer open. Under her marking lock, so no such write commits meanwhile.
                since = ErasureMark.objects.filter(agent_id=agent_id, user_id=user_id).values_list("since", flat=True)
                if since:
                    with transaction.atomic():
                        with connection.cursor() as cursor:
                            cursor.execute(
                                "SELECT pg_advisory_xact_lock(%s, %s)",
                                [locks.ERASING, locks.person(agent_id, user_id)],
                            )
                        if not _sealed_under_hers(agent_id=agent_id, user_id=user_id):
                            data_keys_made_since_delete(agent_id=agent_id, user_id=user_id, since=since[0])
            # Her erasure here ended: the mark goes last, so a run stopped at any step above
            # (the key's destruction too) is resumed (memoryapp.subjects.erasing).
            erasing_unmark(agent_id=agent_id, user_id=user_id)
    if unowned:  # staff's erasure: the pseudonyms of records of no agent (a hold on every agent)
        pseudonyms_forget(agent_id=None, user_id=user_id)
    counts["job_runs"] += _jobs_scrub(_jobs(user_id, agents, keep_job_ids, unowned=unowned))
    if progress is not None:
        # Rows the plan counted may have gone with an earlier step (items quoting erased threads).
        progress(max(total, done), max(total, done))
    return counts


def _held_before(*, agent_id: int, user_id: str) -> bool:
    """Whether the agent held anything of the person before her erasure began: an identifier she
    registered, a data key of hers made before her mark (a run again keeps the mark's start: the
    key an interrupted run made is not hers), or a row that is hers."""
    if PersonIdentifier.objects.filter(agent_id=agent_id, user_id=user_id, given=False).exists():
        return True
    since = ErasureMark.objects.filter(agent_id=agent_id, user_id=user_id).values_list("since", flat=True).first()
    keys = DataKey.objects.filter(agent_id=agent_id, user_id=user_id)
    if since is not None:
        keys = keys.filter(created_at__lt=since)
    if keys.exists():
        return True
    plan = person_erase_plan(user_id=user_id, agent_ids=[agent_id])
    return any(plan[kind] for kind in ("threads", "messages_elsewhere", "items", "entities", "file_versions"))


def _sealed_under_hers(*, agent_id: int, user_id: str) -> bool:
    """Whether a row of the agent still needs the person's key: one naming her or holding her words
    (`key_people`), or one of hers."""
    for model in apps.get_models():
        if model._meta.proxy or not any(isinstance(f, KeyPeopleField) for f in model._meta.concrete_fields):
            continue
        if model._default_manager.filter(agent_id=agent_id, key_people__contains=[user_id]).exists():
            return True
    plan = person_erase_plan(user_id=user_id, agent_ids=[agent_id])
    return any(plan[kind] for kind in ("threads", "messages_elsewhere", "items", "entities", "file_versions"))


@atomic_retrying
def _words_of_released(*, agent_id: int, user_id: str) -> dict[str, int]:
    """Rows sealed under the person's key for holding their words (`words_of`: a fork's copy, a
    summary, a tool result quoting them, an item drawn from their messages) that the steps before
    left in place (a fork's copied metadata, a tool result redacted without its identifiers having been found, an item kept
    by a `keep` or an excluded group): sealed again under their other owner's key before the
    person's goes, so the service can still open what it keeps. Counted (`words_resealed`); none
    is expected (docs/security.md "Whose key seals a row")."""
    resealed = 0
    models: tuple[type[Entry] | type[MemoryItem] | type[Thread], ...] = (Entry, MemoryItem, Thread)
    for model in models:
        rows = model._default_manager.filter(agent_id=agent_id, words_of=user_id)  # type: ignore[attr-defined]
        ids: list[Any] = list(rows.values_list("pk", flat=True))
        if not ids:
            continue
        model._default_manager.filter(pk__in=ids).update(words_of="")  # type: ignore[attr-defined]
        if encryption_enabled():
            rows_reseal(model._default_manager.filter(pk__in=ids))  # type: ignore[attr-defined]
        resealed += len(ids)
    return {"words_resealed": resealed} if resealed else {}


@atomic_retrying
def _key_people_released(*, agent_id: int, user_id: str) -> dict[str, int]:
    """Rows of others sealed under a key set holding the person's key (`key_people`: another
    person's turn naming them, an agent-wide item or entity, a project file, a knowledge document,
    a summary or item standing on several people's words) that the steps before kept, their
    mentions redacted: the person leaves their `key_people` and they are sealed again under the
    remaining people's keys before the person's goes, so the service still opens them while a copy
    made before (sealed under the set with her key) opens no more. Counted (`key_sets_resealed`)."""
    resealed = 0
    for model in apps.get_models():
        if model._meta.proxy or not any(isinstance(f, KeyPeopleField) for f in model._meta.concrete_fields):
            continue
        manager = model._default_manager
        ids = list(manager.filter(agent_id=agent_id, key_people__contains=[user_id]).values_list("pk", flat=True))
        if not ids:
            continue
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL(
                    "UPDATE {table} SET {column} = NULLIF(array_remove({column}, %s), '{{}}') WHERE {pk} = ANY(%s)"
                ).format(
                    table=sql.Identifier(model._meta.db_table),
                    column=sql.Identifier(KEY_PEOPLE),
                    pk=sql.Identifier(str(model._meta.pk.column)),  # type: ignore[union-attr]
                ),
                [user_id, ids],
            )
        if encryption_enabled():
            rows_reseal(manager.filter(pk__in=ids))
        resealed += len(ids)
    return {"key_sets_resealed": resealed} if resealed else {}


@atomic_retrying
def _access_log_forget(*, user_id: str, agent_id: int, mode: str) -> dict[str, int]:
    item_ids = list(_items(user_id, [agent_id]).values_list("pk", flat=True))
    entry_ids = list(_messages(user_id, [agent_id], mode).values_list("pk", flat=True))
    entry_ids += Entry.objects.filter(thread__in=_threads(user_id, [agent_id])).values_list("pk", flat=True)
    return access_log_forget_person(agent_id=agent_id, user_id=user_id, item_ids=item_ids, entry_ids=entry_ids)


# --- threads --------------------------------------------------------------------------------------


def _thread_scope_erase(*, agent: Agent, thread_id: str, actor: str) -> dict[str, int]:
    """What was kept for one of the person's threads alone goes with it, as when the thread is
    deleted (`thread_scope_forget`: its items and entities), and its memory-file versions of no
    other person and the passes' records of its scope are deleted too. They are the person's:
    sealed under their data key (Scoped.encryption_owner), which the erasure then destroys, they
    would stay behind unopenable, failing every read that met them."""
    counts = thread_scope_forget(agent=agent, thread_id=thread_id, actor=actor)
    scoped = MemoryFileVersion.objects.filter(agent=agent, user_id="", thread_id=thread_id)
    counts["items_purged"] += versions_quotes_forget(version_ids=list(scoped.values_list("pk", flat=True)))
    scoped.delete()
    ConsolidationState.objects.filter(agent=agent, user_id="", thread_id=thread_id).delete()
    return counts


@atomic_retrying
def _threads_erase(*, agent_id: int, thread_pks: list[int], actor: str) -> dict[str, int]:
    """Delete a batch of one agent's threads whole, what stood on their entries first.

    1. Lock the threads and their origins (pk order), then their forks level by level (`fork_copies`).
    2. `derived_forget_threads`: items quoting their entries (or their fork copies), file versions
       written at them, the playbook rules of purged lessons; then what each thread held alone
       (`_thread_scope_erase`).
    3. The copies in forks not about the person are spliced out through the entry cascade.
    4. The job runs naming the threads are scrubbed, then the entries and threads deleted.
    """
    agent = Agent.objects.get(pk=agent_id)
    counts = counts_zero()
    # With the origins of the forks among them (`origins_forget_forks` below), in pk order.
    locked = threads_with_origins_lock(list(Thread.objects.filter(agent=agent, pk__in=thread_pks)))
    if not locked:
        return counts
    pks = [t.pk for t in locked]
    # Forks outside the batch that copied these entries: their copies go too (entry cascade below).
    outside_forks = Thread.objects.filter(agent=agent, forked_from_id__in=pks).exclude(pk__in=pks).exists()
    copies: list[Entry] = []
    if outside_forks:
        entries = list(Entry.objects.filter(agent=agent, thread_id__in=pks).only("id", "agent_id", "thread_id"))
        copies = [c for c in fork_copies(entries) if c.thread_id not in set(pks)]
    report = LineageReport()
    derived_forget_threads(agent=agent, thread_pks=pks, report=report)
    for thread in locked:
        counts_add(counts, _thread_scope_erase(agent=agent, thread_id=thread.external_id, actor=actor))
    if copies:
        counts_add(
            counts,
            entries_forget(
                agent=agent, entry_ids=[c.id for c in copies], keep_replies=True, actor=actor, because="person"
            ),
        )
    counts_add(counts, report.cascade_counts())
    in_batch = Entry.objects.filter(agent=agent, thread_id__in=pks)
    counts["vectors"] += in_batch.filter(embedding__isnull=False).count()
    summaries = in_batch.filter(type=EntryType.COMPACTION).count()
    counts["summaries"] += summaries
    counts["entries_deleted"] += in_batch.count() - summaries
    counts["job_runs"] += _jobs_scrub(
        JobRun.objects.filter(agent_id=agent.pk).filter(
            Q(arguments__thread_pk__in=pks) | Q(arguments__thread_id__in=[t.external_id for t in locked])
        )
    )
    # Rows pointing at what goes: forks keep standing (no origin, nothing of its metadata), the
    # origin forgets the fork's name.
    _forks_forget_origins(locked)
    Thread.objects.filter(forked_from_id__in=pks).exclude(pk__in=pks).update(forked_from=None)
    origins_forget_forks(locked)
    MemoryFileVersion.objects.filter(agent=agent, place__thread_id__in=pks).update(place=None)
    Evidence.objects.filter(agent=agent, entry__thread_id__in=pks).update(entry=None)
    Thread.objects.filter(pk__in=pks).update(active_leaf=None)
    # Bulk deletes without loading the rows: nothing else points at them any more (checked above),
    # and the parent constraint between entries is checked at commit, when they are all gone.
    in_batch._raw_delete(in_batch.db)
    threads = Thread.objects.filter(pk__in=pks)
    threads._raw_delete(threads.db)
    # The erasure's own events name no thread (the client chose its id, and may have named it after
    # the person); the events before it about these threads stop naming them.
    events_forget_threads(agent_id=agent.pk, thread_ids=[t.external_id for t in locked])
    _holds_forget_threads(agent_id=agent.pk, threads=locked)
    event_record_many(agent_id=agent.pk, type="thread.deleted", by_thread=[("", ()) for _ in locked])
    counts["threads"] += len(pks)
    audit_append(
        action="person.erase.threads",
        actor=actor,
        agent_id=agent.pk,
        subject=f"{len(pks)} threads",
        outcome="deleted",
        details={"thread_pks": pks[:50], **{k: v for k, v in counts.items() if v}},
    )
    return counts


def _forks_forget_origins(origins: Sequence[Thread]) -> None:
    """The forks of the person's threads that stay (handed to another person) keep nothing of the
    origin's metadata: `thread_fork` copied it whole (her e-mail, a note about her) and named the
    origin (`forkedFrom`, its client-chosen id). A key still holding the value it had in the origin
    goes, and so does `forkedFrom`; what the fork's owner wrote since (another value, new keys)
    stays. Saved through the model, so the metadata is sealed under the fork owner's key."""
    by_pk = {t.pk: t for t in origins}
    forks = Thread.objects.select_for_update().filter(forked_from_id__in=list(by_pk)).exclude(pk__in=list(by_pk))
    for fork in forks.order_by("pk"):
        origin = by_pk[int(fork.forked_from_id or 0)]
        copied = origin.metadata or {}
        metadata = {
            key: value
            for key, value in (fork.metadata or {}).items()
            if not (key == "forkedFrom" and value == origin.external_id)
            and not (key in copied and copied[key] == value)
        }
        # What stays is the fork owner's: sealed under their key (`words_of` named the origin's
        # person, whose key the erasure destroys).
        if metadata != (fork.metadata or {}) or fork.words_of:
            fork.metadata = metadata
            fork.words_of = ""
            fork.save(update_fields=["metadata", "words_of"])


def _holds_forget_threads(*, agent_id: int, threads: Sequence[Thread]) -> None:
    """The legal holds that were on these threads (lifted: one in force stops the erasure) stop
    naming them by their client-chosen ids: each names its thread by the owner's pseudonym, as the
    hold's audit records do, and the erasure then deletes the secret that links it to anyone."""
    for thread in threads:
        holds = LegalHold.objects.filter(agent_id=agent_id, thread_external_id=thread.external_id)
        if not holds.exists():
            continue
        names = pseudonym_names(agent_id=agent_id, user_id=thread.user_id, also=[thread.external_id])
        holds.update(thread_external_id=names[thread.external_id])


def _threads_redact_last(*, agent_id: int, user_id: str, actor: str) -> dict[str, int]:
    """The last step of a redaction (`person_erase` step 8): her threads locked in pk order (the
    cascades' order; an append waits), then whatever they hold unredacted (turns appended since
    step 2, and what their runs published since: events, a snapshot) redacted as step 2 does, in
    one transaction."""
    with transaction.atomic():
        pks = list(_threads(user_id, [agent_id]).select_for_update().order_by("pk").values_list("pk", flat=True))
        if not pks:
            return counts_zero()
        fresh = Entry.objects.filter(agent_id=agent_id, thread_id__in=pks, redacted_at__isnull=True)
        published = RunEvent.objects.filter(agent_id=agent_id, thread_id__in=pks)
        snapshots = ThreadRun.objects.filter(agent_id=agent_id, thread_id__in=pks).exclude(snapshot=None)
        if not (fresh.exists() or published.exists() or snapshots.exists()):
            return counts_zero()
        return _threads_redact(agent_id=agent_id, thread_pks=pks, actor=actor)


def _threads_redact(*, agent_id: int, thread_pks: list[int], actor: str) -> dict[str, int]:
    """Redact every entry of a batch of threads (events deleted); the threads and their tree stay."""
    agent = Agent.objects.get(pk=agent_id)
    counts = counts_zero()
    ids = list(
        Entry.objects.filter(agent=agent, thread_id__in=thread_pks, redacted_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    # Batches of entries, each its own transaction (`entries_forget` is one).
    for start in range(0, len(ids), 500):
        counts_add(
            counts,
            entries_forget(
                agent=agent,
                entry_ids=ids[start : start + 500],
                redact=True,
                keep_replies=True,
                actor=actor,
                because="person",
            ),
        )
    # What their runs published (the model's deltas, snapshots of the conversation) holds their
    # words as the entries do: the ledger's events go, and each run's latest snapshot.
    with transaction.atomic():
        RunEvent.objects.filter(agent=agent, thread_id__in=thread_pks).delete()
        cleared = ThreadRun.objects.filter(agent=agent, thread_id__in=thread_pks).exclude(snapshot=None)
        SubjectMention.objects.filter(
            agent=agent,
            table=SubjectMention.Table.THREAD_RUN,
            row_id__in=[str(pk) for pk in cleared.values_list("pk", flat=True)],
        ).delete()  # a run without its snapshot names no one (the trigger of migration 0055 sees deletes only)
        cleared.update(snapshot=None, snapshot_seq=None)
    return counts


# --- items, entities, files, jobs -----------------------------------------------------------------


@atomic_retrying
def _items_erase(*, agent_id: int, item_ids: list[str], actor: str) -> dict[str, int]:
    """Delete a batch of the person's items (facts among them) with their evidence and reviews."""
    agent = Agent.objects.get(pk=agent_id)
    counts = counts_zero()
    items = list(
        MemoryItem.objects.select_for_update()
        .filter(agent=agent, pk__in=item_ids)
        .order_by("pk")
        .only("id", "user_id", "project_id", "thread_id", "subject", "attribute", "status", "entity_id", "embedding")
    )
    if not items:
        return counts
    pks = [i.pk for i in items]
    counts["vectors"] += sum(1 for i in items if i.embedding is not None)
    counts["facts"] += sum(1 for i in items if i.attribute.startswith("core:"))
    for model in (Evidence, ItemReview):
        related = model.objects.filter(item_id__in=pks)
        related._raw_delete(related.db)
    doomed = MemoryItem.objects.filter(pk__in=pks)
    counts["items_purged"] += doomed._raw_delete(doomed.db)
    # A slot keeping items that were not erased (a state an erased one had closed holds again) is
    # laid out anew; the person's own slots went whole.
    slots = {
        (i.user_id, i.project_id, i.thread_id, i.subject, i.attribute)
        for i in items
        if i.status in (ItemStatus.ACTIVE, ItemStatus.SUPERSEDED)
    }
    surviving = set(
        MemoryItem.objects.filter(
            agent=agent,
            user_id__in={s[0] for s in slots},
            attribute__in={s[4] for s in slots},
            subject_hash__in={h for s in slots for h in equality_values(agent_id=agent.pk, text=s[3])},
            status__in=(ItemStatus.ACTIVE, ItemStatus.SUPERSEDED),
        ).values_list("user_id", "project_id", "thread_id", "subject", "attribute")
    )
    alive = {(u, p, t, normalized_name(s), a) for u, p, t, s, a in surviving}
    for user_id, project_id, thread_id, subject, attribute in sorted(slots):
        if (user_id, project_id, thread_id, normalized_name(subject), attribute) not in alive:
            continue
        slot_layout(agent=agent, scope=Scope(user_id, project_id, thread_id), subject=subject, attribute=attribute)
    named = derived_files_forget(agent=agent, item_ids=pks)
    entity_ids = {i.entity_id for i in items if i.entity_id}
    counts["entities"] += entities_unused_delete(agent=agent, entity_ids=entity_ids)
    counts["playbook_rules"] += named.playbook_rules_removed
    counts["file_versions"] += named.versions_redacted
    audit_append(
        action="person.erase.items",
        actor=actor,
        agent_id=agent.pk,
        subject=f"{len(pks)} items",
        outcome="deleted",
        details={"item_ids": pks[:50], **{k: v for k, v in counts.items() if v}},
    )
    return counts


@transaction.atomic
def _entities_erase(*, user_id: str, agent_id: int) -> dict[str, int]:
    counts = counts_zero()
    # The graph's edges of the person's scope; those about the person's entities go with them.
    scope_relations_delete(agent_id=agent_id, user_id=user_id)
    entities = _entities(user_id, [agent_id])
    entity_relations_delete(agent_id=agent_id, entities=entities)
    MemoryItem.objects.filter(entity__in=entities).update(entity=None)
    counts["entities"] = entities.delete()[0]
    return counts


@atomic_retrying
def _files_erase(*, agent_id: int, version_ids: list[str], mode: str, actor: str) -> dict[str, int]:
    """Delete (erase) or redact a batch of the person's file versions; a redacted file is then deleted."""
    counts = counts_zero()
    versions = MemoryFileVersion.objects.filter(agent_id=agent_id, pk__in=version_ids)
    locked = list(versions.select_for_update().order_by("pk").values_list("pk", flat=True))
    if not locked:
        return counts
    if mode == "erase":
        # Items quoting lines of them (another scope's, the agent's) lose those quotes first, as a
        # redacted version's do: the raw delete leaves no quote pointing at a deleted version.
        counts["items_purged"] += versions_quotes_forget(version_ids=locked)
        MemoryFileVersion.objects.filter(previous_id__in=locked).update(previous=None)
        counts["file_versions"] = versions._raw_delete(versions.db)
    else:
        agent = Agent.objects.get(pk=agent_id)
        files_lock(FileAccess(agent=agent))
        counts["file_versions"] = versions_redact(versions)
        redacted_heads_delete(agent=agent, version_ids=locked, actor=actor)
    audit_append(
        action="person.erase.files",
        actor=actor,
        agent_id=agent_id,
        subject=f"{len(locked)} file versions",
        outcome="deleted" if mode == "erase" else "redacted",
        details={"file_versions": counts["file_versions"]},
    )
    return counts


def _jobs_scrub(runs: QuerySet[JobRun]) -> int:
    """Replace the arguments and result of these job runs by a mark: they named the person."""
    mark = {"erased": True}
    # A run's result is sealed under its agent's key (sealed_update: one UPDATE per agent).
    return sealed_update(runs, arguments=mark, result=mark)
