from __future__ import annotations

import re
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex, GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Case, F, OuterRef, Q, Subquery, Value, When
from django.db.models.expressions import Expression
from django.db.models.functions import Coalesce, NullIf
from pgvector.django import HnswIndex, VectorField

from governance.crypto.fields import (
    OWNER_PERSON,
    BlindIndexField,
    EqualityHashField,
    KeyPeopleField,
    SealedJSONField,
    SealedMetadataField,
    SealedTextField,
    ValueHashField,
    equality_values,
)
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.choices import EvidenceStatus, ItemKind, ItemStatus, Trust
from memoryapp.models.threads import Entry, Thread


def new_item_id() -> str:
    return new_id("mem")


def new_entity_id() -> str:
    return new_id("nty")


_SPACE = re.compile(r"\s+")


def name_normalized(name: str) -> str:
    """The name an entity is matched on: lower-cased, spacing collapsed (memoryapp.items.rules)."""
    return _SPACE.sub(" ", name or "").strip().lower()


# The metadata keys the service reads itself (memoryapp.items.rules, memoryapp.items.services):
# an end the writer gave, and a stale mark with who set it.
VALID_UNTIL_KEY = "valid_until"
STALE_BECAUSE_KEY = "stale_because"


def subject_lookup(*, agent_id: int | None, subject: str) -> Q:
    """The items of the agent whose subject is exactly `subject`, by its hash (`subject_hash`): the
    hash under the agent's blind key, or the subject itself for a row written before encryption
    was turned on and not yet hashed by the rotation (encryption_rotate)."""
    return Q(subject_hash__in=equality_values(agent_id=agent_id, text=subject))


def scope_person_sql(prefix: str = "") -> Expression:
    """Scoped.scope_person in SQL, for the scope reached through `prefix` ("item__": a quote's
    item's): `user_id`, else the person of the thread `thread_id` names ("" for none)."""
    thread_person = Thread.objects.filter(
        agent_id=OuterRef(f"{prefix}agent_id"), external_id=OuterRef(f"{prefix}thread_id")
    ).values("user_id")[:1]
    return Case(
        When(
            Q(**{f"{prefix}user_id": ""}) & ~Q(**{f"{prefix}thread_id": ""}),
            then=Coalesce(Subquery(thread_person), Value("")),
        ),
        default=F(f"{prefix}user_id"),
        output_field=models.CharField(),
    )


def item_person_sql(prefix: str = "") -> Expression:
    """MemoryItem.encryption_owner's person in SQL: `words_of`, else the scope's person."""
    return Coalesce(NullIf(F(f"{prefix}words_of"), Value("")), scope_person_sql(prefix))


def entry_person_sql(prefix: str = "") -> Expression:
    """Entry.words_person in SQL, for the entry reached through `prefix`: a user message's sender
    (its `sender` column, `metadata.userId`), else `words_of`, else its thread's person."""
    sender = Case(
        When(Q(**{f"{prefix}role": "user"}), then=F(f"{prefix}sender")),
        default=Value(""),
        output_field=models.CharField(),
    )
    return Coalesce(
        NullIf(sender, Value("")),
        NullIf(F(f"{prefix}words_of"), Value("")),
        F(f"{prefix}thread__user_id"),
        output_field=models.CharField(),
    )


