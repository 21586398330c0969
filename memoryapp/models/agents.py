from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.dispatch import Signal

from memoryapp.models.choices import OnBusy, Trust

# Sent (sender: the model) after a queryset `update`, `delete` or `bulk_update` of agents or keys,
# the writes that send no post_save: memoryapp.agents.keycache bumps the keys' version on it (and
# on post_save / post_delete), so a cached key lookup never outlives a revocation or a change.
agents_changed = Signal()

# What a key's use writes (memoryapp.agents.selectors.agent_for_key): not a change of the key.
_USE_ONLY_FIELDS = frozenset({"last_used_at"})


class AgentQuerySet(models.QuerySet[Any]):
    """Agents' and keys' querysets: their bulk writes say that agents changed (`agents_changed`)."""

    def update(self, **kwargs: Any) -> int:
        count = super().update(**kwargs)
        if not set(kwargs) <= _USE_ONLY_FIELDS:
            agents_changed.send(sender=self.model)
        return count

    def delete(self) -> tuple[int, dict[str, int]]:
        result = super().delete()
        agents_changed.send(sender=self.model)
        return result

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> int:
        count = super().bulk_update(objs, fields, batch_size=batch_size)
        if not set(fields) <= _USE_ONLY_FIELDS:
            agents_changed.send(sender=self.model)
        return count


class Agent(models.Model):
    """An API client. Every agent request is scoped to its agent."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    # Shadow mode: extraction writes every new item as `suggested` until a person reviews it.
    shadow_mode = models.BooleanField(default=True)
    # Playbook shadow mode: a fold of lessons writes /memories/playbook.next.md, which a reviewer
    # promotes, instead of the playbook every run reads.
    playbook_shadow_mode = models.BooleanField(default=True)
    # 002 `onBusy` / `busyTimeoutSecs` for the agent's threads (a thread may override them):
    # what a second run on a running thread does, how long it waits, and how long a run
    # nothing is heard of holds its thread.
    on_busy = models.CharField(max_length=10, choices=OnBusy.choices, default=OnBusy.WAIT)
    busy_timeout_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(3600)]
    )
    # Abuse limits of each of the agent's keys (memoryapp.api.limits); null: the settings' defaults
    # (API_RATE_PER_MINUTE, API_RATE_BURST, API_HEAVY_CONCURRENCY).
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_burst = models.PositiveIntegerField(null=True, blank=True)
    heavy_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # Screening at write (memoryapp.screening): the action per category the agent chose, only the
    # categories set ({"email": "redact"}); the others take the defaults. On the agent's row, which
    # every write has read already, so screening costs no query of its own.
    screening = models.JSONField(default=dict, blank=True)
    # Purpose limitation (GDPR art. 5(1)(b), memoryapp.items.purposes): the purposes the agent's items
    # and facts may be collected for (short slugs such as "support"); empty, none are used.
    purposes = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    # The registry of the agent's people (memoryapp.screening.identifiers) as of which change: bumped
    # by every write of identifiers. On the row every write has read already, it tells the write-time
    # mention detector (memoryapp.subjects.detect) whether its compiled matcher is current at no
    # query's cost; 0: nobody was ever registered.
    people_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        # memoryapp.agents.services.TRUST_PERMISSION: held by no role group (a security decision).
        permissions = [
            ("set_agent_trust", "Can set how far an agent's writes are trusted (key max trust, shadow mode)")
        ]

    def __str__(self) -> str:
        return self.slug


class AgentKey(models.Model):
    """An API key of an agent, kept as a SHA-256 hash; only the prefix stays readable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    # The most trusted source the key may write items as (`model` by default: they arrive suggested).
    max_trust = models.CharField(max_length=10, choices=Trust.choices, default=Trust.MODEL)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}…"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ScreeningSettings(Agent):
    """An agent's screening policy, as operators set it (memoryapp.screening): its own admin page."""

    class Meta:
        proxy = True
        verbose_name = "screening policy"
        verbose_name_plural = "screening policies"
