from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from governance.audit.pseudonyms import pseudonyms_of
from governance.crypto.fields import EqualityHashField, SealedTextField
from memoryapp.models.agents import Agent


class IdentifierKind(models.TextChoices):
    EMAIL = "email"
    PHONE = "phone"
    NAME = "name"
    EXTERNAL_ID = "external_id"


def identifier_key(kind: str, value: str) -> str:
    """What `PersonIdentifier.lookup` holds for a normalised value (hashed when encryption is on):
    the kind and the value, so an external id never matches a name spelled the same."""
    return f"{kind}:{value}"


class PersonIdentifier(models.Model):
    """One identifier of a person an agent's memory is about (memoryapp.screening.identifiers).

    `value` is normalised (e-mail lower-cased, phone in E.164, a name case- and accent-folded) and
    sealed at rest under the person's data key, so destroying that key leaves it unreadable;
    `lookup` is `kind:value` as an equality column (a keyed hash under the agent's blind key when
    encryption is on): screening finds a registered person in a text by hashing what it read
    there, never by reading identifiers back.
    """

    # Indexed by person_identifier_uniq and person_identifier_lookup_idx, which lead with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=12, choices=IdentifierKind.choices)
    value = SealedTextField()
    lookup = EqualityHashField(max_length=300, source="value", kept="lookup_kept")
    # With encryption on, the `kind:value` that `lookup` hashes, sealed: a key rotation hashes it
    # again (governance.crypto.fields.EqualityHashField); "" with encryption off.
    lookup_kept = SealedTextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    # Given only with the person's erasure (`POST /users/{id}/forget` `identifiers`, a staff
    # request's other identifiers), not registered: kept, sealed as the rest, for the erasure's
    # span only, so writers find her by it and a resume of the erasure interrupted uses it
    # (memoryapp.subjects.erasing); not listed as registered; goes with her erasure.
    given = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "user_id", "lookup"], name="person_identifier_uniq"),
        ]
        indexes = [
            # screening: which registered identifiers of the agent a text holds (lookup IN hashes).
            models.Index(fields=["agent", "lookup"], name="person_identifier_lookup_idx"),
            # (the identifiers of one person, for GET, PUT and the erasure, are read by the unique
            # constraint, which leads with agent and user_id.)
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.user_id}"

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the data key of the person it identifies (governance.crypto.envelope)."""
        return (self.agent_id, self.user_id)


class ErasureMark(models.Model):
    """A person being erased in an agent (memoryapp.subjects.erasing): set before the erasure's
    first step, deleted past its last, so one left behind is an erasure interrupted, which the
    resume sweep or the staff request finishes (governance.erasure.resume). A row of its own, not a
    column of her identifiers: a person with no identifier, registered or given, is marked too.

    A write naming her (by an identifier) stores the placeholder instead, except in the index's
    tables kept (`keeps`: the groups the officer excluded that are tables). `mode` ("erase" or "redact") is the
    erasure's: an erasure interrupted with no request to run it again (an agent's `forget`) is
    finished in it. `since`: when she was first marked (a run again keeps it)."""

    # Indexed by erasure_mark_uniq, which leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    since = models.DateTimeField()
    keeps = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    mode = models.CharField(max_length=8, default="erase")
    # The erasure's choices, all of them, so a resume does what its first run would have done
    # (governance.erasure.resume): `mentions` ("redact" or "keep"; "" on a mark written before
    # they were kept, 0064) and every group excluded, the index's tables and the others
    # (participants lists), each with the reason recorded ({"participants": "legal_claims"}; ""
    # when none is recorded).
    mentions = models.CharField(max_length=8, blank=True, default="")
    excluded = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "user_id"], name="erasure_mark_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} being erased ({self.mode})"


# --- who wrote a message, who took part in a thread (one rule, docs/governance.md "Who a row is about")

# The one place a message says which person wrote it (004 `userId`): an entry's `metadata.userId`.
# Extraction's trust, the erasure, the export and the subject index all read it through
# `message_sender` / `sent_by`; no other key (`user_id`, `sender_id`) names a writer.
MESSAGE_USER_KEY = "userId"
# Where a thread lists the people who took part in it (004 MEMORY_USERS_KEY): `metadata.memoryUserIds`.
MEMORY_USERS_KEY = "memoryUserIds"
# Where a fork's copy of an entry names the entry it copies (004 `forkOf`): `metadata.forkOf`, kept
# in the entry's `fork_of` column too (the metadata is sealed at rest when encryption is on).
FORK_OF_KEY = "forkOf"


def message_sender(metadata: Any) -> str:
    """The person who wrote a message, from its metadata ("" when it names none)."""
    if isinstance(metadata, dict) and isinstance(writer := metadata.get(MESSAGE_USER_KEY), str):
        return writer
    return ""


def thread_participants(metadata: Any) -> list[str]:
    """The people a thread's metadata lists as taking part in it (`memoryUserIds`), ids only."""
    people = metadata.get(MEMORY_USERS_KEY) if isinstance(metadata, dict) else None
    if not isinstance(people, list):
        return []
    return [person for person in people if isinstance(person, str)]


