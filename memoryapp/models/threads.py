from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex, GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Case, F, Value, When
from django.db.models.functions import Now
from pgvector.django import HnswIndex, VectorField

from governance.audit.pseudonyms import pseudonym_names
from governance.crypto.fields import (
    BlindIndexField,
    KeyPeopleField,
    PairIndexField,
    SealedJSONField,
    SealedMetadataField,
    SealedTextField,
)
from governance.crypto.keyring import encryption_enabled
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.choices import EntryType, OnBusy, Role
from memoryapp.models.people import thread_participants


def new_entry_id() -> str:
    return new_id("ent")


def participants_stored(*, agent_id: int | None, metadata: Any) -> list[str]:
    """What a thread's `participants` column holds for its metadata's `memoryUserIds`: each person's
    keyed pseudonym with encryption on (their erasure deletes its secret), the ids with it off."""
    people = list(dict.fromkeys(thread_participants(metadata)))
    if not people or not encryption_enabled():
        return people
    return [pseudonym_names(agent_id=agent_id, user_id=person)[person] for person in people]


class Thread(models.Model):
    """A conversation of one agent about one person, stored as a tree of entries."""

    # Indexed by thread_agent_external_id_uniq, which leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads", db_index=False)
    # The id the agent knows the thread by: unique per agent, so two agents never collide.
    external_id = models.CharField(max_length=128)
    user_id = models.CharField(max_length=128, blank=True, default="")
    # What the agent put there: sealed at rest when encryption is on (under `encryption_owner`'s
    # key), so nothing in SQL reads inside it. What SQL needs of it has columns of its own, made from
    # it on every save (`save`): `metadata_hashes` (the list filter) and `participants`.
    metadata = SealedMetadataField(default=dict, blank=True)
    # With encryption on, the keyed hashes of the metadata's top-level key/value pairs (the agent's
    # blind key): what the list's metadata filter matches (memoryapp.threads.selectors.threads_list).
    # Null with encryption off, where the plaintext JSON is filtered.
    metadata_hashes = PairIndexField(source="metadata")
    # The people the metadata lists as taking part (`memoryUserIds`): with encryption on each by
    # their keyed pseudonym (governance.audit.pseudonyms), which their erasure makes unlinkable; the
    # ids with it off. What a person's erasure finds the threads naming them among participants by.
    participants = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    # The person whose words the metadata holds when that is not the thread's person ("" otherwise):
    # a fork's copy keeps its origin's (the fork may be handed to someone else). What the metadata is
    # sealed under (encryption_owner), so that person's erasure shreds every old copy of it.
    words_of = models.CharField(max_length=128, blank=True, default="", db_default="")
    # The registered people its metadata names besides the person it is sealed under (a landlord's
    # name in Carl's thread): their keys seal it too (governance.crypto.fields.KEY_PEOPLE), so the
    # erasure of any of them shreds its old copies. Set from the metadata by the writers
    # (memoryapp.subjects.detect.thread_key_people_set); saved with the metadata (`save`).
    key_people = KeyPeopleField()
    # The services move the leaf before they delete entries, so it never points at a missing one.
    active_leaf = models.ForeignKey(
        "Entry", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    # The next seq to hand out; advanced under the thread's row lock by entry_add.
    next_seq = models.BigIntegerField(default=1)
    # 0 while the entries form one chain ending at the leaf (the active branch is the whole thread).
    # Each write that changes which entries are off the active branch (a branch, a rewind, a
    # checkout) adds one; plain appends at the leaf do not, so what is off the branch can be cached
    # per (thread, branch_epoch).
    branch_epoch = models.PositiveIntegerField(default=0)
    # Extraction's high-water mark {"through_seq", "failed"} (memoryapp.extraction.services): kept
    # apart from the agent's metadata, which an agent may replace at any time.
    extraction = models.JSONField(default=dict, blank=True)
    # 001's `/memory on|off`: off, nothing is extracted from the thread and nothing recalled into its
    # contexts (memoryapp.threads.memory_switch). The turns written while it was off stay out of
    # extraction for good: their seq ranges are kept in `extraction["memory_off"]`.
    memory_enabled = models.BooleanField(default=True)
    # The thread's own 002 `onBusy` / `busyTimeoutSecs` ("" / null: the agent's).
    on_busy = models.CharField(max_length=10, choices=OnBusy.choices, blank=True, default="")
    busy_timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    # The thread's own automatic compaction settings, over its agent's (CompactionSettings): only the
    # keys given. A column of its own, not metadata, which the agent may replace at any time.
    compaction = models.JSONField(default=dict, blank=True)
    # Tokens of the active branch as the model sees it (compactions applied), kept by the appends so
    # the automatic compaction check costs no read of the branch. Null: not known (a new branch,
    # a compaction, a checkout); the next check counts it (memoryapp.compaction.auto).
    history_tokens = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "external_id"], name="thread_agent_external_id_uniq"),
        ]
        indexes = [
            # threads_list: newest updated first within an agent, keyset paging on (updated_at, id).
            models.Index(fields=["agent", "-updated_at", "-id"], name="thread_agent_updated_idx"),
            # threads_list(user_id=...), erasure by person.
            models.Index(fields=["agent", "user_id"], name="thread_agent_user_idx"),
            # threads_list(metadata=...) with encryption off: JSONB containment of the plaintext.
            GinIndex(fields=["metadata"], name="thread_metadata_gin", opclasses=["jsonb_path_ops"]),
            # ... with encryption on: the pairs' keyed hashes.
            GinIndex(
                fields=["metadata_hashes"],
                name="thread_metadata_hashes_gin",
                condition=models.Q(metadata_hashes__isnull=False),
            ),
            # a person's erasure: the threads listing them among their participants.
            GinIndex(fields=["participants"], name="thread_participants_gin"),
            # the erasure: the threads sealed under a person's key among others (`key_people @> {id}`).
            GinIndex(fields=["key_people"], name="thread_key_people_gin", condition=models.Q(key_people__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.external_id

    def save(self, *args: Any, **kwargs: Any) -> None:
        """The columns made from the metadata follow it: a save of the metadata saves them too."""
        self.participants = participants_stored(agent_id=self.agent_id, metadata=self.metadata)
        fields = kwargs.get("update_fields")
        if fields is not None and "metadata" in fields:
            kwargs["update_fields"] = {*fields, "metadata_hashes", "participants", "key_people"}
        super().save(*args, **kwargs)

    def encryption_owner(self) -> tuple[int | None, str]:
        """The metadata is sealed under the key of the person whose words it holds: `words_of` (a
        fork's copy of another person's thread), else the thread's person; the agent's own for a
        thread about no one."""
        return (self.agent_id, self.words_of or self.user_id)

    @property
    def branched(self) -> bool:
        return self.branch_epoch > 0

    @property
    def project_scope(self) -> str:
        """The project the thread belongs to (its `metadata.project_id`, "" for none): extraction
        writes the thread's items in it, and the thread's context and search read them there."""
        return str((self.metadata or {}).get("project_id") or "")[:128]


class Entry(models.Model):
    """A node of a thread's tree: a message, a tool result, or a session event."""

    id = models.CharField(max_length=40, primary_key=True, default=new_entry_id, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # Both indexed by the Meta's indexes (entry_thread_seq_uniq leads with the thread, entry_parent_idx):
    # not twice, each index is written on every append and every embedding (issue 26).
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="entries", db_index=False)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="children", db_index=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=20, choices=EntryType.choices, default=EntryType.MESSAGE)
    role = models.CharField(max_length=20, choices=Role.choices, blank=True, default="")
    # Text, or a list of content blocks ({"type": "text", "text": ...}, {"type": "image", ...}).
    # Content, text and tool calls are sealed at rest when encryption is on (governance.crypto).
    content = SealedJSONField(null=True, blank=True)
    # The plain text of the content (text blocks, tool results), for keyword search and quotes.
    text = SealedTextField(blank=True, default="")
    tool_calls = SealedJSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    tool_name = models.CharField(max_length=200, blank=True, default="")
    # Sealed at rest when encryption is on (a name is personal); at most 200 characters (the API's
    # check). Keyword search's name match reads `sender_name_hashes` then.
    sender_name = SealedTextField(blank=True, default="")
    token_count = models.IntegerField(default=0)
    # A session event's payload: a compaction's summary, levels and atoms, the placeholders of the
    # tool results it cleared. Sealed at rest when encryption is on, like the content.
    event = SealedJSONField(null=True, blank=True)
    # What the writer put there (agent-supplied JSON): sealed at rest when encryption is on, like the
    # content, so nothing in SQL reads inside it. What SQL needs of it has columns of its own, set
    # from it when the entry is made (memoryapp.threads.validation.entry_from_spec): `sender`
    # (`metadata.userId`) and `fork_of` (`metadata.forkOf`).
    metadata = SealedMetadataField(default=dict, blank=True)
    # The person who wrote a user message (its `metadata.userId`, the one rule:
    # memoryapp.models.people.message_sender), "" for none: who it is sealed under, and what the
    # erasure, the export and the subject index find a person's messages by (`sent_by`). In clear,
    # as the row's owner (`user_id`, `words_of`) is: docs/security.md "Whose key seals a row".
    sender = models.CharField(max_length=128, blank=True, default="", db_default="")
    # A fork's copy: the id of the entry it copies (its `metadata.forkOf`), "" for the others.
    fork_of = models.CharField(max_length=40, blank=True, default="", db_default="")
    created_at = models.DateTimeField()
    # When this service stored the entry (the database's clock), whatever `created_at` the client
    # gave (an import of 2023's conversation is stored today). Null for entries stored before the
    # column existed: their `created_at` is all that is known of them.
    stored_at = models.DateTimeField(null=True, blank=True, db_default=Now(), editable=False)
    # 000's hashNode: sha256 over parent, content and creation time, first 32 hex digits.
    content_hash = models.CharField(max_length=32)
    redacted_at = models.DateTimeField(null=True, blank=True)
    # Held by screening (memoryapp.screening): stored, but kept out of search, context, extraction
    # and embedding until a reviewer releases it (null again) or deletes it.
    held_at = models.DateTimeField(null=True, blank=True)
    # The person whose words the entry holds when that is neither its sender nor its thread's person
    # ("" otherwise): a fork's copy keeps its original's (the copy may be handed to someone else), a
    # summary of one other person's turns takes theirs, a tool result naming one registered person
    # (other than the thread's) takes theirs. What it is sealed under (encryption_owner), so that
    # person's erasure shreds every old copy of it; docs/security.md "Whose key seals a row".
    words_of = models.CharField(max_length=128, blank=True, default="", db_default="")
    # The people besides that one whose keys seal the entry too (registered people it names, found
    # at write by memoryapp.subjects.detect; the people of the turns a summary covers): destroying
    # any of their keys shreds every old copy of it (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()
    # Empty for a sealed text: with encryption on, keyword search reads `keyword_hashes` instead.
    search_vector = models.GeneratedField(
        expression=SearchVector(
            Case(
                When(text__startswith=SEALED_PREFIX, then=Value("")), default=F("text"), output_field=models.TextField()
            ),
            config="english",
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # The blind index of `text` (keyed hashes of its words) when encryption is on; null when off.
    keyword_hashes = BlindIndexField(source="text")
    # The blind index of `sender_name` (its words' keyed hashes) when encryption is on; null when
    # off: keyword search's name match (a name the question says is held by what that person said).
    sender_name_hashes = BlindIndexField(source="sender_name")
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "entries"
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="entry_thread_seq_uniq"),
        ]
        indexes = [
            # entries_list / path walks: a thread's entries in seq order.
            # (covered by entry_thread_seq_uniq)
            # entry_children: splicing on delete, tree rendering.
            models.Index(fields=["parent"], name="entry_parent_idx"),
            # keyword search: full-text over the entry text. The thread id is a key of the same GIN
            # index (btree_gin): a search within a thread intersects the thread's rows with the
            # words' in the index, instead of reading every row of the table holding the words and
            # then filtering by thread (which grew with the agent's other threads: issue 26). A
            # search without a thread reads the words' keys alone, as from a one-column index.
            # A small pending list: every lookup reads the whole list of rows not merged into the
            # index yet, so the default 4 MB made keyword reads 10-25 ms after a burst of writes.
            GinIndex(fields=["thread", "search_vector"], name="entry_search_thread_gin", gin_pending_list_limit=256),
            # keyword search with encryption on: the blind index (memoryapp.search.keyword).
            GinIndex(
                fields=["keyword_hashes"],
                name="entry_keyword_hashes_gin",
                gin_pending_list_limit=256,
                condition=models.Q(keyword_hashes__isnull=False),
            ),
            # vector search: cosine distance over embedded entries.
            HnswIndex(
                name="entry_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            # context builder: the newest compaction of a thread before the part of it read.
            models.Index(
                fields=["thread", "-seq"],
                name="entry_compaction_idx",
                condition=models.Q(type="compaction"),
            ),
            # embedding job: entries still to embed.
            models.Index(
                fields=["agent", "seq"],
                name="entry_unembedded_idx",
                condition=models.Q(embedding__isnull=True, redacted_at__isnull=True),
            ),
            # the subject index's senders (memoryapp.models.people.sent_by): the messages one person
            # wrote, in the erasure, the export and a person's page.
            # Partial: only the messages that name a sender (most turns do not) pay for it on write;
            # `sent_by` states the condition, so the planner can use it.
            models.Index(fields=["agent", "sender"], name="entry_sender_column_idx", condition=~models.Q(sender="")),
            # the erasure: the entries sealed under a person's key among others (`key_people @> {id}`).
            GinIndex(fields=["key_people"], name="entry_key_people_gin", condition=models.Q(key_people__isnull=False)),
            # the review queue's held entries (memoryapp.screening.review).
            models.Index(fields=["agent", "held_at"], name="entry_held_idx", condition=models.Q(held_at__isnull=False)),
            # admin overview: entries written per agent per day over 30 days (rows arrive in time
            # order, so a block range index is tiny and skips everything older).
            BrinIndex(fields=["created_at"], name="entry_created_brin"),
            # ... counted by when they were stored (see stored_at): the same kind of index.
            BrinIndex(fields=["stored_at"], name="entry_stored_brin"),
        ]

    def __str__(self) -> str:
        return self.id

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the data key of the person whose words it holds (governance.crypto.envelope):
        a user message's sender when it names one (`message_sender`, the one rule), so a person's
        message in another person's thread is shredded with them; else the person `words_of` names
        (a fork's copy, a summary, a tool result quoting someone); otherwise the thread's person."""
        return (self.agent_id, self.words_person())

    def words_person(self, *, thread_person: str | None = None) -> str:
        """Whose words the entry holds: a user message's sender (`message_sender`), else `words_of`,
        else the thread's person ("" for a thread about no one; `thread_person` when the caller
        knows it, so the thread is not read)."""
        sender = self.sender if self.role == Role.USER else ""
        if sender or self.words_of:
            return sender or self.words_of
        return self.thread.user_id if thread_person is None else thread_person


class HeldEntry(Entry):
    """An entry screening held (memoryapp.screening), as reviewers release or delete it."""

    class Meta:
        proxy = True
        verbose_name = "held entry"
        verbose_name_plural = "held entries"
        permissions = [("release_heldentry", "Can release an entry screening held")]
