"""Where consolidation stands per scope, and the admin's views of what it made (proxies)."""

from __future__ import annotations

from django.db import models

from governance.crypto.fields import SealedJSONField
from memoryapp.models.files import MemoryFileVersion
from memoryapp.models.items import Entity, MemoryItem, Scoped


class ConsolidationPass(models.TextChoices):
    DEDUPE = "dedupe"
    FOLD = "fold"
    OBSERVATIONS = "observations"


class ConsolidationState(Scoped):
    """How far one kind of pass went over one exact scope, so the next pass goes on from there.

    dedupe: `through` / `through_key` = every subject whose newest item is at or before that
    point was looked at (004 `through`); `complete` False while a cap stopped a pass.
    fold: `details` holds the lessons the playbook and the waiting draft took (cursors) and the
    sha256 of the playbook the draft was made from, which promotion checks.
    observations: `details` remembers the facts that gave no observation, so they are not asked
    about again until they change.
    """

    pass_kind = models.CharField(max_length=20, choices=ConsolidationPass.choices)
    through = models.DateTimeField(null=True, blank=True)
    through_key = models.CharField(max_length=64, blank=True, default="")
    complete = models.BooleanField(default=True)
    # Sealed at rest when encryption is on: it holds the sha256 of the playbook a draft was made
    # from (which would let someone confirm a guessed playbook), besides ids and cursors.
    details = SealedJSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "user_id", "project_id", "thread_id", "pass_kind"],
                name="consolidation_state_scope_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pass_kind} of agent {self.agent_id}"


class PlaybookDraft(MemoryFileVersion):
    """A version of /memories/playbook.next.md, as reviewers see it: waiting drafts, their diff."""

    class Meta:
        proxy = True
        verbose_name = "playbook draft"
        permissions = [("promote_playbook", "Can promote or discard a playbook draft")]


class StaleItem(MemoryItem):
    """An item a dedupe pass marked stale, with the reason; a reviewer may undo the mark."""

    class Meta:
        proxy = True
        verbose_name = "item marked stale"
        verbose_name_plural = "items marked stale"
        permissions = [("undo_stale", "Can undo the stale mark a dedupe pass set")]


class EntityOverview(Entity):
    """An entity with its other names, its items and its observation, on one page."""

    class Meta:
        proxy = True
        verbose_name = "entity page"