class Scoped(models.Model):
    """The scope of a piece of memory: its agent, and optionally a person, a project, a thread.

    "" means "not limited to one" (NULL would make uniqueness and equality awkward).
    """

    # No index of its own: every scoped table has a composite index or unique constraint that leads
    # with the agent (a one-column copy was one more index to write on every insert, issue 26).
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128, blank=True, default="")
    project_id = models.CharField(max_length=128, blank=True, default="")
    thread_id = models.CharField(max_length=128, blank=True, default="")  # the thread's external id

    class Meta:
        abstract = True

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the data key of the scope's person (governance.crypto): its `user_id`, or
        for a row scoped to a thread only, the thread's person (what Ana's thread holds is hers:
        erasing her shreds it too); "" (the agent's own key) for rows about no one."""
        annotated: str | None = getattr(self, OWNER_PERSON, None)
        return (self.agent_id, annotated if annotated is not None else self.scope_person())

    @classmethod
    def encryption_owner_person(cls) -> Expression:
        """encryption_owner's person in SQL (governance.crypto.fields.OWNER_PERSON)."""
        return scope_person_sql()

    def scope_person(self) -> str:
        """The person the scope is about: `user_id`, else the person of the thread `thread_id`
        names (looked up once per row and scope)."""
        if self.user_id or not self.thread_id:
            return self.user_id
        key = (self.agent_id, self.thread_id)
        known: tuple[tuple[int, str], str] | None = getattr(self, "_scope_person", None)
        if known is not None and known[0] == key:
            return known[1]
        person = (
            Thread.objects.filter(agent_id=self.agent_id, external_id=self.thread_id)
            .values_list("user_id", flat=True)
            .first()
        ) or ""
        self._scope_person = (key, person)
        return person


class Entity(Scoped):
    """Who or what memory items are about."""

    id = models.CharField(max_length=40, primary_key=True, default=new_entity_id, editable=False)
    # Sealed at rest when encryption is on (governance.crypto), under the person's key.
    name = SealedTextField()
    # Lower-cased, spacing collapsed: the name items are matched on (and unique per scope). With
    # encryption on, its keyed hash (governance.crypto.fields.EqualityHashField): lookups compare
    # with `equality_value(agent_id=..., text=name_normalized(name))`.
    normalized_name = EqualityHashField(
        max_length=300, source="name", normalize=name_normalized, kept="normalized_name_kept"
    )
    # With encryption on, the normalised name `normalized_name` hashes, sealed: a rotation with new
    # keys hashes it again (the name itself may have been renamed since, keeping the match); ""
    # with encryption off, where the column holds it in clear.
    normalized_name_kept = SealedTextField(blank=True, default="")
    aliases = SealedJSONField(default=list, blank=True)
    # The registered people its name or aliases name besides its scope's person (an agent-wide
    # entity about one of them): their keys seal it too (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "entities"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "user_id", "project_id", "thread_id", "normalized_name"],
                name="entity_scope_name_uniq",
            ),
        ]
        indexes = [
            # the entities of one thread's scope, whoever they are about (a thread's delete takes them).
            models.Index(fields=["agent", "thread_id"], name="entity_thread_scope_idx", condition=~Q(thread_id="")),
            # the erasure: the entities sealed under a person's key among others.
            GinIndex(fields=["key_people"], name="entity_key_people_gin", condition=Q(key_people__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.name


class MemoryItem(Scoped):
    """One thing a conversation established, with its quotes, trust and times (bitemporal)."""

    id = models.CharField(max_length=40, primary_key=True, default=new_item_id, editable=False)
    kind = models.CharField(max_length=20, choices=ItemKind.choices, default=ItemKind.FACT)
    entity = models.ForeignKey(Entity, null=True, blank=True, on_delete=models.SET_NULL, related_name="items")
    # Who or what the item is about (an entity's name, a fact's namespace): sealed at rest when
    # encryption is on, as the value is (under the item's key: its person's, or its key set), so
    # nothing in SQL reads it; what SQL compares it by is `subject_hash`.
    subject = SealedTextField(blank=True, default="")
    # The subject's keyed hash under the agent's blind key with encryption on, the subject itself
    # with it off, made on every save (governance.crypto.fields.ValueHashField): the slot's lookups
    # (`item_slot_idx`) compare it, with `subject_lookup(agent_id=..., subject=...)`.
    subject_hash = ValueHashField(max_length=300, blank=True, default="", db_default="", source="subject")
    attribute = models.CharField(max_length=300, blank=True, default="")
    # The value and a fact's JSON value are sealed at rest when encryption is on (governance.crypto),
    # under the data key of the item's person; the attribute stays plaintext.
    value = SealedTextField()
    # Facts (002) keep any JSON value; `value` holds its text for search and display.
    value_json = SealedJSONField(null=True, blank=True)
    # Facts live in a namespace such as "users/42"; "" for other items.
    namespace = models.CharField(max_length=500, blank=True, default="")
    trust = models.CharField(max_length=10, choices=Trust.choices, default=Trust.MODEL)
    status = models.CharField(max_length=12, choices=ItemStatus.choices, default=ItemStatus.SUGGESTED)
    confidence = models.FloatField(default=0.5)
    verified = models.BooleanField(default=False)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField()
    # When the state entered its slot's timeline (active on writing, or approved by a reviewer later):
    # "what did the agent know at T" counts it from here, not from recorded_at. Null while suggested.
    activated_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    # Facts with a time to live: invisible from then on, removed by the prune job.
    expires_at = models.DateTimeField(null=True, blank=True)
    times_retrieved = models.IntegerField(default=0)
    last_retrieved_at = models.DateTimeField(null=True, blank=True)
    prompt_version = models.CharField(max_length=40, blank=True, default="")
    # The person whose words the item was drawn from when that is not its scope's person ("" otherwise):
    # set when every quote it stands on holds one other person's words (their message in another's
    # thread), cleared when a quote of someone else joins. What it is sealed under (encryption_owner).
    words_of = models.CharField(max_length=128, blank=True, default="", db_default="")
    # The people besides that one whose keys seal it too: registered people its texts name (found
    # at write by memoryapp.subjects.detect), the people of its quotes when they are several
    # (governance.crypto.fields.KEY_PEOPLE): destroying any of their keys shreds its old copies.
    key_people = KeyPeopleField()
    # What the writer put there and the service's marks (an end given, a stale mark): sealed at rest
    # when encryption is on, under the item's key (`{}` stays as it is). What SQL reads of the marks
    # has columns of its own, made from it on every save (`save`): `end_given`, `stale_by`.
    metadata = SealedMetadataField(default=dict, blank=True)
    # Whether the writer gave the state an end (`metadata.valid_until`): what memory knew from the
    # start when it replays a past moment (memoryapp.items.selectors.holding_q).
    end_given = models.BooleanField(default=False, db_default=False, editable=False)
    # Who set the item's stale mark (`metadata.stale_because.by`: "dedupe", ...; "" for none): the
    # marks a reviewer may take back are a dedupe pass's (memoryapp.consolidation.selectors).
    stale_by = models.CharField(max_length=20, blank=True, default="", db_default="", editable=False)
    # The purposes the item was collected for (of the agent's `purposes`); empty: any. A recall that
    # names a purpose sees only items of that purpose or of none (memoryapp.items.purposes).
    purposes = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    # The parts of sealed values are empty: with encryption on, keyword search reads the words of the
    # value and the subject from `keyword_hashes` (the attribute stays in here, plaintext).
    search_vector = models.GeneratedField(
        expression=SearchVector(
            Case(
                When(subject__startswith=SEALED_PREFIX, then=Value("")),
                default=F("subject"),
                output_field=models.TextField(),
            ),
            "attribute",
            Case(
                When(value__startswith=SEALED_PREFIX, then=Value("")),
                default=F("value"),
                output_field=models.TextField(),
            ),
            config="english",
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # The blind index of `value` and `subject` (keyed hashes of their words) when encryption is on;
    # null when off.
    keyword_hashes = BlindIndexField(source="value", also=("subject",))
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # items of a slot in one exact scope, laid out by time (supersession, history): the
            # subject by its hash (memoryapp.items.services.slot_items).
            models.Index(
                fields=["agent", "user_id", "project_id", "thread_id", "attribute", "subject_hash", "valid_from"],
                name="item_slot_hash_idx",
            ),
            # review queue and listing: by status within an agent, newest first.
            models.Index(fields=["agent", "status", "-recorded_at"], name="item_agent_status_idx"),
            # what was kept for one thread alone, whoever it is about (a thread's delete purges it).
            models.Index(fields=["agent", "thread_id"], name="item_thread_scope_idx", condition=~Q(thread_id="")),
            # facts: a namespace and those inside it (prefix match).
            models.Index(
                fields=["agent", "namespace"],
                name="item_namespace_idx",
                opclasses=["", "varchar_pattern_ops"],
                condition=~models.Q(namespace=""),
            ),
            # prune job: facts whose time to live ran out.
            models.Index(fields=["expires_at"], name="item_expires_idx", condition=models.Q(expires_at__isnull=False)),
            GinIndex(fields=["search_vector"], name="item_search_gin"),
            # recall with a purpose: the items collected for it (`purposes @> {support}`).
            GinIndex(fields=["purposes"], name="item_purposes_gin"),
            # the erasure: the items sealed under a person's key among others (`key_people @> {id}`).
            GinIndex(fields=["key_people"], name="item_key_people_gin", condition=Q(key_people__isnull=False)),
            # keyword search with encryption on: the blind index of the values (memoryapp.search.keyword).
            GinIndex(
                fields=["keyword_hashes"],
                name="item_keyword_hashes_gin",
                condition=models.Q(keyword_hashes__isnull=False),
            ),
            # admin overview: items stored per agent per day over 30 days (see entry_created_brin).
            BrinIndex(fields=["recorded_at"], name="item_recorded_brin"),
            HnswIndex(
                name="item_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]
        # Letting an item go is taking something away from memory (the privacy officers' job), not a
        # review decision (change_memoryitem, the reviewers'): memoryapp.admin.items.FORGET_PERMISSION.
        permissions = [("forget_memoryitem", "Can let memory items go (forget; their history is kept)")]

    def __str__(self) -> str:
        return f"{self.subject}.{self.attribute} = {self.value[:40]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """The columns made from the metadata and the subject follow them: a save of one saves those."""
        marks = self.metadata if isinstance(self.metadata, dict) else {}
        self.end_given = bool(marks.get(VALID_UNTIL_KEY))
        stale = marks.get(STALE_BECAUSE_KEY)
        self.stale_by = str(stale.get("by") or "")[:20] if isinstance(stale, dict) else ""
        fields = kwargs.get("update_fields")
        if fields is not None:
            fields = set(fields)
            if "metadata" in fields:
                fields |= {"end_given", "stale_by"}
            if fields & {"words_of", "key_people"}:
                # Whose key seals the row changed: every sealed value moves to the new key, or one
                # left out stays under the old one (a person's, destroyed by her erasure).
                fields |= {"subject", "value", "value_json", "metadata"}
            if "subject" in fields:
                fields |= {"subject_hash", "keyword_hashes"}
            kwargs["update_fields"] = fields
        super().save(*args, **kwargs)

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the key of the person whose words it was drawn from (`words_of`) when set,
        else its scope's person (Scoped.encryption_owner)."""
        annotated: str | None = getattr(self, OWNER_PERSON, None)
        if annotated is not None:
            return (self.agent_id, annotated)
        return (self.agent_id, self.words_of or self.scope_person())

    @classmethod
    def encryption_owner_person(cls) -> Expression:
        """encryption_owner's person in SQL (governance.crypto.fields.OWNER_PERSON)."""
        return item_person_sql()


class ItemReview(models.Model):
    """One step of an item's review history: a decision, the undo of one, a forget.

    The audit chain keeps who decided what about which item (ids and outcomes only); this keeps the
    rest a reviewer needs to read later: the value before and after an edit and the reason's text.
    It goes with the item when the item is erased (cascade), content and all.
    """

    class Action(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"
        UNDONE = "undone"
        FORGOTTEN = "forgotten"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # Indexed by itemreview_item_idx, which leads with it.
    item = models.ForeignKey(MemoryItem, on_delete=models.CASCADE, related_name="reviews", db_index=False)
    # One decision may cover several items (a slot's choice, a near-duplicate group, a selection): an
    # undo takes it back whole.
    decision = models.CharField(max_length=40)
    action = models.CharField(max_length=10, choices=Action.choices)
    actor = models.CharField(max_length=200)
    at = models.DateTimeField()
    status_before = models.CharField(max_length=12)
    status_after = models.CharField(max_length=12)
    # Set when the step changed the value (a reviewer's edit, or the undo of one). Sealed at rest
    # as the item's value is, under the item's person's key.
    value_before = SealedTextField(null=True, blank=True)
    value_after = SealedTextField(null=True, blank=True)
    value_json_before = SealedJSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    # Set on an approval or rejection when an undo takes it back: an approval undone was still
    # active from `at` to `undone_at` (what the agent knew then).
    undone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # an item's history, newest step first (item page, undo's "is this still the last step").
            models.Index(fields=["item", "-at"], name="itemreview_item_idx"),
            # undo: the steps of one decision.
            models.Index(fields=["decision"], name="itemreview_decision_idx"),
            # what the agent knew: approvals undone later (few rows).
            models.Index(
                fields=["item", "at", "undone_at"],
                name="itemreview_undone_idx",
                condition=models.Q(undone_at__isnull=False, action="approved"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} {self.action} by {self.actor}"

    # The foreign keys encryption_owner reads the owner through (a thread given to another person
    # moves the rows they lead to: memoryapp.threads.services).
    ENCRYPTION_OWNER_VIA: ClassVar[tuple[str, ...]] = ("item",)

    def encryption_owner(self) -> tuple[int | None, str]:
        """The item's owner (MemoryItem.encryption_owner)."""
        annotated: str | None = getattr(self, OWNER_PERSON, None)
        if annotated is not None:
            return (self.agent_id, annotated)
        return self.item.encryption_owner()

    @classmethod
    def encryption_owner_person(cls) -> Expression:
        """encryption_owner's person in SQL (governance.crypto.fields.OWNER_PERSON)."""
        return item_person_sql("item__")


class Evidence(models.Model):
    """A quote an item stands on (004 Evidence `{entryId?, toolCallId?, fileRange?, quote}`): of an
    entry; of a tool call (the entry that made or answered it, and the call's id); or of a line range
    of a memory file version."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    item = models.ForeignKey(MemoryItem, on_delete=models.CASCADE, related_name="evidence")
    # Indexed by evidence_entry_idx.
    entry = models.ForeignKey(
        Entry, null=True, blank=True, on_delete=models.SET_NULL, related_name="evidence", db_index=False
    )
    # A quote of a tool call: its id, the call made or answered by `entry` ("" for none).
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    # A quote of lines `line_start`..`line_end` (1-based, inclusive) of a memory file version.
    file_version = models.ForeignKey(
        "memoryapp.MemoryFileVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="evidence"
    )
    line_start = models.PositiveIntegerField(null=True, blank=True)
    line_end = models.PositiveIntegerField(null=True, blank=True)
    # Sealed at rest when encryption is on (governance.crypto), under the key of the person whose
    # words it quotes (see encryption_owner).
    quote = SealedTextField()
    # The registered people the quote names besides that person: their keys seal it too
    # (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()
    status = models.CharField(max_length=10, choices=EvidenceStatus.choices, default=EvidenceStatus.SUGGESTED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "evidence"
        indexes = [
            # the erasure: the quotes sealed under a person's key among others.
            GinIndex(fields=["key_people"], name="evidence_key_people_gin", condition=Q(key_people__isnull=False)),
            # cascades: what stands on an entry.
            models.Index(fields=["entry"], name="evidence_entry_idx"),
            # cascades: what stands on a memory file version (redacted or deleted).
            models.Index(
                fields=["file_version"], name="evidence_file_version_idx", condition=Q(file_version__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return self.quote[:60]

    # The foreign keys encryption_owner reads the owner through (see ItemReview).
    ENCRYPTION_OWNER_VIA: ClassVar[tuple[str, ...]] = ("entry", "item")

    def encryption_owner(self) -> tuple[int | None, str]:
        """The person whose words the quote holds: the quoted entry's (its sender's, ...), so erasing them
        shreds every copy of the quote, even one an item about someone else (or about no one)
        keeps; the item's owner (Scoped.encryption_owner) when the entry is gone or its thread
        is about no one."""
        annotated: str | None = getattr(self, OWNER_PERSON, None)
        if annotated is not None:
            return (self.agent_id, annotated)
        quoted = self.quoted_person()
        if quoted:
            return (self.agent_id, quoted)
        return self.item.encryption_owner()

    @classmethod
    def encryption_owner_person(cls) -> Expression:
        """encryption_owner's person in SQL (governance.crypto.fields.OWNER_PERSON)."""
        return Coalesce(
            NullIf(entry_person_sql("entry__"), Value("")),
            NullIf(F("file_version__user_id"), Value("")),
            item_person_sql("item__"),
        )

    def quoted_person(self) -> str:
        """The person whose words the quoted entry holds (`Entry.words_person`: its sender, the person
        its `words_of` names, else its thread's; "" for no entry): read from the entry when it
        was given with its thread (the writers load the quoted entries so, once for all quotes),
        else looked up once per row and entry (a quote moved to another entry is looked up again)."""
        if self.entry_id is None:
            # A quote of a memory file's lines holds the words of the file's person.
            if self.file_version_id is not None:
                if Evidence.file_version.is_cached(self) and self.file_version is not None:
                    return str(self.file_version.user_id)
                # The model by its field: memoryapp.models.files imports this module.
                versions = Evidence._meta.get_field("file_version").related_model._default_manager
                person = versions.filter(pk=self.file_version_id).values_list("user_id", flat=True).first()
                return str(person or "")
            return ""
        known: tuple[str, str] | None = getattr(self, "_quoted_person", None)
        if known is not None and known[0] == self.entry_id:
            return known[1]
        entry = self.entry if Evidence.entry.is_cached(self) else None
        if entry is not None and Entry.thread.is_cached(entry):
            person = entry.words_person()
        else:
            person = (
                Entry.objects.filter(pk=self.entry_id)
                .annotate(words=entry_person_sql())
                .values_list("words", flat=True)
                .first()
            ) or ""
        self._quoted_person = (self.entry_id, person)
        return person