def sent_by(user_id: str, *, prefix: str = "") -> Q:
    """The messages this person wrote, as a filter on entries (`prefix` for a related entry): the
    entry's `sender` column, set from `metadata.userId` when it was written (the metadata itself
    is sealed at rest when encryption is on)."""
    return Q(**{f"{prefix}sender": user_id}) & ~Q(**{f"{prefix}sender": ""})


def participant_in(user_id: str, *, agent_id: int, prefix: str = "") -> Q:
    """The threads of the agent whose participants list names this person, as a filter on threads:
    their `participants` column holds the id (encryption off) or the person's pseudonym (on; none
    once their secret is gone, governance.audit.pseudonyms)."""
    names = [user_id, *pseudonyms_of(agent_id=agent_id, user_id=user_id, values=[user_id])]
    return Q(**{f"{prefix}agent_id": agent_id, f"{prefix}participants__overlap": names})


class SubjectMention(models.Model):
    """The subject index's mentions (memoryapp.subjects): a stored row that names a person by one of
    their identifiers (registered, or given with their erasure) without being theirs.

    The other two relations of the index are columns the rows already carry, indexed: the owner
    (`user_id` of a thread, item, entity, file version) and the sender (`sender` of an
    entry, `entry_sender_column_idx`). A mention has no such column, so it is recorded here, rebuilt by
    `subject_index_rebuild` (a job after the person's identifiers change, and by every erasure and
    export before they read it).

    `row_id` points into one of several tables, so no foreign key can take a mention with its row:
    a trigger on each table of the index does (migration 0055), after every DELETE statement, in its
    transaction, whatever deleted it (a service, the admin, a raw bulk delete, a database cascade).
    """

    class Table(models.TextChoices):
        ENTRY = "entry"
        THREAD = "thread"
        ITEM = "item"
        ENTITY = "entity"
        EVIDENCE = "evidence"
        FILE_VERSION = "file_version"
        JOB_RUN = "job_run"
        RELATION_EVIDENCE = "relation_evidence"
        KNOWLEDGE_DOCUMENT = "knowledge_document"
        # The run ledger (memoryapp.ledger): an event's body, a run's latest snapshot.
        RUN_EVENT = "run_event"
        THREAD_RUN = "thread_run"

    # Indexed by subject_mention_uniq, which leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    table = models.CharField(max_length=20, choices=Table.choices)
    row_id = models.CharField(max_length=40)
    found_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "user_id", "table", "row_id"], name="subject_mention_uniq"),
        ]
        indexes = [
            # (erasure and export read the rows that mention one person, agent + user_id + table, by
            # the unique constraint, which leads with those three columns.)
            # a row deleted (the trigger of migration 0055) or written again (`mentions_record`'s
            # replace): its mentions, whoever they name (table, row_id).
            models.Index(fields=["table", "row_id"], name="subject_mention_row_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.table} {self.row_id} mentions {self.user_id}"
